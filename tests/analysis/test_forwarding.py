"""Loads reading back what a loop before them stored (pyzyme.analysis.forwarding), checked by
the printed result: found in a refilled scratch row, refused where another write, another
range, a conditional store, a use not after the fill, or a stored running sum could make the
loaded value differ from the one the store computed."""

from __future__ import annotations

import textwrap

import pytest

from pyzyme import ir
from pyzyme.analysis.forwarding import store_forwarding


def _forwarding(text: str) -> str:
    fn = ir.parse_module(textwrap.dedent(text)).functions[0]
    return str(store_forwarding(fn)).split("\n", 1)[1].strip()


def _kernel(fill: str = "", use_bound: str = "%n", stored: str = "%w",
            between: str = "", use_start: str = "0", guarded: bool = False) -> str:
    """For each k: t[j] = x[k*n + j]^2 for j < n, then a sum of t[i] for ``use_start`` <= i <
    ``use_bound`` (tested after each iteration; ``guarded``: entered only when ``use_start <
    use_bound``)."""
    enter = (f"%enter = icmp slt i64 {use_start}, {use_bound}\n"
             f"      br i1 %enter, label %use, label %after") if guarded else "br label %use"
    came = ", [ %acc, %mid ]" if guarded else ""
    return f"""
    define double @f(ptr noalias %x, ptr noalias %t, i64 %n, i64 %m) {{
    entry:
      br label %outer
    outer:
      %k = phi i64 [ 0, %entry ], [ %k1, %after ]
      %acc = phi double [ 0.0, %entry ], [ %total, %after ]
      %row = mul i64 %k, %n
      %xr = getelementptr double, ptr %x, i64 %row
      br label %fill
    fill:
      %j = phi i64 [ 0, %outer ], [ %j1, %fill.next ]
      %run = phi double [ 0.0, %outer ], [ %w, %fill.next ]
      %px = getelementptr double, ptr %xr, i64 %j
      %v = load double, ptr %px
      %w = fmul double %v, %v
      {fill}
    fill.store:
      %pt = getelementptr double, ptr %t, i64 %j
      store double {stored}, ptr %pt
      br label %fill.next
    fill.next:
      %j1 = add nuw nsw i64 %j, 1
      %jd = icmp eq i64 %j1, %n
      br i1 %jd, label %mid, label %fill
    mid:
      {between}
      {enter}
    use:
      %i = phi i64 [ {use_start}, %mid ], [ %i1, %use ]
      %s = phi double [ %acc, %mid ], [ %s1, %use ]
      %qt = getelementptr double, ptr %t, i64 %i
      %y = load double, ptr %qt
      %s1 = fadd double %s, %y
      %i1 = add nuw nsw i64 %i, 1
      %id = icmp eq i64 %i1, {use_bound}
      br i1 %id, label %after, label %use
    after:
      %total = phi double [ %s1, %use ]{came}
      %k1 = add nuw nsw i64 %k, 1
      %kd = icmp eq i64 %k1, %m
      br i1 %kd, label %exit, label %outer
    exit:
      ret double %total
    }}"""


UNCONDITIONAL = "br label %fill.store"


@pytest.mark.parametrize("use_start, guarded", [("0", False), ("0", True), ("2", True)])
def test_refilled_row_is_forwarded(use_start, guarded):
    # a read from index 2 on, entered only below the bound, reads what the fill wrote
    assert _forwarding(_kernel(UNCONDITIONAL, use_start=use_start, guarded=guarded)) == \
        "%y = load %qt: the value stored at %pt in loop %fill, %j = %i"


@pytest.mark.parametrize("why, text", [
    ("another write to the row between", _kernel(
        UNCONDITIONAL, between="store double 1.0, ptr %t")),
    ("a different range", _kernel(UNCONDITIONAL, use_bound="%m")),
    ("a conditional store", _kernel(
        "%pos = fcmp ogt double %v, 0.0\n  br i1 %pos, label %fill.store, label %fill.next")),
    ("a running sum stored", _kernel(UNCONDITIONAL, stored="%run")),
    ("a start below the fill's", _kernel(UNCONDITIONAL, use_start="-1", guarded=True)),
    ("a start of unknown sign", _kernel(UNCONDITIONAL, use_start="%m", guarded=True)),
    # tested only after its first iteration: with n <= 2 it would read t[2], never filled
    ("a later start, unguarded", _kernel(UNCONDITIONAL, use_start="2")),
])
def test_refused(why, text):
    assert _forwarding(text) == "none", why


def test_use_before_the_fill_is_refused():
    # The loop reading t runs first; the loop filling it after: the load reads the previous
    # iteration's row (or whatever was there before), not this one's.
    text = """
    define double @f(ptr noalias %t, i64 %n) {
    entry:
      br label %use
    use:
      %i = phi i64 [ 0, %entry ], [ %i1, %use ]
      %s = phi double [ 0.0, %entry ], [ %s1, %use ]
      %qt = getelementptr double, ptr %t, i64 %i
      %y = load double, ptr %qt
      %s1 = fadd double %s, %y
      %i1 = add nuw nsw i64 %i, 1
      %id = icmp eq i64 %i1, %n
      br i1 %id, label %fill, label %use
    fill:
      %j = phi i64 [ 0, %use ], [ %j1, %fill ]
      %pt = getelementptr double, ptr %t, i64 %j
      store double 2.0, ptr %pt
      %j1 = add nuw nsw i64 %j, 1
      %jd = icmp eq i64 %j1, %n
      br i1 %jd, label %exit, label %fill
    exit:
      ret double %s1
    }"""
    assert _forwarding(text) == "none"


@pytest.mark.parametrize("op", ["frem double %w, 3.0", "fdiv double %w, 3.0",
                                "insertelement <1 x double> undef, double %w, i32 0"])
def test_stored_value_built_from_any_pure_operation_is_forwarded(op):
    # The value is rebuilt where the load is, from the operands the store's own iteration had
    # (ir.opcodes.PURE, the set the reverse sweep recomputes from): a remainder, a division,
    # a vector insertion are as rebuildable as a product.
    extract = "\n      %r = extractelement <1 x double> %e, i32 0" if "insertelement" in op else ""
    name = "%e" if extract else "%r"
    fill = f"{name} = {op}{extract}\n      br label %fill.store"
    assert _forwarding(_kernel(fill, stored="%r")) == \
        "%y = load %qt: the value stored at %pt in loop %fill, %j = %i"
