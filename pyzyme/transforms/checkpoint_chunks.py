"""Chunks of a checkpointed loop's iterations: what a step of its scheme runs.

A step of the Revolve scheme (:mod:`pyzyme.transforms.revolve`) is a chunk of consecutive
iterations (:func:`pyzyme.transforms.revolve.chunking` says why and how many): the step
function runs them as a loop of its own, so that its derivative tapes them as any loop (run
forward once, then reversed from its tape, which stays in cache) and the snapshots are taken at
chunk boundaries only. The chunk's length is decided at run time, from the state's bytes, what
one iteration's derivative tapes (:func:`iteration_tape`, where its inner loops' trip counts
are known before the loop, and what its allocations keep: :func:`kept_beside`) and the
budget's share; the step reads it and the loop's trip count from its inputs block.
"""

from __future__ import annotations

from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int
from pyzyme.rules import default_rules, spec
from pyzyme.transforms import revolve

__all__ = ["chunk_ir", "chunk_range", "trip_count", "iteration_tape", "kept_beside",
           "tape_states"]


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


def iteration_tape(b: IRBuilder, loop, own: int, inner, allocations=()):
    """The bytes one iteration of ``loop`` keeps on the unbudgeted derivative's tape, an i64
    at ``b`` (before the loop): ``own`` bytes of its own, and for each loop inside it that
    caches (``inner``: ``(header name, bytes an iteration of it caches)``) those bytes times
    its iterations in one iteration of ``loop``, the product of its trip count and those of
    the loops between, each an upper bound known before ``loop``. Each allocation the
    iteration makes (``allocations``: ``(call, operands whose product is its bytes)``) keeps
    its block and its shadow until the reverse sweep is past it: twice its bytes, as often
    as it runs in one iteration. None where a count or size is not known before ``loop``
    (``inner`` None: the derivative keeps some of it otherwise)."""
    if inner is None:
        return None
    loops, stack = {}, list(loop.children)
    while stack:
        lp = stack.pop()
        loops[lp.header.name] = lp
        stack += lp.children

    def runs(lp):   # how often loop lp's body runs in one iteration of ``loop``
        count = _i64(1)
        while lp is not loop:
            c = lp.trip_count
            if c is None or not (loop.is_invariant(c.start) and loop.is_invariant(c.bound)):
                raise _Unknown
            count = b.mul(count, trip_count(b, c, _unknown))
            lp = lp.parent
        return count

    total = _i64(own)
    try:
        for name, size in inner:
            if name not in loops:
                return None
            total = b.add(total, b.mul(runs(loops[name]), _i64(size)))
        for call, operands in allocations:
            if not all(loop.is_invariant(v) for v in operands):
                return None
            size = _i64(2)
            for v in operands:
                size = b.mul(size, v if v.type == T.i64 else b.zext(v, T.i64))
            lp = next((x for x in loops.values() if x.contains(call.parent) and not any(
                y.contains(call.parent) for y in x.children)), loop)
            total = b.add(total, b.mul(runs(lp), size))
    except _Unknown:
        return None
    return total


def kept_beside(loop) -> tuple[tuple, bool]:
    """What an iteration may keep that its loop's tape does not show: ``(allocations, calls)``.
    Each allocation (``(call, operands whose product is its bytes)``) keeps its block and its
    shadow until the reverse sweep; ``calls``: a call of a function with a body (its
    derivative's tape, kept per iteration, of a size nothing here bounds), a parallel launch
    (each row's tape), an allocation that may be resized, or releases with no allocation."""
    allocations, releases = [], False
    for block in loop.blocks:
        for inst in block.instructions:
            callee = inst.called_function if isinstance(inst, I.CallBase) else None
            if callee is None or callee.name.startswith("llvm."):
                continue
            # Numba's NRT_decref has a body in the module, and a rule, which the derivative
            # follows (a Mirror: the shadow's count with the primal's)
            row = default_rules().lookup(callee.name, "call")
            if row is None and not callee.is_declaration or isinstance(row, spec.ParallelFor):
                return (), True
            if isinstance(row, spec.Allocation):
                if row.resizable or not row.size_args:
                    return (), True
                allocations.append((inst, tuple(inst.args[k] for k in row.size_args)))
            releases = releases or row is not None
    # A count or free with no allocation of its own (a view's) defers a release each
    # iteration, which nothing here counts: bounded by the reserve, as a call's tape is.
    return tuple(allocations), releases and not allocations
