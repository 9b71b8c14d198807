"""GradBench's llsq eval (pyzyme.gradbench.evals.llsq): the objective against NumPy's
Vandermonde form of the spec, its pyzyme gradient against central differences, forward mode
and the normal equations, the JSON the eval expects."""

import numpy as np
import pytest

from pyzyme import jacfwd
from pyzyme.gradbench.evals.llsq import FUNCTIONS, gradient, llsq


def _spec(x, n):
    t = -1.0 + np.arange(n) * 2.0 / (n - 1)
    residual = np.sign(t) - np.vander(t, x.size, increasing=True) @ x
    return 0.5 * residual @ residual, t


@pytest.fixture
def x():
    return np.random.default_rng(5).random(6)


@pytest.mark.parametrize("n", [2, 7, 40])
def test_objective_matches_the_spec(x, n):
    assert llsq(x, n) == pytest.approx(_spec(x, n)[0], rel=1e-13)


def test_gradient_matches_differences_forward_mode_and_normal_equations(x):
    n, h = 33, 1e-6
    g = gradient(x, n)
    central = np.array([(llsq(x + h * e, n) - llsq(x - h * e, n)) / (2 * h)
                        for e in np.eye(x.size)])
    np.testing.assert_allclose(g, central, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g, np.reshape(jacfwd(llsq)(x, n), x.shape), rtol=1e-12)
    _, t = _spec(x, n)
    V = np.vander(t, x.size, increasing=True)
    np.testing.assert_allclose(g, V.T @ (V @ x - np.sign(t)), rtol=1e-11, atol=1e-12)


def test_json_output(x):
    input = {"x": x.tolist(), "n": 12, "min_runs": 1, "min_seconds": 0}
    primal = FUNCTIONS["primal"].evaluate(input)
    assert isinstance(primal, float) and primal == pytest.approx(_spec(x, 12)[0])
    grad = FUNCTIONS["gradient"].evaluate(input)
    assert isinstance(grad, list) and len(grad) == x.size
    assert FUNCTIONS["gradient"].evaluate(input) == grad
