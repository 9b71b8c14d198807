"""Enzyme's checkpointed loops (``<enzyme/checkpoint.h>``), read from C and C++ calls.

``__enzyme_checkpoint_for((void *)step, start, n, enzyme_scheme, &scheme, &config,
[enzyme_checkpoint_region, ptr, bytes,]... args...)`` runs ``step(start + j, args...)`` for
``j`` in ``[0, n)``; ``__enzyme_checkpoint_while((void *)step, markers..., args...)`` runs
``i = 0; while (step(i++, args...));``. :func:`rewrite` turns each such call into a call of
pyzyme's own checkpointed loop (:data:`pyzyme.naming.CHECKPOINT_FOR`,
:data:`~pyzyme.naming.CHECKPOINT_WHILE` with ``start`` 0 and ``n`` -1, whose derivatives
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

__all__ = ["ENTRY", "WHILE_ENTRY", "rewrite", "expand", "underlying", "reachable", "globals_of"]

#: Enzyme's entry points (substrings: C++ may mangle them), and the loops they become.
ENTRY = "__enzyme_checkpoint_for"
WHILE_ENTRY = "__enzyme_checkpoint_while"
_LOOPS = {ENTRY: naming.CHECKPOINT_FOR, WHILE_ENTRY: naming.CHECKPOINT_WHILE}
_LOOP_TYPE = T.FunctionType(T.void, [T.ptr, T.i64, T.i64, T.ptr, T.ptr, T.i64], var_arg=True)


def rewrite(text: str) -> str:
    """``text`` (a module) with each ``__enzyme_checkpoint_for`` and
    ``__enzyme_checkpoint_while`` call as a call of pyzyme's checkpointed loop; unchanged when
    it has none.

    Raises
    ------
    EnzymeCallError
        A call that does not read as Enzyme's (its source line named), or whose step writes
        memory no region covers.
    """
    if ENTRY not in text and WHILE_ENTRY not in text:
        return text
    program = ir.parse_module(text)
    calls = [(inst, entry) for fn in program.functions for inst in fn.instructions()
             if isinstance(inst, I.CallBase) and inst.called_function is not None
             for entry in _LOOPS if entry in inst.called_function.name]
    if not calls:
        return text
    written = {gv for fn in program.functions if not fn.is_declaration
               for gv, w in globals_used(fn).items() if w}
    for call, entry in _innermost_first(calls):
        _rewrite_call(program, call, entry, program.declare(_LOOPS[entry], _LOOP_TYPE),
                      written)
    return str(program)


def _innermost_first(calls: list) -> list:
    """``calls`` with those a loop's steps run (nested loops) before that loop's: what a step
    writes is read from the inner loops already rewritten."""
    pending, order = list(calls), []
    while pending:
        inside = {call.parent.parent for call, _ in pending}
        ready = [(call, entry) for call, entry in pending
                 if not inside & set(reachable(_step_of(call)) if _step_of(call) else ())]
        ready = ready or pending[:1]  # recursion: the rest as they come
        order += ready
        pending = [c for c in pending if c not in ready]
    return order


def _step_of(call):
    step = through_locals(call.args[0]) if call.args else None
    if isinstance(step, ConstantExpr) and step.operands:
        step = step.operands[0]
    return step if isinstance(step, ir.Function) and not step.is_declaration else None


def _rewrite_call(program, call, entry, loop, written) -> None:
    where = source_location(program, call)
    args = call.args
    step = through_locals(args[0]) if args else None
    if isinstance(step, ConstantExpr) and step.operands:
        step = step.operands[0]
    if not isinstance(step, ir.Function) or step.is_declaration:
        raise EnzymeCallError(f"{where}: {entry} needs the step function itself as its first "
                              f"argument")
    first = 1 if entry == WHILE_ENTRY else 3
    if entry == WHILE_ENTRY and not isinstance(step.function_type.ret, T.IntType):
        raise EnzymeCallError(f"{where}: the step of {entry} ({step.ref}) returns "
                              f"{step.function_type.ret}, not whether to go on",
                              hint="make the step return an int, nonzero to run another step")
    if len(args) < first:
        raise EnzymeCallError(f"{where}: {entry} takes the step, the first index and the "
                              f"number of steps, then the markers")
    scheme = data = None
    regions, k = [], first
    while k < len(args):
        m = marker(args[k])
        if m is None:
            break
        if m not in ("enzyme_scheme", "enzyme_checkpoint_region") or k + 2 >= len(args):
            raise EnzymeCallError(
                f"{where}: {entry} takes enzyme_scheme, &scheme, &config and "
                f"enzyme_checkpoint_region, pointer, bytes before the step's arguments, "
                f"not {m}" + ("" if k + 2 < len(args) else " without its two values"))
        if m == "enzyme_scheme":
            scheme, data = args[k + 1], args[k + 2]
        else:
            regions.append((args[k + 1], args[k + 2]))
        k += 3
    if scheme is None:
        raise EnzymeCallError(f"{where}: {entry} needs a scheme: enzyme_scheme, "
                              f"&EnzymeCkptRevolve (or another), &config")
    rest = args[k:]
    if len(rest) != len(step.args) - 1:
        raise EnzymeCallError(f"{where}: {entry} passes {len(rest)} arguments to "
                              f"{step.ref}, which takes {len(step.args) - 1} after its index")
    _check_covered(where, step, rest, regions)
    for gv in globals_of(step, written):
        regions.append((gv, const_int(T.i64, sizeof(gv.value_type))))
    b = IRBuilder()
    b.position_before(call)
    bounds = (const_int(T.i64, 0), const_int(T.i64, -1)) if entry == WHILE_ENTRY \
        else (args[1], args[2])
    i64 = [v if v.type == T.i64 else b.sext(v, T.i64) for v in bounds]
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
    for index in sorted(_writes_through(step, {})):
        if index > 0 and underlying(rest[index - 1]) not in covered:
            obj = step.args[index]
            raise EnzymeCallError(
                f"{where}: the steps of this checkpointed loop ({step.ref}) write "
                f"through their argument {obj.index}{_named(obj)}, which no "
                f"enzyme_checkpoint_region covers: a snapshot would miss that memory",
                hint="mark it with enzyme_checkpoint_region, pointer, bytes before "
                     "the step's arguments")


def _writes_through(fn, memo: dict) -> set:
    """The indices of ``fn``'s arguments it may write through, itself or in the functions it
    calls (a call of a function pyzyme reads counts the arguments that function writes
    through, not every pointer it passes; one it cannot read, or a recursive one, every
    pointer)."""
    if fn in memo:
        pending = memo[fn] is None
        return {a.index for a in fn.args if a.type.is_pointer} if pending else memo[fn]
    memo[fn] = None
    found = set()
    for inst in fn.instructions():
        callee = inst.called_function if isinstance(inst, I.CallBase) else None
        if callee is not None and callee.name in (naming.CHECKPOINT_FOR,
                                                  naming.CHECKPOINT_WHILE):
            # A nested checkpointed loop: what its steps write, and its regions (restored).
            row = default_rules().lookup(callee.name, "call")
            args = row.step_args(inst)
            pointers = [p for p, _ in row.region_pairs(inst)] + \
                [args[k - 1] for k in _writes_through(inst.args[row.step], memo) if k > 0]
        elif callee is not None and not callee.is_declaration \
                and len(inst.args) == len(callee.args):
            pointers = [inst.args[k] for k in _writes_through(callee, memo)]
        else:
            pointers = written_pointers(inst)
        for pointer in pointers:
            obj = underlying(pointer)
            if isinstance(obj, Argument) and obj.function is fn:
                found.add(obj.index)
    memo[fn] = found
    return found


def _named(arg) -> str:
    return f" (%{arg.name})" if arg.name and not arg.name.isdigit() else ""


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


def expand(text: str) -> str:
    """``text`` with each call of pyzyme's checkpointed loops left in it replaced by the loop
    itself."""
    if naming.CHECKPOINT_FOR not in text and naming.CHECKPOINT_WHILE not in text:
        return text
    module = ir.parse_module(text)
    for name in (naming.CHECKPOINT_FOR, naming.CHECKPOINT_WHILE):
        loop = module.get_function(name)
        if loop is None:
            continue
        row = default_rules().lookup(name, "call")
        for user in list(loop.users):
            if not isinstance(user, I.CallBase) or user.called_function is not loop:
                continue
            step = user.args[row.step]
            args = row.step_args(user)
            driver = primal_driver(module, step, [a.type for a in args], row)
            b = IRBuilder()
            b.position_before(user)
            b.call(driver, [user.args[row.start], user.args[row.count], *args])
            user.erase()
        if not loop.users:
            module.remove(loop)
    return str(module)
