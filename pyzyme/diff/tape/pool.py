"""Where tape arrays come from: a pool that keeps a few freed blocks per size class.

A derivative called in a loop allocates the same tape arrays on every call. Fresh from the C
library, each large one is a new mapping from the operating system: every page faults and is
zeroed again, which measured ~30% of the ADBench GMM gradient. The pool keeps up to
:data:`SLOTS` freed blocks of each power-of-two size (in one module-level array of pointers,
each exchanged atomically, so concurrent calls never share a block) and hands them out again.
Several per class, because one loop's caches grow in step: the GMM at d=64 caches two arrays of
the same size per iteration, and with one slot per class the second went back to the C library
and came back as fresh pages on every call (50,000 page faults and 140 ms a call).

Reverse mode's shadows of large temporaries come from the same pool
(:mod:`pyzyme.diff.tape.pooled_shadows`). What a pool keeps is bounded: :data:`SLOTS` blocks
per class and :data:`RETAINED_BYTES` in all (a counter of the large blocks kept, updated with
the slots), past which a freed block goes back to the C library.

A block carries a 16-byte header holding its size; the pointer handed out is just past it.
A block of the tape arena (:mod:`pyzyme.diff.tape.arena`, for recursive functions' tapes)
holds minus its size there instead, and the address of its chunk in the next 8 bytes: both
functions below take either kind, so code that frees or grows a block need not know which
it has.

``pyzyme.tape_realloc(old, bytes)`` grows (or allocates, from null) and
``pyzyme.tape_free(p)`` returns a block to the pool. ``pyzyme.tape_capacity(hint, capacity)``
picks a loop's next capacity: doubling, but on a call's first growth the largest capacity an
earlier call reached (kept in a global per loop), so that a derivative called again on the
same sizes allocates each cache once and copies nothing. A block outgrown by ``tape_realloc``
goes back to the C library, not to the pool: only the blocks in use when a call ends are worth
keeping. The three stay out of line (``noinline``).
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.ir import IRBuilder, instructions as I, types as T
from pyzyme.ir.values import ZeroInitializer, const_c_string, const_int, const_null

__all__ = ["tape_realloc", "tape_free", "tape_capacity", "release_chunk",
           "SLOTS", "RETAINED_BYTES", "COUNTED_BYTES", "FIRST_CAPACITY", "REALLOC_NAME",
           "FREE_NAME", "CAPACITY_NAME", "HEADER_BYTES"]

_POOL, _HELD = naming.TAPE_POOL, naming.TAPE_POOL_BYTES
#: The symbols of the three functions (code differentiated again meets them as calls).
REALLOC_NAME = _REALLOC = naming.TAPE_REALLOC
CAPACITY_NAME = _CAPACITY = naming.TAPE_CAPACITY
FREE_NAME = _FREE = naming.TAPE_FREE
#: The bytes of a block's header, before the pointer handed out.
HEADER_BYTES = _HEADER = 16
_MIN_CLASS = 6  # 64-byte blocks at least
#: Freed blocks kept per size class. Enough for the arrays one call has in use at once: the
#: ode eval's gradient at n=100000, s=1 holds ten blocks of the 1 MiB class (six of them
#: shadows); with 4 slots the rest went back to the C library and faulted in again.
SLOTS = 16
#: The most bytes one pool keeps between calls (each derivative module has its own pool):
#: past it, a freed block goes back to the C library. Above what any GradBench eval or
#: benchmark holds at once.
RETAINED_BYTES = 4 << 30
#: Blocks of at least this many bytes count towards :data:`RETAINED_BYTES`; smaller ones
#: (at most SLOTS per class below it: 1 MiB in all) skip the counter's atomics, which a
#: small derivative called in a loop would pay on every call.
COUNTED_BYTES = 64 * 1024
_POOL_TYPE = T.ArrayType(64 * SLOTS, T.ptr)
#: The first capacity of a loop cache, in elements (unless an earlier call reached more).
FIRST_CAPACITY = 64
# Called from the loops of the forward sweep, a few times a call: inlined there, their atomics
# and branches made the loops around them slower (ADBench's GMM gradient 2.37x to 2.53x the
# primal).
_OUT_OF_LINE = "noinline"


def _pool(module):
    pool = module.get_global(_POOL)
    if pool is None:
        pool = module.add_global(_POOL, _POOL_TYPE, ZeroInitializer(_POOL_TYPE),
                                 prefix="internal")
    return pool


def _held(module):
    """The bytes the pool's slots hold (an estimate while blocks come and go)."""
    held = module.get_global(_HELD)
    if held is None:
        held = module.add_global(_HELD, T.i64, const_int(T.i64, 0), prefix="internal")
    return held


def _uncount(b: IRBuilder, module, header, name: str) -> None:
    """Take the block at ``header`` off the pool's count when it is counted (large)."""
    size = b.load(T.i64, header, name=f"{name}.size")
    fn = b.block.parent
    counted, done = fn.append_block(f"{name}.counted"), fn.append_block(f"{name}.uncounted")
    b.cbranch(b.icmp("uge", size, const_int(T.i64, COUNTED_BYTES)), counted, done)
    b.position_at_end(counted)
    b.atomicrmw("sub", _held(module), size, "monotonic")
    b.br(done)
    b.position_at_end(done)


def _libc_free(module):
    return module.declare("free", T.FunctionType(T.void, [T.ptr]))


def _slot(b: IRBuilder, module, cls, k: int):
    """The pool's ``k``-th slot of size class ``cls``."""
    index = b.add(b.mul(cls, const_int(T.i64, SLOTS)), const_int(T.i64, k))
    return b.gep(_POOL_TYPE, _pool(module), [const_int(T.i64, 0), index])


def _holds_a_block(b: IRBuilder, slot):
    """Whether ``slot`` holds a block, by a plain look: a slot that cannot serve is passed
    over without the atomic exchange's write, which would take its cache line from the
    other threads."""
    held = b.insert(I.Load(T.ptr, slot, 8, ordering="monotonic"))
    return b.icmp("ne", held, const_null(T.ptr))


def _capacity(b: IRBuilder, raw, name: str):
    """The bytes of a block, header included, from the first word of its header (an arena
    block's holds minus them)."""
    negative = b.icmp("slt", raw, const_int(T.i64, 0))
    return b.select(negative, b.sub(const_int(T.i64, 0), raw), raw, name=name)


def _drop_user(b: IRBuilder, chunk, last, kept) -> None:
    """At ``b``: one user fewer of the arena's ``chunk`` (a pool block whose first word counts
    the blocks cut from it that are still in use, and one more while an arena cuts from it);
    on to ``last`` where that was the last one, which frees the chunk, else to ``kept``.
    Atomic: a tape may be freed on another thread than the one whose arena it came from
    (split mode's reverse thunk, a parallel loop's tasks)."""
    left = b.atomicrmw("sub", chunk, const_int(T.i64, 1), "acq_rel", name="chunk.left")
    b.cbranch(b.icmp("eq", left, const_int(T.i64, 1)), last, kept)


def release_chunk(b: IRBuilder, module, chunk) -> None:
    """At ``b``: the arena's own hold on ``chunk`` dropped (:func:`_drop_user`), the chunk
    freed if no block of it is left."""
    fn = b.block.parent
    last, done = fn.append_block("chunk.last"), fn.append_block("chunk.kept")
    _drop_user(b, chunk, last, done)
    b.position_at_end(last)
    b.call(tape_free(module), [chunk])
    b.br(done)
    b.position_at_end(done)


def tape_free(module):
    """``void pyzyme.tape_free(ptr p)``: keep the block in a free slot of its class; with all
    taken, or past :data:`RETAINED_BYTES`, it goes back to the C library; nothing for null.

    A full class gives back the block at hand, not one it displaces: a parallel loop's tasks
    free a block a row in their reverse sweeps, and displacing exchanged the same slot on
    every thread, then freed a block that another thread's heap had served."""
    fn = module.get_function(_FREE)
    if fn is not None:
        return fn
    fn = module.add_function(_FREE, T.FunctionType(T.void, [T.ptr]), prefix="internal")
    fn.suffix = _OUT_OF_LINE
    p = fn.args[0]
    p.name = "p"
    entry, keep, room = fn.append_block("entry"), fn.append_block("keep"), fn.append_block("room")
    tries = [fn.append_block(f"try.{k}") for k in range(1, SLOTS)]
    drop, done = fn.append_block("drop"), fn.append_block("done")
    b = IRBuilder(entry)
    b.cbranch(b.icmp("eq", p, const_null(T.ptr)), done, keep)
    b.position_at_end(keep)
    own = b.gep(T.i8, p, [const_int(T.i64, -_HEADER)], name="own")
    own_size = b.load(T.i64, own, name="own.size")
    pooled, arena, last = (fn.append_block(n) for n in ("pooled", "arena", "chunk.last"))
    b.cbranch(b.icmp("slt", own_size, const_int(T.i64, 0)), arena, pooled)
    # An arena block: one fewer in its chunk; the last one out frees the chunk, a pool block,
    # as below (by branching there: a call of this function would make it recursive, and
    # recursive functions run on a side stack).
    b.position_at_end(arena)
    chunk = b.load(T.ptr, b.gep(T.i8, own, [const_int(T.i64, 8)]), name="chunk")
    _drop_user(b, chunk, last, done)
    b.position_at_end(last)
    chunk_header = b.gep(T.i8, chunk, [const_int(T.i64, -_HEADER)], name="chunk.header")
    chunk_size = b.load(T.i64, chunk_header, name="chunk.size")
    b.br(pooled)
    b.position_at_end(pooled)
    header = b.phi(T.ptr, name="header")
    header.add_incoming(own, keep)
    header.add_incoming(chunk_header, last)
    size = b.phi(T.i64, name="size")
    size.add_incoming(own_size, keep)
    size.add_incoming(chunk_size, last)
    cttz = module.declare("llvm.cttz.i64", T.FunctionType(T.i64, [T.i64, T.i1]))
    cls = b.call(cttz, [size, const_int(T.i1, 1)], name="class")
    count = fn.append_block("count")
    b.cbranch(b.icmp("uge", size, const_int(T.i64, COUNTED_BYTES)), count, room)
    b.position_at_end(count)
    held = b.atomicrmw("add", _held(module), size, "monotonic", name="held")
    b.cbranch(b.icmp("ugt", b.add(held, size), const_int(T.i64, RETAINED_BYTES)), drop, room)
    b.position_at_end(room)
    for k, fail in enumerate([*tries, drop]):
        slot = _slot(b, module, cls, k)
        swap = fn.append_block(f"swap.{k}")
        b.cbranch(_holds_a_block(b, slot), fail, swap)
        b.position_at_end(swap)
        pair = b.cmpxchg(slot, const_null(T.ptr), header, "seq_cst", "seq_cst")
        b.cbranch(b.extractvalue(pair, 1, name=f"kept.{k}"), done, fail)
        b.position_at_end(fail)
    _uncount(b, module, header, "unkept")  # counted on the way in, if large
    b.call(_libc_free(module), [header])
    b.br(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def tape_realloc(module):
    """``ptr pyzyme.tape_realloc(ptr old, i64 bytes)``: a block of at least ``bytes``, holding
    ``old``'s contents (``old`` itself when it is big enough)."""
    fn = module.get_function(_REALLOC)
    if fn is not None:
        return fn
    fn = module.add_function(_REALLOC, T.FunctionType(T.ptr, [T.ptr, T.i64]),
                             prefix="internal")
    fn.suffix = _OUT_OF_LINE
    old, nbytes = fn.args
    old.name, nbytes.name = "old", "bytes"
    blocks = ("entry", "check", "fresh", "take", "make", "got", "copy", "done")
    entry, check, fresh, take, make, got, copy, done = (fn.append_block(n) for n in blocks)
    b = IRBuilder(entry)
    need = b.add(nbytes, const_int(T.i64, _HEADER), name="need")
    is_null = b.icmp("eq", old, const_null(T.ptr))
    b.cbranch(is_null, fresh, check)

    b.position_at_end(check)
    old_header = b.gep(T.i8, old, [const_int(T.i64, -_HEADER)])
    old_size = _capacity(b, b.load(T.i64, old_header), "old.size")
    b.cbranch(b.icmp("uge", old_size, need), done, fresh)

    b.position_at_end(fresh)
    ctlz = module.declare("llvm.ctlz.i64", T.FunctionType(T.i64, [T.i64, T.i1]))
    bits = b.sub(const_int(T.i64, 64),
                 b.call(ctlz, [b.sub(need, const_int(T.i64, 1)), const_int(T.i1, 0)]))
    small = b.icmp("ult", bits, const_int(T.i64, _MIN_CLASS))
    cls = b.select(small, const_int(T.i64, _MIN_CLASS), bits, name="class")
    looks = [fn.append_block(f"look.{k}") for k in range(1, SLOTS)]
    spares = []
    for k, empty in enumerate([*looks, make]):
        slot = _slot(b, module, cls, k)
        swap = fn.append_block(f"swap.{k}")
        b.cbranch(_holds_a_block(b, slot), swap, empty)
        b.position_at_end(swap)
        spare = b.atomicrmw("xchg", slot, const_null(T.ptr), "seq_cst", name=f"spare.{k}")
        spares.append((spare, b.block))
        b.cbranch(b.icmp("eq", spare, const_null(T.ptr)), empty, take)
        b.position_at_end(empty)

    b.position_at_end(take)
    spare = b.phi(T.ptr, name="spare")
    for value, block in spares:
        spare.add_incoming(value, block)
    _uncount(b, module, spare, "spare")
    taken = b.block
    b.br(got)

    b.position_at_end(make)
    size = b.shl(const_int(T.i64, 1), cls, name="size")
    malloc = module.declare("malloc", T.FunctionType(T.ptr, [T.i64]))
    block = b.call(malloc, [size], name="block")
    made, failed = fn.append_block("made"), fn.append_block("failed")
    b.cbranch(b.icmp("eq", block, const_null(T.ptr)), failed, made)
    b.position_at_end(failed)
    _out_of_memory(module, b, size)
    b.position_at_end(made)
    b.store(size, block)
    made_block = b.block
    b.br(got)

    b.position_at_end(got)
    header = b.phi(T.ptr, name="header")
    header.add_incoming(spare, taken)
    header.add_incoming(block, made_block)
    data = b.gep(T.i8, header, [const_int(T.i64, _HEADER)], name="data")
    b.cbranch(is_null, done, copy)

    b.position_at_end(copy)
    memcpy = module.declare("llvm.memcpy.p0.p0.i64",
                   T.FunctionType(T.void, [T.ptr, T.ptr, T.i64, T.i1]))
    outgrown = b.gep(T.i8, old, [const_int(T.i64, -_HEADER)], name="outgrown")
    raw = b.load(T.i64, outgrown, name="outgrown.size")
    old_bytes = b.sub(_capacity(b, raw, "outgrown.bytes"), const_int(T.i64, _HEADER))
    b.call(memcpy, [data, old, old_bytes, const_int(T.i1, 0)])
    # An outgrown block goes back to the C library, not to the pool: the next call starts at
    # the capacity this one reaches (pyzyme.diff.tape.cache), so it would never ask for it again.
    # (An arena block goes back as any: one fewer in its chunk.)
    libc, arena = fn.append_block("outgrown.libc"), fn.append_block("outgrown.arena")
    b.cbranch(b.icmp("slt", raw, const_int(T.i64, 0)), arena, libc)
    b.position_at_end(arena)
    b.call(tape_free(module), [old])
    b.br(done)
    b.position_at_end(libc)
    b.call(_libc_free(module), [outgrown])
    b.br(done)

    b.position_at_end(done)
    result = b.phi(T.ptr, name="result")
    result.add_incoming(old, check)
    result.add_incoming(data, got)
    result.add_incoming(data, libc)
    result.add_incoming(data, arena)
    b.ret(result)
    return fn


def _out_of_memory(module, b: IRBuilder, size) -> None:
    """Where the C library has no block of ``size`` bytes for a tape: say so on standard
    error and abort. The derivative cannot go on without it, and has no way to hand an
    exception back from the middle of a sweep; writing through the null block instead was a
    segmentation fault that said nothing (a stencil's tape grown past the machine's memory)."""
    text = module.get_global(naming.OUT_OF_MEMORY_TEXT)
    if text is None:
        message = const_c_string(
            "pyzyme: out of memory: a reverse-mode derivative's tape needs a block of %lld "
            "bytes more. Set a memory budget, pyzyme.options(tape_budget=...), to checkpoint "
            "its loops.\n")
        text = module.add_global(naming.OUT_OF_MEMORY_TEXT, message.type, message,
                                 is_constant=True, prefix="private unnamed_addr")
    dprintf = module.declare("dprintf", T.FunctionType(T.i32, [T.i32, T.ptr], var_arg=True))
    b.call(dprintf, [const_int(T.i32, 2), text, size])
    b.call(module.declare("abort", T.FunctionType(T.void, [])), [])
    b.unreachable()


def tape_capacity(module):
    """``i64 pyzyme.tape_capacity(ptr hint, i64 capacity)``: the next capacity of a loop's
    caches. From zero: the largest an earlier call reached (``hint``, at least
    :data:`FIRST_CAPACITY`), so a derivative called again on the same sizes allocates its caches
    once, at their final size, and copies nothing; after that, double. ``hint`` is raised to
    the result."""
    fn = module.get_function(_CAPACITY)
    if fn is not None:
        return fn
    fn = module.add_function(_CAPACITY, T.FunctionType(T.i64, [T.ptr, T.i64]),
                             prefix="internal")
    fn.suffix = _OUT_OF_LINE
    hint, cap = fn.args
    hint.name, cap.name = "hint", "capacity"
    entry, first, double, done = (fn.append_block(n) for n in ("entry", "first", "double",
                                                                "done"))
    b = IRBuilder(entry)
    b.cbranch(b.icmp("eq", cap, const_int(T.i64, 0)), first, double)
    b.position_at_end(first)
    reached = b.insert(I.Load(T.i64, hint, 8, ordering="monotonic", name="reached"))
    least = const_int(T.i64, FIRST_CAPACITY)
    start = b.select(b.icmp("ugt", reached, least), reached, least, name="start")
    b.br(done)
    b.position_at_end(double)
    doubled = b.shl(cap, const_int(T.i64, 1), name="doubled")
    b.br(done)
    b.position_at_end(done)
    new = b.phi(T.i64, name="new")
    new.add_incoming(start, first)
    new.add_incoming(doubled, double)
    # Raised only past what it holds: every task of a parallel loop asks at each of its
    # rows, and a write, even of the same value, takes the line from the other threads.
    raise_, keep = fn.append_block("raise"), fn.append_block("keep")
    held = b.insert(I.Load(T.i64, hint, 8, ordering="monotonic", name="held"))
    b.cbranch(b.icmp("ugt", new, held), raise_, keep)
    b.position_at_end(raise_)
    b.atomicrmw("umax", hint, new, "monotonic")
    b.br(keep)
    b.position_at_end(keep)
    b.ret(new)
    return fn
