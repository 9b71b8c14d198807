"""One MPI rank of tests/test_mpi.py's checks that a derivative lost between two ranks stops the
program: rank 0 sends data that has a derivative, rank 1 receives it into an argument passed
``Const`` and returns what it received, so rank 1's part of the gradient (forward: the tangent
that arrives) has nowhere to go. Each run ends in ``MPI_Abort``; the test reads the message.

The collectives (reverse mode) lose a rank's part the same way: one call site whose buffers
have a derivative on one rank and are arguments passed ``Const`` on the other, whose objective
reads what it received. A run that does not stop prints the gradient it got beside the right
one (on 5a2cec7 every collective printed a wrong one: the Const rank's part missing).

    mpiexec -n 2 python tests/mpi_lost_worker.py <reverse|forward> <blocking|nonblocking>
    mpiexec -n 2 python tests/mpi_lost_worker.py <reverse|forward> <bcast|allreduce|reduce|
                                                                     gather|scatter|allgather>

A third argument, a folder, sends each rank's output to files of its own there.
"""

from __future__ import annotations

import os
import sys

import numba
import numba_mpi as mpi
import numpy as np

from pyzyme import Active, Const, Duplicated, DuplicatedNoNeed, Forward, Reverse, autodiff


@numba.njit
def blocking(x, ghost):
    if mpi.rank() == 0:
        mpi.send(x, 1, 7)
        return 0.0
    mpi.recv(ghost, 0, 7)
    return 3.0 * ghost[0] + ghost[1]


@numba.njit
def nonblocking(x, ghost):
    if mpi.rank() == 0:
        _, r = mpi.isend(x, 1, 7)
        mpi.wait(r)
        return 0.0
    _, r = mpi.irecv(ghost, 0, 7)
    mpi.wait(r)
    return 3.0 * ghost[0] + ghost[1]


# -- collectives: one rank's arguments Duplicated, the other's Const ------------------------------
@numba.njit
def bcast(x, y):   # x is sent by the root and received by the other rank
    mpi.bcast(x, 0)
    return 3.0 * x[0] + x[1]


@numba.njit
def allreduce(x, y):
    mpi.allreduce(x, y)
    return 3.0 * y[0] + y[1]


@numba.njit
def reduce(x, y):
    mpi.reduce(x, y, mpi.Operator.SUM, 0)
    return 3.0 * y[0] + y[1] if mpi.rank() == 0 else 0.0


@numba.njit
def gather(x, y):   # the root's objective reads rank 1's part
    mpi.gather(x, y, 2, 0)
    return 3.0 * y[2] + y[3] if mpi.rank() == 0 else 0.0


@numba.njit
def scatter(x, y):
    mpi.scatter(x, y, 2, 0)
    return 3.0 * y[0] + y[1]


@numba.njit
def allgather(x, y):   # each rank's objective reads rank 1's part
    mpi.allgather(x, y, 2)
    return 3.0 * y[2] + y[3]


#: kind: (function, the rank whose arguments are Duplicated, the sizes of x and y, the right
#: gradient of the ranks' summed objectives with respect to that rank's x)
COLLECTIVES = {
    "bcast": (bcast, 0, 2, 2, [6.0, 2.0]),
    "allreduce": (allreduce, 0, 2, 2, [6.0, 2.0]),
    "reduce": (reduce, 1, 2, 2, [3.0, 1.0]),
    "gather": (gather, 1, 2, 4, [3.0, 1.0]),
    "scatter": (scatter, 0, 4, 2, [3.0, 1.0, 3.0, 1.0]),
    "allgather": (allgather, 1, 2, 4, [6.0, 2.0]),
}


def collective(mode: str, kind: str) -> None:
    f, active, nx, ny, want = COLLECTIVES[kind]
    x, y = np.arange(1.0, nx + 1.0), np.zeros(ny)
    dx = np.zeros(nx)
    f(x.copy(), y.copy())   # the primal runs: only the derivative loses something
    if mode == "forward":   # the tangent of x along ones; the objectives' tangents summed
        args = (Duplicated(x, np.ones(nx)), Duplicated(y, np.zeros(ny))) \
            if mpi.rank() == active else (Const(x), Const(y))
        (tangent,) = autodiff(Forward, f, DuplicatedNoNeed, *args)
        summed = np.zeros(1)
        mpi.allreduce(tangent, summed)
        print(f"rank {mpi.rank()}: no error, tangent {summed[0]}, right {sum(want)}",
              flush=True)
    elif mpi.rank() == active:
        autodiff(Reverse, f, Active, Duplicated(x, dx), Duplicated(y, np.zeros(ny)))
        print(f"rank {mpi.rank()}: no error, gradient {dx}, right {np.array(want)}",
              flush=True)
    else:
        autodiff(Reverse, f, Active, Const(x), Const(y))
        print(f"rank {mpi.rank()}: no error", flush=True)


def main(mode: str, kind: str) -> None:
    if kind in COLLECTIVES:
        collective(mode, kind)
        return
    f = blocking if kind == "blocking" else nonblocking
    x, ghost = np.array([1.0, 2.0]), np.zeros(2)
    f(x.copy(), ghost.copy())   # the primal runs: only the derivative loses something
    if mode == "reverse":
        autodiff(Reverse, f, Active, Duplicated(x, np.zeros(2)), Const(ghost))
    else:
        autodiff(Forward, f, DuplicatedNoNeed, Duplicated(x, np.ones(2)), Const(ghost))
    print(f"rank {mpi.rank()}: no error", flush=True)


def _own_files(folder: str) -> None:
    """This rank's stdout and stderr into files of its own in ``folder``: what a rank writes
    just before ``MPI_Abort`` is on disk when the abort comes, where the launcher's forwarding
    of it may be cut short on a loaded machine."""
    for fd, name in ((1, "out"), (2, "err")):
        os.dup2(os.open(os.path.join(folder, f"rank{mpi.rank()}.{name}"),
                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)


if __name__ == "__main__":
    if len(sys.argv) > 3:
        _own_files(sys.argv[3])
    main(sys.argv[1], sys.argv[2])
