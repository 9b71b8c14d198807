"""Numba's binary-exponentiation loop (``x ** i``) folded into ``@pyzyme.int_power`` before
differentiation (pyzyme.transforms.int_power): which loops are folded, by their printed form; the
folded function run against the original, bitwise; derivatives through the rule against finite
differences, forward mode and the closed form, with no tape."""

import ctypes
import hashlib
import math

import numba
import numpy as np
import pytest

import llvmlite.binding as llvm

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse, autodiff
from pyzyme.analysis.activity import Activity
from pyzyme.frontends.numba.derive.reverse import reverse_module
from pyzyme.transforms.int_power import find, fold, pair
from pyzyme.ir import parse_module
from pyzyme.rules import default_rules, mathlib
from pyzyme.runtime.jit import compile_module
from pyzyme.testing import test_forward as check_forward
from pyzyme.testing import test_reverse as check_reverse
from tests.kernels import taylor


def _loop(odd="%bit = and i64 %e, 1\n  %even = icmp eq i64 %bit, 0",
          pick="%r1 = select i1 %even, double %r, double %ra",
          last="%done = icmp eq i64 %e1, 0\n  br i1 %done, label %exit, label %loop",
          start="1.0", times="%ra = fmul double %r, %a", extra="", ty="double", ity="i64",
          result="%r1"):
    return f"""
define {ty} @f({ty} %x, {ity} %i) {{
entry:
  br label %loop
loop:
  %r = phi {ty} [ {start}, %entry ], [ %r1, %loop ]
  %a = phi {ty} [ %x, %entry ], [ %a1, %loop ]
  %e = phi {ity} [ %i, %entry ], [ %e1, %loop ]
  {odd}
  {times}
  {pick}
  %e1 = lshr {ity} %e, 1
  %a1 = fmul {ty} %a, %a
  {extra}
  {last}
exit:
  ret {ty} {result}
}}"""


FORMS = {
    "numba": _loop(),
    "odd-test-ne": _loop(odd="%bit = and i64 %e, 1\n  %even = icmp ne i64 %bit, 0",
                         pick="%r1 = select i1 %even, double %ra, double %r"),
    "odd-test-trunc": _loop(odd="%even = trunc i64 %e to i1",
                            pick="%r1 = select i1 %even, double %ra, double %r"),
    "commuted-product": _loop(times="%ra = fmul double %a, %r"),
    "exit-test-ult": _loop(last="%done = icmp ult i64 %e, 2\n  br i1 %done, label %exit, "
                                "label %loop"),
    "exit-test-ugt": _loop(last="%more = icmp ugt i64 %e, 1\n  br i1 %more, label %loop, "
                                "label %exit"),
    "float": _loop(ty="float", pick="%r1 = select i1 %even, float %r, float %ra",
                   times="%ra = fmul float %r, %a"),
    "i32-exponent": _loop(ity="i32", odd="%bit = and i32 %e, 1\n  %even = icmp eq i32 %bit, 0",
                          last="%done = icmp eq i32 %e1, 0\n  br i1 %done, label %exit, "
                               "label %loop"),
}

REFUSED = {
    "starts-at-2": _loop(start="2.0"),
    "squares-r": _loop(times="%ra = fmul double %r, %r"),
    "more-work": _loop(extra="%junk = fadd double %a, 1.0"),
    "a-used-after": _loop(result="%a1"),
    "stops-late": _loop(last="%done = icmp eq i64 %e1, 1\n  br i1 %done, label %exit, "
                             "label %loop"),
    "exit-test-backwards": _loop(last="%done = icmp eq i64 %e1, 0\n  br i1 %done, label %loop, "
                                      "label %exit"),
    "odd-picks-r": _loop(pick="%r1 = select i1 %even, double %ra, double %r"),
}


@pytest.mark.parametrize("form", FORMS)
def test_forms_numba_and_llvm_write_are_found(form):
    fn = parse_module(FORMS[form]).get_function("f")
    assert [str(p) for p in find(fn)] == ["%loop: %x ** %i, result %r1"]


@pytest.mark.parametrize("form", REFUSED)
def test_other_loops_are_left_alone(form):
    m = parse_module(REFUSED[form])
    assert find(m.get_function("f")) == []
    assert fold(m, m.get_function("f")) == 0


def _run(text: str, ty):
    symbol = "int_power_test_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    compiled = compile_module(text.replace("@f(", f"@{symbol}("), name="int_power_test")
    ity = ctypes.c_int32 if "i32 %i" in text else ctypes.c_int64
    return ctypes.CFUNCTYPE(ty, ty, ity)(compiled.address(symbol))


@pytest.mark.parametrize("form", FORMS)
def test_folded_loop_computes_bitwise_the_same(form):
    m = parse_module(FORMS[form])
    assert fold(m, m.get_function("f")) == 1
    text = str(m)
    llvm.parse_assembly(text).verify()
    assert "phi" not in text.split("define internal")[0]   # the loop is gone from @f
    ty = ctypes.c_float if "float" in form else ctypes.c_double
    before, after = _run(FORMS[form], ty), _run(text, ty)
    rng = np.random.default_rng(1)
    xs = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, math.inf, math.nan, 1e-300, *rng.normal(0, 2, 20)]
    ns = [1, 2, 3, 7, 64, 65535, 65536, *rng.integers(1, 70000, 10)]
    for x in xs:
        for n in ns:
            want, got = before(x, int(n)), after(x, int(n))
            assert np.array_equal(np.float64(want), np.float64(got), equal_nan=True), (x, n)
            if ty is ctypes.c_double:
                assert np.array_equal(got, mathlib.int_power(x, int(n)), equal_nan=True)
    assert after(3.0, 0) == 1.0     # the call's own guard (Numba's loop never sees 0)


@numba.njit
def power(x, n):
    return x ** n


@numba.njit(fastmath=True)
def poly(c, x):
    s = 0.0
    for i in range(c.shape[0]):
        s += c[i] * x ** i
    return s


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 77, -1, -4, 70000])
def test_power_derivative_is_n_x_to_n_minus_1(n):
    x = 1.0001 if abs(n) > 100 else 1.7
    d = autodiff(Reverse, power, Active, Active(x), Const(n))[0][0]
    want = n * x ** (n - 1) if n else 0.0
    assert d == pytest.approx(want, rel=1e-13)
    assert autodiff(Forward, power, Duplicated(x, 1.0), Const(n))[-1] == \
        pytest.approx(want, rel=1e-13)
    if abs(n) <= 100:   # x ** 70000 near 1.0001 varies too fast for a finite difference
        check_reverse(power, Active, (x, Active), (n, Const))
        check_forward(power, Duplicated, (x, Duplicated), (n, Const))


def test_power_of_zero_and_float32():
    assert autodiff(Reverse, power, Active, Active(0.0), Const(1))[0][0] == 1.0
    assert autodiff(Reverse, power, Active, Active(0.0), Const(3))[0][0] == 0.0
    assert autodiff(Reverse, power, Active, Active(0.0), Const(0))[0][0] == 0.0
    x32 = np.float32(1.3)
    d = autodiff(Reverse, power, Active, Active(x32), Const(5))[0][0]
    assert d == pytest.approx(5 * 1.3 ** 4, rel=1e-6)


def test_taylor_gradient_has_no_tape_and_matches_the_closed_form():
    for n in (2, 50, 70000):
        x = 1.0 - 1e-6
        g = autodiff(Reverse, taylor, Active, Active(x), Const(n))[0][0]
        want = math.fsum(x ** (i - 1) for i in range(1, n))
        assert g == pytest.approx(want, rel=1e-12)
    rm = reverse_module(taylor, (numba.float64, numba.int64), ["active", "const"],
                        Activity.ACTIVE, False, default_rules())
    text = str(rm.module)
    assert "@pyzyme.int_power(" in text
    loops = [line for line in rm.tape.splitlines() if line.strip().startswith("loop ")]
    assert len(loops) == 1 and loops[0].endswith("caches none"), rm.tape


def test_fastmath_polynomial():
    c = np.array([0.5, -1.0, 2.0, 0.25, 3.0])
    dc = np.zeros_like(c)
    (_, dx), = autodiff(Reverse, poly, Active, Duplicated(c, dc), Active(0.7))
    np.testing.assert_allclose(dc, 0.7 ** np.arange(5), rtol=1e-14)
    assert dx == pytest.approx(sum(i * c[i] * 0.7 ** (i - 1) for i in range(1, 5)), rel=1e-13)
    check_reverse(poly, Active, (c, Duplicated), (0.7, Active))


@numba.njit
def powers(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** (i + 2) / (i + 1)
    return s


def test_second_order_and_split_mode_through_the_rule():
    x = np.array([0.9, 1.1, -0.7, 1.3])
    v = np.array([1.0, -0.5, 0.25, 2.0])
    exact = np.array([(i + 2) * x[i] ** i * v[i] for i in range(4)])
    np.testing.assert_allclose(pyzyme.hvp(powers, x, v), exact, rtol=1e-14)
    fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, powers, Active,
                                     Duplicated(x, np.zeros(4)))
    dx = np.zeros(4)
    tape, primal, _ = fwd(Duplicated(x, dx))
    rev(Duplicated(x, dx), 1.0, tape)
    assert primal == powers(x)
    np.testing.assert_allclose(dx, [(i + 2) / (i + 1) * x[i] ** (i + 1) for i in range(4)],
                               rtol=1e-14)


def test_the_definition_itself_is_not_folded():
    m = parse_module(FORMS["numba"])
    fold(m, m.get_function("f"))
    body = m.get_function("pyzyme.int_power")
    assert [str(p) for p in find(body)] == ["%loop: %x ** %n, result %r.next"]
    assert fold(m, body) == 0


BACK_TO_BACK = """
define double @f(double %x, i64 %i) {
entry:
  br label %one
one:
  %r = phi double [ 1.0, %entry ], [ %r1, %one ]
  %a = phi double [ %x, %entry ], [ %a1, %one ]
  %e = phi i64 [ %i, %entry ], [ %e1, %one ]
  %odd = trunc i64 %e to i1
  %ra = fmul double %r, %a
  %r1 = select i1 %odd, double %ra, double %r
  %e1 = lshr i64 %e, 1
  %a1 = fmul double %a, %a
  %done = icmp eq i64 %e1, 0
  br i1 %done, label %two, label %one
two:
  %s = phi double [ 1.0, %one ], [ %s1, %two ]
  %b = phi double [ %r1, %one ], [ %b1, %two ]
  %f = phi i64 [ 3, %one ], [ %f1, %two ]
  %odd2 = trunc i64 %f to i1
  %sb = fmul double %s, %b
  %s1 = select i1 %odd2, double %sb, double %s
  %f1 = lshr i64 %f, 1
  %b1 = fmul double %b, %b
  %done2 = icmp eq i64 %f1, 0
  br i1 %done2, label %exit, label %two
exit:
  ret double %s1
}"""


def test_a_loop_that_enters_the_next_one():
    m = parse_module(BACK_TO_BACK)
    fn = m.get_function("f")
    assert len(find(fn)) == 2
    assert fold(m, fn) == 2
    text = str(m)
    llvm.parse_assembly(text).verify()
    before, after = _run(BACK_TO_BACK, ctypes.c_double), _run(text, ctypes.c_double)
    for x in (0.5, 1.5, -2.0):
        for n in (1, 2, 7, 40):
            assert before(x, n) == after(x, n) == mathlib.int_power(mathlib.int_power(x, n), 3)


PAIR = """
declare {ty} @pyzyme.int_power{f}({ty}, i64)

define {{ {ty}, {ty} }} @f({ty} %x, i64 %n) {{
entry:
  %m = add i64 %n, -1
  %r = call {ty} @pyzyme.int_power{f}({ty} %x, i64 %n)
  %q = call {ty} @pyzyme.int_power{f}({ty} %x, i64 %m)
  %a = insertvalue {{ {ty}, {ty} }} undef, {ty} %r, 0
  %b = insertvalue {{ {ty}, {ty} }} %a, {ty} %q, 1
  ret {{ {ty}, {ty} }} %b
}}"""


@pytest.mark.parametrize("ty", ["double", "float"])
def test_paired_powers_are_bitwise_those_of_two_loops(ty):
    """``x ** n`` and ``x ** (n - 1)`` from one loop of squarings: the same products as two
    loops (each power meets the same squares in the same order; no fast-math flags), so
    bitwise equal, including n = 0 (x ** -1 walks all 64 bits in both) and n = 1."""
    f = "f" if ty == "float" else ""
    texts = []
    for paired in (False, True):
        m = parse_module(PAIR.format(ty=ty, f=f))
        mathlib.define(m, f"pyzyme.int_power{f}")
        if paired:
            assert pair(m) == 1
            assert f"call {{ {ty}, {ty} }} @pyzyme.int_power_pair{f}(" in str(m)
        texts.append(str(m))
    fns = []
    for k, text in enumerate(texts):
        symbol = f"int_power_pair_test_{ty}_{k}"
        # a struct of two floats comes back in registers; return it through memory instead
        wrapper = text.replace("@f(", f"@{symbol}.f(") + f"""
define void @{symbol}({ty} %x, i64 %n, ptr %out) {{
  %both = call {{ {ty}, {ty} }} @{symbol}.f({ty} %x, i64 %n)
  store {{ {ty}, {ty} }} %both, ptr %out
  ret void
}}"""
        compiled = compile_module(wrapper, name=symbol)
        cty = ctypes.c_float if ty == "float" else ctypes.c_double
        fns.append((ctypes.CFUNCTYPE(None, cty, ctypes.c_int64, ctypes.POINTER(cty))(
            compiled.address(symbol)), cty))
    rng = np.random.default_rng(4)
    xs = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, math.inf, math.nan, 1e-30, *rng.normal(0, 2, 12)]
    ns = [0, 1, 2, 3, 4, 7, 8, 64, 65535, 65536, *rng.integers(1, 70000, 8)]
    for x in xs:
        for n in ns:
            out = []
            for fn, cty in fns:
                buf = (cty * 2)()
                fn(x, int(n), buf)
                out.append(np.array(buf[:], dtype=np.float64))
            assert np.array_equal(out[0], out[1], equal_nan=True), (x, n, out)
            if ty == "double" and n > 0:
                want = [mathlib.int_power(x, int(n)), mathlib.int_power(x, int(n) - 1)]
                assert np.array_equal(out[1], want, equal_nan=True), (x, n)


def test_forward_mode_walks_the_squares_once():
    """Forward mode over ``x ** i / i`` needs ``x ** i`` and ``i x ** (i - 1)``: one paired
    call a term, values against the closed form."""
    x, n = 0.97, 300
    value, tangent = autodiff(Forward, taylor, Duplicated, Duplicated(x, 1.0), Const(n))
    assert value == pytest.approx(sum(x ** i / i for i in range(1, n)), rel=1e-13)
    assert tangent == pytest.approx(math.fsum(x ** (i - 1) for i in range(1, n)), rel=1e-13)
    text = pyzyme.code_llvm(Forward, taylor, Duplicated, Duplicated(x, 1.0), Const(n))
    body = next(part for part in text.split("\ndefine ") if "@__pyzyme_fwd_" in
                part.split("\n")[0])
    calls = [line for line in body.splitlines() if " call " in line and "int_power" in line]
    assert calls and all("@pyzyme.int_power_pair(" in line for line in calls), calls
