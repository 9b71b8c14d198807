"""GradBench's ``particle`` eval: the control ``w`` that steers a charged particle to the origin.

Two unit charges sit at (10, 10 - w) and (10, 0); a particle leaves (0, 8) with velocity
(0.75, 0) and moves under the force -grad_x p(x; w) of their potential
``p(x; w) = sum 1 / |x - charge|``, integrated by Euler steps of 0.1 until it crosses the x
axis, where linear interpolation gives the crossing point x(t_f). Gradient descent
(:mod:`~pyzyme.gradbench.evals.descent`) from the input ``w`` minimises x_0(t_f)^2.

Nested AD, both levels by pyzyme: the force is the gradient of the potential with respect to
the particle's position, taken inside the ``@njit`` Euler loop (``grad``: reverse mode, or
``jacfwd``: forward mode), and the descent's derivative of x_0(t_f)^2 with respect to ``w``
differentiates that loop, inner derivative included (``grad`` or ``jacfwd`` again). The four
functions ``rr``, ``rf``, ``fr``, ``ff`` name the modes of the outer then the inner derivative;
all four return the same ``w``.

Examples
--------
>>> round(FUNCTIONS["rr"].evaluate({"w": 0.0}), 6)
0.207192
"""

import numba
import numpy as np

from pyzyme import grad, jacfwd
from pyzyme.gradbench.evals.descent import argmin
from pyzyme.gradbench.protocol import Function

__all__ = ["FUNCTIONS", "LANDING", "LANDING_GRADIENT", "potential"]

DT = 0.1


@numba.njit
def potential(charges, x):
    """The potential at ``x`` (2 floats) of unit charges at the rows of ``charges``."""
    p = 0.0
    for i in range(charges.shape[0]):
        dx = x[0] - charges[i, 0]
        dy = x[1] - charges[i, 1]
        p += 1.0 / np.sqrt(dx * dx + dy * dy)
    return p


_potential_jacobian = jacfwd(potential, argnums=1)


@numba.njit
def _potential_gradient_forward(charges, x):
    return _potential_jacobian(charges, x)[0]     # the one row of a float function's Jacobian


# inner mode -> d potential / d x
_POTENTIAL_GRADIENT = {"r": grad(potential, argnums=1), "f": _potential_gradient_forward}


def _landing(potential_gradient):
    @numba.njit
    def landing(w):
        """x_0(t_f)^2 for the control ``w[0]``: where the particle crosses the x axis."""
        charges = np.array([[10.0, 10.0 - w[0]], [10.0, 0.0]])
        x = np.array([0.0, 8.0])
        xdot = np.array([0.75, 0.0])
        while True:
            xddot = -potential_gradient(charges, x)
            x = x + DT * xdot
            if x[1] <= 0.0:
                dt_f = -x[1] / xdot[1]
                x_f = x + dt_f * xdot
                return x_f[0] * x_f[0]
            xdot = xdot + DT * xddot
    return landing


#: inner mode -> x_0(t_f)^2 as a function of [w]
LANDING = {mode: _landing(g) for mode, g in _POTENTIAL_GRADIENT.items()}


def _forward_gradient(f):
    jacobian = jacfwd(f)

    @numba.njit
    def gradient(w):
        return jacobian(w)[0]     # the one row of a float function's Jacobian
    return gradient


#: outer mode + inner mode -> d x_0(t_f)^2 / d [w]
LANDING_GRADIENT = {outer + inner: grad(LANDING[inner]) if outer == "r" else
                    _forward_gradient(LANDING[inner]) for outer in "rf" for inner in "rf"}


def _variant(name: str):
    objective, gradient = LANDING[name[1]], LANDING_GRADIENT[name]

    @numba.njit
    def run(w0):
        return argmin(objective, gradient, np.array([w0]), ())[0]
    return run


FUNCTIONS = {name: Function(lambda input: float(input["w"]), _variant(name), float)
             for name in LANDING_GRADIENT}
