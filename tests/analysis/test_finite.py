"""The values that can be infinite or NaN for finite inputs (pyzyme.analysis.finite), checked by
the printed result: divisions, roots and logarithms start them, total arithmetic and moves carry
them, loads see them once anything non-finite may have been stored, and round loops."""

from __future__ import annotations

import textwrap

import pytest

from pyzyme import ir
from pyzyme.analysis.finite import nonfinite_values
from pyzyme.rules import default_rules


def _nonfinite(body: str, params: str = "double %x, double %y, ptr %p",
               extra: str = "") -> set[str]:
    text = f"""
    define double @f({params}) {{
    {textwrap.dedent(body)}
    }}
    declare double @llvm.sqrt.f64(double)
    declare double @llvm.sin.f64(double)
    declare double @llvm.log.f64(double)
    declare double @opaque(ptr)
    {extra}"""
    fn = ir.parse_module(textwrap.dedent(text)).functions[0]
    printed = str(nonfinite_values(fn, default_rules()))
    names = printed.split(": ", 1)[1]
    return set() if names == "(none)" else set(names.split())


def test_total_arithmetic_of_finite_values_is_finite():
    assert _nonfinite("""
      %a = fmul double %x, %y
      %b = call double @llvm.sin.f64(double %a)
      %c = fdiv double %b, 2.0
      %d = fsub double %c, %x
      ret double %d""") == set()


@pytest.mark.parametrize("source", [
    "%s = fdiv double 1.0, %x",
    "%s = fdiv double %x, 0.0",
    "%s = frem double %x, %y",
    "%s = call double @llvm.sqrt.f64(double %x)",
    "%s = call double @llvm.log.f64(double %x)",
    "%s = call double @opaque(ptr %p)",
    "%s = fadd double %x, 0x7FF0000000000000",
    "%s = fadd double %x, undef",
])
def test_sources_and_what_they_reach(source):
    found = _nonfinite(f"""
      {source}
      %t = fmul double %s, %y
      %u = select i1 true, double %x, double %t
      %v = fptrunc double %u to float
      %w = fpext float %v to double
      ret double %w""")
    assert found == {"%s", "%t", "%u", "%v", "%w"}


def test_loads_see_a_stored_nonfinite_value():
    stored = _nonfinite("""
      %l = load double, ptr %p
      %q = fdiv double 1.0, %x
      store double %q, ptr %p
      ret double %l""")
    assert stored == {"%q", "%l"}
    finite = _nonfinite("""
      %l = load double, ptr %p
      %q = fmul double %l, %x
      store double %q, ptr %p
      ret double %l""")
    assert finite == set()


def test_a_callee_given_a_pointer_may_store_anything():
    assert _nonfinite("""
      %c = call double @opaque(ptr %p)
      %l = load double, ptr %p
      %m = fmul double %l, 2.0
      ret double %m""") == {"%c", "%l", "%m"}


def test_round_a_loop():
    found = _nonfinite("""
    entry:
      br label %loop
    loop:
      %acc = phi double [ 0.0, %entry ], [ %next, %loop ]
      %k = phi i64 [ 0, %entry ], [ %k1, %loop ]
      %inv = fdiv double 1.0, %acc
      %next = fadd double %x, %inv
      %k1 = add i64 %k, 1
      %done = icmp eq i64 %k1, %n
      br i1 %done, label %exit, label %loop
    exit:
      ret double %next""", params="double %x, i64 %n")
    assert found == {"%acc", "%inv", "%next"}


def _sources(body: str, params: str = "double %x, double %y, ptr %p") -> set[str]:
    text = f"""
    define double @f({params}) {{
    {textwrap.dedent(body)}
    }}
    declare double @llvm.sqrt.f64(double)
    declare double @opaque(ptr)"""
    fn = ir.parse_module(textwrap.dedent(text)).functions[0]
    return {v.ref for v in nonfinite_values(fn, default_rules()).sources}


def test_sources_are_where_nonfinite_values_start():
    """What is non-finite only through a non-finite operand is no source; a load is one only
    where something other than the function's own stores (a callee) may have put it there."""
    assert _sources("""
      %q = fdiv double %x, %y
      %r = call double @llvm.sqrt.f64(double %q)
      %t = fmul double %r, %q
      %u = fadd double %x, undef
      store double %t, ptr %p
      %l = load double, ptr %p
      %m = fadd double %l, %u
      ret double %m""") == {"%q", "%r", "%u"}
    assert _sources("""
      %c = call double @opaque(ptr %p)
      %l = load double, ptr %p
      %m = fmul double %l, 2.0
      ret double %m""") == {"%c", "%l"}


def test_a_stored_nonfinite_value_taints_only_memory_that_may_alias():
    """A temporary (a stack slot, or an array the function allocates) holding 1/x leaves the
    loads of parameter memory finite; two plain parameters may overlap."""
    found = _nonfinite("""
      %slot = alloca double
      %q = fdiv double 1.0, %x
      store double %q, ptr %slot
      %back = load double, ptr %slot
      %in = load double, ptr %p
      store double %q, ptr %r
      %other = load double, ptr %p2
      %s = fadd double %in, %back
      ret double %s""", params="double %x, ptr %p, ptr noalias %r, ptr %p2, ptr %p3")
    assert found == {"%q", "%back", "%s"}
    aliased = _nonfinite("""
      %q = fdiv double 1.0, %x
      store double %q, ptr %p2
      %in = load double, ptr %p
      ret double %in""", params="double %x, ptr %p, ptr %p2")
    assert aliased == {"%q", "%in"}


def test_copies_carry_nonfinite_values_and_fills_make_them():
    copied = _nonfinite("""
      %a = alloca [2 x double]
      %b = alloca [2 x double]
      %c = alloca [2 x double]
      %q = fdiv double 1.0, %x
      store double %q, ptr %a
      call void @llvm.memcpy.p0.p0.i64(ptr %b, ptr %a, i64 16, i1 false)
      call void @llvm.memset.p0.i64(ptr %c, i8 0, i64 16, i1 false)
      %lb = load double, ptr %b
      %lc = load double, ptr %c
      %s = fadd double %lb, %lc
      ret double %s""", extra="""declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
    declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)""")
    assert copied == {"%q", "%lb", "%s"}
    filled = _nonfinite("""
      %c = alloca double
      call void @llvm.memset.p0.i64(ptr %c, i8 -1, i64 8, i1 false)
      %lc = load double, ptr %c
      ret double %lc""", extra="declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)")
    assert filled == {"%lc"}


def test_a_norm_and_a_division_by_it_past_a_threshold_are_finite():
    """``sqrt`` of a sum of squares is finite, and past ``if norm < 1e-4`` (ht's angle-axis
    rotation) dividing by the norm is too; below a threshold of 0 nothing is proved."""
    def divided(threshold, predicate="olt"):
        return _nonfinite(f"""
        entry:
          %xx = fmul double %x, %x
          %yy = fmul double %y, %y
          %s = fadd double %xx, %yy
          %norm = call double @llvm.sqrt.f64(double %s)
          %small = fcmp {predicate} double %norm, {threshold}
          br i1 %small, label %tiny, label %divide
        tiny:
          ret double 0.0
        divide:
          %q = fdiv double %x, %norm
          ret double %q""")
    assert divided("1.0e-4") == set()
    assert divided("0.0") == {"%q"}
    assert divided("1.0e-4", "ugt") == {"%q"}     # the division runs where norm <= 1e-4
    assert _nonfinite("""
      %d = fsub double %x, %y
      %r = call double @llvm.sqrt.f64(double %d)
      ret double %r""") == {"%r"}


def test_the_root_of_a_value_tested_nonzero_is_nonzero():
    """Ceres' angle-axis rotation: ``if sqtheta != 0: w = r / sqrt(sqtheta)`` (GradBench's ba)."""
    assert _nonfinite("""
    entry:
      %xx = fmul double %x, %x
      %nz = fcmp une double %xx, 0.0
      br i1 %nz, label %divide, label %zero
    zero:
      ret double 0.0
    divide:
      %theta = call double @llvm.sqrt.f64(double %xx)
      %w = fdiv double %y, %theta
      ret double %w""") == set()


def test_an_integer_tested_nonzero_divides_without_a_pole():
    """``h = 2.0 / s`` after Numba's ``s == 0`` test (GradBench's ode): an integer's float is
    finite, and nonzero past a signed or equality test that leaves 0 out; an unsigned order
    proves nothing, nor does a float too narrow for the integer."""
    def divided(test, params="i64 %n", cast="sitofp i64 %n to double"):
        return _nonfinite(f"""
        entry:
          %c = {test}
          br i1 %c, label %other, label %divide
        other:
          ret double 0.0
        divide:
          %f = {cast}
          %h = fdiv double 2.0, %f
          ret double %h""", params)
    assert divided("icmp eq i64 %n, 0") == set()
    assert divided("icmp slt i64 %n, 1") == set()           # n >= 1 where it divides
    assert divided("icmp eq i64 %n, 0", cast="uitofp i64 %n to double") == set()
    assert divided("icmp ne i64 %n, 0") == {"%h"}            # divides where n == 0
    assert divided("icmp ule i64 %n, 5") == {"%h"}           # unsigned: says nothing
    assert divided("icmp eq i64 %n, 0", "i64 %n, i64 %m",
                   "sitofp i64 %m to double") == {"%h"}      # not the tested integer
    assert _nonfinite("""
      %f = sitofp i32 %n to half
      %g = uitofp i64 %n64 to double
      ret double %g""", "i32 %n, i64 %n64") == {"%f"}       # 65,535 is inf in a half


def test_a_callee_handed_only_link_time_objects_stores_into_link_time_objects_only():
    """Numba's raising path hands the interpreter only constant exception info and globals:
    loads of a stack slot stay finite; loads of any global (one global may hold another's
    address: @table holds @data) may read what the callee stored. A callee handed a
    parameter's memory stores anywhere."""
    extra = """
    @data = global double 0.0
    @table = constant ptr @data
    declare void @raise(ptr)"""
    found = _nonfinite("""
      %slot = alloca double
      store double 1.0, ptr %slot
      %e = load ptr, ptr @table
      call void @raise(ptr %e)
      %s = load double, ptr %slot
      %g = load double, ptr @data
      %r = fadd double %s, %x
      ret double %r""", extra=extra)
    assert found == {"%g"}
    anywhere = _nonfinite("""
      %slot = alloca double
      store double 1.0, ptr %slot
      call void @raise(ptr %p)
      %s = load double, ptr %slot
      ret double %s""", extra=extra)
    assert anywhere == {"%s"}
