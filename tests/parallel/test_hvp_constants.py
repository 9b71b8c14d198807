"""hvp (forward over reverse) of functions with prange loops given arguments held constant: an
integer, a float or a float array, handed to the loop by the function or by a function it
calls (a literal too), or a tuple of arrays the loop picks from, each checked against
differences of the gradient and the exact Hessian at 1, 2 and 4 threads. Such a constant's
pointer reaches the body's reverse through its tape, whose shadow holds null there: forward
mode read its tangent through null (a segfault); the reverse now marks what it reads back
from the tape that no active input changed, and forward mode over it (hvp) holds that
constant."""

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse


@numba.njit(parallel=True)
def scaled_in_loop(x, sigma):
    e = 0.0
    for i in prange(x.shape[0]):
        e += x[i] * x[i] * x[i] * sigma
    return e


@numba.njit(parallel=True)
def weighted(x, w):
    e = 0.0
    for i in prange(x.shape[0]):
        e += x[i] * x[i] * w[i]
    return e


@numba.njit(parallel=True)
def scaled_after(x, sigma):
    e = 0.0
    for i in prange(x.shape[0]):
        e += x[i] * x[i] * x[i]
    return e * sigma


@numba.njit(parallel=True)
def picked_from_a_tuple(x, ws):
    e = 0.0
    for i in prange(x.shape[0]):
        w = ws[0] if i % 2 else ws[1]
        e += x[i] * x[i] * x[i] * w[i]
    return e


@numba.njit
def through_a_callee(x, sigma):
    return scaled_in_loop(x, sigma + 0.0)


@numba.njit
def literal_through_a_callee(x):
    return scaled_in_loop(x, 0.3)


def _gradient(f, x, c):
    d = np.zeros_like(x)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(x, d), Const(c))
    return d


@pytest.mark.parametrize("f, c", [(scaled_after, 0.3), (scaled_in_loop, 3)],
                         ids=["float after the loop", "integer in the loop"])
def test_constants_the_loop_can_carry(f, c):
    x = np.linspace(-1.0, 2.0, 7)
    v = np.random.default_rng(2).standard_normal(7)
    hv = pyzyme.hvp(f, x, v, c)
    e = 1e-6
    fd = (_gradient(f, x + e * v, c) - _gradient(f, x - e * v, c)) / (2 * e)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hv, 6.0 * x * v * c, rtol=1e-12)


W = np.linspace(0.5, 1.5, 7)
TUPLE = (np.linspace(0.1, 0.7, 7), np.linspace(1.0, 2.0, 7))
THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)


@pytest.mark.parametrize("f, c, weight", [
    (scaled_in_loop, (0.3,), 0.3), (weighted, (W,), None),
    (through_a_callee, (0.3,), 0.3), (literal_through_a_callee, (), 0.3),
    (picked_from_a_tuple, (TUPLE,), np.where(np.arange(7) % 2, TUPLE[0], TUPLE[1]))],
    ids=["float", "array", "float through a callee", "literal through a callee",
         "tuple of arrays"])
def test_floats_handed_to_a_loop(f, c, weight):
    x = np.linspace(-1.0, 2.0, 7)
    v = np.random.default_rng(3).standard_normal(7)
    # weighted: e = sum x^2 w, so H = diag(2 w); the others: sum x^3 w, H = diag(6 x w)
    exact = 2.0 * W * v if f is weighted else 6.0 * x * v * weight
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            for _ in range(3 if threads > 1 else 1):
                np.testing.assert_allclose(pyzyme.hvp(f, x, v, *c), exact, rtol=1e-12,
                                           atol=1e-14)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    if c and not isinstance(c[0], tuple):
        e = 1e-6
        fd = (_gradient(f, x + e * v, c[0]) - _gradient(f, x - e * v, c[0])) / (2 * e)
        np.testing.assert_allclose(exact, fd, rtol=1e-6, atol=1e-8)
