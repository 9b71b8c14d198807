"""A matrix product in a prange body with an operand all iterations share: ``P @ B.T`` with
``P`` the iteration's own and ``B`` the caller's. The reverse of a BLAS call adds into its
operands' adjoints by code of its own, so in a parallel loop's body it is allowed where every
operand it adds into belongs to the iteration. A shared ``B`` that carries no derivative has
no adjoint to add into: that loop was refused all the same, and now differentiates (checked
against differences at 1, 2 and 4 threads); with ``B`` active the threads would add into its
adjoint at once, and the refusal still names the loop."""

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse, autodiff

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)


def products(a, b):
    out = np.zeros((a.shape[0], 3))
    for i in prange(a.shape[0]):
        p = np.empty((2, 3))
        for j in range(3):
            p[0, j] = np.sin(a[i] * (j + 1))
            p[1, j] = a[i] * a[i] * (j + 1)
        q = p @ b.T
        out[i, :] = q[0] + q[1]
    return np.sum(out * out)


PARALLEL = numba.njit(parallel=True)(products)
SERIAL = numba.njit(products)


def _args():
    return np.linspace(0.1, 1.2, 9), np.arange(9.0).reshape(3, 3) / 7.0


@pytest.mark.parametrize("threads", THREADS)
def test_a_shared_operand_without_a_derivative(threads):
    a, b = _args()
    expected = np.zeros_like(a)
    autodiff(Reverse, SERIAL, Active, Duplicated(a, expected), Const(b))
    h = 1e-6
    differences = [(SERIAL(a + h * e, b) - SERIAL(a - h * e, b)) / (2 * h)
                   for e in np.eye(a.size)]
    np.testing.assert_allclose(expected, differences, rtol=1e-7)
    numba.set_num_threads(threads)
    try:
        for _ in range(3):
            got = np.zeros_like(a)
            autodiff(Reverse, PARALLEL, Active, Duplicated(a, got), Const(b))
            np.testing.assert_allclose(got, expected, rtol=1e-13)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_a_shared_operand_with_a_derivative_is_refused():
    a, b = _args()
    line = products.__code__.co_firstlineno + 2  # the prange loop's
    with pytest.raises(pyzyme.UnsupportedError, match="prange") as err:
        autodiff(Reverse, PARALLEL, Active, Duplicated(a, np.zeros_like(a)),
                 Duplicated(b, np.zeros_like(b)))
    assert "other threads add into" in str(err.value)
    assert f"test_shared_blas_operand.py:{line}" in str(err.value)
