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
