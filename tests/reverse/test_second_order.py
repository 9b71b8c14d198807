"""hvp and hessian: forward mode over the reverse-mode IR, against finite differences of the
reverse-mode gradient and against analytic Hessians."""

import numba
import numpy as np
import pytest

from pyzyme import Reverse, gradient, hessian, hvp


@numba.njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


@numba.njit
def recurrence(x):
    # A loop-carried nonlinear value: reverse mode caches it per iteration, so forward mode
    # over the gradient differentiates through the cache and its growth.
    s = 0.5
    for i in range(x.shape[0]):
        s = np.sin(s) * x[i] + np.exp(-s * s)
    return s * s


@numba.njit
def with_temporary(x):
    t = np.empty_like(x)
    for i in range(x.shape[0]):
        t[i] = np.tanh(x[i]) * x[(i + 1) % x.shape[0]]
    return np.sum(t * t)


def _fd_hessian(f, x, eps=1e-6):
    return np.array([(gradient(Reverse, f, x + eps * e) - gradient(Reverse, f, x - eps * e))
                     / (2 * eps) for e in np.eye(x.size)])


@pytest.mark.parametrize("f", [rosenbrock, recurrence, with_temporary],
                         ids=["rosenbrock", "recurrence", "temporary"])
def test_hessian_matches_differences_of_the_gradient(f):
    x = np.array([1.2, 0.8, 1.1, 0.9, 0.7])
    h = hessian(f)(x)
    np.testing.assert_allclose(h, _fd_hessian(f, x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(h, h.T, rtol=1e-10, atol=1e-10)


def test_rosenbrock_hessian_is_exact():
    x = np.array([1.5, -0.5])
    a, b = x
    exact = np.array([[1200 * a * a - 400 * b + 2, -400 * a], [-400 * a, 200.0]])
    np.testing.assert_allclose(hessian(rosenbrock)(x), exact, rtol=1e-14)


def test_hvp_is_the_hessian_times_v():
    x = np.linspace(0.3, 1.1, 6)
    v = np.cos(np.arange(6.0))
    np.testing.assert_allclose(hvp(recurrence, x, v), hessian(recurrence)(x) @ v,
                               rtol=1e-12, atol=1e-12)


def test_hvp_of_a_plain_python_function():
    def f(x):
        return x[0] ** 2 * x[1] + np.sin(x[1])
    np.testing.assert_allclose(hvp(f, np.array([1.0, 2.0]), np.array([1.0, 0.0])), [4.0, 2.0])


def test_hvp_checks_shapes():
    from pyzyme import PyzymeError
    with pytest.raises(PyzymeError, match="shape"):
        hvp(rosenbrock, np.ones(3), np.ones(2))


@numba.njit
def _bump_sum(x):
    t = np.empty_like(x)                 # a temporary: its release is deferred to the caller
    for i in range(x.shape[0]):
        t[i] = np.exp(-x[i] * x[i])
    return np.sum(t)


@numba.njit
def _calls_allocating_helper(x):
    return _bump_sum(x) * _bump_sum(x[::2].copy()) + x[0]


def test_hvp_through_a_callee_that_allocates():
    """The callee's releases wait in its caller's list, tagged by the release function's
    address; the list's owner calls each known one directly, so forward mode over the
    reverse sweep follows no function pointer (it refused before)."""
    x = np.linspace(0.0, 1.0, 7)
    v = np.linspace(-1.0, 2.0, 7)
    eps = 1e-6
    expect = (gradient(Reverse, _calls_allocating_helper, x + eps * v)
              - gradient(Reverse, _calls_allocating_helper, x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hvp(_calls_allocating_helper, x, v), expect, rtol=1e-6,
                               atol=1e-8)


@numba.njit
def _weighted_fit(p, data, weights, scale):
    # Parameters first, then data: hvp differentiates in p only.
    s = 0.0
    for i in range(data.shape[0]):
        r = np.tanh(p[0] * data[i, 0] + p[1] * data[i, 1]) - p[2] * data[i, 1] ** 2
        s += weights[i] * r * r
    return scale * s + np.sum(p ** 4)


def test_hvp_and_gradient_with_constant_arguments():
    """hvp(f, x, v, *args): the Hessian in x of a function of parameters and data (kmeans'
    Newton step needs it); before, hvp took a one-argument f only."""
    from pyzyme import hvp_and_gradient
    rng = np.random.default_rng(2)
    data, weights = rng.normal(size=(9, 2)), rng.random(9)
    p, v = np.array([0.4, -0.7, 0.3]), np.array([1.0, 0.5, -2.0])
    eps = 1e-6
    grad_at = lambda q: gradient(Reverse, _weighted_fit, q, data, weights, 0.5)[0]  # noqa: E731
    expect = (grad_at(p + eps * v) - grad_at(p - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hvp(_weighted_fit, p, v, data, weights, 0.5), expect,
                               rtol=1e-6, atol=1e-8)
    hv, g = hvp_and_gradient(_weighted_fit, p, v, data, weights, 0.5)
    np.testing.assert_allclose(hv, expect, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g, grad_at(p), rtol=1e-13, atol=1e-14)
    # The constants are constants: another scale changes H v accordingly.
    hv2 = hvp(_weighted_fit, p, v, data, weights, 1.0)
    np.testing.assert_allclose(hv2 - 12 * p ** 2 * v, 2 * (hv - 12 * p ** 2 * v), rtol=1e-12)


@numba.njit
def cubes_in_place(x):
    x *= 2.0             # f writes its argument: as a function of what it is given, sum(8 x**3)
    return np.sum(x ** 3)


def test_a_function_writing_its_argument_leaves_x_and_v_and_each_column_at_x():
    x, v = np.array([1.0, 2.0]), np.array([1.0, -1.0])
    np.testing.assert_allclose(hvp(cubes_in_place, x, v), 48.0 * x * v, rtol=1e-12)
    np.testing.assert_array_equal(x, [1.0, 2.0])     # the caller's arrays as they were
    np.testing.assert_array_equal(v, [1.0, -1.0])
    np.testing.assert_allclose(hessian(cubes_in_place)(x), np.diag(48.0 * x), rtol=1e-12)


def test_hvp_and_gradient_calls_type_no_array_again(monkeypatch):
    """A later call finds its compiled plan without ``numba.typeof`` of the arrays (about
    8-15 us each, most of a call on small inputs: GradBench's kmeans calls it every run)."""
    from pyzyme import hvp_and_gradient
    rng = np.random.default_rng(3)
    data, weights = rng.normal(size=(5, 2)), rng.random(5)
    p, v = np.array([0.1, 0.2, 0.3]), np.ones(3)
    first = hvp_and_gradient(_weighted_fit, p, v, data, weights, 0.5)
    calls = []
    typeof = numba.typeof
    monkeypatch.setattr(numba, "typeof", lambda *a: calls.append(a) or typeof(*a))
    again = hvp_and_gradient(_weighted_fit, p, v, data, weights, 0.5)
    assert [type(a[0]) for a in calls if isinstance(a[0], np.ndarray)] == []
    np.testing.assert_array_equal(again[0], first[0])   # the same compiled code, same input
    np.testing.assert_array_equal(again[1], first[1])
