"""K6: an optimizer loop written in @njit that calls a gradient every step, no Python inside.

Gradient descent on the parameters of the Lotka-Volterra RK4 integration (K4 of
:mod:`kernels`): fit ``u(T)^2 + v(T)^2`` to a target. Rows: pyzyme's ``grad(objective)`` called
from the @njit loop; the hand-written adjoint called from the same loop; JAX's
``jit(fori_loop(grad))`` when JAX is installed. Each row gives the time per step over the
Numba primal's time, all measured in one process, and the fitted parameters agree.

    python benchmarks/optimizer.py [--iters 1000] [--steps 10000]
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import kernels as K
import pyzyme


@numba.njit
def objective(p, u0, v0, dt, steps, target):
    r = K.lotka_volterra(p, u0, v0, dt, steps) - target
    return r * r


@numba.njit
def _hand_gradient(p, u0, v0, dt, steps, target):
    r = K.lotka_volterra(p, u0, v0, dt, steps) - target
    dp = np.zeros(4)
    K.lotka_volterra_adjoint(p, u0, v0, dt, steps, dp)
    return 2.0 * r * dp


def descent(gradient):
    @numba.njit
    def descend(p, u0, v0, dt, steps, target, lr, iters):
        for _ in range(iters):
            p = p - lr * gradient(p, u0, v0, dt, steps, target)
        return p
    return descend


def _jax_row(p0, args, lr, iters):
    try:
        import jax
        import jax.numpy as jnp
    except Exception:  # noqa: BLE001 - an optional peer
        return None
    jax.config.update("jax_enable_x64", True)
    u0, v0, dt, steps, target = args

    def lv(p):
        def step(_, state):
            u, v = state
            f = lambda u, v: (p[0] * u - p[1] * u * v, p[2] * u * v - p[3] * v)  # noqa: E731
            k1 = f(u, v)
            k2 = f(u + 0.5 * dt * k1[0], v + 0.5 * dt * k1[1])
            k3 = f(u + 0.5 * dt * k2[0], v + 0.5 * dt * k2[1])
            k4 = f(u + dt * k3[0], v + dt * k3[1])
            return (u + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
                    v + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))
        u, v = jax.lax.fori_loop(0, steps, step, (u0, v0))
        return (u * u + v * v - target) ** 2

    g = jax.grad(lv)
    run = jax.jit(lambda p: jax.lax.fori_loop(0, iters, lambda _, q: q - lr * g(q), p))
    run(jnp.asarray(p0)).block_until_ready()
    t = time.perf_counter()
    out = run(jnp.asarray(p0)).block_until_ready()
    return time.perf_counter() - t, np.asarray(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10_000)
    opts = parser.parse_args()
    p0 = np.array([1.1, 0.4, 0.1, 0.4])
    args = (1.0, 1.0, 1e-3, opts.steps, 2.5)
    lr, iters = 1e-3, opts.iters

    objective(p0, *args)
    t = time.perf_counter()
    for _ in range(20):
        objective(p0, *args)
    primal = (time.perf_counter() - t) / 20

    rows = []
    for name, gradient in (("pyzyme grad(objective) in @njit", pyzyme.grad(objective)),
                           ("hand-written adjoint in @njit", _hand_gradient)):
        descend = descent(gradient)
        t = time.perf_counter()
        descend(p0, *args, lr, 1)
        first = time.perf_counter() - t
        t = time.perf_counter()
        p = descend(p0, *args, lr, iters)
        rows.append((name, (time.perf_counter() - t) / iters, first, p))
    jax_row = _jax_row(p0, args, lr, iters)
    if jax_row is not None:
        rows.append(("JAX jit(fori_loop(grad))", jax_row[0] / iters, float("nan"), jax_row[1]))

    reference = rows[1][3]
    print(f"K6: {iters} gradient-descent steps on Lotka-Volterra RK4 ({opts.steps} steps); "
          f"Numba primal {1e3 * primal:.3f} ms")
    print("| loop | per step / primal | first call (s) | max diff of fitted p from hand |")
    print("| --- | ---: | ---: | ---: |")
    for name, per_step, first, p in rows:
        print(f"| {name} | {per_step / primal:.2f}x | {first:.2f} | "
              f"{np.abs(p - reference).max():.1e} |")


if __name__ == "__main__":
    main()
