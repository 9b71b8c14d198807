"""MPI programs written with numba-mpi, differentiated rank by rank (issue 26).

Each test launches ``mpiexec -n N`` on tests/mpi_worker.py, whose ranks check their gradients
(reverse mode) and tangents (forward mode) against the serial pyzyme gradient of the same
computation and its finite differences, several cases per launch (a launch and its Numba
compilations cost seconds). The MPI stack comes from the ``[mpi]`` extra (numba-mpi, mpi4py,
the ``mpich`` wheel); without it the tests skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("mpi_worker.py")


def _mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def _missing() -> str | None:
    try:
        import mpi4py  # noqa: F401
        import numba_mpi  # noqa: F401
    except Exception as err:  # noqa: BLE001 - any failure to load MPI means: no MPI here
        return f"no MPI stack ({err}); install pyzyme[mpi]"
    if _mpiexec() is None:
        return "no mpiexec on PATH or beside the Python executable; install pyzyme[mpi]"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def _launch(ranks: int, out: Path, cases: list[str], timeout: float = 280) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    run = subprocess.run([_mpiexec(), "-n", str(ranks), sys.executable, str(WORKER), str(out),
                          *cases], capture_output=True, text=True, timeout=timeout, env=env,
                         cwd=root)
    lines = [line for f in sorted(out.glob("rank-*.txt")) for line in f.read_text().splitlines()]
    results = {}
    for line in lines:
        status, case, rank, *why = line.split(" ", 3)
        results[(case, int(rank))] = (status, " ".join(why))
    missing = [(c, r) for c in cases for r in range(ranks) if (c, r) not in results]
    assert not missing, f"ranks that reported nothing: {missing}\n{run.stdout}\n{run.stderr}"
    return results


def _assert_all_ok(results: dict) -> None:
    failed = {k: v[1] for k, v in results.items() if v[0] != "OK"}
    assert not failed, "\n".join(f"{case} rank {rank}: {why}"
                                 for (case, rank), why in sorted(failed.items()))


@pytest.mark.timeout(600)   # one launch for every two-rank case: longer than the default
def test_two_ranks(tmp_path):
    """One launch (a launch's ranks import and compile everything again, the most of what
    these tests cost), every case: halo exchanges (blocking and nonblocking) and ring shifts,
    in reverse, forward, vector forward and split mode; allreduce (sum, max, min), reduce,
    bcast, scatter, gather, allgather; a collective whose buffers differ in activity between
    ranks; the calls pyzyme refuses; no derivative of MPI code stored on disk; README.md's
    halo.py and docs/mpi.rst's dot.py, as their pages show them."""
    _assert_all_ok(_launch(2, tmp_path, ["diffusion", "diffusion_nb", "ring", "ring_nb",
                                         "ring_test", "halo_buffer", "split", "batch",
                                         "dot", "bcast", "gather", "extremum", "reduce",
                                         "scatter", "allgather", "mixed", "errors",
                                         "no_disk_cache", "readme_halo", "docs_dot"],
                                 timeout=400))


def test_three_ranks_match_the_serial_gradient(tmp_path):
    # a rank with a neighbour on each side (a halo exchange), and a root with two others
    _assert_all_ok(_launch(3, tmp_path, ["diffusion", "scatter"]))


def _lost(mode: str, kind: str, tmp_path: Path) -> str:
    """What tests/mpi_lost_worker.py ``mode kind`` says at two ranks, which must stop. Each rank
    writes to files of its own: MPI's launcher, forwarding an aborted job's output, has lost
    the message under load (CI on a43ff08: only the other rank's line came back)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    run = subprocess.run([_mpiexec(), "-n", "2", sys.executable,
                          str(WORKER.with_name("mpi_lost_worker.py")), mode, kind,
                          str(tmp_path)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=root)
    said = run.stdout + run.stderr + "".join(p.read_text() for p in sorted(tmp_path.iterdir()))
    assert run.returncode != 0, said
    said = f"{said}(exit status {run.returncode})"
    assert "would be lost" in said and "Pass the receive buffer Duplicated" in said, said
    return said


@pytest.mark.parametrize("mode, kind", [("reverse", "nonblocking"), ("forward", "blocking")])
def test_a_derivative_lost_between_ranks_stops_the_program(mode, kind, tmp_path):
    """Rank 0 sends data with a derivative; rank 1 receives it into an argument passed Const.
    Rank 1 cannot know at compile time that the data is active, so the derivative checks at
    run time (forward: a tangent that is not zero arrives for a buffer without one; reverse:
    the adjoint rank 1 sends back is marked as missing) and stops every rank with
    MPI_Abort, saying what to do, instead of returning a gradient without rank 1's part.
    (tests/mpi_lost_worker.py has all four of send/recv, isend/irecv x both modes.)"""
    _lost(mode, kind, tmp_path)


@pytest.mark.parametrize("kind", ["bcast", "allreduce", "scatter", "allgather"])
def test_a_collective_losing_a_ranks_derivative_stops_the_program(kind, tmp_path):
    """Reverse mode: one rank passes a collective's buffers Duplicated, the other Const, and
    its objective reads what it received, so its part of the gradient has nowhere to go (each
    printed a gradient without it on 5a2cec7: bcast [3 1] for [6 2]). The Const rank marks
    the zeros it takes part with; the marks pass through the reductions' sums (allreduce)
    and land in each rank's part (allgather, scatter's root: one part per rank), where the
    rank whose data has a derivative finds them and stops the program with MPI_Abort.
    (tests/mpi_lost_worker.py has reduce and gather too.)"""
    said = _lost("reverse", kind, tmp_path)
    assert f"MPI_{kind.capitalize()}" in said and f".{kind} " in said, said
