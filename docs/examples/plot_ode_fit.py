"""
Fitting an ODE's parameters with SciPy
======================================

Lotka-Volterra predator-prey dynamics, integrated by a fixed-step RK4 loop in Numba, fitted to
noisy observations with ``scipy.optimize.minimize(..., jac=True)``: :func:`pyzyme.value_and_grad`
gives the loss and its gradient with respect to the four rate constants through all the
integration steps, in one reverse sweep.
"""

import matplotlib.pyplot as plt
import numba
import numpy as np
from scipy.optimize import minimize

import pyzyme


@numba.njit
def rhs(p, x, y):
    a, b, c, d = p[0], p[1], p[2], p[3]
    return a * x - b * x * y, c * x * y - d * y


@numba.njit
def simulate(p, x0, y0, dt, steps, out):
    x, y = x0, y0
    out[0, 0], out[0, 1] = x, y
    for k in range(steps):
        k1x, k1y = rhs(p, x, y)
        k2x, k2y = rhs(p, x + 0.5 * dt * k1x, y + 0.5 * dt * k1y)
        k3x, k3y = rhs(p, x + 0.5 * dt * k2x, y + 0.5 * dt * k2y)
        k4x, k4y = rhs(p, x + dt * k3x, y + dt * k3y)
        x += dt / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        y += dt / 6.0 * (k1y + 2.0 * k2y + 2.0 * k3y + k4y)
        out[k + 1, 0], out[k + 1, 1] = x, y


@numba.njit
def loss(p, data, dt):
    steps = data.shape[0] - 1
    traj = np.empty((steps + 1, 2))  # allocated inside: pyzyme gives it a shadow itself
    simulate(p, data[0, 0], data[0, 1], dt, steps, traj)
    s = 0.0
    for k in range(steps + 1):
        s += (traj[k, 0] - data[k, 0]) ** 2 + (traj[k, 1] - data[k, 1]) ** 2
    return s


# %%
# Synthetic observations from known rates, with noise.
true_p = np.array([1.0, 0.4, 0.3, 0.8])
dt, steps = 0.05, 300
clean = np.empty((steps + 1, 2))
simulate(true_p, 2.0, 1.0, dt, steps, clean)
rng = np.random.default_rng(0)
data = clean + 0.05 * rng.standard_normal(clean.shape)
data[0] = clean[0]

# %%
# Fit from a poor guess. ``value_and_grad(loss)`` returns ``(loss, gradient)``, exactly what
# ``minimize(..., jac=True)`` asks for.
fun = pyzyme.value_and_grad(loss)
p0 = np.array([0.7, 0.6, 0.2, 0.6])
res = minimize(lambda p: fun(p, data, dt), p0, jac=True, method="L-BFGS-B",
               bounds=[(0.05, 3.0)] * 4)
print("fitted rates:", np.round(res.x, 3), "true:", true_p, "evaluations:", res.nfev)

fit = np.empty((steps + 1, 2))
simulate(res.x, data[0, 0], data[0, 1], dt, steps, fit)
guess = np.empty((steps + 1, 2))
simulate(p0, data[0, 0], data[0, 1], dt, steps, guess)
t = dt * np.arange(steps + 1)
fig, ax = plt.subplots(figsize=(7, 3.5))
for j, (name, color) in enumerate([("prey", "tab:blue"), ("predators", "tab:red")]):
    ax.plot(t, data[:, j], ".", color=color, ms=3, alpha=0.5, label=f"{name}, observed")
    ax.plot(t, fit[:, j], "-", color=color, label=f"{name}, fitted")
    ax.plot(t, guess[:, j], ":", color=color, alpha=0.7)
ax.set_xlabel("time")
ax.set_title("Lotka-Volterra rates fitted with L-BFGS and pyzyme gradients (dotted: start)")
ax.legend(fontsize=8, ncol=2)
fig.tight_layout()
