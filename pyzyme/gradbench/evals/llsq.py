"""GradBench's ``llsq`` eval: a linear least-squares objective and its gradient.

``primal`` is ``y(x) = 1/2 sum_i (s_i - sum_j x_j t_i**j)**2`` over ``n`` sample points
``t_i = -1 + 2 i / (n - 1)`` with targets ``s_i = sign(t_i)`` (GradBench's ``llsq.hpp``: the
polynomial's powers of ``t_i`` kept as a running product). ``gradient`` is ``dy/dx`` by one
reverse sweep of pyzyme (:func:`pyzyme.grad`, ``n`` constant), called from ``@njit`` code.

Examples
--------
>>> FUNCTIONS["primal"].evaluate({"x": [0.0, 1.0], "n": 3})
0.0
>>> FUNCTIONS["gradient"].evaluate({"x": [0.0, 0.0], "n": 3})
[0.0, -2.0]
"""

import numba
import numpy as np

import pyzyme
from pyzyme.gradbench.protocol import Function, to_json

__all__ = ["FUNCTIONS", "llsq", "gradient"]


@numba.njit
def llsq(x, n):
    """Half the sum of squared residuals of the polynomial with coefficients ``x`` against
    ``sign(t)`` at ``n`` points ``t`` spread evenly over [-1, 1]."""
    total = 0.0
    for i in range(n):
        t = -1.0 + i * 2.0 / (n - 1.0)
        residual = np.sign(t)
        power = 1.0
        for j in range(x.shape[0]):
            residual -= x[j] * power
            power *= t
        total += residual * residual
    return total / 2.0


_grad = pyzyme.grad(llsq)


@numba.njit
def gradient(x, n):
    """The gradient of :func:`llsq` with respect to ``x`` (pyzyme's reverse mode)."""
    return _grad(x, n)


def _prepare(input):
    return np.asarray(input["x"], dtype=np.float64), int(input["n"])


FUNCTIONS = {
    "primal": Function(_prepare, llsq, float, spread=True),
    "gradient": Function(_prepare, gradient, to_json, spread=True),
}
