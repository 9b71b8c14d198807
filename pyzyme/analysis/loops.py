"""Natural loops, their nesting, induction variables and trip counts.

A *back edge* is an edge ``latch -> header`` whose target dominates its source; the natural loop
of a header is the header plus every block that reaches one of its latches without passing
through the header. Loops with the same header are one loop. Reverse mode needs this to know
where values must be cached per iteration and how many iterations to replay: a loop whose trip
count is known before it starts can preallocate its tapes; a while-style loop can only count.

Irreducible control flow (a cycle entered at two places, so no block of it dominates the rest)
has no natural loop; its retreating edges are listed in ``LoopInfo.irreducible`` instead.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''define double @f(i64 %n) {
... entry:
...   br label %loop
... loop:
...   %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
...   %i.next = add nuw nsw i64 %i, 1
...   %done = icmp eq i64 %i.next, %n
...   br i1 %done, label %exit, label %loop
... exit:
...   ret double 0.0
... }''')
>>> print(analyze_loops(m.get_function("f")))
loops of @f
loop %loop (depth 1): blocks %loop; latch %loop; exits %exit
  preheader %entry; exiting %loop
  induction %i = 0 + 1*k; trip count %n (known before the loop)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.analysis.cfg import DominatorTree, block_label, dominators, reverse_post_order
from pyzyme.ir import instructions as I
from pyzyme.ir.values import ConstantInt, Value
from pyzyme.progress import timed

__all__ = ["InductionVariable", "Loop", "LoopInfo", "TripCount", "analyze_loops",
           "runs_at_most_twice"]

# The predicate that holds exactly when the given one does not.
_INVERSE = {"eq": "ne", "ne": "eq", "slt": "sge", "sge": "slt", "sgt": "sle", "sle": "sgt",
            "ult": "uge", "uge": "ult", "ugt": "ule", "ule": "ugt"}
# The predicate with its operands exchanged: ``a < b`` is ``b > a``.
_SWAPPED = {"eq": "eq", "ne": "ne", "slt": "sgt", "sgt": "slt", "sle": "sge", "sge": "sle",
            "ult": "ugt", "ugt": "ult", "ule": "uge", "uge": "ule"}


def _ref(value: Value) -> str:
    try:
        return value.ref
    except ValueError:  # an unnamed instruction: only a printed function numbers it
        return "%?"


@dataclass
class InductionVariable:
    """A header phi ``phi = start + step*k`` on the k-th iteration, stepped by ``update``."""

    phi: I.Phi
    start: Value
    step: int
    update: I.Instruction

    def __str__(self) -> str:
        sign = "-" if self.step < 0 else "+"
        return f"{_ref(self.phi)} = {_ref(self.start)} {sign} {abs(self.step)}*k"


@dataclass
class TripCount:
    """How many times the loop header runs, as decided by one exiting branch.

    This is LLVM's trip count (the back-edge-taken count plus one): for a rotated loop, tested at
    its latch, the number of iterations; for a loop tested at its header, one more than the
    number of times its body runs.

    The loop keeps going while ``icmp predicate v, bound`` holds, where ``v`` is the induction
    variable's value on that iteration (``uses_next``: its stepped value, as in rotated loops).
    ``exact`` is false when other exits can leave the loop earlier (the count is then an upper
    bound). ``text`` is the count as an expression over the loop-invariant values.
    """

    induction: InductionVariable
    bound: Value
    predicate: str
    uses_next: bool
    exiting: object
    exact: bool
    text: str

    @property
    def start(self) -> Value:
        return self.induction.start

    @property
    def step(self) -> int:
        return self.induction.step

    def __str__(self) -> str:
        if self.exact:
            return f"trip count {self.text} (known before the loop)"
        return f"trip count at most {self.text} (known before the loop; other exits)"


@dataclass(eq=False)
class Loop:
    """One natural loop: its header, blocks (in reverse post-order), nesting and shape."""

    header: object
    blocks: list = field(default_factory=list)
    latches: list = field(default_factory=list)
    parent: Loop | None = None
    children: list = field(default_factory=list)
    exiting: list = field(default_factory=list)
    exits: list = field(default_factory=list)
    preheader: object = None
    inductions: list = field(default_factory=list)
    trip_count: TripCount | None = None

    @property
    def depth(self) -> int:
        """1 for an outermost loop, one more per enclosing loop."""
        return 1 if self.parent is None else self.parent.depth + 1

    @property
    def induction(self) -> InductionVariable | None:
        """The induction variable that decides the trip count, else the first one found."""
        if self.trip_count is not None:
            return self.trip_count.induction
        return self.inductions[0] if self.inductions else None

    def induction_of(self, phi) -> InductionVariable | None:
        """The induction variable whose header phi is ``phi``, if any."""
        return next((iv for iv in self.inductions if iv.phi is phi), None)

    # The blocks as a set, for membership tests (kept in step with ``blocks``).
    _members: set = field(default_factory=set, repr=False)

    def contains(self, block) -> bool:
        return block in self._members

    def is_invariant(self, value: Value) -> bool:
        """Whether ``value`` is the same on every iteration (defined outside the loop)."""
        if isinstance(value, I.Instruction):
            return value.parent not in self._members
        return True  # constants, arguments, globals

    def lines(self, indent: int = 0) -> list[str]:
        pad = "  " * indent
        labels = ", ".join
        head = (f"{pad}loop {block_label(self.header)} (depth {self.depth}): "
                f"blocks {labels(block_label(b) for b in self.blocks)}; "
                f"latch{'es' if len(self.latches) > 1 else ''} "
                f"{labels(block_label(b) for b in self.latches)}; "
                f"exits {labels(block_label(b) for b in self.exits) or 'none'}")
        shape = (f"{pad}  preheader "
                 f"{block_label(self.preheader) if self.preheader is not None else 'none'}; "
                 f"exiting {labels(block_label(b) for b in self.exiting) or 'none'}")
        ivs = [self.induction] + [iv for iv in self.inductions if iv is not self.induction]
        facts = "induction " + ", ".join(str(iv) for iv in ivs) if self.inductions else \
            "no induction variable"
        count = str(self.trip_count) if self.trip_count is not None else \
            "trip count unknown until exit"
        out = [head, shape, f"{pad}  {facts}; {count}"]
        for child in self.children:
            out.extend(child.lines(indent + 1))
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass
class LoopInfo:
    """The loops of ``function``: outermost loops in ``top``, every loop in ``loops``."""

    function: object
    loops: list = field(default_factory=list)
    top: list = field(default_factory=list)
    irreducible: list = field(default_factory=list)

    def loop_of(self, block) -> Loop | None:
        """The innermost loop containing ``block``."""
        best = None
        for loop in self.loops:
            if loop.contains(block) and (best is None or loop.depth > best.depth):
                best = loop
        return best

    def __str__(self) -> str:
        lines = [f"loops of {self.function.ref}"]
        for loop in self.top:
            lines.extend(loop.lines())
        for src, dst in self.irreducible:
            lines.append(f"irreducible edge {block_label(src)} -> {block_label(dst)} "
                         "(no natural loop)")
        if len(lines) == 1:
            lines.append("no loops")
        return "\n".join(lines)


@timed("analyses")
def analyze_loops(fn, doms: DominatorTree | None = None) -> LoopInfo:
    """Find the natural loops of ``fn`` and describe each.

    Parameters
    ----------
    fn
        A function with a body.
    doms
        Its dominator tree, if already computed.
    """
    doms = doms if doms is not None else dominators(fn)
    order = reverse_post_order(fn)
    index = {b: i for i, b in enumerate(order)}
    info = LoopInfo(fn)
    for header in order:
        latches = []
        for pred in header.predecessors:
            if pred not in index or index[pred] < index[header]:
                continue  # unreachable, or a forward edge
            if doms.dominates(header, pred):
                latches.append(pred)
            else:
                # A retreating edge whose target does not dominate it: the cycle has two entries.
                info.irreducible.append((pred, header))
        if latches:
            info.loops.append(_natural_loop(header, latches, index))
    _nest(info)
    for loop in info.loops:
        _describe(loop, fn, doms)
    return info


def runs_at_most_twice(loop: Loop, doms: DominatorTree) -> bool:
    """Whether ``loop`` starts at most two iterations however it runs: a test on every
    iteration (its block dominates each latch) leaves it on a flag that holds the value that
    leaves once a back edge has been taken (:func:`_set_after_back_edge`). That is LLVM's
    form of a loop over a constant two items whose exit it threaded: Numba's loop over the
    dimensions of a 2-D array broadcast into (``u[1] = x``), the flag a header phi
    ``[c, entry], [true, latch]``, or passed on through the phi of a loop nested in it (the
    test leaves in its middle too). Its second iteration reaches the test with the flag set,
    or leaves by another exit first."""
    members = set(loop.blocks)
    for block in loop.exiting:
        term = block.terminator
        if not (isinstance(term, I.Branch) and term.is_conditional) or not all(
                doms.dominates(block, latch) for latch in loop.latches):
            continue
        cond, *targets = term.operands
        out = [k for k, target in enumerate(targets) if target not in members]
        if len(out) != 1:
            continue
        if _set_after_back_edge(cond, 1 if out[0] == 0 else 0, loop, members):
            return True
    return False


def _set_after_back_edge(flag, leaving: int, loop: Loop, members: set) -> bool:
    """Whether ``flag`` is ``leaving`` wherever it is computed once one of ``loop``'s back
    edges has been taken: the constant itself, or a phi of the loop's blocks whose incoming
    values all are (each computed in the same iteration: its block dominates the edge). The
    header's phis take only their latches' values then, computed in the iteration before,
    which may be the first: those must be ``leaving`` always (their phis through all their
    incoming values, the header's entry one too). A cycle of phis holds only what enters it,
    so each phi is assumed to be while it is examined."""
    seen: set = set()
    work = [(flag, False)]  # (value, whether it must be leaving in the first iteration too)
    while work:
        v, always = work.pop()
        if isinstance(v, ConstantInt):
            if v.value != leaving:
                return False
            continue
        if not (isinstance(v, I.Phi) and v.parent in members):
            return False
        if (v, always) in seen:
            continue
        seen.add((v, always))
        if v.parent is loop.header and not always:
            work += [(x, True) for x, blk in v.incoming if blk in loop.latches]
        else:
            work += [(x, always) for x, _ in v.incoming]
    return True


def _natural_loop(header, latches: list, index: dict) -> Loop:
    """The header plus every block reaching a latch without passing through the header."""
    members = {header}
    work = [b for b in latches if b is not header]
    members.update(work)
    while work:
        block = work.pop()
        for pred in block.predecessors:
            if pred in index and pred not in members:
                members.add(pred)
                work.append(pred)
    blocks = sorted(members, key=index.__getitem__)
    return Loop(header, blocks, sorted(latches, key=index.__getitem__), _members=members)


def _nest(info: LoopInfo) -> None:
    # Natural loops with different headers are disjoint or nested, so a loop's parent is the
    # smallest other loop containing its header.
    for loop in info.loops:
        outer = [other for other in info.loops
                 if other is not loop and other.contains(loop.header)]
        loop.parent = min(outer, key=lambda o: len(o.blocks)) if outer else None
        if loop.parent is not None:
            loop.parent.children.append(loop)
        else:
            info.top.append(loop)


def _describe(loop: Loop, fn, doms: DominatorTree) -> None:
    members = loop._members
    position = {b: i for i, b in enumerate(fn.blocks)}
    exits: set = set()
    for block in loop.blocks:
        outside = [s for s in block.successors if s not in members]
        if outside:
            loop.exiting.append(block)
            exits.update(outside)
    loop.exits = sorted(exits, key=position.__getitem__)
    entries = [p for p in loop.header.predecessors if p not in members and p in doms]
    loop.preheader = entries[0] if len(entries) == 1 else None
    loop.inductions = [iv for phi in loop.header.phis
                       if (iv := _induction(loop, phi, doms)) is not None]
    for block in loop.exiting:
        # Only a test that runs on every iteration counts them.
        if all(doms.dominates(block, latch) for latch in loop.latches):
            count = _trip_count(loop, block)
            if count is not None:
                loop.trip_count = count
                break


def _induction(loop: Loop, phi: I.Phi, doms: DominatorTree) -> InductionVariable | None:
    if not phi.type.is_int or phi.type.is_vector or phi.type.width == 1:
        return None  # (a vector of lane counters, <0, 1, 2, 3> + 4 k, is no loop counter)
    # Values flowing in from unreachable predecessors never arrive.
    outside = {v for v, b in phi.incoming if not loop.contains(b) and b in doms}
    inside = {v for v, b in phi.incoming if loop.contains(b)}
    if len(outside) != 1 or len(inside) != 1:
        return None
    (start,), (update,) = outside, inside
    if not loop.is_invariant(start) or not isinstance(update, I.BinaryOp):
        return None
    if update.parent not in loop._members:
        return None
    a, b = update.operands
    if update.opcode == "add":
        if a is phi and isinstance(b, ConstantInt):
            step = b.value
        elif b is phi and isinstance(a, ConstantInt):
            step = a.value
        else:
            return None
    elif update.opcode == "sub" and a is phi and isinstance(b, ConstantInt):
        step = -b.value
    else:
        return None
    return InductionVariable(phi, start, step, update) if step else None


def _trip_count(loop: Loop, exiting) -> TripCount | None:
    term = exiting.terminator
    if not isinstance(term, I.Branch) or not term.is_conditional:
        return None
    cond = term.operands[0]
    if not isinstance(cond, I.Compare) or cond.opcode != "icmp":
        return None
    stays_if_true = loop.contains(term.successors[0])
    predicate = cond.predicate if stays_if_true else _INVERSE[cond.predicate]
    lhs, rhs = cond.operands
    for iv in loop.inductions:
        for v, bound, pred in ((lhs, rhs, predicate), (rhs, lhs, _SWAPPED[predicate])):
            if v is not iv.phi and v is not iv.update:
                continue
            if not loop.is_invariant(bound):
                continue
            uses_next = v is iv.update
            text = _count_text(iv, bound, pred, uses_next)
            if text is None:
                continue
            return TripCount(iv, bound, pred, uses_next, exiting,
                             exact=len(loop.exiting) == 1, text=text)
    return None


def _count_text(iv: InductionVariable, bound: Value, pred: str, uses_next: bool) -> str | None:
    """The header's run count while ``pred(start + step*(k + uses_next), bound)`` holds.

    Runs: the first ``k`` where the test fails, plus one. For ``ne`` that is
    ``(bound - start)/step - uses_next + 1`` (the bound must be hit exactly); for an ordered test
    in the direction of the step, ``ceil((bound - start)/step) - uses_next + 1`` (assuming the
    loop is entered with room for one step, as guarded rotated loops are).
    """
    step = iv.step
    extra = 1 - int(uses_next)
    if pred == "ne":
        ceil = False
    elif (step > 0 and pred in ("slt", "ult")) or (step < 0 and pred in ("sgt", "ugt")):
        ceil = True
    elif (step > 0 and pred in ("sle", "ule")) or (step < 0 and pred in ("sge", "uge")):
        ceil, extra = True, extra + (1 if abs(step) == 1 else 0)
        if abs(step) != 1:
            return None  # ``<=`` with a larger stride: keep the expressions simple
    else:
        return None
    # The distance to travel, bound - start (or start - bound when counting down), kept as
    # signed terms so constants fold: {reference: coefficient} and a constant.
    sign = 1 if step > 0 else -1
    terms: dict[str, int] = {}
    const = 0
    for value, coeff in ((bound, sign), (iv.start, -sign)):
        if isinstance(value, ConstantInt):
            const += coeff * value.value
        else:
            terms[_ref(value)] = terms.get(_ref(value), 0) + coeff
    if abs(step) == 1:
        return _linear(terms, const + extra)
    distance = _linear(terms, const)
    if not terms:
        quotient = -(-const // abs(step)) if ceil else const // abs(step)
        return str(quotient + extra)
    text = f"({distance}) / {abs(step)}" if " " in distance else f"{distance} / {abs(step)}"
    text = f"ceil({text})" if ceil else text
    return f"{text} + {extra}" if extra else text


def _linear(terms: dict[str, int], const: int) -> str:
    """``terms`` and ``const`` as a sum, led by a positive part when there is one.

    >>> _linear({"%n": 1, "%s": -1}, 1), _linear({"%n": -1}, 10), _linear({}, -4)
    ('%n - %s + 1', '10 - %n', '-4')
    """
    items = [(coeff, ("" if abs(coeff) == 1 else f"{abs(coeff)}*") + name)
             for name, coeff in sorted(terms.items(), key=lambda t: -t[1]) if coeff]
    if const > 0 and (not items or items[0][0] < 0):
        items.insert(0, (const, str(const)))
    elif const or not items:
        items.append((const, str(abs(const))))
    parts = []
    for coeff, text in items:
        if not parts:
            parts.append(("-" if coeff < 0 else "") + text)
        else:
            parts.append(("- " if coeff < 0 else "+ ") + text)
    return " ".join(parts)
