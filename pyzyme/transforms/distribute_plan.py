"""The plan of :mod:`pyzyme.transforms.distribute`: which statements of a reverse loop can run apart.

For one single-block loop of a reverse sweep, :func:`plan` reads every memory access's address
as an affine function of the loop counter (:class:`Address`), finds which statement each load
feeds, orders the statements by the distances of their dependences, and decides how far ahead
each one can run when they share one loop again (:class:`Plan`, which prints itself). Anything
it does not understand makes it refuse, with the reason in the printed plan.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @f(ptr %dv, i64 %n) {
... entry:
...   %count = alloca i64
...   store i64 %n, ptr %count
...   br label %loop
... loop:
...   %c = load i64, ptr %count
...   %p = getelementptr double, ptr %dv, i64 %c
...   %x = load double, ptr %p
...   %g = call double @g(double %x)
...   store double %g, ptr %p
...   %next = sub i64 %c, 1
...   store i64 %next, ptr %count
...   %done = icmp eq i64 %next, 0
...   br i1 %done, label %exit, label %loop
... exit:
...   ret void
... }
... declare double @g(double)''')
>>> fn = m.get_function("f")
>>> print(plan(fn.blocks[1], fn.blocks[0].instructions[0]))
loop %loop: left as it is (the loop calls g)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.analysis.layout import field_offset, sizeof
from pyzyme.analysis.overwrite import pure_call
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.opcodes import READ_WRITE
from pyzyme.ir.values import ConstantFP, ConstantInt, Value, ZeroInitializer

__all__ = ["Access", "Address", "Plan", "plan"]

COUNT = "count"   # the symbol of the loop counter's value at the start of an iteration
# Fused groups run at most this many iterations apart (each extra one peels two iterations).
_MAX_SPAN = 4


@dataclass(frozen=True)
class Address:
    """Where one access points: ``root + sum(coef * symbol) + step * count + offset``, in bytes.

    ``root`` and the symbols are the same on every iteration; ``count`` is the loop counter's
    value when the iteration began (it goes down by one per iteration).
    """

    root: Value
    terms: tuple = ()       # ((symbol, coefficient), ...) in a fixed order
    step: int = 0
    offset: int = 0
    size: int = 0

    def same_base(self, other: Address) -> bool:
        return self.root is other.root and self.terms == other.terms

    def distances(self, other: Address) -> set[int] | None:
        """The iteration distances ``d`` at which this access at iteration ``t`` and ``other``
        at ``t + d`` touch a common byte; ``None`` when it is every distance."""
        if self.step != other.step:
            raise ValueError("accesses with different steps")
        delta = other.offset - self.offset  # other's byte minus ours, at equal counts
        if self.step == 0:
            return None if -other.size < delta < self.size else set()
        # At t + d other's start lies delta - step*d past ours (count goes down as t goes up).
        s = self.step
        lo = (delta - self.size) // s - 1 if s > 0 else (delta + other.size) // s - 1
        hi = (delta + other.size) // s + 1 if s > 0 else (delta - self.size) // s + 1
        return {d for d in range(min(lo, hi), max(lo, hi) + 1)
                if -other.size < delta - s * d < self.size}

    def text(self, ref) -> str:
        text = ref(self.root)
        for k, what in [*((c, ref(sym)) for sym, c in self.terms), (self.step, "count"),
                        (self.offset, "")]:
            if k:
                magnitude = f"{abs(k)}*{what}" if what else str(abs(k))
                text += f" {'-' if k < 0 else '+'} {magnitude}"
        return text


@dataclass
class Access:
    inst: I.Instruction
    address: Address
    is_store: bool
    position: int
    statement: int | None = None       # stores: their statement
    users: frozenset = frozenset()     # loads: the statements their value reaches


@dataclass
class Plan:
    """What :func:`pyzyme.transforms.distribute.distribute` would do to one loop; ``reason`` says
    why not, when it would not (then ``partitions`` has fewer than two entries)."""

    block: BasicBlock
    counter: Value
    reason: str = ""
    accesses: list = field(default_factory=list)
    statements: int = 0
    partitions: list = field(default_factory=list)   # lists of statements, in run order
    shifts: list | None = None   # fused: how many iterations ahead each partition runs
    checks: list = field(default_factory=list)       # pairs of roots that must not overlap
    exit_value: Value | None = None                  # the counter's value that ends the loop
    exit_target: BasicBlock | None = None
    locals: list = field(default_factory=list)       # per-iteration slots (reset per copy)
    guards: list = field(default_factory=list)       # (comparison, value it must have)

    @property
    def worthwhile(self) -> bool:
        return len(self.partitions) > 1

    def __str__(self) -> str:
        ref = _ref
        if not self.worthwhile and self.reason:
            return f"loop {ref(self.block)}: left as it is ({self.reason})"
        head = (f"loop {ref(self.block)}: {self.statements} statements, counter "
                f"{ref(self.counter)} from its value at entry down to "
                f"{ref(self.exit_value)} + 1")
        width = max((len(ref(a.inst.operands[-1] if a.is_store else a.inst.operands[0]))
                     for a in self.accesses), default=0)
        lines = [head]
        for a in self.accesses:
            ptr = ref(a.inst.operands[-1] if a.is_store else a.inst.operands[0])
            role = (f"statement {a.statement}" if a.is_store
                    else "for " + (", ".join(map(str, sorted(a.users))) or "nothing"))
            lines.append(f"  {'store' if a.is_store else 'load '} {ptr:<{width}}  "
                         f"[{a.address.text(ref)}]  {role}")
        groups = ["{" + ", ".join(map(str, p)) + "}" for p in self.partitions]
        if self.shifts is None:
            lines.append("  partitions: " + ", ".join(groups) + " (one loop each)")
        else:
            lines.append("  partitions: " + ", ".join(
                f"{g} {k:+d}" for g, k in zip(groups, self.shifts)) + " (one loop, shifted)")
        lines.append("  checks: " + (", ".join(f"{ref(a)} against {ref(b)}"
                                               for a, b in self.checks) or "none"))
        if self.guards:
            lines.append("  assumes: " + ", ".join(f"{ref(c)} {str(v).lower()}"
                                                   for c, v in self.guards))
        return "\n".join(lines)


def _ref(value) -> str:
    if isinstance(value, I.Instruction) and not value.name:
        return f"(unnamed {value.opcode})"
    return value.ref if hasattr(value, "ref") else str(value)


class _NotAffine(Exception):
    pass


class _Refuse(Exception):
    pass


# ------------------------------------------------------------------------------- analysis

def plan(block: BasicBlock, counter: Value, tape_scope: str | None = None) -> Plan:
    """How to distribute the single-block loop ``block``, which counts ``counter`` (a stack
    slot) down by one per iteration; loads whose ``!alias.scope`` is ``tape_scope`` read memory
    the loop does not write (the tape)."""
    p = Plan(block, counter)
    try:
        _analyze(p, tape_scope)
    except _Refuse as why:
        p.reason = str(why)
        p.partitions = []
    return p


def _analyze(p: Plan, tape_scope: str | None) -> None:
    block, counter = p.block, p.counter
    insts = block.instructions
    term = block.terminator
    if not isinstance(term, I.Branch) or not term.is_conditional or block.phis:
        raise _Refuse("not a single-block loop without phis")
    cond, on_true, on_false = term.operands
    if block not in (on_true, on_false) or on_true is on_false:
        raise _Refuse("not a single-block loop")
    exit_target = on_false if on_true is block else on_true
    for inst in insts:
        if any(u.parent is not block for u in inst.users):
            raise _Refuse(f"{_ref(inst)} is used after the loop")
        _require_understood(inst)

    slot_stores: dict = {}
    counter_store = None
    for inst in insts:
        if isinstance(inst, I.Store) and isinstance(inst.pointer, I.Alloca):
            if inst.pointer is counter:
                if counter_store is not None:
                    raise _Refuse("the counter is stored twice")
                counter_store = inst
            else:
                slot_stores.setdefault(inst.pointer, []).append(inst)
    if counter_store is None:
        raise _Refuse("the counter is not stored in the loop")
    _check_exit(p, cond, counter_store, exit_target)
    p.exit_target = exit_target
    local = [s for s, stores in slot_stores.items() if _is_zero(stores[-1].value)]
    p.locals = local

    inv = _Invariance(block, set(slot_stores) | {counter}, tape_scope)
    affine = _Affine(inv, counter, block)
    position = {inst: k for k, inst in enumerate(insts)}
    # Statements: stores to memory and to slots that carry a value across iterations.
    statement: dict = {}
    for inst in insts:
        if isinstance(inst, I.Store) and inst is not counter_store and \
                not (isinstance(inst.pointer, I.Alloca) and inst.pointer in local):
            statement[inst] = len(statement)
    p.statements = len(statement)
    everything = frozenset(statement.values())
    reach = _reach(insts, statement, everything, counter_store, term, set(local))

    accesses = []
    for inst in insts:
        if not isinstance(inst, (I.Load, I.Store)):
            continue
        ptr = inst.pointer
        if isinstance(ptr, I.Alloca) and (ptr is counter or ptr in local
                                          or ptr not in slot_stores):
            if isinstance(inst, I.Load) and ptr is counter and position[inst] > \
                    position[counter_store]:
                raise _Refuse("the counter is read after it is stepped")
            continue   # counter, per-iteration slots, slots the loop only reads
        if isinstance(inst, I.Load) and tape_scope is not None and \
                ("alias.scope", tape_scope) in inst.metadata:
            continue   # the tape: written by the forward sweep only (checked below)
        ty = inst.value.type if isinstance(inst, I.Store) else inst.type
        try:
            address = affine.address(ptr, sizeof(ty))
        except _NotAffine:
            raise _Refuse(f"the address {_ref(ptr)} is not affine in the counter") from None
        a = Access(inst, address, isinstance(inst, I.Store), position[inst])
        if a.is_store:
            if tape_scope is not None and ("alias.scope", tape_scope) in inst.metadata:
                raise _Refuse("the loop writes the tape")
            a.statement = statement[inst]
        else:
            a.users = reach[inst]
        accesses.append(a)
    p.accesses = accesses
    p.guards = list(affine.guards.items())
    slots = {inst.pointer for inst in insts
             if isinstance(inst, (I.Load, I.Store)) and isinstance(inst.pointer, I.Alloca)}
    for a in accesses:
        if a.address.root in slots and a.inst.pointer is not a.address.root:
            raise _Refuse(f"slot {_ref(a.address.root)} is also reached through an address")
    if not inv(p.exit_value):
        raise _Refuse("the counter's end changes in the loop")
    if exit_target.phis:
        raise _Refuse("the block after the loop has phis")
    groups, crossing, before, p.checks = _partition(accesses, p.statements)
    shifts = _shifts(groups, before)
    if len(groups) > 1 and any(shifts) and max(shifts) - min(shifts) <= _MAX_SPAN:
        p.partitions, p.shifts = groups, shifts
    else:
        p.partitions = _merge_quiet(groups, crossing)


def _require_understood(inst) -> None:
    if isinstance(inst, (I.Load, I.Store)):
        if inst.volatile or inst.ordering:
            raise _Refuse(f"{_ref(inst)} is volatile or atomic")
        return
    if isinstance(inst, I.CallBase):
        if not pure_call(inst):
            fn = inst.called_function
            raise _Refuse(f"the loop calls {fn.name if fn is not None else 'a pointer'}")
        return
    if inst.opcode in READ_WRITE or inst.opcode in ("alloca", "invoke", "callbr", "phi",
                                                    "landingpad"):
        raise _Refuse(f"the loop has a {inst.opcode}")


def _is_zero(value) -> bool:
    return (isinstance(value, ConstantFP) and value.value == 0.0) or \
        (isinstance(value, ConstantInt) and value.value == 0) or isinstance(value, ZeroInitializer)


def _check_exit(p: Plan, cond, counter_store, exit_target) -> None:
    step = counter_store.value
    loaded = step.operands[0] if isinstance(step, I.BinaryOp) else None
    ok = (isinstance(step, I.BinaryOp) and isinstance(loaded, I.Load)
          and loaded.pointer is p.counter and loaded.parent is p.block
          and ((step.opcode == "sub" and _const(step.operands[1]) == 1)
               or (step.opcode == "add" and _const(step.operands[1]) == -1)))
    if not ok:
        raise _Refuse("the counter does not go down by one")
    if not (isinstance(cond, I.Compare) and cond.opcode == "icmp"
            and cond.predicate in ("eq", "ne") and step in cond.operands):
        raise _Refuse("the loop does not end when the counter reaches a value")
    other = cond.operands[1] if cond.operands[0] is step else cond.operands[0]
    term = p.block.terminator
    leaves_on_true = term.operands[1] is exit_target
    if (cond.predicate == "eq") != leaves_on_true:
        raise _Refuse("the loop test is not the counter reaching its end")
    p.exit_value = other


def _const(v) -> int | None:
    return v.signed if isinstance(v, ConstantInt) else None


class _Invariance:
    """Which values of the loop are the same on every iteration (memoized)."""

    def __init__(self, block, stored_slots: set, tape_scope: str | None) -> None:
        self.block = block
        self.stored_slots = stored_slots
        self.tape_scope = tape_scope
        self.memo: dict = {}

    def __call__(self, v) -> bool:
        if not isinstance(v, I.Instruction) or v.parent is not self.block:
            return True
        known = self.memo.get(v)
        if known is None:
            known = self.memo[v] = self._decide(v)
        return known

    def _decide(self, v) -> bool:
        if isinstance(v, I.Load):
            ptr = v.pointer
            if isinstance(ptr, I.Alloca):
                return ptr not in self.stored_slots
            tape = self.tape_scope is not None and ("alias.scope", self.tape_scope) in v.metadata
            return tape and self(ptr)
        if isinstance(v, (I.BinaryOp, I.Cast, I.GetElementPtr, I.Compare, I.Select)):
            return all(self(op) for op in v.operands)
        return False


class _Affine:
    """Values and addresses of one loop as affine functions of its counter.

    A ``select`` on a comparison of such a function (Numba's wrap-around of negative indices,
    ``i < 0 ? i + n : i``) is read as the operand that is a constant, assuming the comparison
    comes out that way on every iteration; ``guards`` records each assumption, for the check
    before the rewritten loop to test at the first and last iterations (a comparison of an
    affine function with an invariant changes at most once along the loop).
    """

    def __init__(self, inv: _Invariance, counter, block) -> None:
        self.inv = inv
        self.counter = counter
        self.block = block
        self.guards: dict = {}   # comparison -> the value assumed

    def linear(self, v) -> tuple[dict, int]:
        """``v`` as ``sum(coef * symbol) + const`` (the symbol ``COUNT`` for the counter)."""
        c = _const(v)
        if c is not None:
            return {}, c
        if isinstance(v, I.Load) and v.pointer is self.counter and v.parent is self.block:
            return {COUNT: 1}, 0
        if self.inv(v):
            return {v: 1}, 0
        if isinstance(v, I.Cast) and v.opcode in ("sext", "zext"):
            return self.linear(v.operands[0])
        if isinstance(v, I.Select):
            return self.linear(self._assume(v))
        if isinstance(v, I.BinaryOp) and v.opcode in ("add", "sub", "mul", "shl"):
            a, b = (self.linear(op) for op in v.operands)
            if v.opcode in ("add", "sub"):
                sign = 1 if v.opcode == "add" else -1
                terms = dict(a[0])
                for s, k in b[0].items():
                    terms[s] = terms.get(s, 0) + sign * k
                return {s: k for s, k in terms.items() if k}, a[1] + sign * b[1]
            if v.opcode == "shl":
                if b[0]:
                    raise _NotAffine
                b = ({}, 1 << b[1])
            if a[0] and b[0]:
                raise _NotAffine
            (terms, k0), factor = (a, b[1]) if not b[0] else (b, a[1])
            return {s: k * factor for s, k in terms.items() if k * factor}, k0 * factor
        raise _NotAffine

    def _assume(self, select):
        cond, if_true, if_false = select.operands
        if not (isinstance(cond, I.Compare) and cond.opcode == "icmp"):
            raise _NotAffine
        for op in cond.operands:
            self.linear(op)   # affine on both sides, or not at all
        constants = [(_const(op), flag) for op, flag in ((if_true, True), (if_false, False))
                     if _const(op) is not None]
        if not constants:
            raise _NotAffine
        value, flag = min(constants, key=lambda cf: abs(cf[0]))   # 0: no wrap-around
        if self.guards.setdefault(cond, flag) != flag:
            raise _NotAffine
        return if_true if flag else if_false

    def address(self, ptr, size: int) -> Address:
        terms: dict = {}
        const = 0

        def add(lin, scale):
            nonlocal const
            for s, k in lin[0].items():
                terms[s] = terms.get(s, 0) + k * scale
            const += lin[1] * scale

        while not self.inv(ptr):
            if not isinstance(ptr, I.GetElementPtr):
                raise _NotAffine
            ty = ptr.source_type
            add(self.linear(ptr.indices[0]), sizeof(ty))
            for idx in ptr.indices[1:]:
                if isinstance(ty, T.StructType):
                    if _const(idx) is None:
                        raise _NotAffine
                    off, ty = field_offset(ty, [_const(idx)])
                    const += off
                    continue
                if not isinstance(ty, (T.ArrayType, T.VectorType)):
                    raise _NotAffine
                ty = ty.element
                add(self.linear(idx), sizeof(ty))
            ptr = ptr.pointer
        step = terms.pop(COUNT, 0)
        ordered = tuple(sorted(((s, k) for s, k in terms.items() if k),
                               key=lambda sk: (_ref(sk[0]), sk[1])))
        return Address(ptr, ordered, step, const, size)


def _reach(insts, statement, everything, counter_store, term, local) -> dict:
    """For each instruction, the statements its value reaches (within one iteration)."""
    reach: dict = {}
    later_loads: dict = {}
    for inst in reversed(insts):
        if inst is term or inst is counter_store:
            out = everything
        elif inst in statement:
            out = frozenset({statement[inst]})
        elif isinstance(inst, I.Store) and inst.pointer in local:
            out = frozenset().union(*(reach[ld] for ld in later_loads.get(inst.pointer, ())))
        else:
            out = frozenset().union(*(reach.get(u, frozenset()) for u in inst.users))
        reach[inst] = out
        if isinstance(inst, I.Load) and inst.pointer in local:
            later_loads.setdefault(inst.pointer, []).append(inst)
    return reach


def _owners(a: Access) -> frozenset:
    return frozenset({a.statement}) if a.is_store else a.users


class _Sets:
    """Disjoint sets of statements (those that must share one loop)."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def join(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


def _partition(accesses: list, n: int) -> tuple[list, set, dict, list]:
    """Statements grouped and ordered: ``(groups, crossing, before, checks)`` where
    ``before[(j, k)]`` is the least distance ``d`` of a dependence from statement ``j`` at
    iteration ``t`` to ``k`` at ``t + d``, and ``crossing`` holds the pairs with a dependence
    between different iterations."""
    sets = _Sets(n)
    before: dict = {}
    crossing: set = set()
    checks: list = []
    for i, x in enumerate(accesses):
        for y in accesses[i + 1:]:
            if not (x.is_store or y.is_store):
                continue
            if x.address.root is not y.address.root:
                pair = (x.address.root, y.address.root)
                if not _distinct_slots(*pair) and pair not in checks and pair[::-1] not in checks:
                    checks.append(pair)
                continue
            pairs = [(j, k) for j in _owners(x) for k in _owners(y) if j != k]
            if not pairs:
                continue
            if not x.address.same_base(y.address) or x.address.step != y.address.step:
                for j, k in pairs:
                    sets.join(j, k)
                continue
            dists = x.address.distances(y.address)
            if dists is not None and not dists:
                continue
            # x at t, y at t + d: x first when d > 0, or d == 0 and x comes first in the body.
            firsts = {True, False} if dists is None else {
                d > 0 or (d == 0 and x.position < y.position) for d in dists}
            for j, k in pairs:
                if dists is None or any(d != 0 for d in dists):
                    crossing.add(frozenset((j, k)))
                if len(firsts) == 2:
                    sets.join(j, k)
                elif True in firsts:
                    _least(before, (j, k), min(dists))
                else:
                    _least(before, (k, j), min(-d for d in dists))
    groups = _order(n, sets, before)
    return groups, crossing, before, [c for c in checks if _needs_check(c, accesses)]


def _least(table: dict, key, value: int) -> None:
    table[key] = min(value, table.get(key, value))


def _shifts(groups: list, before: dict) -> list[int]:
    """How many iterations ahead each group runs when the groups share one loop: as far as
    its dependences on earlier groups allow, so that each cell's updates meet in one
    iteration (a stencil's adjoint becomes a gather)."""
    group_of = {s: g for g, members in enumerate(groups) for s in members}
    shifts: list[int] = []
    for g in range(len(groups)):
        bounds = [shifts[group_of[j]] + d for (j, k), d in before.items()
                  if group_of[k] == g and group_of[j] != g]
        shifts.append(min(bounds, default=0))
    return shifts


def _distinct_slots(a, b) -> bool:
    # Two stack slots never overlap; a slot is not reachable through any other pointer.
    return isinstance(a, I.Alloca) or isinstance(b, I.Alloca)


def _needs_check(pair, accesses) -> bool:
    return any(a.is_store for a in accesses if a.address.root in pair)


def _order(n: int, sets: _Sets, before: set) -> list:
    """Groups of statements (merged where they must share a loop) in an order that keeps
    every ``before`` edge; a cycle of edges merges its groups."""
    find = sets.find
    while True:
        groups: dict = {}
        for s in range(n):
            groups.setdefault(find(s), []).append(s)
        edges = {(find(j), find(k)) for j, k in before if find(j) != find(k)}
        order = _topological(sorted(groups, key=lambda g: min(groups[g])), edges)
        if order is not None:
            return [groups[g] for g in order]
        cycle = _find_cycle(list(groups), edges)
        for g in cycle[1:]:
            sets.join(g, cycle[0])


def _topological(nodes: list, edges: set) -> list | None:
    indegree = {g: 0 for g in nodes}
    for _, k in edges:
        indegree[k] += 1
    ready = [g for g in nodes if indegree[g] == 0]
    out = []
    while ready:
        g = ready.pop(0)
        out.append(g)
        for j, k in sorted(edges, key=lambda e: nodes.index(e[1])):
            if j == g:
                indegree[k] -= 1
                if indegree[k] == 0:
                    ready.append(k)
                    ready.sort(key=nodes.index)
    return out if len(out) == len(nodes) else None


def _find_cycle(nodes: list, edges: set) -> list:
    succ: dict = {g: [k for j, k in edges if j == g] for g in nodes}
    state: dict = {}
    stack: list = []

    def visit(g):
        state[g] = 1
        stack.append(g)
        for k in succ[g]:
            if state.get(k) == 1:
                return stack[stack.index(k):]
            if k not in state:
                found = visit(k)
                if found:
                    return found
        stack.pop()
        state[g] = 2
        return None

    for g in nodes:
        if g not in state:
            found = visit(g)
            if found:
                return found
    raise AssertionError("no cycle among groups that cannot be ordered")


def _merge_quiet(groups: list, crossing: set) -> list:
    """Join neighbouring groups that no dependence between iterations separates."""
    out: list = []
    for g in groups:
        if out and not any(frozenset((j, k)) in crossing for j in out[-1] for k in g):
            out[-1] = out[-1] + g
        else:
            out.append(list(g))
    return out
