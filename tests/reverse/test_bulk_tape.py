"""Loop caches filled by one copy per run of the loop (:mod:`pyzyme.diff.reverse.bulk`): a
counted loop reading, element after element, an array that it does not write but that is
overwritten later (a Runge-Kutta stage's rate loop) keeps what it reads with one
``llvm.memcpy`` as each run starts, not a store per iteration. The generated IR has the copy
where it applies and none where it must not (the array written in the loop, the load on some
iterations only, a loop walking down, a loop that may stop early); gradients of each kind
against central differences, and of the copied kind against forward mode, at sizes where the
inner loop runs zero, one and many times, and a Hessian-vector product through them."""

import re

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse


@numba.njit
def shifted(x, s):
    """Each step's rate loop reads the state one element behind, then the state moves on."""
    n = x.shape[0]
    y = np.ones(n)
    k = np.empty(n)
    for _ in range(s):
        k[0] = x[0]
        for i in range(1, n):
            k[i] = x[i] * y[i - 1]
        for i in range(n):
            y[i] += 0.3 * k[i] * y[i]
    return y[-1] + 0.5 * y[0]


@numba.njit
def rows(x, s):
    """Rows of a 2-D array walked along (contiguous) by the inner loop, rewritten after."""
    n = x.shape[0]
    b = np.empty((3, n))
    for r in range(3):
        for i in range(n):
            b[r, i] = x[i] * (r + 1)
    t = 0.0
    for _ in range(s):
        for r in range(3):
            for i in range(n):
                t += np.sin(b[r, i]) * x[i]
        for r in range(3):
            for i in range(n):
                b[r, i] = 0.9 * b[r, i] + 0.1 * x[i] * b[r, i]
    return t


@numba.njit
def recurrence(x, s):
    """The loop writes what it reads on its next iteration: the values read must be kept one
    by one."""
    n = x.shape[0]
    y = np.ones(n)
    for _ in range(s):
        for i in range(1, n):
            y[i] = np.sin(y[i - 1]) * x[i] + 0.5 * y[i]
    return y[-1]


@numba.njit
def conditional(x, s):
    """The load runs on some iterations only: a copy would read what the loop does not."""
    n = x.shape[0]
    y = np.ones(n)
    t = 0.0
    for _ in range(s):
        for i in range(n):
            if x[i] > 0.5:
                t += np.sin(y[i]) * x[i]
        for i in range(n):
            y[i] *= 1.0 + 0.1 * x[i]
    return t


@numba.njit
def descending(x, s):
    """The loop walks down the array."""
    n = x.shape[0]
    y = np.ones(n)
    k = np.empty(n)
    for _ in range(s):
        for i in range(n - 1, 0, -1):
            k[i] = x[i] * y[i - 1]
        k[0] = x[0]
        for i in range(n):
            y[i] += 0.3 * k[i]          # linear in k: nothing of this loop is kept
    return y[-1]


@numba.njit
def early_exit(x, s):
    """The loop may stop before its count."""
    n = x.shape[0]
    y = np.ones(n)
    t = 0.0
    for _ in range(s):
        for i in range(n):
            if y[i] > 50.0:
                break
            t += np.sin(y[i]) * x[i]
        for i in range(n):
            y[i] *= 1.0 + x[i]
    return t


def _derivative_body(f) -> str:
    x = np.linspace(0.2, 0.9, 6)
    text = pyzyme.code_llvm(Reverse, f, Active, Duplicated(x, np.zeros_like(x)), Const(3))
    start = text.index("define internal i32 @diffe")
    end = text.find("\ndefine ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def _copies(f) -> list[str]:
    """The derivative's copies into a cache as a run starts (their destinations are named
    ``<cache>.run``; the tape's growth copies too, elsewhere)."""
    return re.findall(r'%"?[^ ]*\.run"? = getelementptr', _derivative_body(f))


def test_rate_loop_cache_filled_by_one_copy_per_run():
    # the rate loop's y[i - 1] and the update's k[i] (y[i] is written where it is read)
    assert len(_copies(shifted)) == 2, _derivative_body(shifted)


@pytest.mark.parametrize("f", [recurrence, conditional, descending, early_exit])
def test_no_copy_where_the_loads_are_not_one_run_of_unchanged_elements(f):
    assert not _copies(f), _derivative_body(f)


def _gradient(f, x, s):
    dx = np.zeros_like(x)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(x.copy(), dx), Const(s))
    return dx


def _differences(f, x, s, e=1e-6):
    out = np.empty_like(x)
    for k in range(x.size):
        up, down = x.copy(), x.copy()
        up[k] += e
        down[k] -= e
        out[k] = (f(up, s) - f(down, s)) / (2 * e)
    return out


@pytest.mark.parametrize("f", [shifted, rows, recurrence, conditional, descending, early_exit])
@pytest.mark.parametrize("n,s", [(1, 2), (2, 3), (9, 4)])
def test_gradient_against_differences(f, n, s):
    x = np.random.default_rng(n + 10 * s).uniform(0.2, 0.9, n)
    dx = _gradient(f, x, s)
    np.testing.assert_allclose(dx, _differences(f, x, s), rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(dx, _gradient(f, x, s))   # a second call, caches reused


def test_copied_cache_against_forward_mode():
    x = np.random.default_rng(3).uniform(0.2, 0.9, 17)
    dx = _gradient(shifted, x, 5)
    for k in range(x.size):
        t = np.zeros_like(x)
        t[k] = 1.0
        _, tangent = pyzyme.autodiff(pyzyme.Forward, shifted, Duplicated(x.copy(), t),
                                     Const(5))
        assert dx[k] == pytest.approx(tangent, rel=1e-12, abs=1e-14)


@numba.njit
def _shifted4(x):
    return shifted(x, 4)


def test_hessian_vector_product_through_the_copies():
    """Forward mode over the reverse derivative carries tangents through the copies."""
    rng = np.random.default_rng(5)
    x, v = rng.uniform(0.2, 0.9, 7), rng.uniform(-1.0, 1.0, 7)
    hv = pyzyme.hvp(_shifted4, x, v)

    def gradient(at):
        dx = np.zeros_like(at)
        pyzyme.autodiff(Reverse, _shifted4, Active, Duplicated(at.copy(), dx))
        return dx

    e = 1e-5
    np.testing.assert_allclose(hv, (gradient(x + e * v) - gradient(x - e * v)) / (2 * e),
                               rtol=1e-6, atol=1e-8)
