"""Index-set splitting before differentiation: ``for j: if j != p: body`` as two plain loops.

A pair loop skips one index: ``for j in range(n): if j != i: ...`` (Lennard-Jones forces,
Coulomb sums, kernel matrices, leave-one-out statistics). The test runs on every iteration, so
the body is conditional and LLVM vectorizes it only with masked accesses: in the reverse
sweep, adds into ``pos'[j, 0:3]`` under a mask are scatters (or nothing vectorizes, on a CPU
without them). Yet the skipped index is known before the loop starts, so the loop can run as
two loops without the test, ``[j0, p)`` and ``[p + 1, n)``, their bodies unconditional; the
derivative of each is a plain loop that vectorizes. The iterations that run, and the order
they run in, are the original's: the results are bitwise the same.

:func:`plan` finds, in each loop, a branch at the header on ``j != p`` or ``j == p`` (an
``icmp`` of the counter, or an ``fcmp`` of the counter and ``p`` both converted to floating
point, as Numba compares an ``int64`` with a ``uint64`` prange index), where ``p`` does not
change in the loop, one side goes straight to the latch and the other runs the body. The
skipped iteration must do nothing: the header and the latch only compute (no stores, no calls
with effects), each value the loop carries passes the skipping edge unchanged, and after the
loop only the carried values and the counter's last step are used. :func:`split` rewrites the
loop as::

    check:   a = min(max(p, j0), n); b = a + (j0 <= p < n)    ; the skipped index, clamped
             br (j0 < n [and every value fits the float's mantissa]), enter, original loop
    enter:   br j0 < a, first, between
    first:   the loop over [j0, a), the test gone
    between: br b < n, second, after
    second:  the loop over [b, n), carrying on from the first's values
    after:   the carried values merged, then the loop's exit

The original loop stays, reached where the check fails: a do-while loop entered with
``j0 >= n`` (it runs once), or converted values too large to compare exactly.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define double @f(ptr %x, i64 %n, i64 %p) {
... entry:
...   br label %loop
... loop:
...   %j = phi i64 [ 0, %entry ], [ %j1, %latch ]
...   %s = phi double [ 0.0, %entry ], [ %s2, %latch ]
...   %skip = icmp eq i64 %j, %p
...   br i1 %skip, label %latch, label %body
... body:
...   %px = getelementptr double, ptr %x, i64 %j
...   %v = load double, ptr %px
...   %s1 = fadd double %s, %v
...   br label %latch
... latch:
...   %s2 = phi double [ %s, %loop ], [ %s1, %body ]
...   %j1 = add nsw i64 %j, 1
...   %done = icmp eq i64 %j1, %n
...   br i1 %done, label %exit, label %loop
... exit:
...   ret double %s2
... }''')
>>> fn = m.get_function("f")
>>> print(*plan(fn), sep="\\n")
loop %loop: split around %p (skipped where %j == %p)
>>> split(fn)
1
>>> [b.name for b in fn.blocks]  # doctest: +NORMALIZE_WHITESPACE
['entry', 'loop.skip.check', 'loop.skip.enter', 'loop.skip.first', 'body.skip.first',
 'latch.skip.first', 'loop.skip.between', 'loop.skip.second', 'body.skip.second',
 'latch.skip.second', 'loop.skip.after', 'loop', 'body', 'latch', 'exit']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme import naming
from pyzyme.analysis.loops import Loop, analyze_loops
from pyzyme.analysis.overwrite import pure_call
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir.builder import resolve_later_operands
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.opcodes import PURE
from pyzyme.ir.values import const_int

__all__ = ["Split", "plan", "split"]

# icmp/fcmp predicates that hold where the counter and the skipped index differ / are equal
# (converted integers are never NaN, so ordered and unordered tests agree).
_DIFFER = {"ne", "une", "one"}
_EQUAL = {"eq", "oeq", "ueq"}
# Integers up to 2**bits convert to these floating-point types exactly.
_MANTISSA = {"double": 53, "float": 24}
# A loop copied twice more: larger bodies are left alone (the derivative copies them too).
_MAX_INSTRUCTIONS = 400


@dataclass(eq=False)
class Split:
    """One loop :func:`plan` looked at: where it would split, or why not."""

    loop: Loop
    reason: str = ""                 # why it is left as it is ('' where it is split)
    skipped: object = None           # p, the index the test skips
    work: object = None              # the header's successor that runs the body
    converted: str = ""              # the float type the test compares in ('' for icmp)
    carried: list = field(default_factory=list)   # (header phi, its value along the latch)
    early: list = field(default_factory=list)     # exits from the body (each copy has them)

    def __str__(self) -> str:
        head = f"loop {_ref(self.loop.header)}"
        if self.reason:
            return f"{head}: left as it is ({self.reason})"
        iv = self.loop.trip_count.induction.phi
        test = f" in {self.converted}" if self.converted else ""
        return f"{head}: split around {_ref(self.skipped)} (skipped where {_ref(iv)} == " \
               f"{_ref(self.skipped)}{test})"


def _ref(value) -> str:
    try:
        return value.ref
    except ValueError:
        return "%?"


def plan(fn) -> list[Split]:
    """The loops of ``fn`` whose header branches on the counter against a loop-invariant
    index, each with the split :func:`split` would make or the reason it makes none."""
    out = []
    for loop in analyze_loops(fn).loops:
        found = _test(loop)
        if found is not None:
            out.append(_plan(loop, *found))
    return out


def split(fn) -> int:
    """Split every loop of ``fn`` that :func:`plan` splits; how many."""
    done, seen = 0, set()
    while True:   # a rewrite changes the loops: look again
        todo = next((s for s in plan(fn) if not s.reason and s.loop.header not in seen), None)
        if todo is None:
            return done
        seen.add(todo.loop.header)    # the original stays, as the fallback: not again
        _rewrite(todo)
        done += 1


def _test(loop: Loop):
    """The header's branch on ``counter ==/!= p``, as (p, work successor, float type), or
    None where the header does not branch on its counter."""
    term = loop.header.terminator
    count = loop.trip_count
    if count is None or not isinstance(term, I.Branch) or not term.is_conditional:
        return None
    cond = term.operands[0]
    if not isinstance(cond, I.Compare) or cond.predicate not in _DIFFER | _EQUAL:
        return None
    iv = count.induction.phi
    a, b = cond.operands
    converted = ""
    if cond.opcode == "fcmp":
        if not (isinstance(a, I.Cast) and isinstance(b, I.Cast)
                and a.opcode in ("uitofp", "sitofp") and b.opcode in ("uitofp", "sitofp")
                and a.type.kind in _MANTISSA):
            return None
        converted = a.type.kind
        a, b = a.operands[0], b.operands[0]
    if b is iv:
        a, b = b, a
    if a is not iv or b.type != iv.type or not loop.is_invariant(b):
        return None
    t, f = term.successors
    return b, (t if cond.predicate in _DIFFER else f), converted


def _plan(loop: Loop, skipped, work, converted: str) -> Split:
    s = Split(loop, skipped=skipped, work=work, converted=converted)
    count = loop.trip_count
    iv = count.induction
    header = loop.header
    skip = next(t for t in header.terminator.successors if t is not work)
    members = set(loop.blocks)

    def no(reason: str) -> Split:
        s.reason = reason
        return s

    if loop.preheader is not None and \
            loop.preheader.name.startswith(naming.index_split(header.name, "check")):
        return no("split already: this is the original, run where the check fails")
    if iv.step != 1 or not count.uses_next or count.predicate not in ("ne", "slt"):
        return no("its counter does not count up by one to a bound tested at the latch")
    if len(loop.latches) != 1 or skip is not loop.latches[0] or work is skip:
        return no("the test does not skip straight to the latch")
    latch = skip
    leave = next((t for t in latch.successors if t not in members), None)
    if count.exiting is not latch or loop.preheader is None or leave is None \
            or leave.predecessors != [latch]:
        return no("the loop is not left from its latch into a block of its own")
    # Other exits (Numba's ZeroDivisionError) leave from the body, which each copy has.
    early = set(loop.exits) - {leave}
    if sum(len(b.instructions) for b in loop.blocks) > _MAX_INSTRUCTIONS:
        return no(f"more than {_MAX_INSTRUCTIONS} instructions")
    for inst in header.instructions[len(header.phis):] + latch.instructions[len(latch.phis):]:
        if not _harmless(inst):
            return no(f"the skipped iteration runs {_ref(inst)}")
    for phi in header.phis:
        if phi is iv.phi:
            continue
        along = next(v for v, b in phi.incoming if b is latch)
        if not (isinstance(along, I.Phi) and along.parent is latch
                and next(v for v, b in along.incoming if b is header) is phi):
            return no(f"{_ref(phi)} changes in the skipped iteration")
        s.carried.append((phi, along))
    for phi in latch.phis:
        if not any(phi is along for _, along in s.carried):
            return no(f"{_ref(phi)} is not carried around the loop")
    kept = {along for _, along in s.carried} | {iv.update}
    for blk in loop.blocks:
        for inst in blk.instructions:
            for u in inst.users:
                if u.parent in members or (isinstance(u, I.Phi) and u.parent in early):
                    continue
                if inst not in kept or u.parent in early:
                    return no(f"{_ref(inst)} is used after the loop")
    s.early = sorted(early, key=lambda blk: blk.name)
    return s


def _harmless(inst) -> bool:
    """What the skipped iteration may run and lose nothing by not running."""
    if isinstance(inst, I.CallBase):
        return pure_call(inst)
    if inst.opcode == "load":
        return not getattr(inst, "volatile", False)
    return inst.opcode in PURE or inst.is_terminator


def _rewrite(s: Split) -> None:
    loop = s.loop
    fn = loop.header.parent
    count = loop.trip_count
    iv = count.induction
    header, latch, pre = loop.header, loop.latches[0], loop.preheader
    exit_block = next(t for t in latch.successors if not loop.contains(t))
    ty, n, p, j0 = iv.phi.type, count.bound, s.skipped, iv.start
    name = header.name

    def named(part):
        return naming.index_split(name, part)

    check, enter, between, after = (BasicBlock(fn, fn.unique_name(named(part)))
                                    for part in ("check", "enter", "between", "after"))
    pre.terminator.replace_uses_of(header, check)
    for phi in header.phis:
        phi.blocks = [check if b is pre else b for b in phi.blocks]

    b = IRBuilder(check)
    ok = b.icmp("slt", j0, n, name=named("runs"))
    if s.converted:
        # Converted integers compare like the integers where all are exact in the type.
        limit = const_int(ty, 2 ** _MANTISSA[s.converted])
        for cond in (b.icmp("sge", j0, const_int(ty, 0), name=named("from.exact")),
                     b.icmp("sle", n, limit, name=named("to.exact")),
                     b.icmp("ule", p, limit, name=named("exact"))):
            ok = b.and_(ok, cond, name=named("runs"))
    low = b.select(b.icmp("slt", p, j0, name=named("low")), j0, p, name=named("at"))
    a = b.select(b.icmp("slt", low, n, name=named("high")), low, n, name=named("at"))
    inside = b.and_(b.icmp("sge", p, j0, name=named("from")),
                    b.icmp("slt", p, n, name=named("to")), name=named("inside"))
    after_skip = b.add(a, b.zext(inside, ty, name=named("one")), name=named("rest"))
    b.cbranch(ok, enter, header)

    first = _copy(loop, s, "first", check, enter, {iv.phi: j0}, a, between)
    b = IRBuilder(enter)
    b.cbranch(b.icmp("slt", j0, a, name=named("before")), first.header, between)
    b = IRBuilder(between)
    middle = {}
    for phi, along in s.carried:
        m = b.phi(phi.type, name=phi.name)
        m.add_incoming(next(v for v, blk in phi.incoming if blk is check), enter)
        m.add_incoming(first.values[along], first.latch)
        middle[phi] = m
    second = _copy(loop, s, "second", check, between, {iv.phi: after_skip, **middle}, n,
                   after)
    b.cbranch(b.icmp("slt", after_skip, n, name=named("more")), second.header, after)

    b = IRBuilder(after)
    final = {iv.update: n}
    for phi, along in s.carried:
        m = b.phi(phi.type, name=along.name)
        m.add_incoming(middle[phi], between)
        m.add_incoming(second.values[along], second.latch)
        final[along] = m
    b.br(exit_block)

    # After the loop: its values from whichever copy ran last, or from the original loop.
    members = set(loop.blocks)
    for phi in exit_block.phis:
        value = next(v for v, blk in phi.incoming if blk is latch)
        phi.add_incoming(final.get(value, value), after)
    for value, merged in final.items():
        outside = [u for u in value.users if u.parent not in members
                   and not (isinstance(u, I.Phi) and u.parent is exit_block)]
        if not outside:
            continue
        m = I.Phi(value.type)
        exit_block.insert(len(exit_block.phis), m)
        m.name = fn.unique_name(value.name or "merged")
        m.add_incoming(merged, after)
        m.add_incoming(value, latch)
        for u in outside:
            u.replace_uses_of(value, m)

    where = fn.blocks.index(header)
    fn.blocks[where:where] = [check, enter, *first.blocks, between, *second.blocks, after]


@dataclass
class _Copy:
    """One copy of the loop: its blocks, header, latch and each value's copy."""

    blocks: list
    header: BasicBlock
    latch: BasicBlock
    values: dict


def _copy(loop: Loop, s: Split, part: str, check, enter: BasicBlock, starts: dict,
          bound, leave: BasicBlock) -> _Copy:
    """A copy of ``loop`` entered from ``enter`` (where the loop is entered from ``check``),
    its header phis starting at ``starts`` (the counter and carried values), the test gone,
    left for ``leave`` where ``counter + 1 == bound``."""
    fn = loop.header.parent
    header, latch = loop.header, loop.latches[0]
    mapping: dict = {check: enter}
    blocks = []
    for blk in loop.blocks:
        mapping[blk] = BasicBlock(fn, fn.unique_name(naming.index_split(blk.name, part)))
        blocks.append(mapping[blk])
    copies = []
    for blk in loop.blocks:
        b = IRBuilder(mapping[blk])
        for inst in blk.instructions:
            if inst is header.terminator:
                copy = b.br(mapping[s.work])
            elif inst is latch.terminator:
                continue
            else:
                copy = b.insert_copy(inst, mapping)
            mapping[inst] = copy
            copies.append(copy)
    resolve_later_operands(copies, mapping)
    new_header, new_latch = mapping[header], mapping[latch]
    for phi in header.phis:
        copy = mapping[phi]
        k = copy.blocks.index(enter)
        copy.set_operand(k, starts.get(phi, phi.operands[k]))
    for phi in latch.phis:
        mapping[phi].remove_incoming(new_header)
    members = set(loop.blocks)
    for phi in (phi for blk in s.early for phi in blk.phis):
        for value, came in phi.incoming:
            if came in members:
                phi.add_incoming(mapping.get(value, value), mapping[came])
    b = IRBuilder(new_latch)
    done = b.icmp("eq", mapping[loop.trip_count.induction.update], bound,
                  name=naming.index_split(header.name, "done"))
    b.cbranch(done, leave, new_header)
    _sweep(blocks)
    return _Copy(blocks, new_header, new_latch, mapping)


def _sweep(blocks) -> None:
    """Erase what the copies no longer use (the test, the old exit test)."""
    changed = True
    while changed:
        changed = False
        for blk in blocks:
            for inst in reversed(blk.instructions):
                if inst.has_result and not inst.users and inst.opcode in PURE:
                    inst.erase()
                    changed = True
