"""One MPI rank of tests/test_mpi.py's checks that a derivative lost between two ranks stops the
program: rank 0 sends data that has a derivative, rank 1 receives it into an argument passed
``Const`` and returns what it received, so rank 1's part of the gradient (forward: the tangent
that arrives) has nowhere to go. Each run ends in ``MPI_Abort``; the test reads the message.

    mpiexec -n 2 python tests/mpi_lost_worker.py <reverse|forward> <blocking|nonblocking>
"""

from __future__ import annotations

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


def main(mode: str, kind: str) -> None:
    f = blocking if kind == "blocking" else nonblocking
    x, ghost = np.array([1.0, 2.0]), np.zeros(2)
    f(x.copy(), ghost.copy())   # the primal runs: only the derivative loses something
    if mode == "reverse":
        autodiff(Reverse, f, Active, Duplicated(x, np.zeros(2)), Const(ghost))
    else:
        autodiff(Forward, f, DuplicatedNoNeed, Duplicated(x, np.ones(2)), Const(ghost))
    print(f"rank {mpi.rank()}: no error", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
