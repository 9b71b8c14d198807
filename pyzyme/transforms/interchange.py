"""Loop interchange before differentiation: a reduction nest turned to walk memory in order.

``C[i, j] = sum(A[i, p] * B[p, j] for p)`` written as loops keeps the sum in a register over the
inner ``p`` loop and steps down a column of ``B``. Its reverse sweep does the same with
``B'``: each iteration adds into ``B'[p, j]``, a whole row apart from the last one, so every
iteration waits on the store before it (two addresses 4096 bytes apart look alike to the
processor) and nothing vectorizes. Swapping the loops cures both sweeps, but the sum then has
to live in memory: ``C[i, j] = 0`` for every ``j``, then ``C[i, j] += A[i, p] * B[p, j]`` with
``j`` innermost. Each ``C[i, j]`` still gets its terms in the same order, so the primal's
results are bitwise those of the original nest. So are the derivative's where the nest reads
each array at one place, since every shadow cell then gets its additions in the same order as
well (a cell indexed by ``p`` alone, like ``A'[i, p]``, by ``j`` in the original order; one
indexed by both, once per ``(p, j)``). An array read at two places (``A[i, p]`` and
``A[i, k - 1 - p]``) adds into one cell from two iterations, whose order the interchange
changes: those cells are equal to rounding.

:func:`plan` looks for this shape in each loop nest, as LLVM leaves it after the pre-AD
pipeline (rotated loops, the outer one's trip count and the inner one's independent of each
other)::

    outer:  j = phi [j0, pre], [j + s, latch]       ; nothing but pure instructions
    inner:  p = phi [p0, outer], [p + t, inner]     ; pure instructions, loads, pure intrinsics
            r = phi [r0, outer], [r', inner]        ; one or more sums (any update)
    latch:  store r', q(j)                          ; pure instructions, the stores of the sums

and :func:`interchange` rewrites it as ``for j: store r0, q(j)`` followed by ``for p: for j:
r = load q(j); ...; store r', q(j)``. It does so only when that is safe and pays:

- every pointer the nest reads or writes is based on a ``noalias`` parameter, a stack slot
  or an allocation of the function's own, the sums' cells on objects of their own that
  nothing else in the nest reads, and
  ``q(j)`` steps by a constant at least as large as the cell (one cell per ``j``);
- fewer of the nest's accesses step through memory by more than one element per iteration
  of the innermost loop than before (``B[p, j]`` with ``p`` inside is one; with ``j`` inside,
  none).

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @f(ptr noalias %a, ptr noalias %b, ptr noalias %c, i64 %n, i64 %m) {
... entry:
...   br label %outer
... outer:
...   %j = phi i64 [ 0, %entry ], [ %j1, %latch ]
...   %bj = getelementptr double, ptr %b, i64 %j
...   br label %inner
... inner:
...   %p = phi i64 [ 0, %outer ], [ %p1, %inner ]
...   %s = phi double [ 0.0, %outer ], [ %s1, %inner ]
...   %pa = getelementptr double, ptr %a, i64 %p
...   %x = load double, ptr %pa
...   %row = mul i64 %p, %m
...   %pb = getelementptr double, ptr %bj, i64 %row
...   %y = load double, ptr %pb
...   %xy = fmul double %x, %y
...   %s1 = fadd double %s, %xy
...   %p1 = add nuw nsw i64 %p, 1
...   %pdone = icmp eq i64 %p1, %n
...   br i1 %pdone, label %latch, label %inner
... latch:
...   %pc = getelementptr double, ptr %c, i64 %j
...   store double %s1, ptr %pc
...   %j1 = add nuw nsw i64 %j, 1
...   %jdone = icmp eq i64 %j1, %m
...   br i1 %jdone, label %exit, label %outer
... exit:
...   ret void
... }''')
>>> fn = m.get_function("f")
>>> for nest in plan(fn):
...     print(nest)
nest %outer > %inner: interchanged
  sum %s stored at %pc [%c + 8*j]
  strided accesses innermost: 1 before, 0 after
>>> interchange(fn)
1
>>> [b.name for b in fn.blocks]     # doctest: +NORMALIZE_WHITESPACE
['entry', 'outer.interchange.init', 'outer.interchange.outer', 'outer.interchange.inner',
 'outer.interchange.latch', 'exit']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.loops import Loop, analyze_loops
from pyzyme.analysis.overwrite import identified_object, pure_call, underlying_object
from pyzyme import naming
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.opcodes import PURE
from pyzyme.ir.values import ConstantInt

__all__ = ["Nest", "plan", "interchange"]



@dataclass
class Sum:
    """A value the inner loop carries from one iteration to the next and the outer loop
    stores once the inner loop is done: it will live in its cell instead."""

    phi: I.Phi
    update: I.Instruction
    store: I.Store
    stride: int = 0          # bytes from one outer iteration's cell to the next


@dataclass
class Nest:
    """One candidate nest and what :func:`interchange` would make of it (``reason`` says
    why not, when it would not)."""

    outer: Loop
    inner: Loop
    reason: str = ""
    # What the analysis found (the outer header and the inner loop's one block are the loops'
    # headers): the outer loop's latch, and the two loops' induction variables.
    latch: object = None
    counter: object = None
    inner_counter: object = None
    sums: list = field(default_factory=list)
    before: int = 0           # accesses that stride innermost, as the nest is
    after: int = 0            # and interchanged

    @property
    def worthwhile(self) -> bool:
        return not self.reason

    def __str__(self) -> str:
        head = f"nest {_ref(self.outer.header)} > {_ref(self.inner.header)}: "
        if self.reason:
            return head + f"left as it is ({self.reason})"
        lines = [head + "interchanged"]
        j = self.counter.phi
        for s in self.sums:
            ptr = s.store.pointer
            lines.append(f"  sum {_ref(s.phi)} stored at {_ref(ptr)} "
                         f"[{_ref(underlying_object(ptr))} + {s.stride}*{j.name}]")
        lines.append(f"  strided accesses innermost: {self.before} before, {self.after} after")
        return "\n".join(lines)


def _ref(value) -> str:
    if isinstance(value, I.Instruction) and not value.name:
        return f"a {value.opcode}" + (f" of {value.called_function.name}"
                                      if isinstance(value, I.CallBase)
                                      and value.called_function is not None else "")
    return value.ref if hasattr(value, "ref") else str(value)


class _Refuse(Exception):
    pass


# ------------------------------------------------------------------------------- analysis

def plan(fn) -> list[Nest]:
    """Every two-deep nest of ``fn`` whose outer loop holds exactly one loop, with what
    :func:`interchange` would do to it."""
    nests = []
    for outer in analyze_loops(fn).loops:
        if len(outer.children) != 1:
            continue
        nest = Nest(outer, outer.children[0])
        try:
            _analyze(nest)
        except _Refuse as why:
            nest.reason = str(why)
        nests.append(nest)
    return nests


def _analyze(nest: Nest) -> None:
    outer, inner = nest.outer, nest.inner
    head, body, latch = _shape(outer, inner)
    if len(head.phis) != 1 or not outer.inductions or outer.inductions[0].phi is not head.phis[0]:
        raise _Refuse("the outer loop carries more than its counter")
    j = outer.inductions[0]
    iv = next((v for v in inner.inductions if v.phi.parent is body), None)
    if iv is None or not outer.is_invariant(iv.start):
        raise _Refuse("the inner loop's counter does not start at the same value every time")
    nest.latch, nest.counter, nest.inner_counter = latch, j, iv
    nest_blocks = {head, body, latch}
    for block in nest_blocks:
        for inst in block.instructions:
            if any(u.parent not in nest_blocks for u in inst.users):
                raise _Refuse(f"{_ref(inst)} is used after the nest")
    for phi in outer.exits[0].phis:
        for v, b in phi.incoming:
            if b is latch and isinstance(v, I.Instruction) and v.parent in nest_blocks:
                raise _Refuse("a value of the nest flows out of it")

    stores = {}
    for phi in body.phis:
        if phi is iv.phi:
            continue
        nest.sums.append(_sum(phi, body, latch, outer))
        stores[nest.sums[-1].store] = nest.sums[-1]
    if not nest.sums:
        raise _Refuse("the inner loop carries no sum")
    for inst in head.instructions[1:-1] + latch.instructions[:-1]:
        if inst not in stores and not _pure(inst):
            raise _Refuse(f"{_ref(inst)} is not pure arithmetic")
    cond = _condition(body)
    for inst in body.instructions[len(body.phis):-1]:
        if not (_pure(inst) or (isinstance(inst, I.Load) and not inst.volatile
                                and not inst.ordering)):
            raise _Refuse(f"the inner loop has {_ref(inst)}")
    for op in _chain(cond, body):
        if isinstance(op, I.Phi) and op is not iv.phi or isinstance(op, I.Load):
            raise _Refuse("the inner loop's test depends on more than its counter")
    if not all(outer.is_invariant(op) or op is iv.update or op is iv.phi
               for op in cond.operands):
        raise _Refuse("the inner loop's trip count changes with the outer loop")

    counters = _Counters(nest_blocks, {j.phi: j.step, iv.phi: iv.step})
    cells = set()
    for s in nest.sums:
        obj = underlying_object(s.store.pointer)
        if not identified_object(obj) or obj in cells:
            raise _Refuse(f"the cells of {_ref(s.phi)} may be reached another way")
        cells.add(obj)
        size = sizeof(s.update.type)
        s.stride = _slope(s.store.pointer, j.phi, counters, casts=False)
        if s.stride is None or abs(s.stride) < size:
            raise _Refuse(f"{_ref(s.phi)} may not get a cell of its own per outer iteration")
    loads = [inst for inst in body.instructions if isinstance(inst, I.Load)]
    for load in loads:
        obj = underlying_object(load.pointer)
        if not identified_object(obj) or obj in cells:
            raise _Refuse(f"{_ref(load)} may read the cells of the sums")

    def strided(ptr, loop_iv, size) -> bool:
        slope = _slope(ptr, loop_iv.phi, counters)
        return slope is None or abs(slope) not in (0, size)

    nest.before = sum(strided(ld.pointer, iv, sizeof(ld.type)) for ld in loads)
    nest.after = sum(strided(ld.pointer, j, sizeof(ld.type)) for ld in loads) + \
        sum(strided(s.store.pointer, j, sizeof(s.update.type)) for s in nest.sums)
    if nest.after >= nest.before:
        raise _Refuse(f"it would not pay ({nest.before} strided accesses innermost before, "
                      f"{nest.after} after)")


def _shape(outer: Loop, inner: Loop):
    """The outer loop's header, the inner loop's only block and the outer loop's latch."""
    if len(outer.blocks) != 3 or len(inner.blocks) != 1 or outer.preheader is None:
        raise _Refuse("not a header, a one-block inner loop and a latch")
    head, body = outer.header, inner.header
    latches = outer.latches
    if len(latches) != 1 or latches[0] in (head, body) or outer.exiting != latches:
        raise _Refuse("the outer loop does not end at its latch")
    latch = latches[0]
    if len(outer.exits) != 1:
        raise _Refuse("the outer loop has several exits")
    h_term, b_term, l_term = head.terminator, body.terminator, latch.terminator
    if not isinstance(h_term, I.Branch) or h_term.is_conditional or \
            h_term.successors != [body]:
        raise _Refuse("the outer header does not go straight into the inner loop")
    if not (isinstance(b_term, I.Branch) and b_term.is_conditional
            and set(b_term.successors) == {body, latch}):
        raise _Refuse("the inner loop does not end in the latch")
    if not (isinstance(l_term, I.Branch) and l_term.is_conditional
            and set(l_term.successors) == {head, outer.exits[0]}):
        raise _Refuse("the latch does not end the outer loop")
    if latch.phis:
        raise _Refuse("the latch has phis")
    return head, body, latch


def _sum(phi: I.Phi, body, latch, outer: Loop) -> Sum:
    start = [v for v, b in phi.incoming if b is not body]
    update = [v for v, b in phi.incoming if b is body]
    if len(start) != 1 or len(update) != 1 or not outer.is_invariant(start[0]):
        raise _Refuse(f"{_ref(phi)} does not start at the same value every time")
    update = update[0]
    if not isinstance(update, I.Instruction) or update.parent is not body:
        raise _Refuse(f"{_ref(phi)} is not updated in the inner loop")
    rest = [u for u in update.users if u is not phi]
    if len(rest) != 1 or not isinstance(rest[0], I.Store) or rest[0].parent is not latch or \
            rest[0].value is not update or rest[0].volatile or rest[0].ordering:
        raise _Refuse(f"{_ref(phi)} is not stored once after the inner loop")
    for inst in body.instructions:
        if inst is not update and any(u.parent is latch for u in inst.users):
            raise _Refuse(f"{_ref(inst)} is used after the inner loop")
    return Sum(phi, update, rest[0])


def _condition(body) -> I.Compare:
    cond = body.terminator.operands[0]
    if not isinstance(cond, I.Compare) or cond.parent is not body:
        raise _Refuse("the inner loop's test is not a comparison")
    return cond


def _chain(value, block) -> list:
    """The instructions of ``block`` that ``value`` is computed from (itself included)."""
    out, work, seen = [], [value], set()
    while work:
        v = work.pop()
        if not isinstance(v, I.Instruction) or v.parent is not block or v in seen:
            continue
        seen.add(v)
        out.append(v)
        if not isinstance(v, I.Phi):
            work.extend(v.operands)
    return out


def _pure(inst) -> bool:
    if isinstance(inst, I.CallBase):
        return pure_call(inst)
    # A division that could trap is kept too: the interchanged nest runs every instruction on
    # the same iterations, only in another order.
    return inst.opcode in PURE


@dataclass
class _Counters:
    """The nest's blocks and its two counters with their steps."""

    blocks: set
    steps: dict


def _slope(v, phi: I.Phi, counters: _Counters, casts: bool = True, memo=None) -> int | None:
    """How much ``v`` grows per iteration of the loop counted by ``phi`` (bytes, for a
    pointer); None when that is not a constant. The other counter is fixed here, and so is
    every value from outside the nest."""
    memo = {} if memo is None else memo
    if not isinstance(v, I.Instruction) or v.parent not in counters.blocks:
        return 0
    if v in memo:
        return memo[v]
    memo[v] = got = _slope_of(v, phi, counters, casts, memo)
    return got


def _slope_of(v, phi, counters, casts, memo) -> int | None:
    def slope(x):
        return _slope(x, phi, counters, casts, memo)

    if isinstance(v, I.Phi):
        if v not in counters.steps:
            return None
        return counters.steps[v] if v is phi else 0
    if isinstance(v, I.GetElementPtr):
        total = slope(v.pointer)
        ty = v.source_type
        for k, idx in enumerate(v.indices):
            if k:
                if isinstance(ty, T.StructType):
                    ty = ty.elements[idx.value] if isinstance(idx, ConstantInt) else None
                    if ty is None:
                        return None
                    continue
                ty = ty.element
            d = slope(idx)
            if total is None or d is None:
                return None
            total += d * sizeof(ty)
        return total
    if isinstance(v, I.BinaryOp) and v.opcode in ("add", "sub", "mul", "shl"):
        a, b = (slope(op) for op in v.operands)
        if a is None or b is None:
            return None
        if v.opcode in ("add", "sub"):
            return a + b if v.opcode == "add" else a - b
        if v.opcode == "shl":
            shift = v.operands[1]
            return a << shift.value if not b and isinstance(shift, ConstantInt) else None
        if a and b:
            return None
        x, c = (v.operands[1], a) if a else (v.operands[0], b)
        if not c:
            return 0
        return c * x.signed if isinstance(x, ConstantInt) else None
    if casts and isinstance(v, I.Cast) and v.opcode in ("sext", "zext", "trunc"):
        return slope(v.operands[0])
    return 0 if all(slope(op) == 0 for op in v.operands) else None


# -------------------------------------------------------------------------------- rewrite

def interchange(fn) -> int:
    """Interchange every nest of ``fn`` that :func:`plan` finds worthwhile; how many."""
    done = 0
    while True:   # a rewrite changes the loops: look again
        nest = next((n for n in plan(fn) if n.worthwhile), None)
        if nest is None:
            return done
        _rewrite(nest)
        done += 1


def _rewrite(nest: Nest) -> None:
    outer, inner = nest.outer, nest.inner
    head, body, latch = outer.header, inner.header, nest.latch
    exit_block = outer.exits[0]
    pre = outer.preheader
    fn = head.parent
    j, iv = nest.counter, nest.inner_counter
    init, pouter, pinner, platch = (
        BasicBlock(fn, fn.unique_name(naming.interchanged(head.name, part)))
        for part in ("init", "outer", "inner", "latch"))
    where = fn.blocks.index(head)
    fn.blocks[where:where] = [init, pouter, pinner, platch]
    pre.terminator.replace_uses_of(head, init)
    stores = {s.store for s in nest.sums}
    l_term, b_term = latch.terminator, body.terminator

    def outer_loop(b: IRBuilder) -> dict:
        """A copy of the outer loop's counting where ``b`` builds: its counter and what the
        header and latch compute from it (but the stores)."""
        counter = b.phi(j.phi.type, name=j.phi.name)
        mapping = {j.phi: counter}
        _copy(b, head.instructions[1:-1], mapping)
        _copy(b, [i for i in latch.instructions[:-1] if i not in stores], mapping)
        return mapping

    # The cells start at the sums' starting values.
    b = IRBuilder(init)
    m = outer_loop(b)
    for s in nest.sums:
        start = next(v for v, blk in s.phi.incoming if blk is not body)
        b.insert(s.store.copy_with([start, m.get(s.store.pointer, s.store.pointer)],
                                   keep_metadata=True))
    _close(b, m[j.phi], j.phi, m, pre, init, l_term, {head: init, exit_block: pouter})

    # for p: for j: the inner loop's body, its sums read from and written to their cells.
    b = IRBuilder(pouter)
    p = b.phi(iv.phi.type, name=iv.phi.name)
    p.add_incoming(iv.start, init)
    b.br(pinner)
    b = IRBuilder(pinner)
    m = outer_loop(b)
    m[iv.phi] = p
    for s in nest.sums:
        m[s.phi] = b.load(s.update.type, m.get(s.store.pointer, s.store.pointer),
                          align=s.store.align, name=s.phi.name)
        m[s.phi].metadata = list(s.store.metadata)
    _copy(b, body.instructions[len(body.phis):-1], m)
    for s in nest.sums:
        b.insert(s.store.copy_with([m[s.update], m.get(s.store.pointer, s.store.pointer)],
                                   keep_metadata=True))
    _close(b, m[j.phi], j.phi, m, pouter, pinner, l_term, {head: pinner, exit_block: platch})

    b = IRBuilder(platch)
    m = {iv.phi: p}
    needed = set(_chain(b_term.operands[0], body)) | set(_chain(iv.update, body))
    _copy(b, [i for i in body.instructions if i in needed and not isinstance(i, I.Phi)], m)
    b.cbranch(m[b_term.operands[0]], *(
        {body: pouter, latch: exit_block}[t] for t in b_term.successors))
    p.add_incoming(m[iv.update], platch)
    for phi in exit_block.phis:
        phi.blocks = [platch if blk is latch else blk for blk in phi.blocks]

    fn.remove_blocks([head, body, latch])


def _copy(b: IRBuilder, insts, mapping: dict) -> None:
    for inst in insts:
        clone = inst.copy_with([mapping.get(op, op) for op in inst.operands], keep_metadata=True)
        mapping[inst] = b.insert(clone, inst.name if inst.has_result else "")


def _close(b: IRBuilder, counter, phi, mapping, enter, block, term, targets) -> None:
    """Finish a copy of the outer loop's counting: its counter's incoming values and the
    latch's branch, its targets mapped by ``targets``."""
    start = next(v for v, blk in phi.incoming if blk is not term.parent)
    update = next(v for v, blk in phi.incoming if blk is term.parent)
    counter.add_incoming(start, enter)
    counter.add_incoming(mapping[update], block)
    cond = term.operands[0]
    b.cbranch(mapping.get(cond, cond), *(targets[t] for t in term.successors))
