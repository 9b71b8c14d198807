"""The versions of a parallel body's reverse that run without per-add tests: the copy of the sweep
for one task (no other thread runs: plain adds), and the copy of a stencil's reverse loop for
rows away from their row range's ends (pyzyme.diff.reverse.versions.one_thread_version,
pyzyme.diff.reverse.interior). What the code is, then that the gradients they give are the
serial function's at 1, 2 and 4 threads, on grids with enough rows for each thread to have
interior ones."""

import functools

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Duplicated, Reverse, autodiff

from . import kernels as K

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)


def diffusion_2d(u, c, steps):
    """benchmarks/parallel.py's P1: a prange over rows in a time loop, the grids swapped."""
    n, m = u.shape
    v = u.copy()
    w = u.copy()
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


def ratio_stencil(u, out):
    """A division in the body: strong zero's two versions (the unguarded one run where no
    division met a zero), each with the stencil's loop."""
    n, m = u.shape
    for i in prange(1, n - 1):
        for j in range(1, m - 1):
            out[i, j] = (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]) \
                / (1.0 + u[i, j] * u[i, j])
    return np.sum(out * out)


KERNELS = {"stencil_2d": K.stencil_2d, "diffusion_2d": diffusion_2d,
           "ratio_stencil": ratio_stencil}
PAR = {k: numba.njit(parallel=True)(f) for k, f in KERNELS.items()}
SER = {k: numba.njit(f) for k, f in KERNELS.items()}


def _args(name, rng):
    if name in ("stencil_2d", "ratio_stencil"):
        return [rng.standard_normal((40, 11)), np.zeros((40, 11))]
    return [rng.standard_normal((36, 9)), 0.2, 3]


def _blocks(ir: str) -> dict:
    """Each block of ``ir`` (label -> its text), all functions together."""
    out, label = {}, None
    for line in ir.splitlines():
        head = line.split(";", 1)[0].rstrip()
        if head.startswith(("define", "}")):
            label = None
        elif head.endswith(":") and not head.startswith((" ", "\t")):
            label = head[:-1].strip('"')
            out[label] = ""
        elif label is not None:
            out[label] += line + "\n"
    return out


@functools.cache
def _reverse_ir(name):
    args = _args(name, np.random.default_rng(0))
    anns = [Duplicated(a.copy(), np.zeros_like(a)) if isinstance(a, np.ndarray) else a
            for a in args]
    return pyzyme.code_llvm(Reverse, PAR[name], Active, *anns)


def test_one_task_runs_a_copy_of_the_sweep_with_plain_adds():
    """The body's reverse branches once on whether other threads run (sweep.threads): the
    copy for one task has no atomic add and no test per add, and the stencil's reverse loop
    in it is a single block again, distributed into a loop LLVM vectorizes."""
    blocks = _blocks(_reverse_ir("stencil_2d"))
    assert "sweep.threads" in blocks
    alone = {k: v for k, v in blocks.items() if ".alone" in k}
    assert alone and not any("atomicrmw" in v or "row.edge" in v for v in alone.values())
    assert any(".alone.fused" in k for k in alone)


def test_rows_away_from_their_ends_run_a_copy_with_plain_adds():
    """Where other threads run, the stencil's reverse loop is tested once per row (.rows:
    the edge tests at its first and last iterations) and runs a copy without atomics or
    tests, distributed, where all are false; the loop with the tests otherwise."""
    blocks = _blocks(_reverse_ir("stencil_2d"))
    assert any(k.endswith(".rows") for k in blocks)
    inner = {k: v for k, v in blocks.items() if ".interior" in k}
    assert inner and not any("atomicrmw" in v for v in inner.values())
    assert any(".interior.fused" in k for k in inner)
    shared = [v for k, v in blocks.items() if ".alone" not in k and ".interior" not in k]
    assert any("atomicrmw fadd" in v for v in shared)   # the rows near the ends keep theirs


def test_the_unguarded_version_gets_an_interior_copy_too():
    """Strong zero's unguarded version (blocks ending .finite), the one that runs where no
    division met a zero, has its own interior copy of the stencil's loop, as the guarded
    version has."""
    blocks = _blocks(_reverse_ir("ratio_stencil"))
    assert "sweep.choose" in blocks
    assert any(".finite.interior.fused" in k for k in blocks)
    assert any(".interior.fused" in k and ".finite" not in k for k in blocks)


def _gradient(f, args):
    shadow = np.zeros_like(args[0])
    anns = [Duplicated(args[0].copy(), shadow)] + [
        Duplicated(a.copy(), np.zeros_like(a)) if isinstance(a, np.ndarray) else a
        for a in args[1:]]
    autodiff(Reverse, f, Active, *anns)
    return shadow


@pytest.mark.parametrize("name", ["stencil_2d", "diffusion_2d", "ratio_stencil"])
def test_interior_rows_match_the_serial_gradient(name):
    """At 1, 2 and 4 threads (each thread's rows mostly interior: the copy runs, its ends the
    tested loop), repeated: the serial function's gradient, and central differences."""
    rng = np.random.default_rng(3)
    args = _args(name, rng)
    expect = _gradient(SER[name], args)
    eps = 1e-6
    for flat in rng.choice(args[0].size, 8, replace=False):
        at = np.unravel_index(flat, args[0].shape)
        moved = [[a.copy() if isinstance(a, np.ndarray) else a for a in args] for _ in "ud"]
        moved[0][0][at] += eps
        moved[1][0][at] -= eps
        fd = (SER[name](*moved[0]) - SER[name](*moved[1])) / (2 * eps)
        assert expect[at] == pytest.approx(fd, rel=1e-5, abs=1e-6)
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            for _ in range(3 if threads > 1 else 1):
                np.testing.assert_allclose(_gradient(PAR[name], args), expect, rtol=1e-10,
                                           atol=1e-12)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
