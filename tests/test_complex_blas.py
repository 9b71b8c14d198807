"""np.dot, np.vdot and @ of complex arrays (Numba's BLAS helpers of kind ``z`` and ``c``):
reverse mode against central differences in the real and imaginary parts of every element and
against the same products written as loops, forward mode against reverse mode, for each way
Numba hands BLAS its operands (C-ordered or transposed views), and in a prange body."""

import numba
import numpy as np
import pytest
from numba import prange

from pyzyme import Active, Const, Duplicated, Forward, Reverse, autodiff

RNG = np.random.default_rng(11)


def crand(*shape, dtype=np.complex128):
    return (RNG.normal(size=shape) + 1j * RNG.normal(size=shape)).astype(dtype)


def transposed(*shape):
    """A complex array of ``shape`` that is a transposed (Fortran-ordered) view."""
    return np.ascontiguousarray(crand(*shape[::-1])).T


@numba.njit
def weighted_product(a, b, w):
    return np.sum(((a @ b) * w).real)


@numba.njit
def weighted_product_loops(a, b, w):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            c = 0j
            for k in range(a.shape[1]):
                c += a[i, k] * b[k, j]
            s += (c * w[i, j]).real
    return s


@numba.njit
def matvec_and_dot(a, x, w):
    return np.sum(((a @ x) * w).real) + (np.dot(x, x) * w[0]).imag


@numba.njit
def matvec_and_dot_loops(a, x, w):
    s = 0.0
    for i in range(a.shape[0]):
        y = 0j
        for k in range(a.shape[1]):
            y += a[i, k] * x[k]
        s += (y * w[i]).real
    d = 0j
    for k in range(x.shape[0]):
        d += x[k] * x[k]
    return s + (d * w[0]).imag


@numba.njit
def conjugated_dot(x, y):
    return (np.vdot(x, y) * (1.0 + 2.0j)).real


@numba.njit
def conjugated_dot_loops(x, y):
    d = 0j
    for k in range(x.shape[0]):
        d += x[k].conjugate() * y[k]
    return (d * (1.0 + 2.0j)).real


def central(f, args, i, eps=1e-6):
    """df/dRe + i df/dIm of every element of ``args[i]``: pyzyme's complex gradient."""
    x = args[i]
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        for unit in (1.0, 1j):
            step = np.zeros_like(x)
            step[k] = eps * unit
            plus = list(args)
            minus = list(args)
            plus[i], minus[i] = x + step, x - step
            g[k] += unit * (f(*plus) - f(*minus)) / (2 * eps)
    return g


def reverse(f, args, which):
    shadows = {i: np.zeros_like(args[i]) for i in which}
    autodiff(Reverse, f, Active, *[Duplicated(a, shadows[i]) if i in which else Const(a)
                                   for i, a in enumerate(args)])
    return shadows


def forward(f, args, tangents):
    _, t = autodiff(Forward, f, Duplicated, *[
        Duplicated(a, tangents[i]) if i in tangents else Const(a) for i, a in enumerate(args)])
    return t


def check(f, loops, args, which, rtol=1e-9):
    got = reverse(f, args, which)
    by_loops = reverse(loops, args, which)
    for i in which:
        np.testing.assert_allclose(got[i], central(f, args, i), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(got[i], by_loops[i], rtol=rtol, atol=1e-12)
    # forward mode: the tangent along t is Re(sum(conj(gradient) * t))
    tangents = {i: crand(*args[i].shape).astype(args[i].dtype) for i in which}
    want = sum(np.sum((np.conj(got[i]) * tangents[i]).real) for i in which)
    assert forward(f, args, tangents) == pytest.approx(want, rel=rtol)


@pytest.mark.parametrize("a_view, b_view", [(False, False), (True, False), (False, True),
                                            (True, True)], ids=["C C", "T C", "C T", "T T"])
def test_matrix_product(a_view, b_view):
    a = transposed(3, 4) if a_view else crand(3, 4)
    b = transposed(4, 2) if b_view else crand(4, 2)
    check(weighted_product, weighted_product_loops, (a, b, crand(3, 2)), (0, 1))


@pytest.mark.parametrize("a_view", [False, True], ids=["C", "T"])
def test_matrix_vector_product_and_dot(a_view):
    a = transposed(3, 4) if a_view else crand(3, 4)
    check(matvec_and_dot, matvec_and_dot_loops, (a, crand(4), crand(3)), (0, 1))


def test_vdot_conjugates_its_first_operand():
    check(conjugated_dot, conjugated_dot_loops, (crand(5), crand(5)), (0, 1))


def test_complex64():
    a, b, w = crand(3, 4, dtype=np.complex64), crand(4, 2, dtype=np.complex64), crand(3, 2)
    got = reverse(weighted_product, (a, b, w), (0, 1))
    by_loops = reverse(weighted_product_loops, (a, b, w), (0, 1))
    for i in (0, 1):
        assert got[i].dtype == np.complex64
        np.testing.assert_allclose(got[i], by_loops[i], rtol=1e-5, atol=1e-5)


@numba.njit(parallel=True)
def rows_times_shared(a, b, w):
    s = 0.0
    for i in prange(a.shape[0]):
        s += np.sum(((a[i] @ b) * w[i]).real)
    return s


def test_products_of_a_shared_operand_in_a_prange_body():
    """The shared operand's adjoint goes into a copy per thread, as for real matrices."""
    a, b, w = crand(6, 3, 4), crand(4, 2), crand(6, 3, 2)
    serial = numba.njit(rows_times_shared.py_func)
    want = reverse(serial, (a, b, w), (0, 1))
    np.testing.assert_allclose(want[1], central(serial, (a, b, w), 1), rtol=1e-6, atol=1e-8)
    for threads in (t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        try:
            got = reverse(rows_times_shared, (a, b, w), (0, 1))
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        for i in (0, 1):
            np.testing.assert_allclose(got[i], want[i], rtol=1e-12, atol=1e-14)
