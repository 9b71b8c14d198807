"""How many of the snapshots a tape budget allows the Revolve scheme uses: all of them, or,
where the cost model (pyzyme.transforms.revolve: a store and a restore a step, each slower
once the snapshots outgrow a core's cache) says it is faster, as many as CACHE_WINDOW holds."""

import ctypes

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
    """8 KB states (1,000 cells): 10^5 steps under 16 MiB take a snapshot every 65 steps,
    then reverse each range with 65 snapshots (a quarter of the cache's 2 MiB); under 4 MiB
    (too few for those at the top level) Revolve's schedule keeps to 261 snapshots (2 MiB);
    10^4 steps need no two levels. Lotka-Volterra's 40-byte state uses all
    the budget allows (its steps cost more than its copies)."""
    assert str(Schedule.under(16 * MiB, 8000, 100_000, 3)) == (
        "two-level checkpointing: 100000 steps, 1604 snapshots (the budget allows 2090; 2 MiB "
        "of snapshots stay in cache), one every 65 steps, then each range of 65 reversed "
        "storing every state (each step run forward at most 2 times); 198432 untaped step "
        "runs (recomputation factor 1.98), 98461 stores, 99999 restores")
    # 4,000 cells under 64 MiB: ranges of 16 steps would need 2,500 snapshots at the top
    # level, more than the 2,097 allowed; ranges of 65 (all of the cache) need 615.
    assert plan(64 * MiB, 32000, 40_000, 3) == (681, 65)
    assert str(Schedule.under(4 * MiB, 8000, 100_000, 3)) == (
        "binomial checkpointing (Revolve): 100000 steps, 261 snapshots (the budget allows "
        "518; 2 MiB of snapshots stay in cache), each step run forward at most 3 times; "
        "265285 untaped step runs (recomputation factor 2.65), 99288 stores, 99999 restores")
    assert plan(16 * MiB, 8000, 10_000, 3) == (261, 0)
    assert snapshots(16 * MiB, 40, 10**6, 3) == allowed(16 * MiB, 40, 10**6, 3) == 349_518
    assert str(Schedule.under(16 * MiB, 40, 10**6, 3)).startswith(
        "binomial checkpointing (Revolve): 1000000 steps, 349518 snapshots, each step")
    # Fewer steps than snapshots in the cache, a while loop's unknown count: all of them.
    assert snapshots(16 * MiB, 8000, 200, 3) == 200
    assert snapshots(16 * MiB, 8000, -1, 3) == 2090
    # A state larger than half the cache: no cap.
    assert snapshots(64 * MiB, 1 << 20, 1000, 3) == allowed(64 * MiB, 1 << 20, 1000, 3) == 58


@pytest.mark.parametrize("budget,nbytes,steps", [
    (16 * MiB, 8000, 100_000), (16 * MiB, 8000, 10_000), (64 * MiB, 8000, 100_000),
    (4 * MiB, 8000, 600), (4 * MiB, 8000, 300), (16 * MiB, 40, 10**6), (4 * MiB, 40, 10**6),
    (16 * MiB, 8000, -1), (64 * MiB, 1 << 20, 1000), (1000, 8, 50), (300, 8, 1),
    (16 * MiB, 80_000, 1000), (16 * MiB, 160_000, 400), (64 * MiB, 32000, 40_000)])
def test_compiled_scheme_takes_the_snapshots_the_model_prints(budget, nbytes, steps):
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
    data = (ctypes.c_int64 * 2)(budget, 3)
    state = init(ctypes.addressof(data), steps, nbytes)
    words = ctypes.cast(state, ctypes.POINTER(ctypes.c_int64))
    s, hot = plan(budget, nbytes, steps, 3)
    assert words[1] == max(s, 1)  # the scheme's word S
    assert words[13] == (hot if steps >= 0 else 1)  # _GAP: the two-level ranges
    fin(state)


@pytest.mark.parametrize("budget,nbytes,steps", [
    (24 * MiB, 200_000, 1000), (4 * MiB, 100_000, 300), (4 * MiB, 100_000, 41),
    (4 * MiB, 100_000, 22), (1 * MiB, 8, 300), (16 * MiB, 80_000, 1000),
    (16 * MiB, 160_000, 400)])
def test_compiled_scheme_runs_the_printed_two_level_schedule(budget, nbytes, steps):
    """The IR scheme driven through its actions as the driver would: every step
    differentiated once, in reverse order, with the counts the printed schedule gives."""
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
    data = (ctypes.c_int64 * 2)(budget, 3)
    state = init(ctypes.addressof(data), steps, nbytes)
    action = (ctypes.c_int64 * 4)()
    turns, forward, stores, restores, at, held = [], 0, 0, 0, 0, {}
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
            forward, at = forward + it - start, it
        else:
            assert at == it - 1
            turns.append(it - 1)
    fin(state)
    sched = Schedule.under(budget, nbytes, steps, 3)
    assert max(held) < sched.snapshots
    assert turns == list(range(steps - 1, -1, -1))
    assert (forward, stores, restores) == sched._run()


def _gradient(budget, n, cells=1000, k=0.25):
    u, du = np.sin(np.linspace(0.0, 3.0, cells)), np.zeros(cells)
    with pyzyme.options(tape_budget=budget):
        (r,) = pyzyme.autodiff(pyzyme.Reverse, stencil, pyzyme.Duplicated(u, du),
                               pyzyme.Const(n), pyzyme.Active(k))
    return du, r[2]


def test_stencil_gradient_with_the_snapshots_kept_to_the_cache():
    """600 steps of 1,000 cells under 4 MiB: 261 of the 518 snapshots the budget allows."""
    n = 600
    assert (snapshots(4 * MiB, 8000, n, 3), allowed(4 * MiB, 8000, n, 3)) == (261, 518)
    ref, ref_k = _gradient(None, n)
    got, got_k = _gradient(4 * MiB, n)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert got_k == pytest.approx(ref_k, rel=1e-12)
    u0 = np.sin(np.linspace(0.0, 3.0, 1000))
    eps = 1e-6
    fd_k = (stencil(u0.copy(), n, 0.25 + eps) - stencil(u0.copy(), n, 0.25 - eps)) / (2 * eps)
    assert got_k == pytest.approx(fd_k, rel=1e-6)
    for i in (1, 300, 998):
        e = np.zeros(1000)
        e[i] = eps
        fd = (stencil(u0 + e, n, 0.25) - stencil(u0 - e, n, 0.25)) / (2 * eps)
        assert got[i] == pytest.approx(fd, rel=1e-6, abs=1e-7)  # FD: 500 / 1e-6 * eps_64


def test_stencil_gradient_on_the_two_level_schedule():
    """20,000 cells (160 KB states) for 400 steps under 16 MiB: a snapshot every 13 steps,
    each range then reversed with 13 snapshots (2 MiB), 44 snapshots of the 99 allowed."""
    n, cells = 400, 20_000
    assert plan(16 * MiB, 8 * cells, n, 3) == (44, 13)
    ref, ref_k = _gradient(None, n, cells)
    got, got_k = _gradient(16 * MiB, n, cells)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)
    assert got_k == pytest.approx(ref_k, rel=1e-12)
    u0 = np.sin(np.linspace(0.0, 3.0, cells))
    eps = 1e-4  # the sum of 20,000 squares: smaller steps lose more to rounding
    fd_k = (stencil(u0.copy(), n, 0.25 + eps) - stencil(u0.copy(), n, 0.25 - eps)) / (2 * eps)
    assert got_k == pytest.approx(fd_k, rel=1e-5)
    for i in (1, 7000, cells - 2):
        e = np.zeros(cells)
        e[i] = eps
        fd = (stencil(u0 + e, n, 0.25) - stencil(u0 - e, n, 0.25)) / (2 * eps)
        assert got[i] == pytest.approx(fd, rel=1e-5, abs=1e-7)
