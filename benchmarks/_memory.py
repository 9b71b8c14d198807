"""Peak extra memory of one call: the process's resident-set high-water mark during the call
over its resident set just before it, measured the same way for every tool.

Method (Linux): after a warm-up call (compilation, tracing, caches), free memory is handed back
to the system (``gc.collect()``, glibc's ``malloc_trim(0)``), the kernel's high-water mark is
reset to the current resident set (writing ``5`` to ``/proc/self/clear_refs``), ``VmRSS`` is
read, the call is made once, and ``VmHWM`` is read: the difference is what the call needed
beyond the state before it (its tape or residuals, temporaries, the gradient it returns; not
its inputs or shadows made before it).

The measuring process is started with glibc's malloc told to map every block of 64 KiB or more
on its own (``MALLOC_MMAP_THRESHOLD_``, which also turns off glibc's habit of raising that
threshold after a large free) and to give freed heap back at once (``MALLOC_TRIM_THRESHOLD_``):
otherwise memory freed by the warm-up call stays resident, the measured call reuses it, and the
figure reads near zero. Such a malloc makes large allocations slower (a page fault per page),
so ``reverse.py`` and ``peers.py`` measure memory in a process of its own (:data:`ENV`), never
in the one they time in.

Granularity: pages (4 KiB), and the kernel's resident counters are per-CPU sums read without
synchronising, off by up to a few hundred KiB; allocators that keep their own pools may serve a
call from memory the warm-up left them: JAX's, for instance, and pyzyme's tape pool, which keeps
the tape arrays of one call for the next (``pyzyme.diff.tape.pool``; how much that is, exactly,
is reverse.py's "tape" column). Figures under 1 MB say "about nothing" rather than an exact
size.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
from collections.abc import Callable
from pathlib import Path

# the environment a memory-measuring process is started with (added to the caller's)
ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "131072"}


class MemoryUnavailable(RuntimeError):
    """This system cannot reset and read the resident-set high-water mark."""


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise MemoryUnavailable(f"/proc/self/status has no {field} line")


def _trim() -> None:
    gc.collect()
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to hand back this way


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError as err:
        raise MemoryUnavailable(f"cannot reset the peak resident set ({err}): needs Linux "
                                ">= 4.0 and a writable /proc/self/clear_refs") from None


def available() -> bool:
    """Whether :func:`peak_extra` can measure here."""
    try:
        _reset_peak()
        _status_kib("VmHWM")
        return True
    except MemoryUnavailable:
        return False


def peak_extra(call: Callable[[], object], warm: bool = True) -> int:
    """Bytes the resident set rose by, at its highest, during one ``call()`` (see the module
    docstring); ``warm``: make one call first, unmeasured.

    Examples
    --------
    >>> import numpy as np
    >>> peak_extra(lambda: np.ones(4_000_000).sum()) > 30_000_000  # doctest: +SKIP
    True
    """
    if warm:
        call()
    _trim()
    _reset_peak()
    before = _status_kib("VmRSS")
    out = call()
    peak = _status_kib("VmHWM")
    del out
    return max(0, peak - before) * 1024


def fmt(nbytes: int | None) -> str:
    """A byte count for the tables: ``"38.1 MB"``, ``"< 1 MB"``."""
    if nbytes is None:
        return "-"
    if nbytes < 1_000_000:
        return "< 1 MB"
    if nbytes < 1_000_000_000:
        return f"{nbytes / 1e6:.1f} MB"
    return f"{nbytes / 1e9:.2f} GB"


def child_env() -> dict[str, str]:
    """The caller's environment with :data:`ENV` added: for ``subprocess`` calls."""
    return {**os.environ, **ENV}
