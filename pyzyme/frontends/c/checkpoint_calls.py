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
from pyzyme.analysis.overwrite import written_pointers
from pyzyme.diff.calls.checkpoint import primal_driver
from pyzyme.frontends.c.enzyme_calls import EnzymeCallError, marker, source_location
from pyzyme.frontends.c.step_calls import (expand_calls, globals_of, reachable,
                                           rewrite_calls, step_function, underlying)
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Argument, const_int
from pyzyme.rules import default_rules

__all__ = ["ENTRY", "WHILE_ENTRY", "rewrite", "expand"]

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
    return rewrite_calls(text, _LOOPS, _LOOP_TYPE, _rewrite_call)


def _rewrite_call(program, call, entry, loop, written) -> None:
    where = source_location(program, call)
    args = call.args
    step = step_function(args[0]) if args else None
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


def expand(text: str) -> str:
    """``text`` with each call of pyzyme's checkpointed loops left in it replaced by the loop
    itself."""
    return expand_calls(text, (naming.CHECKPOINT_FOR, naming.CHECKPOINT_WHILE), _loop_of)


def _loop_of(module, call, row):
    args = row.step_args(call)
    driver = primal_driver(module, call.args[row.step], [a.type for a in args], row)
    return driver, [call.args[row.start], call.args[row.count], *args]
