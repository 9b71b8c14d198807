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


def rewrite_calls(text: str, entry: str, intrinsic: str, ftype,
                  rewrite_one: Callable) -> str:
    """``text`` (a module) with each call of Enzyme's ``entry`` (a substring: C++ may mangle
    it) rewritten by ``rewrite_one(program, call, loop, written)`` into a call of ``loop``
    (``intrinsic``, declared of type ``ftype``); ``written`` holds the globals some function
    writes. Unchanged when it has no such call."""
    if entry not in text:
        return text
    program = ir.parse_module(text)
    calls = [inst for fn in program.functions for inst in fn.instructions()
             if isinstance(inst, I.CallBase) and inst.called_function is not None
             and entry in inst.called_function.name]
    if not calls:
        return text
    loop = program.declare(intrinsic, ftype)
    written = {gv for fn in program.functions if not fn.is_declaration
               for gv, w in globals_used(fn).items() if w}
    for call in calls:
        rewrite_one(program, call, loop, written)
    return str(program)


def expand_calls(text: str, intrinsic: str, loop_of: Callable) -> str:
    """``text`` with each call of ``intrinsic`` replaced by the loop itself:
    ``loop_of(module, call, row)`` gives the function running it and its arguments."""
    if intrinsic not in text:
        return text
    module = ir.parse_module(text)
    loop = module.get_function(intrinsic)
    if loop is None:
        return text
    row = default_rules().lookup(intrinsic, "call")
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
    """``step`` and the functions it calls, transitively (those pyzyme can read)."""
    seen, todo = [step], [step]
    while todo:
        for inst in todo.pop().instructions():
            callee = inst.called_function if isinstance(inst, I.CallBase) else None
            if callee is not None and not callee.is_declaration and callee not in seen:
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
