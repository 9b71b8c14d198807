"""PyTorch autograd gradients of K1..K5: float64 tensor code, ``loss.backward()``.

Vectorized wherever a tensor formulation exists (Taylor, matmul, GMM, the diffusion stencil);
the Lotka-Volterra RK4 loop has none (each step needs the last), so it is a Python loop over
0-d tensors, timed with a tenth of the steps and extrapolated (at 10^4 steps one gradient takes
seconds). Eager mode, as most PyTorch code runs: ``torch.compile`` of a 10^4-step Python loop
would unroll it.
"""

from __future__ import annotations

import numpy as np
import torch

import _problems

NAME = "PyTorch"
torch.set_default_dtype(torch.float64)


def version() -> str:
    return f"torch {torch.__version__} ({torch.get_num_threads()} threads)"


def _leaf(a) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)


def _grads(*leaves) -> list[np.ndarray]:
    out = [t.grad.numpy().copy() for t in leaves]
    for t in leaves:
        t.grad = None  # the next call starts from no gradient, as an optimizer step would
    return out


def taylor(p):
    n = p.data["n"]
    x = _leaf(p.data["x"])

    def run():
        i = torch.arange(1, n, dtype=torch.float64)
        torch.sum(x ** i / i).backward()
        return _grads(x)
    return run


def matmul_vjp(p):
    A, B = _leaf(p.data["A"]), _leaf(p.data["B"])
    ct = torch.tensor(p.data["ct"])

    def run():
        (A @ B).backward(ct)
        return _grads(A, B)
    return run


def gmm(p):
    n, d = p.data["x"].shape
    k = p.data["means"].shape[0]
    gamma, m = p.data["gamma"], p.data["m"]
    x = torch.tensor(p.data["x"])
    gather = torch.tensor(_problems.gmm_lower_gather(d))
    const = _problems.gmm_constant(d, k, n, gamma, m)
    alphas, means, icf = (_leaf(p.data[k]) for k in ("alphas", "means", "icf"))

    def run():
        logdiag = icf[:, :d]
        lower = torch.cat([icf.new_zeros(k, 1), icf[:, d:]], dim=1)[:, gather]
        Q = lower.reshape(k, d, d) + torch.diag_embed(torch.exp(logdiag))
        xc = x[:, None, :] - means[None, :, :]              # (n, K, d)
        y = torch.einsum("kij,nkj->nki", Q, xc)
        main = alphas + logdiag.sum(dim=1) - 0.5 * (y * y).sum(dim=2)
        frob = torch.exp(2.0 * logdiag).sum() + (icf[:, d:] ** 2).sum()
        prior = 0.5 * gamma * gamma * frob - m * logdiag.sum()
        loss = (torch.logsumexp(main, dim=1).sum() - n * torch.logsumexp(alphas, dim=0)
                + prior + const)
        loss.backward()
        return _grads(alphas, means, icf)
    return run


def lotka_volterra(p):
    u0, v0, dt, steps = (p.data[k] for k in ("u0", "v0", "dt", "steps"))
    pp = _leaf(p.data["p"])

    def run():
        a, b, dl, g = pp[0], pp[1], pp[2], pp[3]

        def rhs(u, v):
            return a * u - b * u * v, dl * u * v - g * v

        u, v = torch.tensor(u0), torch.tensor(v0)
        for _ in range(steps):
            k1u, k1v = rhs(u, v)
            k2u, k2v = rhs(u + 0.5 * dt * k1u, v + 0.5 * dt * k1v)
            k3u, k3v = rhs(u + 0.5 * dt * k2u, v + 0.5 * dt * k2v)
            k4u, k4v = rhs(u + dt * k3u, v + dt * k3v)
            u = u + dt / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u)
            v = v + dt / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
        (u * u + v * v).backward()
        return _grads(pp)
    return run


def diffusion(p):
    c, steps = p.data["c"], p.data["steps"]
    u = _leaf(p.data["u"])

    def run():
        v = u
        for _ in range(steps):
            # a new tensor per step: an in-place update of v would overwrite what the
            # previous step's backward reads
            v = torch.cat([v[:1], v[1:-1] + c * (v[:-2] - 2.0 * v[1:-1] + v[2:]), v[-1:]])
        torch.sum(v * v).backward()
        return _grads(u)
    return run


ROWS = {
    "K1": [("PyTorch autograd, vectorized", taylor, 1)],
    "K2": [("PyTorch autograd, A @ B", matmul_vjp, 1)],
    "K3": [("PyTorch autograd, vectorized", gmm, 1)],
    "K4": [("PyTorch autograd, Python loop", lotka_volterra, 10)],
    "K5": [("PyTorch autograd, Python loop over a vectorized step", diffusion, 1)],
}
ROWS["K3L"] = ROWS["K3"]   # the same code at d=64 K=200
