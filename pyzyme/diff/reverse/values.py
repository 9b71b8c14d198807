"""Forward values in the reverse sweep: recomputed where legal and cheap (pure arithmetic,
induction variables from loop counters, loads of memory nothing overwrites, merge phis by
select), cached otherwise, once per iteration of the innermost loop the value varies in (or,
for a value repeating on every iteration of an outermost loop, once per iteration of the inner
loop within one iteration of that one).

A mixin of :class:`~pyzyme.diff.reverse.generator.ReverseGenerator`.
"""

from __future__ import annotations

from pyzyme.analysis.forwarding import store_forwarding
from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.overwrite import (
    identified_object,
    may_alias,
    pure_call,
    underlying_object,
    written_pointers,
)
from pyzyme import naming
from pyzyme.diff.context import ReverseContext
from pyzyme.diff.reverse import bulk
from pyzyme.diff.reverse.inductions import CountedSum, ShiftInduction
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import PURE, SPECULATABLE
from pyzyme.ir.values import Argument, Constant, ConstantInt, Value, const_int
from pyzyme.rules import spec

__all__ = ["ReverseValues", "incoming_value"]

#: Opcodes whose adjoint reads none of its operands' values (only a select's condition).
_PASSES_ADJOINTS = frozenset(("fadd", "fsub", "fneg", "phi", "select", "freeze",
                              "insertvalue", "extractvalue"))


class ReverseValues:
    """Makes forward values available in the reverse sweep (see the module docstring)."""

    def avail(self, st: ReverseContext, fv: Value) -> Value:
        """Forward value ``fv`` where the reverse sweep now is: recomputed or cached."""
        if isinstance(fv, Argument):
            return st.rev_args[fv]
        if not isinstance(fv, I.Instruction):
            return fv
        v = st.rev_fixed.get(fv)  # made in the reverse function's entry (a tape room)
        if v is not None:
            return v
        v = st.memo.get(fv)
        if v is None:
            v = st.memo[fv] = self._materialize(st, fv)
            st.rev_origin.setdefault(v, fv)
        return v

    def _materialize(self, st: ReverseContext, fv: I.Instruction) -> Value:
        block = st.origin[fv.parent]
        loop = st.loops.loop_of(block)
        iv = st.inductions.get(fv)
        b = st.rb
        if iv is not None and isinstance(iv[1], CountedSum):
            summed = self._counted_sum(st, iv[0], iv[1], fv.name)
            if summed is not None:
                return summed
            iv = None   # where its inner loop's runs cannot be counted: cached as any phi
        if iv is not None:
            iv_loop, induction = iv
            k = b.sub(self.iteration(st, iv_loop), self.loop_start(st, iv_loop))
            start = st.primal(induction.start)
            if k.type != start.type:
                k = b.trunc(k, start.type)
            if isinstance(induction, ShiftInduction):
                return induction.value_at(b, start, k, fv.name)
            return b.add(start, b.mul(k, const_int(start.type, induction.step)),
                         name=fv.name)
        if isinstance(fv, I.Phi) and loop is not None:
            merged = self._merged_phi(st, fv, block)
            if merged is not None:
                return merged
        if loop is not None and st.current is not None and not loop.contains(st.current) \
                and not self._invariant_in(st, fv, loop, 8):
            return self._exit_value(st, fv, loop)
        # Outside loops a stack slot costs nothing in the combined function; in a split pair
        # the reverse function gets its own arguments (and shadows: its result slot's seed),
        # so what is computed from them is computed again there rather than carried over.
        if (loop is not None or st.sig.split) and self._can_recompute(st, fv) \
                and not (loop is not None and (self._keeps_comparison(st, fv, loop)
                                               or self._keeps_library_result(st, fv, loop)
                                               or self._cheaper_cached(st, fv, loop))):
            clone = fv.copy_with([self.avail(st, op) for op in fv.operands])
            return b.insert(clone, fv.name)
        if fv.opcode == "load":
            forwarded = self._forwarded(st, fv)
            if forwarded is not None:
                return forwarded
        cache = st.caches.get(fv)
        if cache is None:
            # A value the same on every iteration of its loops is kept once per iteration of
            # the innermost loop it does vary in (stored redundantly, indexed there); one
            # that repeats on every iteration of an outer loop, once per iteration of that.
            loop = self._varies_in(st, fv, loop)
            outer = self._repeats_in(st, fv, loop) if loop is not None else None
            constant = st.unvaried(fv)
            if outer is None:
                cache = st.tape.cache(fv.type, loop, fv.name or "value", constant)
            else:
                cache = st.tape.repeated(fv.type, loop, outer, self._repeat_base(st, loop, outer),
                                         fv.name or "value", constant)
            st.caches[fv] = cache
            self._keep(st, fv, cache)
        return st.tape.load(b, cache, self._cache_index(st, b, cache), name=fv.name)

    def _keeps_comparison(self, st: ReverseContext, fv: I.Instruction, loop) -> bool:
        """Whether comparison ``fv`` (in ``loop``) is better cached than computed again: one
        of the doubles it compares would be cached for it alone (not at hand here, and read
        by nothing else of the reverse sweep), where the i1 takes one byte. ``min(closest,
        distance)`` over centroids: the select's adjoint needs only the comparison's result,
        and kmeans taped both distances per point and centroid (and, forward over reverse,
        their tangents too)."""
        if not _kept_comparison(fv) or st.generator.later_round:
            # Code a later round differentiates again (C's nested __enzyme_autodiff) keeps
            # the doubles: that round types the bytes a grown i1 cache copies as unknown.
            return False
        return any(not self._at_hand(st, op, loop, 4) and not self._reads_own_value(op)
                   and not self._read_by_reverse(st, op, fv, set(), 8, loop)
                   for op in fv.operands)

    def _keeps_library_result(self, st: ReverseContext, fv: I.Instruction, loop) -> bool:
        """Whether ``fv``, a call of a function its row marks costly (``exp``, ``log``,
        ``sin``: tens of instructions, where a tape slot is a store and a load), is kept
        rather than called again, without changing how the tape grows: where the loop whose
        iterations would index it keeps values per iteration already, where it would be kept
        for one iteration of an outer loop only, where that loop is outermost and runs at
        most as many times as an array argument has elements along one axis (LogSumExp's
        ``exp(x[i] - top)``), or where computing it again would keep its operands per
        iteration instead. A loop with no tape otherwise, over a count that is no array's
        (``for i in range(n): s += sin(x * i)``) or nested in another (pairs of points),
        keeps running in constant memory: there the call is made again."""
        callee = fv.called_function if isinstance(fv, I.Call) else None
        row = self.rules.lookup(callee.name, "call") if callee is not None else None
        if not (isinstance(row, spec.Partials) and row.costly):
            return False
        home = self._varies_in(st, fv, loop)
        if home is None:
            return True                               # one value for the whole call
        state = st.tape.loops.get(home)
        if state is not None and state.caches:
            return True
        if self._repeats_in(st, fv, home) is not None:
            return True
        if home.parent is None and self._within_an_axis(st, home):
            return True
        # Computing it again would keep what it is computed from per iteration (an operand
        # loaded from memory the loop overwrites: GMM's exp(main[k] - top)): keep it instead.
        leaves: set = set()
        if st.current is not None and loop.contains(st.current):
            self._tree_of(st, fv, loop, {fv}, leaves, 6)
        return bool(leaves)

    @staticmethod
    def _within_an_axis(st: ReverseContext, loop) -> bool:
        """Whether ``loop`` runs at most as many times as some array argument's extent along
        one axis: counting up by one from a non-negative constant while below that extent
        (less a constant)."""
        tc = loop.trip_count
        if tc is None or tc.step != 1 or tc.predicate not in ("slt", "ult", "ne") \
                or not isinstance(tc.start, ConstantInt) or tc.start.value < 0:
            return False
        bound = tc.bound
        if isinstance(bound, I.BinaryOp) and bound.opcode == "add" \
                and isinstance(bound.operands[1], ConstantInt) and bound.operands[1].value <= 0:
            bound = bound.operands[0]
        return isinstance(bound, Argument) and bound.function is st.old \
            and bound.index in st.generator.axis_extents.get(st.old, ())

    def _cheaper_cached(self, st: ReverseContext, fv: I.Instruction, loop) -> bool:
        """Whether float value ``fv`` (in ``loop``, where the reverse sweep is; arithmetic or a
        call with a rule, as :meth:`_can_recompute` allows) is better cached than computed
        again: computing it again would cache, per iteration of
        ``loop``, more bytes of values that change there (overwritten loads, header phis) than
        ``fv`` takes, values the reverse sweep reads for nothing else. A stencil overwriting
        ``u`` in place, ``u[i] += c * (left - 2 u[i] + u[i + 1])``: the adjoint of ``c`` reads
        the sum, one double, where its three operands (the old ``u[i]`` and ``u[i + 1]`` and
        the carried ``left``) were three. False where unsure."""
        if fv.opcode == "load" or not fv.type.scalar.is_float or fv in st.inductions \
                or st.current is None or not loop.contains(st.current):
            return False
        tree: set = {fv}
        leaves: set = set()
        if not self._tree_of(st, fv, loop, tree, leaves, 6) or not leaves:
            return False
        if any(self._read_outside(st, v, tree, set(), 8) for v in tree if v is not fv):
            return False
        own = sum(sizeof(v.type) for v in leaves
                  if not self._read_outside(st, v, tree, set(), 8))
        return own > sizeof(fv.type)

    def _tree_of(self, st: ReverseContext, fv: I.Instruction, loop, tree: set, leaves: set,
                 depth: int) -> bool:
        """Collect into ``tree`` the instructions of ``loop`` that computing ``fv`` again would
        compute too (arithmetic, calls with a rule), and into ``leaves`` the values it would
        cache per iteration of ``loop`` (loads of memory overwritten later, phis of its
        header); False where some operand is neither (another call, a merge phi, a load
        forwarded from a store), or too deep."""
        for op in fv.operands:
            if op in tree or op in leaves or self._at_hand(st, op, loop, 0):
                continue
            block = st.origin.get(op.parent)
            if block is None or not loop.contains(block):
                return False
            if isinstance(op, I.Phi):
                if block is not loop.header:
                    return False
                leaves.add(op)
            elif op.opcode == "load":
                if self._can_recompute(st, op):
                    continue
                if st.forwarding is None:
                    st.forwarding = store_forwarding(st.old, st.loops, st.doms)
                primal = st.origin_load.get(op)
                if primal is None or st.forwarding.get(primal) is not None:
                    return False
                leaves.add(op)
            elif (op.opcode in PURE or isinstance(op, I.Call)) and depth > 0 \
                    and self._can_recompute(st, op):
                tree.add(op)
                if not self._tree_of(st, op, loop, tree, leaves, depth - 1):
                    return False
            else:
                return False
        return True

    def _read_outside(self, st: ReverseContext, fv: Value, tree: set, seen: set,
                      depth: int) -> bool:
        """Whether the reverse sweep may read forward value ``fv`` other than to compute the
        values of ``tree`` again: a use whose adjoint reads it (a product's other factor,
        where that factor may be active; in ``tree`` too), or a use outside ``tree`` whose own
        value may be read; True where unsure."""
        for user in fv.users:
            if user in seen:
                continue
            if isinstance(user, I.Store) and user.operands[1] is not fv or \
                    isinstance(user, I.Ret):
                continue
            if depth == 0 or self._adjoint_reads(user, fv):
                return True
            if user in tree:
                continue
            seen.add(user)
            if self._read_outside(st, user, tree, seen, depth - 1):
                return True
        return False

    def _adjoint_reads(self, user: I.Instruction, fv: Value) -> bool:
        """Whether the adjoint of ``user`` may read its operand ``fv`` (True where unsure):
        not a sum's, a phi's, a cast's; a product's where the other factor is a constant."""
        if user.opcode in _PASSES_ADJOINTS:
            return isinstance(user, I.Select) and user.operands[0] is fv
        if isinstance(user, I.Call):
            callee = user.called_function
            row = self.rules.lookup(callee.name, "call") if callee is not None else None
            operands = list(user.args)
        elif user.opcode in PURE:
            row = self.rules.lookup(user.opcode, "opcode")
            operands = user.operands
        else:
            return True
        if isinstance(row, spec.Linear):
            return False
        if not isinstance(row, spec.Partials) or len(row.partials) != len(operands):
            return True
        for p, operand in zip(row.partials, operands):
            if p is None or isinstance(operand, Constant):
                continue   # no adjoint passed to a constant
            places = p.placeholders()
            if "ret" in places or any(operands[k] is fv for k in places):
                return True
        return False

    def _reads_own_value(self, fv: Value) -> bool:
        """Whether the adjoint of ``fv`` may read ``fv`` itself (a quotient, ``sqrt``: their
        partials are written with the result); True where unsure."""
        if isinstance(fv, I.CallBase):
            callee = fv.called_function
            row = self.rules.lookup(callee.name, "call") if callee is not None else None
            if not isinstance(row, spec.Partials):
                return True
        else:
            row = self.rules.lookup(fv.opcode, "opcode")
            if not isinstance(row, spec.Partials):
                return False
        return any(p is not None and "ret" in p.placeholders() for p in row.partials)

    def _at_hand(self, st: ReverseContext, fv: Value, loop, depth: int) -> bool:
        """Whether forward value ``fv``, used in ``loop``, is available where the reverse
        sweep is without a cache per iteration of ``loop`` (a constant, argument, induction
        variable, something cached already or once per iteration of a loop around
        ``loop``, or recomputed from such); False where unsure."""
        if not isinstance(fv, I.Instruction) or fv in st.memo or fv in st.caches \
                or ("exit", fv) in st.caches or fv in st.inductions:
            return True
        block = st.origin.get(fv.parent)
        if block is None or st.current is None:
            return False
        own = self._varies_in(st, fv, st.loops.loop_of(block))
        if own is None or (own is not loop and own.contains(loop.header)):
            return True
        if depth == 0 or isinstance(fv, I.Phi) or not own.contains(st.current) \
                or not self._can_recompute(st, fv):
            return False
        return all(self._at_hand(st, op, loop, depth - 1) for op in fv.operands)

    def _read_by_reverse(self, st: ReverseContext, fv: Value, skip, seen: set,
                         depth: int, loop) -> bool:
        """Whether the reverse sweep may need forward value ``fv`` of ``loop`` on each of its
        iterations other than for ``skip``: some use of it in ``loop``, other than stores of
        it and returns, is not one whose adjoint passes adjoints through without reading its
        operands (a sum, a phi, a select's arm) or is one whose own value may be needed; True
        where unsure. Other comparisons of ``fv`` do not count: by the same rule they are
        cached too (``np.minimum`` compares twice, and tests for NaN). Nor do uses after the
        loop: the reverse sweep reads there the value the loop left, kept once a run
        (:meth:`_exit_value`; LogSumExp's maximum, then read by its sum of exponentials)."""
        for user in fv.users:
            if user is skip or user in seen:
                continue
            if isinstance(user, I.Store) and user.operands[1] is not fv or \
                    isinstance(user, I.Ret) or _kept_comparison(user):
                continue
            block = st.origin.get(user.parent) if isinstance(user, I.Instruction) else None
            if block is not None and not loop.contains(block):
                continue
            if depth == 0 or user.opcode not in _PASSES_ADJOINTS or (
                    isinstance(user, I.Select) and user.operands[0] is fv):
                return True
            seen.add(user)
            if self._read_by_reverse(st, user, skip, seen, depth - 1, loop):
                return True
        return False

    def _forwarded(self, st: ReverseContext, fv: I.Load) -> Value | None:
        """Load ``fv`` of what a loop before it stored (:mod:`pyzyme.analysis.forwarding`),
        computed again as that loop computed it, for the index the load reads; None where the
        reverse sweep is outside the load's loop or the stored value cannot be computed again
        (it reads memory that changes before the reverse sweep)."""
        if st.forwarding is None:
            st.forwarding = store_forwarding(st.old, st.loops, st.doms)
        primal = st.origin_load.get(fv)
        f = st.forwarding.get(primal) if primal is not None else None
        if f is None or st.current is None:
            return None
        if not st.loops.loop_of(f.loaded.parent).contains(st.current):
            return None
        if not self._rebuildable(st, f.store.operands[0], f):
            return None
        return self._rebuild(st, f.store.operands[0], f)

    def _rebuildable(self, st: ReverseContext, v: Value, f) -> bool:
        """Whether :meth:`_rebuild` can compute ``v`` where the reverse sweep is: every load
        on the way reads memory that keeps its contents until then."""
        if v is f.stored or not isinstance(v, I.Instruction) or not f.loop.contains(v.parent):
            return True
        if v.opcode == "load" and not self._can_recompute(st, st.fwd_value(v)):
            return False
        return all(self._rebuildable(st, op, f) for op in v.operands)

    def _rebuild(self, st: ReverseContext, v: Value, f) -> Value:
        """Primal value ``v`` of the forwarding store's loop, on its iteration ``f.stored ==
        f.loaded``, where the reverse sweep is."""
        if v is f.stored:
            return st.primal(f.loaded)
        if not isinstance(v, I.Instruction) or not f.loop.contains(v.parent):
            return st.primal(v)
        fwd = st.fwd_value(v)
        clone = fwd.copy_with([self._rebuild(st, op, f) for op in v.operands])
        return st.rb.insert(clone, fwd.name)

    def _cache_index(self, st: ReverseContext, b: IRBuilder, cache, forward: bool = False):
        """Where ``cache`` holds the value of the iteration the reverse sweep (or ``forward``
        sweep, builder ``b``) is in."""
        index = st.fidx.get(cache.loop) if forward else self.iteration(st, cache.loop)
        if cache.outer is None:
            return index
        at = st.fidx[cache.outer] if forward else self.iteration(st, cache.outer)
        return b.sub(index, st.tape.load(b, cache.base, at, forward=forward))

    def _repeat_base(self, st: ReverseContext, loop, outer):
        """The cache of ``loop``'s counter as each iteration of ``outer`` began (stored at
        the top of ``outer``'s body): where :meth:`TapeCache.repeated` caches count from."""
        key = ("repeat base", loop, outer)
        base = st.caches.get(key)
        if base is None:
            base = st.caches[key] = st.tape.cache(
                T.i64, outer, naming.repeat_base(loop.header.name, outer.header.name))
            fb = IRBuilder()
            fb.position_at_start(st.last[outer.header])
            count = fb.load(T.i64, st.tape.counter(loop).fwd)
            st.tape.store(fb, base, count, st.fidx[outer])
        return base

    def _counted_sum(self, st: ReverseContext, loop, induction: CountedSum, name: str):
        """Header phi ``induction`` of ``loop`` (see :class:`CountedSum`) where the reverse
        sweep is in a run of its inner loop: its start, plus the iterations of the inner loop
        since ``loop``'s run began (the inner loop's counter when this run of it began, less
        its counter when ``loop``'s run began: kept once per run of ``loop``). Elsewhere None."""
        inner = induction.inner
        if st.current is None or not inner.contains(st.current):
            return None
        key = ("sum base", loop, inner)
        base = st.caches.get(key)
        if base is None:
            base = st.caches[key] = st.tape.cache(
                T.i64, loop.parent, naming.sum_base(inner.header.name, loop.header.name))
            for fb in st.entering(loop):
                count = fb.load(T.i64, st.tape.counter(inner).fwd)
                st.tape.store(fb, base, count, st.fidx.get(loop.parent))
        b = st.rb
        since = b.sub(self.loop_start(st, inner),
                      st.tape.load(b, base, self.iteration(st, loop.parent)))
        start = st.primal(induction.start)
        if since.type != start.type:
            since = b.trunc(since, start.type)
        return b.add(start, since, name=name)

    def _keep(self, st: ReverseContext, fv: I.Instruction, cache) -> None:
        """Store ``fv`` into ``cache`` in the forward sweep where it is made (a header phi: in
        its loop's body, after the iteration count), at the index of ``cache``'s loop; or,
        for a load that :func:`~pyzyme.diff.reverse.bulk.plan` accepts, leave it to one copy
        per run of its loop (made by ``finalize``, or a store per iteration there after all)."""
        copy = bulk.plan(st, fv, cache)
        if copy is not None:
            st.bulk.append(copy)
            return
        self.keep_each(st, fv, cache)

    def keep_each(self, st: ReverseContext, fv: I.Instruction, cache) -> None:
        """The store per iteration of :meth:`_keep`."""
        fb = IRBuilder()
        if isinstance(fv, I.Phi):
            block = st.origin[fv.parent]
            own = st.loops.loop_of(block)
            fb.position_at_start(st.last[block] if own is not None and own.header is block
                                 else fv.parent)
        elif isinstance(fv, I.Invoke):  # defined on its normal edge only
            normal = fv.normal_dest
            if len(normal.predecessors) != 1:
                raise UnsupportedError(f"{st.where} needs the result of an invoke whose normal "
                                       f"destination has other predecessors: {fv}")
            fb.position_at_start(normal)
        else:
            fb.position_after(fv)
        st.tape.store(fb, cache, fv, self._cache_index(st, fb, cache, forward=True))

    def _exit_value(self, st: ReverseContext, fv: I.Instruction, loop) -> Value:
        """``fv``, defined in ``loop``, where the reverse sweep is outside it: the value its last
        iteration left (a loop's result, such as a sum). Kept once per iteration of the loops
        around both, overwritten on each iteration of ``loop``: recomputing it here would keep
        what it is computed from on every iteration instead.

        One cache per loop around both: a value read both after the loop within an outer
        loop (each time step's array, where jump threading split the time loop in two) and
        after the outer loop (the last step's) needs one per outer iteration for the first
        and once for the second; one slot for both left every step the last step's array."""
        outer = loop.parent
        while outer is not None and not outer.contains(st.current):
            outer = outer.parent
        exits = st.caches.setdefault(("exit", fv), {})
        cache = exits.get(outer)
        if cache is None:
            cache = exits[outer] = st.tape.cache(
                fv.type, self._varies_in(st, fv, outer), f"{fv.name or 'value'}.exit",
                st.unvaried(fv))
            self._keep(st, fv, cache)
        return st.tape.load(st.rb, cache, self.iteration(st, cache.loop), name=fv.name)

    def _varies_in(self, st: ReverseContext, fv: I.Instruction, loop):
        """The innermost of ``loop`` and its parents in which forward value ``fv`` may differ
        between iterations (None: it is the same throughout the call)."""
        while loop is not None and self._invariant_in(st, fv, loop, 8):
            loop = loop.parent
        return loop

    def _invariant_in(self, st: ReverseContext, fv: Value, loop, depth: int,
                      repeating: bool = False) -> bool:
        """Whether ``fv`` has one value across the iterations of ``loop`` (a pure function of
        values defined outside it, or a load of memory nothing in it writes). ``repeating``:
        whether it is the same at the same point of every iteration of ``loop``, where an
        induction variable of a loop inside it starting from such a value is too, and so is a
        pure intrinsic of such values."""
        if not isinstance(fv, I.Instruction):
            return True
        origin = st.origin.get(fv.parent)
        if origin is None or not loop.contains(origin):
            return True
        if depth == 0:
            return False
        iv = st.inductions.get(fv)
        if iv is not None or isinstance(fv, I.Phi):
            return repeating and iv is not None and self._repeating_induction(st, *iv, loop,
                                                                              depth)
        if fv.opcode == "load":
            primal = st.origin_load.get(fv)
            if primal is None or fv.volatile or self._written_in(st, primal.pointer, loop):
                return False
            return self._invariant_in(st, fv.operands[0], loop, depth - 1, repeating)
        if isinstance(fv, I.CallBase):
            return repeating and pure_call(fv) and all(
                self._invariant_in(st, a, loop, depth - 1, repeating) for a in fv.args)
        if fv.opcode not in PURE:
            return False
        return all(self._invariant_in(st, op, loop, depth - 1, repeating) for op in fv.operands)

    def _repeating_induction(self, st: ReverseContext, loop, induction, top, depth: int) -> bool:
        """Whether induction variable ``induction`` of ``loop`` repeats on every iteration of
        ``top`` (see :meth:`_invariant_in`): ``loop`` is inside ``top``, and a counted sum's
        inner loop runs as many times on each."""
        if loop is top:
            return False
        if isinstance(induction, CountedSum) and not (
                induction.inner.parent is loop
                and self._uniform_trip_count(st, induction.inner, top)):
            return False
        return self._uniform(st, st.fwd_value(induction.start), top, depth - 1)

    def _uniform(self, st: ReverseContext, fv: Value, top, depth: int = 12) -> bool:
        """Whether ``fv`` is the same at the same point of every iteration of ``top``."""
        return self._invariant_in(st, fv, top, depth, repeating=True)

    def _repeats_in(self, st: ReverseContext, fv: I.Instruction, loop):
        """The outermost loop around ``loop`` on each iteration of which ``loop`` runs the
        same iterations in the same order with ``fv`` the same on each (a parameter read in
        a loop over data points: ``icf[k, idx]`` inside ``for point: for k: for i: for j``);
        None where there is none. ``fv`` need then be kept for one iteration of it only.

        Outermost, because such a loop runs at most once per call: one nested in another
        would need its values kept per iteration of the one around it."""
        top = loop
        while top.parent is not None:
            top = top.parent
        if top is loop or not self._same_runs(st, loop, top):
            return None
        return top if self._uniform(st, fv, top) else None

    def _same_runs(self, st: ReverseContext, loop, top) -> bool:
        """Whether every iteration of ``top`` runs ``loop`` through the same iterations:
        the trip counts of ``loop`` and of the loops between are exact and the same each
        time, and so is every branch deciding whether they run (in the bodies of those loops
        and of ``top``, outside other inner loops; such a loop has one exit target, so what
        it decides inside does not matter). A branch back to ``top``'s header or out of it
        may differ: an iteration of ``top`` cut short runs a prefix of the others."""
        key = (loop, top)
        known = st.same_runs.get(key)
        if known is not None:
            return known
        chain = []
        m = loop
        while m is not top:
            chain.append(m)
            m = m.parent
        ok = all(self._uniform_trip_count(st, m, top) for m in chain)
        for p in chain[1:] + [top]:
            if not ok:
                break
            for child in p.children:
                if child not in chain and len({s for blk in child.blocks
                                               for s in blk.terminator.successors
                                               if not child.contains(s)}) > 1:
                    ok = False
            for blk in p.blocks:
                if not ok or any(c.contains(blk) for c in p.children):
                    continue
                term = blk.terminator
                succ = term.successors
                if len(set(succ)) < 2:
                    continue
                if not isinstance(term, (I.Branch, I.Switch)):
                    ok = False
                elif any(t is p.header or not p.contains(t) for t in succ) and (
                        p is top or blk in p.exiting):
                    continue     # top's own exits and back edges; p's counted exit
                else:
                    ok = self._uniform(st, st.fwd_value(term.operands[0]), top)
        st.same_runs[key] = ok
        return ok

    def _uniform_trip_count(self, st: ReverseContext, loop, top) -> bool:
        """Whether ``loop`` runs the same number of times wherever it runs inside ``top``."""
        tc = loop.trip_count
        return (tc is not None and tc.exact
                and self._uniform(st, st.fwd_value(tc.start), top)
                and self._uniform(st, st.fwd_value(tc.bound), top))

    def _written_in(self, st: ReverseContext, pointer: Value, loop) -> bool:
        """Whether anything in ``loop`` may write where ``pointer`` points."""
        written = st.written.get(loop)
        if written is None:  # asked once per cached value and loop level: collect once
            written = st.written[loop] = [w for block in loop.blocks
                                          for inst in block.instructions
                                          for w in written_pointers(inst)]
        return any(may_alias(pointer, w) for w in written)

    def object_of(self, st: ReverseContext, pointer: Value):
        """The distinct object (allocation, stack slot, ``noalias`` parameter, or the shadow of
        one) that ``pointer`` points into, seen through reverse-sweep copies; else None."""
        for _ in range(64):
            pointer = underlying_object(pointer)
            origin = st.rev_origin.get(pointer)
            if origin is None:
                break
            pointer = origin
        if isinstance(pointer, I.Alloca) and pointer.parent in (st.tape.fwd_entry,
                                                                 st.tape.rev_entry):
            return None  # pyzyme's own slots: promoted to registers anyway
        return pointer if identified_object(pointer) else None

    def _merged_phi(self, st: ReverseContext, fv: I.Phi, block) -> Value | None:
        """A phi of an if/else merge whose arms' values are safe to compute either way:
        ``select`` on the deciding branch's condition, nothing cached."""
        primal = next((p for p in block.phis if st.values.get(p) is fv), None)
        if primal is None:
            return None
        preds = list(dict.fromkeys(p for p in block.predecessors if p in st.last))
        decided = self.deciding_branch(st, block, preds)
        if decided is None:
            return None
        incoming = [st.fwd_value(incoming_value(primal, p)) for p in preds]
        if not all(self._speculatable(st, v, 4) for v in incoming):
            return None
        cond, true_index, false_index = decided
        return st.rb.select(st.primal(cond), self.avail(st, incoming[true_index]),
                            self.avail(st, incoming[false_index]), name=fv.name)

    def _speculatable(self, st: ReverseContext, fv: Value, depth: int) -> bool:
        """Whether computing ``fv`` where its block did not run is harmless (no loads, no
        division by a garbage zero): it is a constant, an argument, cached, or pure."""
        if not isinstance(fv, I.Instruction) or fv in st.caches or fv in st.inductions:
            return True
        if depth == 0 or isinstance(fv, I.Phi):
            return False
        if (fv.opcode in PURE and fv.opcode not in SPECULATABLE) or fv.opcode == "load" \
                or not self._can_recompute(st, fv):
            return False
        return all(self._speculatable(st, op, depth - 1) for op in fv.operands)

    def _can_recompute(self, st: ReverseContext, fv: I.Instruction) -> bool:
        known = st.recomputable.get(fv)
        if known is not None:
            return known
        op = fv.opcode
        if op in PURE:  # recomputed from its operands, as the primal computed it
            ok = True
        elif op == "load":
            origin = st.origin_load.get(fv)
            ok = (origin is not None and not fv.volatile and fv.ordering in (None, "")
                  and not st.overwrites.is_overwritten(origin)
                  and st.stable(origin.pointer))
        elif isinstance(fv, I.Call):
            callee = fv.called_function
            row = self.rules.lookup(callee.name, "call") if callee is not None else None
            # A pure intrinsic on integers (a bound's smax, usub.sat) has no row: as cheap.
            # Not in code a later round differentiates again (C's nested __enzyme_autodiff):
            # that round types the bytes of a grown cache holding the rest as unknown.
            ok = isinstance(row, (spec.Partials, spec.Reduction)) or (
                pure_call(fv) and not st.generator.later_round)
        else:
            ok = False
        st.recomputable[fv] = ok
        return ok


def _kept_comparison(inst) -> bool:
    """Whether ``inst`` is a comparison :meth:`ReverseValues._keeps_comparison` may cache."""
    return inst.opcode in ("fcmp", "icmp") and inst.type == T.i1


def incoming_value(phi: I.Phi, pred) -> Value:
    """The value ``phi`` takes when entered from block ``pred``."""
    for value, block in phi.incoming:
        if block is pred:
            return value
    raise UnsupportedError(f"phi {phi.ref} has no value for predecessor {pred.ref}")
