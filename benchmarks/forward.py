"""Forward mode: derivative time over Numba primal time, on loop-heavy kernels, in one process.

Each kernel is timed as Numba runs it (the primal) and as pyzyme's forward derivative runs it
(primal and one directional derivative), both called from an @njit driver loop so that Python
call overhead does not count; finite differences (two primal calls) are shown for scale.
Target (DESIGN.md): forward derivative <= 1.5x the primal on loop-heavy kernels.

    python benchmarks/forward.py
"""

from __future__ import annotations

import math
import time

import numba
import numpy as np

import pyzyme
from pyzyme import Duplicated, Forward

import kernels as K  # noqa: E402 - K1's series; after pyzyme, whose capture hook comes first


@numba.njit
def taylor(x, n):
    s = 0.0
    term = 1.0
    for i in range(1, n):
        s += term
        term *= x / i
    return s


@numba.njit
def matmul_sum(a, b):
    n, k = a.shape
    m = b.shape[1]
    s = 0.0
    for i in range(n):
        for j in range(m):
            c = 0.0
            for p in range(k):
                c += a[i, p] * b[p, j]
            s += c * c
    return s


@numba.njit
def rk4(y0, k, steps):
    y = y0
    h = 0.01
    for _ in range(steps):
        k1 = -k * y + math.sin(y)
        k2 = -k * (y + 0.5 * h * k1) + math.sin(y + 0.5 * h * k1)
        k3 = -k * (y + 0.5 * h * k2) + math.sin(y + 0.5 * h * k2)
        k4 = -k * (y + h * k3) + math.sin(y + h * k3)
        y = y + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


@numba.njit
def diffusion(u, steps):
    v = u.copy()
    w = np.empty_like(u)
    n = u.shape[0]
    for _ in range(steps):
        w[0] = v[0]
        w[n - 1] = v[n - 1]
        for i in range(1, n - 1):
            w[i] = v[i] + 0.1 * (v[i - 1] - 2.0 * v[i] + v[i + 1])
        v, w = w, v
    s = 0.0
    for i in range(n):
        s += v[i] * v[i]
    return s


@numba.njit
def diffusion_by_hand(u, du, steps):
    """The forward derivative of ``diffusion`` written by hand: the baseline a person gets."""
    v, dv = u.copy(), du.copy()
    w, dw = np.empty_like(u), np.empty_like(u)
    n = u.shape[0]
    for _ in range(steps):
        w[0], dw[0] = v[0], dv[0]
        w[n - 1], dw[n - 1] = v[n - 1], dv[n - 1]
        for i in range(1, n - 1):
            w[i] = v[i] + 0.1 * (v[i - 1] - 2.0 * v[i] + v[i + 1])
            dw[i] = dv[i] + 0.1 * (dv[i - 1] - 2.0 * dv[i] + dv[i + 1])
        v, w = w, v
        dv, dw = dw, dv
    s, ds = 0.0, 0.0
    for i in range(n):
        s += v[i] * v[i]
        ds += 2.0 * v[i] * dv[i]
    return s, ds


def _best(fn, repeat=5):
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _loop(fn, tangent: bool):
    """An @njit loop calling ``fn(*args)`` ``reps`` times, so Python's call cost stays out."""
    if tangent:
        @numba.njit
        def loop(args, reps):
            acc = 0.0
            for _ in range(reps):
                acc += fn(*args)[1]
            return acc
    else:
        @numba.njit
        def loop(args, reps):
            acc = 0.0
            for _ in range(reps):
                acc += fn(*args)
            return acc
    return loop


def main() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((40, 40)), rng.standard_normal((40, 40))
    da = rng.standard_normal((40, 40))
    u = rng.standard_normal(2000)
    du = rng.standard_normal(2000)
    cases = [
        ("taylor (n=1000)", taylor, (Duplicated(0.5, 1.0), 1000), 20000),
        ("powers x**i/i (n=1000)", K.taylor, (Duplicated(0.5, 1.0), 1000), 2000),
        ("matmul 40x40 (sum c^2)", matmul_sum, (Duplicated(a, da), b), 200),
        ("rk4 (1000 steps)", rk4, (Duplicated(0.3, 1.0), 2.0, 1000), 2000),
        ("diffusion 2000 x 50", diffusion, (Duplicated(u, du), 50), 50),
    ]
    print(f"{'kernel':28} {'primal':>10} {'forward':>10} {'ratio':>7} {'fin.diff':>9}")
    for name, f, args, reps in cases:
        primals = tuple(x.val if isinstance(x, Duplicated) else x for x in args)
        pyzyme.autodiff(Forward, f, Duplicated, *args)  # compile
        plan = next(iter(v for k, v in pyzyme.api.plans.CACHE._plans.items()
                         if k[1] is f))
        shadows = tuple(x.dval for x in args if isinstance(x, Duplicated))
        fwd = plan.function
        primal_loop, fwd_loop = _loop(f, False), _loop(fwd, True)
        primal_loop(primals, 1)
        fwd_loop(primals + shadows, 1)
        t_primal = _best(lambda: primal_loop(primals, reps)) / reps
        t_fwd = _best(lambda: fwd_loop(primals + shadows, reps)) / reps
        print(f"{name:28} {t_primal * 1e6:8.1f}us {t_fwd * 1e6:8.1f}us {t_fwd / t_primal:6.2f}x"
              f" {2.0:8.2f}x")
    # The same derivative written by hand in Numba, its tangent beside the primal's statement
    # in one loop: four 16 KB rows streamed at once, which the first-level cache does not hold
    # (pyzyme runs the tangent in a loop of its own: pyzyme.diff.forward.fission).
    by_hand = _loop(diffusion_by_hand, True)
    by_hand((u, du, 50), 1)
    t_hand = _best(lambda: by_hand((u, du, 50), 50)) / 50
    primal = _loop(diffusion, False)
    t_primal = _best(lambda: primal((u, 50), 50)) / 50
    print(f"{'diffusion, tangent by hand':28} {t_primal * 1e6:8.1f}us {t_hand * 1e6:8.1f}us "
          f"{t_hand / t_primal:6.2f}x")

if __name__ == "__main__":
    main()
