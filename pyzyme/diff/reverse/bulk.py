"""Loop caches filled by one copy as each run of the loop starts, not a store per iteration.

A loop that walks an array it does not write keeps each element it reads for the reverse sweep
when something after the loop overwrites the array: the rate loops of a Runge-Kutta step
(``k[i] = x[i] * tmp[i - 1]``, ``tmp`` overwritten by the next stage). A store per iteration
into the loop's cache puts a second store stream, to memory not in the first-level cache, into
the primal's loop: GradBench's ode (n = 1000, s = 10) spent 37% of its gradient's time in its
four rate loops, three times the primal's time in them. Where the run's reads are all known as
it starts, one ``llvm.memcpy`` of the elements it will read, at its entry, fills the same cells
of the same cache (the reverse sweep reads them as before); the C library copies a block of
elements at a fraction of the stores' cost, and the loop is the primal's again.

The copy is made (:func:`plan`, then :func:`fill` once capacities are settled) for a load that
reads memory nothing in its loop may write, runs on every iteration (its block dominates the
only latch, the only exit), at an address one element further on each (a GEP chain over the
loop's induction variable, which steps by one); the loop's trip count is known as it starts
and its caches are sized before it runs (:meth:`~pyzyme.diff.reverse.control.ReverseControl.
finalize`). Otherwise the load is cached by a store per iteration, as any value.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.overwrite import may_alias, written_pointers
from pyzyme.diff.context import ReverseContext
from pyzyme.diff.memory_calls import memcpy
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Value, const_int

__all__ = ["BulkCopy", "plan", "fill"]


@dataclass
class BulkCopy:
    """A cached load whose cache a copy at each entry of ``loop`` fills: ``fv`` is its
    forward-sweep copy, ``load`` the primal load, ``cache`` its cache."""

    fv: I.Load
    load: I.Load
    cache: object
    loop: object


def plan(st: ReverseContext, fv: I.Instruction, cache) -> BulkCopy | None:
    """A :class:`BulkCopy` for forward value ``fv`` kept in ``cache``, if its cache can be
    filled by a copy per run of its loop (see the module docstring); else None."""
    if fv.opcode != "load" or cache.loop is None or cache.outer is not None:
        return None
    # Not where shadows may be primals at run time, in parallel bodies, in split pairs, or in
    # code a later round differentiates (C's nested derivatives): they keep the stores.
    if st.runtime or st.sig.shared_adjoints or st.sig.split or st.generator.later_round:
        return None
    load = st.origin_load.get(fv)
    if load is None or load.volatile or load.ordering:
        return None
    loop = st.loops.loop_of(load.parent)
    if loop is not cache.loop:
        return None
    tc = loop.trip_count
    if tc is None or not tc.exact or tc.step != 1 or len(loop.latches) != 1:
        return None
    latch = loop.latches[0]
    if list(loop.exiting) != [latch] or not st.doms.dominates(load.parent, latch):
        return None
    size = sizeof(load.type)
    if size <= 0 or _stride(loop, load.pointer, tc.induction.phi, 8) != size:
        return None
    written = st.written.get(loop)
    if written is None:
        written = st.written[loop] = [w for block in loop.blocks
                                      for inst in block.instructions
                                      for w in written_pointers(inst)]
    if any(may_alias(load.pointer, w) for w in written):
        return None
    return BulkCopy(fv, load, cache, loop)


def _stride(loop, v: Value, phi, depth: int) -> int | None:
    """How far ``v`` moves per iteration of ``loop`` whose induction variable ``phi`` steps
    by one: in units for an integer, in bytes for a pointer; None where it is not such a
    linear function of ``phi`` (through adds, subtractions and one-index GEPs)."""
    if loop.is_invariant(v):
        return 0
    if v is phi:
        return 1
    if depth == 0 or not isinstance(v, I.Instruction):
        return None
    if v.opcode in ("add", "sub"):
        a, b = (_stride(loop, op, phi, depth - 1) for op in v.operands)
        if a is None or b is None:
            return None
        return a + b if v.opcode == "add" else a - b
    if isinstance(v, I.GetElementPtr) and len(v.operands) == 2:
        base, index = (_stride(loop, op, phi, depth - 1) for op in v.operands)
        if base is None or index is None:
            return None
        return base + index * sizeof(v.source_type)
    return None


def _at_start(st: ReverseContext, b: IRBuilder, loop, v: Value, phi) -> Value:
    """Forward value of primal ``v`` (a chain :func:`_stride` accepted) on the first
    iteration of a run of ``loop``, built at ``b`` before the run starts."""
    if loop.is_invariant(v):
        return st.fwd_value(v)
    if v is phi:
        return st.fwd_value(loop.trip_count.induction.start)
    clone = st.fwd_value(v).copy_with([_at_start(st, b, loop, op, phi) for op in v.operands])
    return b.insert(clone, v.name)


def fill(st: ReverseContext, copy: BulkCopy, b: IRBuilder, runs: Value) -> None:
    """At ``b``, where a run of ``copy.loop`` of ``runs`` header runs starts with its caches
    sized for it: copy what the load will read on each iteration into the cells of the
    cache those iterations are numbered by (its counter's value now, onwards)."""
    loop, cache = copy.loop, copy.cache
    size = sizeof(copy.load.type)
    first = _at_start(st, b, loop, copy.load.pointer, loop.trip_count.induction.phi)
    count = b.load(T.i64, st.tape.counter(loop).fwd)
    dest = b.gep(cache.type, b.load(T.ptr, cache.slot.fwd), [count], ("inbounds",),
                 name=f"{cache.name}.run")
    memcpy(st.module, b, dest, first, b.mul(runs, const_int(T.i64, size)))
