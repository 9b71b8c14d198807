"""JAX gradients of K1..K5, written as a JAX user would: ``jax.jit(jax.grad(f))``.

Loops become ``lax.fori_loop`` (reverse mode turns it into a scan that keeps each step's
residuals); where a JAX user would vectorize instead (Taylor, matmul, GMM, the diffusion
stencil) the vectorized form is used, and for Taylor both are shown. Inputs are moved to the
device (CPU here) once, as a JAX program keeps its arrays there; each call blocks on its result.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)  # float64 everywhere, as the Numba kernels

import jax.numpy as jnp  # noqa: E402  (after enabling x64)
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

import _problems  # noqa: E402

NAME = "JAX"


def version() -> str:
    return f"jax {jax.__version__}, jaxlib {jax.lib.__version__}"


def _out(*arrays) -> list[np.ndarray]:
    # np.asarray waits for the computation: JAX dispatches asynchronously
    return [np.asarray(a) for a in arrays]


def taylor_vectorized(p):
    n = p.data["n"]

    def f(x):
        i = jnp.arange(1, n, dtype=jnp.float64)
        return jnp.sum(x ** i / i)

    g = jax.jit(jax.grad(f))
    x = jnp.asarray(p.data["x"][0])
    return lambda: _out(jnp.reshape(g(x), (1,)))


def taylor_loop(p):
    n = p.data["n"]

    def f(x):
        def body(i, s):
            fi = i.astype(jnp.float64)
            return s + x ** fi / fi
        return lax.fori_loop(1, n, body, jnp.float64(0.0))

    g = jax.jit(jax.grad(f))
    x = jnp.asarray(p.data["x"][0])
    return lambda: _out(jnp.reshape(g(x), (1,)))


def matmul_vjp(p):
    # a VJP is what is asked for: jax.vjp, rather than the grad of <ct, A @ B>
    g = jax.jit(lambda A, B, ct: jax.vjp(jnp.matmul, A, B)[1](ct))
    A, B, ct = (jnp.asarray(p.data[k]) for k in ("A", "B", "ct"))
    return lambda: _out(*g(A, B, ct))


def gmm_vectorized(p):
    x = jnp.asarray(p.data["x"])
    n, d = p.data["x"].shape
    k = p.data["means"].shape[0]
    gamma, m = p.data["gamma"], p.data["m"]
    gather = jnp.asarray(_problems.gmm_lower_gather(d))
    const = _problems.gmm_constant(d, k, n, gamma, m)

    def f(alphas, means, icf, x):
        logdiag = icf[:, :d]
        lower = jnp.concatenate([jnp.zeros((k, 1)), icf[:, d:]], axis=1)[:, gather]
        Q = lower.reshape(k, d, d) + jax.vmap(jnp.diag)(jnp.exp(logdiag))
        xc = x[:, None, :] - means[None, :, :]              # (n, K, d)
        y = jnp.einsum("kij,nkj->nki", Q, xc)
        main = alphas + jnp.sum(logdiag, axis=1) - 0.5 * jnp.sum(y * y, axis=2)
        frob = jnp.sum(jnp.exp(2.0 * logdiag)) + jnp.sum(icf[:, d:] ** 2)
        prior = 0.5 * gamma * gamma * frob - m * jnp.sum(logdiag)
        return jnp.sum(logsumexp(main, axis=1)) - n * logsumexp(alphas) + prior + const

    g = jax.jit(jax.grad(f, argnums=(0, 1, 2)))
    args = [jnp.asarray(p.data[k]) for k in ("alphas", "means", "icf")]
    return lambda: _out(*g(*args, x))


def lotka_volterra_loop(p):
    u0, v0, dt, steps = (p.data[k] for k in ("u0", "v0", "dt", "steps"))

    def f(pp):
        a, b, dl, g = pp[0], pp[1], pp[2], pp[3]

        def rhs(u, v):
            return a * u - b * u * v, dl * u * v - g * v

        def step(_, uv):
            u, v = uv
            k1u, k1v = rhs(u, v)
            k2u, k2v = rhs(u + 0.5 * dt * k1u, v + 0.5 * dt * k1v)
            k3u, k3v = rhs(u + 0.5 * dt * k2u, v + 0.5 * dt * k2v)
            k4u, k4v = rhs(u + dt * k3u, v + dt * k3v)
            return (u + dt / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u),
                    v + dt / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v))

        u, v = lax.fori_loop(0, steps, step, (jnp.float64(u0), jnp.float64(v0)))
        return u * u + v * v

    g = jax.jit(jax.grad(f))
    pp = jnp.asarray(p.data["p"])
    return lambda: _out(g(pp))


def diffusion_loop(p):
    c, steps = p.data["c"], p.data["steps"]

    def f(u):
        def step(_, v):
            return v.at[1:-1].set(v[1:-1] + c * (v[:-2] - 2.0 * v[1:-1] + v[2:]))
        v = lax.fori_loop(0, steps, step, u)
        return jnp.sum(v * v)

    g = jax.jit(jax.grad(f))
    u = jnp.asarray(p.data["u"])
    return lambda: _out(g(u))


# (row label, builder, shrink): shrink > 1 times the kernel with fewer steps, extrapolated
ROWS = {
    "K1": [("JAX jit(grad), vectorized", taylor_vectorized, 1),
           ("JAX jit(grad), fori_loop", taylor_loop, 1)],
    "K2": [("JAX jit(vjp), A @ B", matmul_vjp, 1)],
    "K3": [("JAX jit(grad), vectorized", gmm_vectorized, 1)],
    "K4": [("JAX jit(grad), fori_loop", lotka_volterra_loop, 1)],
    "K5": [("JAX jit(grad), fori_loop over a vectorized step", diffusion_loop, 1)],
}
ROWS["K3L"] = ROWS["K3"]   # the same code at d=64 K=200
