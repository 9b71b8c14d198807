"""Instructions that compute values: arithmetic, comparisons, casts, select, phi, freeze,
aggregates and vectors."""

from __future__ import annotations

from collections.abc import Sequence

from pyzyme.errors import IRTypeError
from pyzyme.ir import types as T
from pyzyme.ir.instruction import (
    CASTS,
    FCMP_PREDICATES,
    FLOAT_BINOPS,
    ICMP_PREDICATES,
    INT_BINOPS,
    Instruction,
    Ref,
    _require,
    _tref,
)
from pyzyme.ir.values import (
    Constant,
    ConstantAggregate,
    ConstantInt,
    ConstantSplat,
    NamedValue,
    Poison,
    Undef,
    Value,
    ZeroInitializer,
)


# ----------------------------------------------------------------------------- arithmetic

class BinaryOp(Instruction):
    """``add``/``fadd``/... with ``nuw``/``nsw``/``exact``/``disjoint`` or fast-math flags."""

    __slots__ = ()

    def __init__(self, opcode: str, lhs: Value, rhs: Value, flags: Sequence[str] = (),
                 name: str = "") -> None:
        ty = lhs.type
        _require(ty == rhs.type, opcode, f"operand types differ: {ty} and {rhs.type}")
        if opcode in FLOAT_BINOPS:
            _require(ty.is_float, opcode, f"needs floating operands, got {ty}")
        else:
            _require(opcode in INT_BINOPS, opcode, "unknown binary operator")
            _require(ty.is_int, opcode, f"needs integer operands, got {ty}")
        super().__init__(opcode, ty, (lhs, rhs), flags, name)

    def body(self, ref: Ref) -> str:
        a, b = self.operands
        return f"{self._head()} {a.type} {ref(a)}, {ref(b)}"


class UnaryOp(Instruction):
    """``fneg``."""

    __slots__ = ()

    def __init__(self, opcode: str, operand: Value, flags: Sequence[str] = (),
                 name: str = "") -> None:
        _require(opcode == "fneg", opcode, "unknown unary operator")
        _require(operand.type.is_float, opcode, f"needs a floating operand, got {operand.type}")
        super().__init__(opcode, operand.type, (operand,), flags, name)

    def body(self, ref: Ref) -> str:
        return f"{self._head()} {_tref(ref, self.operands[0])}"


def _bool_like(ty: T.Type) -> T.Type:
    return T.VectorType(ty.count, T.i1, ty.scalable) if ty.is_vector else T.i1


class Compare(Instruction):
    """``icmp``/``fcmp``; ``flags`` holds ``samesign`` or fast-math flags."""

    __slots__ = ("predicate",)

    def __init__(self, opcode: str, predicate: str, lhs: Value, rhs: Value,
                 flags: Sequence[str] = (), name: str = "") -> None:
        ty = lhs.type
        _require(ty == rhs.type, opcode, f"operand types differ: {ty} and {rhs.type}")
        if opcode == "icmp":
            _require(predicate in ICMP_PREDICATES, opcode, f"unknown predicate {predicate!r}")
            _require(ty.is_int or ty.is_pointer, opcode, f"needs integers or pointers, got {ty}")
        else:
            _require(opcode == "fcmp", opcode, "unknown comparison")
            _require(predicate in FCMP_PREDICATES, opcode, f"unknown predicate {predicate!r}")
            _require(ty.is_float, opcode, f"needs floating operands, got {ty}")
        super().__init__(opcode, _bool_like(ty), (lhs, rhs), flags, name)
        self.predicate = predicate

    def body(self, ref: Ref) -> str:
        a, b = self.operands
        return f"{self._head()} {self.predicate} {a.type} {ref(a)}, {ref(b)}"


def _bits(ty: T.Type) -> int | None:
    scalar = ty.scalar
    if scalar.is_int:
        return scalar.width
    if scalar.is_float:
        return scalar.bits
    return None


def _check_cast(opcode: str, src: T.Type, dst: T.Type) -> None:
    _require(opcode in CASTS, opcode, "unknown cast")
    if src.is_vector or dst.is_vector:
        _require(src.is_vector and dst.is_vector and src.count == dst.count
                 or opcode == "bitcast", opcode, f"vector shape mismatch: {src} to {dst}")
    s, d = src.scalar, dst.scalar
    if opcode in ("trunc", "zext", "sext"):
        ok = s.is_int and d.is_int and (s.width > d.width if opcode == "trunc"
                                        else s.width < d.width)
    elif opcode in ("fptrunc", "fpext"):
        ok = s.is_float and d.is_float and (s.bits > d.bits if opcode == "fptrunc"
                                            else s.bits < d.bits)
    elif opcode in ("fptoui", "fptosi"):
        ok = s.is_float and d.is_int
    elif opcode in ("uitofp", "sitofp"):
        ok = s.is_int and d.is_float
    elif opcode in ("ptrtoint", "ptrtoaddr"):
        ok = s.is_pointer and d.is_int
    elif opcode == "inttoptr":
        ok = s.is_int and d.is_pointer
    elif opcode == "addrspacecast":
        ok = s.is_pointer and d.is_pointer
    else:  # bitcast: same size, no pointer/non-pointer mixing
        ok = (s.is_pointer == d.is_pointer) and (
            s.is_pointer or _total_bits(src) == _total_bits(dst) is not None)
    _require(ok, opcode, f"cannot cast {src} to {dst}")


def _total_bits(ty: T.Type) -> int | None:
    bits = _bits(ty)
    if bits is None:
        return None
    return bits * ty.count if ty.is_vector else bits


class Cast(Instruction):
    """``zext``, ``sitofp``, ``bitcast``, ...; ``flags`` holds ``nneg``/``nuw``/``nsw``/FMF."""

    __slots__ = ()

    def __init__(self, opcode: str, operand: Value, to: T.Type, flags: Sequence[str] = (),
                 name: str = "") -> None:
        _check_cast(opcode, operand.type, to)
        super().__init__(opcode, to, (operand,), flags, name)

    def body(self, ref: Ref) -> str:
        return f"{self._head()} {_tref(ref, self.operands[0])} to {self.type}"


class Select(Instruction):
    __slots__ = ()

    def __init__(self, cond: Value, a: Value, b: Value, flags: Sequence[str] = (),
                 name: str = "") -> None:
        _require(a.type == b.type, "select", f"arm types differ: {a.type} and {b.type}")
        _require(cond.type == T.i1 or cond.type == _bool_like(a.type), "select",
                 f"condition must be i1 or a vector of i1, got {cond.type}")
        super().__init__("select", a.type, (cond, a, b), flags, name)

    def body(self, ref: Ref) -> str:
        return f"{self._head()} " + ", ".join(_tref(ref, v) for v in self.operands)


class Phi(Instruction):
    """``phi``: ``operands[i]`` flows in from ``blocks[i]``."""

    __slots__ = ("blocks",)

    def __init__(self, type: T.Type, flags: Sequence[str] = (), name: str = "") -> None:  # noqa: A002
        _require(type.is_first_class and not isinstance(type, T.LabelType), "phi",
                 f"cannot merge values of type {type}")
        super().__init__("phi", type, (), flags, name)
        self.blocks: list = []

    def add_incoming(self, value: Value, block) -> None:
        _require(value.type == self.type, "phi",
                 f"incoming {value.type} value in a phi of {self.type}")
        self.blocks.append(block)
        self._append_operands((value,))

    def remove_incoming(self, block) -> None:
        """Drop the entry from ``block`` (an edge that no longer exists)."""
        k = self.blocks.index(block)
        value = self.operands[k]
        if isinstance(value, NamedValue) and self.parent is not None:
            value.users.remove(self)
        del self.operands[k]
        del self.blocks[k]

    def copy_with(self, operands: Sequence[Value], *, keep_metadata: bool = False) -> Phi:
        clone = super().copy_with(operands, keep_metadata=keep_metadata)
        clone.blocks = list(self.blocks)
        return clone

    @property
    def incoming(self) -> list[tuple[Value, object]]:
        return list(zip(self.operands, self.blocks))

    def body(self, ref: Ref) -> str:
        pairs = ", ".join(f"[ {ref(v)}, {ref(b)} ]" for v, b in zip(self.operands, self.blocks))
        return f"{self._head()} {self.type} {pairs}"


class Freeze(Instruction):
    __slots__ = ()

    def __init__(self, operand: Value, name: str = "") -> None:
        super().__init__("freeze", operand.type, (operand,), (), name)

    def body(self, ref: Ref) -> str:
        return f"freeze {_tref(ref, self.operands[0])}"


# ----------------------------------------------------------------------- aggregates, vectors

def aggregate_member(ty: T.Type, indices: Sequence[int], opcode: str) -> T.Type:
    """The type reached from aggregate type ``ty`` by constant ``indices``."""
    for i in indices:
        if isinstance(ty, T.ArrayType):
            _require(0 <= i < ty.count, opcode, f"index {i} out of range for {ty}")
            ty = ty.element
        elif isinstance(ty, (T.StructType, T.IdentifiedStructType)) and ty.elements is not None:
            _require(0 <= i < len(ty.elements), opcode, f"index {i} out of range for {ty}")
            ty = ty.elements[i]
        else:
            raise IRTypeError(f"{opcode}: cannot index into {ty}")
    return ty


class ExtractValue(Instruction):
    __slots__ = ("indices",)

    def __init__(self, aggregate: Value, indices: Sequence[int], name: str = "") -> None:
        _require(bool(indices), "extractvalue", "needs at least one index")
        ty = aggregate_member(aggregate.type, indices, "extractvalue")
        super().__init__("extractvalue", ty, (aggregate,), (), name)
        self.indices = tuple(indices)

    def body(self, ref: Ref) -> str:
        idx = ", ".join(map(str, self.indices))
        return f"extractvalue {_tref(ref, self.operands[0])}, {idx}"


class InsertValue(Instruction):
    __slots__ = ("indices",)

    def __init__(self, aggregate: Value, element: Value, indices: Sequence[int],
                 name: str = "") -> None:
        _require(bool(indices), "insertvalue", "needs at least one index")
        member = aggregate_member(aggregate.type, indices, "insertvalue")
        _require(member == element.type, "insertvalue",
                 f"inserting {element.type} where {member} belongs")
        super().__init__("insertvalue", aggregate.type, (aggregate, element), (), name)
        self.indices = tuple(indices)

    def body(self, ref: Ref) -> str:
        a, e = self.operands
        idx = ", ".join(map(str, self.indices))
        return f"insertvalue {_tref(ref, a)}, {_tref(ref, e)}, {idx}"


class ExtractElement(Instruction):
    __slots__ = ()

    def __init__(self, vector: Value, index: Value, name: str = "") -> None:
        _require(vector.type.is_vector, "extractelement", f"needs a vector, got {vector.type}")
        _require(index.type.is_int and not index.type.is_vector, "extractelement",
                 f"index must be an integer, got {index.type}")
        super().__init__("extractelement", vector.type.element, (vector, index), (), name)

    def body(self, ref: Ref) -> str:
        return "extractelement " + ", ".join(_tref(ref, v) for v in self.operands)


class InsertElement(Instruction):
    __slots__ = ()

    def __init__(self, vector: Value, element: Value, index: Value, name: str = "") -> None:
        _require(vector.type.is_vector, "insertelement", f"needs a vector, got {vector.type}")
        _require(element.type == vector.type.element, "insertelement",
                 f"inserting {element.type} into {vector.type}")
        _require(index.type.is_int and not index.type.is_vector, "insertelement",
                 f"index must be an integer, got {index.type}")
        super().__init__("insertelement", vector.type, (vector, element, index), (), name)

    def body(self, ref: Ref) -> str:
        return "insertelement " + ", ".join(_tref(ref, v) for v in self.operands)


class ShuffleVector(Instruction):
    __slots__ = ()

    def __init__(self, a: Value, b: Value, mask: Constant, name: str = "") -> None:
        _require(a.type.is_vector and a.type == b.type, "shufflevector",
                 f"needs two vectors of one type, got {a.type} and {b.type}")
        _require(mask.type.is_vector and mask.type.element == T.i32, "shufflevector",
                 f"mask must be a vector of i32, got {mask.type}")
        ty = T.VectorType(mask.type.count, a.type.element, mask.type.scalable)
        super().__init__("shufflevector", ty, (a, b, mask), (), name)

    def body(self, ref: Ref) -> str:
        return "shufflevector " + ", ".join(_tref(ref, v) for v in self.operands)

    @property
    def mask_lanes(self) -> list[int | None]:
        """Where each lane of the result comes from: lane ``i`` of the concatenation of the two
        operands (``i < n`` the first, else lane ``i - n`` of the second), or None for a
        ``poison``/``undef`` mask element (the lane is poison).

        >>> from pyzyme.ir.values import Argument
        >>> a = Argument(None, T.VectorType(2, T.double), 0)
        >>> mask = ConstantAggregate(T.VectorType(3, T.i32),
        ...                          [ConstantInt(T.i32, 3), Poison(T.i32), ConstantInt(T.i32, 0)])
        >>> ShuffleVector(a, a, mask).mask_lanes
        [3, None, 0]
        """
        mask = self.operands[2]
        count = mask.type.count
        _require(not mask.type.scalable or isinstance(mask, (ZeroInitializer, Poison, Undef)),
                 "shufflevector", "the lanes of a scalable mask are not known")
        if isinstance(mask, ZeroInitializer):
            return [0] * count
        if isinstance(mask, (Poison, Undef)):
            return [None] * count
        if isinstance(mask, ConstantSplat):
            return [_lane(mask.element)] * count
        _require(isinstance(mask, ConstantAggregate), "shufflevector",
                 f"mask must be a constant vector, got {mask.ref}")
        return [_lane(e) for e in mask.elements]


def _lane(element: Constant) -> int | None:
    if isinstance(element, (Poison, Undef)):
        return None
    _require(isinstance(element, ConstantInt), "shufflevector",
             f"mask elements must be integers, got {element.ref}")
    return element.value


