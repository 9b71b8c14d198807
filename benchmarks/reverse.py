"""Reverse mode: gradient time over Numba primal time, on five loop-heavy kernels.

For each kernel of ``kernels.py`` (K1 Taylor series, K2 triple-loop matmul VJP, K3 ADBench's GMM
d=10 K=25 n=1000 and K3L the GMM at d=64 K=200 n=1000 drawn from ADBench's distributions, K4
Lotka-Volterra RK4, K5 1-D diffusion; ``--small`` leaves K3L out: there ~4% of the softmax
weights are subnormal, and every reverse sweep, the hand-written one too, multiplies by them at
subnormal speed where the primal does not) the table shows, after
warm-up, the median time of 7 batches (each ~20 ms or one call; 3 batches for kernels of a
second) and the median of the ratios of each batch to a batch of the primal run just before it
(so that load drifting over the run, on a shared machine, cancels out):

- the Numba primal and the adjoint written by hand in Numba, both called from an @njit driver
  loop so that Python's call cost stays out; the hand-written adjoint is the ideal to reach;
- pyzyme's reverse mode called from Python (``autodiff(Reverse, ...)``: microseconds of call
  cost against milliseconds of kernel) and, where the kernel returns a float, ``grad(f)``
  called inside an @njit driver loop;
- pyzyme's forward mode, one directional derivative (``DuplicatedNoNeed``: the tangent alone),
  from Python (K1, K4, K5).

"first call" is the first call on a fresh copy of the function (Numba compile, plus AD for pyzyme
rows; for the grad row, grad(f) and a first call through a small @njit wrapper, compiled then).
"max rel. err" compares with the hand-written adjoint: elementwise relative error, each
denominator floored at 1e-6 x the largest entry of that reference gradient (for the forward row:
the relative error of the directional derivative; "(!)" marks errors over 1e-6). "tape" is the
memory a reverse sweep keeps: known for the hand-written adjoints; for pyzyme, what the tape of
the same call in split mode holds (``Tape.nbytes``), an upper bound for the combined derivative
timed here, which reloads the argument values split mode must keep. For K3L, whose split tape
takes hundreds of megabytes (it took gigabytes before the parameters read per point were kept
for one point only), it is measured at n = 10, 20 and 40 points and extrapolated linearly to
n = 1000 (marked so; the three must lie on a line, else the cell says so).
"peak extra mem" is measured the same way for every row, here and in peers.py: how far the
resident set rose, at its highest, during one call after a warm-up call, over the resident set
just before it (``_memory.py``: method and granularity), in a second process per kernel started
with a malloc that hands freed memory back at once (never the process that times). For
pyzyme's combined reverse call that is its tape plus temporaries; it counts the gradient the
call returns, not the inputs or the shadows made before the call.
Before timing, every hand-written adjoint is checked against central finite differences on a
small size (asserted; the hand-written row shows the difference found, "FD").
Each kernel is measured in a process of its own (its primal and derivatives together, so that
ratios stay within one process): a derivative that crashes its process shows as "crashed" in its
row, and the run exits with status 1. A pyzyme row reads "pending" while pyzyme raises
UnsupportedError for it (not implemented yet), "error" for any other exception; a footnote
under the table gives the message.
Target (DESIGN.md): reverse-mode gradient <= 3x the primal, forward <= 1.5x.

    python benchmarks/reverse.py [--small] [--taylor-n 10000000] [--kernels K1,K3L]
                                 [--in-process] [--no-memory]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np

import pyzyme
from pyzyme import Active, Const, Duplicated, DuplicatedNoNeed, Forward, Reverse

import _memory
import kernels as K  # after pyzyme, whose capture hook must be in place before Numba compiles

PENDING = "pending"
LARGE_ONLY = ("K3L",)   # kernels a --small run leaves out (unless named in --kernels)
_NOTES: list[str] = []   # remarks on the row being measured, beside any error


# --- timing --------------------------------------------------------------------------------

def _value_loop(fn):
    """An @njit loop calling ``fn(*args)`` ``reps`` times and summing its float results."""
    @numba.njit
    def loop(args, reps):
        acc = 0.0
        for _ in range(reps):
            acc += fn(*args)
        return acc
    return loop


def _call_loop(fn):
    """An @njit loop calling ``fn(*args)`` (which writes into its arguments) ``reps`` times."""
    @numba.njit
    def loop(args, reps):
        for _ in range(reps):
            fn(*args)
        return 0.0
    return loop


def _picked_loop(fn, pick):
    """An @njit loop summing ``pick(fn(*args))``: for functions returning arrays or tuples."""
    @numba.njit
    def loop(args, reps):
        acc = 0.0
        for _ in range(reps):
            acc += pick(fn(*args))
        return acc
    return loop


def _loop_sampler(loop, args, batch_s=0.02):
    """Warm up an @njit driver ``loop(args, reps)``; give back a function timing one batch of
    ``reps`` calls (seconds per call), ``reps`` chosen so that a batch takes ``batch_s``."""
    t = time.perf_counter()
    loop(args, 1)
    one = time.perf_counter() - t
    reps = max(1, math.ceil(batch_s / max(one, 1e-9)))
    loop(args, reps)

    def sample() -> float:
        t = time.perf_counter()
        loop(args, reps)
        return (time.perf_counter() - t) / reps
    return sample


def _call_sampler(prepare, run, batch_s=0.02):
    """As :func:`_loop_sampler` for ``run()`` called from Python, ``prepare()`` (resetting
    shadows) before each call and left out of the time."""
    prepare()
    t = time.perf_counter()
    run()
    one = time.perf_counter() - t
    reps = max(1, math.ceil(batch_s / max(one, 1e-9)))

    def sample() -> float:
        total = 0.0
        for _ in range(reps):
            prepare()
            t = time.perf_counter()
            run()
            total += time.perf_counter() - t
        return total / reps
    return sample


class _Primal:
    """The primal's batches, timed alternately with each other row's, so that a ratio compares
    batches run seconds apart (this machine may be shared: load drifts over a run)."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler
        self.times: list[float] = []

    def compare(self, sampler, samples=7, budget_s=2.0) -> tuple[float, float]:
        """Median seconds per call of ``sampler``'s batches and median ratio to the primal's,
        over ``samples`` pairs of batches (fewer, down to 3, where they take over ``budget_s``:
        kernels of a second)."""
        times, ratios = [], []
        while len(times) < samples:
            start = time.perf_counter()
            p = self.sampler()
            t = sampler()
            self.times.append(p)
            times.append(t)
            ratios.append(t / p)
            if len(times) == 1:
                pair = time.perf_counter() - start
                samples = min(samples, max(3, math.ceil(budget_s / pair)))
        return statistics.median(times), statistics.median(ratios)

    @property
    def time(self) -> float:
        return statistics.median(self.times)


def _first_call(call) -> tuple[float, Any]:
    t = time.perf_counter()
    out = call()
    return time.perf_counter() - t, out


class _Pending(Exception):
    """A pyzyme step failed: ``word`` fills the row's cells, ``note`` becomes its footnote."""

    def __init__(self, word: str, note: str) -> None:
        super().__init__(note)
        self.word = word
        self.note = note


def _pending_cells(p: _Pending, tape: bool = False) -> dict[str, str]:
    cells = {"time": p.word, "ratio": p.word, "first": p.word, "err": p.word, "note": p.note}
    if tape:
        cells["tape"] = p.word
    return cells


def _pyzyme(what: str, step):
    """Run ``step()``; an UnsupportedError makes the row "pending", any other error "error",
    each with a footnote, so that the table is printed whatever pyzyme can do today."""
    try:
        return step()
    except Exception as err:  # noqa: BLE001 - a benchmark reports and goes on
        unsupported = isinstance(err, pyzyme.UnsupportedError) or "UnsupportedError" in str(err)
        first = (str(err).strip().splitlines() or [""])[0]
        raise _Pending(PENDING if unsupported else "error",
                       f"{what}: {type(err).__name__}: {first[:160]}") from None


# --- the kernels as cases ------------------------------------------------------------------

@dataclass
class Case:
    name: str
    primal: Any                       # @njit primal
    args: tuple                       # its arguments
    adjoint: Any                      # @njit hand-written adjoint
    adjoint_args: Callable[[], tuple]  # its arguments, shadows zeroed
    gradient: Callable[[tuple, Any], list]  # the gradient out of (adjoint_args, its result)
    hand_tape: int                    # bytes the hand-written adjoint keeps for its sweep
    reverse: Callable                 # f -> (prepare, run): run() does autodiff(Reverse, f, ...)
    grad_argnums: Any = None          # for pyzyme.grad(f, argnums); None: no grad row
    grad_pick: Any = None             # @njit: a float out of grad's result (None: a float)
    forward: Callable | None = None   # f -> run(): one directional derivative
    direction: list | None = None     # the direction forward mode takes, per gradient entry
    tape_from: Callable[[int], "Case"] | None = None  # n -> this case with n points, whose
    tape_n: int = 0                   # split tapes extrapolate to tape_n (too big to allocate)

    @property
    def primal_returns_value(self) -> bool:
        return self.primal is not K.matmul

    @property
    def adjoint_returns_value(self) -> bool:
        return self.adjoint is K.taylor_adjoint


@numba.njit
def _pick_array(r):
    return r[0]


@numba.njit
def _pick_three(r):
    return r[0][0] + r[1][0, 0] + r[2][0, 0]


def taylor_case(n: int) -> Case:
    # x**i stays a normal float up to i = 10**7 (x**i = e**-10 there), and so do the squares
    # Numba's integer power takes on the way: at x = 0.5 they go subnormal from i = 1024 on,
    # and every term then costs what a subnormal multiply costs, in every row alike.
    x = 1.0 - 1e-6

    def reverse(f):
        return (lambda: None,
                lambda: [pyzyme.autodiff(Reverse, f, Active, Active(x), Const(n))[0][0]])

    def forward(f):
        return lambda: pyzyme.autodiff(Forward, f, DuplicatedNoNeed, Duplicated(x, 1.0),
                                       Const(n))[0]

    return Case(f"K1 taylor n={n:,}", K.taylor, (x, n), K.taylor_adjoint, lambda: (x, n),
                lambda args, ret: [ret], 0, reverse, grad_argnums=0, forward=forward,
                direction=[1.0])


def matmul_case(small: bool) -> Case:
    n, k, m = (128, 64, 128) if small else (1024, 64, 512)
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((n, k)), rng.standard_normal((k, m))
    cot = rng.standard_normal((n, m))
    C = np.empty((n, m))
    dA, dB, dC = np.zeros_like(A), np.zeros_like(B), np.zeros_like(C)

    def prepare():
        dA[:] = 0.0
        dB[:] = 0.0
        dC[:] = cot

    def reverse(f):
        def run():
            pyzyme.autodiff(Reverse, f, Const, Duplicated(A, dA), Duplicated(B, dB),
                            Duplicated(C, dC))
            if np.any(dC != 0.0):
                _NOTES.append("the shadow of C was not consumed (zeroed) by the reverse call")
            return [dA.copy(), dB.copy()]
        return prepare, run

    tA, tB, tC = rng.standard_normal(A.shape), rng.standard_normal(B.shape), np.empty_like(C)

    def forward(f):
        # The tangent of C in the direction (tA, tB), read out as <cot, tC> (a number to
        # compare with <dA, tA> + <dB, tB>; the sum is 1-2% of the time).
        def run():
            pyzyme.autodiff(Forward, f, Const, Duplicated(A, tA), Duplicated(B, tB),
                            Duplicated(C, tC))
            return float(np.sum(cot * tC))
        return run

    return Case(f"K2 matmul {n}x{k} @ {k}x{m} (VJP)", K.matmul, (A, B, C), K.matmul_adjoint,
                lambda: (A, B, np.zeros_like(A), np.zeros_like(B), cot),
                lambda args, ret: [args[2], args[3]], 0, reverse, forward=forward,
                direction=[tA, tB])


def gmm_case(large: bool, points: int | None = None) -> Case:
    """K3 (ADBench's d=10 K=25 n=1000) or, ``large``, K3L (d=64 K=200 n=1000 generated);
    ``points``: the first that many points only (for K3L's tape)."""
    if large:
        data, label = K.generate_gmm(64, 200, 1000), "generated d=64 K=200 n=1000"
    else:
        data, label = K.read_gmm(), "ADBench d=10 K=25 n=1000"
    if points is not None:
        data = data[:3] + (data[3][:points].copy(),) + data[4:]
        label = label.replace("n=1000", f"n={points}")
    alphas, means, icf, x, gamma, m = data
    shadows = [np.zeros_like(alphas), np.zeros_like(means), np.zeros_like(icf)]

    def prepare():
        for s in shadows:
            s[:] = 0.0

    def reverse(f):
        def run():
            pyzyme.autodiff(Reverse, f, Active, Duplicated(alphas, shadows[0]),
                            Duplicated(means, shadows[1]), Duplicated(icf, shadows[2]),
                            Const(x), Const(gamma), Const(m))
            return [s.copy() for s in shadows]
        return prepare, run

    k, d = means.shape
    return Case(f"{'K3L' if large else 'K3'} GMM {label}", K.gmm_objective, data, K.gmm_adjoint,
                lambda: data + (np.zeros_like(alphas), np.zeros_like(means), np.zeros_like(icf)),
                lambda args, ret: list(args[6:9]), 2 * k * d * 8, reverse,
                grad_argnums=(0, 1, 2), grad_pick=_pick_three,
                tape_from=(lambda n: gmm_case(large, n)) if large and points is None else None,
                tape_n=x.shape[0])


def lotka_volterra_case() -> Case:
    p = np.array([1.5, 1.0, 3.0, 1.0])
    u0, v0, dt, steps = 1.0, 1.0, 1e-3, 10_000
    dp = np.zeros(4)
    direction = np.array([0.5, -0.25, 0.75, 1.0])

    def prepare():
        dp[:] = 0.0

    def reverse(f):
        def run():
            pyzyme.autodiff(Reverse, f, Active, Duplicated(p, dp), Const(u0), Const(v0),
                            Const(dt), Const(steps))
            return [dp.copy()]
        return prepare, run

    def forward(f):
        return lambda: pyzyme.autodiff(Forward, f, DuplicatedNoNeed,
                                       Duplicated(p, direction.copy()), Const(u0), Const(v0),
                                       Const(dt), Const(steps))[0]

    return Case(f"K4 Lotka-Volterra RK4 {steps} steps", K.lotka_volterra,
                (p, u0, v0, dt, steps), K.lotka_volterra_adjoint,
                lambda: (p, u0, v0, dt, steps, np.zeros(4)), lambda args, ret: [args[5]],
                2 * steps * 8, reverse, grad_argnums=0, grad_pick=_pick_array, forward=forward,
                direction=[direction])


def diffusion_case() -> Case:
    cells, steps, c = 1000, 1000, 0.25
    rng = np.random.default_rng(2)
    u = rng.standard_normal(cells)
    du = np.zeros(cells)
    direction = rng.standard_normal(cells)

    def prepare():
        du[:] = 0.0

    def reverse(f):
        def run():
            pyzyme.autodiff(Reverse, f, Active, Duplicated(u, du), Const(c), Const(steps))
            return [du.copy()]
        return prepare, run

    def forward(f):
        return lambda: pyzyme.autodiff(Forward, f, DuplicatedNoNeed,
                                       Duplicated(u, direction.copy()), Const(c),
                                       Const(steps))[0]

    return Case(f"K5 diffusion {cells} cells x {steps} steps", K.diffusion, (u, c, steps),
                K.diffusion_adjoint, lambda: (u, c, steps, np.zeros(cells)),
                lambda args, ret: [args[3]], 0, reverse, grad_argnums=0,
                grad_pick=_pick_array, forward=forward, direction=[direction])


# --- measuring -----------------------------------------------------------------------------

def _max_rel(got, ref) -> float:
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        g, r = np.asarray(g, dtype=np.float64), np.asarray(r, dtype=np.float64)
        if g.shape != r.shape:
            raise ValueError(f"gradient of shape {g.shape}, expected {r.shape}")
        floor = max(1e-6 * float(np.max(np.abs(r))), np.finfo(np.float64).tiny)
        worst = max(worst, float(np.max(np.abs(g - r) / np.maximum(np.abs(r), floor))))
    return worst


def _tape_bytes(f, run) -> int:
    """The bytes a split-mode tape of the same call holds (``Tape.nbytes``: its block, loop
    caches and stacks). Split mode also keeps every argument value it reads, since the caller
    may change them before the reverse pass; the combined derivative timed here reloads those,
    so this is an upper bound on its tape."""
    calls = []
    real = pyzyme.autodiff

    def record(mode, fn, *args):
        calls.append((fn, args))
        return real(mode, fn, *args)

    pyzyme.autodiff = record
    try:
        run()
    finally:
        pyzyme.autodiff = real
    fn, args = calls[-1]
    fwd, _ = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, fn, *args)
    tape, _, _ = fwd(*args[1:])
    nbytes = tape.nbytes
    tape.free()
    return nbytes


TAPE_POINTS = (10, 20, 40)   # sizes a tape too big to allocate is measured at


def _tape_cell(case: Case, f, run) -> str:
    """The "tape" cell: the split tape of ``run()``'s call, or, for a case with ``tape_from``,
    that of the same call at :data:`TAPE_POINTS` sizes extrapolated to ``case.tape_n``."""
    if case.tape_from is None:
        return f"{_tape_bytes(f, run):,} B (split)"
    sizes = []
    for n in TAPE_POINTS:
        prepare, small_run = case.tape_from(n).reverse(f)
        prepare()
        sizes.append(_tape_bytes(f, small_run))
    return extrapolated_tape(TAPE_POINTS, sizes, case.tape_n)


def extrapolated_tape(points: tuple[int, int, int], nbytes: list[int], n: int) -> str:
    """The tape cell for size ``n`` from tapes of ``nbytes`` at three sizes ``points``: the
    line through the first two, if the third lies on it too; else the three as measured.

    Examples
    --------
    >>> extrapolated_tape((10, 20, 40), [1_100, 2_100, 4_100], 1000)
    '100,100 B (split, extrapolated from n = 10, 20, 40)'
    """
    (n0, n1, n2), (b0, b1, b2) = points, nbytes
    slope = (b1 - b0) / (n1 - n0)
    if b0 + slope * (n2 - n0) != b2:
        return f"not linear in n: {b0:,} / {b1:,} / {b2:,} B at n = {n0} / {n1} / {n2} (split)"
    return f"{round(b0 + slope * (n - n0)):,} B (split, extrapolated from n = {n0}, {n1}, {n2})"


Row = dict[str, str]


def _fmt_t(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _fmt_err(e: float) -> str:
    return f"{e:.1e}" + (" (!)" if e > 1e-6 else "")


def measure(key: str, case: Case, emit) -> None:
    """Check kernel ``key``'s hand-written adjoint against finite differences, then measure
    ``case``'s rows; ``emit(event)`` is told the rows' names first (``{"case": ..., "names":
    [...]}``), each row's index before it is measured (``{"start": i}``) and its cells after
    (``{"row": i, "cells": {...}}``)."""
    names = ["Numba primal", "hand-written adjoint", "pyzyme reverse (autodiff, from Python)",
             "pyzyme grad(f) in an @njit loop"]
    if case.forward is not None:
        names.append("pyzyme forward, 1 direction (from Python)")
    emit({"case": case.name, "names": names})
    emit({"start": 1})  # a failed check shows on the hand-written row
    fd_err = K.check_adjoints((key,))[key]
    cells: list[Row] = []

    def start(i: int) -> Row:
        emit({"start": i})
        _NOTES.clear()
        cells.append({})
        return cells[i]

    def done(i: int) -> None:
        if _NOTES:
            note = "; ".join(dict.fromkeys(_NOTES))
            cells[i]["note"] = f"{cells[i]['note']}; {note}" if "note" in cells[i] else note
        if cells[0].get("times"):
            cells[0]["time"] = _fmt_t(statistics.median(cells[0]["times"]))
        emit({"row": 0, "cells": {k: v for k, v in cells[0].items() if k != "times"}})
        if i:
            emit({"row": i, "cells": cells[i]})

    # primal
    row = start(0)
    first, _ = _first_call(lambda: K.fresh(case.primal)(*case.args))
    primal_loop = (_value_loop if case.primal_returns_value else _call_loop)(case.primal)
    primal = _Primal(_loop_sampler(primal_loop, case.args))
    row.update(ratio="1.00", first=_fmt_t(first), times=primal.times)
    done(0)
    # hand-written adjoint
    row = start(1)
    fresh_args = case.adjoint_args()
    first, ret = _first_call(lambda: K.fresh(case.adjoint)(*fresh_args))
    ref = case.gradient(fresh_args, ret)
    adjoint_loop = (_value_loop if case.adjoint_returns_value else _call_loop)(case.adjoint)
    t, ratio = primal.compare(_loop_sampler(adjoint_loop, case.adjoint_args()))
    row.update(time=_fmt_t(t), ratio=f"{ratio:.2f}", first=_fmt_t(first),
               err=f"ref; FD {fd_err:.0e}", tape=f"{case.hand_tape} B")
    done(1)
    # pyzyme reverse, from Python
    row = start(2)
    try:
        f = K.fresh(case.primal)
        prepare, run = case.reverse(f)
        prepare()
        first, got = _first_call(lambda: _pyzyme("reverse", run))
        row["first"] = _fmt_t(first)
        row["err"] = _fmt_err(_pyzyme("reverse", lambda: _max_rel(got, ref)))
        t, ratio = _pyzyme("reverse", lambda: primal.compare(_call_sampler(prepare, run)))
        prepare()
        row.update(time=_fmt_t(t), ratio=f"{ratio:.2f}",
                   tape=_pyzyme("reverse", lambda: _tape_cell(case, f, run)))
    except _Pending as p:
        row.update(_pending_cells(p, tape=True))
    done(2)
    # pyzyme grad(f) inside an @njit loop
    row = start(3)
    if case.grad_argnums is None:
        row.update(time="- (no float result)", ratio="-", first="-", err="-")
    else:
        try:
            row.update(_grad_in_njit(case, primal, ref))
        except _Pending as p:
            row.update(_pending_cells(p))
    done(3)
    # pyzyme forward, one direction, from Python
    if case.forward is not None:
        row = start(4)
        try:
            run = case.forward(K.fresh(case.primal))
            first, got = _first_call(lambda: _pyzyme("forward", run))
            expected = sum(float(np.sum(np.asarray(r) * np.asarray(v)))
                           for r, v in zip(ref, case.direction, strict=True))
            row["first"] = _fmt_t(first)
            row["err"] = _fmt_err(abs(float(got) - expected) / max(abs(expected), 1e-300))
            t, ratio = _pyzyme("forward",
                               lambda: primal.compare(_call_sampler(lambda: None, run)))
            row.update(time=_fmt_t(t), ratio=f"{ratio:.2f}")
        except _Pending as p:
            row.update(_pending_cells(p))
        done(4)


def _grad_build(case: Case):
    """``grad(f)`` of a fresh copy of the primal, and an @njit function calling it once."""
    g = pyzyme.grad(K.fresh(case.primal), argnums=case.grad_argnums)

    @numba.njit
    def once(args):
        return g(*args)

    return g, once


def _grad_in_njit(case: Case, primal: _Primal, ref: list) -> Row:
    pick = case.grad_pick
    t0 = time.perf_counter()
    g, once = _pyzyme("grad", lambda: _grad_build(case))
    got = _pyzyme("grad", lambda: once(case.args))
    first = time.perf_counter() - t0
    if isinstance(case.grad_argnums, tuple):
        got = list(got)
    else:
        got = [got]
    loop = _value_loop(g) if pick is None else _picked_loop(g, pick)
    t, ratio = _pyzyme("grad", lambda: primal.compare(_loop_sampler(loop, case.args)))
    return {"time": _fmt_t(t), "ratio": f"{ratio:.2f}", "first": _fmt_t(first),
            "err": _fmt_err(_pyzyme("grad", lambda: _max_rel(got, ref)))}


# --- peak extra memory ---------------------------------------------------------------------

def measure_memory(case: Case, emit) -> None:
    """The "mem" cell of each of ``case``'s rows (as :func:`measure` numbers them): the peak
    extra resident set of one call (``_memory.peak_extra``), each row's callable built as
    :func:`measure` builds it; ``emit`` as there. Meant for a process started with
    ``_memory.ENV``; a row pyzyme cannot do gets "-"."""
    def cell(i: int, build) -> None:
        emit({"start": i})
        try:
            mem = _memory.fmt(_memory.peak_extra(build()))
        except Exception:  # noqa: BLE001 - the timing run reports the error in the row
            mem = "-"
        emit({"row": i, "cells": {"mem": mem}})

    def adjoint():
        args = case.adjoint_args()   # the shadows exist before the call, as in the timing
        return lambda: case.adjoint(*args)

    def reverse():
        prepare, run = case.reverse(K.fresh(case.primal))
        return lambda: (prepare(), run())

    def grad():
        _, once = _grad_build(case)
        return lambda: once(case.args)

    cell(0, lambda: lambda: case.primal(*case.args))
    cell(1, adjoint)
    cell(2, reverse)
    if case.grad_argnums is not None:
        cell(3, grad)
    if case.forward is not None:
        cell(4, lambda: case.forward(K.fresh(case.primal)))


# --- main ----------------------------------------------------------------------------------

_COLUMNS = [("row", "what", "l"), ("time", "time", "r"), ("ratio", "/ primal", "r"),
            ("first", "first call", "r"), ("err", "max rel. err", "r"), ("tape", "tape", "r"),
            ("mem", "peak extra mem", "r")]
_EVENT = "@@reverse.py "   # a child's event lines on its stdout start with this


class _Kernel:
    """One kernel's rows as they arrive from :func:`measure`."""

    def __init__(self, key: str) -> None:
        self.name = key
        self.rows: list[Row] = []
        self.running: int | None = None
        self.ok = True

    def event(self, ev: dict) -> None:
        if "case" in ev:
            self.name = ev["case"]
            self.rows = [{"row": name} for name in ev["names"]]
        elif "start" in ev:
            self.running = ev["start"]
        elif "row" in ev:
            self.rows[ev["row"]].update(ev["cells"])
            if ev["row"] == self.running:
                self.running = None

    def failed(self, word: str, note: str) -> None:
        """The process measuring this kernel died (or hung) on the row it was measuring; the
        rows after it were not measured."""
        self.ok = False
        if self.running is None:
            self.rows.append({"row": "(after its rows)"})
            self.running = len(self.rows) - 1
        self.rows[self.running].update(time=word, ratio=word, first=word, err=word, note=note)
        for row in self.rows[self.running + 1:]:
            row.update(time="not run", ratio="-", first="-", err="-")

    def memory_failed(self, word: str, note: str) -> None:
        """The process measuring this kernel's memory died (or hung) on the row it was on."""
        if self.running is None or self.running >= len(self.rows):
            return
        row = self.rows[self.running]
        row["mem"] = word
        row["note"] = f"{row['note']}; {note}" if row.get("note") else note
        for row in self.rows[self.running + 1:]:
            row.setdefault("mem", "not run")


def _table(kernels: list[_Kernel]) -> tuple[str, list[str]]:
    """The Markdown table, and the footnotes its cells refer to."""
    notes: list[str] = []
    lines = ["| kernel | " + " | ".join(h for _, h, _ in _COLUMNS) + " |",
             "| --- | " + " | ".join("---:" if a == "r" else "---" for *_, a in _COLUMNS) + " |"]
    for kernel in kernels:
        for i, row in enumerate(kernel.rows):
            row = dict(row)
            if row.get("note"):
                if row["note"] not in notes:
                    notes.append(row["note"])
                row["time"] = f"{row.get('time', '')} [{notes.index(row['note']) + 1}]"
            cells = [kernel.name if i == 0 else ""] + [row.get(k, "") for k, _, _ in _COLUMNS]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), notes


def _in_child(key: str, child_argv: list[str], timeout_s: float, kernel: _Kernel | None = None,
              memory: bool = False) -> _Kernel:
    """Measure one kernel in a process of its own, so that a derivative that crashes the
    process (a fault in generated code) costs its own row and the rows after it, no more.
    ``memory``: fill the "mem" cells of ``kernel``'s rows (measured already) instead, in a
    process started with ``_memory.ENV``."""
    kernel = kernel if kernel is not None else _Kernel(key)
    kernel.running = None
    command = [sys.executable, str(Path(__file__).resolve()), *child_argv, "--kernels", key,
               "--child"] + (["--memory"] if memory else [])
    env = _memory.child_env() if memory else None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env=env)
        out, err, rc = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as t:
        out = t.stdout.decode() if isinstance(t.stdout, bytes) else (t.stdout or "")
        err, rc = "", None
    for line in out.splitlines():
        if line.startswith(_EVENT):
            kernel.event(json.loads(line[len(_EVENT):]))
    failed = kernel.memory_failed if memory else kernel.failed
    what = "memory: " if memory else ""
    if rc is None:
        failed("timed out", f"{what}{key}: no result in {timeout_s:.0f} s")
    elif rc != 0:
        last = ([ln for ln in err.splitlines() if ln.strip()] or [""])[-1].strip()
        if rc < 0:
            failed("crashed", f"{what}the process died (signal {-rc}): {last[:160]}")
        else:
            failed("failed", f"{what}exit status {rc}: {last[:160]}")
    return kernel


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="matmul 128x64 @ 64x128, no K3L")
    parser.add_argument("--taylor-n", type=float, default=1e6, help="Taylor terms (1e6; 1e7)")
    parser.add_argument("--kernels", help="which kernels, e.g. K1,K3L (default: all; --small: "
                        "all but " + ",".join(LARGE_ONLY) + ")")
    parser.add_argument("--in-process", action="store_true",
                        help="measure every kernel in this process (a crash then ends the run)")
    parser.add_argument("--no-memory", action="store_true",
                        help="leave out the peak extra memory column (no measuring processes)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one kernel's process may take (600)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    builders = {"K1": lambda: taylor_case(int(opts.taylor_n)),
                "K2": lambda: matmul_case(opts.small),
                "K3": lambda: gmm_case(False),
                # ~4% of K3L's softmax weights are subnormal: the reverse sweep multiplies by
                # them at subnormal speed, the primal does not
                "K3L": lambda: gmm_case(True),
                "K4": lotka_volterra_case,
                "K5": diffusion_case}
    if opts.kernels is None:
        wanted = [k for k in builders if not (opts.small and k in LARGE_ONLY)]
    else:
        wanted = [k for k in builders
                  if k in {w.strip().upper() for w in opts.kernels.split(",")}]

    if opts.child:
        def emit(ev):
            print(_EVENT + json.dumps(ev), flush=True)
        numba.njit(lambda x: x + 1.0)(1.0)   # Numba's own first-compile set-up: not a kernel's
        for key in wanted:
            if opts.memory:
                measure_memory(builders[key](), emit)
            else:
                measure(key, builders[key](), emit)
        return 0

    t_start = time.perf_counter()
    kernels = []
    child_argv = ["--taylor-n", str(int(opts.taylor_n))]
    child_argv += ["--small"] if opts.small else []
    memory = not opts.no_memory and _memory.available()
    for key in wanted:
        if opts.in_process:
            kernel = _Kernel(key)
            measure(key, builders[key](), kernel.event)
        else:
            kernel = _in_child(key, child_argv, opts.timeout)
        if memory and kernel.ok:
            _in_child(key, child_argv, opts.timeout, kernel, memory=True)
        kernels.append(kernel)
    table, notes = _table(kernels)
    print()
    print(table)
    if notes:
        print()
        for i, note in enumerate(notes, 1):
            print(f"[{i}] {note}")
    if not memory and not opts.no_memory:
        print("\npeak extra memory not measured: /proc/self/clear_refs cannot reset the "
              "resident-set peak here")
    where = "all kernels in one process" if opts.in_process else "one process per kernel"
    print(f"\n(numba {numba.__version__}, numpy {np.__version__}; {where}; "
          f"{time.perf_counter() - t_start:.0f} s)")
    return 0 if all(k.ok for k in kernels) else 1


if __name__ == "__main__":
    sys.exit(main())
