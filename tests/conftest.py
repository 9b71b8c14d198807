"""Shared fixtures and helpers for pyzyme's test suite."""

from __future__ import annotations

import difflib

import llvmlite.binding as llvm


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
