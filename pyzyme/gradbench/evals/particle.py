"""GradBench's ``particle`` eval: the control ``w`` that steers a charged particle to the origin.

Two unit charges sit at (10, 10 - w) and (10, 0); a particle leaves (0, 8) with velocity
(0.75, 0) and moves under the force -grad_x p(x; w) of their potential
``p(x; w) = sum 1 / |x - charge|``, integrated by Euler steps of 0.1 until it crosses the x
axis, where linear interpolation gives the crossing point x(t_f). Gradient descent
(:mod:`~pyzyme.gradbench.evals.descent`) from the input ``w`` minimises x_0(t_f)^2.

Points are pairs of floats, as GradBench's C++ ``Point``: the Euler loop allocates nothing.

Nested AD, both levels by pyzyme: the force is the gradient of the potential with respect to
the particle's position, taken inside the ``@njit`` Euler loop (``grad``: reverse mode; or
forward mode, a forward ``autodiff_thunk`` called once per coordinate, as Enzyme's tool calls
``__enzyme_fwddiff``), and the descent's derivative of x_0(t_f)^2 with respect to ``w``
differentiates that loop, inner derivatives included (``grad``, or a forward thunk, again).
The four functions ``rr``, ``rf``, ``fr``, ``ff`` name the modes of the outer then the inner
derivative; all four return the same ``w``.

Examples
--------
>>> round(FUNCTIONS["rr"].evaluate({"w": 0.0}), 6)
0.207192
"""

import numba
import numpy as np

from pyzyme import Const, Duplicated, DuplicatedNoNeed, Forward, autodiff_thunk, grad
from pyzyme.gradbench.evals.descent import argmin, forward_gradient
from pyzyme.gradbench.protocol import Function

__all__ = ["FUNCTIONS", "LANDING", "LANDING_GRADIENT", "potential"]

DT = 0.1


@numba.njit
def potential(charges, x):
    """The potential at the point ``x`` of unit charges at the points ``charges``."""
    p = 0.0
    for c in charges:
        dx = x[0] - c[0]
        dy = x[1] - c[1]
        p += 1.0 / np.sqrt(dx * dx + dy * dy)
    return p


_CHARGES = ((10.0, 10.0), (10.0, 0.0))       # example arguments: they fix the thunk's types
_potential_tangent = autodiff_thunk(Forward, potential, DuplicatedNoNeed, Const(_CHARGES),
                                   Duplicated((0.0, 8.0), (1.0, 0.0)))


@numba.njit
def _potential_gradient_forward(charges, x):
    (dx,) = _potential_tangent(Const(charges), Duplicated(x, (1.0, 0.0)))
    (dy,) = _potential_tangent(Const(charges), Duplicated(x, (0.0, 1.0)))
    return dx, dy


# inner mode -> d potential / d x, a pair
_POTENTIAL_GRADIENT = {"r": grad(potential, argnums=1), "f": _potential_gradient_forward}


def _landing(potential_gradient):
    @numba.njit
    def landing(w):
        """x_0(t_f)^2 for the control ``w[0]``: where the particle crosses the x axis."""
        charges = ((10.0, 10.0 - w[0]), (10.0, 0.0))
        x0, x1 = 0.0, 8.0
        v0, v1 = 0.75, 0.0
        while True:
            g0, g1 = potential_gradient(charges, (x0, x1))
            x0 += DT * v0
            x1 += DT * v1
            if x1 <= 0.0:
                dt_f = -x1 / v1
                x_f = x0 + dt_f * v0
                return x_f * x_f
            v0 -= DT * g0            # the acceleration is the force, -grad p
            v1 -= DT * g1
    return landing


#: inner mode -> x_0(t_f)^2 as a function of [w]
LANDING = {mode: _landing(g) for mode, g in _POTENTIAL_GRADIENT.items()}


#: outer mode + inner mode -> d x_0(t_f)^2 / d [w]
LANDING_GRADIENT = {
    outer + inner: grad(LANDING[inner]) if outer == "r" else
    forward_gradient(LANDING[inner], np.zeros(1))
    for outer in "rf" for inner in "rf"
}


def _variant(name: str):
    objective, gradient = LANDING[name[1]], LANDING_GRADIENT[name]

    @numba.njit
    def run(w0):
        return argmin(objective, gradient, np.array([w0]), ())[0]
    return run


FUNCTIONS = {name: Function(lambda input: float(input["w"]), _variant(name), float)
             for name in LANDING_GRADIENT}
