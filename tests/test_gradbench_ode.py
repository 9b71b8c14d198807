"""GradBench's ``ode`` eval (pyzyme.gradbench.evals.ode): the Runge-Kutta solution against a
NumPy transcription of the spec, its gradient by reverse mode against central differences and
forward mode, and the JSON the eval expects."""

import numpy as np
import pytest

import pyzyme
from pyzyme import Const, Duplicated, Forward
from pyzyme.gradbench.evals import ode


def _numpy_rk4(x, s):
    """GradBench's ode.hpp: y' = (x_0, x_1 y_0, ..., x_{n-1} y_{n-2}) from y(0) = 0, RK4 with
    s steps over [0, 2]."""
    def rate(y):
        return np.concatenate([x[:1], x[1:] * y[:-1]])
    y, h = np.zeros_like(x), 2.0 / s
    for _ in range(s):
        k1 = rate(y)
        k2 = rate(y + h * k1 / 2)
        k3 = rate(y + h * k2 / 2)
        k4 = rate(y + h * k3)
        y = y + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return y


@pytest.fixture
def x():
    return np.random.default_rng(23).random(7)


@pytest.mark.parametrize("s", [1, 3])
def test_primal_is_the_specs_rk4(x, s):
    np.testing.assert_allclose(ode.solve(x, s), _numpy_rk4(x, s), rtol=1e-13, atol=1e-15)
    # y_1(t) = x_0 x_1 t^2 / 2 is a polynomial RK4 integrates exactly
    assert ode.solve(x, s)[1] == pytest.approx(2 * x[0] * x[1], rel=1e-13)


@pytest.mark.parametrize("s", [1, 2])
def test_gradient_against_differences_and_forward_mode(x, s):
    got = ode.gradient(x, s)
    h = 1e-6
    central = np.array([(ode.last(x + h * e, s) - ode.last(x - h * e, s)) / (2 * h)
                        for e in np.eye(len(x))])
    np.testing.assert_allclose(got, central, rtol=1e-6, atol=1e-9)
    forward = np.array([pyzyme.autodiff(Forward, ode.last, Duplicated,
                                        Duplicated(x, e.copy()), Const(s))[1]
                        for e in np.eye(len(x))])
    np.testing.assert_allclose(got, forward, rtol=1e-12, atol=1e-15)
    # an RK4 step moves a change in x_i four components on: y_6 needs two steps
    assert np.all(got != 0.0) if s == 2 else np.all(got == 0.0)


def test_json_shapes_and_values(x):
    input = {"x": x.tolist(), "s": 2, "min_runs": 1, "min_seconds": 0}
    primal = ode.FUNCTIONS["primal"].evaluate(input)
    gradient = ode.FUNCTIONS["gradient"].evaluate(input)
    assert isinstance(primal, list) and isinstance(gradient, list)
    assert len(primal) == len(gradient) == len(x)
    assert all(type(v) is float for v in primal + gradient)
    np.testing.assert_allclose(primal, _numpy_rk4(x, 2), rtol=1e-13)
    # the same compiled code again (its tape arrays are reused between calls)
    assert ode.FUNCTIONS["gradient"].evaluate(input) == gradient
