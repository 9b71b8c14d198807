"""Other projects' bugs that some of these tests meet on some platforms, and how a test steps
aside from them: only where the bug itself shows, naming it.

Numba 0.68's parfor pass cannot compile a ``prange`` reduction whose body holds a loop with a
branch (a pair loop's ``if j != i``) from Python 3.12's bytecode: ``AssertionError: unexpected
cycle in lookup()`` (numba/numba#10132), whether pyzyme is imported or not. The same
functions compile from Python 3.11's bytecode, where CI runs.
"""

from __future__ import annotations

import numba
import pytest

__all__ = ["numba_compiles"]


def numba_compiles(f, *args) -> None:
    """Compile the ``@njit`` function ``f`` for ``args``' types, skipping the test where Numba
    itself fails on it with numba/numba#10132 (any other error is raised)."""
    try:
        f.compile(tuple(numba.typeof(a) for a in args))
    except AssertionError as err:
        if "unexpected cycle in lookup()" not in str(err):
            raise
        pytest.skip("Numba cannot compile this prange reduction from this Python's bytecode "
                    "(numba/numba#10132; pyzyme plays no part)")
