"""GradBench's ``saddle`` eval: the saddle point of f(p1, p2) = |p1|^2 - |p2|^2 by nested
gradient descent.

From the input ``start`` (2 floats), gradient descent (:mod:`~pyzyme.gradbench.evals.descent`)
finds the p1 minimising max_p2 f(p1, p2), where each value of the max is itself a gradient
ascent over p2 from ``start``; then one more ascent from ``start`` finds the p2 maximising
f(p1, p2) at that p1. The output is p1 then p2.

Nested AD, both levels by pyzyme: the ascent's gradient of f with respect to p2 (the inner
derivative: ``grad``, reverse mode, or forward mode, a forward ``autodiff_thunk`` called once
per coordinate, as Enzyme's tool calls ``__enzyme_fwddiff``), called inside the ``@njit``
ascent, and the descent's gradient of max_p2 f with respect to p1 (the outer derivative,
``grad`` or a forward thunk again), which differentiates the whole ascent, inner derivatives
included. The functions ``rr``, ``rf``, ``fr``, ``ff`` name the modes of the outer then the
inner derivative; the last ascent uses the inner one. All four give the same point.

Examples
--------
>>> [round(v, 6) for v in FUNCTIONS["rr"].evaluate({"start": [1.0, 1.0]})]
[8e-06, 8e-06, 8e-06, 8e-06]
"""

import numba
import numpy as np

from pyzyme import grad
from pyzyme.gradbench.evals.descent import argmax, argmin, forward_gradient
from pyzyme.gradbench.protocol import Function, to_json

__all__ = ["FUNCTIONS", "ASCENT_GRADIENT", "MAX", "MAX_GRADIENT", "objective"]


@numba.njit
def objective(p1, p2):
    """f(p1, p2) = (p1_0^2 + p1_1^2) - (p2_0^2 + p2_1^2)."""
    return (p1[0] * p1[0] + p1[1] * p1[1]) - (p2[0] * p2[0] + p2[1] * p2[1])


@numba.njit
def _ascended(p2, p1):
    return objective(p1, p2)      # f as a function of the point the inner ascent moves


def _gradient(f, mode: str):
    return grad(f) if mode == "r" else forward_gradient(f, np.ones(2), np.ones(2))


#: inner mode -> d f / d p2, as a function of (p2, p1)
ASCENT_GRADIENT = {mode: _gradient(_ascended, mode) for mode in "rf"}


def _max_over_p2(inner_gradient):
    @numba.njit
    def max_over_p2(p1, start):
        """max_p2 f(p1, p2), by gradient ascent over p2 from ``start``."""
        return objective(p1, argmax(_ascended, inner_gradient, start, (p1,)))
    return max_over_p2


#: inner mode -> max_p2 f(p1, p2) as a function of (p1, start)
MAX = {mode: _max_over_p2(g) for mode, g in ASCENT_GRADIENT.items()}

#: outer mode + inner mode -> d max_p2 f(p1, p2) / d p1, as a function of (p1, start)
MAX_GRADIENT = {outer + inner: _gradient(MAX[inner], outer) for outer in "rf" for inner in "rf"}


def _variant(name: str):
    cost, cost_gradient = MAX[name[1]], MAX_GRADIENT[name]
    ascent_gradient = ASCENT_GRADIENT[name[1]]

    @numba.njit
    def run(start):
        p1 = argmin(cost, cost_gradient, start, (start,))
        p2 = argmax(_ascended, ascent_gradient, start, (p1,))
        return np.concatenate((p1, p2))
    return run


def _prepare(input) -> np.ndarray:
    return np.array(input["start"], dtype=np.float64)


FUNCTIONS = {name: Function(_prepare, _variant(name), to_json) for name in MAX_GRADIENT}
