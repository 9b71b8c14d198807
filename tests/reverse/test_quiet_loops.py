"""Reverse runs of inner loops that no adjoint reaches are skipped (``pyzyme.diff.reverse.quiet``):
the distances to all but the nearest centre, the dot products of units a ReLU turns off. Values
against closed forms and central differences; forward mode over the gradient (hvp) where an
adjoint is zero but its tangent is not; the skip itself against the derivative's IR, and its
absence where a run's reverse reads shadow memory or strong zero is off."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Duplicated, Reverse
from pyzyme.settings import Options, using
from pyzyme.testing import check_grads


@numba.njit
def nearest(centres, points):
    total = 0.0
    for i in range(points.shape[0]):
        best = np.inf
        for j in range(centres.shape[0]):
            d = 0.0
            for a in range(points.shape[1]):
                t = points[i, a] - centres[j, a]
                d += t * t
            best = min(best, d)
        total += best
    return total


@numba.njit
def scaled_norms(x):
    # x[0] times (n - 1) copies of the sum of the other squares: at x[0] = 0 no adjoint reaches
    # the inner loop, but forward mode over the gradient carries one in the direction of x[0].
    n = x.shape[0]
    total = 0.0
    for i in range(n - 1):
        s = 0.0
        for j in range(1, n):
            s += x[j] * x[j]
        total += x[0] * s
    return total


@numba.njit
def relu_layer(w, x):
    total = 0.0
    for k in range(w.shape[0]):
        z = 0.0
        for i in range(x.shape[0]):
            z += w[k, i] * x[i]
        total += max(z, 0.0)
    return total


@numba.njit
def written_rows(w, x):
    out = np.empty(x.shape[0])
    total = 0.0
    for k in range(w.shape[0]):
        for i in range(x.shape[0]):
            out[i] = w[k, i] * x[i]
        z = 0.0
        for i in range(x.shape[0]):
            z += out[i]
        total += max(z, 0.0)
    return total


@numba.njit
def hinge(w, x):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * x[i]
    return max(1.0 - s, 0.0)


def _quiet_runs(f, *args) -> int:
    """Loop runs the reverse sweep of ``f`` can skip, from the derivative as generated."""
    text = pyzyme.code_llvm(Reverse, f, Active, Duplicated(args[0], np.zeros_like(args[0])),
                            *[pyzyme.Const(a) for a in args[1:]])
    return text.count(".quiet:")


@pytest.fixture
def clusters():
    rng = np.random.default_rng(5)
    return rng.standard_normal((4, 3)), rng.standard_normal((30, 3))


def test_nearest_centre(clusters):
    centres, points = clusters
    g = pyzyme.grad(nearest)(centres, points)
    owner = ((points[:, None, :] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)
    closed = np.zeros_like(centres)
    for i, j in enumerate(owner):
        closed[j] += 2 * (centres[j] - points[i])
    np.testing.assert_allclose(g, closed, rtol=1e-13, atol=1e-13)
    check_grads(nearest, (centres, points), modes=("rev",))
    assert _quiet_runs(nearest, centres, points) == 1


def test_nearest_centre_second_order(clusters):
    """The Hessian in the centres is twice the number of points each owns, on its diagonal."""
    centres, points = clusters
    v = np.random.default_rng(2).standard_normal(centres.shape)
    hv, g = pyzyme.hvp_and_gradient(nearest, centres, v, points)
    owner = ((points[:, None, :] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)
    counts = np.bincount(owner, minlength=centres.shape[0])
    np.testing.assert_allclose(hv, 2 * counts[:, None] * v, rtol=1e-13)
    np.testing.assert_allclose(g, pyzyme.grad(nearest)(centres, points), rtol=1e-15)


def test_zero_adjoint_with_a_tangent():
    """At x[0] = 0 the gradient's inner runs are skipped; its derivative along x[0] is not
    zero there, and forward mode over the gradient does not skip them."""
    x = np.array([0.0, 1.0, 2.0, 3.0])
    m = x.size - 1
    np.testing.assert_allclose(pyzyme.grad(scaled_norms)(x), [m * (x[1:] ** 2).sum(), 0, 0, 0])
    hv = pyzyme.hvp(scaled_norms, x, np.array([1.0, 0.0, 0.0, 0.0]))
    np.testing.assert_allclose(hv, np.r_[0.0, 2 * m * x[1:]], rtol=1e-15)
    h = np.zeros((x.size, x.size))
    h[0, 1:] = h[1:, 0] = 2 * m * x[1:]   # and 2 m x[0] = 0 on the diagonal
    np.testing.assert_allclose(pyzyme.hessian(scaled_norms)(x), h, rtol=1e-15)
    assert _quiet_runs(scaled_norms, x) == 1


def test_units_a_relu_turns_off():
    rng = np.random.default_rng(11)
    w, x = rng.standard_normal((12, 5)), rng.standard_normal(5)
    on = w @ x > 0
    assert 0 < on.sum() < on.size
    np.testing.assert_allclose(pyzyme.grad(relu_layer)(w, x), np.outer(on, x), rtol=1e-15)
    dx = pyzyme.grad(relu_layer, argnums=1)(w, x)
    np.testing.assert_allclose(dx, w[on].sum(axis=0), rtol=1e-13)
    check_grads(relu_layer, (w, x), modes=("rev",))
    assert _quiet_runs(relu_layer, w, x) == 1


def test_runs_that_read_shadow_memory_are_not_skipped():
    """A run that writes floats takes adjoints from their shadow: not skipped, still right."""
    rng = np.random.default_rng(11)
    w, x = rng.standard_normal((12, 5)), rng.standard_normal(5)
    on = w @ x > 0
    np.testing.assert_allclose(pyzyme.grad(written_rows)(w, x), np.outer(on, x), rtol=1e-15)
    assert _quiet_runs(written_rows, w, x) == 1   # the sum's loop, not the writing one


def test_not_without_strong_zero(clusters):
    centres, points = clusters

    @numba.njit
    def nearest_again(centres, points):
        return nearest(centres, points)

    with using(Options(strong_zero=False)):
        assert _quiet_runs(nearest_again, centres, points) == 0
        g = pyzyme.grad(nearest_again)(centres, points)
    np.testing.assert_allclose(g, pyzyme.grad(nearest)(centres, points), rtol=1e-15)


def test_in_a_prange_body(clusters):
    centres, points = clusters

    @numba.njit(parallel=True)
    def nearest_in_parallel(centres, points):
        total = 0.0
        for i in numba.prange(points.shape[0]):
            best = np.inf
            for j in range(centres.shape[0]):
                d = 0.0
                for a in range(points.shape[1]):
                    t = points[i, a] - centres[j, a]
                    d += t * t
                best = min(best, d)
            total += best
        return total

    serial = pyzyme.grad(nearest)(centres, points)
    for threads in (1, 2, 4):
        numba.set_num_threads(threads)
        try:
            g = pyzyme.grad(nearest_in_parallel)(centres, points)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        np.testing.assert_allclose(g, serial, rtol=1e-13, atol=1e-14)


def test_split_mode(clusters):
    """The skip in a reverse pass of its own (its counters come from the tape)."""
    centres, points = clusters
    fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, nearest, Active,
                                     Duplicated(centres, np.zeros_like(centres)),
                                     pyzyme.Const(points))
    d = np.zeros_like(centres)
    tape, primal, _ = fwd(Duplicated(centres, d), pyzyme.Const(points))
    rev(Duplicated(centres, d), pyzyme.Const(points), 1.0, tape)
    assert primal == nearest(centres, points)
    np.testing.assert_allclose(d, pyzyme.grad(nearest)(centres, points), rtol=1e-15)
    text = pyzyme.code_llvm(pyzyme.ReverseSplitWithPrimal, nearest, Active,
                            Duplicated(centres, np.zeros_like(centres)), pyzyme.Const(points))
    assert ".quiet:" in text


def test_a_loop_in_no_other():
    """A hinge loss past its margin: the whole reverse loop skipped (its counter at zero)."""
    rng = np.random.default_rng(8)
    w, x = rng.standard_normal(9), rng.standard_normal(9)
    for scale in (-3.0, 3.0):   # one on each side of the margin (|w @ x| is 6.3)
        ws = scale * w * np.sign(w @ x)
        inside = 1.0 - ws @ x > 0
        assert inside == (scale < 0)
        np.testing.assert_allclose(pyzyme.grad(hinge)(ws, x), -x if inside else 0 * x,
                                   rtol=1e-15)
        check_grads(hinge, (ws, x), modes=("rev",))
    assert _quiet_runs(hinge, w, x) == 1
