"""GradBench's lse eval (pyzyme.gradbench.evals.lse): the LogSumExp primal against NumPy, its
pyzyme gradient against central differences and forward mode, the JSON the eval expects."""

import numpy as np
import pytest

from pyzyme import jacfwd
from pyzyme.gradbench.evals.lse import FUNCTIONS, gradient, logsumexp


def _central(f, x, h=1e-6):
    out = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


@pytest.fixture
def x():
    return np.random.default_rng(3).uniform(-5, 5, 9)


def test_primal_is_log_sum_exp(x):
    assert logsumexp(x) == pytest.approx(np.log(np.sum(np.exp(x))), rel=1e-14)
    big = x + 800.0           # exp overflows unless the maximum is taken out first
    assert logsumexp(big) == pytest.approx(800.0 + np.log(np.sum(np.exp(x))), rel=1e-14)


def test_gradient_matches_differences_and_forward_mode(x):
    g = gradient(x)
    np.testing.assert_allclose(g, _central(logsumexp, x), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(g, np.reshape(jacfwd(logsumexp)(x), x.shape), rtol=1e-13,
                               atol=1e-15)
    np.testing.assert_allclose(g, np.exp(x) / np.sum(np.exp(x)), rtol=1e-13)


def test_gradient_through_a_tied_maximum():
    # The maximum's own derivative is a choice, but it cancels: the gradient is the softmax.
    x = np.array([2.0, 2.0, -1.0])
    np.testing.assert_allclose(gradient(x), np.exp(x) / np.sum(np.exp(x)), rtol=1e-13)


def test_json_output(x):
    primal = FUNCTIONS["primal"].evaluate({"x": x.tolist(), "min_runs": 1, "min_seconds": 0})
    assert isinstance(primal, float) and primal == pytest.approx(logsumexp(x))
    grad = FUNCTIONS["gradient"].evaluate({"x": x.tolist(), "min_runs": 1, "min_seconds": 0})
    assert isinstance(grad, list) and len(grad) == x.size
    assert all(isinstance(v, float) for v in grad)
    # each run starts from zero: a second call gives the same, not twice the gradient
    assert FUNCTIONS["gradient"].evaluate({"x": x.tolist()}) == grad
