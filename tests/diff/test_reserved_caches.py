"""Loop caches sized before a counted loop nest starts need no capacity test per iteration:
the test (a branch to a growing block) kept LLVM from vectorizing loops that cache (GradBench's
ode). Loops whose run count is not bounded beforehand keep it."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse
from pyzyme.analysis.activity import Activity as A
from pyzyme.diff.reverse.generator import ReverseGenerator, ReverseSignature
from pyzyme.ir import parse_module
from pyzyme.rules import default_rules

_GROWS = "@pyzyme.tape_capacity"


@numba.njit
def powers(x, s):
    """``sum(x ** s)`` by ``s`` sweeps of ``y *= x``: each sweep overwrites what the adjoint
    of ``x`` needs, so the inner loop caches ``y[i]``, ``n * s`` values in all."""
    y = np.ones(x.shape[0])
    for _ in range(s):
        for i in range(x.shape[0]):
            y[i] = y[i] * x[i]
    return y.sum()


@numba.njit
def triangle(x):
    """An inner loop whose run count is the outer index (not known before the nest)."""
    y = np.ones(x.shape[0])
    for i in range(x.shape[0]):
        for j in range(i):
            y[j] = y[j] * x[i]
    return y.sum()


def _grad(f, x, *rest):
    dx = np.zeros_like(x)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(x, dx), *map(Const, rest))
    return dx


def test_counted_nest_caches_without_capacity_tests():
    x = np.linspace(0.5, 1.5, 7)
    text = pyzyme.code_llvm(Reverse, powers, Active, Duplicated(x, np.zeros(7)), Const(3))
    assert "cache" in text and _GROWS not in text


@pytest.mark.parametrize("n,s", [(7, 3), (1, 4), (0, 3), (5, 0), (33, 1), (300, 9)])
def test_counted_nest_gradient(n, s):
    x = np.linspace(0.5, 1.5, n)
    expected = s * x ** (s - 1) if s else np.zeros(n)
    np.testing.assert_allclose(_grad(powers, x, s), expected, rtol=1e-13)


def test_inner_loop_bounded_by_the_outer_index_keeps_growing():
    n = 40
    x = np.linspace(0.5, 1.5, n)
    text = pyzyme.code_llvm(Reverse, triangle, Active, Duplicated(x, np.zeros(n)))
    assert _GROWS in text
    # y[j] = prod(x[j+1:]); d/dx[i] sum_j y[j] = sum_{j<i} y[j] / x[i]
    y = np.array([np.prod(x[j + 1:]) for j in range(n)])
    expected = np.array([y[:i].sum() / x[i] for i in range(n)])
    np.testing.assert_allclose(_grad(triangle, x), expected, rtol=1e-12)


_NARROW = """
define double @narrow(double %x, i32 %from, i32 %to) {
entry:
  br label %head
head:
  %i = phi i32 [%from, %entry], [%i1, %head]
  %y = phi double [%x, %entry], [%y1, %head]
  %t = call double @llvm.sin.f64(double %y)
  %y1 = fmul double %t, %y
  %i1 = add i32 %i, 1
  %c = icmp ne i32 %i1, %to
  br i1 %c, label %head, label %exit
exit:
  ret double %y1
}
declare double @llvm.sin.f64(double)
"""


def test_narrow_counter_keeps_growing():
    # An i32 counter tested by ``ne`` may wrap around: from 5 to 3 it runs 2**32 - 2 times,
    # which the 64-bit count of its runs (3 - 5 + 1, at least 1) does not bound.
    m = parse_module(_NARROW)
    gen = ReverseGenerator(m, default_rules())
    gen.derivative(m.get_function("narrow"), ReverseSignature((A.ACTIVE, A.CONST, A.CONST),
                                                              True))
    assert _GROWS in str(m)
