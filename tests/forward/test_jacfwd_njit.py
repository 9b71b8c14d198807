"""jacfwd returns an @njit function: callable from Python and inside other @njit code."""

import math

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Forward, gradient, jacfwd


@numba.njit
def loss(p, d):
    s = 0.0
    for i in range(d.shape[0]):
        r = p[0] * d[i] + p[1] - math.sin(d[i])
        s += r * r
    return s


@numba.njit
def field(x):
    out = np.empty(3)
    out[0] = x[0] * x[1]
    out[1] = math.exp(x[2])
    out[2] = x[0] + x[1] + x[2] + x[3] + x[4]
    return out


GRAD = jacfwd(loss)


@numba.njit
def descend(p, d, lr, steps):
    for _ in range(steps):
        p = p - lr * GRAD(p, d)
    return p


def test_jacobian_of_vector_function_spans_several_chunks():
    x = np.array([0.5, -1.0, 0.25, 2.0, 3.0])
    J = jacfwd(field)(x)
    expected = np.zeros((3, 5))
    expected[0, 0], expected[0, 1] = x[1], x[0]
    expected[1, 2] = math.exp(x[2])
    expected[2, :] = 1.0
    np.testing.assert_allclose(J, expected, rtol=1e-15)


def test_gradient_matches_forward_gradient():
    d = np.linspace(0.0, 1.0, 20)
    p = np.array([1.0, 0.5])
    assert GRAD(p, d).shape == (2,)     # a float function's Jacobian: the input's shape
    np.testing.assert_allclose(GRAD(p, d), gradient(Forward, lambda q: loss(q, d), p),
                               rtol=1e-14)


def test_gradient_descent_runs_inside_njit():
    d = np.linspace(0.0, 1.0, 20)
    p = descend(np.array([0.0, 0.0]), d, 0.01, 5000)
    # The least-squares fit of sin(d) by a line, solved directly.
    a = np.stack([d, np.ones_like(d)], axis=1)
    best = np.linalg.lstsq(a, np.sin(d), rcond=None)[0]
    np.testing.assert_allclose(p, best, rtol=1e-6)


def test_scalar_argument_and_argnums():
    J = jacfwd(lambda x, y: x * y * y, argnums=1)(2.0, 3.0)
    assert J.shape == () and J == pytest.approx(12.0)


def test_non_contiguous_array_is_a_clear_error():
    x = np.arange(10.0)[::2]
    with pytest.raises(Exception, match="C-contiguous"):
        jacfwd(field)(x)


def test_argnums_out_of_range():
    with pytest.raises(pyzyme.PyzymeError, match="argnums"):
        jacfwd(loss, argnums=2)


@numba.njit
def _root_times_zero(x):
    # x[1]'s tangent is zero; sqrt's derivative at x[0] = 0 is infinite: their product is 0
    # with strong_zero (the default), NaN under IEEE rules
    return np.sqrt(x[:1]) * 0.0 + x[:1] * x[1]


def _caller(jac):
    return numba.njit(lambda x: jac(x))


def test_one_jacfwd_object_follows_the_options_of_each_call():
    # One object called under other options, from Python and from @njit code compiled under
    # them, gives those options' derivative: Numba compiles a function once per argument types,
    # so a single @njit function behind the object kept the first call's.
    x = np.array([0.0, 2.0])
    jac = jacfwd(_root_times_zero)
    assert jac(x)[0, 1] == 0.0
    strong = _caller(jac)
    assert strong(x)[0, 1] == 0.0
    with pyzyme.options(strong_zero=False):
        assert math.isnan(jac(x)[0, 1])
        ieee = _caller(jac)
        assert math.isnan(ieee(x)[0, 1])
    assert jac(x)[0, 1] == 0.0 and strong(x)[0, 1] == 0.0 and math.isnan(ieee(x)[0, 1])
    # away from 0 both options give the same derivative
    np.testing.assert_allclose(jac(np.array([1.0, 2.0])), [[2.0, 1.0]])
