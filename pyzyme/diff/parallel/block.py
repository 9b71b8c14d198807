"""The launch block of a parallel loop's derivative: its words, and where each part starts.

A launch block (one malloc'ed block per launch, see :mod:`pyzyme.diff.parallel.launch`) holds
8-byte words: the fixed ones at the indices below, then the parts whose sizes depend on the
launch (:class:`Layout`: the primal's ``args``, their shadows per lane, ``dims``, ``steps``, the
shadows of ``data``, two words per privatized slot), then a tape and a thread id per row, and
one byte per launched item.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme.ir import IRBuilder
from pyzyme.ir import types as T
from pyzyme.ir.values import Value, const_int

__all__ = ["W", "NROWS", "NSLOTS", "DATA", "TARGS", "TDIMS", "TSTEPS", "REVERSE", "TAPES", "ARGS",
           "Layout", "i64", "word", "store", "load"]

W = 8  # bytes per word of the launch block
NROWS, NSLOTS, DATA, TARGS, TDIMS, TSTEPS, REVERSE, TAPES, ARGS = range(9)


@dataclass(frozen=True)
class Layout:
    """Word offsets of a launch block for ``count`` arguments, ``ndim`` core dimensions,
    ``lanes`` shadows per argument and ``data_lanes`` shadows of ``data`` (forward mode of a
    derivative's own launch, whose ``data`` is a launch block holding shadows: ``hvp``)."""

    count: int
    ndim: int
    nsteps: int
    lanes: int
    data_lanes: int = 0
    #: The slots whose adjoints each reverse task adds into a private copy (see
    #: :func:`~pyzyme.diff.parallel.private.privatized`), and each one's element type: two
    #: words each, the copies (null: none, one task) and the bytes of one.
    private: tuple = ()

    @property
    def shadows(self) -> int:
        return ARGS + self.count

    @property
    def dims(self) -> int:
        return self.shadows + self.count * self.lanes

    @property
    def steps(self) -> int:
        return self.dims + self.ndim + 1

    @property
    def data_shadows(self) -> int:
        return self.steps + self.nsteps

    @property
    def privates(self) -> int:
        return self.data_shadows + self.data_lanes

    @property
    def fixed(self) -> int:
        """Words before the per-row part."""
        return self.privates + 2 * len(self.private)


def i64(n: int) -> Value:
    return const_int(T.i64, n)


def word(b: IRBuilder, block: Value, k, name: str = "") -> Value:
    return b.gep(T.i64, block, [i64(k) if isinstance(k, int) else k], name=name)


def store(b: IRBuilder, value: Value, block: Value, k) -> None:
    b.store(value, word(b, block, k), 8)


def load(b: IRBuilder, ty: T.Type, block: Value, k, name: str = "") -> Value:
    return b.load(ty, word(b, block, k), 8, name=name)
