"""Vector loops that walk memory downwards, with their lanes kept in memory order.

A reverse sweep runs its loops backwards, and LLVM's loop vectorizer gives a loop whose
addresses go down lanes in iteration order: lane 0 is the highest address. Every vector it
loads is reversed (``shufflevector %v, poison, <3, 2, 1, 0>``) and every vector it stores is
reversed back, a permutation a vector on each side of each access. In the reverse of an in-place
stencil at 1,000 cells that is 10 permutations a vector of 8 cells, and the loop runs at the
rate of the one port that executes them (1.6 times the primal step).

Lane order is a convention: an elementwise operation gives the same lanes whichever order they
are in, so the whole loop can run with every vector *mirrored* (lane ``k`` holding what lane
``n - 1 - k`` held). Then the reversal after a load and before a store vanishes, a
reversal elsewhere becomes a plain use, and every other shuffle is rewritten for mirrored
operands (a recurrence's splice ``<3, 4, 5, 6>`` becomes ``<5, 6, 7, 0>``: one instruction as
before).

For each loop of one block (what the vectorizer makes), :func:`mirror_loops`:

- gives each vector value of the loop a *form*, original or mirrored: the operands and result of
  an elementwise operation (arithmetic, comparisons, casts, selects, phis, inserted lanes, the
  elementwise intrinsics in :data:`ELEMENTWISE`) share one; loads give the original form and
  stores and ordered reductions take it, or pay a reversal; a shuffle takes any forms and
  costs nothing where the rewritten one is the identity of an operand; values from outside the
  loop are reversed before it, values used after it after it; reductions that are free to
  reorder (integer ones and floating-point ones with ``reassoc``) and lanes extracted at
  constant indices take either;
- picks the forms with the fewest permutations in the loop (:func:`_choose`: every
  assignment, for each set of groups that shuffles tie together) and rewrites the loop where
  that is fewer than it has. A loop with anything else on vectors is left as it is, and so is
  one with no shuffle taking lanes in descending order.

Every value is computed as before, lane for lane, only held in the other order inside the
loop; stores, ordered reductions and uses after the loop see the original order. Only a
reduction marked ``reassoc`` may add its lanes in another order, as that flag allows.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @f(ptr %p, i64 %n) {
... entry:
...   br label %loop
... loop:
...   %i = phi i64 [ %n, %entry ], [ %j, %loop ]
...   %a = getelementptr double, ptr %p, i64 %i
...   %v = load <2 x double>, ptr %a
...   %r = shufflevector <2 x double> %v, <2 x double> poison, <2 x i32> <i32 1, i32 0>
...   %w = fmul <2 x double> %r, splat (double 2.0)
...   %s = shufflevector <2 x double> %w, <2 x double> poison, <2 x i32> <i32 1, i32 0>
...   store <2 x double> %s, ptr %a
...   %j = add i64 %i, -2
...   %c = icmp eq i64 %j, 0
...   br i1 %c, label %exit, label %loop
... exit:
...   ret void
... }''')
>>> mirror_loops(m)
1
>>> print(m.functions[0])
define void @f(ptr %p, i64 %n) {
entry:
  br label %loop
<BLANKLINE>
loop:
  %i = phi i64 [ %n, %entry ], [ %j, %loop ]
  %a = getelementptr double, ptr %p, i64 %i
  %v = load <2 x double>, ptr %a
  %0 = fmul <2 x double> %v, splat (double 2.0)
  store <2 x double> %0, ptr %a
  %j = add i64 %i, -2
  %c = icmp eq i64 %j, 0
  br i1 %c, label %exit, label %loop
<BLANKLINE>
exit:
  ret void
}
"""

from __future__ import annotations

import itertools
import re

from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import BasicBlock, Function, Module
from pyzyme.ir.values import (
    Argument,
    Constant,
    ConstantAggregate,
    ConstantInt,
    ConstantSplat,
    Poison,
    Undef,
    Value,
    ZeroInitializer,
)

__all__ = ["ELEMENTWISE", "REORDERABLE", "loops_reverse_lanes", "mirror_loops",
           "reverses_lanes"]

#: Intrinsics (name up to the type suffix) computing lane ``k`` of their result from lane ``k``
#: of their vector arguments alone.
ELEMENTWISE = frozenset(
    "llvm." + name for name in (
        "fma fmuladd sqrt fabs minnum maxnum minimum maximum copysign floor ceil trunc rint "
        "nearbyint round roundeven exp exp2 log log2 log10 pow powi sin cos smax smin umax umin "
        "abs ctpop ctlz cttz fshl fshr sadd.sat uadd.sat ssub.sat usub.sat").split())

#: Reductions whose value does not depend on the order of the lanes (the floating-point sums
#: and products only with ``reassoc``).
REORDERABLE = frozenset(
    "llvm.vector.reduce." + name for name in
    "add mul and or xor smax smin umax umin fmax fmin fmaximum fminimum".split())
_FLOAT_REDUCTIONS = frozenset(("llvm.vector.reduce.fadd", "llvm.vector.reduce.fmul"))

#: Most groups of values whose forms are chosen by trying every assignment.
MAX_GROUPS = 12

_ORIGINAL, _MIRRORED = False, True
_REVERSAL = re.compile(r"<i32 (\d+)(?:, i32 \d+)*>")


def reverses_lanes(text: str) -> bool:
    """Whether ``text`` (IR) has a shuffle mask reversing the lanes of a vector.

    >>> reverses_lanes("shufflevector <2 x double> %v, <2 x double> %w, <2 x i32> <i32 1, i32 0>")
    True
    >>> reverses_lanes("shufflevector <2 x double> %v, <2 x double> %w, <2 x i32> <i32 0, i32 2>")
    False
    """
    for match in _REVERSAL.finditer(text):
        lanes = [int(x) for x in re.findall(r"\d+", match.group(0)[1:])][1::2]
        n = len(lanes)
        if n > 1 and lanes == list(range(n - 1, -1, -1)):
            return True
    return False


def loops_reverse_lanes(text: str) -> bool:
    """Whether a block of the module ``text`` that branches back to itself (a loop of one
    block) reverses the lanes of a vector: the test, on text, that spares parsing a module
    with nothing to rewrite.

    >>> loops_reverse_lanes('''
    ... define void @f(<2 x double> %v) {
    ... entry:
    ...   br label %loop
    ...
    ... loop:
    ...   %r = shufflevector <2 x double> %v, <2 x double> poison, <2 x i32> <i32 1, i32 0>
    ...   br label %loop
    ... }''')
    True
    """
    for chunk in text.split("\n\n"):
        if not reverses_lanes(chunk):
            continue
        lines = chunk.strip("\n").split("\n")
        label = re.match(r'("[^"]*"|[-\w.$]+):', lines[0])
        if lines[-1] == "}":
            lines.pop()
        if label and re.search(r"label %" + re.escape(label.group(1)) + r"(?![-\w.$])",
                               lines[-1]):
            return True
    return False


def mirror_loops(module: Module) -> int:
    """Rewrite the one-block vector loops of ``module`` that need fewer permutations with
    their lanes mirrored (see the module docstring). Returns how many were rewritten."""
    count = 0
    for fn in module.functions:
        for block in list(fn.blocks):
            if block in block.successors:
                plan = _plan(block)
                if plan is not None:
                    _rewrite(fn, block, plan)
                    count += 1
    return count


# ------------------------------------------------------------------------------- the plan

def _lanes(value: Value) -> int | None:
    ty = value.type
    return ty.count if isinstance(ty, T.VectorType) and not ty.scalable else None


def _callee_name(inst: I.CallBase) -> str:
    fn = inst.called_function
    return fn.name if fn is not None else ""


def _stem(name: str) -> str:
    """``llvm.fma.v4f64`` -> ``llvm.fma``; ``llvm.vector.reduce.fadd.v4f64`` likewise."""
    parts = name.split(".")
    while len(parts) > 2 and re.fullmatch(r"[vi]\d+[a-z]*\d*|v\d+f\d+|v\d+i\d+|f\d+|i\d+",
                                          parts[-1]):
        parts.pop()
    return ".".join(parts)


def _kind(inst: I.Instruction) -> str | None:
    """How ``inst`` treats lanes: ``"load"``, ``"store"``, ``"elementwise"``, ``"shuffle"``,
    ``"extract"``, ``"reorderable"``, ``"ordered"``, ``"scalar"`` (no vector involved), or
    None (something this module does not rewrite)."""
    vector_result = _lanes(inst) is not None
    vector_operand = any(_lanes(op) is not None for op in inst.operands
                         if not isinstance(op, BasicBlock))
    if not vector_result and not vector_operand:
        return "scalar"
    if isinstance(inst, I.Load):
        return "load" if not vector_operand else None
    if isinstance(inst, I.Store):
        return "store" if _lanes(inst.operands[1]) is None else None
    if isinstance(inst, I.ShuffleVector):
        return "shuffle"
    if isinstance(inst, I.ExtractElement):
        return "extract" if isinstance(inst.operands[1], ConstantInt) else None
    if isinstance(inst, I.InsertElement):
        return "elementwise" if isinstance(inst.operands[2], ConstantInt) else None
    if isinstance(inst, I.Cast):
        same = vector_result and _lanes(inst.operands[0]) == _lanes(inst)
        return "elementwise" if same else None
    if isinstance(inst, (I.BinaryOp, I.UnaryOp, I.Compare, I.Select, I.Phi, I.Freeze)):
        return "elementwise" if vector_result else None
    if isinstance(inst, I.Call):
        stem = _stem(_callee_name(inst))
        if stem in ELEMENTWISE and vector_result:
            return "elementwise"
        if stem in REORDERABLE or (stem in _FLOAT_REDUCTIONS and "reassoc" in inst.flags):
            return "reorderable"
        if stem in _FLOAT_REDUCTIONS:
            return "ordered"
    return None


class _Sets(dict):
    """Disjoint sets (union-find) over the keys added with :meth:`add`."""

    def add(self, x) -> None:
        self[x] = x

    def find(self, x):
        while self[x] is not x:
            self[x] = self[self[x]]
            x = self[x]
        return x

    def union(self, a, b) -> None:
        self[self.find(a)] = self.find(b)


class _Plan:
    """The vector values of one loop, their groups and the forms chosen for them."""

    def __init__(self, block: BasicBlock) -> None:
        self.block = block
        self.kinds: dict = {}
        self.parent = _Sets()      # the loop's vector values, grouped
        self.form: dict = {}       # group root -> _ORIGINAL / _MIRRORED

    def inside(self, value: Value) -> bool:
        return isinstance(value, I.Instruction) and value.parent is self.block

    def find(self, v):
        return self.parent.find(v)

    def of(self, value: Value) -> bool | None:
        """The form of a loop value; None for a value from outside (free in either)."""
        if not self.inside(value) or _lanes(value) is None:
            return None
        return self.form[self.find(value)]


def _plan(block: BasicBlock) -> _Plan | None:
    plan = _Plan(block)
    for inst in block.instructions:
        kind = _kind(inst)
        if kind is None:
            return None
        plan.kinds[inst] = kind
        if _lanes(inst) is not None:
            plan.parent.add(inst)
            if any(isinstance(u, I.Phi) and not plan.inside(u) for u in inst.users):
                return None
    if not any(k == "shuffle" and _runs_down(inst.mask_lanes)
               for inst, k in plan.kinds.items()):
        return None
    for inst, kind in plan.kinds.items():
        if kind == "elementwise":
            for op in inst.operands:
                if plan.inside(op) and _lanes(op) is not None:
                    plan.parent.union(inst, op)
    groups = sorted({plan.find(v) for v in plan.parent}, key=block.instructions.index)
    plan.form = dict.fromkeys(groups, _ORIGINAL)
    return plan if _choose(plan, groups) else None


def _runs_down(lanes: list[int | None]) -> bool:
    """Whether a mask takes lanes in descending order (a reversal, or one spliced)."""
    known = [x for x in lanes if x is not None]
    return len(known) > 1 and all(a == b + 1 for a, b in zip(known, known[1:]))


def _choose(plan: _Plan, groups: list) -> bool:
    """Set ``plan.form`` to the forms with the fewest permutations in the loop: a reversal for
    each load in mirrored form, each store or ordered reduction of a mirrored value, each
    shuffle that is not the identity of an operand (two for one that takes lanes of both
    operands out of order). Groups no shuffle ties together are chosen apart, each set of at
    most :data:`MAX_GROUPS` by trying every assignment. Returns whether any is mirrored."""
    unary = dict.fromkeys(groups, 0)     # permutations a group costs mirrored
    terms = []                            # (groups, {their forms: permutations})
    for inst, kind in plan.kinds.items():
        if kind == "load":
            unary[plan.find(inst)] += 1
        elif kind in ("store", "ordered"):
            for op in inst.operands:
                if plan.inside(op) and _lanes(op) is not None:
                    unary[plan.find(op)] += 1
        elif kind == "shuffle":
            members = list(dict.fromkeys(plan.find(v) for v in (inst, *inst.operands[:2])
                                         if plan.inside(v)))
            table = {}
            for forms in itertools.product((_ORIGINAL, _MIRRORED), repeat=len(members)):
                plan.form.update(zip(members, forms))
                table[forms] = min(_shuffle_cost(inst, _mask(inst, plan.of(inst), a, b))
                                   for a, b in _operand_forms(plan, inst))
            terms.append((members, table))
    plan.form = dict.fromkeys(groups, _ORIGINAL)
    tied = _Sets()
    for g in groups:
        tied.add(g)
    for members, _ in terms:
        for g in members[1:]:
            tied.union(g, members[0])
    changed = False
    for top in {tied.find(g) for g in groups}:
        mine = [g for g in groups if tied.find(g) is top]
        if len(mine) > MAX_GROUPS:
            continue
        mine_terms = [(members, table) for members, table in terms
                      if tied.find(members[0]) is top]

        def cost(forms: dict, mine=mine, mine_terms=mine_terms) -> int:
            return (sum(unary[g] for g in mine if forms[g] is _MIRRORED)
                    + sum(table[tuple(forms[g] for g in members)]
                          for members, table in mine_terms))

        best_forms = dict.fromkeys(mine, _ORIGINAL)
        best = cost(best_forms)
        for forms in itertools.product((_ORIGINAL, _MIRRORED), repeat=len(mine)):
            trial = dict(zip(mine, forms))
            value = cost(trial)
            if value < best:
                best, best_forms = value, trial
        if any(best_forms.values()):
            plan.form.update(best_forms)
            changed = True
    return changed


def _operand_forms(plan: _Plan, inst: I.ShuffleVector) -> list[tuple[bool, bool]]:
    """The forms a shuffle's operands can be had in: a loop value's own, either for others."""
    choices = [[plan.of(op)] if plan.of(op) is not None else [_ORIGINAL, _MIRRORED]
               for op in inst.operands[:2]]
    return list(itertools.product(*choices))


def _mask(inst: I.ShuffleVector, out: bool, a: bool, b: bool) -> list[int | None]:
    """The mask giving ``inst``'s result in form ``out`` from its operands in forms ``a`` and
    ``b`` (lane ``i`` of the concatenation, as :attr:`ShuffleVector.mask_lanes`)."""
    n = _lanes(inst.operands[0])
    lanes = inst.mask_lanes
    if out is _MIRRORED:
        lanes = lanes[::-1]
    mask = []
    for lane in lanes:
        if lane is None:
            mask.append(None)
        elif lane < n:
            mask.append(n - 1 - lane if a is _MIRRORED else lane)
        else:
            mask.append(n + (2 * n - 1 - lane if b is _MIRRORED else lane - n))
    return mask


def _identity_of(mask: list[int | None], n: int) -> int | None:
    """0 or 1 where ``mask`` is the identity of that operand (of ``n`` lanes), else None."""
    if len(mask) != n:
        return None
    for which in (0, 1):
        if all(m is None or m == which * n + k for k, m in enumerate(mask)):
            return which
    return None


def _shuffle_cost(inst: I.ShuffleVector, mask: list[int | None]) -> int:
    """Permutations ``inst`` rewritten with ``mask`` costs: none where it is the identity of
    an operand (the rewrite drops it), one for lanes of one operand or a splice, else two."""
    n = _lanes(inst.operands[0])
    known = [m for m in mask if m is not None]
    if _identity_of(mask, n) is not None or not known:
        return 0
    one_source = all(m < n for m in known) or all(m >= n for m in known)
    window = all((b - a) % (2 * n) == 1 for a, b in zip(known, known[1:]))  # a splice
    return 1 if one_source or window else 2


# ---------------------------------------------------------------------------- the rewrite

class _Rewriter:
    def __init__(self, fn: Function, plan: _Plan) -> None:
        self.fn = fn
        self.plan = plan
        self.block = plan.block
        self.new: dict = {}        # loop value -> its value in the plan's form
        self.flipped: dict = {}    # value -> its reversal

    def reversal(self, value: Value) -> Value:
        """``value`` with its lanes reversed: a constant reordered, or a shuffle placed right
        after ``value`` (for a loop value: after its rewritten definition)."""
        if value in self.flipped:
            return self.flipped[value]
        if isinstance(value, (ZeroInitializer, Poison, Undef, ConstantSplat)):
            return value
        if isinstance(value, ConstantAggregate):
            out = ConstantAggregate(value.type, list(reversed(value.elements)))
        else:
            out = _reversed(value)
            if isinstance(value, Argument):
                entry = self.fn.blocks[0]
                entry.insert(_first_insertion(entry), out)
            else:
                block = value.parent
                at = (_first_insertion(block) if isinstance(value, I.Phi)
                      else block.instructions.index(value) + 1)
                block.insert(at, out)
        self.flipped[value] = out
        return out

    def operand(self, value: Value, form: bool) -> Value:
        """``value`` (an operand in the loop) in ``form``."""
        if _lanes(value) is None:
            return value
        if self.plan.inside(value):
            have = self.plan.of(value)
            new = self.new[value]
            return new if have is form else self.reversal(new)
        return value if form is _ORIGINAL else self.reversal(value)

    def place(self, inst: I.Instruction, before: I.Instruction) -> I.Instruction:
        self.block.insert(self.block.instructions.index(before), inst)
        return inst


def _rewrite(fn: Function, block: BasicBlock, plan: _Plan) -> None:
    r = _Rewriter(fn, plan)
    originals = list(block.instructions)
    phis = [inst for inst in originals if isinstance(inst, I.Phi) and inst in plan.parent]
    for phi in phis:
        clone = phi.copy_with([], keep_metadata=True)
        clone.blocks = []
        r.new[phi] = block.insert(0, clone)
    replaced: dict = {}
    for inst in originals:
        kind = plan.kinds[inst]
        if kind == "scalar" or isinstance(inst, I.Phi):
            continue
        form = plan.of(inst)
        if kind == "load":  # a load gives the original lanes; mirrored, they are reversed
            r.new[inst] = inst
            if form is _MIRRORED:
                r.new[inst] = r.reversal(inst)
            continue
        if kind == "shuffle":
            a, b = min(_operand_forms(plan, inst),
                       key=lambda ab: _shuffle_cost(inst, _mask(inst, form, *ab)))
            mask = _mask(inst, form, a, b)
            ops = [r.operand(inst.operands[0], a), r.operand(inst.operands[1], b)]
            which = _identity_of(mask, _lanes(inst.operands[0]))
            if which is not None and ops[which].type == inst.type:
                r.new[inst] = ops[which]
            else:
                r.new[inst] = r.place(I.ShuffleVector(*ops, _mask_constant(mask)), inst)
            continue
        if kind == "extract":
            vector, index = inst.operands[0], inst.operands[1].value
            have = plan.of(vector) if plan.inside(vector) else _ORIGINAL
            if have is _MIRRORED:
                index = _lanes(vector) - 1 - index
            operands = [r.operand(vector, have), ConstantInt(inst.operands[1].type, index)]
        elif kind == "elementwise":
            operands = [r.operand(op, form) for op in inst.operands]
            if isinstance(inst, I.InsertElement) and form is _MIRRORED:
                index = _lanes(inst) - 1 - inst.operands[2].value
                operands[2] = ConstantInt(inst.operands[2].type, index)
        elif kind == "reorderable":
            operands = [r.operand(op, plan.of(op) if plan.inside(op) else _ORIGINAL)
                        for op in inst.operands]
        else:  # store, ordered reduction
            operands = [r.operand(op, _ORIGINAL) for op in inst.operands]
        clone = r.place(inst.copy_with(operands, keep_metadata=True), inst)
        if _lanes(inst) is not None:
            r.new[inst] = clone
        else:
            replaced[inst] = clone
    for phi in phis:
        form = plan.of(phi)
        for value, pred in phi.incoming:
            if pred is block:
                r.new[phi].add_incoming(r.operand(value, form), pred)
            else:
                r.new[phi].add_incoming(_entering(r, value, form, pred), pred)
    # Uses after the loop want the original lanes: a mirrored value is reversed where used.
    for inst in plan.parent:
        for user in [u for u in inst.users if u.parent not in (block, None)]:
            value = r.new[inst]
            if plan.of(inst) is _MIRRORED:
                value = _reversed(value)
                user.parent.insert(user.parent.instructions.index(user), value)
            user.replace_uses_of(inst, value)
    for inst, clone in replaced.items():
        for user in list(inst.users):
            user.replace_uses_of(inst, clone)
    for inst in reversed(originals):
        if inst in plan.parent or inst in replaced or plan.kinds[inst] == "store":
            if plan.kinds[inst] == "load":
                continue
            for user in list(inst.users):
                if user.parent is block and user in plan.kinds:
                    user.replace_uses_of(inst, Poison(inst.type))
            inst.erase()


def _entering(r: _Rewriter, value: Value, form: bool, pred: BasicBlock) -> Value:
    """``value``, flowing into the loop from ``pred``, in ``form``."""
    if form is _ORIGINAL or _lanes(value) is None:
        return value
    if isinstance(value, Constant):
        return r.reversal(value)
    flip = _reversed(value)
    pred.insert(pred.instructions.index(pred.terminator), flip)
    return flip


def _reversed(value: Value) -> I.ShuffleVector:
    """A shuffle (not yet placed) reversing the lanes of ``value``."""
    return I.ShuffleVector(value, Poison(value.type),
                           _mask_constant(list(range(_lanes(value)))[::-1]))


def _first_insertion(block: BasicBlock) -> int:
    return len(block.phis)


def _mask_constant(lanes: list[int | None]) -> Constant:
    return ConstantAggregate(T.VectorType(len(lanes), T.i32),
                             [Poison(T.i32) if x is None else ConstantInt(T.i32, x)
                              for x in lanes])
