"""A counter stepping through a packed triangle (``idx += 1`` in the inner loop of
``for i: for j in range(i + 1, d)``), recomputed in the reverse sweep from the inner loop's
counter instead of cached per row (pyzyme.diff.reverse.inductions.CountedSum): which header phis
count an inner loop, by the tape each derivative prints; derivatives against finite
differences and forward mode, where the counter is recomputed and where it is not."""

import math

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse
from pyzyme.analysis.activity import Activity
from pyzyme.api.plans import current_rules
from pyzyme.frontends.numba.derive.reverse import DUPLICATED, CONST, reverse_module
from tests.kernels import in_sweep_order


@numba.njit
def packed(a, x, start):
    """sum over i < j of a[idx] x_i x_j, the triangle packed row by row from ``start``."""
    d = x.shape[0]
    s = 0.0
    idx = start
    for i in range(d):
        for j in range(i + 1, d):
            s += a[idx] * math.sin(x[i] * x[j])
            idx += 1
    return s


@numba.njit
def packed_per_point(a, x, pts):
    """The triangle inside a loop over points (as ADBench's GMM): the counter restarts per
    point, so where it starts is kept per point."""
    d = x.shape[0]
    s = 0.0
    for p in range(pts):
        idx = d
        for i in range(d):
            for j in range(i + 1, d):
                s += a[idx] * math.sin((p + 1.0) * x[i] * x[j])
                idx += 1
    return s


@numba.njit
def advanced_sometimes(a, x, start):
    """The counter moves on after even rows only: the odd rows' value after the inner loop is
    the one before it, so the inner loop's count does not give it."""
    d = x.shape[0]
    s = 0.0
    idx = start
    for i in range(d):
        k = idx
        for j in range(i + 1, d):
            s += a[k] * math.sin(x[i] * x[j])
            k += 1
        if i % 2 == 0:
            idx = k
    return s


@numba.njit
def read_before_the_row(a, x, start):
    """The counter also read outside the inner loop, before it runs."""
    d = x.shape[0]
    s = 0.0
    idx = start
    for i in range(d):
        s += a[idx] * x[i]
        for j in range(i + 1, d):
            s += a[idx] * math.sin(x[i] * x[j])
            idx += 1
    return s


def _tape(f, args):
    types = [numba.typeof(v) for v in args]
    kinds = [DUPLICATED, DUPLICATED] + [CONST] * (len(args) - 2)
    return reverse_module(f, types, kinds, Activity.ACTIVE, True, current_rules()).tape


def _check(f, x, *rest):
    a = np.random.default_rng(1).standard_normal(40) * 0.5
    da, dx = np.zeros_like(a), np.zeros_like(x)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(a, da), Duplicated(x, dx),
                    *[Const(r) for r in rest])
    for arr, grad in ((a, da), (x, dx)):
        for k in range(arr.size):
            tangent = np.zeros_like(arr)
            tangent[k] = 1.0
            other = (np.zeros_like(x), np.zeros_like(a))[arr is x]
            args = [Duplicated(a, tangent), Duplicated(x, other)] if arr is a else \
                [Duplicated(a, np.zeros_like(a)), Duplicated(x, tangent)]
            _, forward = pyzyme.autodiff(pyzyme.Forward, f, *args, *[Const(r) for r in rest])
            assert grad[k] == pytest.approx(forward, rel=1e-12, abs=1e-14)
            e = 1e-6
            arr[k] += e
            up = f(a, x, *rest)
            arr[k] -= 2 * e
            down = f(a, x, *rest)
            arr[k] += e
            assert grad[k] == pytest.approx((up - down) / (2 * e), rel=1e-6, abs=1e-8)


X = np.array([0.3, -0.7, 0.5, 1.1, 0.2, -0.4])


@pytest.mark.parametrize("start", [0, 3])
def test_packed_triangle(start):
    _check(packed, X.copy(), start)


def test_packed_triangle_per_point():
    _check(packed_per_point, X.copy(), 3)


def test_counter_that_does_not_count_the_inner_loop():
    _check(advanced_sometimes, X.copy(), 2)


def test_counter_read_outside_the_inner_loop():
    _check(read_before_the_row, X.copy(), 1)


def _int_caches(text):
    """The loops whose caches hold an i64 (a cached counter), from a printed tape."""
    return [line.split(":")[0].strip() for line in text.splitlines()
            if "caches" in line and "i64" in line.split("caches", 1)[1]]


def test_tapes_print_no_cached_counter():
    a, x = np.zeros(40), X.copy()
    # Recomputed: nothing of type i64 is cached; the per-point triangle keeps where the
    # counter started for each point (in the loop over points, not per row).
    assert _int_caches(_tape(packed, (a, x, 0))) == []
    per_point = _tape(packed_per_point, (a, x, 3))
    assert [ln for ln in per_point.splitlines() if ".count.at." in ln]
    assert all(".count.at." in ln for ln in per_point.splitlines()
               if "caches" in ln and "i64" in ln.split("caches", 1)[1])
    # Not a count of the inner loop's iterations: cached per row, as before.
    assert _int_caches(_tape(advanced_sometimes, (a, x, 2)))


def test_split_mode_keeps_the_base_on_its_tape():
    a = np.random.default_rng(2).standard_normal(40)
    x = X.copy()
    da, dx = np.zeros_like(a), np.zeros_like(x)
    with in_sweep_order():  # the same sums in both modes, so bitwise the same
        pyzyme.autodiff(Reverse, packed_per_point, Active, Duplicated(a, da),
                        Duplicated(x, dx), Const(3))
        fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, packed_per_point,
                                         Active, Duplicated(a, a * 0), Duplicated(x, x * 0),
                                         Const(3))
    sa, sx = np.zeros_like(a), np.zeros_like(x)
    tape, value, _ = fwd(Duplicated(a, sa), Duplicated(x, sx), Const(3))
    assert value == packed_per_point(a, x, 3)
    rev(Duplicated(a, sa), Duplicated(x, sx), Const(3), 1.0, tape)
    np.testing.assert_array_equal(sa, da)
    np.testing.assert_array_equal(sx, dx)


# Inner loops of several shapes under one counter: each gradient against forward mode, and
# whether the counter is recomputed (a step of one per inner iteration, whatever the inner
# loop's own step) or cached (a step of two).
SHAPES = [("range(i + 1, d)", 1, True), ("range(i)", 1, True), ("range(d - i)", 1, True),
          ("range(i, d)", 1, True), ("range(2, i + 3)", 1, True),
          ("range(0, d - i, 2)", 1, True), ("range(i + 1, d)", 2, False)]


@pytest.mark.parametrize("shape, step, recomputed", SHAPES)
def test_inner_loop_shapes(shape, step, recomputed):
    from tests.kernels import njit_source
    f = njit_source(f"""
import math
def f(a, x, start):
    d = x.shape[0]
    s = 0.0
    idx = start
    for i in range(d):
        for j in {shape}:
            s += a[idx % 40] * math.sin(x[i] * x[j % d])
            idx += {step}
    return s
""")
    _check(f, X.copy(), 1)
    cached = _int_caches(_tape(f, (np.zeros(40), X.copy(), 1)))
    assert (cached == []) is recomputed, cached
