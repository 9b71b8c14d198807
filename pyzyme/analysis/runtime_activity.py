"""Pointers whose activity is known only at run time.

Activity analysis (:mod:`pyzyme.analysis.activity`) decides per value, at compile time. A phi or
select that merges a pointer into memory with a shadow and one into memory without (or an
aggregate that gains such a pointer) is varied, but on some executions it points to memory that
has no shadow at all: ``a = x if flag else c`` with ``x`` Duplicated and ``c`` Const. Its
shadow then has nothing to stand for; Enzyme's answer (``runtimeActivity``) is to use the
primal itself as the shadow there, and to check ``shadow == primal`` at each derivative load
and store through it.

This module finds those values (the *runtime* set): the merges themselves, and what is derived
from them (addresses computed from them, pointers loaded through them). It also lists the
instructions that would read or write derivatives through them (the *needs*): without run-time
checks those would dereference a null shadow, so the generators refuse them.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> from pyzyme.analysis.activity import Activity, analyze_activity
>>> m = parse_module('''define double @f(ptr %x, ptr %c, i1 %flag) {
... entry:
...   %a = select i1 %flag, ptr %x, ptr %c
...   %v = load double, ptr %a
...   ret double %v
... }''')
>>> fn = m.get_function("f")
>>> act = analyze_activity(fn, [Activity.DUPLICATED, Activity.CONST, Activity.CONST])
>>> ra = analyze_runtime_activity(fn, act)
>>> sorted(v.name for v in ra.values), [u.name for u in ra.needs]
(['a'], ['v'])
>>> ra.sources[fn.blocks[0].instructions[0]].name
'c'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.analysis.activity import ActivityResult, can_carry_derivative, contains_type
from pyzyme.ir.opcodes import MERGES, READ_MODIFY_WRITE, STRUCTURAL
from pyzyme.ir.values import Null, Poison, Undef, Value, ZeroInitializer
from pyzyme.progress import timed

__all__ = ["RuntimeActivity", "analyze_runtime_activity"]



def _has_pointer(value: Value) -> bool:
    return contains_type(value.type, lambda t: t.is_pointer)


def _shadowless(value: Value, activity: ActivityResult) -> bool:
    """A pointer-carrying operand with no shadow that is not a constant null (whose null
    shadow is right: nothing is ever read through it). A constant global counts: Numba's
    constant arrays are byte strings read as floats (message strings, read as bytes, never
    need a derivative: see :func:`_needs`)."""
    return (_has_pointer(value) and value not in activity.varied
            and not isinstance(value, (Null, Undef, Poison, ZeroInitializer)))


@dataclass
class RuntimeActivity:
    """``values``: varied values whose shadow may be their primal at run time; ``sources``:
    for each merge among them, an operand that has no shadow; ``origin``: for each of
    ``values``, the merge it comes from (both for error messages); ``needs``: instructions
    that read or write derivatives through one of ``values``, in program order."""

    values: set = field(default_factory=set)
    sources: dict = field(default_factory=dict)
    origin: dict = field(default_factory=dict)
    needs: list = field(default_factory=list)


@timed("analyses")
def analyze_runtime_activity(fn, activity: ActivityResult) -> RuntimeActivity:
    """The values of ``fn`` whose activity is decided at run time, given its activity.

    Parameters
    ----------
    fn
        A function with a body.
    activity
        Its :class:`~pyzyme.analysis.activity.ActivityResult`.
    """
    result = RuntimeActivity()
    varied = activity.varied
    work = []
    for inst in fn.instructions():
        # A merge: where a pointer without a shadow can join one with a shadow.
        if inst.opcode in MERGES and inst in varied and _has_pointer(inst):
            source = next((op for op in inst.operands if _shadowless(op, activity)), None)
            if source is not None:
                result.values.add(inst)
                result.sources[inst] = source
                result.origin[inst] = inst
                work.append(inst)
    while work:
        value = work.pop()
        for user in value.users:
            if user in result.values or user not in varied or not _has_pointer(user):
                continue
            # Structural: a pointer computed from the pointer (its shadow from its shadow).
            derived = user.opcode in STRUCTURAL and (
                user.opcode != "getelementptr" or user.operands[0] is value)
            loaded = user.opcode == "load" and user.operands[0] is value
            if derived or loaded:
                result.values.add(user)
                result.origin[user] = result.origin[value]
                work.append(user)
    for inst in fn.instructions():  # in program order, so errors name the first one
        if any(op in result.values and _needs(inst, op) for op in inst.operands):
            result.needs.append(inst)
    return result


def _needs(user, value) -> bool:
    """Whether ``user`` reads or writes a derivative through the shadow of ``value``: a load
    or store of floats or pointers (a null shadow would lose the derivative or crash).

    Integer accesses (string bytes, sizes) and calls are left out: bytes carry no derivative,
    and what a callee does with a pointer is not visible here (a merged pointer handed to a
    call that is not inlined is not found; see the generators for what runtime activity does
    with such calls).
    """
    op = user.opcode
    if op == "load":
        return user.operands[0] is value and can_carry_derivative(user.type)
    if op == "store":
        return user.operands[1] is value and can_carry_derivative(user.operands[0].type)
    if op in READ_MODIFY_WRITE:
        return user.operands[0] is value and can_carry_derivative(user.operands[-1].type)
    return False
