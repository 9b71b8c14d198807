"""Copies of a region of a function's blocks: the second version of some code, chosen by a
branch before it.

A region is the set of blocks reached from a start block through the blocks a predicate
admits; its copy goes into the same function, each copied block branching to the copies of
the region's blocks and to the same blocks as the original outside it. Values can be fixed in
the copy: a branch on an ``i1`` known there goes straight to the successor it selects (the
blocks only the other one reaches are not copied), and any value from outside the region (a
parameter, an instruction before it) can be replaced by another (a constant).

Examples
--------
>>> from pyzyme.ir import parse_module, const_int, i64
>>> m = parse_module('''
... define i64 @f(i64 %n, i1 %c) {
... entry:
...   br label %body
... body:
...   %x = mul i64 %n, 2
...   br i1 %c, label %yes, label %no
... yes:
...   ret i64 %x
... no:
...   ret i64 0
... }''')
>>> fn = m.get_function("f")
>>> first, mapping = copy_region(fn, fn.blocks[1], ".copy", {fn.args[1]: True},
...                              lambda blk: True, {fn.args[0]: const_int(i64, 4)})
>>> print(fn)   # doctest: +ELLIPSIS
define i64 @f(i64 %n, i1 %c) {
...
body.copy:
  %x.1 = mul i64 4, 2
  br label %yes.copy
<BLANKLINE>
yes.copy:
  ret i64 %x.1
}
"""

from __future__ import annotations

from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.builder import IRBuilder, resolve_later_operands
from pyzyme.ir.values import const_int

__all__ = ["copy_region"]


def copy_region(fn, start, suffix: str, taken: dict, inside, values: dict | None = None) \
        -> tuple | None:
    """Copy the blocks of ``fn`` reached from ``start`` through blocks ``inside(block)`` says
    belong to the region, their names ending in ``suffix``; a branch leaving the region goes
    to the same block from the copy. ``taken`` maps ``i1`` values to what they are in the
    copy: a branch on one goes to the successor it selects (blocks only the other reaches are
    not copied), and a parameter among them is that constant there. ``values`` maps values
    defined outside the region (parameters, instructions before it) to what replaces them in
    the copy. The copy's first block and the map from each block and instruction to its copy;
    None (nothing changed) where a phi of the copied blocks has an entry from a block not
    copied."""
    def folded(blk):
        t = blk.terminator
        if isinstance(t, I.Branch) and t.is_conditional and t.operands[0] in taken:
            return t.operands[1] if taken[t.operands[0]] else t.operands[2]
        return None

    reached, todo = {start}, [start]
    while todo:
        blk = todo.pop()
        only = folded(blk)
        for nxt in blk.successors if only is None else [only]:
            if nxt not in reached and inside(nxt):
                reached.add(nxt)
                todo.append(nxt)
    blocks = [blk for blk in fn.blocks if blk in reached]
    if any(came not in reached for blk in blocks for phi in blk.phis for came in phi.blocks):
        return None
    mapping: dict = {v: const_int(T.i1, int(bool(k))) for v, k in taken.items()
                     if not isinstance(v, I.Instruction)}
    mapping.update(values or {})
    for blk in blocks:
        mapping[blk] = fn.append_block(f"{blk.name}{suffix}")
    copies = []
    for blk in blocks:
        b = IRBuilder(mapping[blk])
        only = folded(blk)
        for inst in blk.instructions:
            if inst is blk.terminator and only is not None:
                copy = b.br(mapping.get(only, only))
            else:
                copy = b.insert_copy(inst, mapping)
            mapping[inst] = copy
            copies.append(copy)
    resolve_later_operands(copies, mapping)
    return mapping[start], mapping
