"""Folding Numba's negative-index wrap-around (pyzyme.transforms.wraparound): folded only
where the index is provably non-negative, and derivatives still wrap where Python would."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse
from pyzyme.transforms.wraparound import fold_wraparound
from pyzyme.ir import parse_module

LOOP = """
define double @f(ptr %a, i64 %n, i64 %s) {
entry:
  %s1 = add nuw nsw i64 %s, 1
  %go = icmp sgt i64 %n, %s1
  br i1 %go, label %loop, label %exit
loop:
  %j = phi i64 [ %s1, %entry ], [ %j1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %neg = icmp slt i64 %j, 0
  %wrap = select i1 %neg, i64 %n, i64 0
  %p0 = getelementptr double, ptr %a, i64 %j
  %p = getelementptr double, ptr %p0, i64 %wrap
  %x = load double, ptr %p
  %acc1 = fadd double %acc, %x
  %j1 = add i64 %j, 1
  %more = icmp ne i64 %j1, %n
  br i1 %more, label %loop, label %exit
exit:
  %r = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  ret double %r
}
"""


def _fold(text, known_nonnegative=True):
    fn = parse_module(text).get_function("f")
    return fold_wraparound(fn, [fn.args[2]] if known_nonnegative else [])


UNGUARDED = ("br i1 %go, label %loop, label %exit", "br label %loop")
SIGNED = ("%more = icmp ne i64 %j1, %n", "%more = icmp slt i64 %j1, %n")


@pytest.mark.parametrize("edits, known, folds", [
    ([], True, 1),
    # %s may be negative: so may %j
    ([], False, 0),
    # entered whatever %s1 and %n are: a != test could run past the bound and wrap
    ([UNGUARDED], True, 0),
    # the guard says the opposite
    ([("icmp sgt i64 %n, %s1", "icmp slt i64 %n, %s1")], True, 0),
    # a signed bound needs no guard
    ([SIGNED], True, 1),
    ([SIGNED, UNGUARDED], True, 1),
    # a longer step could jump past the largest i64 under a signed bound...
    ([SIGNED, ("%j1 = add i64 %j, 1", "%j1 = add i64 %j, 2")], True, 0),
    # ... unless nsw says it does not
    ([SIGNED, ("%j1 = add i64 %j, 1", "%j1 = add nsw i64 %j, 2")], True, 1),
    # counting down from a non-negative start can go below zero
    ([("%j1 = add i64 %j, 1", "%j1 = add i64 %j, -1")], True, 0),
    # a start not known to be non-negative: a sum without nsw can wrap
    ([("%s1 = add nuw nsw i64 %s, 1", "%s1 = add nuw i64 %s, 1")], True, 0),
], ids=["guarded", "start unknown", "unguarded", "wrong guard", "signed bound",
        "signed bound, unguarded", "step 2", "step 2 nsw", "down", "no nsw"])
def test_fold_only_what_is_proven(edits, known, folds):
    text = LOOP
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    assert _fold(text, known) == folds


@numba.njit
def tail_sum(a, i):
    s = 0.0
    for j in range(i + 1, a.shape[0]):
        s += a[j] * a[j]
    return s


@numba.njit
def triangle(a):
    s = 0.0
    n = a.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            s += a[i] * a[j]
    return s


@pytest.mark.parametrize("i", [2, -3])
def test_derivatives_wrap_where_python_does(i):
    # i = -3: range(-2, n) reads a[-2], a[-1] (the last two) first; nothing can be folded
    a = np.linspace(0.5, 2.0, 7)
    da = np.zeros_like(a)
    pyzyme.autodiff(Reverse, tail_sum, Active, Duplicated(a, da), Const(i))
    expect = np.zeros_like(a)
    for j in range(i + 1, a.shape[0]):
        expect[j] += 2.0 * a[j]
    np.testing.assert_allclose(da, expect, rtol=1e-15)
    for k in range(a.shape[0]):
        e = np.zeros_like(a)
        e[k] = 1.0
        t = pyzyme.autodiff(Forward, tail_sum, Duplicated, Duplicated(a, e), Const(i))[1]
        assert t == pytest.approx(expect[k], rel=1e-15)


def test_triangle_gradient():
    a = np.linspace(-1.0, 1.0, 9)
    da = np.zeros_like(a)
    pyzyme.autodiff(Reverse, triangle, Active, Duplicated(a, da))
    np.testing.assert_allclose(da, a.sum() - a, rtol=1e-14, atol=1e-15)
