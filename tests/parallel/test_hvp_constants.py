"""hvp (forward over reverse) of functions with prange loops given arguments held constant: an
integer, or a float the loops are not handed, works (checked against differences of the
gradient); a float or a float array handed to a loop, by the function or a function it calls,
is refused naming prange and the function (forward mode over the launch would read its tangent through a null shadow: it
crashed)."""

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse
from pyzyme.errors import UnsupportedError


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
def times_count(x, k):
    e = 0.0
    for i in prange(x.shape[0]):
        e += x[i] * x[i] * x[i] * k
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


@pytest.mark.parametrize("f, c", [(scaled_after, 0.3), (times_count, 3)],
                         ids=["float after the loop", "integer in the loop"])
def test_constants_the_loop_can_carry(f, c):
    x = np.linspace(-1.0, 2.0, 7)
    v = np.random.default_rng(2).standard_normal(7)
    hv = pyzyme.hvp(f, x, v, c)
    e = 1e-6
    fd = (_gradient(f, x + e * v, c) - _gradient(f, x - e * v, c)) / (2 * e)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hv, 6.0 * x * v * (0.3 if f is scaled_after else 3), rtol=1e-12)


@pytest.mark.parametrize("f, c", [(scaled_in_loop, (0.3,)),
                                  (weighted, (np.linspace(0.5, 1.5, 7),)),
                                  (through_a_callee, (0.3,)), (literal_through_a_callee, ())],
                         ids=["float", "array", "float through a callee",
                              "literal through a callee"])
def test_floats_handed_to_a_loop_are_refused(f, c):
    # a constant handed on by a callee, even a literal, reaches the loop's slots the same way
    x = np.linspace(-1.0, 2.0, 7)
    with pytest.raises(UnsupportedError, match=r"prange / parallel=True loop") as err:
        pyzyme.hvp(f, x, np.ones(7), *c)
    assert f.__name__ in str(err.value) and "without parallel=True" in str(err.value)
