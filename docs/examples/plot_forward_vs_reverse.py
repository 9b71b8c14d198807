"""
Forward or reverse mode?
========================

Forward mode gives the derivative along one direction per sweep; a whole gradient of ``n``
inputs takes ``n`` directions. Reverse mode gives the whole gradient in one sweep, whatever
``n`` is. This example times both on the same function (a smoothness energy over a vector) as
``n`` grows, as multiples of the function's own time. The figures come from the machine that
built this page: expect the shape, not the numbers (at small n, the microseconds of a call from
Python weigh more than the sweeps).
"""

import time

import matplotlib.pyplot as plt
import numba
import numpy as np

import pyzyme
from pyzyme import Forward, Reverse, gradient


@numba.njit
def energy(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i]
        s += np.sqrt(1.0 + d * d)
    return s


def best_time(fn, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


sizes = [8, 32, 128, 512]
rows = []
for n in sizes:
    x = np.linspace(0.0, 1.0, n) ** 2
    g_rev = gradient(Reverse, energy, x)
    g_fwd = np.array(gradient(Forward, energy, x))      # n directions
    assert np.allclose(g_rev, g_fwd, rtol=1e-12, atol=1e-14)
    primal = best_time(lambda: energy(x))
    rows.append((best_time(lambda: gradient(Reverse, energy, x)) / primal,
                 best_time(lambda: gradient(Forward, energy, x)) / primal))
    print(f"n = {n:4d}: reverse {rows[-1][0]:8.1f}x, forward {rows[-1][1]:8.1f}x the primal")

# %%
rows = np.array(rows)
fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(sizes, rows[:, 1], "o-", label="forward mode, n directions")
ax.loglog(sizes, rows[:, 0], "s-", label="reverse mode, one sweep")
ax.set_xlabel("n (inputs)")
ax.set_ylabel("gradient time / function time")
ax.set_title("Cost of a full gradient, called from Python")
ax.legend()
fig.tight_layout()
