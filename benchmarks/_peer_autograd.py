"""HIPS autograd gradients of K1..K5: NumPy-style code through ``autograd.numpy``.

autograd traces every call anew (no compilation) and cannot differentiate assignment into
arrays, so everything is written out of place: the GMM's triangular factor is a gather, the
diffusion step a concatenation. The Lotka-Volterra RK4 loop is a Python loop over scalars,
timed with a tenth of the steps and extrapolated.
"""

from __future__ import annotations

import autograd.numpy as anp
import numpy as np
from autograd import grad, make_vjp
from autograd.scipy.special import logsumexp

import _problems

NAME = "autograd"


def version() -> str:
    from importlib.metadata import version as dist_version
    return f"autograd {dist_version('autograd')}"


def taylor(p):
    n = p.data["n"]
    x = float(p.data["x"][0])

    def f(x):
        i = np.arange(1, n, dtype=np.float64)
        return anp.sum(x ** i / i)

    g = grad(f)
    return lambda: [np.array([g(x)])]


def matmul_vjp(p):
    A, B, ct = p.data["A"], p.data["B"], p.data["ct"]
    vjp_maker = make_vjp(anp.dot, argnum=(0, 1))

    def run():
        vjp, _ = vjp_maker(A, B)
        return list(vjp(ct))
    return run


def gmm(p):
    x = p.data["x"]
    n, d = x.shape
    k = p.data["means"].shape[0]
    gamma, m = p.data["gamma"], p.data["m"]
    gather = _problems.gmm_lower_gather(d)
    diag = np.eye(d)
    const = _problems.gmm_constant(d, k, n, gamma, m)

    def f(alphas, means, icf):
        logdiag = icf[:, :d]
        lower = anp.concatenate([np.zeros((k, 1)), icf[:, d:]], axis=1)[:, gather]
        Q = anp.reshape(lower, (k, d, d)) + anp.exp(logdiag)[:, :, None] * diag
        xc = x[:, None, :] - means[None, :, :]              # (n, K, d)
        y = anp.einsum("kij,nkj->nki", Q, xc)
        main = alphas + anp.sum(logdiag, axis=1) - 0.5 * anp.sum(y * y, axis=2)
        frob = anp.sum(anp.exp(2.0 * logdiag)) + anp.sum(icf[:, d:] ** 2)
        prior = 0.5 * gamma * gamma * frob - m * anp.sum(logdiag)
        return anp.sum(logsumexp(main, axis=1)) - n * logsumexp(alphas) + prior + const

    g = grad(f, argnum=(0, 1, 2))
    args = [p.data[k] for k in ("alphas", "means", "icf")]
    return lambda: list(g(*args))


def lotka_volterra(p):
    u0, v0, dt, steps = (p.data[k] for k in ("u0", "v0", "dt", "steps"))

    def f(pp):
        a, b, dl, g = pp[0], pp[1], pp[2], pp[3]

        def rhs(u, v):
            return a * u - b * u * v, dl * u * v - g * v

        u, v = u0, v0
        for _ in range(steps):
            k1u, k1v = rhs(u, v)
            k2u, k2v = rhs(u + 0.5 * dt * k1u, v + 0.5 * dt * k1v)
            k3u, k3v = rhs(u + 0.5 * dt * k2u, v + 0.5 * dt * k2v)
            k4u, k4v = rhs(u + dt * k3u, v + dt * k3v)
            u = u + dt / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u)
            v = v + dt / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
        return u * u + v * v

    g = grad(f)
    pp = p.data["p"]
    return lambda: [g(pp)]


def diffusion(p):
    c, steps = p.data["c"], p.data["steps"]

    def f(u):
        v = u
        for _ in range(steps):
            v = anp.concatenate([v[:1], v[1:-1] + c * (v[:-2] - 2.0 * v[1:-1] + v[2:]), v[-1:]])
        return anp.sum(v * v)

    g = grad(f)
    u = p.data["u"]
    return lambda: [g(u)]


ROWS = {
    "K1": [("autograd, vectorized", taylor, 1)],
    "K2": [("autograd, anp.dot (make_vjp)", matmul_vjp, 1)],
    "K3": [("autograd, vectorized", gmm, 1)],
    "K4": [("autograd, Python loop", lotka_volterra, 10)],
    "K5": [("autograd, Python loop over a vectorized step", diffusion, 1)],
}
ROWS["K3L"] = ROWS["K3"]   # the same code at d=64 K=200
