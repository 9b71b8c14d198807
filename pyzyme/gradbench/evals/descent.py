"""The gradient descent that GradBench's ``particle`` and ``saddle`` evals nest: a fixed-step
search whose step doubles after ten improvements and halves after a step that did not improve,
stopping when the gradient or the step is below 1e-5 (GradBench's ``multivariate_argmin``).

Both evals differentiate *through* it (the outer derivative of a function that runs this
search with the gradient of another), so it is ``@njit`` code taking the objective and its
gradient as ``@njit`` functions: the derivative of a caller sees the whole search.

Examples
--------
>>> import numba, numpy as np
>>> @numba.njit
... def bowl(x, c):
...     return 10.0 * (x[0] - c) ** 2
>>> @numba.njit
... def slope(x, c):
...     return np.array([20.0 * (x[0] - c)])
>>> round(float(argmin(bowl, slope, np.array([0.0]), (3.0,))[0]), 3)
3.0
"""

import numba
import numpy as np

from pyzyme import Duplicated, DuplicatedNoNeed, Forward, autodiff_thunk

__all__ = ["argmin", "argmax", "forward_gradient"]

_TOLERANCE = 1e-5


@numba.njit
def descend(objective, gradient, x0, sign, fixed):
    """The point from ``x0`` that gradient descent on ``sign * objective(x, *fixed)`` stops
    at (sign 1: a minimum, -1: a maximum); ``gradient(x, *fixed)`` gives d objective / dx.
    ``fixed`` is a tuple (the functions are not packed with it: a tuple holding functions
    is Numba's experimental first-class function type)."""
    n = x0.shape[0]
    x = x0.copy()
    x_new = np.empty(n)
    fx = sign * objective(x, *fixed)
    gx = gradient(x, *fixed)
    eta = 1e-5
    improved = 0
    while True:
        if _norm(gx) <= _TOLERANCE:
            return x
        if improved == 10:
            eta *= 2.0
            improved = 0
            continue
        step = 0.0
        for i in range(n):
            x_new[i] = x[i] - eta * sign * gx[i]
            step += (x[i] - x_new[i]) ** 2
        if np.sqrt(step) <= _TOLERANCE:
            return x
        f_new = sign * objective(x_new, *fixed)
        if f_new < fx:
            x, x_new = x_new, x
            fx = f_new
            gx = gradient(x, *fixed)
            improved += 1
        else:
            eta /= 2.0
            improved = 0


@numba.njit
def _norm(v):
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i] * v[i]
    return np.sqrt(s)


@numba.njit
def argmin(objective, gradient, x0, fixed):
    """Where gradient descent from ``x0`` finds ``objective(x, *fixed)`` smallest."""
    return descend(objective, gradient, x0, 1.0, fixed)


@numba.njit
def argmax(objective, gradient, x0, fixed):
    """Where gradient ascent from ``x0`` finds ``objective(x, *fixed)`` largest."""
    return descend(objective, gradient, x0, -1.0, fixed)


def forward_gradient(f, *example):
    """An ``@njit`` function ``gradient(x, *fixed)``: d f(x, *fixed) / dx by forward mode, one
    tangent sweep per element of the float array ``x`` (as Enzyme's tool calls
    ``__enzyme_fwddiff`` once per direction). ``example`` are arguments of ``f`` that fix its
    types."""
    x = example[0]
    tangent = autodiff_thunk(Forward, f, DuplicatedNoNeed, Duplicated(x, np.zeros_like(x)),
                             *example[1:])

    @numba.njit
    def gradient(x, *fixed):
        g = np.empty(x.shape[0])
        direction = np.zeros(x.shape[0])
        for i in range(x.shape[0]):
            direction[i] = 1.0
            (g[i],) = tangent(Duplicated(x, direction), *fixed)
            direction[i] = 0.0
        return g
    return gradient
