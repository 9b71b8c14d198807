"""Enzyme's calls that run a step function many times (``__enzyme_checkpoint_for``,
``__enzyme_fixed_point``), read into pyzyme's own intrinsics: what reading them shares.

Each such call becomes a call of an intrinsic (:data:`pyzyme.naming.CHECKPOINT_FOR`,
:data:`pyzyme.naming.FIXED_POINT`) whose rule row says where its operands are
(:func:`rewrite_calls`); a call left in code no derivative replaces (the program's own, or a
function a derivative calls as it is) becomes the loop itself (:func:`expand_calls`). The state
the steps carry is the memory the call marks plus every mutable global the step uses that some
function writes (:func:`globals_of`).
"""

from __future__ import annotations

from collections.abc import Callable

from pyzyme import ir
from pyzyme.analysis.overwrite import underlying_object
from pyzyme.frontends.c.enzyme_calls import through_locals
from pyzyme.frontends.c.global_shadows import globals_used
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir.values import ConstantExpr, GlobalVariable
from pyzyme.rules import default_rules

__all__ = ["rewrite_calls", "expand_calls", "step_function", "underlying", "reachable",
           "globals_of"]


def rewrite_calls(text: str, loops: dict, ftype, rewrite_one: Callable) -> str:
    """``text`` (a module) with each call of one of Enzyme's entry points (the keys of
    ``loops``, substrings: C++ may mangle them) rewritten by ``rewrite_one(program, call,
    entry, loop, written)`` into a call of ``loop`` (the entry's intrinsic in ``loops``,
    declared of type ``ftype``); ``written`` holds the globals some function writes. A loop
    whose steps run another such loop comes after it: what a step writes is read from the
    inner loops already rewritten. Unchanged when it has no such call."""
    if not any(entry in text for entry in loops):
        return text
    program = ir.parse_module(text)
    calls = [(inst, entry) for fn in program.functions for inst in fn.instructions()
             if isinstance(inst, I.CallBase) and inst.called_function is not None
             for entry in loops if entry in inst.called_function.name]
    if not calls:
        return text
    written = {gv for fn in program.functions if not fn.is_declaration
               for gv, w in globals_used(fn).items() if w}
    for call, entry in _innermost_first(calls):
        rewrite_one(program, call, entry, program.declare(loops[entry], ftype), written)
    return str(program)


def _innermost_first(calls: list) -> list:
    """``calls`` with those a loop's steps run (nested loops) before that loop's."""
    pending, order = list(calls), []
    while pending:
        inside = {call.parent.parent for call, _ in pending}
        ready = [(call, entry) for call, entry in pending
                 if not inside & set(_reachable_from(call))]
        ready = ready or pending[:1]  # recursion: the rest as they come
        order += ready
        pending = [c for c in pending if c not in ready]
    return order


def _reachable_from(call) -> list:
    step = step_function(call.args[0]) if call.args else None
    return reachable(step) if isinstance(step, ir.Function) and not step.is_declaration \
        else []


def expand_calls(text: str, intrinsics: tuple, loop_of: Callable) -> str:
    """``text`` with each call of one of ``intrinsics`` replaced by the loop itself:
    ``loop_of(module, call, row)`` gives the function running it and its arguments."""
    if not any(name in text for name in intrinsics):
        return text
    module = ir.parse_module(text)
    for name in intrinsics:
        loop = module.get_function(name)
        if loop is None:
            continue
        row = default_rules().lookup(name, "call")
        for user in list(loop.users):
            if not isinstance(user, I.CallBase) or user.called_function is not loop:
                continue
            driver, args = loop_of(module, user, row)
            b = IRBuilder()
            b.position_before(user)
            b.call(driver, args)
            user.erase()
        if not loop.users:
            module.remove(loop)
    return str(module)


def step_function(value):
    """The function a call passes (through casts and unoptimised code's stack slots), or
    what it passes instead."""
    value = through_locals(value)
    if isinstance(value, ConstantExpr) and value.operands:
        value = value.operands[0]
    return value


def underlying(pointer):
    """The object ``pointer`` points into, through unoptimised code's stack slots."""
    for _ in range(8):
        obj = underlying_object(pointer)
        nxt = through_locals(obj)
        if nxt is obj:
            return obj
        pointer = nxt
    return pointer


def reachable(step) -> list:
    """``step`` and the functions it calls, transitively (those pyzyme can read), a function
    passed to a call counting as called (the step of a checkpointed loop inside ``step``)."""
    seen, todo = [step], [step]
    while todo:
        for inst in todo.pop().instructions():
            if not isinstance(inst, I.CallBase):
                continue
            for callee in (inst.called_function, *inst.args):
                if isinstance(callee, ConstantExpr) and callee.operands:
                    callee = callee.operands[0]
                if isinstance(callee, ir.Function) and not callee.is_declaration \
                        and callee not in seen:
                    seen.append(callee)
                    todo.append(callee)
    return seen


def globals_of(step, written) -> list:
    """The mutable globals the step (or a function it calls) uses that some function
    writes: the state a snapshot keeps besides the regions."""
    found = []
    for fn in reachable(step):
        for gv in globals_used(fn):
            if gv in written and gv not in found and isinstance(gv, GlobalVariable) \
                    and not gv.is_constant and gv.initializer is not None \
                    and not gv.name.startswith(("enzyme_", "__enzyme", "llvm.", "pyzyme")):
                found.append(gv)
    return found
