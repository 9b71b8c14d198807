"""Derivatives that skip the primal result (Reverse without a primal, DuplicatedNoNeed) give
exactly what the ones that keep it give: only work the result alone needed may go."""

import numba
import numpy as np
import pytest

from pyzyme import (Active, Const, Duplicated, DuplicatedNoNeed, Forward, Reverse,
                    ReverseWithPrimal, autodiff, grad, gradient)


@numba.njit
def taylor(x, n):                   # x ** i: squaring up to 65536, llvm.pow beyond
    s = 0.0
    for i in range(1, n):
        s += x ** i / i
    return s


@numba.njit
def smooth(u, c, steps):            # heap temporaries that only the primal result reads
    v = u.copy()
    w = np.empty_like(u)
    for _ in range(steps):
        for i in range(1, u.shape[0] - 1):
            w[i] = v[i] + c * (v[i - 1] - 2.0 * v[i] + v[i + 1])
        w[0], w[-1] = v[0], v[-1]
        v, w = w, v
    return np.sum(v * v) + np.sum(np.sin(w))


@pytest.mark.parametrize("n", [100, 70_000])
def test_reverse_without_primal_equals_with_primal(n):
    x = 1.0 - 1e-5
    (d,) = autodiff(Reverse, taylor, Active, Active(x), Const(n))
    (dp, _), value = autodiff(ReverseWithPrimal, taylor, Active, Active(x), Const(n))
    # Two derivatives, whose sums over the loop LLVM may reassociate and vectorize each its
    # own way (Options.reassociate_adjoints): equal to rounding. The primal keeps its order.
    assert d[0] == pytest.approx(dp, rel=1e-12) and value == taylor(x, n)
    exact = sum(x ** (i - 1) for i in range(1, n))
    assert d[0] == pytest.approx(exact, rel=1e-12)
    assert grad(taylor)(x, n) == pytest.approx(d[0], rel=1e-12)


@pytest.mark.parametrize("n", [100, 70_000])
def test_forward_tangent_alone_equals_tangent_with_primal(n):
    x = 1.0 - 1e-5
    (t,) = autodiff(Forward, taylor, DuplicatedNoNeed, Duplicated(x, 1.0), Const(n))
    value, tp = autodiff(Forward, taylor, Duplicated, Duplicated(x, 1.0), Const(n))
    assert t == tp and value == taylor(x, n)  # forward mode: no reassociated sums, bitwise
    (g,) = gradient(Forward, lambda y: taylor(y, n), x)
    assert g == pytest.approx(t, rel=1e-15)


def test_both_modes_through_private_heap_arrays():
    rng = np.random.default_rng(0)
    u, du = rng.standard_normal(12), rng.standard_normal(12)
    (t,) = autodiff(Forward, smooth, DuplicatedNoNeed, Duplicated(u, du), Const(0.2),
                    Const(5))
    _, tp = autodiff(Forward, smooth, Duplicated, Duplicated(u, du.copy()), Const(0.2),
                     Const(5))
    g = np.zeros_like(u)
    autodiff(Reverse, smooth, Active, Duplicated(u, g), Const(0.2), Const(5))
    assert t == tp  # forward mode: no reassociated sums, bitwise
    assert t == pytest.approx(g @ du, rel=1e-12)
    h = 1e-6
    fd = (smooth(u + h * du, 0.2, 5) - smooth(u - h * du, 0.2, 5)) / (2 * h)
    assert t == pytest.approx(fd, rel=1e-7)
