"""Reverse mode under a tape budget for the time loops over arrays made as users make them
(pyzyme.transforms.checkpoint_loops, pyzyme.transforms.checkpoint_merges)."""

import numpy as np
from numba import njit

import pyzyme

X = np.sin(np.linspace(0.0, 3.0, 40))


def _stencil_gradient(f, budget, n=60):
    with pyzyme.options(tape_budget=budget):
        (dx, _) = pyzyme.gradient(pyzyme.Reverse, f, X.copy(), pyzyme.Const(n))
    return dx


def _central(f, x, n, eps=1e-6):
    out = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        out[i] = (f(x + e, n) - f(x - e, n)) / (2 * eps)
    return out


@njit
def zeros_filled(x, n):
    """``u[:] = x`` copies ``x`` through a buffer made only where the two may overlap (a phi
    of ``x`` and that buffer, which the copy loop reads)."""
    u = np.zeros(x.size)
    u[:] = x
    for _ in range(n):
        for i in range(1, x.size - 1):
            u[i] = u[i] + 0.1 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) * u[i]
    return np.sum(u * u)


def test_time_loop_over_an_array_filled_by_slice_assignment():
    """Was LLVM's VerifyError: the copy loop's region, the buffer, was passed to the
    checkpoint driver where it is not defined."""
    ref = _stencil_gradient(zeros_filled, None)
    got = _stencil_gradient(zeros_filled, 4 << 10)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    fd = _central(zeros_filled.py_func, X, 60)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


@njit
def row_of_2d(x, n):
    """``u[1] = x`` broadcasts through a loop over the 2 dimensions, which LLVM leaves
    leaving at a test in its middle (a flag the back edge sets): no time loop."""
    u = np.zeros((2, x.size))
    u[0] = x
    u[1] = x
    for _ in range(n):
        for i in range(1, x.size - 1):
            u[0, i] = u[0, i] + 0.1 * (u[0, i - 1] - 2.0 * u[0, i] + u[0, i + 1]) * u[0, i]
    return np.sum(u * u)


def test_time_loop_over_a_row_of_a_2d_array():
    """Was refused: the dimension loop 'does not end at its test'."""
    ref = _stencil_gradient(row_of_2d, None)
    # One iteration of the time loop needs 4,200 bytes; a loop of the copies before it
    # (checkpointed too) holds part of the rest until its reverse sweep.
    got = _stencil_gradient(row_of_2d, 8 << 10)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    fd = _central(row_of_2d.py_func, X, 60)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


@njit
def broken_off(x, n):
    """``v`` is made on the way to the break, in a block the loop's test does not follow."""
    s = 0.0
    v = 0.0
    for t in range(n):
        if s > 1.0:
            v = s * x[0]
            if v > 1.5:
                break
        s = s + 0.1 * x[t % x.size] * x[t % x.size]
    return v + s


def test_time_loop_leaving_by_a_break_with_a_value_made_on_its_way():
    """Was LLVM's VerifyError: the step stored ``v`` for the code after the loop at its test
    too, where ``v`` is not defined."""
    x = X + 1.0
    with pyzyme.options(tape_budget=None):
        (ref, _) = pyzyme.gradient(pyzyme.Reverse, broken_off, x.copy(), pyzyme.Const(60))
    with pyzyme.options(tape_budget=1 << 10):
        (got, _) = pyzyme.gradient(pyzyme.Reverse, broken_off, x.copy(), pyzyme.Const(60))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    fd = _central(broken_off.py_func, x, 60)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)
