"""Shared fixtures and helpers for pyzyme's test suite."""

from __future__ import annotations

import difflib
import faulthandler
import os
import sys

# Four threads for Numba's parallel loops, whatever the machine (tests/parallel runs them at 1,
# 2 and 4; on 2 cores, 4 oversubscribes on purpose, so races show up more). Read when Numba's
# config is first imported, hence before anything imports Numba.
os.environ.setdefault("NUMBA_NUM_THREADS", "4")

import llvmlite.binding as llvm
import pytest

# Where the hard time limit reports (a copy of the real stderr: pytest captures fd 2 during a
# test), and the limit itself: pytest-timeout's ("timeout" in pyproject.toml) plus a minute.
_backstop: dict = {}


def pytest_configure(config):
    try:
        limit = config.getoption("timeout", None)
        limit = float(config.getini("timeout") if limit is None else limit)
    except ValueError:  # pytest-timeout is not installed
        limit = 300.0
    if limit > 0:
        _backstop["limit"] = limit + 60.0
        _backstop["stderr"] = os.fdopen(os.dup(sys.__stderr__.fileno()), "w")


@pytest.fixture(autouse=True)
def _hard_time_limit():
    """End the run, with every thread's stack, when a test outlives pytest-timeout. Its
    watchdog is a Python thread: it cannot run while JIT-compiled code holds the GIL (a
    derivative that loops forever), where faulthandler's C thread still can. ``--timeout=0``
    turns both off (to debug)."""
    if "limit" not in _backstop:
        yield
        return
    faulthandler.dump_traceback_later(_backstop["limit"], exit=True, file=_backstop["stderr"])
    yield
    faulthandler.cancel_dump_traceback_later()


def llvm_normalize(text: str) -> str:
    """``text`` as LLVM itself prints it, parsed in a fresh context (so named struct types
    are not renamed by earlier parses) and verified."""
    ref = llvm.parse_assembly(text, context=llvm.create_context())
    ref.verify()
    return str(ref)


def assert_same_text(expected: str, actual: str, what: str = "text") -> None:
    """Equality of two IR texts, failing with a unified diff of the first differences."""
    if expected != actual:
        diff = difflib.unified_diff(expected.splitlines(), actual.splitlines(),
                                    "expected", "actual", lineterm="", n=1)
        raise AssertionError(f"{what} differs:\n" + "\n".join(list(diff)[:60]))


@pytest.fixture
def nrt_stats():
    """Numba's allocation counters (``rtsys.get_allocation_stats``), switched on for the
    test."""
    from numba.core.runtime import _nrt_python, rtsys

    was_enabled = _nrt_python.memsys_stats_enabled()
    _nrt_python.memsys_enable_stats()
    yield rtsys.get_allocation_stats
    if not was_enabled:
        _nrt_python.memsys_disable_stats()


# run by tests/test_mpi.py under mpiexec, not modules to import (tests/shards.py skips them too)
collect_ignore_glob = ["*_worker.py"]
