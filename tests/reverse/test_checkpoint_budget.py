"""Reverse mode under a tape budget: the outermost counted loops checkpointed on Revolve's
binomial schedule (pyzyme.transforms.checkpoint_loops, pyzyme.transforms.revolve)."""

import ctypes

import numpy as np
import pytest
from numba import njit

import pyzyme
from pyzyme import ir
from pyzyme.runtime.jit import compile_module
from pyzyme.transforms import revolve
from pyzyme.transforms.revolve import Schedule
from tests.kernels import double_buffered


@njit
def lotka_volterra(p, u, n, h):
    """RK4 of Lotka-Volterra, the state updated in place (LLVM keeps it in registers: header
    phis, the carried state)."""
    a, b, c, d = p[0], p[1], p[2], p[3]
    for _ in range(n):
        x, y = u[0], u[1]
        k1x, k1y = a * x - b * x * y, c * x * y - d * y
        x2, y2 = x + 0.5 * h * k1x, y + 0.5 * h * k1y
        k2x, k2y = a * x2 - b * x2 * y2, c * x2 * y2 - d * y2
        x3, y3 = x + 0.5 * h * k2x, y + 0.5 * h * k2y
        k3x, k3y = a * x3 - b * x3 * y3, c * x3 * y3 - d * y3
        x4, y4 = x + h * k3x, y + h * k3y
        k4x, k4y = a * x4 - b * x4 * y4, c * x4 * y4 - d * y4
        u[0] = x + h / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        u[1] = y + h / 6.0 * (k1y + 2.0 * k2y + 2.0 * k3y + k4y)
    return u[0] * u[1]


@njit
def diffusion(u, n, k):
    """An explicit 1-D diffusion stencil overwriting its state in place (memory the loop
    writes: a region of the snapshot)."""
    m = u.shape[0]
    for _ in range(n):
        left = u[0]
        for i in range(1, m - 1):
            new = u[i] + k * (left - 2.0 * u[i] + u[i + 1])
            left = u[i]
            u[i] = new
    s = 0.0
    for i in range(m):
        s += u[i] * u[i]
    return s


@njit(inline="never")
def _rhs(u, out, a):
    for i in range(u.shape[0]):
        out[i] = -a * u[i] * u[i] + np.sin(u[i])


@njit
def euler(u, n, a, h):
    """A time loop whose body calls another jitted function, with a work array made before
    the loop (Numba's allocation: a region of the snapshot too)."""
    f = np.empty_like(u)
    for _ in range(n):
        _rhs(u, f, a)
        for i in range(u.shape[0]):
            u[i] += h * f[i]
    return np.sum(u * u)


P = np.array([1.5, 1.0, 1.0, 3.0])
U0 = np.array([1.0, 1.0])


def lv_gradient(budget, n=40, h=0.01, p=P):
    dp, du, u = np.zeros(4), np.zeros(2), U0.copy()
    with pyzyme.options(tape_budget=budget):
        (r,) = pyzyme.autodiff(pyzyme.Reverse, lotka_volterra, pyzyme.Duplicated(p, dp),
                               pyzyme.Duplicated(u, du), pyzyme.Const(n), pyzyme.Active(h))
    return np.concatenate([dp, du, [r[3]]]), u


STENCIL = np.sin(np.linspace(0.0, 3.0, 16))


def diffusion_gradient(budget, n=30, k=0.2):
    u, du = STENCIL.copy(), np.zeros(16)
    with pyzyme.options(tape_budget=budget):
        (r, value) = pyzyme.autodiff(pyzyme.ReverseWithPrimal, diffusion,
                                     pyzyme.Duplicated(u, du), pyzyme.Const(n),
                                     pyzyme.Active(k))
    return np.concatenate([du, [r[2]]]), u, value


def central(f, x, eps=1e-6):
    out = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        out[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return out


# LV's carried state: x, y, the counter, and the two values stored after the loop: 40 bytes,
# so one iteration needs 6 * 40 + 120 = 360 bytes; 360 bytes leave room for 1 snapshot, 410
# for 2.
@pytest.mark.parametrize("budget", [360, 410, 1 << 20])
def test_rk4_gradient_under_budget_matches_unbudgeted_and_differences(budget):
    ref, u_ref = lv_gradient(None)
    got, u = lv_gradient(budget)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(u, u_ref, rtol=1e-14)  # the primal's state as it ends
    fd_p = central(lambda p: lotka_volterra.py_func(p, U0.copy(), 40, 0.01), P)
    np.testing.assert_allclose(got[:4], fd_p, rtol=1e-6)
    fd_h = central(lambda h: lotka_volterra.py_func(P, U0.copy(), 40, h[0]), np.array([0.01]))
    np.testing.assert_allclose(got[6], fd_h[0], rtol=1e-6)


@pytest.mark.parametrize("budget", [950, 1200, 2000])  # 1, 2 and 8 snapshots
def test_stencil_overwriting_its_state_under_budget(budget):
    ref, u_ref, v_ref = diffusion_gradient(None)
    got, u, v = diffusion_gradient(budget)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(u, u_ref, rtol=1e-14)
    assert v == pytest.approx(v_ref, rel=1e-14)
    fd = central(lambda u0: diffusion.py_func(u0.copy(), 30, 0.2), STENCIL)
    np.testing.assert_allclose(got[:16], fd, rtol=1e-6, atol=1e-9)
    fd_k = central(lambda k: diffusion.py_func(STENCIL.copy(), 30, k[0]), np.array([0.2]))
    np.testing.assert_allclose(got[16], fd_k[0], rtol=1e-6)


@pytest.mark.parametrize("n", [1, 2, 3, 17])
def test_short_loops_under_budget(n):
    """The stencil's inner loop tapes, so its time loop is checkpointed whatever its count."""
    ref, u_ref, v_ref = diffusion_gradient(None, n=n)
    got, u, v = diffusion_gradient(950, n=n)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(u, u_ref, rtol=1e-14)


def euler_gradient(budget, n=25):
    u, du = np.linspace(0.1, 1.0, 5), np.zeros(5)
    with pyzyme.options(tape_budget=budget):
        (r,) = pyzyme.autodiff(pyzyme.Reverse, euler, pyzyme.Duplicated(u, du),
                               pyzyme.Const(n), pyzyme.Active(0.3), pyzyme.Active(0.01))
    return np.concatenate([du, r[2:]])


def test_body_calling_another_jitted_function_under_budget():
    ref = euler_gradient(None)
    got = euler_gradient(2000)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    x0 = np.linspace(0.1, 1.0, 5)
    fd = central(lambda x: euler.py_func(x.copy(), 25, 0.3, 0.01), x0)
    np.testing.assert_allclose(got[:5], fd, rtol=1e-6)


@njit
def decay_until(u, tol, h):
    """A while loop whose exit depends on the data: the online schedule."""
    while u[0] > tol:
        x, y = u[0], u[1]
        u[0] = x - h * x * y
        u[1] = y + h * x
    return u[0] + u[1]


def decay_gradient(budget, u0=(1.0, 0.5), h=0.01):
    u, du = np.array(u0), np.zeros(2)
    with pyzyme.options(tape_budget=budget):
        (r,) = pyzyme.autodiff(pyzyme.Reverse, decay_until, pyzyme.Duplicated(u, du),
                               pyzyme.Const(0.2), pyzyme.Active(h))
    return np.concatenate([du, [r[2]]]), u


@pytest.mark.parametrize("budget", [312, 400, 1 << 16])  # 1, 3 and all the snapshots
def test_while_loop_with_data_dependent_exit_under_budget(budget):
    ref, u_ref = decay_gradient(None)
    got, u = decay_gradient(budget)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(u, u_ref, rtol=1e-14)
    # Away from the exit's jumps the loop runs the same steps for nearby inputs.
    fd = central(lambda h: decay_until.py_func(np.array([1.0, 0.5]), 0.2, h[0]),
                 np.array([0.01]), eps=1e-9)
    np.testing.assert_allclose(got[2], fd[0], rtol=1e-4)


def test_online_schedule_prints():
    assert str(Schedule(7, 3, online=True)) == (
        "online checkpointing, then binomial: 7 steps, 3 snapshots; 13 untaped step runs "
        "(recomputation factor 1.86), 7 stores, 7 restores")


@pytest.mark.parametrize("steps", [2, 100, 151])
def test_double_buffered_stencil_under_budget(steps):
    """Its unbudgeted tape keeps 16 bytes a step (the two pointers): 2 steps stay plain under
    the budget, 100 and 151 are checkpointed."""
    u0 = np.sin(np.linspace(0.0, 3.0, 10))

    def grad(budget):
        u, du = u0.copy(), np.zeros(10)
        with pyzyme.options(tape_budget=budget):
            (r, value) = pyzyme.autodiff(pyzyme.ReverseWithPrimal, double_buffered,
                                         pyzyme.Duplicated(u, du), pyzyme.Const(0.25),
                                         pyzyme.Const(steps))
        return du, value
    ref, v_ref = grad(None)
    got, value = grad(2400)   # two arrays of 80 bytes: 2 snapshots, 1200 bytes of plain tape
    assert value == pytest.approx(double_buffered.py_func(u0.copy(), 0.25, steps), rel=1e-14)
    assert value == pytest.approx(v_ref, rel=1e-14)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    fd = central(lambda x: double_buffered.py_func(x.copy(), 0.25, steps), u0)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


def lv_split(budget, n=30, h=0.01):
    dp, du, u = np.zeros(4), np.zeros(2), U0.copy()
    with pyzyme.options(tape_budget=budget):
        fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, lotka_volterra,
                                         pyzyme.Active, pyzyme.Duplicated(P, dp),
                                         pyzyme.Duplicated(u, du), pyzyme.Const(n),
                                         pyzyme.Active(h))
        args = (pyzyme.Duplicated(P, dp), pyzyme.Duplicated(u, du), pyzyme.Const(n),
                pyzyme.Active(h))
        tape, primal, _ = fwd(*args)
        ((*_, dh),) = rev(*args, 1.0, tape)
    return np.concatenate([dp, du, [dh]]), primal


def test_split_mode_under_budget():
    """The forward thunk's checkpoints (and the loop's carried state, on the heap) outlive it
    for the reverse thunk."""
    ref, primal_ref = lv_split(None)
    got, primal = lv_split(700)  # the state and p (split mode snapshots what it reads)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert primal == pytest.approx(primal_ref, rel=1e-14)
    combined, _ = lv_gradient(None, n=30)
    np.testing.assert_allclose(got, combined, rtol=1e-12, atol=1e-14)


@njit
def overwritten_after(u, p, n):
    for _ in range(n):
        for i in range(u.shape[0]):
            u[i] = u[i] * p[i] + np.sin(u[i])
    s = np.sum(u * p)
    p[:] = 0.0          # the loop read p: its recomputed steps must see p as it was
    return s


def test_memory_the_loop_reads_and_code_after_it_overwrites():
    """The loop's snapshots hold p too, although the loop only reads it (without: the
    reverse sweep recomputed the steps with p zeroed, a silently wrong gradient)."""
    def grad(budget):
        u, du = np.linspace(0.1, 1.0, 4), np.zeros(4)
        p, dp = np.linspace(0.5, 0.9, 4), np.zeros(4)
        with pyzyme.options(tape_budget=budget):
            pyzyme.autodiff(pyzyme.Reverse, overwritten_after, pyzyme.Duplicated(u, du),
                            pyzyme.Duplicated(p, dp), pyzyme.Const(30))
        return np.concatenate([du, dp])
    np.testing.assert_allclose(grad(1000), grad(None), rtol=1e-12, atol=1e-300)
    p0 = np.linspace(0.5, 0.9, 4)
    fd = central(lambda p: overwritten_after.py_func(np.linspace(0.1, 1.0, 4), p.copy(), 30), p0)
    np.testing.assert_allclose(grad(1000)[4:], fd, rtol=1e-6)


def test_iteration_over_budget_says_what_it_needs():
    with pytest.raises(pyzyme.TapeBudgetError,
                       match=r"test_checkpoint_budget.py:\d+ .*needs 360 bytes.*"
                             r"tape_budget \(200 bytes\)"):
        lv_gradient(200)


def test_budget_is_part_of_the_cache_key():
    got_small, _ = lv_gradient(360)
    with pytest.raises(pyzyme.TapeBudgetError):
        lv_gradient(300)   # not the derivative built for 360 bytes
    got_none, _ = lv_gradient(None)
    np.testing.assert_allclose(got_small, got_none, rtol=1e-12, atol=1e-14)


def test_schedule_prints_its_snapshots_and_recomputation():
    assert str(Schedule(1000, 10)) == (
        "binomial checkpointing (Revolve): 1000 steps, 10 snapshots, each step run forward "
        "at most 4 times; 3637 untaped step runs (recomputation factor 3.64), 715 stores, "
        "999 restores")
    assert str(Schedule(8, 8)).endswith("8 untaped step runs (recomputation factor 1.00), "
                                        "7 stores, 7 restores")


@pytest.mark.parametrize("steps,snaps", [(n, s) for s in (1, 2, 3, 5) for n in
                                         (1, 2, 5, 9, 30, 100)])
def test_schedule_reaches_revolves_optimum(steps, snaps):
    """Forward steps: t*l - beta(s + 1, t - 1), the fewest any schedule with s snapshots
    runs (Griewank & Walther); plus the one run at the first turn."""
    from math import comb
    t = Schedule(steps, snaps).repetitions
    optimum = t * steps - (comb(snaps + t, t - 1) if t >= 1 else 0)
    assert Schedule(steps, snaps).forward == optimum


def _run_compiled_scheme(steps: int, snaps: int, online: bool = False):
    """The IR scheme driven through its actions from here as the driver would (``online``: a
    while loop's, told the number of steps when its last step returns false): (the turns in
    order, forward steps, stores, restores)."""
    module = ir.Module()
    prefix = f"pyzyme_test_revolve_{steps}_{snaps}_{int(online)}"
    revolve.scheme(module, prefix=prefix)
    for fn in module.functions:
        if fn.name.startswith(prefix):
            fn.prefix = ""  # external, to be looked up
    cm = compile_module(module, name="revolve_test")
    prefix = f"pyzyme_test_revolve_{steps}_{snaps}_{int(online)}"
    names = {part: f"{prefix}.{part}" for part in ("init", "next", "finalize", "set_nsteps")}
    init = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        cm.address(names["init"]))
    nxt = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(cm.address(names["next"]))
    fin = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(cm.address(names["finalize"]))
    set_nsteps = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
        cm.address(names["set_nsteps"]))
    # Budget for exactly `snaps` snapshots of 8 bytes (the snapshots() formula).
    nbytes = 8
    budget = (2 + 2) * nbytes + revolve.STATE_WORDS * 8 + snaps * (nbytes + 8)
    data = (ctypes.c_int64 * 3)(budget, 2, 1)  # budget, reserve, chunk
    state = init(ctypes.addressof(data), -1 if online else steps, nbytes)
    known = not online
    action = (ctypes.c_int64 * 4)()
    turns, forward, stores, restores, at = [], 0, 0, 0, 0
    while True:
        nxt(state, ctypes.addressof(action))
        flag, it, start = action[0] & 0xFFFFFFFF, action[1], action[2]
        if flag == 7:
            break
        if flag == 1:
            stores += 1
        elif flag == 2:
            restores, at = restores + 1, it
        elif flag == 3:
            assert start == at
            if not known and it >= steps:  # the loop's last step returns false
                forward, at, known = forward + steps - start, steps, True
                set_nsteps(state, steps)
                continue
            forward, at = forward + it - start, it
        else:
            assert at == it - 1 and flag == (4 if not turns else 5)
            turns.append(it - 1)
    fin(state)
    return turns, forward, stores, restores


@pytest.mark.parametrize("steps,snaps,online", [
    (1, 1, False), (7, 1, False), (10, 3, False), (100, 4, False), (57, 57, False),
    (1, 1, True), (9, 1, True), (10, 3, True), (100, 4, True), (33, 40, True)])
def test_compiled_scheme_runs_the_printed_schedule(steps, snaps, online):
    turns, forward, stores, restores = _run_compiled_scheme(steps, snaps, online)
    assert turns == list(range(steps - 1, -1, -1))
    sched = Schedule(steps, snaps, online)
    assert (forward, stores) == (sched.forward, sched._run()[1])
    assert restores == sched._run()[2]


def _kib(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))


def _peak_kib(budget, steps: int, cells: int = 1000) -> int:
    """Growth of the resident memory's peak over one gradient of ``steps`` steps (built and
    warmed up first with 2 steps, so that only the run's own allocations count)."""
    def grad(n):
        u, du = np.sin(np.linspace(0.0, 3.0, cells)), np.zeros(cells)
        pyzyme.autodiff(pyzyme.Reverse, diffusion, pyzyme.Duplicated(u, du), pyzyme.Const(n),
                        pyzyme.Active(0.2))
        return du
    return _peak_of(grad, budget, steps)


def _peak_of(grad, budget, steps: int) -> int:
    """Growth of the resident memory's peak over ``grad(steps)`` (after ``grad(2)``)."""
    with pyzyme.options(tape_budget=budget):
        grad(2)
        libc = ctypes.CDLL(None)
        libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # VmHWM := VmRSS
        base = _kib("VmRSS")
        grad(steps)
        return _kib("VmHWM") - base


_MEASURE = """
import ctypes, sys
sys.path.insert(0, {here!r})
sys.path.insert(0, {root!r})   # tests.kernels
libc = ctypes.CDLL(None)
libc.mallopt(-3, 64 << 10)   # M_MMAP_THRESHOLD
libc.mallopt(-1, 64 << 10)   # M_TRIM_THRESHOLD
import test_checkpoint_budget as T
print({expr})
"""


def _measured(expr: str) -> int:
    """The peak in KiB that ``expr`` (over this module's names, as ``T.name``) measures, in a
    process of its own. There glibc maps blocks of 64 KiB and more on their own (and gives
    them back), so the resident peak follows what is allocated; and no derivative has run
    before, so no tape pool holds blocks an earlier test's longer run left, which a tape over
    the budget would reuse unseen (a test here once passed that way on code that ran 4x over
    its budget)."""
    import os
    import subprocess
    import sys
    if not sys.platform.startswith("linux"):
        pytest.skip("measures /proc/self/status")
    if not hasattr(ctypes.CDLL(None), "mallopt"):
        pytest.skip("not glibc")
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    out = subprocess.run([sys.executable, "-c", _MEASURE.format(here=here, root=root, expr=expr)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


def test_measured_peak_keeps_within_the_budget():
    """1,000 cells for 3,000 steps: the unbudgeted gradient's tape takes tens of MiB (the
    measure sees it), the gradient under 1 MiB no more than that."""
    assert _measured("T._peak_kib(None, 3000)") > 16 << 10
    assert _measured("T._peak_kib(1 << 20, 3000)") <= (1 << 10) + 64


def test_measured_peak_of_snapshots_kept_to_the_cache():
    """Under 16 MiB the 8 KB states of 1,000 cells for 3,000 steps run in 35 chunks of 87
    steps: 35 snapshots and one chunk's tape (87 states: 0.7 MiB) are all the call touches
    (1.2 MiB measured; with a snapshot a step, it touched 16 MiB)."""
    assert str(Schedule.under(16 << 20, 8008, 3000, 3)).startswith(
        "binomial checkpointing (Revolve): 3000 steps in 35 chunks of 87 ")
    assert _measured("T._peak_kib(16 << 20, 3000)") <= (3 << 10) // 2


@njit
def sweeps_a_step(u, c, n, sweeps):
    """A time loop whose every step sweeps the state in place ``sweeps`` times: one step's
    derivative tapes ``sweeps`` states (the sums the coefficient's adjoint reads), known only
    when the loop starts."""
    for _ in range(n):
        for _sweep in range(sweeps):
            left = u[0]
            for i in range(1, u.size - 1):
                new = u[i] + c * (left - 2.0 * u[i] + u[i + 1])
                left = u[i]
                u[i] = new
    return np.sum(u * u)


def _sweeps_gradient(budget, n, sweeps, cells=1000, f=None):
    u, du = np.sin(np.linspace(0.0, 3.0, cells)), np.zeros(cells)
    with pyzyme.options(tape_budget=budget):
        (_, dc, _, _), = pyzyme.autodiff(pyzyme.Reverse, f or sweeps_a_step,
                                         pyzyme.Duplicated(u, du),
                                         pyzyme.Active(0.2), pyzyme.Const(n), pyzyme.Const(sweeps))
    return np.append(du, dc)


def test_a_step_that_tapes_many_states_keeps_within_the_budget():
    """50 sweeps a step tape 50 states of 8 KB: chunks sized for 3 states a step (the
    reserve, before the inner loops' trip counts were read at run time) kept 4.2 MB under
    a budget of 1 MiB. Now a chunk is one step, and the gradient keeps within the budget."""
    np.testing.assert_allclose(_sweeps_gradient(1 << 20, 60, 50), _sweeps_gradient(None, 60, 50),
                               rtol=1e-12, atol=1e-300)
    assert _measured("T._peak_of(lambda n: T._sweeps_gradient(1 << 20, n, 50), 1 << 20, "
                     "400)") <= (1 << 10) + 64
    got = _sweeps_gradient(2000, 6, 4, cells=12)
    fd = central(lambda x: sweeps_a_step.py_func(x[:12].copy(), x[12], 6, 4),
                 np.append(np.sin(np.linspace(0.0, 3.0, 12)), 0.2))
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


@njit
def sweeps_a_copy(u, c, n, sweeps):
    """:func:`sweeps_a_step` on a copy of the state made each step (an allocation, whose block
    and shadow the derivative keeps until its reverse sweep), copied back after."""
    for _ in range(n):
        v = u.copy()
        for _sweep in range(sweeps):
            left = v[0]
            for i in range(1, v.size - 1):
                new = v[i] + c * (left - 2.0 * v[i] + v[i + 1])
                left = v[i]
                v[i] = new
        u[:] = v
    return np.sum(u * u)


def test_a_step_that_allocates_keeps_within_the_budget():
    """A step that allocates (and frees) its own copy of the state was reserved three states
    whatever its inner loops taped: 50 sweeps of the copy, 3.5 MB under a budget of 1 MiB.
    Its allocations' sizes and its inner loops' trip counts are known when the loop starts:
    what an iteration keeps is read off them there."""
    np.testing.assert_allclose(_sweeps_gradient(1 << 20, 40, 50, f=sweeps_a_copy),
                               _sweeps_gradient(None, 40, 50, f=sweeps_a_copy),
                               rtol=1e-12, atol=1e-300)
    assert _measured("T._peak_of(lambda n: T._sweeps_gradient(1 << 20, n, 50, "
                     "f=T.sweeps_a_copy), 1 << 20, 400)") <= (1 << 10) + 64
    got = _sweeps_gradient(2000, 6, 4, cells=12, f=sweeps_a_copy)
    fd = central(lambda x: sweeps_a_copy.py_func(x[:12].copy(), x[12], 6, 4),
                 np.append(np.sin(np.linspace(0.0, 3.0, 12)), 0.2))
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


def test_a_step_taping_more_than_the_budget_says_what_it_needs():
    """200 sweeps a step: one step's derivative tapes 1.6 MB, which no schedule under 1 MiB
    holds (it ran over the budget without a word)."""
    with pytest.raises(pyzyme.TapeBudgetError,
                       match=r"needs 1620944 bytes .*what one iteration's derivative tapes.*"
                             r"tape_budget \(1048576 bytes\)"):
        _sweeps_gradient(1 << 20, 10, 200)


@njit
def two_stencils(u, n):
    """Two time loops, each overwriting its state in place: the snapshots of both are held
    at once (each loop's from its forward sweep to its reverse sweep)."""
    for _ in range(n):
        for i in range(1, u.size - 1):
            u[i] = u[i] + 0.1 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) * u[i]
    v = u.copy()
    for _ in range(n):
        for i in range(1, v.size - 1):
            v[i] = v[i] + 0.05 * (v[i - 1] - 2.0 * v[i] + v[i + 1]) * v[i]
    return np.sum(v * v) + np.sum(u * u)


def _two_stencils_gradient(budget, n, cells):
    u, du = np.sin(np.linspace(0.0, 3.0, cells)), np.zeros(cells)
    with pyzyme.options(tape_budget=budget):
        pyzyme.autodiff(pyzyme.Reverse, two_stencils, pyzyme.Duplicated(u, du),
                        pyzyme.Const(n))
    return du


def test_loops_share_the_budget():
    """Each of the two loops took the whole budget: 1.9 MiB at its peak under 1 MiB. Each
    now takes at run time its share of what the loops before it left."""
    ref = _two_stencils_gradient(None, 40, 16)
    got = _two_stencils_gradient(2000, 40, 16)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    fd = central(lambda x: two_stencils.py_func(x.copy(), 40), np.sin(np.linspace(0, 3, 16)))
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)
    assert _measured("T._peak_of(lambda n: T._two_stencils_gradient(1 << 20, n, 1000), "
                     "1 << 20, 3000)") <= (1 << 10) + 64


@njit
def _heat(x, n):
    u = x.copy()
    for _ in range(n):
        for i in range(1, u.size - 1):
            u[i] = u[i] + 0.1 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) * u[i]
    return np.sum(u * u)


def _hvp_peak_kib(budget, steps: int, cells: int = 1000) -> int:
    """As _peak_kib, for the Hessian-vector product of _heat."""
    x, v = 0.1 * np.sin(np.linspace(0.0, 3.0, cells)), np.ones(cells)
    return _peak_of(lambda n: pyzyme.hvp(_heat, x, v.copy(), n), budget, steps)


def test_measured_peak_of_hvp_keeps_within_the_budget():
    """Forward over the checkpointed gradient: its snapshots hold tangents too, and the
    budget counts them (600 steps unbudgeted take about 27 MiB; 3000 take 137 MiB)."""
    assert _measured("T._hvp_peak_kib(None, 600)") > 16 << 10
    assert _measured("T._hvp_peak_kib(1 << 20, 3000)") <= (1 << 10) + 64


@njit
def _half_step(u, out, a):
    for i in range(u.shape[0]):
        out[i] = u[i] + 0.01 * (-a * u[i] * u[i] + np.sin(u[i]))


@njit
def leapfrog(u, v, a, n):
    for _ in range(n):
        _half_step(u, v, a)
        _half_step(v, u, a)
    return np.sum(u * u)


def test_checkpoint_marks_a_function_recomputed_instead_of_taped():
    """pyzyme.checkpoint(g): each call of g becomes a checkpointed loop of one step (a
    snapshot of what it writes; its derivative run in the reverse sweep), with no budget."""
    def grad():
        u, du = np.linspace(0.1, 1.0, 5), np.zeros(5)
        v, dv = np.zeros(5), np.zeros(5)
        args = (pyzyme.Duplicated(u, du), pyzyme.Duplicated(v, dv), pyzyme.Active(0.3),
                pyzyme.Const(20))
        (r,) = pyzyme.autodiff(pyzyme.Reverse, leapfrog, *args)
        code = pyzyme.code_llvm(pyzyme.Reverse, leapfrog, *args)
        return np.concatenate([du, [r[2]]]), code
    ref, code = grad()
    assert "checkpointed.step" not in code
    pyzyme.checkpoint(_half_step)
    got, code = grad()
    assert "checkpointed.step" in code
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    x0 = np.linspace(0.1, 1.0, 5)
    fd = central(lambda x: leapfrog.py_func(x.copy(), np.zeros(5), 0.3, 20), x0)
    np.testing.assert_allclose(got[:5], fd, rtol=1e-6)


@njit
def ratios(u, n, k):
    """A division in the loop: Numba's check for zero is an exit of the loop that raises."""
    for _ in range(n):
        for i in range(1, u.shape[0]):
            u[i] = u[i] + k * u[i - 1] / u[i]
    return np.sum(u * u)


def _ratios_gradient(budget, u0):
    u, du = u0.copy(), np.zeros(6)
    with pyzyme.options(tape_budget=budget):
        (r,) = pyzyme.autodiff(pyzyme.Reverse, ratios, pyzyme.Duplicated(u, du),
                               pyzyme.Const(20), pyzyme.Active(0.01))
    return np.concatenate([du, [r[2]]])


def test_loop_that_may_raise_under_budget():
    u0 = np.linspace(1.0, 2.0, 6)
    got = _ratios_gradient(600, u0)
    np.testing.assert_allclose(got, _ratios_gradient(None, u0), rtol=1e-12, atol=1e-14)
    fd = central(lambda x: ratios.py_func(x.copy(), 20, 0.01), u0)
    np.testing.assert_allclose(got[:6], fd, rtol=1e-6)
    bad = u0.copy()
    bad[3] = 0.0
    with pytest.raises(ZeroDivisionError):  # as the primal and the unbudgeted gradient raise
        _ratios_gradient(600, bad)


def test_hvp_over_a_checkpointed_loop():
    """Forward mode over the checkpointed gradient: the tangent drivers of its sweeps
    (tests/reverse/test_checkpoint_compositions.py has more)."""
    def loss(u):
        return diffusion(u, 50, 0.1 + 0.01 * u[0])  # nonlinear in u: the stencil tapes
    v = np.cos(np.arange(16.0))
    # diffusion overwrites u in place, and hvp the direction with it: a copy for each call.
    ref = pyzyme.hvp(loss, STENCIL.copy(), v.copy())
    with pyzyme.options(tape_budget=1800):  # the state and its tangent: 1 snapshot
        got = pyzyme.hvp(loss, STENCIL.copy(), v.copy())
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)


@njit
def _recursive_sim(u, n, k, depth):
    if depth > 0:  # recursion: LLVM cannot inline it into its caller
        return _recursive_sim(u, n, k, depth - 1)
    for _ in range(n):
        left = u[0]
        for i in range(1, u.shape[0] - 1):
            new = u[i] + k * (left - 2.0 * u[i] + u[i + 1])
            left = u[i]
            u[i] = new
    return np.sum(u * u)


@njit
def _calls_sim(u, n, k):
    return _recursive_sim(u, n, k, 2)


def _calls_sim_gradient(budget):
    u, du = STENCIL.copy(), np.zeros(16)
    with pyzyme.options(tape_budget=budget):
        (r,) = pyzyme.autodiff(pyzyme.Reverse, _calls_sim, pyzyme.Duplicated(u, du),
                               pyzyme.Const(30), pyzyme.Active(0.2))
        code = pyzyme.code_llvm(pyzyme.Reverse, _calls_sim,
                                pyzyme.Duplicated(STENCIL.copy(), np.zeros(16)),
                                pyzyme.Const(30), pyzyme.Active(0.2))
    return np.concatenate([du, [r[2]]]), code


def test_time_loop_in_a_called_function_under_budget():
    """The callee (recursive: LLVM cannot inline it) has the time loop: its loops are
    checkpointed in it, its arrays' extents passed on from its caller's."""
    ref, _ = _calls_sim_gradient(None)
    got, code = _calls_sim_gradient(1000)  # one iteration needs 936 bytes: 1 snapshot
    assert "_recursive_sim" in code and "checkpointed.step" in code
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    fd = central(lambda x: _calls_sim.py_func(x.copy(), 30, 0.2), STENCIL)
    np.testing.assert_allclose(got[:16], fd, rtol=1e-6, atol=1e-9)
    with pytest.raises(pyzyme.TapeBudgetError,
                       match=r"in .*_recursive_sim \(called from _calls_sim .*needs 936 bytes"):
        _calls_sim_gradient(900)


@njit
def _recursive_relax(w, u, n, k, depth):
    if depth > 0:
        return _recursive_relax(w, u, n, k, depth - 1)
    for _ in range(n):
        for i in range(1, w.shape[0] - 1):
            w[i] = w[i] + k * (w[i - 1] - 2.0 * w[i] + w[i + 1]) * w[i]
    return np.sum(w * u)


@njit
def _on_a_copy(u, n, k, depth):
    w = u * 1.0   # made here: the callee's loop writes an array whose size it is not told
    return _recursive_relax(w, u, n, k, depth)


def test_time_loop_in_a_called_function_writing_an_array_of_unknown_size_is_refused():
    u, du = np.linspace(0.1, 1.0, 8), np.zeros(8)
    with pyzyme.options(tape_budget=2000):
        with pytest.raises(pyzyme.UnsupportedError,
                           match=r"(?s)in .*_recursive_relax \(called from _on_a_copy .*"
                                 r"tape_budget: it writes memory whose size pyzyme does not "
                                 r"know.*differentiate .*_recursive_relax itself"):
            pyzyme.autodiff(pyzyme.Reverse, _on_a_copy, pyzyme.Duplicated(u, du),
                            pyzyme.Const(30), pyzyme.Active(0.1), pyzyme.Const(1))


@njit
def _stencil_loss(k):
    u = np.sin(np.linspace(0.0, 3.0, 16))
    return diffusion(u, 30, k)


def test_grad_called_from_njit_code_under_budget():
    """The derivative an @njit caller gets is built under the options in force when its
    caller compiles: the budget holds there too."""
    with pyzyme.options(tape_budget=950):
        dk = pyzyme.grad(_stencil_loss)

        @njit
        def caller(k):
            return dk(k)
        got = caller(0.2)
        code = pyzyme.code_llvm(pyzyme.Reverse, _stencil_loss, pyzyme.Active(0.2))
    assert "checkpointed.step" in code
    ref = pyzyme.grad(_stencil_loss)(0.2)
    assert got == pytest.approx(ref, rel=1e-12)
    fd = central(lambda k: _stencil_loss.py_func(k[0]), np.array([0.2]))
    assert got == pytest.approx(fd[0], rel=1e-6)


@njit
def _strided(u, a, b, s, k):
    for t in range(a, b, s):
        left = u[0]
        for i in range(1, u.shape[0] - 1):
            new = u[i] + k * (left - 2.0 * u[i] + u[i + 1]) + 1e-3 * t
            left = u[i]
            u[i] = new
    return np.sum(u * u)


@pytest.mark.parametrize("a,b,s", [(3, 20, 2), (3, 21, 2), (0, 7, 3), (5, 6, 2), (-4, 9, 5),
                                   (20, 3, -3), (21, 3, -2), (7, -9, -4)])
def test_trip_counts_of_strided_ranges(a, b, s):
    """The checkpointed loop runs as many steps as the loop did (its trip count computed
    from the induction's start, stride and bound): the primal and gradient agree."""
    def grad(budget):
        u, du = np.sin(np.linspace(0.0, 3.0, 8)), np.zeros(8)
        with pyzyme.options(tape_budget=budget):
            (r, value) = pyzyme.autodiff(pyzyme.ReverseWithPrimal, _strided,
                                         pyzyme.Duplicated(u, du), pyzyme.Const(a),
                                         pyzyme.Const(b), pyzyme.Const(s), pyzyme.Active(0.2))
        return np.concatenate([du, [r[4]]]), value
    got, value = grad(700)
    ref, v_ref = grad(None)
    assert value == pytest.approx(_strided.py_func(np.sin(np.linspace(0.0, 3.0, 8)), a, b, s,
                                                   0.2), rel=1e-13)
    assert value == pytest.approx(v_ref, rel=1e-14)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
