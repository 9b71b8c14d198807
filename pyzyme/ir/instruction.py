"""The base of every instruction, and the vocabulary instruction classes share.

Every instruction keeps its value operands in ``operands`` (so use lists, replacement and
analyses can treat all instructions alike) and the non-value parts of its syntax (predicates,
flags, alignment, orderings, attribute text) in named fields. Constructors check operand types,
so neither the builder nor the parser can make an ``fadd i32``.

``body(ref)`` prints the instruction; ``ref`` turns an operand into its spelling (the
printer passes one that knows the slot numbers of unnamed values).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyzyme.errors import IRTypeError
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import CASTS, FLOAT_BINOPS, INT_BINOPS  # noqa: F401 - their owner
from pyzyme.ir.values import NamedValue, Value

Ref = Callable[[Value], str]

FAST_MATH_FLAGS = ("fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc")
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
        clone = _shallow_copy(self)
        clone.operands = list(operands)
        clone.users = []
        clone.parent = None
        clone.name = ""
        clone.metadata = list(self.metadata) if keep_metadata else []
        clone.debug_records = list(self.debug_records) if keep_metadata else []
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


_SLOTS: dict = {}   # instruction class -> the names of the slots it and its bases declare


def _slot_names(cls) -> tuple:
    names: list = []
    for k in cls.__mro__:
        declared = k.__dict__.get("__slots__", ())
        names += [declared] if isinstance(declared, str) else list(declared)
    return tuple(n for n in names if n not in ("__dict__", "__weakref__"))


def _shallow_copy(inst: Instruction) -> Instruction:
    """``copy.copy(inst)``, slot by slot: the copy module's generic protocol took a third of
    the time forward mode spends copying a large reverse module's instructions."""
    cls = type(inst)
    names = _SLOTS.get(cls)
    if names is None:
        names = _SLOTS[cls] = _slot_names(cls)
    clone = cls.__new__(cls)
    for name in names:
        try:
            setattr(clone, name, getattr(inst, name))
        except AttributeError:  # a slot never set
            pass
    if hasattr(inst, "__dict__"):
        clone.__dict__.update(inst.__dict__)
    return clone
