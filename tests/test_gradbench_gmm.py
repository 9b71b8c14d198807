"""GradBench's gmm eval (pyzyme.gradbench.evals.gmm): the log posterior against the model's
definition (Gaussian densities and a Wishart prior, transcribed with NumPy/SciPy), its pyzyme
gradient against central differences and forward mode, the JSON the eval expects."""

import numpy as np
import pytest
from scipy.special import multigammaln

from pyzyme import jacfwd
from pyzyme.gradbench.evals.gmm import FUNCTIONS, jacobian, objective

D, K, N = 4, 2, 5     # D = 4: filling l row by row would differ from column by column


def _input(m=1, gamma=0.7, seed=11):
    rng = np.random.default_rng(seed)
    return {"d": D, "k": K, "n": N, "x": rng.normal(size=(N, D)).tolist(), "m": m,
            "gamma": gamma, "alpha": rng.normal(size=K).tolist(),
            "mu": rng.uniform(size=(K, D)).tolist(),
            "q": (0.3 * rng.normal(size=(K, D))).tolist(),
            "l": rng.normal(size=(K, D * (D - 1) // 2)).tolist()}


def _definition(alpha, mu, q, l, x, m, gamma):
    """log(p(X | theta, phi) p(theta)) straight from the README's definition."""
    d = x.shape[1]
    phi = np.exp(alpha) / np.sum(np.exp(alpha))
    precisions = []
    for qk, lk in zip(q, l):
        Q = np.diag(np.exp(qk))
        rows, cols = [], []
        for col in range(d):           # column by column
            for row in range(col + 1, d):
                rows.append(row)
                cols.append(col)
        Q[rows, cols] = lk
        precisions.append(Q.T @ Q)
    likelihood = 1.0
    for xi in x:
        likelihood *= sum(p * np.exp(-0.5 * (xi - mk) @ P @ (xi - mk))
                          * np.sqrt(np.linalg.det(P) / (2 * np.pi) ** d)
                          for p, mk, P in zip(phi, mu, precisions))
    n = d + m + 1
    V = np.eye(d) / gamma ** 2
    prior = 1.0
    for P in precisions:
        prior *= (np.linalg.det(P) ** ((n - d - 1) / 2)
                  * np.exp(-np.trace(np.linalg.inv(V) @ P) / 2)
                  / (2 ** (n * d / 2) * np.linalg.det(V) ** (n / 2)
                     * np.exp(multigammaln(n / 2, d))))
    return np.log(likelihood * prior)


@pytest.mark.parametrize("m, gamma", [(0, 1.0), (2, 0.7)])
def test_objective_matches_the_definition(m, gamma):
    args = FUNCTIONS["objective"].arguments(_input(m, gamma))
    assert objective(*args) == pytest.approx(_definition(*args), rel=1e-11)


def test_jacobian_matches_differences_and_forward_mode():
    args = FUNCTIONS["jacobian"].arguments(_input())
    grads = jacobian(*args)
    assert len(grads) == 4
    h = 1e-6
    for which, g in enumerate(grads):
        x = args[which]
        assert g.shape == x.shape
        central = np.empty_like(x)
        for i in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[i] += h
            minus[i] -= h
            central[i] = (objective(*args[:which], plus, *args[which + 1:])
                          - objective(*args[:which], minus, *args[which + 1:])) / (2 * h)
        np.testing.assert_allclose(g, central, rtol=1e-6, atol=1e-6)
        forward = np.reshape(jacfwd(objective, argnums=which)(*args), x.shape)
        np.testing.assert_allclose(g, forward, rtol=1e-12, atol=1e-12)


def test_json_output():
    input = _input() | {"min_runs": 1, "min_seconds": 0}
    value = FUNCTIONS["objective"].evaluate(input)
    assert isinstance(value, float)
    out = FUNCTIONS["jacobian"].evaluate(input)
    assert set(out) == {"alpha", "mu", "q", "l"}
    assert np.shape(out["alpha"]) == (K,)
    assert np.shape(out["mu"]) == np.shape(out["q"]) == (K, D)
    assert np.shape(out["l"]) == (K, D * (D - 1) // 2)
    assert all(isinstance(v, float) for row in out["l"] for v in row)
    assert FUNCTIONS["jacobian"].evaluate(input) == out


def test_one_dimension_has_empty_l_rows():
    input = _input() | {"d": 1, "x": [[0.5], [-1.0]], "n": 2, "mu": [[0.0], [1.0]],
                        "q": [[0.1], [-0.2]], "l": [[], []]}
    out = FUNCTIONS["jacobian"].evaluate(input)
    assert out["l"] == [[], []] and np.shape(out["q"]) == (K, 1)
