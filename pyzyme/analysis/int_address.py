"""Addresses computed as integers: ``inttoptr`` of arithmetic on one ``ptrtoint``.

C and C++ code rounds addresses up through integers: Eigen's aligned allocation takes
``malloc(n + 64)`` and returns ``inttoptr((ptrtoint(p) & -64) + 64)``, with ``p`` stored just
below it for the matching free. Such a pointer points into ``p``'s memory, so it carries a
derivative when ``p`` does, and its shadow is the same arithmetic applied to ``p``'s shadow
(as Enzyme, whose type analysis sees a pointer in the integer, computes it). The shadow is
then rounded as the primal is: aligned as the primal, and inside the shadow allocation, which
has the primal's size.

Only chains of ``add``, ``sub`` (of an offset), ``and`` and ``or`` whose other operands are
computed from no address are followed; anything else (two addresses combined, an address
multiplied) has no source here, and a pointer made from it has no shadow.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''define ptr @align(ptr %p) {
...   %i = ptrtoint ptr %p to i64
...   %m = and i64 %i, -64
...   %a = add i64 %m, 64
...   %q = inttoptr i64 %a to ptr
...   ret ptr %q
... }''')
>>> q = list(m.get_function("align").instructions())[3]
>>> address_source(q.operands[0]).name
'p'
"""

from __future__ import annotations

from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir.opcodes import COMMUTATIVE, WHOLE_MERGES
from pyzyme.ir.values import Value

__all__ = ["ADDRESS_ARITHMETIC", "address_source", "replay_address"]

#: Integer operations that move an address: the address is their first operand (or either,
#: where they commute) and the other operand an offset or mask computed from no address.
ADDRESS_ARITHMETIC = frozenset({"add", "sub", "and", "or"})
_COMMUTES = ADDRESS_ARITHMETIC & COMMUTATIVE
_DEPTH = 16


def address_source(value: Value) -> Value | None:
    """The pointer integer ``value`` was computed from (see the module docstring), or None."""
    step = _step(value, _DEPTH)
    return step[0] if step is not None else None


def _step(value: Value, depth: int):
    """``(pointer, operand index on the chain or None for the ptrtoint)`` for ``value``."""
    if depth <= 0 or not isinstance(value, I.Instruction):
        return None
    op = value.opcode
    if op == "ptrtoint":
        return value.operands[0], None
    if op not in ADDRESS_ARITHMETIC:
        return None
    for i in ((0, 1) if op in _COMMUTES else (0,)):
        other = value.operands[1 - i]
        found = _step(value.operands[i], depth - 1)
        if found is not None and not _mentions_address(other, depth - 1):
            return found[0], i
    return None


def _mentions_address(value: Value, depth: int) -> bool:
    """Whether integer ``value`` may be computed from an address (conservatively: past the
    depth searched, or through anything but integer arithmetic on constants and arguments)."""
    if not isinstance(value, I.Instruction):
        return False
    if depth <= 0 or value.opcode in ("ptrtoint", "ptrtoaddr", "load") \
            or value.opcode in WHOLE_MERGES \
            or isinstance(value, I.CallBase):
        return True
    return any(_mentions_address(op, depth - 1) for op in value.operands)


def replay_address(b: IRBuilder, value: Value, source: Value, value_of) -> Value:
    """At ``b``, integer ``value`` computed again with its source pointer replaced by
    ``source`` (a pointer: a shadow), the other operands mapped by ``value_of``."""
    step = _step(value, _DEPTH)
    if step is None:
        raise ValueError(f"not an address computed from one pointer: {value}")
    _, at = step
    if at is None:
        return b.ptrtoint(source, value.type)
    operands = [value_of(op) for op in value.operands]
    operands[at] = replay_address(b, value.operands[at], source, value_of)
    return b.insert(value.copy_with(operands))
