"""Callees inlined before differentiation (``passes.inline_small_functions``): a helper of a
couple of hundred instructions called in a loop (an LSTM layer, a stencil update), which LLVM's
O2 threshold leaves a call, is differentiated as part of its caller's loop, with no derivative
of its own (whose tape would be allocated, filled and freed on every call); a recursive helper
stays a call. Values against central differences."""

import math

import numba
import numpy as np

import pyzyme
from pyzyme import Active, Duplicated, Reverse


@numba.njit
def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


@numba.njit
def _layer(weight, bias, hidden, cell, x):
    b = hidden.shape[0]
    for i in range(b):
        forget = _sigmoid(x[i] * weight[i] + bias[i])
        ingate = _sigmoid(hidden[i] * weight[b + i] + bias[b + i])
        outgate = _sigmoid(x[i] * weight[2 * b + i] + bias[2 * b + i])
        change = math.tanh(hidden[i] * weight[3 * b + i] + bias[3 * b + i])
        cell[i] = cell[i] * forget + ingate * change
        hidden[i] = outgate * math.tanh(cell[i])


@numba.njit
def unrolled(weight, bias, xs):
    """Two layers, each step: _layer has two call sites (one would be inlined anyway)."""
    b = xs.shape[1]
    h1, c1, h2, c2 = np.zeros(b), np.zeros(b), np.zeros(b), np.zeros(b)
    for t in range(xs.shape[0]):
        _layer(weight, bias, h1, c1, xs[t])
        _layer(bias, weight, h2, c2, h1)
    return np.sum(h2 * h2) + np.sum(c1)


@numba.njit
def _depth(x, n):
    return x if n == 0 else math.sin(_depth(x, n - 1)) + 0.5 * x


@numba.njit
def recursive_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += _depth(x[i], 3)
    return s


def _central(f, args, k, h=1e-6):
    x = args[k]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up = [a.copy() for a in args]
        down = [a.copy() for a in args]
        up[k][idx] += h
        down[k][idx] -= h
        g[idx] = (f(*up) - f(*down)) / (2 * h)
    return g


def test_a_helper_called_in_a_loop_is_inlined():
    rng = np.random.default_rng(3)
    b = 3
    weight, bias, xs = rng.standard_normal(4 * b), rng.standard_normal(4 * b), rng.random((5, b))
    dw, db = np.zeros_like(weight), np.zeros_like(bias)
    pyzyme.autodiff(Reverse, unrolled, Active, Duplicated(weight, dw), Duplicated(bias, db),
                    pyzyme.Const(xs))
    np.testing.assert_allclose(dw, _central(unrolled, [weight, bias, xs], 0), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(db, _central(unrolled, [weight, bias, xs], 1), rtol=1e-6,
                               atol=1e-8)
    text = pyzyme.code_llvm(Reverse, unrolled, Active, Duplicated(weight, dw),
                            Duplicated(bias, db), pyzyme.Const(xs))
    assert "augmented_" not in text     # no derivative of _layer: it is part of the loop


def test_a_recursive_helper_stays_a_call():
    x = np.array([0.3, -1.2, 2.0])
    dx = np.zeros(3)
    pyzyme.autodiff(Reverse, recursive_sum, Active, Duplicated(x, dx))
    np.testing.assert_allclose(dx, _central(recursive_sum, [x], 0), rtol=1e-6, atol=1e-8)
    text = pyzyme.code_llvm(Reverse, recursive_sum, Active, Duplicated(x, np.zeros(3)))
    assert "augmented_" in text
