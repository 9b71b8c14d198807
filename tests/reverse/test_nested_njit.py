"""Derivatives of @njit code that itself calls a derivative (grad, jacfwd inside @njit): nested
AD, forward and reverse over forward and reverse, against finite differences."""

import numba
import numpy as np
import pytest

from pyzyme import Active, Duplicated, DuplicatedNoNeed, Forward, Reverse, autodiff, grad, jacfwd
from pyzyme.frontends.numba import bridge


def _field(x, w):
    return np.sin(x[0] * w) * x[1] + 1.0 / np.sqrt(x[0] * x[0] + x[1] * x[1])


def _outer(inner_gradient):
    @numba.njit
    def outer(w):
        x = np.array([w, 2.0 - w])
        s = 0.0
        for _ in range(3):       # the inner derivative in a loop, its result fed back
            g = inner_gradient(x, w)
            x = x - 0.1 * g
            s += g[0] * g[1]
        return s + x[0] * w
    return outer


def _both_modes_match_differences(outer, w=0.7, h=1e-6):
    reverse = autodiff(Reverse, outer, Active, Active(w))[0][0]
    forward = autodiff(Forward, outer, DuplicatedNoNeed, Duplicated(w, 1.0))[0]
    fd = (outer(w + h) - outer(w - h)) / (2 * h)
    assert reverse == pytest.approx(fd, rel=1e-6)
    assert forward == pytest.approx(reverse, rel=1e-12)


@pytest.mark.parametrize("inner", ["grad", "jacfwd"])
def test_derivative_through_a_derivative_called_by_address(inner, monkeypatch):
    # A derivative too large to link into its @njit caller is called through its address;
    # capture links its IR there, or the outer derivative sees a call of an unknown function
    # pointer (it was refused: 'no derivative for an indirect call').
    monkeypatch.setattr(bridge, "_LINK_LIMIT", 0)
    field = numba.njit(_field)
    if inner == "grad":
        inner_gradient = grad(field)
    else:
        jacobian = jacfwd(field)
        inner_gradient = numba.njit(lambda x, w: jacobian(x, w))   # shape x.shape (JAX's)
    _both_modes_match_differences(_outer(inner_gradient))


def test_derivative_through_a_linked_derivative():
    _both_modes_match_differences(_outer(grad(numba.njit(_field))))


@numba.njit
def _inverse_distance(c, x0, x1):
    return c / np.sqrt(x0 * x0 + x1 * x1)


_INVERSE_DISTANCE_GRADIENT = grad(_inverse_distance, argnums=(1, 2))


@numba.njit
def _descend_in_a_loop(w):
    x0, x1 = 1.0, 8.0
    for _ in range(3):
        g0, g1 = _INVERSE_DISTANCE_GRADIENT(w, x0, x1)
        x0 -= g0
        x1 -= g1
    return x0 * x1


def test_tuple_gradient_called_in_a_loop():
    # The inner derivative's result ({status, d0, d1}) merges at the loop header with a
    # constant; forward mode made its zero tangent with insertvalues after the function's
    # last 'ret' (LLVM: 'instruction expected to be numbered'), not on the incoming edge.
    _both_modes_match_differences(_descend_in_a_loop, w=0.5)
