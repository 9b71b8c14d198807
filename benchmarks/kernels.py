"""Benchmark kernels: each a Numba primal and its adjoint written by hand in Numba.

The hand-written adjoint is what a careful person writes for the same gradient: the ideal that
an AD tool is measured against, and the reference its gradient is checked with. Adjoints follow
reverse mode's conventions: a gradient with respect to an array is *added* into the shadow array
passed in (as ``Duplicated(x, dx)`` does); a gradient with respect to a float is returned.

K1 ``taylor(x, n)``: sum_{i=1}^{n-1} x**i / i; derivative in ``x``.
K2 ``matmul(A, B, C)``: C = A @ B as three nested loops; VJP dA += dC @ B.T, dB += A.T @ dC.
K3 ``gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m)``: ADBench's GMM
   objective (log-likelihood plus Wishart prior); gradient in alphas, means and icf. The
   benchmarks run it as K3 on ADBench's d=10 K=25 n=1000 instance (``read_gmm``) and as K3L on
   d=64 K=200 n=1000 drawn from ADBench's distributions (``generate_gmm``).
K4 ``lotka_volterra(p, u0, v0, dt, steps)``: RK4 on the Lotka-Volterra equations with
   p = (alpha, beta, delta, gamma); loss = u**2 + v**2 at the end; gradient in ``p``.
K5 ``diffusion(u, c, steps)``: explicit 1-D diffusion with fixed ends; loss = sum(u_final**2);
   gradient in the initial ``u``.

The primals call no other jitted function, so a fresh copy of one (:func:`fresh`) compiles and
differentiates from scratch.

:func:`check_adjoints` compares every adjoint with central finite differences on small sizes.
"""

from __future__ import annotations

import math
import types
from pathlib import Path

import numba
import numpy as np

DATA = Path(__file__).resolve().parent / "data"
GMM_D10_K25 = DATA / "gmm_d10_K25_n1000.txt"


def fresh(f):
    """A new ``@njit`` dispatcher on a new copy of ``f``'s Python function: nothing cached."""
    py = f.py_func
    copy = types.FunctionType(py.__code__, py.__globals__, py.__name__, py.__defaults__,
                              py.__closure__)
    return numba.njit(copy)


# --- K1: Taylor series ---------------------------------------------------------------------

@numba.njit
def taylor(x, n):
    s = 0.0
    for i in range(1, n):
        s += x ** i / i
    return s


@numba.njit
def taylor_adjoint(x, n):
    """d taylor / dx = sum_{i=1}^{n-1} x**(i-1): no tape, the terms are independent."""
    g = 0.0
    for i in range(1, n):
        g += x ** (i - 1)
    return g


# --- K2: triple-loop matmul ----------------------------------------------------------------

@numba.njit
def matmul(A, B, C):
    n, k = A.shape
    m = B.shape[1]
    for i in range(n):
        for j in range(m):
            s = 0.0
            for p in range(k):
                s += A[i, p] * B[p, j]
            C[i, j] = s


@numba.njit
def matmul_adjoint(A, B, dA, dB, dC):
    """dA += dC @ B.T and dB += A.T @ dC, loops ordered for contiguous access.

    Unlike reverse mode, which consumes the cotangent (C is overwritten, so its shadow is
    zeroed), ``dC`` is left as it is."""
    n, k = A.shape
    m = B.shape[1]
    for i in range(n):
        for p in range(k):
            s = 0.0
            for j in range(m):
                s += dC[i, j] * B[p, j]
            dA[i, p] += s
    for i in range(n):
        for p in range(k):
            a = A[i, p]
            for j in range(m):
                dB[p, j] += a * dC[i, j]


# --- K3: ADBench GMM -----------------------------------------------------------------------

@numba.njit
def gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m):
    """ADBench's gmm_objective: alphas (K,), means (K, d), icf (K, d*(d+1)/2) (log of Q's
    diagonal, then its strictly lower triangle column by column), x (n, d)."""
    k, d = means.shape
    n = x.shape[0]
    qdiags = np.empty((k, d))
    sum_qs = np.empty(k)
    for ik in range(k):
        s = 0.0
        for j in range(d):
            q = icf[ik, j]
            s += q
            qdiags[ik, j] = math.exp(q)
        sum_qs[ik] = s
    xc = np.empty(d)
    qxc = np.empty(d)
    main = np.empty(k)
    slse = 0.0
    for ix in range(n):
        for ik in range(k):
            for j in range(d):
                xc[j] = x[ix, j] - means[ik, j]
                qxc[j] = qdiags[ik, j] * xc[j]
            idx = d
            for i in range(d):
                for j in range(i + 1, d):
                    qxc[j] += icf[ik, idx] * xc[i]
                    idx += 1
            sq = 0.0
            for j in range(d):
                sq += qxc[j] * qxc[j]
            main[ik] = alphas[ik] + sum_qs[ik] - 0.5 * sq
        mx = main[0]
        for ik in range(1, k):
            if main[ik] > mx:
                mx = main[ik]
        se = 0.0
        for ik in range(k):
            se += math.exp(main[ik] - mx)
        slse += math.log(se) + mx
    mx = alphas[0]
    for ik in range(1, k):
        if alphas[ik] > mx:
            mx = alphas[ik]
    se = 0.0
    for ik in range(k):
        se += math.exp(alphas[ik] - mx)
    lse_alphas = math.log(se) + mx
    # Wishart prior
    nn = d + wishart_m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        lgd += math.lgamma(0.5 * nn + 0.5 * (1 - j))
    c = nn * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - lgd
    prior = 0.0
    for ik in range(k):
        frob = 0.0
        for j in range(d):
            frob += qdiags[ik, j] * qdiags[ik, j]
        for j in range(d, icf.shape[1]):
            frob += icf[ik, j] * icf[ik, j]
        prior += 0.5 * wishart_gamma * wishart_gamma * frob - wishart_m * sum_qs[ik]
    prior -= k * c
    constant = -n * d * 0.5 * math.log(2.0 * math.pi)
    return constant + slse - n * lse_alphas + prior


@numba.njit
def gmm_adjoint(alphas, means, icf, x, wishart_gamma, wishart_m, dalphas, dmeans, dicf):
    """Gradient of :func:`gmm_objective`, added into ``dalphas``, ``dmeans``, ``dicf``.

    Per point: one pass computes xc = x - mu_k, y = Q_k xc and the main terms for every k (xc
    and y kept, K*d each); a second pass spreads the softmax weights w_k back:
    ybar = -w_k y, dmu_k -= Q_k^T ybar, dQdiag_k += ybar * xc, dL_k[j, i] += ybar[j] xc[i]."""
    k, d = means.shape
    n = x.shape[0]
    qdiags = np.empty((k, d))
    for ik in range(k):
        for j in range(d):
            qdiags[ik, j] = math.exp(icf[ik, j])
    sum_qs = np.zeros(k)
    for ik in range(k):
        for j in range(d):
            sum_qs[ik] += icf[ik, j]
    da = np.zeros(k)          # d/d alphas
    dsq = np.zeros(k)         # d/d sum_qs
    dqd = np.zeros((k, d))    # d/d qdiags
    dl = np.zeros_like(icf)   # d/d lower triangle entries (columns d: of icf)
    dm = np.zeros((k, d))
    xcs = np.empty((k, d))
    ys = np.empty((k, d))
    main = np.empty(k)
    t = np.empty(d)
    for ix in range(n):
        for ik in range(k):
            for j in range(d):
                xcs[ik, j] = x[ix, j] - means[ik, j]
                ys[ik, j] = qdiags[ik, j] * xcs[ik, j]
            idx = d
            for i in range(d):
                xi = xcs[ik, i]
                for j in range(i + 1, d):
                    ys[ik, j] += icf[ik, idx] * xi
                    idx += 1
            sq = 0.0
            for j in range(d):
                sq += ys[ik, j] * ys[ik, j]
            main[ik] = alphas[ik] + sum_qs[ik] - 0.5 * sq
        mx = main[0]
        for ik in range(1, k):
            mx = max(mx, main[ik])
        se = 0.0
        for ik in range(k):
            main[ik] = math.exp(main[ik] - mx)
            se += main[ik]
        for ik in range(k):
            w = main[ik] / se
            da[ik] += w
            dsq[ik] += w
            for j in range(d):
                yb = -w * ys[ik, j]
                t[j] = qdiags[ik, j] * yb
                dqd[ik, j] += yb * xcs[ik, j]
            idx = d
            for i in range(d):
                xi = xcs[ik, i]
                ti = 0.0
                for j in range(i + 1, d):
                    yb = -w * ys[ik, j]
                    ti += icf[ik, idx] * yb
                    dl[ik, idx] += yb * xi
                    idx += 1
                t[i] += ti
            for j in range(d):
                dm[ik, j] -= t[j]
    # - n * logsumexp(alphas)
    mx = alphas[0]
    for ik in range(1, k):
        mx = max(mx, alphas[ik])
    se = 0.0
    for ik in range(k):
        se += math.exp(alphas[ik] - mx)
    for ik in range(k):
        da[ik] -= n * math.exp(alphas[ik] - mx) / se
    # Wishart prior
    g2 = wishart_gamma * wishart_gamma
    for ik in range(k):
        dsq[ik] -= wishart_m
        for j in range(d):
            dqd[ik, j] += g2 * qdiags[ik, j]
        for j in range(d, icf.shape[1]):
            dl[ik, j] += g2 * icf[ik, j]
    for ik in range(k):
        dalphas[ik] += da[ik]
        for j in range(d):
            dmeans[ik, j] += dm[ik, j]
            dicf[ik, j] += dsq[ik] + dqd[ik, j] * qdiags[ik, j]
        for j in range(d, icf.shape[1]):
            dicf[ik, j] += dl[ik, j]


def read_gmm(path=GMM_D10_K25):
    """An ADBench GMM instance: ``(alphas, means, icf, x, wishart_gamma, wishart_m)``.

    The text format: ``d k n``; k alphas; k lines of d means; k lines of icf; n lines of d
    points; ``gamma m``."""
    words = Path(path).read_text().split()
    d, k, n = (int(w) for w in words[:3])
    icf_sz = d * (d + 1) // 2
    values = np.array(words[3:3 + k + k * d + k * icf_sz + n * d], dtype=np.float64)
    at = 0
    alphas = values[at:at + k].copy()
    at += k
    means = values[at:at + k * d].reshape(k, d).copy()
    at += k * d
    icf = values[at:at + k * icf_sz].reshape(k, icf_sz).copy()
    at += k * icf_sz
    x = values[at:at + n * d].reshape(n, d).copy()
    at += n * d
    rest = words[3 + at:]
    if len(rest) != 2:
        raise ValueError(f"{path}: expected 'gamma m' after the points, found {rest!r}")
    return alphas, means, icf, x, float(rest[0]), int(float(rest[1]))


def generate_gmm(d, k, n, seed=0):
    """A GMM instance drawn as ADBench draws its own: alphas, icf, x ~ N(0, 1); means ~ U(0, 1);
    gamma = 1, m = 0."""
    rng = np.random.default_rng(seed)
    alphas = rng.standard_normal(k)
    means = rng.uniform(0.0, 1.0, (k, d))
    icf = rng.standard_normal((k, d * (d + 1) // 2))
    x = rng.standard_normal((n, d))
    return alphas, means, icf, x, 1.0, 0


# --- K4: Lotka-Volterra, RK4 ---------------------------------------------------------------

@numba.njit
def lotka_volterra(p, u0, v0, dt, steps):
    """u' = alpha u - beta u v, v' = delta u v - gamma v; p = (alpha, beta, delta, gamma)."""
    a, b, dl, g = p[0], p[1], p[2], p[3]
    u, v = u0, v0
    h = dt
    for _ in range(steps):
        k1u = a * u - b * u * v
        k1v = dl * u * v - g * v
        u2, v2 = u + 0.5 * h * k1u, v + 0.5 * h * k1v
        k2u = a * u2 - b * u2 * v2
        k2v = dl * u2 * v2 - g * v2
        u3, v3 = u + 0.5 * h * k2u, v + 0.5 * h * k2v
        k3u = a * u3 - b * u3 * v3
        k3v = dl * u3 * v3 - g * v3
        u4, v4 = u + h * k3u, v + h * k3v
        k4u = a * u4 - b * u4 * v4
        k4v = dl * u4 * v4 - g * v4
        u = u + h / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u)
        v = v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    return u * u + v * v


@numba.njit
def _lv_vjp(a, b, dl, g, u, v, ku, kv):
    """(ubar, vbar, abar, bbar, dbar, gbar) for the cotangent (ku, kv) of F(u, v; p)."""
    return ((a - b * v) * ku + dl * v * kv, -b * u * ku + (dl * u - g) * kv,
            u * ku, -u * v * ku, u * v * kv, -v * kv)


@numba.njit
def lotka_volterra_adjoint(p, u0, v0, dt, steps, dp):
    """Gradient of :func:`lotka_volterra` in ``p``, added into ``dp``: the forward sweep keeps
    each step's state (2 * steps floats), the reverse sweep recomputes the stages from it."""
    a, b, dl, g = p[0], p[1], p[2], p[3]
    h = dt
    us = np.empty(steps)
    vs = np.empty(steps)
    u, v = u0, v0
    for s in range(steps):
        us[s] = u
        vs[s] = v
        k1u = a * u - b * u * v
        k1v = dl * u * v - g * v
        u2, v2 = u + 0.5 * h * k1u, v + 0.5 * h * k1v
        k2u = a * u2 - b * u2 * v2
        k2v = dl * u2 * v2 - g * v2
        u3, v3 = u + 0.5 * h * k2u, v + 0.5 * h * k2v
        k3u = a * u3 - b * u3 * v3
        k3v = dl * u3 * v3 - g * v3
        u4, v4 = u + h * k3u, v + h * k3v
        k4u = a * u4 - b * u4 * v4
        k4v = dl * u4 * v4 - g * v4
        u = u + h / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u)
        v = v + h / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    ub, vb = 2.0 * u, 2.0 * v
    pa = pb = pd = pg = 0.0
    for s in range(steps - 1, -1, -1):
        u, v = us[s], vs[s]
        k1u = a * u - b * u * v
        k1v = dl * u * v - g * v
        u2, v2 = u + 0.5 * h * k1u, v + 0.5 * h * k1v
        k2u = a * u2 - b * u2 * v2
        k2v = dl * u2 * v2 - g * v2
        u3, v3 = u + 0.5 * h * k2u, v + 0.5 * h * k2v
        k3u = a * u3 - b * u3 * v3
        k3v = dl * u3 * v3 - g * v3
        u4, v4 = u + h * k3u, v + h * k3v
        k1bu, k1bv = h / 6.0 * ub, h / 6.0 * vb
        k2bu, k2bv = h / 3.0 * ub, h / 3.0 * vb
        k3bu, k3bv = h / 3.0 * ub, h / 3.0 * vb
        # k4 = F(y + h k3)
        zu, zv, ga, gb, gd, gg = _lv_vjp(a, b, dl, g, u4, v4, h / 6.0 * ub, h / 6.0 * vb)
        pa += ga
        pb += gb
        pd += gd
        pg += gg
        ub += zu
        vb += zv
        k3bu += h * zu
        k3bv += h * zv
        # k3 = F(y + h/2 k2)
        zu, zv, ga, gb, gd, gg = _lv_vjp(a, b, dl, g, u3, v3, k3bu, k3bv)
        pa += ga
        pb += gb
        pd += gd
        pg += gg
        ub += zu
        vb += zv
        k2bu += 0.5 * h * zu
        k2bv += 0.5 * h * zv
        # k2 = F(y + h/2 k1)
        zu, zv, ga, gb, gd, gg = _lv_vjp(a, b, dl, g, u2, v2, k2bu, k2bv)
        pa += ga
        pb += gb
        pd += gd
        pg += gg
        ub += zu
        vb += zv
        k1bu += 0.5 * h * zu
        k1bv += 0.5 * h * zv
        # k1 = F(y)
        zu, zv, ga, gb, gd, gg = _lv_vjp(a, b, dl, g, u, v, k1bu, k1bv)
        pa += ga
        pb += gb
        pd += gd
        pg += gg
        ub += zu
        vb += zv
    dp[0] += pa
    dp[1] += pb
    dp[2] += pd
    dp[3] += pg


# --- K5: 1-D explicit diffusion ------------------------------------------------------------

@numba.njit
def diffusion(u, c, steps):
    n = u.shape[0]
    v = u.copy()
    w = np.empty_like(u)
    for _ in range(steps):
        w[0] = v[0]
        w[n - 1] = v[n - 1]
        for i in range(1, n - 1):
            w[i] = v[i] + c * (v[i - 1] - 2.0 * v[i] + v[i + 1])
        v, w = w, v
    s = 0.0
    for i in range(n):
        s += v[i] * v[i]
    return s


@numba.njit
def diffusion_adjoint(u, c, steps, du):
    """Gradient of :func:`diffusion` in ``u``, added into ``du``: the step is linear, so the
    reverse sweep applies its transpose ``steps`` times to 2 * u_final and keeps no tape.

    With a the cotangent of one step's output and a' that of its input,
    a'[j] = a[j] + c * (z[j-1] - 2 z[j] + z[j+1]) inside and a'[0] = a[0] + c z[1],
    a'[n-1] = a[n-1] + c z[n-2] at the ends, where z is a with its ends zeroed (the fixed ends
    feed no update). Written as the primal's own stencil over 1..n-2: a loop over 2..n-3
    instead (the transpose written row by row) runs ~10x slower in Numba, unvectorized."""
    n = u.shape[0]
    if n < 3:
        raise ValueError("diffusion_adjoint needs at least 3 cells")
    v = u.copy()
    w = np.empty_like(u)
    for _ in range(steps):
        w[0] = v[0]
        w[n - 1] = v[n - 1]
        for i in range(1, n - 1):
            w[i] = v[i] + c * (v[i - 1] - 2.0 * v[i] + v[i + 1])
        v, w = w, v
    for i in range(n):
        v[i] *= 2.0
    for _ in range(steps):
        first, last = v[0], v[n - 1]
        v[0] = 0.0
        v[n - 1] = 0.0
        for i in range(1, n - 1):
            w[i] = v[i] + c * (v[i - 1] - 2.0 * v[i] + v[i + 1])
        w[0] = first + c * v[1]
        w[n - 1] = last + c * v[n - 2]
        v, w = w, v
    for i in range(n):
        du[i] += v[i]


# --- K6: a softmax over the last axis of 4-D arrays, written with array expressions ---------

@numba.njit
def softmax_4d(x, w):
    """A softmax over the last axis of a 4-D array as NumPy code writes it (the maximum kept
    with a trailing axis of 1 and broadcast back), weighted and summed: Numba's optimizer
    copies each broadcast loop nest once per broadcast test, which makes the first call of
    such code slow (the first-call benchmark's kernel for it)."""
    shape = (x.shape[0], x.shape[1], x.shape[2], 1)
    top = np.empty(shape)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            for k in range(x.shape[2]):
                top[i, j, k, 0] = np.max(x[i, j, k])
    e = np.exp(x - top)
    total = np.sum(e, axis=3).reshape(shape)
    return np.sum(e / total * w)


# --- finite-difference checks --------------------------------------------------------------

def _central(f, x, h=1e-6):
    """Central differences of the scalar ``f()`` in every entry of the array ``x`` (in place)."""
    g = np.empty(x.shape)
    flat, out = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        x0 = flat[i]
        step = h * max(1.0, abs(x0))
        flat[i] = x0 + step
        fp = f()
        flat[i] = x0 - step
        fm = f()
        flat[i] = x0
        out[i] = (fp - fm) / (2.0 * step)
    return g


def _agree(name, fd, adj, rtol=1e-6):
    fd, adj = np.asarray(fd, dtype=np.float64), np.asarray(adj, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(adj))))
    err = float(np.max(np.abs(fd - adj))) / scale
    assert err <= rtol, f"{name}: hand-written adjoint differs from finite differences by {err:.2e}"
    return err


def _check_taylor(rng):
    x = np.array([0.7])
    return _agree("taylor", _central(lambda: taylor(x[0], 50), x), [taylor_adjoint(x[0], 50)])


def _check_matmul(rng):
    # the VJP is the gradient of <dC, A @ B>
    A, B, dC = rng.standard_normal((5, 4)), rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    C = np.empty((5, 3))

    def inner():
        matmul(A, B, C)
        return float(np.sum(dC * C))

    dA, dB = np.zeros_like(A), np.zeros_like(B)
    matmul_adjoint(A, B, dA, dB, dC)
    return max(_agree("matmul dA", _central(inner, A), dA),
               _agree("matmul dB", _central(inner, B), dB))


def _check_gmm(rng):
    # a small instance with m != 0 and gamma != 1, so that every term of the prior counts
    alphas, means, icf, xs, _, _ = generate_gmm(3, 4, 6, int(rng.integers(1 << 30)))
    gamma, m = 1.3, 2
    da, dm, di = np.zeros_like(alphas), np.zeros_like(means), np.zeros_like(icf)
    gmm_adjoint(alphas, means, icf, xs, gamma, m, da, dm, di)

    def gmm():
        return gmm_objective(alphas, means, icf, xs, gamma, m)

    return max(_agree("gmm alphas", _central(gmm, alphas), da),
               _agree("gmm means", _central(gmm, means), dm),
               _agree("gmm icf", _central(gmm, icf), di))


def _check_lotka_volterra(rng):
    p = np.array([1.5, 1.0, 3.0, 1.0])
    dp = np.zeros(4)
    lotka_volterra_adjoint(p, 1.0, 1.0, 0.01, 50, dp)
    return _agree("lotka_volterra", _central(lambda: lotka_volterra(p, 1.0, 1.0, 0.01, 50), p),
                  dp)


def _check_diffusion(rng):
    u = rng.standard_normal(8)
    du = np.zeros(8)
    diffusion_adjoint(u, 0.25, 20, du)
    return _agree("diffusion", _central(lambda: diffusion(u, 0.25, 20), u), du)


_CHECKS = {"K1": _check_taylor, "K2": _check_matmul, "K3": _check_gmm, "K3L": _check_gmm,
           "K4": _check_lotka_volterra, "K5": _check_diffusion}


def check_adjoints(which=("K1", "K2", "K3", "K4", "K5"), seed=0):
    """Assert that the hand-written adjoints of the kernels ``which`` agree with central finite
    differences on small sizes; returns ``{kernel: error}`` (the largest difference over
    max(1, max |gradient|))."""
    return {k: _CHECKS[k](np.random.default_rng(seed)) for k in which}
