"""What each LLVM opcode is, as data: the one table analyses, transforms and generators ask.

One row per opcode (:data:`OPCODES`); every fact a pass needs about an instruction *kind*
(rather than about one instruction's operands) is a column here, and the sets passes test
membership in (:data:`PURE`, :data:`STRUCTURAL`, ...) are computed from the columns, never
written out again elsewhere. The columns:

- ``group``: the family (``int``, ``float``, ``cast``, ``compare``, ``value``, ``aggregate``,
  ``vector``, ``memory``, ``call``, ``control``, ``eh``).
- ``memory``: what it does to memory: ``none``, ``read``, ``write``, ``readwrite``, or
  ``callee`` (a call does what its callee does).
- ``pure``: the result is a function of the operands' values alone: no memory, no side effect,
  no control transfer. A pure instruction can be computed again wherever its operands are
  available (the reverse sweep recomputes rather than caches; loop rewrites reorder it). A phi
  is not: its value depends on the edge taken.
- ``traps``: undefined behaviour for some operand values (an integer division by zero), so it
  may run only where the primal ran it with the same operands.
- ``structural``: moves a value or an address, computing no new number (a select, a phi, a
  GEP, a bitcast, an aggregate or vector shuffle): the shadow of a pointer it makes is the same
  instruction applied to the shadows of its operands.
- ``merge``: its result may come from one of several value operands (a phi, a select, an
  insertion into an aggregate or vector): where a pointer without a shadow can meet one with a
  shadow.
- ``integer_result``: the result is an integer (or vector of them) whatever its operands:
  integer arithmetic, comparisons, casts to integers.
- ``from_integer``: the result is made from an integer operand alone (``sitofp``,
  ``inttoptr``): nothing but an integer flows into it.
- ``terminator``: ends a basic block; ``exits``: leaves the function (``ret``, ``resume``,
  ``unreachable``).
- ``commutative``: swapping its two operands gives the same result (``add``, ``fmul``, ...).
- ``derives_address``: a pointer result points into the object operand 0 points into (a GEP,
  a pointer cast): analyses that follow an object's addresses follow it.
- ``same_bits``: the result holds operand 0's bits under another type or kind (``bitcast``,
  ``addrspacecast``, ``freeze``, ``ptrtoint``, ``inttoptr``): an address stays an address and
  float bits stay float bits. ``ptrtoaddr`` is not marked (type analysis has not been taught
  it).
- ``read_modify_write``: reads and writes the memory its pointer operand 0 addresses in one
  step, the values written being the operands after it (``atomicrmw``, ``cmpxchg``).

Derived: :data:`SPECULATABLE` is pure and not trapping (safe where the primal did not run it);
:data:`ADDRESS_CASTS` are the casts that derive an address; :data:`WHOLE_MERGES` the merges
whose result is one operand passed through whole (``phi``, ``select``), not an aggregate or
vector built from pieces; :data:`READ_WRITE` the rows whose ``memory`` is ``readwrite``.

Examples
--------
>>> print(describe("fadd", "udiv", "icmp", "sitofp", "phi", "select", "getelementptr",
...                "load", "ret"))
opcode         group    memory  facts
fadd           float    none    pure commutative
udiv           int      none    pure traps integer_result
icmp           compare  none    pure integer_result
sitofp         cast     none    pure from_integer
phi            value    none    structural merge
select         value    none    pure structural merge
getelementptr  memory   none    pure structural derives_address
load           memory   read
ret            control  none    terminator exits
>>> sorted(MERGES)
['insertelement', 'insertvalue', 'phi', 'select', 'shufflevector']
>>> "udiv" in PURE, "udiv" in SPECULATABLE
(True, False)
>>> sorted(ADDRESS_CASTS), sorted(WHOLE_MERGES), sorted(READ_MODIFY_WRITE)
(['addrspacecast', 'bitcast'], ['phi', 'select'], ['atomicrmw', 'cmpxchg'])

``print(describe())`` prints the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

__all__ = ["Opcode", "OPCODES", "PURE", "SPECULATABLE", "STRUCTURAL", "MERGES",
           "INTEGER_RESULT", "FROM_INTEGER", "TERMINATORS", "EXITS", "COMMUTATIVE",
           "ADDRESS_DERIVING", "ADDRESS_CASTS", "SAME_BITS", "READ_MODIFY_WRITE", "READ_WRITE",
           "WHOLE_MERGES", "INT_BINOPS", "FLOAT_BINOPS", "CASTS", "GROUPS", "MEMORY_EFFECTS",
           "describe"]

GROUPS = ("int", "float", "cast", "compare", "value", "aggregate", "vector", "memory", "call",
          "control", "eh")
MEMORY_EFFECTS = ("none", "read", "write", "readwrite", "callee")


@dataclass(frozen=True)
class Opcode:
    """The facts of one opcode (see the module docstring for what each column means)."""

    name: str
    group: str
    memory: str = "none"
    pure: bool = False
    traps: bool = False
    structural: bool = False
    merge: bool = False
    integer_result: bool = False
    from_integer: bool = False
    terminator: bool = False
    exits: bool = False
    commutative: bool = False
    derives_address: bool = False
    same_bits: bool = False
    read_modify_write: bool = False

    def __post_init__(self) -> None:
        if self.group not in GROUPS or self.memory not in MEMORY_EFFECTS:
            raise ValueError(f"opcode {self.name}: group {self.group!r} or memory "
                             f"{self.memory!r} is not one of {GROUPS} / {MEMORY_EFFECTS}")
        if self.pure and self.memory != "none":
            raise ValueError(f"opcode {self.name}: pure but touches memory")
        if self.exits and not self.terminator:
            raise ValueError(f"opcode {self.name}: leaves the function but ends no block")
        if self.read_modify_write and self.memory != "readwrite":
            raise ValueError(f"opcode {self.name}: read-modify-write but memory {self.memory!r}")

    @property
    def speculatable(self) -> bool:
        """Pure and never undefined: safe to compute where the primal did not."""
        return self.pure and not self.traps

    @property
    def facts(self) -> tuple[str, ...]:
        """The names of the boolean columns that hold, in column order."""
        return tuple(f.name for f in fields(self) if f.type in ("bool", bool)
                     and getattr(self, f.name))


def _rows(group: str, names: str, **facts) -> list[Opcode]:
    return [Opcode(name, group, **facts) for name in names.split()]


# Columns that hold for only some names of a row: (column, names).
_SOME = (
    ("commutative", "add mul and or xor fadd fmul"),
    ("derives_address", "getelementptr bitcast addrspacecast"),
    ("same_bits", "bitcast addrspacecast freeze ptrtoint inttoptr"),
    ("read_modify_write", "atomicrmw cmpxchg"),
)


_PURE_INT = dict(pure=True, integer_result=True)

_TABLE = (
    _rows("int", "add sub mul shl lshr ashr and or xor", **_PURE_INT)
    # A zero divisor (or INT_MIN / -1) is undefined behaviour: a trap on x86.
    + _rows("int", "udiv sdiv urem srem", traps=True, **_PURE_INT)
    + _rows("float", "fadd fsub fmul fdiv frem fneg", pure=True)
    + _rows("cast", "trunc zext sext fptoui fptosi ptrtoint ptrtoaddr", **_PURE_INT)
    + _rows("cast", "uitofp sitofp inttoptr", pure=True, from_integer=True)
    + _rows("cast", "fptrunc fpext", pure=True)
    + _rows("cast", "bitcast addrspacecast", pure=True, structural=True)
    + _rows("compare", "icmp fcmp", **_PURE_INT)
    + _rows("value", "select", pure=True, structural=True, merge=True)
    + _rows("value", "phi", structural=True, merge=True)
    + _rows("value", "freeze", pure=True, structural=True)
    + _rows("aggregate", "extractvalue", pure=True, structural=True)
    + _rows("aggregate", "insertvalue", pure=True, structural=True, merge=True)
    + _rows("vector", "extractelement", pure=True, structural=True)
    + _rows("vector", "insertelement shufflevector", pure=True, structural=True, merge=True)
    + _rows("memory", "getelementptr", pure=True, structural=True)
    + _rows("memory", "alloca")
    + _rows("memory", "load", memory="read")
    + _rows("memory", "store", memory="write")
    + _rows("memory", "atomicrmw cmpxchg fence va_arg", memory="readwrite")
    + _rows("call", "call", memory="callee")
    + _rows("call", "invoke callbr", memory="callee", terminator=True)
    + _rows("control", "br switch indirectbr", terminator=True)
    + _rows("control", "ret unreachable resume", terminator=True, exits=True)
    + _rows("eh", "landingpad catchpad cleanuppad")
    + _rows("eh", "catchswitch catchret cleanupret", terminator=True)
)

#: Every opcode pyzyme's IR knows, by name.
OPCODES: dict[str, Opcode] = {o.name: o for o in _TABLE}
for _column, _names in _SOME:
    for _name in _names.split():
        OPCODES[_name] = replace(OPCODES[_name], **{_column: True})
del _column, _names, _name


def _where(test) -> frozenset[str]:
    return frozenset(name for name, o in OPCODES.items() if test(o))


PURE = _where(lambda o: o.pure)
SPECULATABLE = _where(lambda o: o.speculatable)
STRUCTURAL = _where(lambda o: o.structural)
MERGES = _where(lambda o: o.merge)
INTEGER_RESULT = _where(lambda o: o.integer_result)
FROM_INTEGER = _where(lambda o: o.from_integer)
TERMINATORS = _where(lambda o: o.terminator)
EXITS = _where(lambda o: o.exits)
COMMUTATIVE = _where(lambda o: o.commutative)
ADDRESS_DERIVING = _where(lambda o: o.derives_address)
ADDRESS_CASTS = _where(lambda o: o.derives_address and o.group == "cast")
SAME_BITS = _where(lambda o: o.same_bits)
READ_MODIFY_WRITE = _where(lambda o: o.read_modify_write)
READ_WRITE = _where(lambda o: o.memory == "readwrite")
WHOLE_MERGES = _where(lambda o: o.merge and o.group == "value")
INT_BINOPS = _where(lambda o: o.group == "int")
FLOAT_BINOPS = _where(lambda o: o.group == "float" and o.name != "fneg")
CASTS = _where(lambda o: o.group == "cast")


def describe(*names: str) -> str:
    """The rows of ``names`` (all of them by default) as a text table."""
    rows = [OPCODES[n] for n in names] if names else list(OPCODES.values())
    width = max(len(o.name) for o in rows) + 2
    lines = [f"{'opcode':<{width}}{'group':<9}{'memory':<8}facts"]
    lines += [f"{o.name:<{width}}{o.group:<9}{o.memory:<8}{' '.join(o.facts)}".rstrip()
              for o in rows]
    return "\n".join(lines)
