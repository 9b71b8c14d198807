"""One MPI rank of tests/test_mpi.py (launched there with ``mpiexec -n N``).

Each case is a distributed program written with numba-mpi and the same computation written
serially. The objective is the sum of what the ranks return. Each rank checks its reverse-mode
gradient against its slice of the serial program's pyzyme gradient and of its finite
differences, and forward mode (the ranks' tangents summed) against the serial gradient along
the same direction. One line per case and rank, in ``<folder>/rank-<rank>.txt``: ``OK <case>
<rank> <seconds>`` or ``FAIL <case> <rank> <why>``.

    mpiexec -n 2 python tests/mpi_worker.py <folder> [case ...]   (all cases when none given)
"""

from __future__ import annotations

import sys
import traceback

import numba
import numba_mpi as mpi
import numpy as np
from mpi4py import MPI

from pyzyme import (Active, BatchDuplicated, BatchDuplicatedNoNeed, Const, Duplicated,
                    DuplicatedNoNeed, Forward, Reverse, ReverseSplitWithPrimal, autodiff,
                    autodiff_thunk)
from tests.doc_blocks import docs_block, readme_block, run_block

RANK, SIZE = mpi.rank(), mpi.size()
M = 4           # elements per rank
STEPS = 3       # diffusion steps
NU = 0.2


def _part(a):
    return a[RANK * M:(RANK + 1) * M].copy()


# -- distributed dot product with allreduce; the loss on rank 0 ----------------------------------
@numba.njit
def dot_mpi(x, y):
    local = 0.0
    for i in range(x.size):
        local += x[i] * y[i]
    total = np.zeros(1)
    mpi.allreduce(local, total)
    if mpi.rank() == 0:
        return total[0] * total[0]
    return 0.0


def dot_serial(x, y):
    return (x @ y) ** 2


# -- 1-D diffusion with a halo exchange per step ----------------------------------------------
@numba.njit
def diffusion_mpi(u0, w):
    """``u`` holds one halo cell each side; the global ends are fixed at zero."""
    rank, size = mpi.rank(), mpi.size()
    n = u0.size
    u = np.zeros(n + 2)
    u[1:n + 1] = u0
    new = np.zeros(n + 2)
    for _ in range(3):
        # even ranks send first, odd ranks receive first: no rank waits on another's send
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
            new[i] = u[i] + 0.2 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + 0.1 * u[i] * u[i]
        u[1:n + 1] = new[1:n + 1]
    loss = 0.0
    for i in range(n):
        loss += w[i] * u[i + 1] * u[i + 1]
    return loss


def diffusion_serial(u0, w):
    n = u0.size
    u = np.zeros(n + 2)
    new = np.zeros(n + 2)
    for i in range(n):
        u[i + 1] = u0[i]
    for _ in range(3):
        for i in range(1, n + 1):
            new[i] = u[i] + 0.2 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + 0.1 * u[i] * u[i]
        for i in range(1, n + 1):
            u[i] = new[i]
    loss = 0.0
    for i in range(n):
        loss += w[i] * u[i + 1] * u[i + 1]
    return loss


@numba.njit
def diffusion_nb_mpi(u0, w):
    """The same, with nonblocking sends and receives completed by one waitall per step."""
    rank, size = mpi.rank(), mpi.size()
    n = u0.size
    u = np.zeros(n + 2)
    u[1:n + 1] = u0
    new = np.zeros(n + 2)
    requests = np.zeros(4, dtype=mpi.RequestType)
    for _ in range(3):
        k = 0
        if rank + 1 < size:
            _, r = mpi.isend(u[n:n + 1], rank + 1, 1)
            requests[k] = r[0]
            _, r = mpi.irecv(u[n + 1:n + 2], rank + 1, 2)
            requests[k + 1] = r[0]
            k += 2
        if rank > 0:
            _, r = mpi.isend(u[1:2], rank - 1, 2)
            requests[k] = r[0]
            _, r = mpi.irecv(u[0:1], rank - 1, 1)
            requests[k + 1] = r[0]
            k += 2
        mpi.waitall(requests[:k])
        for i in range(1, n + 1):
            new[i] = u[i] + 0.2 * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + 0.1 * u[i] * u[i]
        u[1:n + 1] = new[1:n + 1]
    loss = 0.0
    for i in range(n):
        loss += w[i] * u[i + 1] * u[i + 1]
    return loss


# -- parameters broadcast from rank 0 ---------------------------------------------------------
@numba.njit
def bcast_mpi(p, x):
    q = p.copy()
    mpi.bcast(q, 0)
    loss = 0.0
    for i in range(x.size):
        loss += np.sin(q[0] * x[i]) + q[1] * x[i] * x[i]
    return loss


def bcast_serial(p, x):
    return float(np.sum(np.sin(p[0] * x) + p[1] * x * x))


# -- gather to rank 0, then a loss there --------------------------------------------------------
@numba.njit
def gather_mpi(x):
    y = np.sin(x)
    everything = np.zeros(y.size * mpi.size())
    mpi.gather(y, everything, y.size, 0)
    if mpi.rank() != 0:
        return 0.0
    loss = 0.0
    for i in range(everything.size):
        loss += (i + 1.0) * everything[i] * everything[i]
    return loss


def gather_serial(x):
    y = np.sin(x)
    return float(np.sum(np.arange(1, y.size + 1) * y * y))


# -- ring shift ---------------------------------------------------------------------------------
@numba.njit
def ring_mpi(x):
    rank, size = mpi.rank(), mpi.size()
    y = x * x
    got = np.zeros(x.size)
    if rank % 2 == 0:
        mpi.send(y, (rank + 1) % size, 7)
        mpi.recv(got, (rank - 1) % size, 7)
    else:
        mpi.recv(got, (rank - 1) % size, 7)
        mpi.send(y, (rank + 1) % size, 7)
    loss = 0.0
    for i in range(x.size):
        loss += got[i] * (rank + 1.0 + i) + x[i]
    return loss


def ring_serial(x):
    size = x.size // 4
    loss = 0.0
    for r in range(size):
        for i in range(4):
            before = ((r - 1) % size) * 4 + i
            loss += x[before] * x[before] * (r + 1.0 + i) + x[r * 4 + i]
    return loss


# -- a halo received into a buffer of its own, filled by nothing else ------------------------
@numba.njit
def halo_buffer_mpi(x):
    rank, size = mpi.rank(), mpi.size()
    left = np.zeros(1)
    if rank + 1 < size:
        mpi.send(x[x.size - 1:], rank + 1, 4)
    if rank > 0:
        mpi.recv(left, rank - 1, 4)
    loss = 0.0
    for i in range(x.size):
        loss += x[i] * x[i] * left[0]
    return loss


def halo_buffer_serial(x):
    loss = 0.0
    for r in range(1, x.size // 4):
        for i in range(4):
            loss += x[r * 4 + i] * x[r * 4 + i] * x[r * 4 - 1]
    return loss


@numba.njit
def ring_nb_mpi(x):
    """The ring with isend, irecv and a wait for each."""
    rank, size = mpi.rank(), mpi.size()
    y = x * x
    got = np.zeros(x.size)
    _, sent = mpi.isend(y, (rank + 1) % size, 7)
    _, received = mpi.irecv(got, (rank - 1) % size, 7)
    mpi.wait(received)
    mpi.wait(sent)
    loss = 0.0
    for i in range(x.size):
        loss += got[i] * (rank + 1.0 + i) + x[i]
    return loss


# -- allreduce of max and min: the derivative goes to the rank holding the extremum -------------
@numba.njit
def extremum_mpi(x):
    local = np.sin(x) * (mpi.rank() + 1.0)
    top = np.zeros(x.size)
    low = np.zeros(x.size)
    mpi.allreduce(local, top, mpi.Operator.MAX)
    mpi.allreduce(local, low, mpi.Operator.MIN)
    if mpi.rank() != 0:
        return 0.0
    loss = 0.0
    for i in range(x.size):
        loss += (i + 1.0) * top[i] + low[i] * low[i]
    return loss


def extremum_serial(x):
    size = x.size // 4
    loss = 0.0
    for i in range(4):
        top = -1e300
        low = 1e300
        for r in range(size):
            v = np.sin(x[r * 4 + i]) * (r + 1.0)
            top = max(top, v)
            low = min(low, v)
        loss += (i + 1.0) * top + low * low
    return loss


# -- reduce to rank 0, scatter from rank 0, allgather -----------------------------------------
@numba.njit
def reduce_mpi(x):
    y = x * x
    total = np.zeros(x.size)
    mpi.reduce(y, total, mpi.Operator.SUM, 0)
    if mpi.rank() != 0:
        return 0.0
    loss = 0.0
    for i in range(x.size):
        loss += (i + 1.0) * total[i] * total[i]
    return loss


def reduce_serial(x):
    loss = 0.0
    for i in range(4):
        total = 0.0
        for r in range(x.size // 4):
            total += x[r * 4 + i] * x[r * 4 + i]
        loss += (i + 1.0) * total * total
    return loss


@numba.njit
def scatter_mpi(x):
    """``x``: the whole array, on rank 0 (the others' copies are not read)."""
    y = x * x
    part = np.zeros(4)
    mpi.scatter(y, part, 4, 0)
    loss = 0.0
    for i in range(4):
        loss += part[i] * (mpi.rank() + 1.0 + i)
    return loss


def scatter_serial(x):
    loss = 0.0
    for r in range(x.size // 4):
        for i in range(4):
            loss += x[r * 4 + i] * x[r * 4 + i] * (r + 1.0 + i)
    return loss


@numba.njit
def allgather_mpi(x):
    y = np.sin(x)
    everything = np.zeros(x.size * mpi.size())
    mpi.allgather(y, everything, x.size)
    loss = 0.0
    for i in range(everything.size):
        loss += everything[i] * everything[i] * (i + 1.0) * (mpi.rank() + 1.0)
    return loss


def allgather_serial(x):
    size = x.size // 4
    loss = 0.0
    for r in range(size):
        for i in range(x.size):
            loss += np.sin(x[i]) ** 2 * (i + 1.0) * (r + 1.0)
    return loss


# -- what pyzyme refuses, naming the MPI call and its Python line -------------------------------
@numba.njit
def any_source_mpi(x):
    y = np.zeros(x.size)
    mpi.recv(y)  # ANY_SOURCE: refused
    return y[0] * x[0]


@numba.njit
def sendrecv_mpi(x):
    y = np.zeros(x.size)
    mpi.sendrecv(x, 0, y, 0, 3, 3)  # no derivative: refused
    return y[0] * x[0]


def check_errors() -> str:
    """Each refused program raises UnsupportedError naming the MPI call and the line."""
    import inspect

    from pyzyme import UnsupportedError
    for fn, symbol in ((any_source_mpi, "MPI_Recv"), (sendrecv_mpi, "MPI_Sendrecv")):
        lines, first = inspect.getsourcelines(fn.py_func)
        line = first + next(i for i, text in enumerate(lines) if "refused" in text)
        for mode, args in ((Reverse, (Active,)), (Forward, (DuplicatedNoNeed,))):
            try:
                autodiff(mode, fn, *args, Duplicated(np.ones(2), np.zeros(2)))
            except UnsupportedError as err:
                text = str(err)
                if symbol not in text or f"mpi_worker.py:{line}" not in text:
                    return f"{symbol} in {mode}: the error names no {symbol} or line: {text}"
            else:
                return f"{symbol} in {mode}: no error"
    return ""


@numba.njit
def ring_test_mpi(x):
    """The ring, its receive tested before any rank has sent (the test cannot complete it: the
    sends come after the barrier), then waited for."""
    rank, size = mpi.rank(), mpi.size()
    y = x * x
    got = np.zeros(x.size)
    _, received = mpi.irecv(got, (rank - 1) % size, 7)
    _, done = mpi.test(received)
    mpi.barrier()
    _, sent = mpi.isend(y, (rank + 1) % size, 7)
    if not done:
        mpi.wait(received)
    mpi.wait(sent)
    loss = 0.0
    for i in range(x.size):
        loss += got[i] * (rank + 1.0 + i) + x[i]
    return loss


# -- the checks ---------------------------------------------------------------------------------
_JITTED: dict = {}   # serial program -> its @njit copy, compiled once


def _serial_gradient(serial, args, k):
    """The serial objective's gradient in argument ``k`` by pyzyme, and by central finite
    differences: worked out on rank 0 (one compilation, not one per rank) and broadcast."""
    found = _serial_gradient_here(serial, args, k) if RANK == 0 else None
    return MPI.COMM_WORLD.bcast(found, root=0)


def _serial_gradient_here(serial, args, k):
    grads = [np.zeros_like(a) for a in args]
    if serial not in _JITTED:
        _JITTED[serial] = numba.njit(serial)
    autodiff(Reverse, _JITTED[serial], Active,
             *[Duplicated(a.copy(), g) for a, g in zip(args, grads)])
    grad = grads[k]
    h, fd = 1e-6, np.zeros_like(args[k])
    for i in range(args[k].size):
        up = [a.copy() for a in args]
        down = [a.copy() for a in args]
        up[k][i] += h
        down[k][i] -= h
        fd[i] = (serial(*up) - serial(*down)) / (2 * h)
    return grad, fd


CASES = {
    # name: (distributed, serial, global arguments, which are split over the ranks)
    "dot": (dot_mpi, dot_serial, 2, (True, True)),
    "diffusion": (diffusion_mpi, diffusion_serial, 2, (True, True)),
    "bcast": (bcast_mpi, bcast_serial, 2, (False, True)),
    "gather": (gather_mpi, gather_serial, 1, (True,)),
    "ring": (ring_mpi, ring_serial, 1, (True,)),
    "diffusion_nb": (diffusion_nb_mpi, diffusion_serial, 2, (True, True)),
    "ring_nb": (ring_nb_mpi, ring_serial, 1, (True,)),
    "ring_test": (ring_test_mpi, ring_serial, 1, (True,)),
    "extremum": (extremum_mpi, extremum_serial, 1, (True,)),
    "reduce": (reduce_mpi, reduce_serial, 1, (True,)),
    "scatter": (scatter_mpi, scatter_serial, 1, ("root",)),
    "allgather": (allgather_mpi, allgather_serial, 1, (True,)),
    "halo_buffer": (halo_buffer_mpi, halo_buffer_serial, 1, (True,)),
}


def _globals(nargs, split, seed):
    """The serial program's arguments: ``True`` (split over the ranks) and ``"root"`` (the
    whole of it on rank 0) hold M per rank, ``False`` (parameters on rank 0) two."""
    rng = np.random.default_rng(seed)
    return [0.5 * rng.standard_normal(SIZE * M if s else 2) for s in split[:nargs]]


def _local(args, split):
    """What each rank is handed: its slice of split arguments; rank 0's copy of the others
    (the other ranks get zeros, which the broadcast or scatter replaces)."""
    return [_part(a) if s is True else (a.copy() if RANK == 0 else np.zeros_like(a))
            for a, s in zip(args, split)]


def check_split() -> str:
    """Split mode (autodiff_thunk): the forward thunk runs the program and its requests'
    records, the reverse thunk the adjoint communication; as combined mode."""
    out = []
    for dist in (diffusion_nb_mpi, ring_mpi):
        nargs = 2 if dist is diffusion_nb_mpi else 1
        local = _local(_globals(nargs, (True, True), 3), (True, True))
        want = [np.zeros_like(a) for a in local]
        autodiff(Reverse, dist, Active, *[Duplicated(a.copy(), s) for a, s in zip(local, want)])
        got = [np.zeros_like(a) for a in local]
        anns = [Duplicated(a.copy(), s) for a, s in zip(local, got)]
        fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, dist, Active, *anns)
        tape, value, _ = fwd(*anns)
        rev(*anns, 1.0, tape)
        for w, g in zip(want, got):
            if not np.allclose(w, g, rtol=1e-12, atol=1e-14):
                out.append(f"{dist.py_func.__name__}: split {g} != combined {w}")
    return "; ".join(out)


def check_no_disk_cache() -> str:
    """A derivative of code calling MPI through ctypes is not stored on disk (its handles and
    symbols are this process's), as Numba stores no such code of its own."""
    import glob
    import os
    import warnings

    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
    pattern = os.path.join(here, "*cached_dot*.pyzyme")
    if RANK == 0:
        for old in glob.glob(pattern):   # left by an older pyzyme
            os.remove(old)
    mpi.barrier()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # Numba: cannot cache ... dynamic globals

        @numba.njit(cache=True)
        def cached_dot(x):
            total = np.zeros(1)
            mpi.allreduce(np.sum(x * x), total)
            return total[0]
        dx = np.zeros(3)
        autodiff(Reverse, cached_dot, Active, Duplicated(np.ones(3), dx))
    if not np.allclose(dx, 2.0 * SIZE):
        return f"gradient {dx} != {2.0 * SIZE}"
    stored = glob.glob(pattern)
    return f"stored on disk: {stored}" if stored else ""


@numba.njit
def mixed_mpi(x, c):
    """Rank 0 reduces a constant (``c``, passed as Const), the others an active ``x``: two
    call sites of one collective, of different activity."""
    total = np.zeros(x.size)
    if mpi.rank() == 0:
        mpi.allreduce(c, total)
    else:
        mpi.allreduce(x * x, total)
    loss = 0.0
    for i in range(x.size):
        loss += total[i] * x[i]
    return loss


def check_mixed() -> str:
    """Every rank takes part in the adjoint of a collective whatever its activity (the ranks
    that passed constants included): no rank waits on one that skipped it. Reverse and
    forward mode against the gradient worked out by hand."""
    rng = np.random.default_rng(5)
    xs, c = rng.standard_normal((SIZE, M)), rng.standard_normal(M)
    total = c + np.sum(xs[1:] ** 2, axis=0)
    x = xs[RANK].copy()
    dx = np.zeros(M)
    autodiff(Reverse, mixed_mpi, Active, Duplicated(x.copy(), dx), Const(c))
    # d/dx_r of sum_q total . x_q: total (own term) + 2 x_r * sum_q x_q (for r > 0)
    want = total + (2.0 * x * np.sum(xs, axis=0) if RANK > 0 else 0.0)
    if not np.allclose(dx, want, rtol=1e-10):
        return f"reverse {dx} != {want}"
    t = rng.standard_normal((SIZE, M))
    (dvalue,) = autodiff(Forward, mixed_mpi, DuplicatedNoNeed, Duplicated(x.copy(), t[RANK]),
                         Const(c))
    summed = np.zeros(1)
    mpi.allreduce(dvalue, summed)
    grads = np.array([total + (2.0 * xs[r] * np.sum(xs, axis=0) if r > 0 else 0.0)
                      for r in range(SIZE)])
    if not np.isclose(summed[0], np.sum(grads * t), rtol=1e-10):
        return f"forward {summed[0]} != {np.sum(grads * t)}"
    return ""


def check_batch() -> str:
    """Vector forward mode (BatchDuplicated): each lane's tangent message and request is its
    own; the lanes equal one-direction forward mode."""
    x = _local(_globals(1, (True,), 4), (True,))[0]
    t1, t2 = np.ones_like(x), np.arange(x.size, dtype=float)
    (both,) = autodiff(Forward, ring_nb_mpi, BatchDuplicatedNoNeed,
                       BatchDuplicated(x.copy(), (t1.copy(), t2.copy())))
    one = [autodiff(Forward, ring_nb_mpi, DuplicatedNoNeed, Duplicated(x.copy(), t.copy()))[0]
           for t in (t1, t2)]
    return "" if np.allclose(both, one, rtol=1e-12) else f"batch {both} != one by one {one}"


def check_readme_halo() -> str:
    """README.md's halo.py, run as its shell block says (two ranks), prints what it shows."""
    import contextlib
    import io
    shown = readme_block("mpiexec -n 2 python halo.py", "sh")
    if SIZE != 2:
        return f"README's halo.py output is shown for mpiexec -n 2, not {SIZE} ranks"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        scope = run_block(readme_block("numba_mpi as mpi"), name="README.md halo.py")
    want = [line for line in shown.splitlines() if line.startswith(f"# {RANK} [")]
    numbers = [float(v) for v in want[0].split("[")[1].split("]")[0].split()]
    if not np.allclose(scope["du"], numbers, rtol=1e-7, atol=1e-8):
        return f"README's halo.py gives du = {scope['du']}, the README shows {numbers}"
    if not printed.getvalue().startswith(f"{RANK} ["):
        return f"README's halo.py printed {printed.getvalue()!r}"
    return ""


def check_docs_dot() -> str:
    """docs/mpi.rst's dot.py (launched as its shell block says): each rank's slice of the
    gradient of (x . y)**2, whose rank 0 returns it, is 2 (x . y) times its slice of y."""
    assert docs_block("mpi.rst", "mpiexec -n", "sh").split()[:3] == ["mpiexec", "-n", "2"]
    scope = run_block(docs_block("mpi.rst", "def dot_mpi"), name="docs/mpi.rst dot.py")
    total = np.zeros(1)
    mpi.allreduce(float(scope["x"] @ scope["y"]), total)
    want = 2.0 * total[0] * scope["y"]
    return "" if np.allclose(scope["dx"], want, rtol=1e-12) else f"dx {scope['dx']} != {want}"


def check(name: str) -> str:
    if name == "readme_halo":
        return check_readme_halo()
    if name == "docs_dot":
        return check_docs_dot()
    if name == "mixed":
        return check_mixed()
    if name == "batch":
        return check_batch()
    if name == "no_disk_cache":
        return check_no_disk_cache()
    if name == "errors":
        return check_errors()
    if name == "split":
        return check_split()
    dist, serial, nargs, split = CASES[name]
    glob = _globals(nargs, split, 1)
    local = _local(glob, split)
    value = dist(*[a.copy() for a in local])
    total = np.zeros(1)
    mpi.allreduce(value, total)
    if not np.isclose(total[0], serial(*glob), rtol=1e-10, atol=1e-12):
        return f"primal {total[0]} != serial {serial(*glob)}"
    shadows = [np.zeros_like(a) for a in local]
    autodiff(Reverse, dist, Active, *[Duplicated(a.copy(), s) for a, s in zip(local, shadows)])
    directional = 0.0
    directions = _globals(nargs, split, 2)
    for k in range(nargs):
        grad, fd = _serial_gradient(serial, glob, k)
        # only rank 0's copy of an argument that is not split reaches the broadcast
        mine = _local([grad], [split[k]])[0]
        if not np.allclose(shadows[k], mine, rtol=1e-8, atol=1e-10):
            return f"reverse d/d{k}: {shadows[k]} != pyzyme serial {mine}"
        fd_mine = _local([fd], [split[k]])[0]
        if not np.allclose(shadows[k], fd_mine, rtol=1e-5, atol=1e-6):
            return f"reverse d/d{k}: {shadows[k]} != finite differences {fd_mine}"
        directional += float(grad @ directions[k])
    tangents = _local(directions, split)
    (dvalue,) = autodiff(Forward, dist, DuplicatedNoNeed,
                         *[Duplicated(a.copy(), t) for a, t in zip(local, tangents)])
    summed = np.zeros(1)
    mpi.allreduce(dvalue, summed)
    if not np.isclose(summed[0], directional, rtol=1e-8, atol=1e-10):
        return f"forward: ranks' tangents sum to {summed[0]}, serial gradient says {directional}"
    return ""


def main(out: str, names) -> None:
    """Run the cases ``names`` (all when empty), writing this rank's lines to ``out``
    (a folder: one file per rank, as the ranks' standard outputs interleave)."""
    import time
    with open(f"{out}/rank-{RANK}.txt", "w") as report:
        for name in names or [*CASES, "errors", "split", "batch", "mixed", "no_disk_cache",
                              "readme_halo", "docs_dot"]:
            start = time.perf_counter()
            try:
                why = check(name)
            except Exception:  # noqa: BLE001 - reported to the test, which fails on it
                why = traceback.format_exc().replace("\n", " | ")
            took = f"{time.perf_counter() - start:.1f}s"
            print(f"OK {name} {RANK} {took}" if not why else f"FAIL {name} {RANK} {why}",
                  file=report, flush=True)
    mpi.barrier()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
