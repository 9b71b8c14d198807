"""Header phis the reverse sweep computes from loop counters instead of caching: a value
shifted by a constant each iteration (:class:`ShiftInduction`: ``exp >>= 1`` in integer
powers) and one counting the iterations of an inner loop (:class:`CountedSum`: ``idx`` stepping
through a packed triangle). :mod:`pyzyme.diff.reverse.augmented` finds them
(:func:`shift_induction_of`, :func:`counted_sum_of`); :mod:`pyzyme.diff.reverse.values`
computes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir.values import ConstantInt, Value, const_int

__all__ = ["ShiftInduction", "CountedSum", "shift_induction_of", "counted_sum_of"]


@dataclass(frozen=True)
class ShiftInduction:
    """A header phi shifted by a constant each iteration (``exp >>= 1`` in integer powers):
    on iteration k it is ``start`` shifted by ``k * amount``, recomputable like an induction
    variable instead of cached."""

    start: Value
    opcode: str
    amount: int

    def value_at(self, b: IRBuilder, start: Value, k: Value, name: str) -> Value:
        ty = start.type
        total = b.mul(k, const_int(ty, self.amount))
        width = const_int(ty, ty.width)
        inside = b.icmp("ult", total, width)
        shifted = b.binop(self.opcode, start, b.select(inside, total, const_int(ty, 0)))
        if self.opcode == "ashr":
            out = b.ashr(start, const_int(ty, ty.width - 1))
        else:
            out = const_int(ty, 0)
        return b.select(inside, shifted, out, name=name)


@dataclass(frozen=True)
class CountedSum:
    """A header phi that counts the iterations of one inner loop (``idx`` stepping through a
    packed triangle: ``for i: for j in range(i + 1, d): ... icf[idx]; idx += 1``): on each
    iteration of its loop it is ``start`` plus the iterations ``inner`` has run since the loop
    began, so the reverse sweep gets it from ``inner``'s counter instead of a cache (the cache
    was a value per row of every triangle: half the tape of ADBench's GMM at d=64)."""

    start: Value
    inner: object


def counted_sum_of(loop, phi: I.Phi) -> CountedSum | None:
    """``phi = [start, outside], [next, latch]`` where ``next`` is ``phi`` itself where the
    inner loop was skipped, else the value after the inner loop's last iteration of an
    induction variable stepping by one from ``phi``; else None.

    The inner loop must be a child of ``loop`` (so it runs at most once per iteration) whose
    only exit is at its only latch, where that induction variable steps (so it steps once per
    iteration, the last one included)."""
    if not phi.type.is_int or phi.type.is_vector:
        return None
    outside = [v for v, blk in phi.incoming if not loop.contains(blk)]
    inside = [v for v, blk in phi.incoming if loop.contains(blk)]
    if len(outside) != 1 or len(inside) != 1 or not loop.is_invariant(outside[0]):
        return None
    (nxt,) = inside
    arms = [v for v, _ in nxt.incoming] if isinstance(nxt, I.Phi) and nxt is not phi \
        and loop.contains(nxt.parent) and nxt.parent is not loop.header else [nxt]
    stepped = {v for v in arms if v is not phi}
    if len(stepped) != 1:
        return None
    (after,) = stepped
    for inner in loop.children:
        if len(inner.latches) != 1 or inner.exiting != inner.latches:
            continue
        latch = inner.latches[0]
        if not _counts(loop, inner, phi, after):
            continue
        # Where ``next`` is ``phi`` itself, the inner loop must not have run: that arm's
        # block is not reached from its exit before the next iteration.
        kept = [blk for v, blk in nxt.incoming if v is phi] if isinstance(nxt, I.Phi) else []
        after_inner = _reached(loop, [s for s in latch.successors if not inner.contains(s)])
        if any(inner.contains(blk) or blk in after_inner for blk in kept):
            return None
        return CountedSum(outside[0], inner)
    return None


def _counts(loop, inner, phi, after) -> bool:
    """Whether ``after`` is ``phi`` plus the iterations of the run of ``inner`` just ended:
    the stepped value, at the latch, of an induction variable of ``inner`` stepping by one
    from ``phi``; or (as LLVM rewrites such exit values) ``phi`` plus the run's trip count,
    computed in the block that only ``inner``'s latch leads to."""
    latch = inner.latches[0]
    if any(iv.update is after and iv.step == 1 and iv.start is phi and after.parent is latch
           for iv in inner.inductions):
        return True
    if not (isinstance(after, I.BinaryOp) and after.opcode == "add" and phi in after.operands
            and after.parent.predecessors == [latch]):
        return False
    added = after.operands[1] if after.operands[0] is phi else after.operands[0]
    tc = inner.trip_count
    if tc is None or not tc.exact or tc.step != 1 or tc.predicate != "ne":
        return False
    # Stepping by one until the stepped value equals the bound, the run takes exactly
    # bound - start iterations (modulo 2**64, as the sums are); one more when the test is on
    # the value before the step. Compared as affine functions of ``loop``'s iteration.
    count = _affine_sub(_affine(tc.bound, loop), _affine(tc.start, loop))
    if not tc.uses_next:
        count = _affine_add(count, (0, {None: 1}))
    return count is not None and count == _affine(added, loop)


def _affine(v, loop, depth: int = 8):
    """``v`` as ``(c, terms)``: ``c * k`` plus a sum of values fixed during ``loop``
    (``terms``: value -> coefficient, constants under the key None), ``k`` numbering
    ``loop``'s iterations; None when not seen to be one."""
    if isinstance(v, ConstantInt):
        return 0, {None: v.signed} if v.signed else {}
    if loop.is_invariant(v):
        return 0, {v: 1}
    if depth == 0 or not isinstance(v, I.Instruction):
        return None
    iv = loop.induction_of(v)
    if iv is not None:
        start = _affine(iv.start, loop, depth - 1)
        return None if start is None else (iv.step, start[1])
    if isinstance(v, I.BinaryOp) and v.opcode in ("add", "sub"):
        a, b = (_affine(op, loop, depth - 1) for op in v.operands)
        return (_affine_add if v.opcode == "add" else _affine_sub)(a, b)
    return None


def _affine_add(a, b, sign: int = 1):
    if a is None or b is None:
        return None
    terms = dict(a[1])
    for key, coef in b[1].items():
        terms[key] = terms.get(key, 0) + sign * coef
    return a[0] + sign * b[0], {k: c for k, c in terms.items() if c}


def _affine_sub(a, b):
    return _affine_add(a, b, -1)


def _reached(loop, blocks) -> set:
    """The blocks of ``loop`` reached from ``blocks`` without going round (through its
    header)."""
    seen: set = set()
    todo = list(blocks)
    while todo:
        block = todo.pop()
        if block in seen or block is loop.header or not loop.contains(block):
            continue
        seen.add(block)
        todo.extend(block.successors)
    return seen


def shift_induction_of(loop, phi: I.Phi) -> ShiftInduction | None:
    """``phi = [start, outside], [phi shifted by a constant, latch]``, else None."""
    if not phi.type.is_int or phi.type.is_vector:
        return None
    outside = {v for v, blk in phi.incoming if not loop.contains(blk)}
    inside = {v for v, blk in phi.incoming if loop.contains(blk)}
    if len(outside) != 1 or len(inside) != 1:
        return None
    (start,), (update,) = outside, inside
    if not loop.is_invariant(start) or not isinstance(update, I.BinaryOp):
        return None
    a, amount = update.operands
    if update.opcode not in ("lshr", "ashr", "shl") or a is not phi or \
            not hasattr(amount, "value") or amount.value <= 0:
        return None
    return ShiftInduction(start, update.opcode, amount.value)
