"""Shadows of large temporaries from the tape pool, so that a derivative called again finds
their memory already mapped.

Reverse mode gives each array a function allocates (Numba's ``np.empty``, ``np.zeros``:
``NRT_MemInfo_alloc_aligned``) a shadow array of its own, and releases both once the reverse
sweep is done with them (:mod:`pyzyme.diff.calls.allocation`). A large block the C library
returns to the operating system when it is freed (glibc unmaps it, or trims the top of its
heap), so the next call gets fresh pages, each of which faults and is zeroed by the kernel on
first touch: GradBench's ode at n=100000 took 2,318 minor page faults a gradient call, against
1,140 for the primal, all of them on temporaries (1,140 with the shadows pooled: the
primal's own, which the derivative allocates too). Shadows of at least :data:`POOLED_BYTES`
come from the tape pool instead (:mod:`pyzyme.diff.tape.pool`: a few freed blocks kept per
size class, exchanged atomically, so concurrent calls and ``prange`` bodies never share one),
and go back to it when their count falls to zero.

``ptr pyzyme.shadow_alloc(i64 size, i32 align)`` returns a MemInfo as
``NRT_MemInfo_alloc_aligned(size, align)`` does: a genuine NRT MemInfo (made by NRT's own
``manage_memory``, from ``NRT_get_api``), so reference counts, deferred releases and boxing
treat it as any other; its destructor ``pyzyme.pooled_shadow_release`` gives the block back to
the pool. The data is aligned as asked; the pool's block pointer is kept in the 8 bytes before it.
Smaller shadows, and those whose alignment is not a power of two up to 4096, are made by
``NRT_MemInfo_alloc_aligned`` as before: for them the pool saves nothing (the C library keeps
small blocks), and a MemInfo of NRT's own needs one allocation, not two.

Code that differentiates a derivative again (``hvp``, a gradient inside ``@njit`` code
differentiated) meets ``pyzyme.shadow_alloc`` as an allocation (its row in
:mod:`pyzyme.rules.runtime`), as Numba's own.
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.diff.tape.pool import tape_free, tape_realloc
from pyzyme.ir import IRBuilder, types as T
from pyzyme.ir.values import const_int, const_null
from pyzyme.rules.runtime import MEMINFO_SIZE, NRT_ARRAY_ALLOC

__all__ = ["shadow_alloc", "POOLED_BYTES", "ALLOC_NAME", "RELEASE_NAME"]

#: The symbols of the allocator and of the destructor it gives NRT. The destructor's name is its
#: own: helpers are found by name in the module (made once), and ``pyzyme.shadow_release``
#: (:mod:`pyzyme.diff.calls.resize`: ``NRT_Free`` of a list's old block) has the same type, so
#: under one name whichever was made first served both: a list's old blocks went to
#: ``tape_free`` (a segfault), or a pooled block's data to ``NRT_Free``.
ALLOC_NAME = naming.SHADOW_ALLOC
RELEASE_NAME = naming.POOLED_SHADOW_RELEASE
#: Shadows of at least this many bytes come from the pool. Below it glibc serves blocks from
#: its heap's free lists, which it seldom gives back: nothing faults again.
POOLED_BYTES = 64 * 1024
_MAX_ALIGN = 4096
# NRT_api_functions (numba/core/runtime/nrt_external.h): allocate, allocate_external,
# manage_memory, ... ; manage_memory(data, dtor) makes a MemInfo whose destructor calls
# dtor(data).
_MANAGE_MEMORY = 2


def _release(module):
    """``void pyzyme.pooled_shadow_release(ptr data)``: the pool's block before ``data`` back
    to it."""
    fn = module.get_function(RELEASE_NAME)
    if fn is not None:
        return fn
    fn = module.add_function(RELEASE_NAME, T.FunctionType(T.void, [T.ptr]), prefix="internal")
    data = fn.args[0]
    data.name = "data"
    b = IRBuilder(fn.append_block("entry"))
    slot = b.gep(T.i8, data, [const_int(T.i64, -8)], name="slot")
    b.call(tape_free(module), [b.load(T.ptr, slot, align=8, name="block")])
    b.ret_void()
    return fn


def shadow_alloc(module):
    """``ptr pyzyme.shadow_alloc(i64 size, i32 align)``: a MemInfo of ``size`` bytes aligned
    to ``align``, its block from the tape pool when it is large (see the module's text)."""
    fn = module.get_function(ALLOC_NAME)
    if fn is not None:
        return fn
    fn = module.add_function(ALLOC_NAME, T.FunctionType(T.ptr, [T.i64, T.i32]),
                             prefix="internal")
    # One call per temporary: out of line, the call stays recognizable (its row) where a
    # derivative is differentiated again.
    fn.suffix = "noinline"
    size, align32 = fn.args
    size.name, align32.name = "size", "align"
    names = ("entry", "pooled", "plain", "made", "failed")
    entry, pooled, plain, made, failed = (fn.append_block(n) for n in names)
    b = IRBuilder(entry)
    align = b.zext(align32, T.i64, name="align.64")
    mask = b.sub(align, const_int(T.i64, 1), name="mask")
    power = b.icmp("eq", b.and_(align, mask), const_int(T.i64, 0))
    small_align = b.icmp("ule", align, const_int(T.i64, _MAX_ALIGN))
    big = b.icmp("uge", size, const_int(T.i64, POOLED_BYTES))
    b.cbranch(b.and_(big, b.and_(power, small_align)), pooled, plain)

    b.position_at_end(plain)
    nrt_alloc = module.declare(NRT_ARRAY_ALLOC, T.FunctionType(T.ptr, [T.i64, T.i32]))
    b.ret(b.call(nrt_alloc, [size, align32], name="mi"))

    b.position_at_end(pooled)
    # Room for the block pointer before the data, and for moving the data up to ``align``.
    need = b.add(size, b.add(align, const_int(T.i64, 8)), name="need")
    block = b.call(tape_realloc(module), [const_null(T.ptr), need], name="block")
    after = b.add(b.ptrtoint(block, T.i64), const_int(T.i64, 8))
    pad = b.and_(b.sub(const_int(T.i64, 0), after), mask, name="pad")
    data = b.gep(T.i8, block, [b.add(pad, const_int(T.i64, 8))], name="data")
    b.store(block, b.gep(T.i8, data, [const_int(T.i64, -8)]), align=8)
    api = b.call(module.declare("NRT_get_api", T.FunctionType(T.ptr, [])), [], name="api")
    manage_ty = T.FunctionType(T.ptr, [T.ptr, T.ptr])
    manage = b.load(T.ptr, b.gep(T.ptr, api, [const_int(T.i64, _MANAGE_MEMORY)]), align=8,
                    name="manage")
    mi = b.call(manage, [data, _release(module)], manage_ty, name="mi")
    b.cbranch(b.icmp("eq", mi, const_null(T.ptr)), failed, made)

    b.position_at_end(made)
    # manage_memory records size 0; NRT reports a MemInfo's size where Python asks for its
    # buffer, so it gets the array's.
    b.store(size, b.gep(T.i8, mi, [const_int(T.i64, MEMINFO_SIZE)]), align=8)
    b.ret(mi)

    b.position_at_end(failed)
    b.call(tape_free(module), [block])
    b.ret(const_null(T.ptr))  # as NRT's allocators: the caller reports the MemoryError
    return fn
