"""Where tape arrays come from: a pool that keeps one freed block per size class.

A derivative called in a loop allocates the same tape arrays on every call. Fresh from the C
library, each large one is a new mapping from the operating system: every page faults and is
zeroed again, which measured ~30% of the ADBench GMM gradient. The pool keeps the last freed
block of each power-of-two size (in one module-level array of 64 pointers, exchanged
atomically, so concurrent calls never share a block) and hands it out again; at most one block
per size class stays allocated between calls.

A block carries a 16-byte header holding its size; the pointer handed out is just past it.

``pyzyme.tape_realloc(old, bytes)`` grows (or allocates, from null) and
``pyzyme.tape_free(p)`` returns a block to the pool.
"""

from __future__ import annotations

from pyzyme.ir import IRBuilder, types as T
from pyzyme.ir.values import ZeroInitializer, const_int, const_null

__all__ = ["tape_realloc", "tape_free"]

_POOL = "pyzyme.tape_pool"
_REALLOC = "pyzyme.tape_realloc"
_FREE = "pyzyme.tape_free"
_HEADER = 16
_MIN_CLASS = 6  # 64-byte blocks at least
_POOL_TYPE = T.ArrayType(64, T.ptr)


def _pool(module):
    pool = module.get_global(_POOL)
    if pool is None:
        pool = module.add_global(_POOL, _POOL_TYPE, ZeroInitializer(_POOL_TYPE),
                                 prefix="internal")
    return pool


def tape_free(module):
    """``void pyzyme.tape_free(ptr p)``: keep the block in the pool (freeing the one it
    displaces), or nothing for null."""
    fn = module.get_function(_FREE)
    if fn is not None:
        return fn
    fn = module.add_function(_FREE, T.FunctionType(T.void, [T.ptr]), prefix="internal")
    p = fn.args[0]
    p.name = "p"
    entry, keep, drop, done = (fn.append_block(n) for n in ("entry", "keep", "drop", "done"))
    b = IRBuilder(entry)
    b.cbranch(b.icmp("eq", p, const_null(T.ptr)), done, keep)
    b.position_at_end(keep)
    header = b.gep(T.i8, p, [const_int(T.i64, -_HEADER)], name="header")
    size = b.load(T.i64, header, name="size")
    cttz = module.declare("llvm.cttz.i64", T.FunctionType(T.i64, [T.i64, T.i1]))
    cls = b.call(cttz, [size, const_int(T.i1, 1)], name="class")
    slot = b.gep(_POOL_TYPE, _pool(module), [const_int(T.i64, 0), cls])
    old = b.atomicrmw("xchg", slot, header, "seq_cst", name="displaced")
    b.cbranch(b.icmp("eq", old, const_null(T.ptr)), done, drop)
    b.position_at_end(drop)
    b.call(module.declare("free", T.FunctionType(T.void, [T.ptr])), [old])
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
    old_size = b.load(T.i64, old_header, name="old.size")
    b.cbranch(b.icmp("uge", old_size, need), done, fresh)

    b.position_at_end(fresh)
    ctlz = module.declare("llvm.ctlz.i64", T.FunctionType(T.i64, [T.i64, T.i1]))
    bits = b.sub(const_int(T.i64, 64),
                 b.call(ctlz, [b.sub(need, const_int(T.i64, 1)), const_int(T.i1, 0)]))
    small = b.icmp("ult", bits, const_int(T.i64, _MIN_CLASS))
    cls = b.select(small, const_int(T.i64, _MIN_CLASS), bits, name="class")
    slot = b.gep(_POOL_TYPE, _pool(module), [const_int(T.i64, 0), cls])
    spare = b.atomicrmw("xchg", slot, const_null(T.ptr), "seq_cst", name="spare")
    b.cbranch(b.icmp("eq", spare, const_null(T.ptr)), make, take)

    b.position_at_end(take)
    b.br(got)

    b.position_at_end(make)
    size = b.shl(const_int(T.i64, 1), cls, name="size")
    malloc = module.declare("malloc", T.FunctionType(T.ptr, [T.i64]))
    block = b.call(malloc, [size], name="block")
    b.store(size, block)
    b.br(got)

    b.position_at_end(got)
    header = b.phi(T.ptr, name="header")
    header.add_incoming(spare, take)
    header.add_incoming(block, make)
    data = b.gep(T.i8, header, [const_int(T.i64, _HEADER)], name="data")
    b.cbranch(is_null, done, copy)

    b.position_at_end(copy)
    memcpy = module.declare("llvm.memcpy.p0.p0.i64",
                   T.FunctionType(T.void, [T.ptr, T.ptr, T.i64, T.i1]))
    copied = b.load(T.i64, b.gep(T.i8, old, [const_int(T.i64, -_HEADER)]))
    old_bytes = b.sub(copied, const_int(T.i64, _HEADER))
    b.call(memcpy, [data, old, old_bytes, const_int(T.i1, 0)])
    b.call(tape_free(module), [old])
    b.br(done)

    b.position_at_end(done)
    result = b.phi(T.ptr, name="result")
    result.add_incoming(old, check)
    result.add_incoming(data, got)
    result.add_incoming(data, copy)
    b.ret(result)
    return fn
