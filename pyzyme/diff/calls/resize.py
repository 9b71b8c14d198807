"""Reverse mode of a handle's data block moving to a block of another size, contents kept:
Numba's lists growing (``append``, ``extend``) and shrinking (``pop``), by
``NRT_MemInfo_varsize_realloc`` (a :class:`~pyzyme.rules.spec.Mirror` row with the handle's
``data_offset`` and ``size_offset``).

The reverse sweep reaches list elements through addresses the forward sweep computed: those
made before a move point into the shadow's old block. So the shadow's old block is not freed
when the shadow moves in the forward sweep (``pyzyme.shadow_regrow`` allocates the new one,
copies what the two blocks share and zeroes the rest); it is freed with the deferred releases,
once the reverse sweep is done. Where the reverse sweep passes the move, the adjoints gathered
in the new block go back to the old one, where the code before the move reads them::

    forward:  old' = shadow data; size0 = shadow size; move shadow to a new block new'
    reverse:  memcpy(old', new', min(size0, size))

A copy, not a sum: nothing writes the old block between the move and its reverse (the primal
reads and writes the new block from the move on), and the forward sweep stores no adjoints, so
the old block's floats are zero until then; its integers and pointers mirror the primal's as
the new block's do, and the reverse sweep never reads them.

The primal's own block moves as Numba moves it: loads from before a move are cached, not read
again, since the move writes the handle's data (:mod:`pyzyme.analysis.overwrite`).
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int, const_null
from pyzyme.rules import spec

__all__ = ["forward", "reverse", "release_function"]

_REGROW, _RELEASE = naming.SHADOW_REGROW, naming.SHADOW_RELEASE
# NRT's allocator (numba/core/runtime/nrt.cpp), the one the MemInfo's destructor frees with.
_ALLOCATE = "NRT_Allocate"
_FREE = "NRT_Free"


def forward(cx, inst: I.CallBase, new: I.CallBase, row: spec.Mirror) -> I.Instruction:
    """After primal move ``new`` (of primal call ``inst``): the same move of the shadow
    handle's block, keeping the old block. Returns the old block (null where the primal move
    failed: the primal then raises), for the caller to release once the reverse sweep is
    done."""
    b = cx.fb
    handle = cx.shadows[inst.args[0]]
    size = new.args[1]
    kept = b.load(T.i64, b.gep(T.i8, handle, [const_int(T.i64, row.size_offset)]),
                  name=naming.moved(inst.name, "size"))
    old = b.call(_regrow(cx.module, row), [handle, size, new],
                 name=naming.moved(inst.name, "old"))
    moved = b.load(T.ptr, b.gep(T.i8, handle, [const_int(T.i64, row.data_offset)]),
                   name=naming.moved(inst.name, "new"))
    cx.resizes[inst] = (old, kept, moved)
    return old


def reverse(cx, inst: I.CallBase) -> None:
    """The reverse of a move :func:`forward` mirrored: the adjoints back into the old block."""
    old, kept, moved = cx.resizes[inst]
    b = cx.rb
    size = cx.primal(inst.args[1])
    kept = cx.avail(kept)
    shared = b.select(b.icmp("ult", kept, size), kept, size)
    memcpy = cx.module.declare("llvm.memcpy.p0.p0.i64",
                               T.FunctionType(T.void, [T.ptr, T.ptr, T.i64, T.i1]))
    b.call(memcpy, [cx.avail(old), cx.avail(moved), shared, const_int(T.i1, 0)])


def _regrow(module, row: spec.Mirror):
    """``ptr pyzyme.shadow_regrow(ptr handle, i64 size, ptr primal)``: unless ``primal`` (the
    primal move's result) is null, move ``handle``'s block to a new one of ``size`` bytes (the
    shared bytes copied, the rest zeroed) and return the old block; else return null."""
    fn = module.get_function(_REGROW)
    if fn is not None:
        return fn
    fn = module.add_function(_REGROW, T.FunctionType(T.ptr, [T.ptr, T.i64, T.ptr]),
                             prefix="internal")
    handle, size, primal = fn.args
    handle.name, size.name, primal.name = "handle", "size", "primal"
    entry, grow, copy, failed, skip = (fn.append_block(n) for n in
                                       ("entry", "grow", "copy", "failed", "skip"))
    b = IRBuilder(entry)
    b.cbranch(b.icmp("eq", primal, const_null(T.ptr)), skip, grow)
    b.position_at_end(skip)
    b.ret(const_null(T.ptr))
    b.position_at_end(grow)
    data_slot = b.gep(T.i8, handle, [const_int(T.i64, row.data_offset)], ("inbounds",))
    size_slot = b.gep(T.i8, handle, [const_int(T.i64, row.size_offset)], ("inbounds",))
    old = b.load(T.ptr, data_slot, name="old")
    kept = b.load(T.i64, size_slot, name="kept")
    allocate = module.declare(_ALLOCATE, T.FunctionType(T.ptr, [T.i64]))
    block = b.call(allocate, [size], name="block")
    b.cbranch(b.icmp("eq", block, const_null(T.ptr)), failed, copy)
    b.position_at_end(failed)
    # The primal got its block but the shadow none: going on would lose adjoints.
    b.call(module.declare("llvm.trap", T.FunctionType(T.void, [])), [])
    b.unreachable()
    b.position_at_end(copy)
    shared = b.select(b.icmp("ult", kept, size), kept, size, name="shared")
    memcpy = module.declare("llvm.memcpy.p0.p0.i64",
                            T.FunctionType(T.void, [T.ptr, T.ptr, T.i64, T.i1]))
    b.call(memcpy, [block, old, shared, const_int(T.i1, 0)])
    memset = module.declare("llvm.memset.p0.i64",
                            T.FunctionType(T.void, [T.ptr, T.i8, T.i64, T.i1]))
    rest = b.gep(T.i8, block, [shared], name="rest")
    b.call(memset, [rest, const_int(T.i8, 0), b.sub(size, shared), const_int(T.i1, 0)])
    b.store(block, data_slot)
    b.store(size, size_slot)
    b.ret(old)
    return fn


def release_function(module):
    """``void pyzyme.shadow_release(ptr block)``: free an old block kept by
    :func:`forward` (nothing for null)."""
    fn = module.get_function(_RELEASE)
    if fn is not None:
        return fn
    fn = module.add_function(_RELEASE, T.FunctionType(T.void, [T.ptr]), prefix="internal")
    block = fn.args[0]
    block.name = "block"
    entry, free, done = (fn.append_block(n) for n in ("entry", "free", "done"))
    b = IRBuilder(entry)
    b.cbranch(b.icmp("eq", block, const_null(T.ptr)), done, free)
    b.position_at_end(free)
    b.call(module.declare(_FREE, T.FunctionType(T.void, [T.ptr])), [block])
    b.br(done)
    b.position_at_end(done)
    b.ret_void()
    return fn
