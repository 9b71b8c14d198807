"""The floating values of a function that can be infinite or NaN when its inputs are finite.

Strong zero (:mod:`pyzyme.rules.finite`) guards a product of a seed and a partial only where
the partial can be non-finite. A partial is an expression of the instruction's operands and
result, so the question is asked of primal values: which of them can be ``inf`` or ``NaN``?

The function's arguments, and memory as the function finds it, are taken to be finite (inputs
that are not give IEEE results, as the primal does). A value can be non-finite when

- it is a non-finite constant, ``undef`` or ``poison``;
- an operation that is not total (:data:`pyzyme.rules.finite.TOTAL`: a division, ``sqrt``,
  ``log``, ``pow``, a call to a function pyzyme differentiates rather than knows) made it, or
  a total one (or a phi, select, cast, vector or aggregate move) made it from a value that can
  be;
- it is loaded from memory into which the function may have stored a non-finite value: memory
  is told apart by its underlying object (:func:`pyzyme.analysis.overwrite.may_alias`: a
  stack slot or an array the function allocated is no parameter's memory), so a non-finite
  value kept in a temporary does not make every load of an input array suspect. A callee
  handed a pointer may store anything anywhere, except one handed only link-time objects
  (:func:`~pyzyme.analysis.overwrite.link_time_object`: globals and what constant globals
  hold, as the interpreter calls raising a parallel loop body's exception are), which may
  store into those and any other link-time object (one global may hold another's address).

Overflow is ignored: ``x * y`` of finite values is taken to be finite, and so is ``x / y``
where a branch on ``y == 0`` guards the division (the check Numba puts before every ``/`` it
compiles, raising ``ZeroDivisionError``), or one on ``y`` against a constant that leaves 0
out (``if norm < 1e-4: return``), or ``y`` is the root of such a value: a block reached only
through the edge where ``y != 0`` holds, or one that edge dominates, divides by a nonzero
``y``. ``sqrt`` of a value that is non-negative by its making (a sum of squares: a
vector's norm) is finite.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> from pyzyme.rules import default_rules
>>> m = parse_module('''
... define double @f(double %x, double %y) {
...   %s = fmul double %x, %y
...   %r = call double @llvm.sqrt.f64(double %s)
...   %q = fdiv double %y, %r
...   %t = fadd double %q, %s
...   ret double %t
... }
... declare double @llvm.sqrt.f64(double)''')
>>> print(nonfinite_values(m.get_function("f"), default_rules()))
non-finite values of @f: %q %r %t

A division Numba guards (``ZeroDivisionError`` when ``y == 0``) divides by a nonzero ``y``:

>>> m = parse_module('''
... define double @g(double %x, double %y) {
... entry:
...   %z = fcmp oeq double %y, 0.0
...   br i1 %z, label %raise, label %divide
... raise:
...   ret double 0.0
... divide:
...   %q = fdiv double %x, %y
...   ret double %q
... }''')
>>> print(nonfinite_values(m.get_function("g"), default_rules()))
non-finite values of @g: (none)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pyzyme.analysis.cfg import dominators
from pyzyme.analysis.overwrite import (fresh_object, link_time_object, objects_may_alias,
                                      underlying_objects)
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import STRUCTURAL
from pyzyme.ir.values import (Argument, Constant, ConstantAggregate, ConstantFP, ConstantInt,
                              ConstantSplat, Value, ZeroInitializer)
from pyzyme.rules import spec
from pyzyme.rules.finite import total
from pyzyme.progress import timed

__all__ = ["NonFinite", "nonfinite_values"]



@dataclass(frozen=True)
class NonFinite:
    """The result of :func:`nonfinite_values`: ``value in result`` says whether ``value`` can
    be infinite or NaN."""

    function: object
    values: frozenset
    #: ``nonzero(y, block)``: whether a branch on ``y == 0`` proves ``y`` nonzero in ``block``
    nonzero: Callable[[Value, object], bool] = lambda value, block: False
    #: The values of ``values`` that can be non-finite where every operand is finite (a
    #: division, ``sqrt``, a callee's result, a phi of ``undef``; a load where a callee may
    #: have stored a non-finite value): where each of these turns out finite when the
    #: function runs, so do the others (overflow ignored, as above).
    sources: frozenset = frozenset()

    def __contains__(self, value: Value) -> bool:
        if isinstance(value, Constant):
            return _constant_nonfinite(value)
        return value in self.values

    def __str__(self) -> str:
        names = sorted(v.ref for v in self.values)
        return f"non-finite values of {self.function.ref}: {' '.join(names) or '(none)'}"


def _carries_floats(ty: T.Type) -> bool:
    if ty.is_vector:
        return ty.element.is_float
    if isinstance(ty, (T.StructType, T.ArrayType)):
        elements = ty.elements if isinstance(ty, T.StructType) else (ty.element,)
        return any(_carries_floats(e) for e in elements)
    return ty.is_float


def _constant_nonfinite(c: Constant) -> bool:
    if not _carries_floats(c.type):
        return False
    if isinstance(c, ConstantFP):
        return not math.isfinite(c.value)
    if isinstance(c, ConstantSplat):
        return _constant_nonfinite(c.element)
    if isinstance(c, ConstantAggregate):
        return any(_constant_nonfinite(e) for e in c.elements)
    # undef and poison may be any bits; constant expressions are not looked into
    return not isinstance(c, ZeroInitializer)


@timed("analyses")
def nonfinite_values(fn, rules, doms=None, apart=None) -> NonFinite:
    """The values of ``fn`` that can be infinite or NaN (see the module docstring).

    Parameters
    ----------
    fn
        A function with a body (:class:`pyzyme.ir.module.Function`).
    rules
        The rule table, which says what each call is (:func:`pyzyme.rules.default_rules`).
    doms
        ``fn``'s dominator tree, where the caller has it (:func:`~pyzyme.analysis.cfg.dominators`).
    apart
        ``apart(oa, ob)``: that the caller knows two objects not to overlap (as for
        :func:`~pyzyme.analysis.overwrite.analyze_overwrites`), or None.
    """
    found: set = set()
    memory = _Memory(apart)    # where memory may hold a non-finite value the function stored
    # ... other than one it computed (and stored): a callee's, a constant
    unexplained = _Memory(apart)
    nonzero = _nonzero_divisors(fn, doms or dominators(fn))

    def bad(v: Value) -> bool:
        if isinstance(v, Constant):
            return _constant_nonfinite(v)
        return v in found and not isinstance(v, Argument)

    recorded: set = set()    # the writers whose non-finite store memory has taken in
    changed = True
    while changed:
        changed = False
        for inst in fn.instructions():
            if inst in found and (inst in recorded or not isinstance(inst, _WRITERS)):
                continue
            verdict, written = _verdict(inst, bad, memory, rules, nonzero)
            if written is not None and inst not in recorded:
                recorded.add(inst)
                changed = memory.store(written) or changed
                if not (isinstance(inst, I.Store)
                        and not isinstance(inst.operands[0], Constant)):
                    unexplained.store(written)
            if verdict and inst not in found:
                found.add(inst)
                changed = True
    # A source is non-finite even where the values it reads are finite: the verdict with
    # only constants (and memory a callee or a constant made non-finite) counted as such.
    sources = frozenset(inst for inst in found if _verdict(
        inst, _constant_nonfinite_value, unexplained, rules, nonzero)[0])
    return NonFinite(fn, frozenset(found), nonzero, sources)


def _constant_nonfinite_value(v: Value) -> bool:
    return isinstance(v, Constant) and _constant_nonfinite(v)


#: what may store into memory (the others' verdicts never change once they are non-finite)
_WRITERS = (I.Store, I.CallBase, I.AtomicRMW, I.CmpXchg)
#: a write through a pointer that is not known: it may store anywhere
_ANYWHERE = object()


class _Memory:
    """The objects (:func:`~pyzyme.analysis.overwrite.underlying_objects`) that may hold a
    non-finite value the function stored, or everywhere."""

    def __init__(self, apart=None):
        self.apart = apart
        self.anywhere = False
        self.link_time: list = []    # what callees handed only link-time objects got
        self.objects: list = []
        self._objects_of: dict = {}

    def _of(self, pointer: Value):
        if pointer not in self._objects_of:
            self._objects_of[pointer] = underlying_objects(pointer)
        return self._objects_of[pointer]

    def store(self, pointer) -> bool:
        """Take in a non-finite store through ``pointer`` (a tuple: a callee's, through each
        and into link-time objects; or :data:`_ANYWHERE`); whether that made more memory
        suspect."""
        if self.anywhere:
            return False
        if isinstance(pointer, tuple):
            new = [p for p in pointer if p not in self.link_time]
            self.link_time.extend(new)
            return bool(new)
        objects = None if pointer is _ANYWHERE else self._of(pointer)
        if objects is None:
            self.anywhere = True
            return True
        new = [o for o in objects if o not in self.objects]
        self.objects.extend(new)
        return bool(new)

    def holds_nonfinite(self, pointer: Value) -> bool:
        """Whether a load through ``pointer`` may read a non-finite value stored there."""
        if self.anywhere:
            return True
        if not self.objects and not self.link_time:
            return False
        objects = self._of(pointer)
        if objects is None:
            return True
        if self.link_time and any(self._reaches_link_time(a) for a in objects):
            return True
        return any(objects_may_alias(a, b, self.apart) for a in objects for b in self.objects)

    def _reaches_link_time(self, obj: Value) -> bool:
        """Whether ``obj`` may be memory a callee handed only link-time objects stored into:
        a link-time object itself (any: one may hold another's address), or what may point
        to one, unless made here (no global holds it)."""
        if link_time_object(obj):
            return True
        if fresh_object(obj):
            return False
        return any(objects_may_alias(obj, b, self.apart) for p in self.link_time
                   for b in self._of(p) or ())


def _verdict(inst, bad, memory: _Memory, rules, nonzero) -> tuple[bool, object]:
    """(whether ``inst``'s result can be non-finite, the pointer through which it may store a
    non-finite value into memory: None where it stores none, :data:`_ANYWHERE` where it is not
    known)."""
    op = inst.opcode
    if isinstance(inst, I.Store):
        return False, inst.operands[1] if bad(inst.operands[0]) else None
    if isinstance(inst, I.CallBase):
        return _call_verdict(inst, bad, memory, rules)
    if isinstance(inst, I.AtomicRMW):
        written = inst.operands[0] if bad(inst.operands[-1]) else None
        return _carries_floats(inst.type) and memory.holds_nonfinite(inst.operands[0]), written
    if isinstance(inst, I.CmpXchg):       # stores its last operand, returns what it found
        written = inst.operands[0] if bad(inst.operands[-1]) else None
        return _carries_floats(inst.type) and memory.holds_nonfinite(inst.operands[0]), written
    if not _carries_floats(inst.type):
        return False, None
    if isinstance(inst, I.Load):
        return memory.holds_nonfinite(inst.pointer), None
    if isinstance(inst, I.VAArg):
        return True, None
    if op in STRUCTURAL:  # moves values, computes none: non-finite where a float operand is
        operands = inst.operands[1:] if op == "select" else inst.operands
        return any(bad(v) for v in operands if _carries_floats(v.type)), None
    if op in ("fdiv", "frem"):
        x, y = inst.operands
        if isinstance(y, Constant):
            steady = not _constant_nonfinite(y) and not _zero(y)
        else:
            steady = op == "fdiv" and not bad(y) and nonzero(y, inst.parent)
        return not steady or bad(x), None
    if op in ("sitofp", "uitofp"):
        return not _converts_finitely(inst.operands[0].type, inst.type), None
    if total(op):
        return any(bad(v) for v in inst.operands), None
    return True, None


def _converts_finitely(source: T.Type, target: T.Type) -> bool:
    """Whether every integer of type ``source`` is finite as a float of type ``target``:
    2**64 is, in a float and wider (65,535 is not, in a half)."""
    return source.scalar.width <= 64 and target.scalar.kind in (
        "float", "double", "x86_fp80", "fp128", "ppc_fp128")


# What one edge of ``fcmp <pred> y, c`` proves about a finite ``y``: the relation it holds in
# (true edge), and the one it holds in on the false edge.
_RELATION = {"eq": ("==", "!="), "ne": ("!=", "=="), "gt": (">", "<="), "ge": (">=", "<"),
             "lt": ("<", ">="), "le": ("<=", ">")}
_SWAPPED = {"==": "==", "!=": "!=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}


def _excludes_zero(relation: str, c: float) -> bool:
    """Whether ``y <relation> c`` rules out ``y == 0``."""
    return {"==": c != 0.0, "!=": c == 0.0, ">": c >= 0.0, ">=": c > 0.0,
            "<": c <= 0.0, "<=": c < 0.0}[relation]


def _nonzero_divisors(fn, tree):
    """A test ``nonzero(y, block)``: whether ``y`` is nonzero wherever ``block`` runs, because
    ``block`` is reached only through a branch edge on which ``fcmp y, c`` said so (``y == 0``
    false, or ``y < 1e-4`` false: ``y`` at least 1e-4; ``tree``: ``fn``'s dominator tree), or
    ``icmp n, c`` did for the integer ``y`` was converted from; or ``y`` is a nonzero constant.
    ``y`` is taken to be finite (the caller asks only of values that are), so an unordered
    compare says what the ordered one does."""
    facts: dict = {}     # block -> the value its only entry edge proves nonzero
    for block in tree.idom:
        preds = tree.preds.get(block, ())
        if len(preds) != 1:
            continue
        term = preds[0].terminator
        if not (isinstance(term, I.Branch) and term.is_conditional):
            continue
        cond, on_true, on_false = term.operands
        if on_true is on_false or not isinstance(cond, I.Compare):
            continue
        fact = _edge_fact(cond, block is on_true)
        if fact is not None:
            facts[block] = fact

    def nonzero(y: Value, block) -> bool:
        if isinstance(y, Constant):
            return not _constant_nonfinite(y) and not _zero(y)
        at = block
        while at is not None:
            if facts.get(at) is y:
                return True
            at = tree.idom.get(at)
        # an integer converted: nonzero where the integer is (Numba's ZeroDivisionError test
        # of the integer n before 2.0 / n)
        if isinstance(y, I.Instruction) and y.opcode in ("sitofp", "uitofp"):
            return nonzero(y.operands[0], block)
        # the root of a nonzero number is nonzero (if sqtheta != 0: 1 / sqrt(sqtheta))
        if isinstance(y, I.CallBase) and y.called_function is not None and \
                _square_root(y.called_function.name):
            return nonzero(y.args[0], block)
        return False

    return nonzero


def _edge_fact(cond, taken: bool) -> Value | None:
    """The value the edge of a branch on ``cond`` (its true edge where ``taken``) proves
    nonzero: ``fcmp y, c`` or ``icmp n, c`` whose relation on that edge leaves 0 out; None
    where it proves none."""
    if cond.opcode == "fcmp":
        name, number = cond.predicate[1:], ConstantFP
    elif cond.predicate in ("eq", "ne", "sgt", "sge", "slt", "sle"):
        # (an unsigned order says nothing here: n > 5 holds for n = -1, read unsigned)
        name, number = cond.predicate.removeprefix("s"), ConstantInt
    else:
        return None
    if name not in _RELATION:
        return None
    relation = _RELATION[name][0 if taken else 1]
    a, b = cond.operands
    if isinstance(b, number) and not isinstance(a, Constant):
        y, c = a, _number(b)
    elif isinstance(a, number) and not isinstance(b, Constant):
        y, c, relation = b, _number(a), _SWAPPED[relation]
    else:
        return None
    return y if math.isfinite(c) and _excludes_zero(relation, c) else None


def _number(c: ConstantFP | ConstantInt) -> float | int:
    return c.signed if isinstance(c, ConstantInt) else c.value


def _zero(c: Constant) -> bool:
    if isinstance(c, ConstantFP):
        return c.value == 0.0
    if isinstance(c, ConstantSplat):
        return _zero(c.element)
    if isinstance(c, ConstantAggregate):
        return any(_zero(e) for e in c.elements)
    return True


def _call_verdict(call, bad, memory: _Memory, rules) -> tuple[bool, object]:
    callee = call.called_function
    row = rules.lookup(callee.name, "call") if callee is not None else None
    args = call.args
    result = _carries_floats(call.type)
    if isinstance(row, spec.Partials):
        if _square_root(callee.name) and not bad(args[0]) and _nonnegative(args[0]):
            return False, None
        return result and (not total(row.names[0]) or any(bad(a) for a in args)), None
    if isinstance(row, spec.Linear):
        return result and bad(args[0]), None
    if isinstance(row, spec.Reduction):   # sums, products, max and min of the lanes: total
        return result and any(bad(a) for a in args), None
    if isinstance(row, spec.Masked):      # a load of memory, or a store into it
        if row.value is not None:
            return False, args[row.pointer] if bad(args[row.value]) else None
        loaded = memory.holds_nonfinite(args[row.pointer]) if args[row.pointer].type.is_pointer \
            else memory.anywhere or bool(memory.objects)   # a gather: any address
        return loaded or (row.passthru is not None and bad(args[row.passthru])), None
    if isinstance(row, spec.Memory):      # copies carry what they copy; fills set bytes
        target = args[row.pointer_args[0]]
        if len(row.pointer_args) > 1:
            return False, target if memory.holds_nonfinite(args[row.pointer_args[1]]) else None
        return False, None if _exactly_zero_byte(args[1]) else target
    if isinstance(row, (spec.Inactive, spec.Allocation, spec.Mirror)):
        return False, None
    # A callee pyzyme differentiates, a BLAS/LAPACK call, a user's rule: what it returns or
    # stores is not looked into; but one handed only link-time objects stores into those.
    pointers = tuple(a for a in args if a.type.is_pointer)
    if not pointers:
        return result, None
    if all(_link_time(p) for p in pointers):
        return result, pointers
    return result, _ANYWHERE


def _link_time(pointer: Value) -> bool:
    objects = underlying_objects(pointer)
    return objects is not None and all(link_time_object(o) for o in objects)


def _square_root(name: str) -> bool:
    return name.startswith("llvm.sqrt.") or name in ("sqrt", "sqrtf")


def _nonnegative(v: Value, depth: int = 8) -> bool:
    """Whether finite ``v`` is at least 0 by its making: a square, a sum or product of such,
    an absolute value, a root (``sqrt`` of a sum of squares, a vector's norm, is finite)."""
    if isinstance(v, ConstantFP):
        return v.value >= 0.0
    if depth == 0 or not isinstance(v, I.Instruction):
        return False
    op = v.opcode
    if op == "fmul" and v.operands[0] is v.operands[1]:
        return True
    if op in ("fadd", "fmul"):
        return all(_nonnegative(x, depth - 1) for x in v.operands)
    if isinstance(v, I.CallBase) and v.called_function is not None:
        name = v.called_function.name
        if name.startswith("llvm.fabs.") or _square_root(name):
            return True
        if name.startswith(("llvm.fmuladd.", "llvm.fma.")):
            a, b, c = v.args
            return a is b and _nonnegative(c, depth - 1)
    return False


def _exactly_zero_byte(v: Value) -> bool:
    return isinstance(v, Constant) and getattr(v, "value", None) == 0
