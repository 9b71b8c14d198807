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
- it is loaded from memory, and the function (or a callee it passes a pointer to) may have
  stored a non-finite value anywhere; which memory is not tracked.

Overflow is ignored: ``x * y`` of finite values is taken to be finite, and so is ``x / y``
where a branch on ``y == 0`` guards the division (the check Numba puts before every ``/`` it
compiles, raising ``ZeroDivisionError``): a block reached only through the edge where
``y != 0`` holds, or one that edge dominates, divides by a nonzero ``y``.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> from pyzyme.rules import default_rules
>>> m = parse_module('''
... define double @f(double %x, double %y) {
...   %s = fmul double %x, %x
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
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import STRUCTURAL
from pyzyme.ir.values import (Argument, Constant, ConstantAggregate, ConstantFP, ConstantSplat,
                              Value, ZeroInitializer)
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
def nonfinite_values(fn, rules, doms=None) -> NonFinite:
    """The values of ``fn`` that can be infinite or NaN (see the module docstring).

    Parameters
    ----------
    fn
        A function with a body (:class:`pyzyme.ir.module.Function`).
    rules
        The rule table, which says what each call is (:func:`pyzyme.rules.default_rules`).
    doms
        ``fn``'s dominator tree, where the caller has it (:func:`~pyzyme.analysis.cfg.dominators`).
    """
    found: set = set()
    memory = False    # whether memory may hold a non-finite value the function stored
    # ... other than one it computed (and stored): a callee's, a constant
    unexplained = False
    nonzero = _nonzero_divisors(fn, doms or dominators(fn))

    def bad(v: Value) -> bool:
        if isinstance(v, Constant):
            return _constant_nonfinite(v)
        return v in found and not isinstance(v, Argument)

    changed = True
    while changed:
        changed = False
        for inst in fn.instructions():
            if inst in found and (memory or not isinstance(inst, (I.Store, I.CallBase))):
                continue
            verdict, writes = _verdict(inst, bad, memory, rules, nonzero)
            if writes and not memory:
                memory = changed = True
            if writes and not (isinstance(inst, I.Store)
                               and not isinstance(inst.operands[0], Constant)):
                unexplained = True
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


def _verdict(inst, bad, memory: bool, rules, nonzero) -> tuple[bool, bool]:
    """(whether ``inst``'s result can be non-finite, whether it may store a non-finite value
    into memory)."""
    op = inst.opcode
    if isinstance(inst, I.Store):
        return False, bad(inst.operands[0])
    if isinstance(inst, I.CallBase):
        return _call_verdict(inst, bad, memory, rules)
    if not _carries_floats(inst.type):
        return False, isinstance(inst, I.AtomicRMW) and bad(inst.operands[-1])
    if isinstance(inst, (I.Load, I.AtomicRMW, I.VAArg)):
        return memory, False
    if op in STRUCTURAL:  # moves values, computes none: non-finite where a float operand is
        operands = inst.operands[1:] if op == "select" else inst.operands
        return any(bad(v) for v in operands if _carries_floats(v.type)), False
    if op in ("fdiv", "frem"):
        x, y = inst.operands
        if isinstance(y, Constant):
            steady = not _constant_nonfinite(y) and not _zero(y)
        else:
            steady = op == "fdiv" and not bad(y) and nonzero(y, inst.parent)
        return not steady or bad(x), False
    if total(op):
        return any(bad(v) for v in inst.operands), False
    return True, False


# fcmp predicates under which "true" means y == 0 (ordered or not) and "true" means y != 0
_ZERO_WHEN_TRUE = frozenset({"oeq", "ueq"})
_NONZERO_WHEN_TRUE = frozenset({"one", "une"})


def _nonzero_divisors(fn, tree):
    """A test ``nonzero(y, block)``: whether ``y`` is nonzero wherever ``block`` runs, because
    ``block`` is reached only through a branch edge on which ``fcmp y, 0.0`` said so (``tree``:
    ``fn``'s dominator tree)."""
    facts: dict = {}     # block -> the value its only entry edge proves nonzero
    for block in tree.idom:
        preds = tree.preds.get(block, ())
        if len(preds) != 1:
            continue
        term = preds[0].terminator
        if not (isinstance(term, I.Branch) and term.is_conditional):
            continue
        cond, on_true, on_false = term.operands
        if on_true is on_false or not isinstance(cond, I.Compare) or cond.opcode != "fcmp":
            continue
        a, b = cond.operands
        y = a if _exactly_zero(b) else b if _exactly_zero(a) else None
        if y is None or isinstance(y, Constant):
            continue
        if (cond.predicate in _ZERO_WHEN_TRUE and block is on_false) or \
                (cond.predicate in _NONZERO_WHEN_TRUE and block is on_true):
            facts[block] = y

    def nonzero(y: Value, block) -> bool:
        while block is not None:
            if facts.get(block) is y:
                return True
            block = tree.idom.get(block)
        return False

    return nonzero


def _exactly_zero(v: Value) -> bool:
    return isinstance(v, ConstantFP) and v.value == 0.0


def _zero(c: Constant) -> bool:
    if isinstance(c, ConstantFP):
        return c.value == 0.0
    if isinstance(c, ConstantSplat):
        return _zero(c.element)
    if isinstance(c, ConstantAggregate):
        return any(_zero(e) for e in c.elements)
    return True


def _call_verdict(call, bad, memory: bool, rules) -> tuple[bool, bool]:
    callee = call.called_function
    row = rules.lookup(callee.name, "call") if callee is not None else None
    args = call.args
    result = _carries_floats(call.type)
    if isinstance(row, spec.Partials):
        return result and (not total(row.names[0]) or any(bad(a) for a in args)), False
    if isinstance(row, spec.Linear):
        return result and bad(args[0]), False
    if isinstance(row, spec.Reduction):   # sums, products, max and min of the lanes: total
        return result and any(bad(a) for a in args), False
    if isinstance(row, spec.Masked):      # a load of memory, or a store into it
        if row.value is not None:
            return False, bad(args[row.value])
        return memory or (row.passthru is not None and bad(args[row.passthru])), False
    if isinstance(row, (spec.Inactive, spec.Allocation, spec.Mirror, spec.Memory)):
        return False, False
    # A callee pyzyme differentiates, a BLAS/LAPACK call, a user's rule: what it returns or
    # stores is not looked into.
    return result, any(a.type.is_pointer for a in args)
