"""A prange loop whose body calls a function that can raise, and that LLVM does not inline (a
recursive one here; poliastro's ``coe2rv_many`` calls one of matrix products): the body hands
the callee a stack slot for its exception record (Numba's ``excinfo``) and, when the callee
fails, reads the record back and merges it with Numba's constant records on its way to raising
it. The slot was given a shadow (a call handed it with an active argument might store a
derivative there), so the merge mixed memory with and without shadows, and both modes refused
the loop as "runtime activity". What a callee stores in its exception record is never a
derivative. Checked against the exact derivative at 1, 2 and 4 threads.

The Hessian-vector product (forward mode over the reverse sweep's forward half) met the slot
again: the forward half kept its address for the callee's reverse function, and forward mode
saw memory whose address was stored away. The reverse function gets a slot of its own now."""

import math

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse, autodiff

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)


@numba.njit
def powers(x, n):
    if n < 0:
        raise ValueError("negative power")
    if n == 0:
        return np.ones(3)
    return powers(x, n - 1) * np.array([x, 2.0 * x, math.sin(x)])


@numba.njit(parallel=True)
def rows_of_powers(a, n):
    rr = np.zeros((a.shape[0], 3))
    for i in prange(a.shape[0]):
        rr[i, :] = powers(a[i], n)
    return np.sum(rr)


def _exact(a):      # d/da of a^2 + 4 a^2 + sin(a)^2
    return 2.0 * a + 8.0 * a + 2.0 * np.sin(a) * np.cos(a)


@pytest.mark.parametrize("threads", THREADS)
def test_a_callee_that_can_raise_in_a_prange_body(threads):
    numba.set_num_threads(threads)
    try:
        a = np.linspace(-1.2, 1.3, 11)
        da = np.zeros_like(a)
        autodiff(Reverse, rows_of_powers, Active, Duplicated(a, da), Const(2))
        np.testing.assert_allclose(da, _exact(a), rtol=1e-13)
        t = np.cos(np.arange(11.0))
        _, tangent = autodiff(Forward, rows_of_powers, Duplicated, Duplicated(a, t), Const(2))
        assert tangent == pytest.approx(float(_exact(a) @ t), rel=1e-13)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


# Numba's debugging flag keeps the callee a call (optnone, noinline): a callee LLVM leaves
# alone without recursion, whose recursive tapes make forward mode's type analysis slow.
@numba.njit(_dbg_optnone=True)
def turned(x, k):
    if k < 0:
        raise ValueError("negative count")
    m = np.array([[math.cos(x), -math.sin(x), 0.0], [math.sin(x), math.cos(x), 0.0],
                  [0.0, 0.0, 1.0]])
    v = np.array([x, x * x, 1.0])
    for _ in range(k):
        w = np.empty(3)
        for r in range(3):
            w[r] = m[r, 0] * v[0] + m[r, 1] * v[1] + m[r, 2] * v[2]
        v = w
    return v


@numba.njit(parallel=True)
def turned_rows(a, k):
    out = np.zeros((a.shape[0], 3))
    for i in prange(a.shape[0]):
        out[i, :] = turned(a[i], k)
    return np.sum(out * out)


@numba.njit
def _turned_sum(a, k):
    s = 0.0
    for i in range(a.shape[0]):
        v = turned(a[i], k)
        s += v[0] * v[0] + v[1] * v[1] + v[2] * v[2]
    return s


def test_hvp_of_a_prange_body_calling_a_function_that_can_raise():
    a = np.linspace(-1.2, 1.3, 7)
    t = np.cos(np.arange(7.0))
    want = pyzyme.hvp(_turned_sum, a, t, 3)      # the same sum, serial
    eps = 1e-6
    grad = lambda x: pyzyme.gradient(Reverse, _turned_sum, x, 3)[0]  # noqa: E731
    np.testing.assert_allclose(want, (grad(a + eps * t) - grad(a - eps * t)) / (2 * eps),
                               rtol=1e-7, atol=1e-8)
    for threads in THREADS:
        numba.set_num_threads(threads)
        try:
            np.testing.assert_allclose(pyzyme.hvp(turned_rows, a, t, 3), want, rtol=1e-12)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


# np.linalg.solve raises LinAlgError with the failing call's info, a record Numba allocates and
# fills at run time (its arguments hold a copy of the matrix). In a prange body that record
# joins Numba's constant records on the way to raising; given a shadow (an active matrix's copy
# is stored into it), the merge was refused as runtime activity.
@numba.njit(parallel=True)
def solved_rows(A, b):
    s = 0.0
    for i in prange(A.shape[0]):
        x = np.linalg.solve(A[i], b[i])
        s += np.sum(x * x)
    return s


_serial_solved_rows = numba.njit(solved_rows.py_func)


def _systems():
    rng = np.random.default_rng(7)
    return rng.standard_normal((6, 3, 3)) + 3.0 * np.eye(3), rng.standard_normal((6, 3))


def test_solve_in_a_prange_body_reverse_mode():
    A, b = _systems()
    want = [np.zeros_like(A), np.zeros_like(b)]
    autodiff(Reverse, _serial_solved_rows, Active, Duplicated(A, want[0]),
             Duplicated(b, want[1]))
    eps = 1e-6
    for k in ((0, 1, 2), (5, 0, 0), (3, 2, 1)):
        e = np.zeros_like(A)
        e[k] = eps
        fd = (_serial_solved_rows(A + e, b) - _serial_solved_rows(A - e, b)) / (2 * eps)
        assert want[0][k] == pytest.approx(fd, rel=1e-6, abs=1e-9)
    for threads in THREADS:
        numba.set_num_threads(threads)
        try:
            for _ in range(3 if threads == 4 else 1):
                dA, db = np.zeros_like(A), np.zeros_like(b)
                autodiff(Reverse, solved_rows, Active, Duplicated(A, dA), Duplicated(b, db))
                np.testing.assert_allclose(dA, want[0], rtol=1e-12, atol=1e-14)
                np.testing.assert_allclose(db, want[1], rtol=1e-12, atol=1e-14)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_solve_in_a_prange_body_forward_mode():
    A, b = _systems()
    tA, tb = np.sin(np.arange(A.size)).reshape(A.shape), np.cos(np.arange(b.size)).reshape(b.shape)
    dA, db = np.zeros_like(A), np.zeros_like(b)
    autodiff(Reverse, _serial_solved_rows, Active, Duplicated(A, dA), Duplicated(b, db))
    want = float(np.sum(dA * tA) + np.sum(db * tb))
    for threads in THREADS:
        numba.set_num_threads(threads)
        try:
            _, tangent = autodiff(Forward, solved_rows, Duplicated, Duplicated(A, tA),
                                  Duplicated(b, tb))
            assert tangent == pytest.approx(want, rel=1e-12)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_hvp_of_solve_in_a_prange_body():
    # Forward mode over the reverse sweep: the record's release is deferred to the end of the
    # reverse sweep (still only a record), and type analysis of the augmented body no longer
    # descends into pyzyme's tape_free, whose header reads conflicted with the float tapes it
    # frees (the integer list of solve's error path was then taken for floats, and refused).
    A, b = _systems()
    t = np.sin(np.arange(A.size)).reshape(A.shape)
    want = pyzyme.hvp(_serial_solved_rows, A, t, b)
    grad = pyzyme.grad(_serial_solved_rows)
    h = 1e-6
    np.testing.assert_allclose(want, (grad(A + h * t, b) - grad(A - h * t, b)) / (2 * h),
                               rtol=1e-6, atol=1e-8)
    for threads in THREADS:
        numba.set_num_threads(threads)
        try:
            np.testing.assert_allclose(pyzyme.hvp(solved_rows, A, t, b), want, rtol=1e-12,
                                       atol=1e-14)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
