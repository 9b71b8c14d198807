"""Adjoint sums carry ``reassoc`` (Options.reassociate_adjoints, on by default): the reverse of
a loop that scatters one value into many (``y[j] += a[j] * x``) gathers many into one
(``x_bar += a[j] * y_bar[j]``), which LLVM vectorizes only when it may reorder the sum. The
primal's own arithmetic, and forward mode, keep their order."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse
from pyzyme.settings import Options, using


@numba.njit
def scatter(y, a, x):
    for j in range(a.shape[0]):
        y[j] += a[j] * x
    s = 0.0
    for j in range(y.shape[0]):
        s += y[j] * y[j]
    return s


def _args(rng, n=203):
    return rng.random(n), rng.random(n), 0.7


def _grad(y, a, x):
    dy, da = np.zeros_like(y), np.zeros_like(a)
    (_, _, dx), = pyzyme.autodiff(Reverse, scatter, Active, Duplicated(y.copy(), dy),
                                  Duplicated(a, da), Active(x))
    return dy, da, dx


def test_adjoint_sums_are_reassociated_and_vectorize():
    rng = np.random.default_rng(0)
    y, a, x = _args(rng)
    args = (Active, Duplicated(y, np.zeros_like(y)), Duplicated(a, np.zeros_like(a)),
            Active(x))
    raw = pyzyme.code_llvm(Reverse, scatter, *args)
    assert "fadd reassoc nsz double" in raw
    assert "llvm.vector.reduce.fadd" in pyzyme.code_llvm(Reverse, scatter, *args,
                                                         optimized=True)
    with using(Options(reassociate_adjoints=False)):
        raw_off = pyzyme.code_llvm(Reverse, scatter, *args)
        opt_off = pyzyme.code_llvm(Reverse, scatter, *args, optimized=True)
    assert " reassoc " not in raw_off and "fadd nsz double" in raw_off
    assert "llvm.vector.reduce.fadd" not in opt_off   # strict order: a scalar loop
    # Forward mode follows the primal's flags, which have none.
    assert " reassoc " not in pyzyme.code_llvm(Forward, scatter, Duplicated(y, np.ones_like(y)),
                                             Const(a), Duplicated(x, 1.0))


@pytest.mark.parametrize("n", [1, 3, 8, 203])
def test_reassociated_gradient_agrees_with_the_sweep_order_and_forward_mode(n):
    rng = np.random.default_rng(n)
    y, a, x = _args(rng, n)
    dy, da, dx = _grad(y, a, x)
    with using(Options(reassociate_adjoints=False)):
        dy0, da0, dx0 = _grad(y, a, x)
    np.testing.assert_allclose(dy, dy0, rtol=1e-14)
    np.testing.assert_allclose(da, da0, rtol=1e-14)
    assert dx == pytest.approx(dx0, rel=1e-13)
    yx = y + a * x
    assert dx == pytest.approx(float(np.sum(2 * yx * a)), rel=1e-13)
    vy, va = rng.random(n), rng.random(n)
    (tangent,) = pyzyme.autodiff(Forward, scatter, pyzyme.DuplicatedNoNeed,
                                 Duplicated(y.copy(), vy.copy()), Duplicated(a, va),
                                 Duplicated(x, 0.5))
    assert tangent == pytest.approx(float(dy @ vy + da @ va + dx * 0.5), rel=1e-12)
