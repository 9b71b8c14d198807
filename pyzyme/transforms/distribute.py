"""Loop distribution of reverse sweeps: a stencil's adjoint turned from a scatter into a gather.

The reverse of ``w[i] = v[i-1] + v[i] + v[i+1]`` accumulates into three neighbouring cells of
the shadow ``v'`` per iteration: ``v'[i-1] += t; v'[i] += t; v'[i+1] += t``. Iteration ``i-1``
reads back what iteration ``i`` wrote one cell away, so no vector of iterations can run at once
and the loop runs at the latency of a store forwarded to a load (LLVM refuses it: its loop
distribution puts every access with such a dependence in one partition). Yet the three
accumulations depend on one another only *forwards*: ``v'[j]`` is updated first by the
statement with the lowest offset, then the next, whatever ``j`` is. So the statements can be
split apart (*distributed*) and run in that order, and then joined again (*fused*) with each
one shifted by its dependence distance: iteration ``i`` of the new loop runs the first
statement for cell ``j``, the second for the same cell (one iteration later in the original
numbering), the third for it too. Every cell receives the same additions in the same order as
before (the results are bitwise those of the original loop), and the loop is a gather
(``v'[j] += a*t[j+1] + b*t[j] + c*t[j-1]``) that LLVM vectorizes.

:func:`plan` decides this for one single-block loop of a reverse sweep, from the addresses of
its memory accesses as affine functions of the loop counter (:class:`Address`), and
:func:`distribute` rewrites the loop when the plan has more than one partition:

- *Statements* are the stores to memory (and to stack slots that carry a sum from one
  iteration to the next). A load belongs to the statements its value reaches, through SSA
  values and through the per-iteration slots of the reverse sweep (slots whose last store in
  the iteration is a zero: adjoints consumed where they are used).
- Two accesses of one root pointer conflict at iteration distances found from their offsets;
  a store of statement ``j`` and an access of statement ``k`` whose conflicting instances all
  come first in ``j`` order ``j`` before ``k``; conflicts both ways (or unknown) put them in
  one partition; cycles of order merge too.
- Shifts: each partition runs as many iterations ahead of the loop as its dependences on the
  partitions before it allow (their least distance). When the shifts span at most
  4 iterations the partitions share one loop, its first and last iterations (where
  only some partitions have work) peeled into straight code; loops too short for that run
  the original. Otherwise each partition gets a loop of its own (neighbouring partitions with
  no dependence between different iterations share one), the counter and the per-iteration
  slots reset between them.
- Accesses of different roots must not overlap: a check before the loops compares each pair
  of roots' byte ranges over the whole loop (from the addresses at its first and last
  iteration) and runs the original loop when they overlap. The rewritten accesses then get
  alias scopes saying so, and accesses of one cell share one address computation, so LLVM
  keeps a cell in a register between the partitions' updates and needs no check of its own.

Anything the plan does not understand (a call that is not a pure intrinsic, a phi, a value
used after the loop, an address that is not affine in the counter) leaves the loop as it is:
the transform is an optimization, never a requirement.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @f(ptr %dv, ptr %dw, i64 %n) {
... entry:
...   %count = alloca i64
...   store i64 %n, ptr %count
...   br label %loop
... loop:
...   %c = load i64, ptr %count
...   %pw = getelementptr double, ptr %dw, i64 %c
...   %t = load double, ptr %pw
...   store double 0.0, ptr %pw
...   %pv = getelementptr double, ptr %dv, i64 %c
...   %hi = getelementptr i8, ptr %pv, i64 8
...   %a = load double, ptr %hi
...   %a1 = fadd double %a, %t
...   store double %a1, ptr %hi
...   %lo = getelementptr i8, ptr %pv, i64 -8
...   %b = load double, ptr %lo
...   %b1 = fadd double %b, %t
...   store double %b1, ptr %lo
...   %next = sub i64 %c, 1
...   store i64 %next, ptr %count
...   %done = icmp eq i64 %next, 0
...   br i1 %done, label %exit, label %loop
... exit:
...   ret void
... }''')
>>> fn = m.get_function("f")
>>> p = plan(fn.blocks[1], fn.blocks[0].instructions[0])
>>> print(p)
loop %loop: 3 statements, counter %count from its value at entry down to 0 + 1
  load  %pw  [%dw + 8*count]  for 1, 2
  store %pw  [%dw + 8*count]  statement 0
  load  %hi  [%dv + 8*count + 8]  for 1
  store %hi  [%dv + 8*count + 8]  statement 1
  load  %lo  [%dv + 8*count - 8]  for 2
  store %lo  [%dv + 8*count - 8]  statement 2
  partitions: {2} +0, {1} +2, {0} +0 (one loop, shifted)
  checks: %dw against %dv
>>> distribute(p)
True
>>> [b.name for b in fn.blocks]         # doctest: +NORMALIZE_WHITESPACE
['entry', 'loop.distribute', 'loop.fused.first', 'loop.fused.loop', 'loop.fused.last',
 'loop', 'exit']
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.transforms.distribute_plan import Access, Address, Plan, plan
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.values import const_int

__all__ = ["Address", "Plan", "plan", "distribute"]


def distribute(p: Plan, scopes=None) -> bool:
    """Rewrite the loop of ``p`` as one loop per partition (or one loop, shifted), behind the
    overlap check; False (and nothing changed) when the plan has fewer than two partitions.
    With ``scopes`` (the module's :class:`~pyzyme.transforms.alias_scopes.ScopeTable`) the rewritten
    accesses of each checked array get a scope of their own, not aliasing the others: what
    the check found, told to LLVM (it then needs no check of its own, and keeps a cell
    updated by several statements in a register)."""
    if not p.worthwhile:
        return False
    block = p.block
    fn = block.parent
    check = BasicBlock(fn, fn.unique_name(naming.distributed_check(block.name)))
    fn.blocks.insert(fn.blocks.index(block), check)
    for pred in block.predecessors:
        if pred is not block:
            pred.terminator.replace_uses_of(block, check)
    b = IRBuilder(check)
    hoisted: dict = {}
    start = b.load(T.i64, p.counter)
    saved = [(slot, b.load(slot.allocated_type, slot)) for slot in p.locals]
    ok = _overlap_test(b, p, start, hoisted)
    scoped = _scoping(p, scopes)
    if p.shifts is not None:
        _fuse(p, b, start, saved, ok, hoisted, scoped)
    else:
        _split(p, b, start, saved, ok, scoped)
    return True


def _split(p: Plan, b: IRBuilder, start, saved, ok, scoped: dict) -> None:
    """One loop per partition, in order, the counter and the per-iteration slots reset
    before each; the original loop runs when ``ok`` fails (and is deleted when there is
    nothing to test)."""
    block, fn = p.block, p.block.parent
    blocks = []
    for k in range(len(p.partitions)):
        if k:
            blocks.append(BasicBlock(fn, fn.unique_name(naming.distributed_reset(block.name, k))))
        blocks.append(BasicBlock(fn, fn.unique_name(naming.distributed_part(block.name, k))))
    where = fn.blocks.index(block)
    fn.blocks[where:where] = blocks
    parts, resets = blocks[0::2], blocks[1::2]
    if ok is None:
        b.br(parts[0])
    else:
        b.cbranch(ok, parts[0], block)
    stores = {a.inst for a in p.accesses if a.is_store}
    for k, (group, part) in enumerate(zip(p.partitions, parts)):
        mine = {a.inst for a in p.accesses if a.is_store and a.statement in group}
        after = resets[k] if k < len(resets) else p.exit_target
        _clone(IRBuilder(part), block, stores - mine, {block: part, p.exit_target: after},
               scoped)
        if k < len(resets):
            rb = IRBuilder(resets[k])
            rb.store(start, p.counter)
            for slot, value in saved:
                rb.store(value, slot)
            rb.br(parts[k + 1])
    if ok is None:   # nothing to check: the original loop is never run
        for inst in reversed(block.instructions):   # users come after their operands
            inst.erase()
        fn.blocks.remove(block)


def _scoping(p: Plan, scopes) -> dict:
    """The metadata of the copies of each access of a checked root: its own scope added to
    ``alias.scope``, the other checked roots' to ``noalias``."""
    if scopes is None or not p.checks:
        return {}
    roots = list(dict.fromkeys(r for pair in p.checks for r in pair))
    own = {r: scopes.scope((p.block, r), f"{p.block.name}: %{r.name}") for r in roots}
    apart = {r: set() for r in roots}
    for a, b in p.checks:
        apart[a].add(own[b])
        apart[b].add(own[a])
    out = {}
    for a in p.accesses:
        root = a.address.root
        if root not in own:
            continue
        meta = dict(a.inst.metadata)
        mine = scopes.members(meta["alias.scope"]) if "alias.scope" in meta else ()
        others = scopes.members(meta["noalias"]) if "noalias" in meta else ()
        if mine is None or others is None:
            continue   # metadata that is not ours: left as it is
        rest = [(k, v) for k, v in a.inst.metadata if k not in ("alias.scope", "noalias")]
        out[a.inst] = rest + [("alias.scope", scopes.list([*mine, own[root]])),
                              ("noalias", scopes.list([*others, *apart[root]]))]
    return out


def _fuse(p: Plan, b: IRBuilder, start, saved, ok, hoisted: dict, scoped: dict) -> None:
    """The partitions in one loop, partition ``k`` ``p.shifts[k]`` iterations ahead: the
    first and last iterations, where only some partitions have work, peeled into straight
    code. Short loops (and overlapping arrays) run the original."""
    block, fn = p.block, p.block.parent
    lo, hi = min(p.shifts), max(p.shifts)
    end = _hoist(b, p.exit_value, block, hoisted)
    trips = b.sub(start, end)
    long = b.icmp("sge", trips, const_int(T.i64, hi - lo + 2))
    go = long if ok is None else b.and_(ok, long)
    where = fn.blocks.index(block)
    names = [naming.fused_block(block.name, part) for part in ("first", "loop", "last")]
    first, loop, last = (BasicBlock(fn, fn.unique_name(n)) for n in names)
    fn.blocks[where:where] = [first, loop, last]
    stores = {a.inst for a in p.accesses if a.is_store}
    own = [{a.inst for a in p.accesses if a.is_store and a.statement in group}
           for group in p.partitions]
    # An iteration without its branch: the counter is read as a given value, not stepped.
    counting = [i for i in block.instructions
                if isinstance(i, (I.Load, I.Store)) and i.pointer is p.counter]
    stepping = {block.terminator, *(i for i in counting if isinstance(i, I.Store))}
    reads = [i for i in counting if isinstance(i, I.Load)]

    by_inst = {a.inst: a for a in p.accesses}
    pointers: dict = {}
    sums: dict = {}

    def pointer(ib: IRBuilder, a: Access, base, delta: int):
        """``a``'s address when the counter reads ``base + delta``, made once per block and
        byte offset: accesses of one cell by different partitions share it, so LLVM sees
        the same address and keeps the cell in a register between their updates."""
        addr = a.address
        if isinstance(addr.root, I.Alloca):
            return None   # a slot: its own pointer, which mem2reg knows
        const = addr.offset + addr.step * delta
        key = (ib.block, addr.root, addr.terms, addr.step, const, base)
        got = pointers.get(key)
        if got is None:
            if (addr.root, addr.terms) not in sums:   # loop-invariant: before the loop
                sums[(addr.root, addr.terms)] = (_hoist(b, addr.root, block, hoisted),
                                                 _terms(b, addr, block, hoisted))
            root, total = sums[(addr.root, addr.terms)]
            off = ib.add(total, ib.add(ib.mul(base, const_int(T.i64, addr.step)),
                                       const_int(T.i64, const)))
            ptr = a.inst.operands[-1] if a.is_store else a.inst.operands[0]
            got = pointers[key] = ib.gep(T.i8, root, [off], name=ptr.name)
        return got

    skips = [(stores - own[k]) | stepping for k in range(len(p.shifts))]
    planned = {a.inst.pointer for a in p.accesses}
    unneeded = [_unneeded(block, skip, planned) for skip in skips]

    def instances(ib: IRBuilder, base, delta_of, active) -> None:
        for k, shift in enumerate(p.shifts):
            if not active(shift):
                continue
            delta = delta_of(shift)
            count = base if not delta else ib.add(base, const_int(T.i64, delta))
            if base is start and delta == 0:   # a partition's first iteration: the slots
                for slot, value in saved:      # as the loop found them
                    ib.store(value, slot)
            _clone(ib, block, skips[k] | unneeded[k], dict.fromkeys(reads, count),
                   scoped, lambda inst: pointer(ib, by_inst[inst], base, delta)
                   if inst in by_inst else None)

    # Peeled first iterations: the loop count at C0 + c, C0 being the counter at entry.
    fb = IRBuilder(first)
    for c in range(hi, lo - 1, -1):
        instances(fb, start, lambda shift, c=c: c - shift, lambda shift, c=c: c <= shift)
    fb.store(fb.add(start, const_int(T.i64, lo - 1)), p.counter)
    fb.br(loop)
    lb = IRBuilder(loop)
    count = lb.load(T.i64, p.counter)
    instances(lb, count, lambda shift: -shift, lambda shift: True)
    nxt = lb.sub(count, const_int(T.i64, 1))
    lb.store(nxt, p.counter)
    lb.cbranch(lb.icmp("eq", nxt, lb.add(end, const_int(T.i64, hi))), last, loop)
    # Peeled last iterations: the loop count at end + c.
    eb = IRBuilder(last)
    for c in range(hi, lo, -1):
        instances(eb, end, lambda shift, c=c: c - shift, lambda shift, c=c: c - shift >= 1)
    eb.store(end, p.counter)
    eb.br(p.exit_target)
    b.cbranch(go, first, block)   # last: the blocks above hoisted values into ``check``


def _unneeded(block, skip: set, planned: set) -> set:
    """The instructions of ``block`` outside ``skip`` that one partition's copy need not
    make: pure values (the loop holds nothing else but stores, its counter and its branch)
    that no store kept in the copy needs, to memory or to a slot of ``planned`` (the plan's
    pointers: memory and the slots carrying sums), nor a per-iteration slot such a value is
    read from. A per-iteration slot is zero after each iteration, so a copy that makes none
    of its loads and stores leaves it as one that makes them all. A 5x5 stencil's reverse
    copied its whole body, 590 instructions, for each of its 26 partitions at each of 9
    iterations."""
    insts = [i for i in block.instructions if i not in skip]
    by_slot: dict = {}
    for inst in insts:
        if isinstance(inst, (I.Load, I.Store)) and isinstance(inst.pointer, I.Alloca) \
                and inst.pointer not in planned:
            by_slot.setdefault(inst.pointer, []).append(inst)
    used: set = set()
    todo = [i for i in insts if isinstance(i, I.Store) and i.pointer not in by_slot]
    while todo:
        inst = todo.pop()
        if inst in used:
            continue
        used.add(inst)
        todo.extend(op for op in inst.operands
                    if isinstance(op, I.Instruction) and op.parent is block and op not in skip)
        if isinstance(inst, (I.Load, I.Store)) and inst.pointer in by_slot:
            todo.extend(by_slot.pop(inst.pointer))
    return {i for i in insts if i not in used}


def _clone(b: IRBuilder, block, skip: set, mapping: dict, scoped: dict,
           pointer_of=lambda inst: None) -> None:
    """The instructions of ``block`` inserted by ``b``, but for those in ``skip`` and those
    ``mapping`` already gives a value (operands are read through ``mapping``, which the
    copies join); a load or store gets ``pointer_of(inst)`` as its pointer where that is not
    None, and the metadata ``scoped`` gives it."""
    for inst in block.instructions:
        if inst in skip or inst in mapping:
            continue
        ops = [mapping.get(op, op) for op in inst.operands]
        if isinstance(inst, (I.Load, I.Store)):
            ptr = pointer_of(inst)
            if ptr is not None:
                ops[-1 if isinstance(inst, I.Store) else 0] = ptr
        clone = inst.copy_with(ops, keep_metadata=True)
        if inst in scoped:
            clone.metadata = list(scoped[inst])
        mapping[inst] = b.insert(clone, inst.name if inst.has_result else "")


def _hoist(b: IRBuilder, v, block, hoisted: dict):
    """``v`` (loop-invariant) computed before the loop: instructions of the loop are copied."""
    if not isinstance(v, I.Instruction) or v.parent is not block:
        return v
    got = hoisted.get(v)
    if got is None:
        ops = [_hoist(b, op, block, hoisted) for op in v.operands]
        got = hoisted[v] = b.insert(v.copy_with(ops, keep_metadata=True))
    return got


def _overlap_test(b: IRBuilder, p: Plan, start, hoisted: dict):
    """An i1 that is true when no two roots of ``p.checks`` overlap and every assumption of
    ``p.guards`` holds at the first and last iterations (None: nothing to test)."""
    if not (p.checks or p.guards):
        return None
    last = b.add(_hoist(b, p.exit_value, p.block, hoisted), const_int(T.i64, 1))
    ranges: dict = {}
    ok = None
    for pair in p.checks:
        for root in pair:
            if root not in ranges:
                ranges[root] = _range(b, p, root, start, last, hoisted)
        (lo1, hi1), (lo2, hi2) = ranges[pair[0]], ranges[pair[1]]
        apart = b.or_(b.icmp("ule", hi1, lo2), b.icmp("ule", hi2, lo1))
        ok = apart if ok is None else b.and_(ok, apart)
    at_first: dict = {}
    at_last: dict = {}
    for cond, value in p.guards:
        for count, memo in ((start, at_first), (last, at_last)):
            got = _at(b, cond, p, count, memo, hoisted)
            holds = got if value else b.xor(got, const_int(T.i1, 1))
            ok = holds if ok is None else b.and_(ok, holds)
    return ok


def _at(b: IRBuilder, v, p: Plan, count, memo: dict, hoisted: dict):
    """``v`` computed before the loop as on the iteration where the counter reads ``count``
    (``v`` is an affine function of the counter, or a comparison of such functions)."""
    if not isinstance(v, I.Instruction) or v.parent is not p.block:
        return v
    if isinstance(v, I.Load) and v.pointer is p.counter:
        return count
    if v in hoisted:
        return hoisted[v]
    got = memo.get(v)
    if got is None:
        if isinstance(v, I.Load):   # invariant (a slot or the tape): the same on every one
            return _hoist(b, v, p.block, hoisted)
        ops = [_at(b, op, p, count, memo, hoisted) for op in v.operands]
        got = memo[v] = b.insert(v.copy_with(ops))
    return got


def _range(b: IRBuilder, p: Plan, root, start, last, hoisted) -> tuple:
    """Byte range ``[lo, hi)`` (as i64) that the loop's accesses of ``root`` can touch."""
    base = b.ptrtoint(_hoist(b, root, p.block, hoisted), T.i64)
    lo = hi = None
    for a in p.accesses:
        if a.address.root is not root:
            continue
        addr = a.address
        sym = b.add(_terms(b, addr, p.block, hoisted), const_int(T.i64, addr.offset))
        first = b.add(sym, b.mul(start, const_int(T.i64, addr.step)))
        end = b.add(sym, b.mul(last, const_int(T.i64, addr.step)))
        ascending = b.icmp("slt", first, end)
        low = b.select(ascending, first, end)
        high = b.add(b.select(ascending, end, first), const_int(T.i64, addr.size))
        lo = low if lo is None else b.select(b.icmp("slt", low, lo), low, lo)
        hi = high if hi is None else b.select(b.icmp("sgt", high, hi), high, hi)
    return b.add(base, lo), b.add(base, hi)


def _terms(b: IRBuilder, addr: Address, block, hoisted: dict):
    """The loop-invariant part ``sum(coef * symbol)`` of ``addr``, as i64 before the loop."""
    total = const_int(T.i64, 0)
    for sym, coef in addr.terms:
        total = b.add(total, b.mul(_hoist(b, sym, block, hoisted), const_int(T.i64, coef)))
    return total
