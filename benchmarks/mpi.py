"""MPI (issue 26): a halo-exchange stencil written with numba-mpi, its primal and pyzyme's
gradient at 1 and 2 ranks, and the communication of the gradient's two sweeps.

The kernel: explicit 1-D diffusion, ``N`` cells split evenly over the ranks (each holds one halo
cell a side, the global ends fixed at zero), ``STEPS`` steps, each starting with a halo
exchange (``numba_mpi.send``/``recv``, even ranks sending first); the objective is the sum over
ranks of ``sum(w * u**2)`` of the last state; the gradient is in the initial state. Each rank
runs ``autodiff(Reverse, ...)`` on its part.

For 1 and 2 ranks (``mpiexec -n R``, launched by this script): the primal's time and the
gradient's, each the best of ``--repeat`` calls after a warm-up call (the slowest rank's time
of each call: all ranks start together after a barrier), and their ratio. Then, in a run of its
own, the bytes each rank sends in the primal, and in the gradient's forward and reverse sweeps:
the MPI functions the derivative calls are counted by wrappers registered under their symbols
before it is compiled (the derivative's messages are told from the program's by the tag bit of
``pyzyme.rules.mpi.SHADOW_TAG_BIT``); the primal's own calls, made through numba-mpi's ctypes
pointers, are counted as those of the gradient's forward sweep are (the same code).

    python benchmarks/mpi.py [--cells 1000000] [--steps 100] [--repeat 3]

Needs the ``[mpi]`` extra (numba-mpi, mpi4py, the mpich wheel's mpiexec).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _kernel():
    import numba
    import numba_mpi as mpi

    @numba.njit
    def stencil(u0, w, steps):
        rank, size = mpi.rank(), mpi.size()
        n = u0.size
        u = np.zeros(n + 2)
        u[1:n + 1] = u0
        new = np.zeros(n + 2)
        for _ in range(steps):
            for phase in range(2):
                if (rank + phase) % 2 == 0:
                    if rank + 1 < size:
                        mpi.send(u[n:n + 1], rank + 1, 1)
                    if rank > 0:
                        mpi.send(u[1:2], rank - 1, 2)
                else:
                    if rank > 0:
                        mpi.recv(u[0:1], rank - 1, 1)
                    if rank + 1 < size:
                        mpi.recv(u[n + 1:n + 2], rank + 1, 2)
            for i in range(1, n + 1):
                new[i] = u[i] + 0.25 * (u[i - 1] - 2.0 * u[i] + u[i + 1])
            u[1:n + 1] = new[1:n + 1]
        loss = 0.0
        for i in range(n):
            loss += w[i] * u[i + 1] * u[i + 1]
        return loss

    return stencil


# -- one rank ------------------------------------------------------------------------------------
def _slowest(comm, seconds: float) -> float:
    from mpi4py import MPI
    return comm.allreduce(seconds, op=MPI.MAX)


def _time(comm, fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        comm.Barrier()
        start = time.perf_counter()
        fn()
        best = min(best, _slowest(comm, time.perf_counter() - start))
    return best


def _parts(comm, cells: int):
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(0)
    u0, w = rng.random(cells), rng.random(cells)
    m = cells // size
    return u0[rank * m:(rank + 1) * m].copy(), w[rank * m:(rank + 1) * m].copy()


def rank_timing(cells: int, steps: int, repeat: int) -> None:
    from mpi4py import MPI

    from pyzyme import Active, Const, Duplicated, Reverse, autodiff
    comm = MPI.COMM_WORLD
    stencil = _kernel()
    u0, w = _parts(comm, cells)
    du = np.zeros_like(u0)

    def gradient():
        du[:] = 0.0
        autodiff(Reverse, stencil, Active, Duplicated(u0, du), Const(w), Const(steps))

    start = time.perf_counter()
    stencil(u0, w, steps)
    comm.Barrier()
    compile_primal = time.perf_counter() - start
    start = time.perf_counter()
    gradient()
    first = _slowest(comm, time.perf_counter() - start)
    primal = _time(comm, lambda: stencil(u0, w, steps), repeat)
    grad = _time(comm, gradient, repeat)
    if comm.Get_rank() == 0:
        print(f"RESULT ranks={comm.Get_size()} primal={primal:.4f} gradient={grad:.4f} "
              f"ratio={grad / primal:.2f} first_gradient={first:.2f} "
              f"primal_compile={compile_primal:.2f}", flush=True)


def rank_volume(cells: int, steps: int) -> None:
    """Bytes sent by each rank: the primal's, and the gradient's forward and reverse sweeps."""
    import llvmlite.binding as llvm
    from mpi4py import MPI

    from pyzyme import Active, Const, Duplicated, Reverse, autodiff
    from pyzyme.frontends.numba import foreign_calls
    from pyzyme.rules.mpi import SHADOW_TAG_BIT
    comm = MPI.COMM_WORLD
    sent = {"forward": 0, "reverse": 0}
    wrappers = {}
    real = {}
    handle = ctypes.c_int   # MPICH's handles; this count is for MPICH (the [mpi] extra's)
    send_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, handle, ctypes.c_int,
                              ctypes.c_int, handle)
    isend_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, handle,
                               ctypes.c_int, ctypes.c_int, handle, ctypes.c_void_p)

    def counted(name, kind, address):
        target = kind(address)

        def wrapper(*args):
            sweep = "reverse" if args[4] & SHADOW_TAG_BIT else "forward"
            sent[sweep] += 8 * args[1]   # doubles: the stencil sends nothing else
            return target(*args)
        wrappers[name] = kind(wrapper)
        return ctypes.cast(wrappers[name], ctypes.c_void_p).value

    plain = llvm.add_symbol

    def add_symbol(name, address):
        if name in ("MPI_Send", "MPI_Isend") and name not in real:
            real[name] = address
            address = counted(name, send_t if name == "MPI_Send" else isend_t, address)
        elif name in real:
            return
        plain(name, address)

    foreign_calls.llvm = type("CountingLLVM", (), {"add_symbol": staticmethod(add_symbol)})
    stencil = _kernel()
    u0, w = _parts(comm, cells)
    autodiff(Reverse, stencil, Active, Duplicated(u0, np.zeros_like(u0)), Const(w),
             Const(steps))
    totals = comm.gather(dict(sent), root=0)
    if comm.Get_rank() == 0:
        for rank, t in enumerate(totals):
            print(f"VOLUME rank={rank} forward_bytes={t['forward']} "
                  f"reverse_bytes={t['reverse']}", flush=True)


# -- the driver ----------------------------------------------------------------------------------
def _launch(ranks: int, args: list[str]) -> str:
    mpiexec = Path(sys.executable).with_name("mpiexec")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent)]
        + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    run = subprocess.run([str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(ranks),
                          sys.executable, __file__, *args], capture_output=True, text=True,
                         env=env, timeout=1800)
    if run.returncode:
        raise SystemExit(f"mpiexec -n {ranks} failed:\n{run.stdout}\n{run.stderr}")
    return run.stdout


def _fields(line: str) -> dict:
    return dict(item.split("=") for item in line.split()[1:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--worker", choices=("time", "volume"))
    opts = parser.parse_args(argv)
    if opts.worker == "time":
        rank_timing(opts.cells, opts.steps, opts.repeat)
        return 0
    if opts.worker == "volume":
        rank_volume(opts.cells, opts.steps)
        return 0
    try:
        import mpi4py  # noqa: F401
        import numba_mpi  # noqa: F401
    except Exception as err:  # noqa: BLE001 - no MPI stack: nothing to measure
        print(f"skipped: no MPI stack ({err}); pip install -e '.[mpi]'")
        return 0
    sizes = ["--cells", str(opts.cells), "--steps", str(opts.steps)]
    print(f"halo-exchange stencil: {opts.cells} cells, {opts.steps} steps; times in seconds "
          f"(best of {opts.repeat}, slowest rank)")
    print(f"{'ranks':>5} {'primal':>8} {'gradient':>9} {'ratio':>6} {'1st grad':>9}")
    rows = {}
    for ranks in (1, 2):
        out = _launch(ranks, [*sizes, "--repeat", str(opts.repeat), "--worker", "time"])
        f = _fields(next(line for line in out.splitlines() if line.startswith("RESULT")))
        rows[ranks] = f
        print(f"{ranks:>5} {f['primal']:>8} {f['gradient']:>9} {f['ratio']:>6} "
              f"{f['first_gradient']:>9}")
    speed = float(rows[1]["primal"]) / float(rows[2]["primal"])
    gspeed = float(rows[1]["gradient"]) / float(rows[2]["gradient"])
    print(f"speedup 1 -> 2 ranks: primal {speed:.2f}x, gradient {gspeed:.2f}x")
    print("bytes each rank sends (2 ranks) in the gradient's forward and reverse sweeps:")
    for line in _launch(2, [*sizes, "--worker", "volume"]).splitlines():
        if line.startswith("VOLUME"):
            f = _fields(line)
            print(f"  rank {f['rank']}: forward {f['forward_bytes']} B, reverse "
                  f"{f['reverse_bytes']} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
