"""The kernels K1..K5, and K3L (the GMM at d=64 K=200), as problems for the peer tools:
inputs, sizes and reference gradients.

A :class:`Problem` holds a kernel's inputs as NumPy arrays and floats, its Numba primal with the
arguments it takes, and the gradient the hand-written adjoint of ``kernels.py`` gives for them
(the reference every tool is checked against). Each peer module (``_peer_jax.py``, ...) turns a
problem into a gradient function in its own idiom; ``peers.py`` times them.

Sizes follow issue 6 and reverse.py: ``size="small"`` only shrinks the matmul, as reverse.py's
``--small`` does (a small run also leaves out the kernels of :data:`LARGE_ONLY`), so that the two
scripts' rows (and the chart) compare like with like; ``shrink`` divides a kernel's sequential
length (time steps), for tools whose Python loop is too slow to time at full size: their time
is then multiplied back (extrapolated) by ``peers.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kernels as K


@dataclass
class Problem:
    key: str                     # "K1".."K5", "K3L"
    name: str                    # for the table
    primal: Any                  # @njit primal
    args: tuple                  # its arguments
    data: dict[str, Any]         # named inputs, for the peers
    ref: list[np.ndarray] = field(default_factory=list)  # hand-written adjoint's gradient
    wrt: list[str] = field(default_factory=list)         # names in ``data`` the gradient is in
    returns_value: bool = True   # False: the primal writes into an argument (matmul)
    objective: Any = None        # () -> float with the inputs as they are now: for FD
    adjoint: tuple = ()          # (hand-written @njit adjoint, its arguments): timed too


def _taylor(size: str) -> Problem:
    n = 10**6
    x = 1.0 - 1e-6  # as in reverse.py: no subnormal powers on the way
    box = np.array([x])
    p = Problem("K1", f"K1 taylor n={n:,}", K.taylor, (x, n), {"x": box, "n": n},
                [np.array([K.taylor_adjoint(x, n)])], ["x"])
    p.objective = lambda: K.taylor(box[0], n)
    p.adjoint = (K.taylor_adjoint, (x, n))
    return p


def _matmul(size: str) -> Problem:
    n, k, m = (1024, 64, 512) if size == "full" else (128, 64, 128)
    rng = np.random.default_rng(1)
    A, B, ct = rng.standard_normal((n, k)), rng.standard_normal((k, m)), rng.standard_normal((n, m))
    C = np.empty((n, m))
    dA, dB = np.zeros_like(A), np.zeros_like(B)
    K.matmul_adjoint(A, B, dA, dB, ct)
    p = Problem("K2", f"K2 matmul {n}x{k} @ {k}x{m} (VJP)", K.matmul, (A, B, C),
                {"A": A, "B": B, "ct": ct}, [dA, dB], ["A", "B"], returns_value=False)

    def inner():  # the VJP is the gradient of <ct, A @ B>
        K.matmul(A, B, C)
        return float(np.sum(ct * C))

    p.objective = inner
    p.adjoint = (K.matmul_adjoint, (A, B, np.zeros_like(A), np.zeros_like(B), ct))
    return p


def _gmm(key: str) -> Problem:
    large = key == "K3L"
    if large:
        data, label = K.generate_gmm(64, 200, 1000), "generated d=64 K=200 n=1000"
    else:
        data, label = K.read_gmm(), "ADBench d=10 K=25 n=1000"
    alphas, means, icf, x, gamma, m = data
    grads = [np.zeros_like(alphas), np.zeros_like(means), np.zeros_like(icf)]
    K.gmm_adjoint(*data, *grads)
    p = Problem(key, f"{key} GMM {label}", K.gmm_objective, data,
                {"alphas": alphas, "means": means, "icf": icf, "x": x, "gamma": gamma, "m": m},
                grads, ["alphas", "means", "icf"])
    p.objective = lambda: K.gmm_objective(*data)
    p.adjoint = (K.gmm_adjoint, data + tuple(np.zeros_like(g) for g in grads))
    return p


def _lotka_volterra(size: str, shrink: int) -> Problem:
    steps = 10_000 // shrink
    pp = np.array([1.5, 1.0, 3.0, 1.0])
    u0, v0, dt = 1.0, 1.0, 1e-3
    dp = np.zeros(4)
    K.lotka_volterra_adjoint(pp, u0, v0, dt, steps, dp)
    p = Problem("K4", f"K4 Lotka-Volterra RK4 {steps:,} steps", K.lotka_volterra,
                (pp, u0, v0, dt, steps),
                {"p": pp, "u0": u0, "v0": v0, "dt": dt, "steps": steps}, [dp], ["p"])
    p.objective = lambda: K.lotka_volterra(pp, u0, v0, dt, steps)
    p.adjoint = (K.lotka_volterra_adjoint, (pp, u0, v0, dt, steps, np.zeros(4)))
    return p


def _diffusion(size: str, shrink: int) -> Problem:
    cells, steps = 1000, 1000 // shrink
    c = 0.25
    u = np.random.default_rng(2).standard_normal(cells)
    du = np.zeros(cells)
    K.diffusion_adjoint(u, c, steps, du)
    p = Problem("K5", f"K5 diffusion {cells} cells x {steps} steps", K.diffusion, (u, c, steps),
                {"u": u, "c": c, "steps": steps}, [du], ["u"])
    p.objective = lambda: K.diffusion(u, c, steps)
    p.adjoint = (K.diffusion_adjoint, (u, c, steps, np.zeros(cells)))
    return p


KEYS = ("K1", "K2", "K3", "K3L", "K4", "K5")
LARGE_ONLY = ("K3L",)   # left out of a --small run


def make(key: str, size: str = "full", shrink: int = 1) -> Problem:
    """Kernel ``key`` at ``size`` ("full" or "small"), its time steps divided by ``shrink``
    (K4, K5 only: the other kernels have no sequential length to shorten)."""
    if shrink != 1 and key not in ("K4", "K5"):
        raise ValueError(f"{key} cannot be shrunk")
    return {"K1": lambda: _taylor(size), "K2": lambda: _matmul(size),
            "K3": lambda: _gmm(key), "K3L": lambda: _gmm(key),
            "K4": lambda: _lotka_volterra(size, shrink),
            "K5": lambda: _diffusion(size, shrink)}[key]()


# --- GMM helpers shared by the vectorized peers --------------------------------------------

def gmm_lower_gather(d: int) -> np.ndarray:
    """Indices that build the d x d strictly lower triangle L of Q from one row of icf with a
    zero put in front: ``concat([0], icf[d:])[idx].reshape(d, d)``.

    A gather rather than an indexed assignment because HIPS autograd cannot differentiate
    assignment; JAX and PyTorch use the same gather, so that the three compute alike. icf
    stores L column by column: L[j, i] (j > i) is icf[d + position], position counting
    (i, j) pairs in the order of kernels.gmm_objective's loops."""
    idx = np.zeros((d, d), dtype=np.int64)
    at = 1
    for i in range(d):
        for j in range(i + 1, d):
            idx[j, i] = at
            at += 1
    return idx.reshape(-1)


def gmm_constant(d: int, k: int, n: int, gamma: float, m: int) -> float:
    """The terms of the GMM objective that depend on no differentiated input (the Gaussian
    normalisation and the Wishart prior's log-normaliser)."""
    nn = d + m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi)
    lgd += sum(math.lgamma(0.5 * nn + 0.5 * (1 - j)) for j in range(1, d + 1))
    c = nn * d * (math.log(gamma) - 0.5 * math.log(2.0)) - lgd
    return -n * d * 0.5 * math.log(2.0 * math.pi) - k * c
