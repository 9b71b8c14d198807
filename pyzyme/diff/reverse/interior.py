"""A parallel loop's reverse away from its rows' ends: the loops of the body's reverse whose adds
are atomic only near a row's ends, in a second version with plain adds.

Where iterations share an array with their neighbours only (a stencil's), the reverse of the
body adds into its shadow atomically only where the row index is within ``reach`` of its row's
ends, or the column leaves the row
(:meth:`~pyzyme.diff.context.ReverseContext.shared_add`): a test and a branch per add. LLVM
neither unswitches such a loop (too large) nor vectorizes it, and a loop that adds into
neighbouring cells is distributed (:mod:`pyzyme.transforms.distribute`) only as one block: a
2-D stencil's reverse with the tests ran at about half the speed of the same loop without
them, and its time was what kept the gradient's speedup from one thread to two at 79% of the
primal's.

Yet each test is an ``or`` of comparisons of values that are the same on every iteration of
the innermost loop (the row index and its row's ends) or affine in the loop's counter (the
column): false at the loop's first and last iterations, such a comparison is false on every
iteration in between (the set where it is false is an interval, and an affine function goes
through it once). So the loop gets a copy in which the tests are false (plain adds; adds
atomic for other reasons stay so), joined into one block and distributed like any other, and
a check before the loop evaluates the tests at the counter's first and last values and runs
the copy where all are false, the loop as it was otherwise (rows near their ends).

Applied to the reverse loops of single-block primal loops in the sweep that runs where other
threads do (after :func:`~pyzyme.diff.reverse.versions.one_thread_version`, the original
blocks), and in its unguarded version where strong zero made one. Anything not understood (a
value of the loop used after it, a load that may change from one iteration to the next, a test
of another shape) leaves the loop as it is.
"""

from __future__ import annotations

from pyzyme.analysis.cfg import dominators
from pyzyme.analysis.overwrite import pure_call
from pyzyme.diff.reverse.versions import join_runs
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.regions import copy_region
from pyzyme.ir.values import const_int
from pyzyme.transforms import distribute

__all__ = ["interior_versions"]

_SUFFIX = ".interior"


class _Refuse(Exception):
    pass


def interior_versions(st, scopes, distribute_loops: bool) -> None:
    """Give each reverse loop (of a single-block primal loop) of ``st``'s parallel body that
    holds row-edge tests its interior version (see the module docstring); the copy is
    distributed where ``distribute_loops``."""
    body = st.sig.parallel_body
    if body is None or not st.sig.split or not st.edge_tests:
        return
    # the unguarded version of strong zero (pyzyme.diff.reverse.versions), where there is one
    finite = st.finite_watch.copies if st.finite_watch is not None else {}
    tests = set(st.edge_tests) | {finite[t] for t in st.edge_tests if t in finite}
    shared = st.rev.args[body.shared]
    doms = dominators(st.rev)
    for loop in st.loops.loops:
        state = st.tape.loops.get(loop)
        head = st.rblocks.get(loop.header)
        if len(loop.blocks) != 1 or state is None or head is None:
            continue
        for start in (head, finite.get(head)):
            if start is None:
                continue
            try:
                copy = _version(st.rev, doms, start, state.counter.rev, tests, shared,
                                st.tape.scope)
            except _Refuse:
                continue
            if copy is not None and distribute_loops:
                distribute.distribute(
                    distribute.plan(copy, state.counter.rev, st.tape.scope), scopes)


def _natural_loop(head, doms):
    """The latch (the one block ``head`` dominates that branches back to it) and the blocks
    of the loop it closes."""
    latches = [p for p in head.predecessors if doms.dominates(head, p)]
    if len(latches) != 1:
        raise _Refuse("not one back edge")
    # a loop of one block is its own latch: nothing before it belongs to it
    blocks, todo = {head, latches[0]}, [] if latches[0] is head else [latches[0]]
    while todo:
        for pred in todo.pop().predecessors:
            if pred not in blocks:
                blocks.add(pred)
                todo.append(pred)
    return latches[0], blocks


def _version(fn, doms, head, counter, tests: set, shared, tape_scope):
    """The interior version of the reverse loop at ``head`` (counting ``counter`` down) and
    the check choosing it; the copy's (single) block, None where nothing was done."""
    if not any(t.parent is not None and doms.dominates(head, t.parent) for t in tests):
        return None
    latch, blocks = _natural_loop(head, doms)
    mine = [t for t in tests if t.parent in blocks]
    if not mine or head.phis:
        return None
    term = latch.terminator
    if not (isinstance(term, I.Branch) and term.is_conditional):
        raise _Refuse("the back edge is not a conditional branch")
    exit_target = term.operands[2] if term.operands[1] is head else term.operands[1]
    if exit_target in blocks or exit_target.phis:
        raise _Refuse("the loop's exit")
    for blk in blocks:
        if blk is not latch and any(s not in blocks for s in blk.successors):
            raise _Refuse("the loop has another exit")
        for inst in blk.instructions:
            if any(u.parent not in blocks for u in inst.users):
                raise _Refuse("a value of the loop is used after it")
            if isinstance(inst, I.CallBase) and not pure_call(inst):
                # it may write the slots or the tape the tests read
                raise _Refuse("the loop calls a function that may write memory")
            if isinstance(inst, I.Store) and tape_scope is not None and \
                    ("alias.scope", tape_scope) in inst.metadata:
                raise _Refuse("the loop writes the tape")
    stores = [inst for blk in blocks for inst in blk.instructions
              if isinstance(inst, I.Store) and isinstance(inst.pointer, I.Alloca)]
    steps = [s for s in stores if s.pointer is counter]
    if len(steps) != 1 or steps[0].parent is not latch:
        raise _Refuse("the counter is not stepped once, in the latch")
    ends = _Ends(blocks, counter, steps[0], {s.pointer for s in stores}, tape_scope)
    last = ends.exit_value(term, exit_target)
    for t in mine:
        if not ends.monotone(t):
            raise _Refuse("a test of another shape")

    found = copy_region(fn, head, _SUFFIX, {shared: True, **{t: False for t in mine}},
                        lambda blk: blk in blocks)
    if found is None:
        raise _Refuse("a phi in the loop")
    start, mapping = found
    joined = join_runs(fn, [mapping[blk] for blk in fn.blocks if blk in blocks
                            and blk in mapping])

    check = BasicBlock(fn, fn.unique_name(f"{head.name}.rows"))
    fn.blocks.insert(fn.blocks.index(head), check)
    for pred in head.predecessors:
        if pred not in blocks:
            pred.terminator.replace_uses_of(head, check)
    _split_ranges(fn, check, head, term, exit_target, mapping, counter, last, ends, mine,
                  start)
    start = joined.get(start, start)
    return start if start.successors.count(start) == 1 else None


def _split_ranges(fn, check, head, term, exit_target, mapping, counter, last, ends, mine,
                  start) -> None:
    """At ``check``, before the loop at ``head``: run the copy (at ``start``) on the
    counter's values where every test of ``mine`` is false, the loop as it was on the others.

    Those values are an interval (each test is false on one, :meth:`_Ends.monotone`). Where
    it holds the first and last values, the copy runs alone. Otherwise, where it holds the
    middle value, a binary search on either side finds its ends (the tests evaluated at a
    counter value before the loop, as the first and last are), and the loop runs the
    iterations above it, the copy those in it, the loop those below: the innermost loop of a
    box of a 2-D schedule, whose tests are true near the box's ends only. The loop ends
    where a stack slot says (the interval's top, then the end), the copy at the interval's
    bottom."""
    i64, one = T.i64, const_int(T.i64, 1)
    b = IRBuilder(check)
    first = b.load(i64, counter, name="first")
    hoisted: dict = {}
    end = ends.at(b, last, None, hoisted, {})
    final = b.add(end, one, name="final")

    def clear(count):
        memo: dict = {}
        ok = None
        for t in mine:
            c = b.xor(ends.at(b, t, count, hoisted, memo), const_int(T.i1, 1))
            ok = c if ok is None else b.and_(ok, c)
        return ok

    names = ("probe", "top", "top.step", "bottom", "bottom.step", "split", "choose",
             "after", "after.copy")
    probe, top, top_step, bottom, bottom_step, split, choose, after, after_copy = (
        BasicBlock(fn, fn.unique_name(f"{head.name}.{n}")) for n in names)
    at = fn.blocks.index(head)
    fn.blocks[at:at] = [probe, top, top_step, bottom, bottom_step, split, choose]
    fn.blocks[fn.blocks.index(exit_target):fn.blocks.index(exit_target)] = [after, after_copy]
    b.cbranch(b.and_(clear(first), clear(final), name="interior"), choose, probe)

    b.position_at_end(probe)
    middle = b.add(final, b.lshr(b.sub(first, final), one), name="middle")
    above, below = b.add(first, one), b.sub(final, one)   # past the range: not clear
    b.cbranch(clear(middle), top, choose)

    # Each search keeps ``inside`` clear and ``outside`` not, halving the gap between them.
    found = []
    for loop, step, came, outside_at, done in ((top, top_step, probe, above, bottom),
                                               (bottom, bottom_step, top, below, split)):
        b.position_at_end(loop)
        inside, outside = b.phi(i64, name="inside"), b.phi(i64, name="outside")
        inside.add_incoming(middle, came)
        outside.add_incoming(outside_at, came)
        upward = loop is top
        gap = b.sub(outside, inside) if upward else b.sub(inside, outside)
        b.cbranch(b.icmp("ugt", gap, one), step, done)
        b.position_at_end(step)
        half = b.add(inside if upward else outside, b.lshr(gap, one), name="half")
        ok = clear(half)
        inside.add_incoming(b.select(ok, half, inside), step)
        outside.add_incoming(b.select(ok, outside, half), step)
        b.br(loop)
        found.append(inside)
    high, low = found
    b.position_at_end(split)
    bottom_end = b.sub(low, one)
    starts_inside = b.icmp("eq", high, first)
    b.br(choose)

    b.position_at_end(choose)
    copy_end, stop, go = b.phi(i64, name="copy.end"), b.phi(i64, name="stop"), b.phi(T.i1)
    for block, values in ((check, (end, end, const_int(T.i1, 1))),
                          (probe, (end, end, const_int(T.i1, 0))),
                          (split, (bottom_end, high, starts_inside))):
        for phi, value in zip((copy_end, stop, go), values):
            phi.add_incoming(value, block)
    slot = b.entry_alloca(i64, name=f"{head.name}.stop")
    b.store(stop, slot)
    b.cbranch(go, start, head)

    # The loop ends where the slot says; past the interval's top, the copy follows.
    cond = term.operands[0]
    b.position_before(cond)
    cond.replace_uses_of(last, b.load(i64, slot))
    term.replace_uses_of(exit_target, after)
    b.position_at_end(after)
    b.cbranch(b.icmp("eq", b.load(i64, slot), end), exit_target, start)
    # The copy ends at the interval's bottom; below it, the loop takes the rest.
    copied = mapping[term]
    mapping[cond].replace_uses_of(mapping.get(last, last), copy_end)
    copied.replace_uses_of(exit_target, after_copy)
    b.position_at_end(after_copy)
    b.store(end, slot)
    b.cbranch(b.icmp("eq", copy_end, end), exit_target, head)


class _Ends:
    """The values of one reverse loop (``blocks``) at given values of its counter: what is
    the same on every iteration, and what is affine in the counter."""

    def __init__(self, blocks: set, counter, step: I.Store, stored: set, tape_scope) -> None:
        self.blocks, self.counter, self.step = blocks, counter, step
        self.stored, self.tape_scope = stored, tape_scope
        self.memo: dict = {}

    def exit_value(self, term: I.Branch, exit_target):
        """The counter's value after the last iteration (``count - 1 == end`` leaves)."""
        cond, stepped = term.operands[0], self.step.value
        loaded = stepped.operands[0] if isinstance(stepped, I.BinaryOp) else None
        one = stepped.operands[1] if loaded is not None else None
        if not (isinstance(loaded, I.Load) and loaded.pointer is self.counter
                and ((stepped.opcode == "sub" and getattr(one, "signed", None) == 1)
                     or (stepped.opcode == "add" and getattr(one, "signed", None) == -1))):
            raise _Refuse("the counter does not go down by one")
        if not (isinstance(cond, I.Compare) and cond.predicate == "eq"
                and term.operands[1] is exit_target and stepped in cond.operands):
            raise _Refuse("the loop does not end where the counter reaches a value")
        end = cond.operands[1] if cond.operands[0] is stepped else cond.operands[0]
        if not self.invariant(end):
            raise _Refuse("the counter's end changes in the loop")
        return end

    def _counted(self, v) -> bool:
        """A load of the counter before it is stepped."""
        if not (isinstance(v, I.Load) and v.pointer is self.counter):
            return False
        if v.parent is self.step.parent:
            insts = v.parent.instructions
            if insts.index(v) > insts.index(self.step):
                raise _Refuse("the counter is read after it is stepped")
        return True

    def invariant(self, v) -> bool:
        if not isinstance(v, I.Instruction) or v.parent not in self.blocks:
            return True
        known = self.memo.get(v)
        if known is None:
            known = self.memo[v] = self._decide(v)
        return known

    def _decide(self, v) -> bool:
        if isinstance(v, I.Load):
            if v.volatile or v.ordering:
                return False
            ptr = v.pointer
            if isinstance(ptr, I.Alloca):
                return ptr not in self.stored
            # the tape: written by the forward sweep only
            return self.tape_scope is not None and ("alias.scope", self.tape_scope) in \
                v.metadata and self.invariant(ptr)
        if isinstance(v, (I.BinaryOp, I.Cast, I.GetElementPtr, I.Compare, I.Select)):
            return all(self.invariant(op) for op in v.operands)
        return False

    def affine(self, v) -> bool:
        """Whether ``v`` is an affine function of the counter (or the same on every
        iteration)."""
        if self.invariant(v) or self._counted(v):
            return True
        if isinstance(v, I.BinaryOp) and v.opcode in ("add", "sub"):
            return all(self.affine(op) for op in v.operands)
        if isinstance(v, I.BinaryOp) and v.opcode in ("mul", "shl"):
            a, c = v.operands
            if v.opcode == "mul" and self.invariant(a):
                a, c = c, a
            return self.affine(a) and self.invariant(c)
        if isinstance(v, I.Cast) and v.opcode == "sext":
            return self.affine(v.operands[0])
        return False

    def monotone(self, t) -> bool:
        """Whether ``t`` (an ``i1``) false at the first and last iterations is false on every
        one: the same on each, an ``or`` of such, or an ordering comparison of affine
        functions (false on an interval, which an affine function enters and leaves once)."""
        if self.invariant(t):
            return True
        if isinstance(t, I.BinaryOp) and t.opcode == "or":
            return all(self.monotone(op) for op in t.operands)
        if isinstance(t, I.Compare) and t.opcode == "icmp" and t.predicate not in ("eq", "ne"):
            return all(self.affine(op) for op in t.operands)
        return False

    def at(self, b: IRBuilder, v, count, hoisted: dict, memo: dict):
        """``v`` computed at ``b`` (before the loop) as on the iteration where the counter
        reads ``count`` (None: ``v`` does not depend on it)."""
        if not isinstance(v, I.Instruction) or v.parent not in self.blocks:
            return v
        if self._counted(v):
            if count is None:
                raise _Refuse("the counter where it is not expected")
            return count
        table = hoisted if self.invariant(v) else memo
        got = table.get(v)
        if got is None:
            ops = [self.at(b, op, count, hoisted, memo) for op in v.operands]
            got = table[v] = b.insert(v.copy_with(ops, keep_metadata=isinstance(v, I.Load)))
        return got
