"""Increments of memory (``a[k] += w``) whose adjoint only reads the cell's.

``x = load p; y = fadd x, w; store y, p`` leaves ``p``'s adjoint as it found it (the store
takes it, the load gives it back) and adds it to ``w``'s. Written as the three instructions'
adjoints, the reverse sweep zeroes the cell's adjoint and adds it back: in a ``prange`` body
that increments a shared array (a histogram, ``hist[bin[i]] += w[i]``), another task reading
the cell between the two saw zero, and its ``w``'s adjoint lost what it should have had
(npbench's ``azimint_hist`` at two threads: a wrong gradient in about half of the calls,
where the primal's own race showed in 3 of 2,000). :func:`increments` finds such triples; the
reverse sweep gives each one adjoint, ``w_bar += p_bar`` (``-=`` for ``x - w``), and none to
its load and add.

The load and the store must go through the same pointer value, in one block, with nothing
between them that may write memory; the load and the add must have no other use.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme.analysis.overwrite import pure_call, written_pointers
from pyzyme.ir import instructions as I
from pyzyme.ir.values import Value

__all__ = ["Increment", "increments"]


@dataclass(frozen=True)
class Increment:
    """``store (load ptr) +/- addend, ptr``: ``sign`` is 1.0 for ``+`` and -1.0 for ``-``."""

    load: I.Load
    add: I.Instruction
    addend: Value
    sign: float


def increments(fn) -> dict:
    """The stores of ``fn`` that increment the cell they store to (see the module
    docstring), each with its :class:`Increment`."""
    found = {}
    for block in fn.blocks:
        place = {inst: k for k, inst in enumerate(block.instructions)}
        for inst in block.instructions:
            if isinstance(inst, I.Store):
                inc = _increment(block.instructions, place, inst)
                if inc is not None:
                    found[inst] = inc
    return found


def _increment(insts: list, place: dict, store: I.Store) -> Increment | None:
    value, pointer = store.operands
    if store.volatile or store.ordering or not isinstance(value, I.BinaryOp) or \
            value.opcode not in ("fadd", "fsub") or len(value.users) != 1:
        return None
    left, right = value.operands
    if isinstance(left, I.Load) and left.pointer is pointer:
        load, addend, sign = left, right, 1.0 if value.opcode == "fadd" else -1.0
    elif value.opcode == "fadd" and isinstance(right, I.Load) and right.pointer is pointer:
        load, addend, sign = right, left, 1.0
    else:
        return None
    if load.volatile or load.ordering or load.type != value.type or len(load.users) != 1 or \
            load.parent is not store.parent or value.parent is not store.parent:
        return None
    start, k = place[load], place[store]
    if start > k:
        return None
    for between in insts[start + 1:k]:
        if isinstance(between, I.CallBase) and not pure_call(between):
            return None
        if written_pointers(between):
            return None
    return Increment(load, value, addend, sign)
