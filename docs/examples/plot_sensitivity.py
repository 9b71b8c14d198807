"""
Sensitivity of an epidemic simulation
=====================================

An SIR epidemic model integrated with small Euler steps. How does the number of infected people
on each day depend on the transmission rate ``beta`` and the recovery rate ``gamma``? The
Jacobian of the whole infected curve with respect to the two parameters comes from forward mode
(:func:`pyzyme.jacfwd`): two tangents carried through the simulation, one per parameter. The
scaled sensitivities ``p * dI/dp`` show which parameter matters when.
"""

import matplotlib.pyplot as plt
import numba
import numpy as np

import pyzyme

DAYS, SUBSTEPS = 160, 10


@numba.njit
def infected_curve(p, i0):
    beta, gamma = p[0], p[1]
    s, i = 1.0 - i0, i0
    dt = 1.0 / SUBSTEPS
    out = np.empty(DAYS)
    for day in range(DAYS):
        for _ in range(SUBSTEPS):
            new = beta * s * i * dt
            s, i = s - new, i + new - gamma * i * dt
        out[day] = i
    return out


p = np.array([0.3, 0.1])
curve = infected_curve(p, 1e-4)
J = pyzyme.jacfwd(infected_curve)(p, 1e-4)          # shape (DAYS, 2)
print("Jacobian shape:", J.shape, "; peak day:", int(np.argmax(curve)))

# %%
# A finite-difference check of one column.
h = 1e-7
fd = (infected_curve(p + [h, 0.0], 1e-4) - infected_curve(p - [h, 0.0], 1e-4)) / (2 * h)
print("max |dI/dbeta - central difference|:", float(np.max(np.abs(J[:, 0] - fd))))

days = np.arange(1, DAYS + 1)
fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
ax.plot(days, curve, color="k")
ax.set_ylabel("infected fraction")
ax2.plot(days, p[0] * J[:, 0], label=r"$\beta\, \partial I / \partial \beta$")
ax2.plot(days, p[1] * J[:, 1], label=r"$\gamma\, \partial I / \partial \gamma$")
ax2.axhline(0.0, color="gray", lw=0.5)
ax2.set_xlabel("day")
ax2.set_ylabel("scaled sensitivity")
ax2.legend()
fig.suptitle("SIR model: the infected curve and its sensitivities (forward mode)")
fig.tight_layout()
