"""Enzyme's checkpointed loops (``<enzyme/checkpoint.h>``), read from C and C++ calls.

``__enzyme_checkpoint_for((void *)step, start, n, enzyme_scheme, &scheme, &config,
[enzyme_checkpoint_region, ptr, bytes,]... args...)`` runs ``step(start + j, args...)`` for
``j`` in ``[0, n)``. :func:`rewrite` turns each such call into a call of pyzyme's own
checkpointed loop (:data:`pyzyme.naming.CHECKPOINT_FOR`, whose derivatives
:mod:`pyzyme.diff.calls.checkpoint` makes), adding to the regions the call marks every
mutable global variable the step uses that some function writes (Enzyme's rule: a snapshot
holds the marked regions and the globals the step writes, or reads while later code may write
them). A step that writes through an argument no region covers is refused: a snapshot would
miss that memory, and the steps run again from it would start from the wrong state.

:func:`expand` turns the calls left in the program's own code (and in code the derivatives
call as it is) into the loop itself.
"""

from __future__ import annotations

from pyzyme import ir, naming
from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.overwrite import underlying_object, written_pointers
from pyzyme.diff.calls.checkpoint import primal_driver
from pyzyme.frontends.c.enzyme_calls import (EnzymeCallError, marker, source_location,
                                             through_locals)
from pyzyme.frontends.c.global_shadows import globals_used
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Argument, ConstantExpr, GlobalVariable, const_int
from pyzyme.rules import default_rules

__all__ = ["ENTRY", "rewrite", "expand", "underlying", "reachable", "globals_of"]

#: Enzyme's entry point (a substring: C++ may mangle it).
ENTRY = "__enzyme_checkpoint_for"
_LOOP_TYPE = T.FunctionType(T.void, [T.ptr, T.i64, T.i64, T.ptr, T.ptr, T.i64], var_arg=True)


def rewrite(text: str) -> str:
    """``text`` (a module) with each ``__enzyme_checkpoint_for`` call as a call of pyzyme's
    checkpointed loop; unchanged when it has none.

    Raises
    ------
    EnzymeCallError
        A call that does not read as Enzyme's (its source line named), or whose step writes
        memory no region covers.
    """
    if ENTRY not in text:
        return text
    program = ir.parse_module(text)
    calls = [inst for fn in program.functions for inst in fn.instructions()
             if isinstance(inst, I.CallBase) and inst.called_function is not None
             and ENTRY in inst.called_function.name]
    if not calls:
        return text
    loop = program.declare(naming.CHECKPOINT_FOR, _LOOP_TYPE)
    written = {gv for fn in program.functions if not fn.is_declaration
               for gv, w in globals_used(fn).items() if w}
    for call in calls:
        _rewrite_call(program, call, loop, written)
    return str(program)


def _rewrite_call(program, call, loop, written) -> None:
    where = source_location(program, call)
    args = call.args
    step = through_locals(args[0]) if args else None
    if isinstance(step, ConstantExpr) and step.operands:
        step = step.operands[0]
    if not isinstance(step, ir.Function) or step.is_declaration:
        raise EnzymeCallError(f"{where}: {ENTRY} needs the step function itself as its first "
                              f"argument")
    if len(args) < 3:
        raise EnzymeCallError(f"{where}: {ENTRY} takes the step, the first index and the "
                              f"number of steps, then the markers")
    scheme = data = None
    regions, k = [], 3
    while k < len(args):
        m = marker(args[k])
        if m is None:
            break
        if m not in ("enzyme_scheme", "enzyme_checkpoint_region") or k + 2 >= len(args):
            raise EnzymeCallError(
                f"{where}: {ENTRY} takes enzyme_scheme, &scheme, &config and "
                f"enzyme_checkpoint_region, pointer, bytes before the step's arguments, "
                f"not {m}" + ("" if k + 2 < len(args) else " without its two values"))
        if m == "enzyme_scheme":
            scheme, data = args[k + 1], args[k + 2]
        else:
            regions.append((args[k + 1], args[k + 2]))
        k += 3
    if scheme is None:
        raise EnzymeCallError(f"{where}: {ENTRY} needs a scheme: enzyme_scheme, "
                              f"&EnzymeCkptRevolve (or another), &config")
    rest = args[k:]
    if len(rest) != len(step.args) - 1:
        raise EnzymeCallError(f"{where}: {ENTRY} passes {len(rest)} arguments to "
                              f"{step.ref}, which takes {len(step.args) - 1} after its index")
    _check_covered(where, step, rest, regions)
    for gv in globals_of(step, written):
        regions.append((gv, const_int(T.i64, sizeof(gv.value_type))))
    b = IRBuilder()
    b.position_before(call)
    i64 = [v if v.type == T.i64 else b.sext(v, T.i64) for v in (args[1], args[2])]
    pairs = [v for p, size in regions
             for v in (p, size if size.type == T.i64 else b.sext(size, T.i64))]
    b.call(loop, [step, *i64, scheme, data, const_int(T.i64, len(regions)), *pairs, *rest],
           function_type=_LOOP_TYPE)
    call.erase()


def underlying(pointer):
    """The object ``pointer`` points into, through unoptimised code's stack slots."""
    for _ in range(8):
        obj = underlying_object(pointer)
        nxt = through_locals(obj)
        if nxt is obj:
            return obj
        pointer = nxt
    return pointer


def _check_covered(where: str, step, rest, regions) -> None:
    """Refuse a step that writes through an argument no region covers."""
    covered = {underlying(p) for p, _ in regions}
    for fn in reachable(step):
        for inst in fn.instructions():
            for pointer in written_pointers(inst):
                obj = underlying(pointer)
                if not (isinstance(obj, Argument) and obj.function is step and obj.index > 0):
                    continue
                if underlying(rest[obj.index - 1]) not in covered:
                    raise EnzymeCallError(
                        f"{where}: the steps of this checkpointed loop ({step.ref}) write "
                        f"through their argument {obj.index}{_named(obj)}, which no "
                        f"enzyme_checkpoint_region covers: a snapshot would miss that memory",
                        hint="mark it with enzyme_checkpoint_region, pointer, bytes before "
                             "the step's arguments")


def _named(arg) -> str:
    return f" (%{arg.name})" if arg.name and not arg.name.isdigit() else ""


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


def expand(text: str) -> str:
    """``text`` with each call of pyzyme's checkpointed loop left in it replaced by the loop
    itself."""
    if naming.CHECKPOINT_FOR not in text:
        return text
    module = ir.parse_module(text)
    loop = module.get_function(naming.CHECKPOINT_FOR)
    if loop is None:
        return text
    row = default_rules().lookup(naming.CHECKPOINT_FOR, "call")
    for user in list(loop.users):
        if not isinstance(user, I.CallBase) or user.called_function is not loop:
            continue
        step = user.args[row.step]
        args = row.step_args(user)
        driver = primal_driver(module, step, [a.type for a in args])
        b = IRBuilder()
        b.position_before(user)
        b.call(driver, [user.args[row.start], user.args[row.count], *args])
        user.erase()
    if not loop.users:
        module.remove(loop)
    return str(module)
