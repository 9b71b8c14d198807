"""
Designing a heat stencil's initial state
========================================

Which initial temperature profile diffuses, after 200 explicit steps, into a given target
profile? Heat diffusion smooths, so the problem is ill-posed; a gradient-based design with a
smoothness penalty finds a plausible answer. The gradient of the mismatch with respect to all
128 initial values is one reverse sweep through the 200 steps, and the descent loop itself is
``@njit`` code calling :func:`pyzyme.grad` every step.
"""

import matplotlib.pyplot as plt
import numba
import numpy as np

import pyzyme

N, STEPS, NU = 128, 200, 0.25


@numba.njit
def diffuse(u0, steps):
    u = u0.copy()
    v = np.empty_like(u)
    for _ in range(steps):
        v[0], v[-1] = 0.0, 0.0                   # the ends held at zero
        for i in range(1, u.shape[0] - 1):
            v[i] = u[i] + NU * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u, v = v, u
    return u


@numba.njit
def objective(u0, target, steps, smooth):
    u = diffuse(u0, steps)
    s = 0.0
    for i in range(u.shape[0]):
        s += (u[i] - target[i]) ** 2
    for i in range(u0.shape[0] - 1):
        s += smooth * (u0[i + 1] - u0[i]) ** 2
    return s


g = pyzyme.grad(objective)


@numba.njit
def design(u0, target, steps, smooth, lr, iterations, history):
    for k in range(iterations):
        u0 = u0 - lr * g(u0, target, steps, smooth)
        history[k] = objective(u0, target, steps, smooth)
    return u0


# %%
# The target: two warm regions of different heights.
x = np.linspace(0.0, 1.0, N)
target = 0.8 * np.exp(-((x - 0.3) / 0.08) ** 2) + 0.5 * np.exp(-((x - 0.7) / 0.05) ** 2)
history = np.empty(3000)
u0 = design(np.zeros(N), target, STEPS, 2e-2, 0.8, history.shape[0], history)
print(f"objective: {objective(np.zeros(N), target, STEPS, 2e-2):.3e} -> {history[-1]:.3e}")

fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9, 3.5), gridspec_kw={"width_ratios": [2, 1]})
ax.plot(x, target, "k--", label="target after 200 steps")
ax.plot(x, u0, color="tab:red", label="designed initial state")
ax.plot(x, diffuse(u0, STEPS), color="tab:blue", label="it, after 200 steps")
ax.set_xlabel("position")
ax.legend(fontsize=8)
ax2.semilogy(history)
ax2.set_xlabel("descent step")
ax2.set_title("objective", fontsize=10)
fig.tight_layout()
