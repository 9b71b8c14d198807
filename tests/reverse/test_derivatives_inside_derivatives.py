"""Forward mode over @njit code that calls reverse-mode derivatives (``grad`` inside the
function differentiated): the derivatives' tape pools are linked into the caller, and their
calls must keep the operands forward mode mirrors (constant propagation once emptied
``pyzyme.tape_realloc(null, 384)`` to ``pyzyme.tape_realloc()``, an internal IndexError); two
derivatives linked into one caller bring two copies of the pool, the second renamed by the
linker, which must be known as the same function."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse, UnsupportedError


@numba.njit
def with_temporary(x):
    t = np.empty_like(x)
    for i in range(x.shape[0]):
        t[i] = np.sin(x[i]) * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += t[i] * t[i]
    return s


@numba.njit
def exp_weighted(x):
    return np.sum(np.exp(x) * x)


grad_with_temporary = pyzyme.grad(with_temporary)
grad_exp_weighted = pyzyme.grad(exp_weighted)


@numba.njit
def one_gradient(x, v):
    g = grad_with_temporary(x)
    s = 0.0
    for i in range(x.shape[0]):
        s += g[i] * v[i]
    return s


@numba.njit
def two_gradients(x, v):
    g = grad_with_temporary(x)
    h = grad_exp_weighted(x)
    s = 0.0
    for i in range(x.shape[0]):
        s += (g[i] + h[i]) * v[i]
    return s


def _central(f, x, v, dx, h=1e-6):
    return (f(x + h * dx, v) - f(x - h * dx, v)) / (2 * h)


@pytest.mark.parametrize("f", [one_gradient, two_gradients])
def test_forward_mode_over_gradients_called_in_njit_code(f):
    x, v, dx = np.linspace(0.1, 1.0, 5), np.linspace(1.0, 2.0, 5), np.linspace(-1.0, 1.0, 5)
    for _ in range(2):
        value, tangent = pyzyme.autodiff(Forward, f, Duplicated(x, dx.copy()), Const(v))
        assert value == pytest.approx(f(x, v), rel=1e-13)
        assert tangent == pytest.approx(_central(f, x, v, dx), rel=1e-7)


def test_reverse_mode_over_a_gradient_with_a_tape_is_refused_clearly():
    x, v = np.linspace(0.1, 1.0, 5), np.ones(5)
    with pytest.raises(UnsupportedError, match="forward mode"):
        pyzyme.autodiff(Reverse, one_gradient, Active, Duplicated(x, np.zeros(5)), Const(v))
