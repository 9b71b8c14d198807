"""GradBench's ``gmm`` eval: the log posterior of a Gaussian mixture model and its gradient.

``objective`` is the README's simplified form (GradBench's ``gmm.hpp``): with
``Q_k = Q(q_k, l_k)`` lower triangular (diagonal ``exp(q_k)``, strictly lower part ``l_k``
filled column by column) and ``beta_ik = alpha_k + sum(q_k) - |Q_k (x_i - mu_k)|^2 / 2``,

    F = -N (D/2 log 2 pi + lse(alpha)) + sum_i lse(beta_i)
        + K (n D log(gamma / sqrt 2) - log Gamma_D(n/2))
        - gamma^2 / 2 sum_k |Q_k|_F^2 + m sum_k sum(q_k),      n = D + m + 1.

``jacobian`` is its gradient with respect to ``alpha``, ``mu``, ``q`` and ``l`` by one reverse
sweep of pyzyme (:func:`pyzyme.grad` with four argnums), called from ``@njit`` code, built with
subnormal numbers flushed to zero (``pyzyme.options(flush_subnormals=True)``, as JAX computes
on CPUs): a component far from a point has a weight ``exp(beta_ik - max_k beta_ik)`` that
underflows, to a subnormal at times, and that weight scales the adjoint of every entry of
``Q_k (x_i - mu_k)``: D^2 / 2 multiplications of subnormals at about 150 cycles each. At D = 64
on GradBench's inputs the gradient took 3.6-4.5x the primal's time, 2.1-2.7x flushed. The
values flushed are below 2.2e-308: the gradient differs from IEEE arithmetic's by less.
"""

import math

import numba
import numpy as np

import pyzyme
from pyzyme.gradbench.evals.lse import logsumexp
from pyzyme.gradbench.protocol import Function, to_json

__all__ = ["FUNCTIONS", "objective", "jacobian"]


@numba.njit
def _log_wishart_prior(q, l, m, gamma):
    """The Wishart prior's log density summed over the components' precision matrices."""
    k, d = q.shape
    n = d + m + 1
    log_gamma_d = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        log_gamma_d += math.lgamma(0.5 * n + 0.5 * (1 - j))
    per_component = n * d * (math.log(gamma) - 0.5 * math.log(2.0)) - log_gamma_d
    out = 0.0
    for c in range(k):
        frobenius = 0.0
        sum_q = 0.0
        for a in range(d):
            diag = np.exp(q[c, a])
            frobenius += diag * diag
            sum_q += q[c, a]
        for a in range(l.shape[1]):
            frobenius += l[c, a] * l[c, a]
        out += 0.5 * gamma * gamma * frobenius - m * sum_q
    return k * per_component - out


@numba.njit
def objective(alpha, mu, q, l, x, m, gamma):
    """The log posterior of the data ``x`` (N x D) under the mixture (``alpha``, ``mu``,
    ``q``, ``l``) with a Wishart prior of ``m`` extra degrees of freedom and precision
    ``gamma``."""
    n, d = x.shape
    k = alpha.shape[0]
    diags = np.exp(q)
    sum_qs = np.empty(k)
    for c in range(k):
        sum_qs[c] = np.sum(q[c])
    centered = np.empty(d)
    transformed = np.empty(d)
    beta = np.empty(k)
    total = 0.0
    for i in range(n):
        for c in range(k):
            for a in range(d):
                centered[a] = x[i, a] - mu[c, a]
            for a in range(d):
                transformed[a] = diags[c, a] * centered[a]
            # Q_k's strictly lower part, column by column.
            index = 0
            for a in range(d):
                for b in range(a + 1, d):
                    transformed[b] += l[c, index] * centered[a]
                    index += 1
            squared = 0.0
            for a in range(d):
                squared += transformed[a] * transformed[a]
            beta[c] = alpha[c] + sum_qs[c] - 0.5 * squared
        total += logsumexp(beta)
    likelihood = -n * (0.5 * d * math.log(2.0 * math.pi) + logsumexp(alpha)) + total
    return likelihood + _log_wishart_prior(q, l, m, gamma)


_grad = pyzyme.grad(objective, argnums=(0, 1, 2, 3))


@numba.njit
def _gradient(alpha, mu, q, l, x, m, gamma):
    return _grad(alpha, mu, q, l, x, m, gamma)


def jacobian(alpha, mu, q, l, x, m, gamma):
    """The gradient of :func:`objective` with respect to ``alpha``, ``mu``, ``q`` and ``l``
    (pyzyme's reverse mode, subnormals flushed to zero)."""
    if not _gradient.signatures:
        # The first call compiles _gradient, and pyzyme builds the derivative, under the
        # options in force; later calls skip the context (a microsecond a call). Other argument
        # types, compiled later, would get IEEE arithmetic: the same gradient, slower.
        with pyzyme.options(flush_subnormals=True):
            return _gradient(alpha, mu, q, l, x, m, gamma)
    return _gradient(alpha, mu, q, l, x, m, gamma)


def _prepare(input):
    def matrix(rows, width):
        # A row of l is empty when d = 1: shape it (k, 0), not (k,).
        return np.asarray(rows, dtype=np.float64).reshape(len(rows), width)

    d, k = int(input["d"]), int(input["k"])
    return (np.asarray(input["alpha"], dtype=np.float64), matrix(input["mu"], d),
            matrix(input["q"], d), matrix(input["l"], d * (d - 1) // 2),
            matrix(input["x"], d), int(input["m"]), float(input["gamma"]))


def _jacobian_output(gradients):
    alpha, mu, q, l = gradients
    return {"alpha": to_json(alpha), "mu": to_json(mu), "q": to_json(q), "l": to_json(l)}


FUNCTIONS = {
    "objective": Function(_prepare, objective, float, spread=True),
    "jacobian": Function(_prepare, jacobian, _jacobian_output, spread=True),
}
