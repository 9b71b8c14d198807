"""Enzyme's fixed-point iterations (``<enzyme/fixed_point.h>``), read from C and C++ calls.

``__enzyme_fixed_point((void *)step, enzyme_fp_state, ptr, bytes, ... [enzyme_fp_reduction,
r,] [enzyme_fp_max_iters, n,] [enzyme_fp_control, control,] [enzyme_checkpoint_region, ptr,
bytes,]... args...)`` runs ``i = 0; while (step(i++, args...));``. :func:`rewrite` turns each
such call into a call of pyzyme's own fixed-point iteration (:data:`pyzyme.naming.FIXED_POINT`,
whose derivatives :mod:`pyzyme.diff.calls.fixed_point` makes): the defaults filled in, each
state with the size of the floats it holds (read from the step's own accesses: the derivative
measures the state's update in them), and, added to the regions, every mutable global the step
uses that some function writes (as for checkpointed loops: the derivative runs the step again at
the state the loop ended in, which later code may have overwritten).

:func:`expand` turns the calls left in the program's own code (and in code the derivatives
call as it is) into the loop itself.
"""

from __future__ import annotations

from pyzyme import ir, naming
from pyzyme.analysis.layout import sizeof
from pyzyme.diff.calls.fixed_point import primal_driver
from pyzyme.frontends.c.enzyme_calls import EnzymeCallError, marker, source_location
from pyzyme.frontends.c.step_calls import (expand_calls, globals_of, reachable,
                                           rewrite_calls, step_function, underlying)
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Argument, GlobalVariable, const_float, const_int, \
    const_null

__all__ = ["ENTRY", "DEFAULT_REDUCTION", "DEFAULT_MAX_ITERS", "rewrite", "expand"]

#: Enzyme's entry point (a substring: C++ may mangle it).
ENTRY = "__enzyme_fixed_point"
_FP_TYPE = T.FunctionType(T.void, [T.ptr, T.double, T.i64, T.ptr, T.i64, T.i64], var_arg=True)
#: The header's defaults: the reduction of the squared norm, the most rounds.
DEFAULT_REDUCTION, DEFAULT_MAX_ITERS = 1e-12, 1000
_MARKERS = ("enzyme_fp_state", "enzyme_fp_reduction", "enzyme_fp_max_iters",
            "enzyme_fp_control", "enzyme_checkpoint_region")
_HINT = ("write __enzyme_fixed_point((void *)step, enzyme_fp_state, ptr, bytes, "
         "[enzyme_fp_reduction, r,] [enzyme_fp_max_iters, n,] [enzyme_fp_control, control,] "
         "[enzyme_checkpoint_region, ptr, bytes,] args...)")


def rewrite(text: str) -> str:
    """``text`` (a module) with each ``__enzyme_fixed_point`` call as a call of pyzyme's
    fixed-point iteration; unchanged when it has none.

    Raises
    ------
    EnzymeCallError
        A call that does not read as Enzyme's (its source line named).
    """
    return rewrite_calls(text, {ENTRY: naming.FIXED_POINT}, _FP_TYPE, _rewrite_call)


def _rewrite_call(program, call, entry, loop, written) -> None:
    where = source_location(program, call)
    args = call.args
    step = step_function(args[0]) if args else None
    if not isinstance(step, ir.Function) or step.is_declaration:
        raise EnzymeCallError(f"{where}: {ENTRY} needs the step function itself as its first "
                              f"argument", hint=_HINT)
    if not step.function_type.ret.is_int:
        raise EnzymeCallError(f"{where}: the step of {ENTRY}, {step.ref}, must return whether "
                              f"to iterate again (an int), not "
                              f"{step.function_type.ret}", hint=_HINT)
    b = IRBuilder()
    b.position_before(call)
    states, regions = [], []
    reduction, max_iters, control = const_float(T.double, DEFAULT_REDUCTION), \
        const_int(T.i64, DEFAULT_MAX_ITERS), const_null(T.ptr)
    k = 1
    while k < len(args):
        m = marker(args[k])
        if m is None:
            break
        pair = m in ("enzyme_fp_state", "enzyme_checkpoint_region")
        if m not in _MARKERS or k + (2 if pair else 1) >= len(args):
            raise EnzymeCallError(
                f"{where}: {ENTRY} does not read {m}"
                + ("" if m not in _MARKERS else " without its value" + ("s" if pair else ""))
                + " before the step's arguments", hint=_HINT)
        if pair:
            size = args[k + 2]
            if not size.type.is_int:
                raise EnzymeCallError(f"{where}: {m} takes a pointer and a size in bytes",
                                      hint=_HINT)
            size = size if size.type == T.i64 else b.sext(size, T.i64)
            (states if m == "enzyme_fp_state" else regions).append((args[k + 1], size))
            k += 3
            continue
        value = args[k + 1]
        if m == "enzyme_fp_reduction":
            reduction = _as_double(where, b, value)
        elif m == "enzyme_fp_max_iters":
            if not value.type.is_int:
                raise EnzymeCallError(f"{where}: enzyme_fp_max_iters takes an integer, not "
                                      f"{value.type}", hint=_HINT)
            max_iters = value if value.type == T.i64 else b.sext(value, T.i64)
        else:
            control = step_function(value)
            if not isinstance(control, ir.Function):
                raise EnzymeCallError(f"{where}: enzyme_fp_control takes a function, "
                                      f"int control(double *cumul, double *reduction)",
                                      hint=_HINT)
        k += 2
    if not states:
        raise EnzymeCallError(f"{where}: {ENTRY} needs the state it iterates: "
                              f"enzyme_fp_state, pointer, bytes", hint=_HINT)
    rest = args[k:]
    if len(rest) != len(step.args) - 1:
        raise EnzymeCallError(f"{where}: {ENTRY} passes {len(rest)} arguments to "
                              f"{step.ref}, which takes {len(step.args) - 1} after its index",
                              hint=_HINT)
    triples = [v for p, size in states
               for v in (p, size, const_int(T.i64, _element_bytes(where, step, rest, p)))]
    listed = {underlying(p) for p, _ in states + regions}
    for gv in globals_of(step, written):
        if gv not in listed:
            regions.append((gv, const_int(T.i64, sizeof(gv.value_type))))
    b.call(loop, [step, reduction, max_iters, control, const_int(T.i64, len(states)),
                  const_int(T.i64, len(regions)), *triples,
                  *[v for pair in regions for v in pair], *rest], function_type=_FP_TYPE)
    call.erase()


def _as_double(where, b, value):
    if value.type == T.double:
        return value
    if value.type == T.float:
        return b.fpext(value, T.double)
    raise EnzymeCallError(f"{where}: enzyme_fp_reduction takes a double, not {value.type}",
                          hint=_HINT)


def _element_bytes(where: str, step, rest, state) -> int:
    """The size of the floats (4 or 8) the step (and the functions it hands the state to)
    loads from and stores into ``state``."""
    obj = underlying(state)
    if isinstance(obj, GlobalVariable):
        found = {sz for fn in reachable(step) for sz in _float_accesses(fn, lambda t: t is obj)}
    else:
        found, seen = set(), set()
        work = [(step, i + 1) for i, a in enumerate(rest) if underlying(a) is obj]
        while work:
            fn, index = work.pop()
            if (fn, index) in seen:
                continue
            seen.add((fn, index))

            def mine(t, fn=fn, index=index):
                return isinstance(t, Argument) and t.function is fn and t.index == index
            found |= _float_accesses(fn, mine)
            for inst in fn.instructions():
                callee = inst.called_function if isinstance(inst, I.CallBase) else None
                if callee is not None and not callee.is_declaration:
                    work += [(callee, k) for k, a in enumerate(inst.args)
                             if k < len(callee.args) and mine(underlying(a))]
    if found in ({8}, {4}):
        return found.pop()
    raise EnzymeCallError(
        f"{where}: the state of {ENTRY} must hold doubles or floats, which {step.ref} reads "
        f"and writes" + (f"; it accesses it as floats of {sorted(found)} bytes" if found
                         else "; pyzyme sees no float access to it in the step"),
        hint="pass the state to the step (or use the global in the step itself) and access "
             "it as doubles or as floats")


def _float_accesses(fn, targets) -> set:
    """The sizes of the floats ``fn`` loads and stores where ``targets(object)``."""
    found = set()
    for inst in fn.instructions():
        if isinstance(inst, I.Load):
            ty, pointer = inst.type, inst.pointer
        elif isinstance(inst, I.Store):
            ty, pointer = inst.value.type, inst.pointer
        else:
            continue
        if ty.scalar.is_float and targets(underlying(pointer)):
            found.add(sizeof(ty.scalar))
    return found


def expand(text: str) -> str:
    """``text`` with each call of pyzyme's fixed-point iteration left in it replaced by the
    loop itself."""
    return expand_calls(text, (naming.FIXED_POINT,), _loop_of)


def _loop_of(module, call, row):
    args = row.step_args(call)
    return primal_driver(module, call.args[row.step], [a.type for a in args]), args
