"""Chunks of a checkpointed loop's iterations: what a step of its scheme runs.

A step of the Revolve scheme (:mod:`pyzyme.transforms.revolve`) is a chunk of consecutive
iterations (:func:`pyzyme.transforms.revolve.chunking` says why and how many): the step
function runs them as a loop of its own, so that its derivative tapes them as any loop (run
forward once, then reversed from its tape, which stays in cache) and the snapshots are taken at
chunk boundaries only. The chunk's length is decided at run time, from the state's bytes, what
one iteration's derivative tapes (:func:`iteration_tape`, where its inner loops' trip counts
are known before the loop) and the budget's share; the step reads it and the loop's trip count
from its inputs block.
"""

from __future__ import annotations

from pyzyme.ir import IRBuilder
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int
from pyzyme.transforms import revolve

__all__ = ["chunk_ir", "chunk_range", "trip_count", "iteration_tape", "tape_states"]


def _i64(n: int):
    return const_int(T.i64, n)


def _max(b: IRBuilder, x, y):
    return b.select(b.icmp("sgt", x, y), x, y)


def _min(b: IRBuilder, x, y):
    return b.select(b.icmp("slt", x, y), x, y)


def chunk_ir(b: IRBuilder, share, state, tape, n, reserve: int) -> tuple:
    """:func:`~pyzyme.transforms.revolve.chunking` at ``b`` (i64 values; ``n`` >= 1, the loop's
    iterations): ``(chunk, reserve, steps)``, ``steps`` the chunks the scheme runs."""
    per = _max(b, _max(b, tape, b.mul(state, _i64(reserve))), _i64(1))
    room = _min(b, _i64(revolve.CHUNK_TAPE), b.sdiv(share, _i64(revolve.CHUNK_PART)))
    chunk = _min(b, _max(b, b.sdiv(room, per), _i64(1)), n)
    steps = b.sdiv(b.add(n, b.sub(chunk, _i64(1))), chunk, name="ckpt.chunks")
    return chunk, tape_states(b, state, b.mul(chunk, per), reserve), steps


def tape_states(b: IRBuilder, state, tape, reserve: int):
    """The states of ``state`` bytes that ``tape`` bytes take, at least ``reserve``."""
    state1 = _max(b, state, _i64(1))
    states = b.sdiv(b.add(tape, b.sub(state1, _i64(1))), state1)
    return _max(b, states, _i64(reserve))


def chunk_range(b: IRBuilder, k, chunk, n):
    """The iterations of chunk ``k`` of a loop of ``n`` in chunks of ``chunk``: at least 1."""
    return _max(b, _min(b, chunk, b.sub(n, b.mul(k, chunk))), _i64(1))


def trip_count(b: IRBuilder, c, refuse):
    """The iterations of the rotated loop counted by ``c`` (at least one: it is entered);
    ``refuse(why, hint)`` makes the error for a count it cannot take."""
    start, bound, step = c.start, c.bound, c.step
    if start.type != T.i64:
        start, bound = b.sext(start, T.i64), b.sext(bound, T.i64)
    distance = b.sub(bound, start)
    pred = c.predicate
    extra = 1 - int(c.uses_next)
    if pred in ("sle", "ule", "sge", "uge"):
        if abs(step) != 1:
            raise refuse("counts with <= and a stride", hint="count with <")
        extra += 1
    if pred == "ne" or abs(step) == 1:
        runs = b.sdiv(distance, _i64(step)) if abs(step) != 1 else (
            distance if step == 1 else b.sub(_i64(0), distance))
    else:  # ceil(distance / step)
        adjust = step - 1 if step > 0 else step + 1
        runs = b.sdiv(b.add(distance, _i64(adjust)), _i64(step))
    runs = b.add(runs, _i64(extra))
    return b.select(b.icmp("slt", runs, _i64(1)), _i64(1), runs, name="ckpt.steps")


class _Unknown(Exception):
    pass


def _unknown(why: str, hint: str):
    return _Unknown(why)


def iteration_tape(b: IRBuilder, loop, own: int, inner):
    """The bytes one iteration of ``loop`` keeps on the unbudgeted derivative's tape, an i64
    at ``b`` (before the loop): ``own`` bytes of its own, and for each loop inside it that
    caches (``inner``: ``(header name, bytes an iteration of it caches)``) those bytes times
    its iterations in one iteration of ``loop``, the product of its trip count and those of
    the loops between, each an upper bound known before ``loop``. None where one is not
    (``inner`` None: the derivative keeps some of it otherwise)."""
    if inner is None:
        return None
    loops, stack = {}, list(loop.children)
    while stack:
        lp = stack.pop()
        loops[lp.header.name] = lp
        stack += lp.children
    total = _i64(own)
    for name, size in inner:
        lp, count = loops.get(name), _i64(1)
        if lp is None:
            return None
        while lp is not loop:
            c = lp.trip_count
            if c is None or not (loop.is_invariant(c.start) and loop.is_invariant(c.bound)):
                return None
            try:
                count = b.mul(count, trip_count(b, c, _unknown))
            except _Unknown:
                return None
            lp = lp.parent
        total = b.add(total, b.mul(count, _i64(size)))
    return total
