"""A Numba kernel inside a JAX model: one training step, ``pyzyme.jax.wrap`` vs pure JAX.

The model: a small MLP maps each grid point's coordinate to a diffusivity ``kappa(x)``; an
explicit 1-D heat-equation solver (the kernel: ``steps`` time steps on ``n`` points) carries an
initial profile forward under it; the loss is the squared distance to a target profile. A
training step is ``jax.jit`` of the loss's ``value_and_grad`` and a gradient-descent update of
the MLP's weights: JAX differentiates the MLP, pyzyme the solver (its reverse mode, called by
XLA through the FFI handler). The same solver in JAX is a ``lax.fori_loop`` of the vectorized
update. Rows: time per step (median of batches) and first call (trace, compile, run once), and
the largest difference between the two losses and gradients.

    python benchmarks/jax_wrap.py [--n 128] [--steps 400] [--iters 200]
"""

from __future__ import annotations

import argparse
import sys
import time

import numba
import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    print("JAX is not installed (pip install pyzyme[jax]): nothing to measure")
    sys.exit(0)

import pyzyme.jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


@numba.njit
def heat(u0, kappa, steps):
    """``steps`` explicit Euler steps of ``u_t = kappa(x) u_xx`` with fixed ends."""
    n = u0.shape[0]
    u = u0.copy()
    v = u0.copy()
    for _ in range(steps):
        for i in range(1, n - 1):
            v[i] = u[i] + kappa[i] * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        for i in range(1, n - 1):
            u[i] = v[i]
    return u


def heat_jax(u0, kappa, steps):
    def step(_, u):
        lap = u[:-2] - 2.0 * u[1:-1] + u[2:]
        return u.at[1:-1].add(kappa[1:-1] * lap)
    return jax.lax.fori_loop(0, steps, step, u0)


heat_wrapped = pyzyme.jax.wrap(heat, lambda u0, kappa, steps: u0)


def model(solver, steps):
    def loss(params, xs, u0, target):
        w1, b1, w2, b2 = params
        hidden = jnp.tanh(xs[:, None] * w1 + b1)
        kappa = 0.4 * jax.nn.sigmoid(hidden @ w2 + b2)     # < 0.5: the scheme is stable
        u = solver(u0, kappa, steps)
        return jnp.mean((u - target) ** 2)

    @jax.jit
    def train_step(params, xs, u0, target):
        value, grads = jax.value_and_grad(loss)(params, xs, u0, target)
        return value, grads, jax.tree_util.tree_map(lambda p, g: p - 0.5 * g, params, grads)
    return train_step


def timed(step, args, iters: int):
    """First call (trace, compile, run) and the median time per step over batches."""
    start = time.perf_counter()
    out = step(*args)
    jax.block_until_ready(out)
    first = time.perf_counter() - start
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(max(iters // 5, 1)):
            out = step(*args)
        jax.block_until_ready(out)
        batches.append((time.perf_counter() - start) / max(iters // 5, 1))
    return first, float(np.median(batches)), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--iters", type=int, default=200)
    opts = parser.parse_args()
    rng = np.random.default_rng(0)
    xs = jnp.linspace(0.0, 1.0, opts.n)
    u0 = jnp.sin(np.pi * xs) + 0.3 * jnp.sin(3 * np.pi * xs)
    target = heat_jax(u0, 0.1 + 0.2 * xs, opts.steps)
    params = (jnp.asarray(rng.normal(size=16)), jnp.zeros(16),
              jnp.asarray(rng.normal(size=16) / 4), jnp.zeros(()))
    args = (params, xs, u0, target)
    rows = {}
    for name, solver in (("pyzyme.jax.wrap(heat) (Numba kernel)", heat_wrapped),
                         ("JAX lax.fori_loop", heat_jax)):
        rows[name] = timed(model(solver, opts.steps), args, opts.iters)
    (_, _, (v1, g1, _)), (_, _, (v2, g2, _)) = rows.values()
    diff = max(float(jnp.max(jnp.abs(a - b)))
               for a, b in zip(jax.tree_util.tree_leaves((v1, g1)),
                               jax.tree_util.tree_leaves((v2, g2))))
    print(f"Training step (jit(value_and_grad) + update) of an MLP diffusivity through a "
          f"heat-equation solver: n={opts.n}, {opts.steps} time steps, float64, "
          f"jax {jax.__version__}")
    print("| solver | time per step (ms) | first call (s) |")
    print("| --- | ---: | ---: |")
    for name, (first, per_step, _) in rows.items():
        print(f"| {name} | {1e3 * per_step:.3f} | {first:.2f} |")
    print(f"max |difference| of loss and gradients between the two: {diff:.1e}")


if __name__ == "__main__":
    main()
