"""NumPy array expressions in plain ``@njit`` code: Numba's loop over the result keeps, for each
operand, an index per dimension that follows the loop's only where the operand's extent is not
1 (broadcasting), carried from one iteration to the next; the reverse sweep kept every one on
its tape (a 5-point stencil written with slices: 12 words per element and step, 17 GB for a
2000 x 2000 grid over 30 steps, then a crash). Before differentiation each is a value of the
loop index (:mod:`pyzyme.transforms.broadcast_index`). Gradients where operands broadcast (an
extent of 1 against one of n) and where they do not, against closed forms and central
differences; the memory a time loop of such steps holds."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse

from tests.reverse.test_checkpoint_budget import _measured, _peak_of

RNG = np.random.default_rng(5)


@numba.njit
def diffuse(u, c, steps):
    v = u.copy()
    w = u.copy()
    for _ in range(steps):
        w[1:-1, 1:-1] = v[1:-1, 1:-1] + c * (v[:-2, 1:-1] + v[2:, 1:-1] + v[1:-1, :-2]
                                             + v[1:-1, 2:] - 4.0 * v[1:-1, 1:-1])
        v, w = w, v
    return np.sum(v * v)


@numba.njit
def scaled_rows(a, b):
    # a: (n, 1) or (n, m) against b: (n, m); the product broadcasts a's columns
    return np.sum(np.sin(a + b) * a)


def _diffuse_gradient(u, c, steps):
    du = np.zeros_like(u)
    (_, dc, _), = pyzyme.autodiff(Reverse, diffuse, Active, Duplicated(u, du), Active(c),
                                  Const(steps))
    return du, dc


def test_slice_stencil_against_central_differences():
    u = RNG.random((9, 7))
    du, dc = _diffuse_gradient(u, 0.15, 5)
    h = 1e-6
    assert dc == pytest.approx((diffuse(u, 0.15 + h, 5) - diffuse(u, 0.15 - h, 5)) / (2 * h),
                               rel=1e-7)
    for i, j in [(0, 0), (4, 3), (8, 6), (1, 5), (7, 1)]:
        e = np.zeros_like(u)
        e[i, j] = h
        fd = (diffuse(u + e, 0.15, 5) - diffuse(u - e, 0.15, 5)) / (2 * h)
        assert du[i, j] == pytest.approx(fd, rel=1e-7, abs=1e-9), (i, j)


@pytest.mark.parametrize("columns", [1, 6])
def test_broadcast_operand_gradient(columns):
    """With ``a`` of one column its index there stays 0 (the select's other side): each of
    ``a``'s cells gathers the adjoints of a whole row of the result."""
    a, b = RNG.standard_normal((5, columns)), RNG.standard_normal((5, 6))
    da, db = pyzyme.gradient(Reverse, scaled_rows, a, b)
    s = a + b
    # d/da sum(sin(a + b) * a) = cos(a + b) * a + sin(a + b), summed over broadcast columns
    want_a = (np.cos(s) * a + np.sin(s)).sum(axis=1, keepdims=True) if columns == 1 \
        else np.cos(s) * a + np.sin(s)
    np.testing.assert_allclose(da, want_a, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(db, np.cos(s) * np.broadcast_to(a, s.shape), rtol=1e-13,
                               atol=1e-14)


def _stencil_peak_kib(steps: int, cells: int = 300) -> int:
    """Growth of the resident peak over one gradient of ``diffuse`` (measured in a process
    of its own: :func:`tests.reverse.test_checkpoint_budget._measured`)."""
    u = RNG.random((cells, cells))
    return _peak_of(lambda n: _diffuse_gradient(u, 0.1, n), None, steps)


def test_a_time_loop_of_slice_steps_keeps_no_index_per_element():
    """300 x 300 cells, 20 steps: each step's temporary and its shadow stay until the reverse
    sweep is done (1.4 MiB a step); the indices took 256 bytes an element and step more
    (22 MiB a step)."""
    kib = _measured("__import__('test_broadcast_indices')._stencil_peak_kib(20)")
    assert kib < 3 * (20 * 2 * 300 * 300 * 8 >> 10), kib
