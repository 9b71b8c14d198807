"""Loop caches sized once per run of a loop whose trip count is known as it starts, not tested
on every iteration (a test that calls out of the loop, which LLVM then vectorizes neither with
the loop's own work nor with its stores of the cache). The generated IR: the entry edge grows
the caches (``.reserve``), the header no longer does (``.grow``); loops whose runs have other
exits keep the test in the header. Gradients where the runs' lengths differ from one run to
the next (the caches grow between runs), and where a run may end early, against forward mode
and central differences."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse

ARRAY = numba.types.Array(numba.float64, 1, "C")


@numba.njit
def triangle(x, n):
    """Run ``i`` of the inner loop overwrites ``x[0:i]``: i iterations, each caching the old
    ``x[j]`` (read by ``sin``), so the caches grow as the runs get longer."""
    for i in range(n):
        for j in range(i):
            x[j] = np.sin(x[j]) * x[i]
    s = 0.0
    for k in range(x.shape[0]):
        s += x[k] * x[k]
    return s


@numba.njit
def until_small(x, n):
    """The inner loop may stop early (``break``): its runs' lengths are bounds only."""
    for i in range(n):
        for j in range(x.shape[0]):
            if abs(x[j]) < 1e-3:
                break
            x[j] = np.sin(x[j]) * 1.5
    s = 0.0
    for k in range(x.shape[0]):
        s += x[k]
    return s


def _ir(f, n) -> str:
    x = np.linspace(0.1, 0.9, 12)
    return pyzyme.code_llvm(Reverse, f, Active, Duplicated(x, np.zeros_like(x)), Const(n))


def _blocks(text: str, suffix: str) -> list[str]:
    return [line.split(":")[0] for line in text.splitlines()
            if line and not line.startswith((" ", ";")) and line.split(":")[0].endswith(suffix)]


def test_counted_loop_sized_per_run_not_per_iteration():
    text = _ir(triangle, 5)
    assert _blocks(text, ".reserve") and not _blocks(text, ".grow"), text


def test_loop_with_other_exits_keeps_its_test():
    text = _ir(until_small, 5)
    assert _blocks(text, ".grow"), text


def _gradient(f, x, n):
    dx = np.zeros_like(x)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(x.copy(), dx), Const(n))
    return dx


@pytest.mark.parametrize("f,n,size", [(triangle, 40, 40), (triangle, 3, 40),
                                      (until_small, 20, 30)])
def test_gradient_against_forward_mode_and_differences(f, n, size):
    x = np.random.default_rng(7).uniform(0.2, 0.9, size)
    dx = _gradient(f, x, n)
    again = _gradient(f, x, n)      # a second call starts at the capacity the first reached
    np.testing.assert_array_equal(dx, again)
    for k in range(size):
        t = np.zeros_like(x)
        t[k] = 1.0
        _, tangent = pyzyme.autodiff(pyzyme.Forward, f, Duplicated(x.copy(), t), Const(n))
        assert dx[k] == pytest.approx(tangent, rel=1e-12, abs=1e-13)
        e = 1e-6
        up, down = x.copy(), x.copy()
        up[k] += e
        down[k] -= e
        assert dx[k] == pytest.approx((f(up, n) - f(down, n)) / (2 * e), rel=1e-6, abs=1e-8)
