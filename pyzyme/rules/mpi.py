"""Rows for the calls of the MPI library, one per symbol, and the MPI library's handles.

``numba-mpi`` calls MPI from ``@njit`` code through function pointers it takes with ctypes; the
Numba frontend names those calls by symbol (:mod:`pyzyme.frontends.numba.foreign_calls`) and
folds the predefined handles they pass (datatypes, reductions, ``MPI_COMM_WORLD``) to the
constants they hold, which :data:`HANDLES` interprets. The derivatives are SC22's
(:mod:`pyzyme.diff.calls.mpi`): a send's adjoint is a receive, a receive's a send, a sum's a
sum of the adjoints, a broadcast's a reduction to the root.

Handle values belong to one MPI library (MPICH's are integers fixed in its ``mpi.h``, Open
MPI's addresses of this process), so they are registered at run time by whoever knows them
(the Numba frontend reads them from ``mpi4py``), never written here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.rules.spec import Inactive, Mpi

__all__ = ["ROWS", "HANDLES", "Handles", "SHADOW_TAG_BIT", "Lost", "LOST"]


@dataclass
class Handles:
    """The MPI library's predefined handles, as the integers a call passes.

    ``datatypes`` maps a datatype handle to its element kind (``"f64"``, ``"f32"`` or
    ``"int"``: integers carry no derivative); ``reductions`` a reduction (``MPI_Op``) to
    ``"sum"``, ``"max"``, ``"min"``, ``"prod"`` or another name; ``any_source`` and
    ``any_tag`` are the wildcards of a receive; ``tag_ub`` the largest tag the library
    accepts; ``request_bytes`` the size of an ``MPI_Request`` and ``request_null`` the value
    of ``MPI_REQUEST_NULL``."""

    datatypes: dict[int, str] = field(default_factory=dict)
    reductions: dict[int, str] = field(default_factory=dict)
    any_source: int | None = None
    any_tag: int | None = None
    tag_ub: int | None = None
    request_bytes: int | None = None
    request_null: int | None = None
    #: Handles derivatives pass themselves, by their MPI name without ``MPI_``: ``SUM``,
    #: ``MIN`` and ``INT32_T`` (max and min find the rank holding the extremum).
    named: dict[str, int] = field(default_factory=dict)

    def update(self, other: Handles) -> None:
        """Take ``other``'s values (the library is the same for the whole process)."""
        self.datatypes.update(other.datatypes)
        self.reductions.update(other.reductions)
        self.named.update(other.named)
        for name in ("any_source", "any_tag", "tag_ub", "request_bytes", "request_null"):
            if getattr(other, name) is not None:
                setattr(self, name, getattr(other, name))


#: The handles of the MPI library loaded in this process (empty until a frontend sees it).
HANDLES = Handles()

#: Derivative messages carry the user's tag with this bit set, so they never match a
#: message of the program itself (whose tags must stay below it; MPI guarantees 2**15).
SHADOW_TAG_BIT = 1 << 14


@dataclass(frozen=True)
class Lost:
    """Where reverse mode finds, in a collective's adjoint communication, a rank that received
    data with a derivative into a buffer without one (its part of the gradient would be lost
    silently): each rank in ``marks`` whose receive buffer has no shadow marks the zeros it
    takes part with in its adjoint's place (the first element of each part, one part per
    rank where ``marked_per_rank``); each rank in ``checks`` whose sent buffer has a shadow
    looks for the mark in the adjoint that comes back to it (in each part where
    ``checked_per_rank``) and stops the program. Ranks are ``"all"``, ``"root"`` or
    ``"others"`` (all but the root)."""

    marks: str
    marked_per_rank: bool
    checks: str
    checked_per_rank: bool


#: The collectives' :class:`Lost` checks, by operation: no message is added (the mark rides
#: in the adjoint's own payload, through the sums of the reductions), the sender reads the
#: first element of each part of what it receives.
LOST = {
    "allreduce": Lost(marks="all", marked_per_rank=False, checks="all", checked_per_rank=False),
    "reduce": Lost(marks="root", marked_per_rank=False, checks="all", checked_per_rank=False),
    "bcast": Lost(marks="others", marked_per_rank=False, checks="root",
                  checked_per_rank=False),
    "gather": Lost(marks="root", marked_per_rank=True, checks="all", checked_per_rank=False),
    "scatter": Lost(marks="all", marked_per_rank=False, checks="root", checked_per_rank=True),
    "allgather": Lost(marks="all", marked_per_rank=True, checks="all", checked_per_rank=False),
}

ROWS = (
    Inactive(("MPI_Comm_rank", "MPI_Comm_size"), "runtime",
             reason="the rank and the number of ranks: integers", writes=(1,)),
    Inactive(("MPI_Initialized", "MPI_Query_thread", "MPI_Finalized"), "runtime",
             reason="the state of the MPI library: an integer flag", writes=(0,)),
    Inactive(("MPI_Wtime", "MPI_Wtick"), "runtime", reason="the clock", writes=()),
    Inactive(("MPI_Barrier",), "runtime",
             reason="a barrier moves no data (its reverse needs none)", writes=()),
    # a derivative calls it too: where a derivative would be lost between two ranks
    Inactive(("MPI_Abort",), "runtime", reason="stops every rank: no data", writes=()),
    # MPI_Send(buf, count, datatype, dest, tag, comm)
    Mpi(("MPI_Send",), "runtime", op="send", buffer=0, count=1, datatype=2, peer=3, tag=4,
        comm=5),
    # MPI_Recv(buf, count, datatype, source, tag, comm, status)
    Mpi(("MPI_Recv",), "runtime", op="recv", output=0, count=1, datatype=2, peer=3, tag=4,
        comm=5, writes=(0, 6)),
    # MPI_Isend(buf, count, datatype, dest, tag, comm, request)
    Mpi(("MPI_Isend",), "runtime", op="isend", buffer=0, count=1, datatype=2, peer=3, tag=4,
        comm=5, request=6, writes=(6,)),
    # MPI_Irecv(buf, count, datatype, source, tag, comm, request)
    Mpi(("MPI_Irecv",), "runtime", op="irecv", output=0, count=1, datatype=2, peer=3, tag=4,
        comm=5, request=6, writes=(0, 6)),
    # MPI_Wait(request, status); MPI_Waitall(count, requests, statuses)
    Mpi(("MPI_Wait",), "runtime", op="wait", request=0, writes=(0, 1)),
    Mpi(("MPI_Waitall",), "runtime", op="waitall", count=0, request=1, writes=(1, 2)),
    # MPI_Test(request, flag, status)
    Mpi(("MPI_Test",), "runtime", op="test", request=0, writes=(0, 1, 2)),
    # MPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm)
    Mpi(("MPI_Allreduce",), "runtime", op="allreduce", buffer=0, output=1, count=2,
        datatype=3, reduction=4, comm=5, writes=(1,)),
    # MPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm)
    Mpi(("MPI_Reduce",), "runtime", op="reduce", buffer=0, output=1, count=2, datatype=3,
        reduction=4, peer=5, comm=6, writes=(1,)),
    # MPI_Bcast(buf, count, datatype, root, comm): the buffer is sent (root) or received
    Mpi(("MPI_Bcast",), "runtime", op="bcast", buffer=0, output=0, count=1, datatype=2,
        peer=3, comm=4, writes=(0,)),
    # MPI_Scatter / MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
    # root, comm); MPI_Allgather(the same without root)
    Mpi(("MPI_Scatter",), "runtime", op="scatter", buffer=0, count=1, datatype=2, output=3,
        out_count=4, out_datatype=5, peer=6, comm=7, writes=(3,)),
    Mpi(("MPI_Gather",), "runtime", op="gather", buffer=0, count=1, datatype=2, output=3,
        out_count=4, out_datatype=5, peer=6, comm=7, writes=(3,)),
    Mpi(("MPI_Allgather",), "runtime", op="allgather", buffer=0, count=1, datatype=2,
        output=3, out_count=4, out_datatype=5, comm=6, writes=(3,)),
    # numba-mpi calls these too; their derivatives are not written (yet): named in the error.
    Mpi(("MPI_Sendrecv", "MPI_Waitany", "MPI_Testall", "MPI_Testany", "MPI_Alltoall",
         "MPI_Scan", "MPI_Exscan", "MPI_Reduce_scatter", "MPI_Sendrecv_replace",
         "MPI_Ssend", "MPI_Rsend", "MPI_Bsend", "MPI_Issend"), "runtime", op="unsupported"),
)
