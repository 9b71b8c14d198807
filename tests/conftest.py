"""Shared fixtures and helpers for pyzyme's test suite."""

from __future__ import annotations

import difflib

import llvmlite.binding as llvm
import pytest


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
