"""Tapes of recursive functions, cut from chunks rather than taken from the C library.

A recursive function's augmented forward sweep allocates a tape at every call (its block, and
its loops' caches), and every one of them lives until the reverse sweep reaches its call:
GradBench's ``det`` at ``ell = 10`` makes about ten million of them a gradient. From
``malloc``, each was a call into the C library's slow path (nothing is freed while the
forward sweep runs, so its free lists are empty): 45% of the gradient's time at ``ell = 8``.

An *arena* cuts them from chunks of :data:`CHUNK_BYTES` instead: a block is a bump of a
pointer and an uncontended atomic add. Its state (the chunk it cuts from, the next free byte,
the chunk's end) is three words at an address the caller gives, one per thread: a side stack's
header (:mod:`pyzyme.diff.side_stack`, which runs recursive derivatives and rewrites their
``pyzyme.tape_realloc(null, n)`` calls to ``pyzyme.tape_arena(n)``). A chunk is a block of the
tape pool (:mod:`pyzyme.diff.tape.pool`), so a derivative called again finds its chunks mapped
already. Its first word counts the blocks cut from it that are still in use, plus one while an
arena still cuts from it; a block's header holds minus its size and its chunk's address, so
``pyzyme.tape_free`` and ``pyzyme.tape_realloc`` take arena blocks as pool blocks, whoever
frees them and on whichever thread; the last block out frees the chunk. Blocks larger than
:data:`LARGEST` are pool blocks.
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.diff.tape.pool import HEADER_BYTES, release_chunk, tape_realloc
from pyzyme.ir import IRBuilder, instructions as I, types as T
from pyzyme.ir.values import const_int, const_null

__all__ = ["take", "rewind", "STATE_BYTES", "CHUNK_BYTES", "LARGEST"]

#: The arena's state: the chunk, the next free byte, the chunk's end (three pointers).
STATE_BYTES = 24
#: A chunk's bytes: a pool block of 1 MiB, header included. Blocks start 16 bytes in, after
#: the chunk's count.
CHUNK_BYTES = (1 << 20) - HEADER_BYTES
_FIRST = 16
#: Blocks larger than this come from the pool, not from a chunk (an eighth of one at most is
#: left unused when a chunk runs out).
LARGEST = CHUNK_BYTES // 8
_STATE = T.StructType([T.ptr, T.ptr, T.ptr])


def _helper(module, name: str, suffix: str, size: str):
    """``(function, made)``: the module's ``ptr name(ptr state, i64 size)``, ``made`` when
    it is new here (an empty body to fill)."""
    fn = module.get_function(name)
    if fn is not None:
        return fn, False
    fn = module.add_function(name, T.FunctionType(T.ptr, [T.ptr, T.i64]), prefix="internal",
                             suffix=suffix)
    fn.args[0].name, fn.args[1].name = "state", size
    return fn, True


def _field(b: IRBuilder, state, k: int):
    return b.gep(_STATE, state, [const_int(T.i32, 0), const_int(T.i32, k)])


def _label(b: IRBuilder, block, chunk, need) -> None:
    """Write the header of an arena block at ``block``: minus its size, its chunk."""
    b.store(b.sub(const_int(T.i64, 0), need), block, 8)
    b.store(chunk, b.gep(T.i8, block, [const_int(T.i64, 8)]), 8)


def take(module):
    """``ptr pyzyme.tape_arena.take(ptr state, i64 bytes)``: ``bytes`` from the arena whose
    state is at ``state`` (16-byte aligned, as the pool's blocks)."""
    fn, made = _helper(module, naming.TAPE_ARENA_TAKE, "alwaysinline", "bytes")
    if not made:
        return fn
    state, nbytes = fn.args
    entry, bump, refill = (fn.append_block(n) for n in ("entry", "bump", "refill"))
    b = IRBuilder(entry)
    need = b.add(b.and_(b.add(nbytes, const_int(T.i64, 15)), const_int(T.i64, -16)),
                 const_int(T.i64, HEADER_BYTES), name="need")
    nxt = b.load(T.ptr, _field(b, state, 1), 8, name="next")
    end = b.load(T.ptr, _field(b, state, 2), 8, name="end")
    room = b.sub(b.ptrtoint(end, T.i64), b.ptrtoint(nxt, T.i64), name="room")
    b.cbranch(b.icmp("ule", need, room), bump, refill)
    b.position_at_end(bump)
    chunk = b.load(T.ptr, _field(b, state, 0), 8, name="chunk")
    _label(b, nxt, chunk, need)
    b.store(b.gep(T.i8, nxt, [need]), _field(b, state, 1), 8)
    b.atomicrmw("add", chunk, const_int(T.i64, 1), "monotonic")
    b.ret(b.gep(T.i8, nxt, [const_int(T.i64, HEADER_BYTES)], name="data"))
    b.position_at_end(refill)
    b.ret(b.call(_refill(module), [state, need], name="fresh"))
    return fn


def rewind(b: IRBuilder, state) -> None:
    """At ``b``, on the thread that owns the arena at ``state``: where its chunk holds no block
    any more, cut the next ones from its start again, from memory the last run left in the
    cache (a small derivative called in a loop would otherwise walk through the whole chunk,
    a new line at every call). Only the owner cuts blocks, so a chunk counting only the
    arena's hold cannot gain one meanwhile."""
    fn = b.block.parent
    chunk = b.load(T.ptr, _field(b, state, 0), 8, name="arena.chunk")
    check, empty, done = (fn.append_block(n) for n in ("arena.check", "arena.empty",
                                                          "arena.rewound"))
    b.cbranch(b.icmp("eq", chunk, const_null(T.ptr)), done, check)
    b.position_at_end(check)
    held = b.insert(I.Load(T.i64, chunk, 8, ordering="acquire"), name="arena.held")
    b.cbranch(b.icmp("eq", held, const_int(T.i64, 1)), empty, done)
    b.position_at_end(empty)
    b.store(b.gep(T.i8, chunk, [const_int(T.i64, _FIRST)]), _field(b, state, 1), 8)
    b.br(done)
    b.position_at_end(done)


def _refill(module):
    """``ptr pyzyme.tape_arena.refill(ptr state, i64 need)``: a block of ``need`` bytes
    (header included) from a new chunk, which the arena cuts from from now on (the old one
    freed once its blocks are); a pool block when ``need`` is over :data:`LARGEST`."""
    fn, made = _helper(module, naming.TAPE_ARENA_REFILL, "noinline", "need")
    if not made:
        return fn
    state, need = fn.args
    entry, large, cut, drop, done = (fn.append_block(n) for n in (
        "entry", "large", "cut", "drop", "done"))
    b = IRBuilder(entry)
    realloc = tape_realloc(module)
    b.cbranch(b.icmp("ugt", need, const_int(T.i64, LARGEST)), large, cut)
    b.position_at_end(large)
    b.ret(b.call(realloc, [const_null(T.ptr), b.sub(need, const_int(T.i64, HEADER_BYTES))]))
    b.position_at_end(cut)
    chunk = b.call(realloc, [const_null(T.ptr), const_int(T.i64, CHUNK_BYTES)], name="chunk")
    b.store(const_int(T.i64, 2), chunk, 8)   # the arena's hold, and the block cut below
    block = b.gep(T.i8, chunk, [const_int(T.i64, _FIRST)], name="block")
    _label(b, block, chunk, need)
    old = b.load(T.ptr, _field(b, state, 0), 8, name="old")
    b.store(chunk, _field(b, state, 0), 8)
    b.store(b.gep(T.i8, block, [need]), _field(b, state, 1), 8)
    b.store(b.gep(T.i8, chunk, [const_int(T.i64, CHUNK_BYTES)]), _field(b, state, 2), 8)
    b.cbranch(b.icmp("eq", old, const_null(T.ptr)), done, drop)
    b.position_at_end(drop)
    release_chunk(b, module, old)
    b.br(done)
    b.position_at_end(done)
    b.ret(b.gep(T.i8, block, [const_int(T.i64, HEADER_BYTES)], name="data"))
    return fn
