"""GradBench's ``hello`` eval: ``square`` and its derivative ``double``.

Examples
--------
>>> FUNCTIONS["double"].evaluate(3.0)
6.0
"""

import numba

import pyzyme
from pyzyme import Active, Reverse
from pyzyme.gradbench.protocol import Function


@numba.njit
def square(x):
    return x * x


def double(x):
    (dx,), = pyzyme.autodiff(Reverse, square, Active(x))
    return dx


FUNCTIONS = {
    "square": Function(float, square, float),
    "double": Function(float, double, float),
}
