"""GradBench's ``ode`` eval: an ODE solved by Runge-Kutta, and the gradient of its last state.

The ODE (cmpad's ``an_ode``) has ``y_0' = x_0`` and ``y_i' = x_i y_{i-1}`` for ``i > 0``,
``y(0) = 0``; ``primal`` integrates it over ``t`` in ``[0, 2]`` with ``s`` classical
fourth-order Runge-Kutta steps and gives ``y(2)`` (``n`` numbers for ``n`` parameters ``x``).
``gradient`` is ``d y_{n-1}(2) / dx``: one reverse sweep through the Runge-Kutta loop of
:func:`last`, the solver's last component, by ``pyzyme.grad(last)`` called from ``@njit`` code
(no Python between the call and the derivative).

Examples
--------
>>> out = FUNCTIONS["gradient"].evaluate({"x": [1.0, 1.0], "s": 10})
>>> [round(v, 6) for v in out]          # y_1(2) = x_0 x_1 t^2 / 2 exactly; RK4 is exact here
[2.0, 2.0]
"""

import numba
import numpy as np

import pyzyme
from pyzyme.gradbench.protocol import Function, to_json

__all__ = ["FUNCTIONS", "gradient", "last", "solve"]


@numba.njit
def _rate(x, y, z):
    """``z = y'`` at state ``y``."""
    z[0] = x[0]
    for i in range(1, x.shape[0]):
        z[i] = x[i] * y[i - 1]


@numba.njit
def solve(x, s):
    """``y(2)`` by ``s`` Runge-Kutta (RK4) steps from ``y(0) = 0``."""
    n = x.shape[0]
    h = 2.0 / s
    y = np.zeros(n)
    k1 = np.empty(n)
    k2 = np.empty(n)
    k3 = np.empty(n)
    k4 = np.empty(n)
    tmp = np.empty(n)
    for _ in range(s):
        _rate(x, y, k1)
        for i in range(n):
            tmp[i] = y[i] + h * k1[i] / 2.0
        _rate(x, tmp, k2)
        for i in range(n):
            tmp[i] = y[i] + h * k2[i] / 2.0
        _rate(x, tmp, k3)
        for i in range(n):
            tmp[i] = y[i] + h * k3[i]
        _rate(x, tmp, k4)
        for i in range(n):
            y[i] += h * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]) / 6.0
    return y


@numba.njit
def last(x, s):
    """``y_{n-1}(2)``: the component whose gradient the eval asks for."""
    return solve(x, s)[-1]


_d_last = pyzyme.grad(last)


@numba.njit
def gradient(x, s):
    """``d last(x, s) / dx`` by reverse mode."""
    return _d_last(x, s)


def _prepare(input):
    return np.array(input["x"], dtype=np.float64), int(input["s"])


FUNCTIONS = {
    "primal": Function(_prepare, solve, to_json, spread=True),
    "gradient": Function(_prepare, gradient, to_json, spread=True),
}
