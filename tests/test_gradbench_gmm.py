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


def test_jacobian_flushes_subnormal_weights():
    # Component 1 lies about 720 nats below component 0 at every point: its weights
    # exp(beta_i1 - beta_i0) are subnormal, and IEEE arithmetic gives it a subnormal gradient.
    # jacobian runs with subnormals flushed (pyzyme.options(flush_subnormals=True)): zero.
    input = {"d": 2, "k": 2, "n": 3, "m": 0, "gamma": 1.0, "alpha": [0.0, -720.0],
             "mu": [[0.0, 0.0], [0.5, -0.5]], "q": [[0.0, 0.0], [0.0, 0.0]],
             "l": [[0.0], [0.0]], "x": [[0.3, -0.2], [0.1, 0.4], [-0.5, 0.2]]}
    alpha, mu, q, l, x, m, gamma = FUNCTIONS["jacobian"].arguments(input)
    # q = 0 and l = 0: every Q_k is the identity.
    beta = alpha - 0.5 * ((x[:, None, :] - mu[None]) ** 2).sum(2)
    w = np.exp(beta - beta.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    s = np.exp(alpha - alpha.max())
    s /= s.sum()
    ieee_alpha = w.sum(0) - x.shape[0] * s
    ieee_mu = np.einsum("ik,ikd->kd", w, x[:, None, :] - mu[None])
    assert 0.0 < abs(ieee_alpha[1]) < 2.3e-308 and 0.0 < np.abs(ieee_mu[1]).max() < 2.3e-308
    g_alpha, g_mu, g_q, g_l = jacobian(alpha, mu, q, l, x, m, gamma)
    assert g_alpha[1] == 0.0 and np.all(g_mu[1] == 0.0) and g_l[1, 0] == 0.0
    np.testing.assert_allclose(g_alpha[0], ieee_alpha[0], atol=1e-14)
    np.testing.assert_allclose(g_mu[0], ieee_mu[0], rtol=1e-13)
