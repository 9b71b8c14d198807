"""How many of the snapshots a tape budget allows the Revolve scheme uses: all of them, or,
where the cost model (pyzyme.transforms.revolve: a store and a restore a step, each slower
once the snapshots outgrow a core's cache) says it is faster, as many as CACHE_WINDOW holds."""

import ctypes
import re

import numpy as np
import pytest

import pyzyme
from pyzyme import ir
from pyzyme.runtime.jit import compile_module
from pyzyme.transforms import revolve
from pyzyme.transforms.revolve import Schedule, allowed, plan, snapshots
from tests.reverse.test_checkpoint_budget import diffusion as stencil

MiB = 1 << 20


def test_large_states_keep_to_the_cache_and_small_ones_use_the_budget():
    """Steps of one iteration (a while loop's, a loop carrying pointers): 8 KB states (1,000
    cells), 10^5 steps under 16 MiB take a snapshot every 65 steps, then reverse each range
    with 65 snapshots (a quarter of the cache's 2 MiB); under 4 MiB (too few for those at
    the top level) Revolve's schedule keeps to 261 snapshots (2 MiB); 10^4 steps need no two
    levels. Lotka-Volterra's 40-byte state uses all the budget allows (its steps cost more
    than its copies)."""
    s, hot = plan(16 * MiB, 8000, 100_000, 3)
    assert str(Schedule(100_000, s, hot=hot)) == (
        "two-level checkpointing: 100000 steps, 1604 snapshots, one every 65 steps, then "
        "each range of 65 reversed storing every state (each step run forward at most 2 "
        "times); 198432 untaped step runs (recomputation factor 1.98), 98461 stores, 99999 "
        "restores")
    # 4,000 cells under 64 MiB: ranges of 16 steps would need 2,500 snapshots at the top
    # level, more than the 2,097 allowed; ranges of 65 (all of the cache) need 615.
    assert plan(64 * MiB, 32000, 40_000, 3) == (681, 65)
    assert (plan(4 * MiB, 8000, 100_000, 3), allowed(4 * MiB, 8000, 100_000, 3)) == (
        (261, 0), 518)
    assert plan(16 * MiB, 8000, 10_000, 3) == (261, 0)
    assert snapshots(16 * MiB, 40, 10**6, 3) == allowed(16 * MiB, 40, 10**6, 3) == 349_518
    # Fewer steps than snapshots in the cache, a while loop's unknown count: all of them.
    assert snapshots(16 * MiB, 8000, 200, 3) == 200
    assert snapshots(16 * MiB, 8000, -1, 3) == 2090
    # A state larger than half the cache: no cap.
    assert snapshots(64 * MiB, 1 << 20, 1000, 3) == allowed(64 * MiB, 1 << 20, 1000, 3) == 58


def test_counted_loops_run_chunks_of_iterations_taped():
    """A counted loop's scheme steps through chunks of iterations whose tape (3 states an
    iteration, as reserved for one step's derivative) stays within the cache's 2 MiB and a
    quarter of the budget: 1,000 cells (8 KB) in chunks of 87 under 16 MiB, every chunk's
    start stored (each iteration run untaped once: the forward sweep's run); under 4 MiB
    chunks of 43, Revolve's schedule over their 2,326 starts keeping to the cache's 261
    snapshots. A step whose tape is known (Lotka-Volterra's, 300 bytes) sizes its chunks by
    it."""
    assert revolve.chunking(16 * MiB, 8000, 100_000, 3) == (87, 261)
    assert str(Schedule.under(16 * MiB, 8000, 100_000, 3)) == (
        "binomial checkpointing (Revolve): 100000 steps in 1150 chunks of 87 (each chunk "
        "differentiated from a tape of its own), 1150 snapshots, each chunk run forward at "
        "most 1 time; 100000 untaped step runs (recomputation factor 1.00), 1149 stores, "
        "1149 restores")
    assert str(Schedule.under(4 * MiB, 8000, 100_000, 3)) == (
        "binomial checkpointing (Revolve): 100000 steps in 2326 chunks of 43 (each chunk "
        "differentiated from a tape of its own), 261 snapshots (the budget allows 392; 2 MiB "
        "of snapshots stay in cache), each chunk run forward at most 2 times; 188752 untaped "
        "step runs (recomputation factor 1.89), 2316 stores, 2325 restores")
    assert revolve.chunking(16 * MiB, 40, 10**6, 3, tape=300) == (6990, 52425)
    assert str(Schedule.under(16 * MiB, 40, 10**6, 3, tape=300)).startswith(
        "binomial checkpointing (Revolve): 1000000 steps in 144 chunks of 6990 ")
    # The last chunk is shorter: 10 steps in chunks of 4, 4 + 2, with one snapshot: the
    # first two chunks run (8 steps), the last (2) at the first turn, the first again (4).
    short = Schedule(3, 1, chunk=4, iterations=10)
    assert (short._run()[0], short.factor) == (12, 1.4)
    # While loops (their count known only at their end) keep to single iterations.
    assert revolve.chunking(16 * MiB, 8000, -1, 3) == (1, 3)


def _drive(budget, nbytes, steps, reserve=3, chunk=1):
    """The IR scheme (data: ``budget``, ``reserve``, ``chunk``) driven through its actions as
    the driver would: (turns, forward steps, stores, restores, slots held)."""
    module = ir.Module()
    prefix = "pyzyme_test_two_level"
    revolve.scheme(module, prefix=prefix)
    for fn in module.functions:
        if fn.name.startswith(prefix):
            fn.prefix = ""
    cm = compile_module(module, name="revolve_two_level_test")
    init = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        cm.address(f"{prefix}.init"))
    nxt = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(cm.address(f"{prefix}.next"))
    fin = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(cm.address(f"{prefix}.finalize"))
    data = (ctypes.c_int64 * 3)(budget, reserve, chunk)
    state = init(ctypes.addressof(data), steps, nbytes)
    action = (ctypes.c_int64 * 4)()
    turns, forward, stores, restores, at, held = [], [], 0, 0, 0, {}
    while True:
        nxt(state, ctypes.addressof(action))
        flag, it, start, slot = action[0] & 0xFFFFFFFF, action[1], action[2], action[3]
        if flag == 7:
            break
        if flag == 1:
            stores, held[slot] = stores + 1, it
        elif flag == 2:
            assert held[slot] == it
            restores, at = restores + 1, it
        elif flag == 3:
            assert start == at
            forward.append((start, it))
            at = it
        else:
            assert at == it - 1
            turns.append(it - 1)
    fin(state)
    return turns, forward, stores, restores, held


@pytest.mark.parametrize("budget,nbytes,steps,reserve,chunk", [
    *[(b, n, s, 3, 1) for b, n, s in [
        (16 * MiB, 8000, 100_000), (16 * MiB, 8000, 10_000), (64 * MiB, 8000, 100_000),
        (4 * MiB, 8000, 600), (4 * MiB, 8000, 300), (16 * MiB, 40, 10**6),
        (4 * MiB, 40, 10**6), (16 * MiB, 8000, -1), (64 * MiB, 1 << 20, 1000), (1000, 8, 50),
        (300, 8, 1), (16 * MiB, 80_000, 1000), (16 * MiB, 160_000, 400),
        (64 * MiB, 32000, 40_000)]],
    (4 * MiB, 8000, 2326, 129, 43), (16 * MiB, 8000, 1150, 261, 87),
    (16 * MiB, 40, 144, 52425, 6990)])
def test_compiled_scheme_takes_the_snapshots_the_model_prints(budget, nbytes, steps, reserve,
                                                              chunk):
    module = ir.Module()
    prefix = "pyzyme_test_cost"
    revolve.scheme(module, prefix=prefix)
    for fn in module.functions:
        if fn.name.startswith(prefix):
            fn.prefix = ""  # external, to be looked up
    cm = compile_module(module, name="revolve_cost_test")
    init = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        cm.address(f"{prefix}.init"))
    fin = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(cm.address(f"{prefix}.finalize"))
    data = (ctypes.c_int64 * 3)(budget, reserve, chunk)
    state = init(ctypes.addressof(data), steps, nbytes)
    words = ctypes.cast(state, ctypes.POINTER(ctypes.c_int64))
    s, hot = plan(budget, nbytes, steps, reserve, chunk)
    assert words[1] == max(s, 1)  # the scheme's word S
    assert words[13] == (hot if steps >= 0 else 1)  # _GAP: the two-level ranges
    fin(state)


@pytest.mark.parametrize("budget,nbytes,steps", [
    (24 * MiB, 200_000, 1000), (4 * MiB, 100_000, 300), (4 * MiB, 100_000, 41),
    (4 * MiB, 100_000, 22), (1 * MiB, 8, 300), (16 * MiB, 80_000, 1000),
    (16 * MiB, 160_000, 400)])
def test_compiled_scheme_runs_the_printed_two_level_schedule(budget, nbytes, steps):
    """The IR scheme driven through its actions as the driver would: every step
    differentiated once, in reverse order, with the counts the printed schedule gives; for
    steps of one iteration (two levels where the model says so) and for chunks."""
    s, hot = plan(budget, nbytes, steps, 3)
    turns, forward, stores, restores, held = _drive(budget, nbytes, steps)
    sched = Schedule(steps, s, hot=hot)
    assert max(held) < sched.snapshots
    assert turns == list(range(steps - 1, -1, -1))
    assert (sum(b - a for a, b in forward), stores, restores) == sched._run()
    sched = Schedule.under(budget, nbytes, steps, 3)
    reserve = revolve.chunking(budget, nbytes, steps, 3)[1]
    turns, forward, stores, restores, held = _drive(budget, nbytes, sched.steps, reserve,
                                                    sched.chunk)
    assert max(held, default=0) < sched.snapshots  # 300 steps of 8 bytes: one chunk
    assert turns == list(range(sched.steps - 1, -1, -1))
    assert (sum(sched._span(a, b) for a, b in forward), stores, restores) == sched._run()


def _gradient(budget, n, cells=1000, k=0.25):
    u, du = np.sin(np.linspace(0.0, 3.0, cells)), np.zeros(cells)
    with pyzyme.options(tape_budget=budget):
        (r,) = pyzyme.autodiff(pyzyme.Reverse, stencil, pyzyme.Duplicated(u, du),
                               pyzyme.Const(n), pyzyme.Active(k))
    return du, r[2]


def _state_bytes(cells: int) -> int:
    """The bytes of the stencil's snapshot, read off the error an impossible budget raises
    (one iteration needs 6 states and the scheme's 120 bytes)."""
    with pytest.raises(pyzyme.TapeBudgetError) as err:
        _gradient(1, 2, cells)
    return (int(re.search(r"needs (\d+) bytes", str(err.value)).group(1)) - 120) // 6


def _check_stencil(budget, n, cells, eps, rel):
    """The gradient under ``budget``: the unbudgeted one to rounding, and central
    differences."""
    ref, ref_k = _gradient(None, n, cells)
    got, got_k = _gradient(budget, n, cells)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert got_k == pytest.approx(ref_k, rel=1e-12)
    u0 = np.sin(np.linspace(0.0, 3.0, cells))
    fd_k = (stencil(u0.copy(), n, 0.25 + eps) - stencil(u0.copy(), n, 0.25 - eps)) / (2 * eps)
    assert got_k == pytest.approx(fd_k, rel=rel)
    for i in (1, cells // 3, cells - 2):
        e = np.zeros(cells)
        e[i] = eps
        fd = (stencil(u0 + e, n, 0.25) - stencil(u0 - e, n, 0.25)) / (2 * eps)
        # FD's rounding: a sum of some 500 over 2e-6, a few ulps of it apart (5e-8 each)
        assert got[i] == pytest.approx(fd, rel=rel, abs=1e-6)


def test_stencil_gradient_in_chunks_recomputed_with_a_shorter_last_one():
    """1,000 cells (an 8,008-byte state) for 101 steps under 200,000 bytes: chunks of 2
    (their tape within a quarter of the budget), the last of 1, Revolve's schedule over
    their 51 starts with the 16 snapshots left."""
    n, cells = 101, 1000
    state = _state_bytes(cells)
    assert state == 8008
    assert str(Schedule.under(200_000, state, n, 3)) == (
        "binomial checkpointing (Revolve): 101 steps in 51 chunks of 2 (each chunk "
        "differentiated from a tape of its own), 16 snapshots, each chunk run forward at most "
        "2 times; 169 untaped step runs (recomputation factor 1.67), 47 stores, 50 restores")
    _check_stencil(200_000, n, cells, 1e-6, 1e-6)


def test_stencil_gradient_in_chunks_each_stored():
    """600 steps of 1,000 cells under 4 MiB: 14 chunks of 43, the start of each stored."""
    assert str(Schedule.under(4 * MiB, 8008, 600, 3)).startswith(
        "binomial checkpointing (Revolve): 600 steps in 14 chunks of 43 (each chunk "
        "differentiated from a tape of its own), 14 snapshots, each chunk run forward at most "
        "1 time; 600 untaped step runs (recomputation factor 1.00)")
    _check_stencil(4 * MiB, 600, 1000, 1e-6, 1e-6)


def test_stencil_gradient_of_large_states_in_short_chunks():
    """20,000 cells (160 KB states) for 400 steps under 16 MiB: chunks of 4 (a tape of 2 MiB),
    90 snapshots for their 100 starts."""
    n, cells = 400, 20_000
    assert str(Schedule.under(16 * MiB, 8 * cells + 8, n, 3)).startswith(
        "binomial checkpointing (Revolve): 400 steps in 100 chunks of 4 (each chunk "
        "differentiated from a tape of its own), 90 snapshots")
    _check_stencil(16 * MiB, n, cells, 1e-4, 1e-5)  # 20,000 squares: larger steps


def test_rk4_gradient_in_chunks_recomputed():
    """Lotka-Volterra's RK4 (a 40-byte state in registers, its step's tape known: 16 bytes)
    for 401 steps under 2,400 bytes: chunks of 5 (3 states an iteration, within a quarter of
    the budget), the last of 1, Revolve's schedule over their 81 starts with 33 snapshots."""
    from tests.reverse.test_checkpoint_budget import P, U0, central, lotka_volterra, lv_gradient
    assert str(Schedule.under(2400, 40, 401, 3, tape=16)) == (
        "binomial checkpointing (Revolve): 401 steps in 81 chunks of 5 (each chunk "
        "differentiated from a tape of its own), 33 snapshots, each chunk run forward at most "
        "2 times; 636 untaped step runs (recomputation factor 1.59), 78 stores, 80 restores")
    ref, u_ref = lv_gradient(None, n=401)
    got, u = lv_gradient(2400, n=401)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(u, u_ref)
    fd = central(lambda p: lotka_volterra.py_func(p, U0.copy(), 401, 0.01), P)
    np.testing.assert_allclose(got[:4], fd, rtol=1e-6)
