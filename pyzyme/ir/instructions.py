"""Instructions: one class per syntactic family of LLVM instructions.

Every instruction keeps its value operands in ``operands`` (so use lists, replacement and
analyses can treat all instructions alike) and the non-value parts of its syntax (predicates,
flags, alignment, orderings, attribute text) in named fields. Constructors check operand types,
so neither the builder nor the parser can make an ``fadd i32``.

``to_text(ref)`` prints the instruction; ``ref`` turns an operand into its spelling (the
printer passes one that knows the slot numbers of unnamed values).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

from pyzyme.errors import IRTypeError
from pyzyme.ir import types as T
from pyzyme.ir.values import Constant, ConstantInt, NamedValue, Value

Ref = Callable[[Value], str]

FAST_MATH_FLAGS = ("fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc")
INT_BINOPS = frozenset({"add", "sub", "mul", "udiv", "sdiv", "urem", "srem",
                        "shl", "lshr", "ashr", "and", "or", "xor"})
FLOAT_BINOPS = frozenset({"fadd", "fsub", "fmul", "fdiv", "frem"})
CASTS = frozenset({"trunc", "zext", "sext", "fptrunc", "fpext", "fptoui", "fptosi", "uitofp",
                   "sitofp", "ptrtoint", "ptrtoaddr", "inttoptr", "bitcast", "addrspacecast"})
ICMP_PREDICATES = frozenset({"eq", "ne", "ugt", "uge", "ult", "ule", "sgt", "sge", "slt", "sle"})
FCMP_PREDICATES = frozenset({"false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq",
                             "ugt", "uge", "ult", "ule", "une", "uno", "true"})
ORDERINGS = frozenset({"unordered", "monotonic", "acquire", "release", "acq_rel", "seq_cst"})
RMW_OPS = frozenset({"xchg", "add", "sub", "and", "nand", "or", "xor", "max", "min", "umax",
                     "umin", "fadd", "fsub", "fmax", "fmin", "fmaximum", "fminimum",
                     "uinc_wrap", "udec_wrap", "usub_cond", "usub_sat"})


def _require(ok: bool, opcode: str, message: str) -> None:
    if not ok:
        raise IRTypeError(f"{opcode}: {message}")


class Instruction(NamedValue):
    """Base of all instructions.

    ``metadata`` holds attachments as ``(kind, text)`` pairs (``("tbaa", "!5")``) and
    ``debug_records`` the ``#dbg_...`` lines that precede the instruction: both verbatim.
    """

    __slots__ = ("opcode", "operands", "parent", "flags", "metadata", "debug_records")

    is_terminator = False

    def __init__(self, opcode: str, type: T.Type, operands: Sequence[Value],  # noqa: A002
                 flags: Sequence[str] = (), name: str = "") -> None:
        super().__init__(type, name)
        self.opcode = opcode
        self.operands = list(operands)
        self.flags = tuple(flags)
        self.parent = None
        self.metadata: list[tuple[str, str]] = []
        self.debug_records: list[str] = []

    # -- use lists ------------------------------------------------------------------------
    def _link_operands(self) -> None:
        for op in self.operands:
            if isinstance(op, NamedValue):
                op.users.append(self)

    def _unlink_operands(self) -> None:
        for op in self.operands:
            if isinstance(op, NamedValue):
                op.users.remove(self)

    def _append_operands(self, values: Sequence[Value]) -> None:
        """Add operands after construction (phi incomings, switch cases, clauses)."""
        self.operands.extend(values)
        if self.parent is not None:
            for v in values:
                if isinstance(v, NamedValue):
                    v.users.append(self)

    def set_operand(self, index: int, value: Value) -> None:
        old = self.operands[index]
        if isinstance(old, NamedValue):
            old.users.remove(self)
        self.operands[index] = value
        if isinstance(value, NamedValue):
            value.users.append(self)

    def replace_uses_of(self, old: Value, new: Value) -> None:
        for i, op in enumerate(self.operands):
            if op is old:
                self.set_operand(i, new)

    def copy_with(self, operands: Sequence[Value], *, keep_metadata: bool = False) -> Instruction:
        """A detached, unnamed copy of this instruction on ``operands`` (same opcode, flags and
        syntax fields; metadata and debug records only when ``keep_metadata``)."""
        clone = copy.copy(self)
        clone.operands = list(operands)
        clone.users = []
        clone.parent = None
        clone.name = ""
        clone.metadata = list(self.metadata) if keep_metadata else []
        clone.debug_records = list(self.debug_records) if keep_metadata else []
        if isinstance(self, Phi):
            clone.blocks = list(self.blocks)
        return clone

    def erase(self) -> None:
        """Remove this instruction from its block and drop its operands' uses of it."""
        if self.users:
            raise IRTypeError(f"cannot erase {self.opcode} {self.name!r}: it still has users")
        self._unlink_operands()
        if self.parent is not None:
            self.parent.instructions.remove(self)
            self.parent = None

    @property
    def function(self):
        return self.parent.parent if self.parent is not None else None

    @property
    def has_result(self) -> bool:
        return not isinstance(self.type, T.VoidType)

    # -- printing -------------------------------------------------------------------------
    def body(self, ref: Ref) -> str:
        """The instruction's text after ``%name = ``."""
        raise NotImplementedError

    def _head(self) -> str:
        return " ".join((self.opcode,) + self.flags)

    def _meta_text(self) -> str:
        return "".join(f", !{kind} {text}" for kind, text in self.metadata)

    def __str__(self) -> str:
        return self.body(_plain_ref) + self._meta_text()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"


def _plain_ref(value: Value) -> str:
    try:
        return value.ref
    except ValueError:
        return "%<unnamed>"


def _tref(ref: Ref, value: Value) -> str:
    return f"{value.type} {ref(value)}"


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


# ---------------------------------------------------------------------------------- calls

class CallBase(Instruction):
    """Shared parts of ``call`` and ``invoke``.

    ``operands`` is ``[callee, *args, *bundle operands]`` (invoke adds its two successors).
    Attribute texts (calling convention, return and function attributes, each argument's
    attributes) are carried verbatim. ``bundles`` is ``[(tag, operand count), ...]``.
    """

    __slots__ = ("function_type", "nargs", "arg_attrs", "cconv", "ret_attrs", "fn_attrs",
                 "bundles", "addrspace")

    def _setup(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
               arg_attrs: Sequence[str] | None) -> None:
        opcode = self.opcode
        _require(isinstance(function_type, T.FunctionType), opcode,
                 f"needs a function type, got {function_type}")
        _require(callee.type.is_pointer, opcode, f"callee must be a pointer, got {callee.type}")
        params = function_type.params
        n = len(args)
        _require(n == len(params) or (function_type.var_arg and n >= len(params)), opcode,
                 f"{_callee_text(callee)} takes {len(params)} arguments, given {n}")
        for i, (arg, param) in enumerate(zip(args, params)):
            _require(arg.type == param, opcode,
                     f"argument {i} of {_callee_text(callee)} is {arg.type}, expected {param}")
        self.function_type = function_type
        self.nargs = n
        self.arg_attrs = list(arg_attrs) if arg_attrs is not None else [""] * n
        self.cconv = ""
        self.ret_attrs = ""
        self.fn_attrs = ""
        self.bundles: list[tuple[str, int]] = []
        self.addrspace = ""

    @property
    def callee(self) -> Value:
        return self.operands[0]

    @property
    def args(self) -> list[Value]:
        return self.operands[1:1 + self.nargs]

    @property
    def called_function(self):
        """The :class:`~pyzyme.ir.module.Function` called directly, or None."""
        from pyzyme.ir.module import Function
        callee = self.operands[0]
        return callee if isinstance(callee, Function) else None

    def add_bundle(self, tag: str, values: Sequence[Value]) -> None:
        at = self._bundle_end()
        self.bundles.append((tag, len(values)))
        self.operands[at:at] = values
        if self.parent is not None:
            for v in values:
                if isinstance(v, NamedValue):
                    v.users.append(self)

    def _bundle_end(self) -> int:
        """Where the next bundle's operands go."""
        return 1 + self.nargs + sum(n for _, n in self.bundles)

    def _call_text(self, ref: Ref) -> str:
        parts = [self._head()]
        for piece in (self.cconv, self.ret_attrs, self.addrspace):
            if piece:
                parts.append(piece)
        fty = self.function_type
        parts.append(str(fty) if fty.var_arg else str(fty.ret))
        args = []
        for arg, attrs in zip(self.operands[1:1 + self.nargs], self.arg_attrs):
            if isinstance(arg.type, T.MetadataType):
                args.append(f"metadata {ref(arg)}")
            elif attrs:
                args.append(f"{arg.type} {attrs} {ref(arg)}")
            else:
                args.append(f"{arg.type} {ref(arg)}")
        text = f"{' '.join(parts)} {ref(self.operands[0])}({', '.join(args)})"
        if self.fn_attrs:
            text += " " + self.fn_attrs
        if self.bundles:
            pos = 1 + self.nargs
            groups = []
            for tag, n in self.bundles:
                vals = ", ".join(_tref(ref, v) for v in self.operands[pos:pos + n])
                groups.append(f'"{tag}"({vals})')
                pos += n
            text += " [ " + ", ".join(groups) + " ]"
        return text


def _callee_text(callee: Value) -> str:
    return _plain_ref(callee)


class Call(CallBase):
    """``[tail|musttail|notail] call [fmf] [cconv] [ret attrs] <ty> <callee>(<args>) ...``.

    ``tail`` is ``""``, ``"tail"``, ``"musttail"`` or ``"notail"``.
    """

    __slots__ = ("tail",)

    def __init__(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
                 flags: Sequence[str] = (), tail: str = "",
                 arg_attrs: Sequence[str] | None = None, name: str = "") -> None:
        super().__init__("call", function_type.ret if isinstance(function_type, T.FunctionType)
                         else T.void, (callee, *args), flags, name)
        self._setup(callee, args, function_type, arg_attrs)
        self.tail = tail

    def body(self, ref: Ref) -> str:
        text = self._call_text(ref)
        return f"{self.tail} {text}" if self.tail else text


class Invoke(CallBase):
    """``invoke ... to label %normal unwind label %unwind``."""

    __slots__ = ()
    is_terminator = True

    def __init__(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
                 normal, unwind, arg_attrs: Sequence[str] | None = None,
                 name: str = "") -> None:
        super().__init__("invoke", function_type.ret if isinstance(function_type, T.FunctionType)
                         else T.void, (callee, *args, normal, unwind), (), name)
        self._setup(callee, args, function_type, arg_attrs)

    @property
    def normal_dest(self):
        return self.operands[-2]

    @property
    def unwind_dest(self):
        return self.operands[-1]

    @property
    def successors(self) -> list:
        return self.operands[-2:]

    def _bundle_end(self) -> int:
        return len(self.operands) - 2

    def body(self, ref: Ref) -> str:
        return (f"{self._call_text(ref)} to label {ref(self.operands[-2])}"
                f" unwind label {ref(self.operands[-1])}")


class CallBr(CallBase):
    """``callbr ... to label %fallthrough [label %indirect, ...]`` (``asm goto``).

    ``operands`` ends with the fallthrough block and then the ``nindirect`` indirect blocks.
    """

    __slots__ = ("nindirect",)
    is_terminator = True

    def __init__(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
                 fallthrough, indirect: Sequence, arg_attrs: Sequence[str] | None = None,
                 name: str = "") -> None:
        super().__init__("callbr", function_type.ret if isinstance(function_type, T.FunctionType)
                         else T.void, (callee, *args, fallthrough, *indirect), (), name)
        self._setup(callee, args, function_type, arg_attrs)
        self.nindirect = len(indirect)

    @property
    def successors(self) -> list:
        return self.operands[-1 - self.nindirect:]

    def _bundle_end(self) -> int:
        return len(self.operands) - 1 - self.nindirect

    def body(self, ref: Ref) -> str:
        ops = self.operands
        indirect = ", ".join(f"label {ref(b)}" for b in ops[len(ops) - self.nindirect:])
        fallthrough = ops[len(ops) - 1 - self.nindirect]
        return f"{self._call_text(ref)} to label {ref(fallthrough)} [{indirect}]"


# ---------------------------------------------------------------------------- terminators

class Terminator(Instruction):
    __slots__ = ()
    is_terminator = True

    @property
    def successors(self) -> list:
        from pyzyme.ir.module import BasicBlock
        return [op for op in self.operands if isinstance(op, BasicBlock)]


class Branch(Terminator):
    """``br label %t`` or ``br i1 %c, label %t, label %f``."""

    __slots__ = ()

    def __init__(self, target, false_target=None, cond: Value | None = None) -> None:
        if cond is None:
            super().__init__("br", T.void, (target,))
        else:
            _require(cond.type == T.i1, "br", f"condition must be i1, got {cond.type}")
            super().__init__("br", T.void, (cond, target, false_target))

    @property
    def is_conditional(self) -> bool:
        return len(self.operands) == 3

    def body(self, ref: Ref) -> str:
        ops = self.operands
        if len(ops) == 1:
            return f"br label {ref(ops[0])}"
        return f"br i1 {ref(ops[0])}, label {ref(ops[1])}, label {ref(ops[2])}"


class Switch(Terminator):
    """``switch <ty> <v>, label %default [ <ty> <c>, label %dest ... ]``.

    ``operands`` is ``[value, default, c0, dest0, c1, dest1, ...]``.
    """

    __slots__ = ()

    def __init__(self, value: Value, default) -> None:
        _require(value.type.is_int, "switch", f"needs an integer, got {value.type}")
        super().__init__("switch", T.void, (value, default))

    def add_case(self, constant: ConstantInt, dest) -> None:
        _require(constant.type == self.operands[0].type, "switch",
                 f"case of type {constant.type} in a switch on {self.operands[0].type}")
        self._append_operands((constant, dest))

    @property
    def cases(self) -> list[tuple[ConstantInt, object]]:
        ops = self.operands
        return [(ops[i], ops[i + 1]) for i in range(2, len(ops), 2)]

    def body(self, ref: Ref) -> str:
        ops = self.operands
        lines = [f"switch {_tref(ref, ops[0])}, label {ref(ops[1])} ["]
        for i in range(2, len(ops), 2):
            lines.append(f"    {_tref(ref, ops[i])}, label {ref(ops[i + 1])}")
        lines.append("  ]")
        return "\n".join(lines)


class IndirectBr(Terminator):
    __slots__ = ()

    def __init__(self, address: Value, dests: Sequence) -> None:
        _require(address.type.is_pointer, "indirectbr", f"needs a pointer, got {address.type}")
        super().__init__("indirectbr", T.void, (address, *dests))

    def body(self, ref: Ref) -> str:
        dests = ", ".join(f"label {ref(d)}" for d in self.operands[1:])
        return f"indirectbr {_tref(ref, self.operands[0])}, [{dests}]"


class Ret(Terminator):
    __slots__ = ()

    def __init__(self, value: Value | None = None) -> None:
        super().__init__("ret", T.void, (value,) if value is not None else ())

    @property
    def value(self) -> Value | None:
        return self.operands[0] if self.operands else None

    def body(self, ref: Ref) -> str:
        return f"ret {_tref(ref, self.operands[0])}" if self.operands else "ret void"


class Unreachable(Terminator):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("unreachable", T.void, ())

    def body(self, ref: Ref) -> str:
        return "unreachable"


class Resume(Terminator):
    __slots__ = ()

    def __init__(self, value: Value) -> None:
        super().__init__("resume", T.void, (value,))

    def body(self, ref: Ref) -> str:
        return f"resume {_tref(ref, self.operands[0])}"


# --------------------------------------------------------------------- exceptions, atomics

class LandingPad(Instruction):
    """``landingpad <ty> [cleanup] (catch|filter <ty> <c>)*``: clause kinds in ``clauses``."""

    __slots__ = ("cleanup", "clauses")

    def __init__(self, type: T.Type, cleanup: bool = False, name: str = "") -> None:  # noqa: A002
        super().__init__("landingpad", type, (), (), name)
        self.cleanup = cleanup
        self.clauses: list[str] = []

    def add_clause(self, kind: str, value: Constant) -> None:
        _require(kind in ("catch", "filter"), "landingpad", f"unknown clause {kind!r}")
        self.clauses.append(kind)
        self._append_operands((value,))

    def body(self, ref: Ref) -> str:
        lines = [f"landingpad {self.type}"]
        if self.cleanup:
            lines.append("          cleanup")
        for kind, value in zip(self.clauses, self.operands):
            lines.append(f"          {kind} {_tref(ref, value)}")
        return "\n".join(lines)


def _unwind_text(ref: Ref, dest) -> str:
    return f"unwind label {ref(dest)}" if dest is not None else "unwind to caller"


class CatchSwitch(Terminator):
    """``catchswitch within <parent> [label %h, ...] unwind (label %d | to caller)``.

    ``operands`` is ``[parent pad (or none), *handlers, unwind dest?]``.
    """

    __slots__ = ("nhandlers",)

    def __init__(self, parent_pad: Value, handlers: Sequence, unwind=None, name: str = "") -> None:
        ops = (parent_pad, *handlers) + ((unwind,) if unwind is not None else ())
        super().__init__("catchswitch", T.token, ops, (), name)
        self.nhandlers = len(handlers)

    @property
    def unwind_dest(self):
        return self.operands[-1] if len(self.operands) > 1 + self.nhandlers else None

    def body(self, ref: Ref) -> str:
        handlers = ", ".join(f"label {ref(h)}" for h in self.operands[1:1 + self.nhandlers])
        return (f"catchswitch within {ref(self.operands[0])} [{handlers}] "
                f"{_unwind_text(ref, self.unwind_dest)}")


class FuncletPad(Instruction):
    """``catchpad``/``cleanuppad within <parent> [<args>]``; ``operands`` is ``[parent, *args]``."""

    __slots__ = ()

    def __init__(self, opcode: str, parent_pad: Value, args: Sequence[Value],
                 name: str = "") -> None:
        _require(opcode in ("catchpad", "cleanuppad"), opcode, "unknown funclet pad")
        super().__init__(opcode, T.token, (parent_pad, *args), (), name)

    def body(self, ref: Ref) -> str:
        args = ", ".join(_tref(ref, v) for v in self.operands[1:])
        return f"{self.opcode} within {ref(self.operands[0])} [{args}]"


class CatchRet(Terminator):
    __slots__ = ()

    def __init__(self, pad: Value, dest) -> None:
        super().__init__("catchret", T.void, (pad, dest))

    def body(self, ref: Ref) -> str:
        return f"catchret from {ref(self.operands[0])} to label {ref(self.operands[1])}"


class CleanupRet(Terminator):
    __slots__ = ()

    def __init__(self, pad: Value, unwind=None) -> None:
        super().__init__("cleanupret", T.void, (pad,) if unwind is None else (pad, unwind))

    def body(self, ref: Ref) -> str:
        unwind = self.operands[1] if len(self.operands) > 1 else None
        return f"cleanupret from {ref(self.operands[0])} {_unwind_text(ref, unwind)}"


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
