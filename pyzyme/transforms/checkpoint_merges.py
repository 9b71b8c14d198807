"""Memory a checkpointed loop reaches through a merge of objects made on some paths only.

A snapshot of a checkpointed loop (:mod:`pyzyme.transforms.checkpoint_loops`) names each
region by its object, and the call of the checkpoint driver, placed where the loop was
entered, passes the objects and their bytes. An object the loop reaches through a phi or a
select made before it may be made only on some of the paths there: Numba's ``u[:] = x``
copies ``x`` into a fresh buffer when ``u`` and ``x`` may overlap, and reads
``phi [x, buffer]``; the buffer is not defined where the driver is called. Such a merge is a
region of its own: it is defined there (the loop uses it), and its bytes are the bytes of
the object it holds, merged the same way (:func:`merged_size`).
"""

from __future__ import annotations

from pyzyme.analysis.overwrite import underlying_object, underlying_objects
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Null, Poison, Undef, const_int
from pyzyme.rules import default_rules, spec

__all__ = ["merge_operands", "merged_size", "roots", "allocated_extent"]


def merge_operands(v) -> list | None:
    """The pointers phi or select ``v`` merges; None for anything else."""
    if isinstance(v, I.Phi):
        return list(v.operands)
    if isinstance(v, I.Instruction) and v.opcode == "select":
        return list(v.operands[1:])
    return None


def roots(pointer, inside, available, limit: int = 32) -> list | None:
    """What ``pointer`` (used in a loop) may point into, as values defined outside the loop:
    the objects, through the phis and selects in and before the loop, except that a merge
    before the loop of an object not ``available`` where the loop is entered is itself one
    (see :func:`merged_size`). ``inside(v)``: whether the loop defines ``v`` (such objects are
    in the list too). None when there are more than ``limit`` to follow."""
    found, work, seen = [], [pointer], set()
    while work:
        v = underlying_object(work.pop())
        if v in seen or isinstance(v, (Null, Undef, Poison)):
            continue
        seen.add(v)
        if len(seen) > limit:
            return None
        ops = merge_operands(v)
        if ops is None:
            found.append(v)
        elif inside(v):
            work.extend(ops)
        else:
            objects = underlying_objects(v, limit)
            if objects is None or not all(available(o) for o in objects):
                found.append(v)  # the region is the merge's: defined where the loop is
            else:
                work.extend(ops)
    return found


def merged_size(merge, size_of, refuse):
    """An i64 of the bytes of the object ``merge`` (a phi or select defined before the loop)
    holds, computed beside it: a phi of each incoming object's bytes, computed at the end of
    the block it comes from (where that object and its sizes are defined), or a select of
    them; ``size_of(obj, b)`` builds one object's bytes with builder ``b``. ``refuse(why)``
    is raised for a merge of pointers into the middle of objects."""
    def size(v, b):
        if isinstance(v, (Null, Undef, Poison)):
            return const_int(T.i64, 0)
        if underlying_object(v) is not v:
            raise refuse(f"reads memory through a pointer into the middle of an object "
                         f"({v.ref if hasattr(v, 'ref') else v!r}) that only some paths "
                         f"before it make")
        if merge_operands(v) is not None:
            return merged_size(v, size_of, refuse)
        return size_of(v, b)

    if isinstance(merge, I.Phi):
        out = I.Phi(T.i64)
        merge.parent.insert(0, out)
        out.name = merge.parent.parent.unique_name("ckpt.bytes")
        for value, block in zip(merge.operands, merge.blocks):
            b = IRBuilder()
            b.position_before(block.terminator)
            out.add_incoming(size(value, b), block)
        return out
    b = IRBuilder()
    b.position_before(merge)  # its operands are defined there
    cond, a, c = merge.operands
    return b.select(cond, size(a, b), size(c, b))


def allocated_extent(obj):
    """The size arguments of the allocation ``obj`` is (``malloc``), or whose data it is (a
    Numba array made before the loop: ``load ptr (meminfo + data offset)``); else None."""
    base, offset = obj, None
    if isinstance(obj, I.Load) and obj.type.is_pointer:
        inner = obj.pointer
        base = underlying_object(inner)
        offset = 0
        if isinstance(inner, I.GetElementPtr) and len(inner.operands) == 2:
            offset = getattr(inner.operands[1], "value", None)
    callee = base.called_function if isinstance(base, I.CallBase) else None
    row = default_rules().lookup(callee.name, "call") if callee is not None else None
    if not isinstance(row, spec.Allocation) or not row.size_args:
        return None
    if offset != row.data_offset:
        return None
    return tuple(base.args[i] for i in row.size_args)
