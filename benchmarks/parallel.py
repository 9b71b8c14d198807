"""Parallel loops (issue 22): gradient time over primal time for ``@njit(parallel=True)``
kernels, at 1 and 2 threads, in one process.

Six kernels written as a Numba user writes them, each ``@njit(parallel=True, fastmath=False)``:

- P1 2-D explicit diffusion (5-point stencil, fixed edges) on a 2000 x 2000 grid, 50 steps: a
  prange over rows inside the serial time loop, the two grids swapped after each step; loss =
  sum of squares of the last grid (a prange reduction); gradient in the initial grid.
- P2 Lennard-Jones energy of N = 4000 particles in 3-D (jittered cubic lattice): a prange over
  particles i, a serial loop over all j != i inside, the energy a prange reduction; gradient in
  the positions (minus the forces).
- P3 ADBench's GMM objective (``kernels.gmm_objective``) with the loop over points a prange
  reduction (each point's log-sum-exp; its scratch arrays allocated in the body, private to the
  iteration), on d=10 K=25 n=10000 drawn from ADBench's distributions (``generate_gmm``);
  gradient in alphas, means and icf.
- P4 2-D array expressions, ``sum((tanh(a) * b + exp(-a * a)) ** 2)`` on 2000 x 2000 arrays:
  parfors over two dimensions, whose schedule cuts the index space in boxes; gradient in a, b.
- P5 a 3x3 ``@numba.stencil`` (a binomial blur) applied 20 times to a 2000 x 2000 grid, the
  grids swapped after each step: a 2-D parfor whose adjoint scatters into the neighbours of
  each cell; loss = sum of squares; gradient in the initial grid.
- P6 P1 written with NumPy slices (``w[1:-1, 1:-1] = v[1:-1, 1:-1] + c * (v[:-2, 1:-1] +
  ...)``): a 2-D parfor whose body gets five views of ``v``, which pyzyme reads as one array
  (:mod:`pyzyme.transforms.view_bases`).

For each kernel and thread count (``numba.set_num_threads``): the primal's time and the time of
pyzyme's reverse gradient (``autodiff(Reverse, f, Active, Duplicated(...), ...)`` called from
Python: microseconds of call cost against milliseconds of kernel; the shadows are zeroed before
each call, outside the time), each the best of ``--repeat`` calls after a warm-up call, primal
and gradient alternating; the gradient / primal ratio at each thread count, the speedup from 1
to 2 threads of each and the gradient's speedup over the primal's. "first call" is the
derivative's first call on a fresh copy of the function (AD, compilation and the call itself;
the primal is compiled before). "atomics" counts the ``atomicrmw fadd`` instructions in the
derivative's optimized IR (``pyzyme.code_llvm``). "primal CPU / wall" is the process's CPU
time over the wall time of the primal's timed calls: near 2 at 2 threads where the second core
was free, near 1 where other jobs held it (then no speedup can show).

Before timing, each kernel's gradient is checked on a small size at 2 threads against pyzyme's
gradient of the same Python function compiled without ``parallel=True`` (prange runs as range)
and against central finite differences of the parallel primal on a few coordinates; the run
stops if the first differs by more than 1e-6 or the second by more than 1e-5 (relative, floored
at 1e-6 resp. 1e-3 x the largest entry of the gradient).

Serial code must not pay for parallel support: the last table times pyzyme's gradient of plain
``@njit`` functions, each kernel's Python function compiled without ``parallel=True`` (the same
sizes) and ``kernels.diffusion`` (reverse.py's K5), and counts their atomics (there must be
none); ``--serial-only`` runs that table alone, on a pyzyme from before prange support too.
Targets (issue 22): gradient <= 3x the primal at each thread count; the gradient's speedup
from 1 to 2 threads at least 90% of the primal's.

    python benchmarks/parallel.py [--small] [--repeat 5] [--kernels P1,P3] [--serial-only]
                                  [--threads 1,2,4,8] [--split]

``--split``: also split mode, the forward and the reverse thunk of
``autodiff_thunk(ReverseSplitWithPrimal, ...)`` timed apart (the best of ``--repeat`` each),
their sum over the primal, and its speedup from 1 thread next to the primal's. Split mode
keeps on its tape every value read from argument memory (the caller may change it between
the thunks): more than combined mode.

``--threads``: the thread counts timed (default 1,2; each speedup is over one thread), for a
machine with more cores than this one's two (``NUMBA_NUM_THREADS`` at least the largest).

``--small``: 500 x 500 x 20 steps, N = 1000, GMM n = 2000 (a quick run). ``OMP_WAIT_POLICY``
is ``passive`` unless set (see below); the last line names the threading layer and the policy.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass

# GNU OpenMP's threads spin at each barrier; on a shared 2-core machine a spinning thread that
# loses its core stalls every parallel loop by a time slice (2-thread runs 10-40x slower than
# 1-thread ones, primal and gradient alike). Must be set before the runtime loads.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numba  # noqa: E402
import numpy as np  # noqa: E402
from numba import prange  # noqa: E402

import pyzyme  # noqa: E402
from pyzyme import Active, Const, Duplicated, Reverse  # noqa: E402

# after pyzyme, whose capture hook must be in place before Numba compiles
import kernels as K  # noqa: E402

THREADS = (1, 2)
TOL = 1e-6


# --- the kernels ---------------------------------------------------------------------------

@numba.njit(parallel=True, fastmath=False)
def diffusion2d(u, c, steps):
    n, m = u.shape
    v = u.copy()
    w = u.copy()   # the edges stay as they are in both grids
    for _ in range(steps):
        for i in prange(1, n - 1):
            for j in range(1, m - 1):
                w[i, j] = v[i, j] + c * (v[i - 1, j] + v[i + 1, j] + v[i, j - 1]
                                         + v[i, j + 1] - 4.0 * v[i, j])
        v, w = w, v
    s = 0.0
    for i in prange(n):
        for j in range(m):
            s += v[i, j] * v[i, j]
    return s


@numba.njit(parallel=True, fastmath=False)
def lennard_jones(pos, eps, sigma):
    n = pos.shape[0]
    s2 = sigma * sigma
    e = 0.0
    for i in prange(n):
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        ei = 0.0
        for j in range(n):
            if j != i:
                dx = xi - pos[j, 0]
                dy = yi - pos[j, 1]
                dz = zi - pos[j, 2]
                q = s2 / (dx * dx + dy * dy + dz * dz)
                q6 = q * q * q
                ei += q6 * q6 - q6
        e += ei
    return 2.0 * eps * e   # 4 eps per pair, each pair counted twice


@numba.njit(parallel=True, fastmath=False)
def gmm_parallel(alphas, means, icf, x, wishart_gamma, wishart_m):
    """``kernels.gmm_objective`` with the loop over points a prange reduction."""
    k, d = means.shape
    n = x.shape[0]
    qdiags = np.empty((k, d))
    sum_qs = np.empty(k)
    for ik in range(k):
        s = 0.0
        for j in range(d):
            q = icf[ik, j]
            s += q
            qdiags[ik, j] = math.exp(q)
        sum_qs[ik] = s
    slse = 0.0
    for ix in prange(n):
        xc = np.empty(d)
        qxc = np.empty(d)
        main = np.empty(k)
        for ik in range(k):
            for j in range(d):
                xc[j] = x[ix, j] - means[ik, j]
                qxc[j] = qdiags[ik, j] * xc[j]
            idx = d
            for i in range(d):
                for j in range(i + 1, d):
                    qxc[j] += icf[ik, idx] * xc[i]
                    idx += 1
            sq = 0.0
            for j in range(d):
                sq += qxc[j] * qxc[j]
            main[ik] = alphas[ik] + sum_qs[ik] - 0.5 * sq
        mx = main[0]
        for ik in range(1, k):
            if main[ik] > mx:
                mx = main[ik]
        se = 0.0
        for ik in range(k):
            se += math.exp(main[ik] - mx)
        slse += math.log(se) + mx
    mx = alphas[0]
    for ik in range(1, k):
        if alphas[ik] > mx:
            mx = alphas[ik]
    se = 0.0
    for ik in range(k):
        se += math.exp(alphas[ik] - mx)
    lse_alphas = math.log(se) + mx
    nn = d + wishart_m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        lgd += math.lgamma(0.5 * nn + 0.5 * (1 - j))
    c = nn * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - lgd
    prior = 0.0
    for ik in range(k):
        frob = 0.0
        for j in range(d):
            frob += qdiags[ik, j] * qdiags[ik, j]
        for j in range(d, icf.shape[1]):
            frob += icf[ik, j] * icf[ik, j]
        prior += 0.5 * wishart_gamma * wishart_gamma * frob - wishart_m * sum_qs[ik]
    prior -= k * c
    constant = -n * d * 0.5 * math.log(2.0 * math.pi)
    return constant + slse - n * lse_alphas + prior


@numba.njit(parallel=True, fastmath=False)
def array_expressions(a, b):
    c = np.tanh(a) * b + np.exp(-a * a)
    return np.sum(c * c)


@numba.stencil
def _blur(a):
    return (0.0625 * (a[-1, -1] + a[-1, 1] + a[1, -1] + a[1, 1])
            + 0.125 * (a[-1, 0] + a[1, 0] + a[0, -1] + a[0, 1]) + 0.25 * a[0, 0])


@numba.njit(parallel=True, fastmath=False)
def stencil_blur(u, steps):
    v = u.copy()
    w = u.copy()
    for _ in range(steps):
        _blur(v, out=w)
        v, w = w, v
    return np.sum(v * v)


@numba.njit(parallel=True, fastmath=False)
def diffusion_slices(u, c, steps):
    v = u.copy()
    w = u.copy()
    for _ in range(steps):
        w[1:-1, 1:-1] = v[1:-1, 1:-1] + c * (v[:-2, 1:-1] + v[2:, 1:-1] + v[1:-1, :-2]
                                             + v[1:-1, 2:] - 4.0 * v[1:-1, 1:-1])
        v, w = w, v
    return np.sum(v * v)


def serial(f):
    """``f``'s Python function compiled by plain ``@njit`` (prange runs as range)."""
    return numba.njit(fastmath=False)(f.py_func)


def fresh(f):
    """A new dispatcher on a copy of ``f``'s Python function, compiled as ``f`` is: nothing
    cached, so that its first derivative call counts AD and compilation."""
    py = f.py_func
    copy = types.FunctionType(py.__code__, py.__globals__, py.__name__, py.__defaults__,
                              py.__closure__)
    options = {k: v for k, v in f.targetoptions.items() if k != "nopython"}
    return numba.njit(**options)(copy)


# --- inputs --------------------------------------------------------------------------------

def diffusion_args(n, steps, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, n)), 0.2, steps]


def lj_args(n, seed=0):
    """``n`` particles on a cubic lattice of spacing 1.2 sigma, each moved by up to 0.1 sigma."""
    rng = np.random.default_rng(seed)
    side = math.ceil(n ** (1 / 3))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    pos = 1.2 * grid[:n].astype(np.float64) + rng.uniform(-0.1, 0.1, (n, 3))
    return [pos, 1.0, 1.0]


def gmm_args(d, k, n, seed=0):
    return list(K.generate_gmm(d, k, n, seed))


def expression_args(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, n)), rng.standard_normal((n, n))]


def blur_args(n, steps, seed=0):
    return [np.random.default_rng(seed).standard_normal((n, n)), steps]


@dataclass
class Kernel:
    key: str
    label: Callable[[list], str]
    f: object                       # the @njit(parallel=True) primal
    make: Callable[[bool], list]    # small -> arguments (full size unless small)
    check: Callable[[], list]       # arguments of the correctness check
    active: tuple[int, ...]         # positions of the arrays differentiated


KERNELS = [
    Kernel("P1", lambda a: f"P1 diffusion 2-D {a[0].shape[0]}x{a[0].shape[1]}, {a[2]} steps",
           diffusion2d, lambda small: diffusion_args(500, 20) if small
           else diffusion_args(2000, 50), lambda: diffusion_args(12, 4, seed=1), (0,)),
    Kernel("P2", lambda a: f"P2 Lennard-Jones N={a[0].shape[0]}", lennard_jones,
           lambda small: lj_args(1000) if small else lj_args(4000),
           lambda: lj_args(20, seed=1), (0,)),
    Kernel("P3", lambda a: (f"P3 GMM d={a[1].shape[1]} K={a[1].shape[0]} n={a[3].shape[0]}"),
           gmm_parallel, lambda small: gmm_args(10, 25, 2000) if small
           else gmm_args(10, 25, 10000), lambda: gmm_args(3, 4, 30, seed=1), (0, 1, 2)),
    Kernel("P4", lambda a: f"P4 2-D array expressions {a[0].shape[0]}x{a[0].shape[1]}",
           array_expressions, lambda small: expression_args(500) if small
           else expression_args(2000), lambda: expression_args(9, seed=1), (0, 1)),
    Kernel("P5", lambda a: f"P5 @stencil 3x3 {a[0].shape[0]}x{a[0].shape[1]}, {a[1]} steps",
           stencil_blur, lambda small: blur_args(500, 10) if small else blur_args(2000, 20),
           lambda: blur_args(11, 3, seed=1), (0,)),
    Kernel("P6", lambda a: f"P6 diffusion with slices {a[0].shape[0]}x{a[0].shape[1]}, "
           f"{a[2]} steps", diffusion_slices, lambda small: diffusion_args(500, 20) if small
           else diffusion_args(2000, 50), lambda: diffusion_args(12, 4, seed=1), (0,)),
]


# --- calling the gradient ------------------------------------------------------------------

def gradient_call(f, args, active):
    """(zero, run, annotated): ``zero()`` zeroes the shadows, ``run()`` adds the gradient into
    them and gives them back; ``annotated``: the arguments as passed to ``autodiff``."""
    shadows = {i: np.zeros_like(args[i]) for i in active}
    annotated = [Duplicated(a, shadows[i]) if i in active else Const(a)
                 for i, a in enumerate(args)]

    def zero():
        for s in shadows.values():
            s[...] = 0.0

    def run():
        pyzyme.autodiff(Reverse, f, Active, *annotated)
        return [shadows[i] for i in active]
    return zero, run, annotated


def atomics(f, annotated, mode=Reverse) -> int:
    """``atomicrmw fadd`` instructions in ``f``'s optimized reverse derivative (``mode``: or
    its split pair; Numba's own reference counts are atomic integer adds: not counted)."""
    ir = pyzyme.code_llvm(mode, f, Active, *annotated, optimized=True)
    return len(re.findall(r"\batomicrmw\s+(?:volatile\s+)?fadd\b", ir))


def _rel(a, b) -> float:
    a, b = np.ravel(a), np.ravel(b)
    floor = TOL * max(np.max(np.abs(b)), 1e-300)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), floor)))


def check(kern: Kernel, coords=6, seed=0) -> str:
    """The parallel gradient against the serial function's and central differences."""
    args = kern.check()
    _, run, _ = gradient_call(kern.f, args, kern.active)
    par = [g.copy() for g in run()]
    _, run_serial, _ = gradient_call(serial(kern.f), args, kern.active)
    ser = [g.copy() for g in run_serial()]
    vs_serial = max(_rel(p, s) for p, s in zip(par, ser))
    rng = np.random.default_rng(seed)
    fd_err = 0.0
    for pos, g in zip(kern.active, par):
        x = args[pos]
        for flat in rng.choice(x.size, min(coords, x.size), replace=False):
            at = np.unravel_index(flat, x.shape)
            keep = x[at]
            h = 1e-6 * max(1.0, abs(keep))
            x[at] = keep + h
            up = kern.f(*args)
            x[at] = keep - h
            down = kern.f(*args)
            x[at] = keep
            fd = (up - down) / (2 * h)
            scale = max(np.max(np.abs(g)), 1e-300)
            fd_err = max(fd_err, abs(g[at] - fd) / max(abs(fd), 1e-3 * scale))
    shape = ", ".join("x".join(map(str, args[i].shape)) for i in kern.active)
    ok = vs_serial <= TOL and fd_err <= 1e-5
    line = (f"check {kern.key} ({shape}, {numba.get_num_threads()} threads): vs serial "
            f"{vs_serial:.1e}, vs central differences ({coords} coordinates per array) "
            f"{fd_err:.1e}: {'OK' if ok else 'FAILED'}")
    if not ok:
        raise SystemExit(line)
    return line


# --- timing --------------------------------------------------------------------------------

def _time(call, prepare=None) -> float:
    if prepare is not None:
        prepare()
    t = time.perf_counter()
    call()
    return time.perf_counter() - t


def measure(f, args, active, repeat, threads_list=THREADS, budget_s=30.0):
    """Per thread count: (primal s, gradient s, the primal's process CPU time over its wall
    time), the times each the best of ``repeat`` alternating calls (fewer, down to 3, where the
    gradient's warm-up call says they would take over ``budget_s``); the derivative's first call
    (s); atomics in its IR."""
    f = fresh(f)
    zero, run, annotated = gradient_call(f, args, active)
    f(*args)
    first = _time(run, zero)
    out = {}
    for threads in threads_list:
        numba.set_num_threads(threads)
        f(*args)
        warm = _time(run, zero)
        primal, grad, wall, cpu = math.inf, math.inf, 0.0, 0.0
        for _ in range(max(3, min(repeat, int(budget_s / warm)))):
            c = time.process_time()
            t = _time(lambda: f(*args))
            cpu += time.process_time() - c
            wall += t
            primal = min(primal, t)
            grad = min(grad, _time(run, zero))
        out[threads] = (primal, grad, cpu / wall)
    return out, first, atomics(f, annotated)


def measure_split(f, args, active, repeat, threads_list=THREADS):
    """Split mode (``autodiff_thunk(ReverseSplitWithPrimal, ...)``), per thread count: (primal
    s, forward thunk s, reverse thunk s), each the best of ``repeat`` calls; and the atomic
    adds in the pair's optimized IR."""
    _, _, annotated = gradient_call(f, args, active)
    fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, f, Active, *annotated)
    out = {}
    for threads in threads_list:
        numba.set_num_threads(threads)
        rev(*annotated, 1.0, fwd(*annotated)[0])
        primal, forward, reverse = math.inf, math.inf, math.inf
        for _ in range(max(3, repeat)):
            primal = min(primal, _time(lambda: f(*args)))
            t = time.perf_counter()
            tape = fwd(*annotated)[0]
            forward = min(forward, time.perf_counter() - t)
            reverse = min(reverse, _time(lambda: rev(*annotated, 1.0, tape)))
        out[threads] = (primal, forward, reverse)
    return out, atomics(f, annotated, pyzyme.ReverseSplitWithPrimal)


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}" if s >= 0.01 else f"{s * 1e3:.2f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small sizes (a quick run)")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per figure")
    parser.add_argument("--kernels", help="comma-separated keys, e.g. P1,P3")
    parser.add_argument("--threads", default="1,2",
                        help="comma-separated thread counts, 1 first (default 1,2)")
    parser.add_argument("--split", action="store_true",
                        help="also time split mode: the forward and reverse thunks")
    parser.add_argument("--serial-only", action="store_true",
                        help="only the serial functions (runs on a pyzyme without prange "
                        "support too: the figures before it)")
    opts = parser.parse_args(argv)
    threads_list = tuple(int(t) for t in opts.threads.split(","))
    if threads_list[0] != 1:
        raise SystemExit("--threads must start with 1: speedups are over one thread")
    if numba.config.NUMBA_NUM_THREADS < max(threads_list):
        raise SystemExit(f"Numba has {numba.config.NUMBA_NUM_THREADS} threads; "
                         f"{max(threads_list)} needed")
    wanted = None if not opts.kernels else {k.strip() for k in opts.kernels.split(",")}
    kernels = [k for k in KERNELS if (wanted is None or k.key in wanted)
               and not opts.serial_only]
    start = time.perf_counter()

    numba.set_num_threads(2)
    for kern in kernels:
        print(check(kern), flush=True)
    if kernels:
        print()
        print("| kernel | threads | primal (ms) | gradient (ms) | gradient / primal | "
              "primal speedup over 1 | gradient speedup over 1 | gradient / primal speedup | "
              "first call (s) | atomics | primal CPU / wall |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kern in kernels:
        args = kern.make(opts.small)
        times, first, n_atomic = measure(kern.f, args, kern.active, opts.repeat, threads_list)
        p1, g1, _ = times[1]
        for threads in threads_list:
            p, g, busy = times[threads]
            if threads == 1:
                cells = f"{kern.label(args)} | 1 | {_ms(p)} | {_ms(g)} | {g / p:.2f}x | | | |"
            else:
                sp, sg = p1 / p, g1 / g
                cells = (f" | {threads} | {_ms(p)} | {_ms(g)} | {g / p:.2f}x | {sp:.2f}x | "
                         f"{sg:.2f}x | {sg / sp:.0%} |")
            extra = (f" {first:.2f} | {n_atomic} |" if threads == 1 else " | |") + f" {busy:.2f} |"
            print("| " + cells + extra, flush=True)

    if opts.split and kernels:
        print()
        print("| kernel, split mode | threads | primal (ms) | forward thunk (ms) | "
              "reverse thunk (ms) | both / primal | primal speedup over 1 | "
              "both speedup over 1 | atomics |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kern in kernels if opts.split else ():
        args = kern.make(opts.small)
        times, n_atomic = measure_split(kern.f, args, kern.active, opts.repeat, threads_list)
        p1, f1, r1 = times[1]
        for threads in threads_list:
            p, fw, rv = times[threads]
            speed = "| |" if threads == 1 else f"| {p1 / p:.2f}x | {(f1 + r1) / (fw + rv):.2f}x |"
            name = kern.label(args) if threads == 1 else ""
            print(f"| {name} | {threads} | {_ms(p)} | {_ms(fw)} | {_ms(rv)} | "
                  f"{(fw + rv) / p:.2f}x {speed} {n_atomic if threads == 1 else ''} |",
                  flush=True)

    # Serial code: plain @njit (one thread whatever the setting); no atomics may appear.
    print()
    serial_cases = [(f"{kern.key}'s function without parallel=True", serial(kern.f),
                     kern.make(opts.small), kern.active) for kern in KERNELS]
    serial_cases.append(("kernels.diffusion (reverse.py K5), 1000 cells x 1000 steps",
                         K.diffusion, [np.random.default_rng(2).standard_normal(1000), 0.25,
                                       1000], (0,)))
    print("| serial @njit function | primal (ms) | gradient (ms) | gradient / primal | "
          "atomics |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, f, args, active in serial_cases:
        times, _, n_atomic = measure(f, args, active, opts.repeat, (1,))
        p, g, _ = times[1]
        print(f"| {name} | {_ms(p)} | {_ms(g)} | {g / p:.2f}x | {n_atomic} |", flush=True)
    layer = numba.threading_layer() if kernels else "not started"
    wait = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(f"\n(numba {numba.__version__}, numpy {np.__version__}, threading layer {layer}, "
          f"OMP_WAIT_POLICY {wait}; best of {opts.repeat}; "
          f"{time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
