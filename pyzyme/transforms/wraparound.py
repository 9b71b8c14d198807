"""Numba's wrap-around of negative indices, folded away where the index cannot be negative.

Numba reads ``a[j]`` as ``a[j + (n if j < 0 else 0)]`` unless ``j`` is unsigned. LLVM drops
the ``select`` when it proves ``j >= 0``, but not for the induction variable of
``for j in range(i + 1, d)``: its step carries no ``nsw`` flag and its loop test is ``!=``.
The select then stays in the primal, and a derivative pays for it twice: the forward sweep
runs it, and the reverse sweep recomputes the index from its loop counter and runs it again
(where LLVM knows even less). :func:`fold_wraparound` proves such indices non-negative before
differentiation and replaces the select by its no-wrap operand.

An integer is known non-negative when it is a constant ``>= 0``; a value the caller says is
(an array's shape, from the ABI of a captured function; a size a parallel loop's body reads
from its ``dims``); ``zext``, ``lshr`` by a positive amount, ``and`` with a non-negative constant, ``urem``
by a positive constant; ``add``/``mul`` with ``nsw`` of non-negative values; ``sext`` or a
``select`` of non-negative values; a phi whose incoming values are all non-negative (assuming
the phi itself is while its back edges are looked at: an induction over these rules); or the
induction variable of a loop stepping up from a non-negative start that keeps going while it
is below a bound (signed, stepping by one; or unsigned, the bound non-negative), or while it
differs from a bound that the loop is entered only below (stepping by one; a branch on
``start < bound`` leads to it).

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define double @f(ptr %a, i64 %n, i64 %s) {
... entry:
...   %s1 = add nuw nsw i64 %s, 1
...   %go = icmp sgt i64 %n, %s1
...   br i1 %go, label %loop, label %exit
... loop:
...   %j = phi i64 [ %s1, %entry ], [ %j1, %loop ]
...   %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
...   %neg = icmp slt i64 %j, 0
...   %wrap = select i1 %neg, i64 %n, i64 0
...   %p0 = getelementptr double, ptr %a, i64 %j
...   %p = getelementptr double, ptr %p0, i64 %wrap
...   %x = load double, ptr %p
...   %acc1 = fadd double %acc, %x
...   %j1 = add i64 %j, 1
...   %more = icmp ne i64 %j1, %n
...   br i1 %more, label %loop, label %exit
... exit:
...   %r = phi double [ 0.0, %entry ], [ %acc1, %loop ]
...   ret double %r
... }''')
>>> fn = m.get_function("f")
>>> fold_wraparound(fn, nonnegative=[fn.args[2]])   # %s: say, a shape
1
>>> [i.opcode for i in fn.blocks[1]][:5]           # the compare and the select are gone
['phi', 'phi', 'getelementptr', 'getelementptr', 'load']
>>> next(i for i in fn.blocks[1] if i.name == "p").operands[1].ref
'0'
"""

from __future__ import annotations

from collections.abc import Iterable

from pyzyme.analysis.loops import analyze_loops
from pyzyme.ir import instructions as I
from pyzyme.ir.values import ConstantInt

__all__ = ["fold_wraparound"]

# (predicate, constant): comparisons that are true exactly when x < 0.
_NEGATIVE = {("slt", 0): True, ("sle", -1): True, ("sgt", -1): False, ("sge", 0): False}


def fold_wraparound(fn, nonnegative: Iterable = ()) -> int:
    """Replace each ``select (x < 0), a, b`` of ``fn`` whose ``x`` is provably non-negative
    by ``b`` (and the mirrored forms by theirs); ``nonnegative`` are values known to be.
    Returns how many selects were folded."""
    proof = _NonNegative(fn, nonnegative)
    folded = 0
    for block in fn.blocks:
        for inst in list(block.instructions):
            if not isinstance(inst, I.Select):
                continue
            cond = inst.operands[0]
            negative_if = _negative_test(cond)
            if negative_if is None or not proof(cond.operands[0]):
                continue
            # The comparison is false (x < 0 never holds): keep the operand for that.
            keep = inst.operands[2] if negative_if else inst.operands[1]
            inst.replace_all_uses_with(keep)
            inst.erase()
            if not cond.users:
                cond.erase()
            folded += 1
    return folded


def _negative_test(cond) -> bool | None:
    """For ``icmp pred x, c`` that tests the sign of ``x``: whether it is true when x < 0."""
    if not (isinstance(cond, I.Compare) and cond.opcode == "icmp"):
        return None
    c = cond.operands[1]
    if not isinstance(c, ConstantInt):
        return None
    return _NEGATIVE.get((cond.predicate, c.signed))


class _NonNegative:
    """Whether an integer value is provably ``>= 0`` (signed), memoized."""

    def __init__(self, fn, known: Iterable) -> None:
        self.memo: dict = {v: True for v in known}
        self.loops = analyze_loops(fn)
        self.inductions = {iv.phi: (loop, iv) for loop in self.loops.loops
                           for iv in loop.inductions}

    def __call__(self, v) -> bool:
        if isinstance(v, ConstantInt):
            return v.signed >= 0
        got = self.memo.get(v)
        if got is None:
            before = set(self.memo)
            self.memo[v] = True   # assumed while its own operands are looked at (a cycle)
            got = self._decide(v)
            if not got:   # what was proven under the assumption no longer stands
                for key in set(self.memo) - before:
                    del self.memo[key]
            self.memo[v] = got
        return got

    def _decide(self, v) -> bool:
        if isinstance(v, I.Phi):
            before = set(self.memo)
            if all(self(op) for op in v.operands):
                return True
            for key in set(self.memo) - before:   # proven assuming v: void again
                del self.memo[key]
            return v in self.inductions and self._induction(*self.inductions[v])
        if isinstance(v, I.Cast):
            if v.opcode == "zext":
                return True
            return v.opcode == "sext" and self(v.operands[0])
        if isinstance(v, I.Select):
            return self(v.operands[1]) and self(v.operands[2])
        if not isinstance(v, I.BinaryOp):
            return False
        a, b = v.operands
        if v.opcode in ("add", "mul"):
            return "nsw" in v.flags and self(a) and self(b)
        if v.opcode == "lshr":
            return isinstance(b, ConstantInt) and (b.value > 0 or self(a))
        if v.opcode == "and":
            return (isinstance(b, ConstantInt) and b.signed >= 0) or self(a) or self(b)
        if v.opcode == "urem":
            return isinstance(b, ConstantInt) and b.signed > 0
        return False

    def _induction(self, loop, iv) -> bool:
        trip = loop.trip_count
        if iv.step <= 0 or trip is None or trip.induction is not iv:
            return False   # (other exits only leave earlier: the bound still holds)
        if not self(iv.start):
            return False
        # Stepping up by one while below a signed bound: it stays between start and the
        # bound (a longer step could jump past the largest i64 and wrap).
        if trip.predicate in ("slt", "sle") and iv.step == 1:
            return True
        # Below a non-negative bound, unsigned: a wrapped value would be above it.
        if trip.predicate == "ult" and self(trip.bound):
            return True
        # Stepping up by one until it reaches the bound: from below, when entered below.
        return trip.predicate == "ne" and iv.step == 1 and _entered_below(loop, iv.start,
                                                                         trip.bound)


def _entered_below(loop, start, bound) -> bool:
    """Whether the loop is entered only along a branch that found ``start < bound``."""
    outside = [p for p in loop.header.predecessors if not loop.contains(p)]
    if len(outside) != 1:
        return False
    block, target = outside[0], loop.header
    for _ in range(4):   # up a short chain of blocks that only pass control on
        term = block.terminator
        if isinstance(term, I.Branch) and term.is_conditional:
            cond, on_true, on_false = term.operands
            if on_true is on_false or not (isinstance(cond, I.Compare) and cond.opcode == "icmp"):
                return False
            return _says_below(cond, start, bound, taken=on_true is target)
        preds = block.predecessors
        if len(preds) != 1 or len(block.successors) != 1:
            return False
        block, target = preds[0], block
    return False


def _says_below(cond, start, bound, taken: bool) -> bool:
    """Whether ``cond`` being ``taken`` means ``start < bound`` (signed)."""
    a, b = cond.operands
    pred = cond.predicate
    if not taken:
        pred = {"slt": "sge", "sge": "slt", "sgt": "sle", "sle": "sgt"}.get(pred)
    if (a, b) == (start, bound):
        return pred == "slt"
    if (a, b) == (bound, start):
        return pred == "sgt"
    return False
