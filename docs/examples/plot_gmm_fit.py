"""
Fitting a Gaussian mixture
==========================

A mixture of three isotropic Gaussians fitted to 2-D points by maximum likelihood. The negative
log-likelihood is a plain double loop over points and components with a log-sum-exp written
out by hand; :func:`pyzyme.value_and_grad` differentiates it with respect to all parameters
(means, log-scales, mixture logits, packed in one vector) for SciPy's L-BFGS.
"""

import matplotlib.pyplot as plt
import numba
import numpy as np
from scipy.optimize import minimize

import pyzyme

K = 3


@numba.njit
def neg_log_likelihood(theta, pts):
    # theta: K means (x, y), then K log-scales, then K logits
    mu = theta[:2 * K].reshape((K, 2))
    log_s = theta[2 * K:3 * K]
    logits = theta[3 * K:]
    m = np.max(logits)
    log_norm = m + np.log(np.sum(np.exp(logits - m)))
    total = 0.0
    terms = np.empty(K)
    for i in range(pts.shape[0]):
        for k in range(K):
            dx, dy = pts[i, 0] - mu[k, 0], pts[i, 1] - mu[k, 1]
            s2 = np.exp(2.0 * log_s[k])
            terms[k] = (logits[k] - log_norm - np.log(2.0 * np.pi * s2)
                        - 0.5 * (dx * dx + dy * dy) / s2)
        top = np.max(terms)
        total -= top + np.log(np.sum(np.exp(terms - top)))
    return total / pts.shape[0]


# %%
# Points from three clusters of different sizes and spreads.
rng = np.random.default_rng(3)
centers = np.array([[-2.0, 0.0], [1.5, 1.5], [1.0, -2.0]])
spreads = np.array([0.6, 0.4, 0.8])
counts = np.array([250, 150, 200])
pts = np.concatenate([c + s * rng.standard_normal((n, 2))
                      for c, s, n in zip(centers, spreads, counts)])

theta0 = np.concatenate([rng.standard_normal(2 * K), np.zeros(K), np.zeros(K)])
fun = pyzyme.value_and_grad(neg_log_likelihood)
res = minimize(lambda t: fun(t, pts), theta0, jac=True, method="L-BFGS-B")
mu = res.x[:2 * K].reshape(K, 2)
scale = np.exp(res.x[2 * K:3 * K])
weight = np.exp(res.x[3 * K:]) / np.sum(np.exp(res.x[3 * K:]))
print("means:\n", np.round(mu, 2), "\nscales:", np.round(scale, 2), "weights:",
      np.round(weight, 2), "\nL-BFGS iterations:", res.nit)

# %%
# The fitted density over the points.
gx, gy = np.meshgrid(np.linspace(-4.5, 4, 120), np.linspace(-5, 3.5, 120))
density = sum(w / (2 * np.pi * s * s) * np.exp(-0.5 * ((gx - m[0]) ** 2 + (gy - m[1]) ** 2)
                                                  / (s * s))
              for m, s, w in zip(mu, scale, weight))
fig, ax = plt.subplots(figsize=(5.5, 5))
ax.contourf(gx, gy, density, levels=20, cmap="Blues")
ax.scatter(pts[:, 0], pts[:, 1], s=3, color="k", alpha=0.4)
ax.scatter(mu[:, 0], mu[:, 1], marker="x", s=80, color="tab:red", label="fitted means")
ax.set_aspect("equal")
ax.legend(loc="upper left")
ax.set_title("3-component mixture, maximum likelihood by L-BFGS")
fig.tight_layout()
