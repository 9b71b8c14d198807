"""
Uncertainty from the Hessian
============================

A radioactive-decay curve ``A exp(-k t) + b`` fitted to noisy counts, and how well the data
pin the parameters down: the Laplace approximation takes the inverse Hessian of the negative
log-likelihood at the optimum as the parameters' covariance. :func:`pyzyme.hessian` computes
it by forward mode over the reverse-mode gradient.
"""

import matplotlib.pyplot as plt
import numba
import numpy as np
from scipy.optimize import minimize

import pyzyme

SIGMA = 0.05


@numba.njit
def nll(p, t, y):
    s = 0.0
    for i in range(t.shape[0]):
        r = p[0] * np.exp(-p[1] * t[i]) + p[2] - y[i]
        s += r * r
    return 0.5 * s / (SIGMA * SIGMA)


rng = np.random.default_rng(7)
t = np.linspace(0.0, 5.0, 40)
true_p = np.array([1.0, 0.8, 0.1])
y = true_p[0] * np.exp(-true_p[1] * t) + true_p[2] + SIGMA * rng.standard_normal(t.size)

fun = pyzyme.value_and_grad(nll)
res = minimize(lambda p: fun(p, t, y), np.array([0.5, 0.3, 0.0]), jac=True, method="BFGS")
H = pyzyme.hessian(lambda p: nll(p, t, y))(res.x)       # the data held constant
cov = np.linalg.inv(H)
stderr = np.sqrt(np.diag(cov))
for name, v, e, tv in zip(["A", "k", "b"], res.x, stderr, true_p):
    print(f"{name} = {v:.3f} +- {e:.3f}   (true {tv})")

# %%
# The fit with a band from parameters drawn from the Laplace approximation, and the joint
# uncertainty of ``A`` and ``k``: the 1- and 2-sigma ellipses of their covariance.
draws = rng.multivariate_normal(res.x, cov, size=300)
tt = np.linspace(0.0, 5.0, 200)
curves = draws[:, :1] * np.exp(-draws[:, 1:2] * tt) + draws[:, 2:3]
lo, hi = np.percentile(curves, [2.5, 97.5], axis=0)

fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.8))
ax.fill_between(tt, lo, hi, color="tab:blue", alpha=0.3, label="95% band")
ax.plot(tt, res.x[0] * np.exp(-res.x[1] * tt) + res.x[2], color="tab:blue", label="fit")
ax.plot(t, y, "k.", label="data")
ax.set_xlabel("t")
ax.legend()
angle = np.linspace(0, 2 * np.pi, 200)
vals, vecs = np.linalg.eigh(cov[:2, :2])
for n_sigma in (1, 2):
    ring = (vecs * (n_sigma * np.sqrt(vals))) @ np.array([np.cos(angle), np.sin(angle)])
    ax2.plot(res.x[0] + ring[0], res.x[1] + ring[1], color="tab:blue")
ax2.scatter(draws[:, 0], draws[:, 1], s=3, color="gray", alpha=0.5)
ax2.plot(*true_p[:2], "r*", ms=12, label="true")
ax2.set_xlabel("A")
ax2.set_ylabel("k")
ax2.legend()
fig.suptitle("Laplace approximation: covariance = inverse Hessian (pyzyme.hessian)")
fig.tight_layout()
