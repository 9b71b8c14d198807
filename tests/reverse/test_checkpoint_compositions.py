"""Checkpointing under a tape budget composed with the rest of pyzyme: forward mode over the
checkpointed gradient (hvp), pyzyme.checkpoint under hvp, a serial time loop around prange
loops (the parallel derivative inside each step)."""

import numba
import numpy as np
import pytest
from numba import njit, prange

import pyzyme


@njit
def _heat(x, n):
    """A nonlinear stencil overwriting its state in place (its time loop checkpointed)."""
    u = x.copy()
    for _ in range(n):
        for i in range(1, u.size - 1):
            u[i] = u[i] + 0.1 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) * u[i]
    return np.sum(u * u)


X = np.linspace(0.1, 1.0, 12)
V = np.cos(np.arange(12.0))


def _heat_loss(x):
    return _heat(x, 30)


def _gradient_fd(loss, x, v, eps=1e-6):
    g = pyzyme.grad(loss)
    return (g(x + eps * v) - g(x - eps * v)) / (2 * eps)


# A state and its tangent are 208 bytes, and one iteration needs 6 of each and the scheme's
# 120: 1400 leaves 1 snapshot (every step but the last run forward again), 3000 leaves 8.
@pytest.mark.parametrize("budget", [1400, 3000])
def test_hvp_under_a_budget_matches_unbudgeted_and_differences(budget):
    ref = pyzyme.hvp(_heat_loss, X, V)
    with pyzyme.options(tape_budget=budget):
        got = pyzyme.hvp(_heat_loss, X, V)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got, _gradient_fd(_heat_loss, X, V), rtol=1e-6, atol=1e-8)


def test_hvp_budget_counts_the_tangents():
    """The gradient alone fits 800 bytes (744 for one iteration); its tangents do not."""
    with pyzyme.options(tape_budget=800):
        pyzyme.grad(_heat_loss)(X)
        with pytest.raises(pyzyme.TapeBudgetError,
                           match=r"needs 1368 bytes \(its state and its tangent"):
            pyzyme.hvp(_heat_loss, X, V)


@njit
def _decay_until(x, tol):
    """A while loop whose exit depends on the data (the online schedule)."""
    u0, u1 = x[0], x[1]
    h = 0.01 * x[2]
    while u0 > tol:
        u0, u1 = u0 - h * u0 * u1, u1 + h * u0 * u0
    return u0 * u1 + u1 * u1


def _decay_loss(x):
    return _decay_until(x, 0.2)


def test_hvp_of_a_while_loop_under_a_budget():
    x, v = np.array([1.0, 0.5, 1.3]), np.array([0.3, -0.7, 0.2])
    ref = pyzyme.hvp(_decay_loss, x, v)
    with pyzyme.options(tape_budget=600):  # 2 snapshots
        got = pyzyme.hvp(_decay_loss, x, v)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    # Away from the exit's jumps the loop runs the same steps for nearby inputs.
    np.testing.assert_allclose(got, _gradient_fd(_decay_loss, x, v, eps=1e-9), rtol=1e-4)


@njit
def _half_step(u, out, a):
    for i in range(u.shape[0]):
        out[i] = u[i] + 0.01 * (-a * u[i] * u[i] + np.sin(u[i]))


@njit
def _leapfrog(x, n):
    u = x.copy()
    v = np.zeros_like(x)
    for _ in range(n):
        _half_step(u, v, 0.3)
        _half_step(v, u, 0.3)
    return np.sum(u * u)


def _leapfrog_loss(x):
    return _leapfrog(x, 20)


def test_hvp_with_a_function_marked_checkpoint():
    """pyzyme.checkpoint(g): each call of g a checkpointed loop of one step, under hvp too."""
    x, v = np.linspace(0.1, 1.0, 5), np.sin(np.arange(5.0))
    ref = pyzyme.hvp(_leapfrog_loss, x, v)
    pyzyme.checkpoint(_half_step)
    got = pyzyme.hvp(_leapfrog_loss, x, v)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got, _gradient_fd(_leapfrog_loss, x, v), rtol=1e-6, atol=1e-8)


@njit(parallel=True)
def _relax(u, n, k):
    """A serial time loop around two prange loops (the second a reduction): its step launches
    parallel loops, whose arguments it stores into stack slots of its own."""
    m = u.shape[0]
    w = np.empty_like(u)
    total = 0.0
    for _ in range(n):
        for i in prange(1, m - 1):
            w[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1]) * u[i]
        s = 0.0
        for i in prange(1, m - 1):
            u[i] = w[i]
            s += w[i] * w[i]
        total += np.sqrt(s)
    return total


U0 = np.sin(np.linspace(0.0, 3.0, 16))


def _relax_gradient(budget, threads):
    numba.set_num_threads(threads)
    try:
        u, du = U0.copy(), np.zeros(16)
        with pyzyme.options(tape_budget=budget):
            (r,) = pyzyme.autodiff(pyzyme.Reverse, _relax, pyzyme.Duplicated(u, du),
                                   pyzyme.Const(30), pyzyme.Active(0.1))
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    return np.concatenate([du, [r[2]]])


THREADS = tuple(t for t in (1, 2) if t <= numba.config.NUMBA_NUM_THREADS)


# The state (u, w, the carried values and the stack slots the loop writes) is 344 bytes:
# 3000 keeps 3 snapshots for 30 steps.
@pytest.mark.parametrize("threads", THREADS)
def test_time_loop_around_prange_under_budget(threads):
    ref = _relax_gradient(None, 1)
    got = _relax_gradient(3000, threads)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    fd = np.array([(_relax.py_func(U0 + 1e-6 * e, 30, 0.1)
                    - _relax.py_func(U0 - 1e-6 * e, 30, 0.1)) / 2e-6 for e in np.eye(16)])
    np.testing.assert_allclose(got[:16], fd, rtol=1e-6, atol=1e-8)


@njit
def _decay_for(u, n, h):
    """A counted loop with a break: how many steps it runs is known when it ends (the online
    schedule), and code after it uses the step it broke at."""
    steps = n
    for t in range(n):
        x, y = u[0], u[1]
        u[0] = x - h * x * y
        u[1] = y + h * x * x
        if u[0] < 0.2:
            steps = t
            break
    return u[0] * u[1] + 0.001 * steps * u[1]


@njit
def _first_crossing(u, n, h):
    """A return from inside the loop: a second way out, to code of its own."""
    for t in range(n):
        x, y = u[0], u[1]
        u[0] = x - h * x * y
        u[1] = y + h * x
        if u[0] < 0.3:
            return u[0] + 2.0 * u[1] + t
    return u[0] * u[1]


def _early_exit_gradient(f, budget, n, h=0.01):
    u, du = np.array([1.0, 0.5]), np.zeros(2)
    with pyzyme.options(tape_budget=budget):
        (r, value) = pyzyme.autodiff(pyzyme.ReverseWithPrimal, f, pyzyme.Duplicated(u, du),
                                     pyzyme.Const(n), pyzyme.Active(h))
    return np.concatenate([du, [r[2]]]), value


# _decay_for's state is 88 bytes (700: 1 snapshot), _first_crossing's 56 (500: 1 snapshot);
# 1000 steps end at the break or return (after about 230), 30 at the loop's test.
@pytest.mark.parametrize("f,budget", [(_decay_for, 700), (_first_crossing, 500),
                                      (_first_crossing, 2000)])
@pytest.mark.parametrize("n", [1000, 30])
def test_loop_leaving_early_under_budget(f, budget, n):
    ref, v_ref = _early_exit_gradient(f, None, n)
    got, value = _early_exit_gradient(f, budget, n)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert value == pytest.approx(v_ref, rel=1e-14)
    assert value == pytest.approx(f.py_func(np.array([1.0, 0.5]), n, 0.01), rel=1e-13)
    # Away from the exit's jumps the loop runs the same steps for nearby inputs.
    fd = (f.py_func(np.array([1.0, 0.5]), n, 0.01 + 1e-9)
          - f.py_func(np.array([1.0, 0.5]), n, 0.01 - 1e-9)) / 2e-9
    assert got[2] == pytest.approx(fd, rel=1e-4)


@njit(parallel=True)
def _read_then_zeroed(u, p, n):
    for _ in range(n):
        for i in range(u.shape[0]):
            u[i] = u[i] * p[i] + np.sin(u[i])
    s = 0.0
    for i in range(u.shape[0]):
        s += u[i] * p[i]
    for i in prange(p.shape[0]):  # writes p after the loop, through the launch's arguments
        p[i] = 0.0
    return s


def test_memory_a_prange_overwrites_after_the_loop_is_snapshotted():
    """The time loop only reads p, which a prange after it zeroes: its snapshots must hold p
    (on main the prange's writes went unseen and the recomputed steps read zeros: a wrong
    gradient, 0.72 off)."""
    def grad(budget):
        u, du = np.linspace(0.1, 1.0, 4), np.zeros(4)
        p, dp = np.linspace(0.5, 0.9, 4), np.zeros(4)
        with pyzyme.options(tape_budget=budget):
            pyzyme.autodiff(pyzyme.Reverse, _read_then_zeroed, pyzyme.Duplicated(u, du),
                            pyzyme.Duplicated(p, dp), pyzyme.Const(30))
        return np.concatenate([du, dp])
    got = grad(1000)
    np.testing.assert_allclose(got, grad(None), rtol=1e-12, atol=1e-300)
    p0 = np.linspace(0.5, 0.9, 4)
    fd = np.array([(_read_then_zeroed.py_func(np.linspace(0.1, 1.0, 4), p0 + 1e-6 * e, 30)
                    - _read_then_zeroed.py_func(np.linspace(0.1, 1.0, 4), p0 - 1e-6 * e, 30))
                   / 2e-6 for e in np.eye(4)])
    np.testing.assert_allclose(got[4:], fd, rtol=1e-6)
