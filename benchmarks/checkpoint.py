"""Checkpointing under a tape budget: memory and time of reverse mode at budgets of 64, 16 and
4 MiB against no budget, on two long time loops.

- K4 Lotka-Volterra RK4 (``kernels.lotka_volterra``, its state in registers), 10^6 steps;
- K5 1-D diffusion (``kernels.diffusion``, two arrays swapped every step), 1,000 cells x 10^5
  steps: its unbudgeted tape keeps only the two pointers a step;
- the same stencil overwriting one array in place, 1,000 cells x 10^5 steps, differentiated in
  its coefficient too: its unbudgeted tape keeps the values each step overwrites (gigabytes;
  in ``u`` alone the stencil is linear, and the derivative needs no tape).

For each budget (``pyzyme.options(tape_budget=...)``) the table shows the peak extra memory of
one gradient call (``_memory.py``: the resident set's high-water mark over the resident set
before the call, after a warm-up call, in a process of its own started with a malloc that hands
freed memory back at once), the gradient's time over the Numba primal's (medians of ``--runs``
calls each, the primal timed before each gradient), the number of snapshots the scheme uses
("261 of 2,090": the budget allows 2,090, the cost model keeps to those that stay in cache,
``revolve.CACHE_WINDOW``) and the recomputation factor of their schedule ("chunks of 87": the
scheme's steps are chunks of that many iterations, each differentiated from a tape of its
own, ``revolve.chunking``; "two levels": a snapshot every so many steps, each range between
two reversed within the cache)
(``pyzyme.transforms.revolve.Schedule``: untaped runs of a step, on average; 1.00 when every
state is stored), and the largest relative difference from the unbudgeted gradient. A loop
whose unbudgeted tape (here: the unbudgeted call's peak, an estimate) fits in half the budget
runs as it is ("plain loop").

    python benchmarks/checkpoint.py [--quick] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np

import pyzyme
from pyzyme.transforms.checkpoint_loops import RESERVE
from pyzyme.transforms.revolve import SNAPSHOT_OVERHEAD, STATE_WORDS, Schedule

import kernels as K  # noqa: E402 - after pyzyme, whose capture hook must be in place first
import _memory

MiB = 1 << 20
BUDGETS = [None, 64 * MiB, 16 * MiB, 4 * MiB]


@numba.njit
def diffusion_in_place(u, c, steps):
    """K5's stencil overwriting the array it is given, in place: its reverse sweep needs the
    values each step overwrote, a tape of cells x steps values and more. (On a copy made
    inside the function, pyzyme's unbudgeted derivative needs no tape at all.)"""
    n = u.shape[0]
    v = u
    for _ in range(steps):
        left = v[0]
        for i in range(1, n - 1):
            new = v[i] + c * (left - 2.0 * v[i] + v[i + 1])
            left = v[i]
            v[i] = new
    s = 0.0
    for i in range(n):
        s += v[i] * v[i]
    return s


def _cases(quick: bool) -> dict:
    """name -> (title, steps, primal(steps), gradient(shadow, steps), shadow size)."""
    lv_steps = 10**5 if quick else 10**6
    cells, d_steps = 1000, (10**4 if quick else 10**5)
    p = np.array([1.5, 1.0, 3.0, 1.0])
    u = np.random.default_rng(2).standard_normal(cells)

    def lv_grad(dp, steps):
        return pyzyme.autodiff(pyzyme.Reverse, K.lotka_volterra, pyzyme.Active,
                               pyzyme.Duplicated(p, dp), pyzyme.Const(1.0), pyzyme.Const(1.0),
                               pyzyme.Const(1e-4), pyzyme.Const(steps))

    def diffusion_grad(f, c):
        return lambda du, steps: pyzyme.autodiff(pyzyme.Reverse, f, pyzyme.Active,
                                                 pyzyme.Duplicated(u.copy(), du), c(0.25),
                                                 pyzyme.Const(steps))

    return {
        "lv": (f"K4 Lotka-Volterra RK4, {lv_steps:,} steps", lv_steps,
               lambda steps: K.lotka_volterra(p, 1.0, 1.0, 1e-4, steps), lv_grad, 4),
        "diffusion": (f"K5 diffusion (two arrays swapped), {cells:,} cells x {d_steps:,} steps",
                      d_steps, lambda steps: K.diffusion(u, 0.25, steps),
                      diffusion_grad(K.diffusion, pyzyme.Const), cells),
        "in_place": (f"diffusion in place, {cells:,} cells x {d_steps:,} steps", d_steps,
                     lambda steps: diffusion_in_place(u.copy(), 0.25, steps),
                     diffusion_grad(diffusion_in_place, pyzyme.Active), cells),
    }


def _grad(case, budget, steps=None):
    _, full, _, grad, size = case
    shadow = np.zeros(size)
    with pyzyme.options(tape_budget=budget):
        grad(shadow, full if steps is None else steps)
    return shadow


def _state_bytes(case) -> int:
    """The bytes of one snapshot: read off the error an impossible budget raises (one
    iteration needs (3 + RESERVE) states and the scheme's own words)."""
    try:
        _grad(case, 1)
    except pyzyme.TapeBudgetError as err:
        need = int(re.search(r"needs (\d+) bytes", str(err)).group(1))
        return (need - STATE_WORDS * 8 - SNAPSHOT_OVERHEAD) // (3 + RESERVE)
    raise RuntimeError("a budget of one byte was accepted")


def _child(name: str, budget: int | None, quick: bool) -> None:
    """The peak of one gradient, warmed up (compiled, its tape pool primed) on 10 steps, so
    that the tape a full call needs is new memory."""
    case = _cases(quick)[name]
    _grad(case, budget, 10)
    print(json.dumps(_memory.peak_extra(lambda: _grad(case, budget), warm=False)))


def _peak(name: str, budget, quick: bool) -> int | None:
    out = subprocess.run([sys.executable, __file__, "--child", name, "--budget", str(budget),
                          *(["--quick"] if quick else [])], env=_memory.child_env(),
                         capture_output=True, text=True, cwd=Path(__file__).parent)
    if out.returncode:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ratio(case, budget, runs: int) -> float:
    _, steps, primal, _, _ = case
    primal(steps)
    _grad(case, budget)
    ratios = []
    for _ in range(runs):
        t0 = time.perf_counter()
        primal(steps)
        t1 = time.perf_counter()
        _grad(case, budget)
        t2 = time.perf_counter()
        ratios.append((t2 - t1) / (t1 - t0))
    return statistics.median(ratios)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the steps")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cases", default="lv,diffusion,in_place")
    ap.add_argument("--child")
    ap.add_argument("--budget")
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child, None if args.budget == "None" else int(args.budget), args.quick)
        return 0
    print("| kernel | tape_budget | peak extra memory | gradient / primal | snapshots "
          "| recomputation factor (Revolve) | max rel. diff. from unbudgeted |")
    print("|---|---|---|---|---|---|---|")
    for name, case in _cases(args.quick).items():
        if name not in args.cases.split(","):
            continue
        title, steps = case[0], case[1]
        state = _state_bytes(case)
        reference = _grad(case, None)
        tape = None
        for budget in BUDGETS:
            grad = _grad(case, budget)
            diff = float(np.max(np.abs(grad - reference) / (np.abs(reference) + 1e-300)))
            peak = _peak(name, budget, args.quick)
            ratio = _ratio(case, budget, args.runs)
            if budget is None:
                snaps, factor, tape = "-", "(tape)", peak
            elif tape is not None and tape <= budget // 2:
                snaps, factor = "-", "(tape fits: plain loop)"
            else:
                schedule = Schedule.under(budget, state, steps, RESERVE)
                s, most = schedule.snapshots, schedule.allowed
                snaps = f"{s:,}" + (f" of {most:,}" if most else "")
                factor = f"{schedule.factor:.2f}" + (" (two levels)" if schedule.hot else "") \
                    + (f" (chunks of {schedule.chunk})" if schedule.chunk > 1 else "")
            label = "none" if budget is None else f"{budget // MiB} MiB"
            print(f"| {title} | {label} | {_memory.fmt(peak)} | {ratio:.1f} | {snaps} "
                  f"| {factor} | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
