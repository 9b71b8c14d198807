"""Reverse mode's control flow: the reverse sweep visits the primal's blocks along reversed
edges of the path the forward sweep took (decided by recomputed branches, recorded
predecessors, or loop counters run back down), and finishes by returning the adjoints.

A mixin of :class:`~pyzyme.diff.reverse.generator.ReverseGenerator`.
"""

from __future__ import annotations

from pyzyme.analysis.activity import Activity
from pyzyme import naming
from pyzyme.transforms.alias_scopes import annotate
from pyzyme.diff.context import ReverseContext
from pyzyme.diff.reverse import bulk
from pyzyme.diff.reverse.launch_memory import launch_side
from pyzyme.diff.reverse.quiet import quiet_exits
from pyzyme.diff.reverse.values import incoming_value
from pyzyme.errors import error_context
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Undef, Value, const_int, const_null

__all__ = ["ReverseControl"]

# Loop tests whose trip count ``_runs`` computes exactly (with a step of one).
_COUNTED_PREDICATES = ("ne", "slt", "ult", "sle", "ule", "sgt", "ugt", "sge", "uge")


class ReverseControl:
    """Emits the reverse sweep's blocks and branches (see the module docstring)."""

    def reverse_block(self, st: ReverseContext, block) -> None:
        """The reverse sweep of primal ``block``: the adjoints of its instructions, last
        first, then the branch back to the block that entered it."""
        st.rb.position_at_end(st.rblocks[block])
        st.memo = {}
        st.current = block
        if block in st.doomed and block is not st.old.blocks[0]:
            # Only blocks that end in an error lead here, and no reverse sweep runs after
            # one: nothing to record on the way in (a landing pad's first instruction must be
            # the landingpad).
            st.rb.unreachable()
            return
        term = block.terminator
        if isinstance(term, I.Ret) and st.sig.return_active and term.value is not None:
            self.accumulate(st, term.value, st.dret)
        self.carried_begin(st, block)
        for inst in reversed(block.instructions[len(block.phis):]):
            if (inst is term and not isinstance(term, I.Invoke)) or block in st.doomed:
                continue
            with error_context("adjoint of", f"{inst}"):
                self.reverse_instruction(st, inst)
        self.carried_end(st, block)
        self._reverse_branch(st, block)

    def _reverse_branch(self, st: ReverseContext, block) -> None:
        b = st.rb
        if block is st.old.blocks[0]:
            self._finish(st)
            return
        preds = list(dict.fromkeys(p for p in block.predecessors if p in st.last))
        # Adjoints of phis: read (and cleared) before the edge decides where they go.
        dphis = [(phi, self.consume(st, phi)) for phi in block.phis if st.active(phi)]
        loop = next((lp for lp in st.loops.loops if lp.header is block), None)
        which = None
        if len(preds) > 1 and not (loop is not None and self._simple_header(loop, preds)):
            which = self._which_pred(st, block, preds)
        if loop is not None:
            count = st.tape.counter(loop).rev
            c = b.sub(b.load(T.i64, count), const_int(T.i64, 1))
            b.store(c, count)
            if which is None and len(preds) > 1:
                outside = next(p for p in preds if not loop.contains(p))
                inside = next(p for p in preds if loop.contains(p))
                first = b.icmp("eq", c, self.loop_start(st, loop))
                out = self._leave(st, loop, self._edge(st, block, outside, dphis))
                b.cbranch(first, self.carried_leave(st, loop, out),
                          self._edge(st, block, inside, dphis))
                return
        edges = [self._edge(st, block, p, dphis) for p in preds]
        if loop is not None:
            edges = [self.carried_leave(st, loop, self._leave(st, loop, e))
                     if not loop.contains(p) else e for p, e in zip(preds, edges)]
        if which is None:
            b.br(edges[0])
            return
        if which.type == T.i1:
            b.cbranch(which, edges[1], edges[0])
            return
        b.switch(which, edges[0], [(const_int(T.i32, k), e) for k, e in enumerate(edges)][1:])

    def _leave(self, st: ReverseContext, loop, target):
        """``target``, through a block that pops the loop's start when it has one."""
        stack = st.starts.get(loop)
        if stack is None or loop.parent is None:
            return target
        block = st.rev.append_block(f"{st.rblocks[loop.header].name}.leave")
        b = IRBuilder(block)
        st.tape.pop(b, stack)
        b.br(target)
        return block

    def _which_pred(self, st: ReverseContext, block, preds) -> Value:
        """The index (in ``preds``) of the predecessor that entered ``block``: from the branch
        that decided it when that branch's condition can be had, else recorded."""
        decided = self.deciding_branch(st, block, preds)
        if decided is None:
            return self._recorded_pred(st, block, preds)
        cond, true_index, _ = decided
        test = st.primal(cond)
        return test if true_index == 1 else st.rb.xor(test, const_int(T.i1, 1))

    def deciding_branch(self, st: ReverseContext, block, preds):
        """``(cond, index if true, index if false)`` when ``block``'s immediate dominator ends
        in a conditional branch whose two sides lead to different predecessors of ``block``
        (an if/else diamond, possibly with loops inside its arms)."""
        if len(preds) != 2:
            return None
        key = ("decided", block)
        if key in st.recomputable:
            return st.recomputable[key]
        found = None
        d = st.doms.idom.get(block)
        term = d.terminator if d is not None else None
        if isinstance(term, I.Branch) and term.is_conditional and \
                st.loops.loop_of(d) is st.loops.loop_of(block) and \
                not any(lp.header is block for lp in st.loops.loops):
            sides = []
            for succ in term.successors[:2]:
                sides.append(self._side(st, d, succ, block, preds))
            if None not in sides and sides[0] != sides[1]:
                found = (term.operands[0], sides[0], sides[1])
        st.recomputable[key] = found
        return found

    def _side(self, st: ReverseContext, d, succ, block, preds):
        """Which predecessor of ``block`` the edge ``d -> succ`` leads to, or None."""
        if succ is block:
            return preds.index(d) if d in preds else None
        if any(p is not d and not st.doms.dominates(succ, p) for p in succ.predecessors
               if p in st.last):
            return None  # the arm can be entered other than from d
        reached = [i for i, p in enumerate(preds) if st.doms.dominates(succ, p)]
        return reached[0] if len(reached) == 1 else None

    @staticmethod
    def _simple_header(loop, preds) -> bool:
        inside = [p for p in preds if loop.contains(p)]
        return len(inside) == 1 and len(preds) == 2

    def _edge(self, st: ReverseContext, block, pred, dphis) -> object:
        """Where the reverse sweep goes for the edge ``pred -> block``: the reverse of
        ``pred``, through a block that hands the phis' adjoints to their incoming values."""
        target = self._enter(st, block, pred, st.rblocks[pred])
        moves = [(phi, d) for phi, d in dphis
                 if st.active(v := incoming_value(phi, pred)) and not isinstance(v, Undef)]
        if not moves:
            return target
        edge = st.rev.append_block(f"{st.rblocks[block].name}.from.{pred.name or 'pred'}")
        saved = (st.rb.block, st.rb.index)
        st.rb.position_at_end(edge)
        for phi, d in moves:
            self.accumulate(st, incoming_value(phi, pred), d)
        st.rb.br(target)
        st.rb.block, st.rb.index = saved
        return edge

    def _enter(self, st: ReverseContext, block, pred, target):
        """``target``, through a block that sets where each counted loop the edge
        ``pred -> block`` leaves (so the reverse sweep enters) began its run: the counter now
        less the run's trip count, computed again from the loop's bounds."""
        leaving = [lp for lp in st.loops.loops if lp.contains(pred) and not lp.contains(block)]
        loops = [lp for lp in leaving if self._counted(st, lp)]
        carried = [lp for lp in leaving if self.carried_plan(st, lp) is not None]
        inner = st.loops.loop_of(pred)
        # A skipped run sets the counter back to where the run began: a counted loop's start,
        # or 0 for a loop in no other (it runs once a call).
        quiet = inner in leaving and (inner in loops or inner.parent is None)
        exits = quiet_exits(st, inner) if quiet else None
        if not loops and not carried and not exits:
            return target
        enter = st.rev.append_block(f"{st.rblocks[block].name}.enter.{pred.name or 'pred'}")
        saved, memo = (st.rb.block, st.rb.index), st.memo
        st.rb.position_at_end(enter)
        st.memo = {}  # values made here do not dominate the rest of the reverse block
        starts = {}
        for lp in loops:
            starts[lp] = self._counted_start(st, lp)
            st.rb.store(starts[lp], st.counted[lp])
        self.carried_enter(st, st.rb, carried)
        if exits:
            start = starts[inner] if inner in starts else const_int(T.i64, 0)
            target = self._unless_quiet(st, inner, exits, start, target)
        st.rb.br(target)
        st.rb.block, st.rb.index = saved
        st.memo = memo
        return enter

    def _unless_quiet(self, st: ReverseContext, loop, exits, start, target):
        """``target``, or where the reverse sweep goes on leaving ``loop`` when the adjoints
        of ``exits`` (the values ``loop`` leaves) are all zero: its counter set back to the
        run's ``start``, as the run's reverse would have left it (see
        :mod:`pyzyme.diff.reverse.quiet`). Built at the end of the block entering it."""
        b = st.rb
        zero = None
        for v in exits:
            test = b.fcmp("oeq", b.load(v.type, self._slot(st, v)), const_null(v.type))
            test.metadata.append((naming.ZERO_ADJOINT_TEST, "!{}"))
            zero = test if zero is None else b.and_(zero, test)
        skip = st.rev.append_block(f"{st.rblocks[loop.header].name}.quiet")
        outside, = [p for p in loop.header.predecessors
                    if p in st.last and not loop.contains(p)]
        b.cbranch(zero, skip, target)
        b.position_at_end(skip)
        b.store(start, st.tape.counter(loop).rev)
        return self._enter(st, loop.header, outside, st.rblocks[outside])

    def _counted_start(self, st: ReverseContext, loop) -> Value:
        """Where the last run of counted ``loop`` began, while the reverse sweep is after it:
        the counter now less the run's trip count, from the loop's bounds."""
        runs = self._runs(st, st.rb, loop.trip_count, lambda v: st.primal(v))
        return st.rb.sub(st.rb.load(T.i64, st.tape.counter(loop).rev), runs,
                         name=naming.loop_start(loop.header.name))

    def _counted(self, st: ReverseContext, loop) -> bool:
        """Whether the reverse sweep finds where a run of inner ``loop`` began from its trip
        count (the forward sweep then records nothing per run): its only exit is the one its
        induction variable decides, stepping by one, whose bounds hold throughout the run."""
        if loop.parent is None:
            return False
        if loop in st.counted:
            return True
        tc = loop.trip_count
        if tc is None or not tc.exact or abs(tc.step) != 1 or \
                tc.predicate not in _COUNTED_PREDICATES or \
                not (loop.is_invariant(tc.start) and loop.is_invariant(tc.bound)):
            return False
        if tc.start.type != T.i64 and not tc.predicate.startswith("s"):
            return False  # widened below by sign extension
        st.counted[loop] = st.tape.reverse_slot(T.i64, naming.loop_start(loop.header.name))
        return True

    def _recorded_pred(self, st: ReverseContext, block, preds) -> Value:
        """Which predecessor entered ``block``, recorded by the forward sweep (an i32 phi)."""
        cache = st.recorded.get(block)
        if cache is None:
            first = st.first[block]
            phi = I.Phi(T.i32)
            phi.name = st.fwd.unique_name(naming.came_from(block.name))
            first.insert(len(first.phis), phi)
            for p in preds:
                for _ in range(st.fwd_edges(p, block)):
                    phi.add_incoming(const_int(T.i32, preds.index(p)),
                                     st.fwd_edge(p, block))
            loop = st.loops.loop_of(block)
            cache = st.recorded[block] = st.tape.cache(T.i32, loop, phi.name)
            b = IRBuilder()
            if loop is not None and loop.header is block:
                b.position_at_start(st.last[block])
            else:
                b.position_at_start(first)
            st.tape.store(b, cache, phi, st.fidx.get(loop))
        return st.tape.load(st.rb, cache, self.iteration(st, cache.loop))

    def iteration(self, st: ReverseContext, loop) -> Value | None:
        """The number of the iteration of ``loop`` the reverse sweep is in."""
        if loop is None:
            return None
        key = ("index", loop)
        v = st.memo.get(key)
        if v is None:
            count = st.tape.counter(loop).rev
            v = st.memo[key] = st.rb.sub(st.rb.load(T.i64, count), const_int(T.i64, 1))
        return v

    def loop_start(self, st: ReverseContext, loop) -> Value:
        """The counter of ``loop`` when its current run began (0 for outermost loops: they run
        at most once per call)."""
        if loop.parent is None:
            return const_int(T.i64, 0)
        key = ("start", loop)
        v = st.memo.get(key)
        if v is not None:
            return v
        if self._counted(st, loop):
            if st.current is not None and loop.contains(st.current):
                v = st.rb.load(T.i64, st.counted[loop], name=naming.loop_start(loop.header.name))
            else:
                # After the run (the reverse sweep has not entered it yet): its last iteration's
                # values are read here, before the entering edge sets the slot.
                v = self._counted_start(st, loop)
            st.memo[key] = v
            return v
        stack = st.starts.get(loop)
        if stack is None:
            # Pushed on entry, popped when the reverse sweep leaves the loop: one entry per
            # run, however many iterations of the enclosing loops do not enter it.
            stack = st.starts[loop] = st.tape.stack(f"{loop.header.name}.starts")
            for b in st.entering(loop):
                st.tape.push(b, stack, b.load(T.i64, st.tape.counter(loop).fwd))
        v = st.memo[key] = st.tape.peek(st.rb, stack, naming.loop_start(loop.header.name))
        return v

    def _finish(self, st: ReverseContext) -> None:
        b = st.rb
        st.releases.run(b)
        st.tape.free(b)
        adj = [self.adjoint_of_param(st, a) for a, act in zip(st.old.args, st.sig.activities)
               if act is Activity.ACTIVE]
        ty = st.rev.function_type.ret
        if st.sig.split:
            if not adj:
                b.ret_void()
                return
            agg = Undef(ty)
            for i, v in enumerate(adj):
                agg = b.insertvalue(agg, v, i)
            b.ret(agg)
            return
        result = b.load(st.ret_slot.type, st.ret_slot.rev) if st.ret_slot is not None else None
        if not adj:
            b.ret(result)
            return
        agg = Undef(ty)
        parts = ([result] if result is not None else []) + adj
        for i, v in enumerate(parts):
            agg = b.insertvalue(agg, v, i)
        b.ret(agg)

    def _reserve_caches(self, st: ReverseContext) -> set:
        """Size loop caches and loop-start stacks before the outermost loop starts, where the
        trip counts of the whole nest are known there: no growing (copying) while it runs.
        Gives the loops whose caches were sized for every iteration they can run (see
        :meth:`_bounded`): those need no capacity test per iteration, a branch that kept
        LLVM from vectorizing a loop that caches (GradBench's ode: its rate loops)."""
        reserved: set = set()
        wanted = [(loop, [loop], lambda b, total, lp=loop: st.tape.reserve(b, lp, total))
                  for loop, state in st.tape.loops.items() if state.caches]
        caching = len(wanted)
        # A loop's start stack takes one entry per run: per iteration of its parent.
        wanted += [(loop.parent, [loop.parent],
                    lambda b, total, s=stack: st.tape.reserve_stack(b, s, total))
                   for loop, stack in st.starts.items() if loop.parent is not None]
        for k, (loop, chain, reserve) in enumerate(wanted):
            while chain[-1].parent is not None:
                chain.append(chain[-1].parent)
            top = chain[-1]
            if not all(self._countable(lp, top) for lp in chain):
                continue
            entering = st.entering(top)
            for b in entering:
                total = None
                for lp in chain:
                    runs = self._runs(st, b, lp.trip_count, lambda v: st.fwd_value(v))
                    total = runs if total is None else b.mul(total, runs)
                reserve(b, total)
            if k < caching and entering and all(self._bounded(lp) for lp in chain):
                reserved.add(loop)
        return reserved

    @staticmethod
    def _bounded(loop) -> bool:
        """Whether :meth:`_runs` bounds how often ``loop``'s header runs on every run, so
        that caches sized by it need no capacity test (a counted loop, :meth:`_countable`).
        Only for a 64-bit counter: ``_runs`` computes in 64 bits, and a narrower counter
        tested by ``ne`` or an unsigned predicate may wrap around and run more often than
        the formula says; a 64-bit one would have to run 2**63 times first."""
        return loop.trip_count.induction.phi.type == T.i64

    def _fill_each_run(self, st: ReverseContext, copy, reserved: set, sized_runs: dict):
        """Fill the cache of :class:`~pyzyme.diff.reverse.bulk.BulkCopy` ``copy`` by a copy
        where each run of its loop starts, its caches sized for the run by then (before the
        nest, or as the run starts); otherwise by a store per iteration after all."""
        loop = copy.loop
        if loop in reserved and self._bounded(loop):
            builders = st.entering(loop)
        else:
            builders = []
            for block in sized_runs.get(loop, ()):
                b = IRBuilder()
                b.position_before(block.terminator)
                builders.append(b)
        if not builders:
            self.keep_each(st, copy.fv, copy.cache)
            return
        for b in builders:
            bulk.fill(st, copy, b, self._runs(st, b, loop.trip_count, st.fwd_value))

    def _size_each_run(self, st: ReverseContext, loop) -> list:
        """On each forward edge entering ``loop`` (whose trip count is known as it starts,
        from the bounds its only exit tests, as :meth:`_counted` finds where a run began),
        make room in its caches for the run about to start, instead of testing their
        capacity on every iteration: the edge's branch moves to a block of its own, which
        the header's phis then come from."""
        header = st.first[loop.header]
        tails = []
        for (_, target), edge in list(st.entries.items()):
            if target is not loop.header:
                continue
            term = edge.terminator
            term.erase()
            tail = st.fwd.append_block(f"{edge.name}.sized")
            tail.append(term)
            for phi in header.phis:
                phi.blocks = [tail if blk is edge else blk for blk in phi.blocks]
            b = IRBuilder(edge)
            runs = self._runs(st, b, loop.trip_count, st.fwd_value)
            count = b.load(T.i64, st.tape.counter(loop).fwd)
            st.tape.ensure(b, loop, b.add(count, runs), tail)
            tails.append(tail)
        return tails

    @staticmethod
    def _countable(loop, top) -> bool:
        """Whether ``loop``'s run count is a formula of values fixed before ``top`` starts."""
        tc = loop.trip_count
        if tc is None or not tc.exact or abs(tc.step) != 1:
            return False
        if tc.predicate not in _COUNTED_PREDICATES:
            return False
        return top.is_invariant(tc.start) and top.is_invariant(tc.bound)

    @staticmethod
    def _runs(st: ReverseContext, b: IRBuilder, tc, value) -> Value:
        """How many times the header runs, at least 1: ``sign * (bound - start) + extra``, with
        ``start`` and ``bound`` as ``value`` gives them where ``b`` is."""
        start, bound = value(tc.start), value(tc.bound)
        if start.type != T.i64:
            start, bound = b.sext(start, T.i64), b.sext(bound, T.i64)
        extra = 1 - int(tc.uses_next) + (1 if tc.predicate in ("sle", "ule", "sge", "uge")
                                         else 0)
        distance = b.sub(bound, start) if tc.step > 0 else b.sub(start, bound)
        runs = b.add(distance, const_int(T.i64, extra))
        one = const_int(T.i64, 1)
        return b.select(b.icmp("slt", runs, one), one, runs)

    def adjoint_of_param(self, st: ReverseContext, arg) -> Value:
        slot = st.adjoints.get(arg)
        if slot is None:
            return const_null(arg.type)
        return st.rb.load(arg.type, slot)

    def finalize(self, st: ReverseContext) -> None:
        """Once both sweeps are made: caches sized before loops, cleanup on error exits, the
        tape grown where loops run, alias scopes, and for a split pair the tape packed and
        unpacked."""
        reserved = self._reserve_caches(st)
        for block in st.error_exits:
            # No reverse sweep follows an error: release what was deferred, free the tape.
            b = IRBuilder()
            b.position_before(block.terminator)
            st.releases.run(b, forward=True)
            st.tape.free(b, forward=True)
        sized_runs: dict = {}       # loop -> blocks where each run starts, sized for it
        for loop, index, first, rest in st.headers:
            sized = loop in reserved   # for its whole nest, before the nest began
            per_run = not sized and st.tape.sized(loop) and self._countable(loop, loop) and (
                loop.trip_count.start.type == T.i64 or loop.trip_count.predicate[0] == "s")
            if per_run:
                sized_runs[loop] = self._size_each_run(st, loop)
            b = IRBuilder(first)
            st.tape.grow(b, loop, index, rest, st.fidx, own=not (per_run or sized))
        for copy in st.bulk:
            self._fill_each_run(st, copy, reserved, sized_runs)
        annotate(dict.fromkeys((st.fwd, st.rev)), self.scopes, st.tape.scope_node,
                 lambda pointer: self.object_of(st, pointer),
                 (lambda pointer: launch_side(st, pointer))
                 if st.sig.parallel_body is not None else None)
        if not st.sig.split:
            return
        b = st.fb
        for block, value, shadow, _ in st.exits:
            b.position_at_end(block)
            tape = st.tape.pack(b)
            if value is None:
                b.ret(tape)
                continue
            agg = b.insertvalue(Undef(st.fwd.function_type.ret), value, 0)
            if shadow is not None:
                agg = b.insertvalue(agg, shadow, 1)
            b.ret(b.insertvalue(agg, tape, 2 if shadow is not None else 1))
        rb = IRBuilder(st.tape.rev_entry)
        st.tape.unpack(rb, st.rev.args[-1])
        # ``discard``: the tape is dropped unused (its owner was collected): release what the
        # forward sweep deferred, free the caches, skip the reverse sweep.
        sweep = st.rev.append_block("sweep")
        cleanup = st.rev.append_block("discard")
        rb.cbranch(st.rev.args[-2], cleanup, sweep)
        cb = IRBuilder(cleanup)
        st.releases.run(cb)
        st.tape.free(cb)
        ret = st.rev.function_type.ret
        cb.ret(None if ret == T.void else const_null(ret))
        rb.position_at_end(sweep)
        targets = [st.rblocks[primal] for *_, primal in st.exits]
        if not targets:
            # The function never returns normally (it only raises): no tape ever reaches
            # the reverse function, which has nothing to do but exist.
            rb.br(cleanup)
            return
        which = rb.load(T.i32, st.which_exit.rev)
        rb.switch(which, targets[0], [(const_int(T.i32, k), t)
                                      for k, t in enumerate(targets)][1:])
