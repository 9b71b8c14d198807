"""Forward mode runs the tangents of a one-block loop in a loop of their own when they need none
of the primal's values (``pyzyme.diff.forward.fission``): a linear stencil's tangent streams
apart from its primal streams. Values against a tangent written by hand, central differences,
batch lanes one at a time and hvp; where the split happens against the derivative's IR, and
where it must not (a nonlinear statement, an index loaded from memory)."""

import math

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Const, Duplicated, Forward
from tests.kernels import double_buffered as stencil


@numba.njit
def stencil_by_hand(u, du, c, steps):
    n = u.shape[0]
    v, dv = u.copy(), du.copy()
    w, dw = np.empty_like(u), np.empty_like(u)
    for _ in range(steps):
        w[0], dw[0] = v[0], dv[0]
        w[n - 1], dw[n - 1] = v[n - 1], dv[n - 1]
        for i in range(1, n - 1):
            w[i] = v[i] + c * (v[i - 1] - 2.0 * v[i] + v[i + 1])
            dw[i] = dv[i] + c * (dv[i - 1] - 2.0 * dv[i] + dv[i + 1])
        v, w = w, v
        dv, dw = dw, dv
    s, ds = 0.0, 0.0
    for i in range(n):
        s += v[i] * v[i]
        ds += 2.0 * v[i] * dv[i]
    return s, ds


@numba.njit
def weighted_sum(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += c * x[i]
    return s


@numba.njit
def sines(u):
    s = 0.0
    for i in range(u.shape[0]):
        s += math.sin(u[i])
    return s


@numba.njit
def gathered(u, idx):
    w = np.empty(idx.shape[0])
    for i in range(idx.shape[0]):
        w[i] = 3.0 * u[idx[i]]
    s = 0.0
    for i in range(w.shape[0]):
        s += w[i] * w[i]
    return s


def _split_loops(f, *args) -> int:
    text = pyzyme.code_llvm(Forward, f, Duplicated, *args)
    return len([line for line in text.splitlines() if line.endswith(":")
                and ".tangents" in line and ".tangents." not in line])


@pytest.fixture
def row():
    rng = np.random.default_rng(3)
    return rng.standard_normal(40), rng.standard_normal(40)


def test_stencil_tangents_run_apart(row):
    u, du = row
    value, tangent = pyzyme.autodiff(Forward, stencil, Duplicated, Duplicated(u, du),
                                     Const(0.1), Const(6))
    s, ds = stencil_by_hand(u, du, 0.1, 6)
    assert value == s
    assert tangent == pytest.approx(ds, rel=1e-13)
    h = 1e-6
    fd = (stencil(u + h * du, 0.1, 6) - stencil(u - h * du, 0.1, 6)) / (2 * h)
    assert tangent == pytest.approx(fd, rel=1e-7)
    # the stencil's loop and the sum's (its tangent needs v[i]: not split)
    assert _split_loops(stencil, Duplicated(u, du), Const(0.1), Const(6)) == 1


def test_batch_lanes(row):
    u, du = row
    dus = (du, np.cos(np.arange(u.size)), np.ones_like(u))
    _, tangents = pyzyme.autodiff(Forward, stencil, pyzyme.BatchDuplicated,
                                  pyzyme.BatchDuplicated(u, dus), Const(0.1), Const(4))
    for t, d in zip(tangents, dus):
        assert t == pytest.approx(stencil_by_hand(u, d, 0.1, 4)[1], rel=1e-13)


def test_a_reduction_leaves_its_tangent_after_the_loop(row):
    x, dx = row
    value, tangent = pyzyme.autodiff(Forward, weighted_sum, Duplicated, Duplicated(x, dx),
                                     Const(2.5))
    assert tangent == pytest.approx(2.5 * dx.sum(), rel=1e-13)
    assert _split_loops(weighted_sum, Duplicated(x, dx), Const(2.5)) == 1


def test_second_order_over_a_split_loop(row):
    u, v = row

    def f(u):
        return stencil(u, 0.1, 3)

    hv = pyzyme.hvp(f, u, v)
    grad = pyzyme.grad(f)
    h = 1e-6
    np.testing.assert_allclose(hv, (grad(u + h * v) - grad(u - h * v)) / (2 * h),
                               rtol=1e-6, atol=1e-8)


def test_not_where_tangents_need_primal_values(row):
    u, du = row
    _, tangent = pyzyme.autodiff(Forward, sines, Duplicated, Duplicated(u, du))
    assert tangent == pytest.approx(float(np.sum(np.cos(u) * du)), rel=1e-13)
    assert _split_loops(sines, Duplicated(u, du)) == 0
    idx = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    _, tangent = pyzyme.autodiff(Forward, gathered, Duplicated, Duplicated(u, du), Const(idx))
    assert tangent == pytest.approx(float(np.sum(18.0 * u[idx] * du[idx])), rel=1e-13)
    assert _split_loops(gathered, Duplicated(u, du), Const(idx)) == 0
