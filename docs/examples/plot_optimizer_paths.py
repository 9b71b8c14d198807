"""
Gradient descent and Newton's method on Rosenbrock's valley
===========================================================

Two optimizers written entirely in ``@njit`` code on the Rosenbrock function: gradient descent
calling :func:`pyzyme.grad` each step, and Newton's method with a backtracking line search using
the gradient and the Hessian-vector products of :func:`pyzyme.hvp_and_gradient`. Newton follows
the curved valley in a few dozen steps where gradient descent needs thousands.
"""

import matplotlib.pyplot as plt
import numba
import numpy as np

import pyzyme


@numba.njit
def rosenbrock(p):
    return (1.0 - p[0]) ** 2 + 100.0 * (p[1] - p[0] ** 2) ** 2


grad = pyzyme.grad(rosenbrock)


@numba.njit
def descent(p, lr, steps, path):
    for k in range(steps):
        path[k] = p
        p = p - lr * grad(p)
    return p


def newton(p, steps):
    path = [p.copy()]
    for _ in range(steps):
        # the Hessian column by column: one Hessian-vector product per direction
        cols = [pyzyme.hvp_and_gradient(rosenbrock, p, e) for e in np.eye(2)]
        H = np.column_stack([c[0] for c in cols])
        g = cols[0][1]
        if np.linalg.norm(g) < 1e-10:
            break
        step = np.linalg.solve(H, -g)
        t = 1.0
        while rosenbrock(p + t * step) > rosenbrock(p) + 1e-4 * t * (g @ step):
            t *= 0.5
        p = p + t * step
        path.append(p.copy())
    return np.array(path)


start = np.array([-1.2, 1.0])
gd_path = np.empty((20000, 2))
end = descent(start, 1e-3, gd_path.shape[0], gd_path)
nt_path = newton(start, 100)
print(f"gradient descent: {gd_path.shape[0]} steps to {np.round(end, 4)}")
print(f"Newton: {len(nt_path) - 1} steps to {np.round(nt_path[-1], 6)}")

gx, gy = np.meshgrid(np.linspace(-1.6, 1.6, 200), np.linspace(-0.6, 1.6, 200))
fig, ax = plt.subplots(figsize=(6.5, 4.5))
ax.contour(gx, gy, (1 - gx) ** 2 + 100 * (gy - gx ** 2) ** 2, levels=np.logspace(-1, 3, 14),
           cmap="Greys", linewidths=0.7)
ax.plot(gd_path[::200, 0], gd_path[::200, 1], ".-", ms=3, label="gradient descent (every 200th)")
ax.plot(nt_path[:, 0], nt_path[:, 1], "o-", ms=4, label="Newton (hvp_and_gradient)")
ax.plot(1, 1, "r*", ms=14)
ax.legend(loc="lower right", fontsize=8)
ax.set_title("Rosenbrock: optimizer paths from (-1.2, 1)")
fig.tight_layout()
