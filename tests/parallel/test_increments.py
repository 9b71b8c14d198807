"""Increments of shared memory in a prange body (``hist[bins[i]] += w[i]``): the reverse sweep
reads the cell's adjoint and leaves it, instead of taking it and adding it back, which another
task could see in between (pyzyme.diff.reverse.increments)."""

import numba
import numpy as np
import pytest
from numba import prange

from pyzyme import Active, Const, Duplicated, Reverse, autodiff
from pyzyme import ir
from pyzyme.diff.reverse.increments import increments

THREADS = max(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)


@numba.njit(parallel=True)
def weighted_histogram(x, w, bins, c):
    # Iterations of different threads add into the same bins: the primal's own adds race
    # (Numba does not make them atomic), but its loss is linear in the histogram, so the
    # gradient is c[bins[i]] * (w[i], x[i]) whatever the histogram holds.
    hist = np.zeros(c.shape[0])
    for i in prange(x.shape[0]):
        hist[bins[i]] += w[i] * x[i]
    return np.sum(hist * c)


@numba.njit
def increments_and_decrements(x, a, k):
    for i in range(x.shape[0]):
        a[k[i]] += 2.0 * x[i]
        a[k[i] + 1] -= x[i] * x[i]
    return np.sum(a * a)


def test_a_histogram_in_a_prange_loses_no_adjoint():
    rng = np.random.default_rng(12)
    n, nbins = 400, 3
    x, w = rng.standard_normal(n), rng.standard_normal(n)
    bins, c = rng.integers(0, nbins, n), rng.standard_normal(nbins)
    numba.set_num_threads(THREADS)
    try:
        for _ in range(50):
            dx, dw = np.zeros(n), np.zeros(n)
            autodiff(Reverse, weighted_histogram, Active, Duplicated(x, dx), Duplicated(w, dw),
                     Const(bins), Const(c))
            np.testing.assert_allclose(dx, c[bins] * w, rtol=1e-15, atol=0)
            np.testing.assert_allclose(dw, c[bins] * x, rtol=1e-15, atol=0)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_increments_and_decrements_against_differences():
    rng = np.random.default_rng(3)
    x, k = rng.standard_normal(9), rng.integers(0, 4, 9)
    a0 = rng.standard_normal(5)
    dx, da = np.zeros(9), np.zeros(5)
    autodiff(Reverse, increments_and_decrements, Active, Duplicated(x, dx),
             Duplicated(a0.copy(), da), Const(k))
    a = a0.copy()
    increments_and_decrements.py_func(x, a, k)   # a as the loss sees it
    expect_dx = 2.0 * (2.0 * a[k]) - 2.0 * x * (2.0 * a[k + 1])
    np.testing.assert_allclose(dx, expect_dx, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(da, 2.0 * a, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("body, taken", [
    ("%x = load double, ptr %p, align 8\n  %y = fadd double %x, %w\n"
     "  store double %y, ptr %p, align 8", "fadd 1.0"),
    ("%x = load double, ptr %p, align 8\n  %y = fadd double %w, %x\n"
     "  store double %y, ptr %p, align 8", "fadd 1.0"),
    ("%x = load double, ptr %p, align 8\n  %y = fsub double %x, %w\n"
     "  store double %y, ptr %p, align 8", "fsub -1.0"),
    # w - x is not an increment of the cell
    ("%x = load double, ptr %p, align 8\n  %y = fsub double %w, %x\n"
     "  store double %y, ptr %p, align 8", None),
    # something between the load and the store may write the cell
    ("%x = load double, ptr %p, align 8\n  %y = fadd double %x, %w\n"
     "  store double 0.0, ptr %q, align 8\n  store double %y, ptr %p, align 8", None),
    # the loaded value has another use
    ("%x = load double, ptr %p, align 8\n  %y = fadd double %x, %w\n"
     "  store double %x, ptr %q, align 8\n  store double %y, ptr %p, align 8", None),
    # another pointer
    ("%x = load double, ptr %q, align 8\n  %y = fadd double %x, %w\n"
     "  store double %y, ptr %p, align 8", None),
])
def test_which_stores_are_increments(body, taken):
    fn = ir.parse_module(f"define void @f(ptr %p, ptr %q, double %w) {{\nentry:\n  {body}\n"
                         f"  ret void\n}}").get_function("f")
    found = [f"{inc.add.opcode} {inc.sign}" for inc in increments(fn).values()]
    assert found == ([taken] if taken else [])
