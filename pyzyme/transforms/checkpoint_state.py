"""The carried block of a checkpointed loop (:mod:`pyzyme.transforms.checkpoint_loops`): the
memory through which its steps pass the values LLVM carried from one iteration to the next in
header phis, and those code after the loop (or after an exception exit) uses."""

from __future__ import annotations

from pyzyme.ir import IRBuilder
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int

__all__ = ["CarriedLayout"]


def _i64(n: int):
    return const_int(T.i64, n)


class CarriedLayout:
    """The carried block: a field for each carried value, a pointer as two i64 fields (which
    of the loop's pointer bases, and the byte offset into it)."""

    FAILED = ("failed", None)

    def __init__(self, phis: list, outs: list, failing: bool = False) -> None:
        types: list = []
        self.field: dict = {}
        # A header phi code after the loop uses has two fields: its value on the next
        # iteration and its value on the last one.
        for key in [("phi", p) for p in phis] + [("out", v) for v in outs]:
            self.field[key] = len(types)
            types += [T.i64, T.i64] if key[1].type.is_pointer else [key[1].type]
        if failing:  # 0, or 1 + which exception exit a step took
            self.field[self.FAILED] = len(types)
            types.append(T.i32)
        self.type = T.StructType(types or [T.i64])

    def failed(self, b: IRBuilder, block):
        """The pointer to the failed field."""
        return self._slot(b, block, self.FAILED)

    def _slot(self, b: IRBuilder, block, key, j: int = 0):
        return b.gep(self.type, block, [_i64(0), const_int(T.i32, self.field[key] + j)])

    def put(self, b: IRBuilder, block, key, value, encode) -> None:
        """Store ``value`` as carried value ``key`` (``("phi", phi)`` or ``("out", value)``):
        ``encode(b, pointer)`` gives a pointer's (which, offset)."""
        v = key[1]
        if not v.type.is_pointer:
            b.store(value, self._slot(b, block, key))
            return
        which, offset = encode(b, value)
        b.store(which, self._slot(b, block, key), 8)
        b.store(offset, self._slot(b, block, key, 1), 8)

    def get(self, b: IRBuilder, block, key, bases: list) -> tuple:
        """(value, which, offset) of carried value ``key`` (which and offset None unless it
        is a pointer, rebuilt from ``bases``)."""
        v = key[1]
        if not v.type.is_pointer:
            return b.load(v.type, self._slot(b, block, key), name=v.name), None, None
        which = b.load(T.i64, self._slot(b, block, key), 8)
        offset = b.load(T.i64, self._slot(b, block, key, 1), 8)
        base = bases[-1]
        for k in range(len(bases) - 2, -1, -1):
            base = b.select(b.icmp("eq", which, _i64(k)), bases[k], base)
        return b.gep(T.i8, base, [offset], name=v.name), which, offset
