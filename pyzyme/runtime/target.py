"""The one LLVM target pyzyme compiles for: Numba's own JIT code generator.

Compiled derivatives are linked into Numba-compiled callers and run in Numba's MCJIT engine, so
they must be optimized for exactly the CPU, features, triple and data layout Numba uses. Instead of
building a second target machine that could drift from Numba's, pyzyme borrows Numba's.

Nothing here touches Numba at import time: asking for Numba's codegen initializes Numba's CPU
target and compiles its runtime library, which must happen after the capture hook is installed.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys

import llvmlite.binding as llvm
from numba.core import codegen as numba_codegen
from numba.core import config as numba_config
from numba.core.registry import cpu_target
from numba.core.runtime import rtsys

from pyzyme.errors import RecursionDepthError, TapeBudgetError

#: The symbol under which generated code finds :class:`~pyzyme.RecursionDepthError` (the class
#: object itself), to raise it from native code. Defined on import (it touches only llvmlite's
#: symbol table), before any code naming it can be compiled or loaded from a cache: a Numba
#: cache of an ``@njit`` caller holds such code too.
RECURSION_ERROR_SYMBOL = "pyzyme.RecursionDepthError"
llvm.add_symbol(RECURSION_ERROR_SYMBOL, id(RecursionDepthError))
#: ... and :class:`~pyzyme.TapeBudgetError`, raised by a checkpointed loop whose iteration
#: does not fit the tape budget (:mod:`pyzyme.transforms.checkpoint_loops`).
TAPE_BUDGET_ERROR_SYMBOL = "pyzyme.TapeBudgetError"
llvm.add_symbol(TAPE_BUDGET_ERROR_SYMBOL, id(TapeBudgetError))


def numba_codegen_instance() -> numba_codegen.JITCPUCodegen:
    """Numba's process-wide JIT code generator (one MCJIT engine, one target machine).

    Numba's runtime (``NRT_*`` symbols, its JIT-compiled ``NRT_incref``/``NRT_decref``) is
    initialized too, as Numba does before its first compilation.

    Examples
    --------
    >>> numba_codegen_instance() is numba_codegen_instance()
    True
    """
    context = cpu_target.target_context
    rtsys.initialize(context)  # idempotent
    return context.codegen()


@functools.cache
def side_stacks() -> bool:
    """Whether generated code can run on a stack of its own here: Linux on x86-64 or AArch64
    with a C library that has ``makecontext`` (glibc; musl has none), whose ``ucontext_t``
    starts with the fields :mod:`pyzyme.diff.side_stack` sets (``uc_link`` at byte 8,
    ``uc_stack.ss_sp`` at 16, ``uc_stack.ss_size`` at 32) and fits in 8 KiB."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        return False
    libc = ctypes.CDLL(None)
    return all(hasattr(libc, name) for name in ("getcontext", "makecontext", "swapcontext",
                                                 "setcontext", "mmap", "mprotect"))


def target_machine() -> llvm.TargetMachine:
    """Numba's target machine: host CPU name and features, static relocation, JIT code model."""
    return numba_codegen_instance()._tm


def cpu_name() -> str:
    """The CPU Numba compiles for: ``NUMBA_CPU_NAME`` if set (``haswell`` makes an AVX-512
    machine compile as an AVX2 one), else the host's.

    Examples
    --------
    >>> cpu_name() == (numba_config.CPU_NAME or llvm.get_host_cpu_name())
    True
    """
    return numba_codegen_instance()._get_host_cpu_name()


def cpu_features() -> str:
    """The CPU features Numba compiles for: ``NUMBA_CPU_FEATURES`` if set (``""``: those of
    :func:`cpu_name`), else the host's."""
    return numba_codegen_instance()._tm_features


def requested_cpu() -> str | None:
    """The CPU ``NUMBA_CPU_NAME`` names (None: the host's), for compilers outside Numba."""
    return numba_config.CPU_NAME


def data_layout() -> str:
    """The data layout string of Numba's target.

    Examples
    --------
    >>> data_layout().startswith("e-m:")
    True
    """
    return numba_codegen_instance()._data_layout


def triple() -> str:
    """The target triple Numba compiles for (the host's)."""
    return llvm.get_process_triple()
