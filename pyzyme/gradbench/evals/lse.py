"""GradBench's ``lse`` eval: LogSumExp of a vector and its gradient.

``primal`` is ``max(x) + log(sum(exp(x - max(x))))`` built from its primitives (a max loop, a
sum of exponentials, a log), as the eval asks, not a library logsumexp. ``gradient`` is its
gradient by one reverse sweep of pyzyme (:func:`pyzyme.grad`), called from ``@njit`` code so no
Python runs between the timed call and the derivative.

Examples
--------
>>> round(FUNCTIONS["primal"].evaluate({"x": [0.0, 0.0]}), 9)
0.693147181
>>> FUNCTIONS["gradient"].evaluate({"x": [1.0, 1.0]})
[0.5, 0.5]
"""

import numba
import numpy as np

import pyzyme
from pyzyme.gradbench.protocol import Function, to_json

__all__ = ["FUNCTIONS", "logsumexp", "gradient"]


@numba.njit
def logsumexp(x):
    """``log(sum(exp(x)))``, shifted by the maximum so no exponential overflows."""
    top = x[0]
    for i in range(1, x.shape[0]):
        top = max(top, x[i])
    total = 0.0
    for i in range(x.shape[0]):
        total += np.exp(x[i] - top)
    return np.log(total) + top


_grad = pyzyme.grad(logsumexp)


@numba.njit
def gradient(x):
    """The gradient of :func:`logsumexp` at ``x`` (pyzyme's reverse mode)."""
    return _grad(x)


def _prepare(input):
    return np.asarray(input["x"], dtype=np.float64)


FUNCTIONS = {
    "primal": Function(_prepare, logsumexp, float),
    "gradient": Function(_prepare, gradient, to_json),
}
