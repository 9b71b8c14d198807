"""Instructions that touch memory: stack allocation, loads, stores, address computation,
atomics, fences and ``va_arg``."""

from __future__ import annotations

from collections.abc import Sequence

from pyzyme.ir import types as T
from pyzyme.ir.instruction import Instruction, Ref, _require, _tref, ORDERINGS, RMW_OPS
from pyzyme.ir.values import Value


# --------------------------------------------------------------------------------- memory

def _align_text(align: int | None) -> str:
    return f", align {align}" if align is not None else ""


class Alloca(Instruction):
    """``alloca [inalloca] <type>[, <ty> <count>][, align N][, addrspace(N)]``."""

    __slots__ = ("allocated_type", "align")

    def __init__(self, allocated_type: T.Type, count: Value | None = None,
                 align: int | None = None, addrspace: int = 0, flags: Sequence[str] = (),
                 name: str = "") -> None:
        _require(allocated_type.is_sized, "alloca", f"cannot allocate unsized {allocated_type}")
        if count is not None:
            _require(count.type.is_int, "alloca", f"count must be an integer, got {count.type}")
        ty = T.PointerType(addrspace) if addrspace else T.ptr
        super().__init__("alloca", ty, (count,) if count is not None else (), flags, name)
        self.allocated_type = allocated_type
        self.align = align

    @property
    def count(self) -> Value | None:
        return self.operands[0] if self.operands else None

    def body(self, ref: Ref) -> str:
        text = f"{self._head()} {self.allocated_type}"
        if self.operands:
            text += f", {_tref(ref, self.operands[0])}"
        text += _align_text(self.align)
        if self.type.addrspace:
            text += f", addrspace({self.type.addrspace})"
        return text


def _atomic_text(syncscope: str | None, ordering: str | None) -> str:
    text = f' syncscope("{syncscope}")' if syncscope is not None else ""
    return text + (f" {ordering}" if ordering else "")


class Load(Instruction):
    """``load [atomic] [volatile] <ty>, ptr <p> [syncscope] [ordering], align N``."""

    __slots__ = ("align", "volatile", "ordering", "syncscope")

    def __init__(self, type: T.Type, pointer: Value, align: int | None = None,  # noqa: A002
                 volatile: bool = False, ordering: str | None = None,
                 syncscope: str | None = None, name: str = "") -> None:
        _require(pointer.type.is_pointer and not pointer.type.is_vector, "load",
                 f"needs a pointer operand, got {pointer.type}")
        _require(type.is_sized and type.is_first_class, "load", f"cannot load {type}")
        _require(ordering is None or ordering in ORDERINGS, "load", f"bad ordering {ordering}")
        super().__init__("load", type, (pointer,), (), name)
        self.align = align
        self.volatile = volatile
        self.ordering = ordering
        self.syncscope = syncscope

    @property
    def pointer(self) -> Value:
        return self.operands[0]

    def body(self, ref: Ref) -> str:
        head = "load" + (" atomic" if self.ordering else "") + (" volatile" if self.volatile
                                                                 else "")
        return (f"{head} {self.type}, {_tref(ref, self.operands[0])}"
                f"{_atomic_text(self.syncscope, self.ordering)}{_align_text(self.align)}")


class Store(Instruction):
    """``store [atomic] [volatile] <ty> <v>, ptr <p> [syncscope] [ordering], align N``."""

    __slots__ = ("align", "volatile", "ordering", "syncscope")

    def __init__(self, value: Value, pointer: Value, align: int | None = None,
                 volatile: bool = False, ordering: str | None = None,
                 syncscope: str | None = None) -> None:
        _require(pointer.type.is_pointer and not pointer.type.is_vector, "store",
                 f"needs a pointer operand, got {pointer.type}")
        _require(value.type.is_sized and value.type.is_first_class, "store",
                 f"cannot store {value.type}")
        _require(ordering is None or ordering in ORDERINGS, "store", f"bad ordering {ordering}")
        super().__init__("store", T.void, (value, pointer))
        self.align = align
        self.volatile = volatile
        self.ordering = ordering
        self.syncscope = syncscope

    @property
    def value(self) -> Value:
        return self.operands[0]

    @property
    def pointer(self) -> Value:
        return self.operands[1]

    def body(self, ref: Ref) -> str:
        head = "store" + (" atomic" if self.ordering else "") + (" volatile" if self.volatile
                                                                  else "")
        v, p = self.operands
        return (f"{head} {_tref(ref, v)}, {_tref(ref, p)}"
                f"{_atomic_text(self.syncscope, self.ordering)}{_align_text(self.align)}")


class GetElementPtr(Instruction):
    """``getelementptr [inbounds] [nusw] [nuw] <source type>, ptr <p>, <indices>``."""

    __slots__ = ("source_type",)

    def __init__(self, source_type: T.Type, pointer: Value, indices: Sequence[Value],
                 flags: Sequence[str] = (), name: str = "") -> None:
        _require(pointer.type.scalar.is_pointer, "getelementptr",
                 f"needs a pointer base, got {pointer.type}")
        result = pointer.type
        for idx in indices:
            _require(idx.type.scalar.is_int, "getelementptr",
                     f"indices must be integers, got {idx.type}")
            if idx.type.is_vector and not result.is_vector:
                result = T.VectorType(idx.type.count, result, idx.type.scalable)
        super().__init__("getelementptr", result, (pointer, *indices), flags, name)
        self.source_type = source_type

    @property
    def pointer(self) -> Value:
        return self.operands[0]

    @property
    def indices(self) -> list[Value]:
        return self.operands[1:]

    def body(self, ref: Ref) -> str:
        ops = ", ".join(_tref(ref, v) for v in self.operands)
        return f"{self._head()} {self.source_type}, {ops}"


class AtomicRMW(Instruction):
    """``atomicrmw [volatile] <op> ptr <p>, <ty> <v> [syncscope] <ordering>[, align N]``."""

    __slots__ = ("operation", "volatile", "ordering", "syncscope", "align")

    def __init__(self, operation: str, pointer: Value, value: Value, ordering: str,
                 syncscope: str | None = None, volatile: bool = False,
                 align: int | None = None, name: str = "") -> None:
        _require(operation in RMW_OPS, "atomicrmw", f"unknown operation {operation!r}")
        _require(pointer.type.is_pointer, "atomicrmw", f"needs a pointer, got {pointer.type}")
        _require(ordering in ORDERINGS, "atomicrmw", f"bad ordering {ordering!r}")
        super().__init__("atomicrmw", value.type, (pointer, value), (), name)
        self.operation = operation
        self.volatile = volatile
        self.ordering = ordering
        self.syncscope = syncscope
        self.align = align

    def body(self, ref: Ref) -> str:
        head = "atomicrmw" + (" volatile" if self.volatile else "")
        p, v = self.operands
        return (f"{head} {self.operation} {_tref(ref, p)}, {_tref(ref, v)}"
                f"{_atomic_text(self.syncscope, self.ordering)}{_align_text(self.align)}")


class CmpXchg(Instruction):
    """``cmpxchg [weak] [volatile] ptr <p>, <ty> <cmp>, <ty> <new> [syncscope] <s> <f>``."""

    __slots__ = ("weak", "volatile", "success", "failure", "syncscope", "align")

    def __init__(self, pointer: Value, cmp: Value, new: Value, success: str, failure: str,
                 syncscope: str | None = None, weak: bool = False, volatile: bool = False,
                 align: int | None = None, name: str = "") -> None:
        _require(pointer.type.is_pointer, "cmpxchg", f"needs a pointer, got {pointer.type}")
        _require(cmp.type == new.type, "cmpxchg", f"types differ: {cmp.type}, {new.type}")
        _require(success in ORDERINGS and failure in ORDERINGS, "cmpxchg", "bad ordering")
        super().__init__("cmpxchg", T.StructType((cmp.type, T.i1)), (pointer, cmp, new), (),
                         name)
        self.weak = weak
        self.volatile = volatile
        self.success = success
        self.failure = failure
        self.syncscope = syncscope
        self.align = align

    def body(self, ref: Ref) -> str:
        head = "cmpxchg" + (" weak" if self.weak else "") + (" volatile" if self.volatile
                                                              else "")
        ops = ", ".join(_tref(ref, v) for v in self.operands)
        order = _atomic_text(self.syncscope, f"{self.success} {self.failure}")
        return f"{head} {ops}{order}{_align_text(self.align)}"


class Fence(Instruction):
    __slots__ = ("ordering", "syncscope")

    def __init__(self, ordering: str, syncscope: str | None = None) -> None:
        _require(ordering in ORDERINGS, "fence", f"bad ordering {ordering!r}")
        super().__init__("fence", T.void, ())
        self.ordering = ordering
        self.syncscope = syncscope

    def body(self, ref: Ref) -> str:
        return "fence" + _atomic_text(self.syncscope, self.ordering)


class VAArg(Instruction):
    __slots__ = ()

    def __init__(self, valist: Value, type: T.Type, name: str = "") -> None:  # noqa: A002
        _require(valist.type.is_pointer, "va_arg", f"needs a pointer, got {valist.type}")
        super().__init__("va_arg", type, (valist,), (), name)

    def body(self, ref: Ref) -> str:
        return f"va_arg {_tref(ref, self.operands[0])}, {self.type}"
