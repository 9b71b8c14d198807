"""Run-time activity checks (Enzyme's ``runtimeActivity``), shared by both modes.

A pointer found by :mod:`pyzyme.analysis.runtime_activity` may, on some executions, point to
memory that has no shadow. With ``Options.runtime_activity`` off such a pointer is refused when
anything would read or write a derivative through it (:func:`runtime_values` raises); with it on,
the pointer without a shadow stands as its own shadow (:func:`primal_as_shadow`), and each
derivative access through the merged pointer first asks :func:`inactive_here`
(``icmp eq shadow, primal``): a load then reads zero, a store or accumulation writes back what is
there, a reference count or free acts on null. Selects, not branches, so the control flow of the
derivative stays that of the primal.

Values outside the runtime set get exactly the code they got before, so with the option off the
derivative is unchanged.
"""

from __future__ import annotations

from pyzyme.analysis.activity import contains_type
from pyzyme.analysis.runtime_activity import analyze_runtime_activity
from pyzyme.diff.pointers import whose_memory
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Argument, Value, const_null
from pyzyme.settings import Options
from pyzyme.rules import default_rules
from pyzyme.rules.spec import Mirror

__all__ = ["runtime_values", "primal_as_shadow", "inactive_here", "guarded_call_shadows"]


def runtime_values(fn, activity, where: str, options: Options) -> frozenset:
    """The values of ``fn`` whose derivative accesses need run-time checks: empty when there
    are none or ``options.runtime_activity`` is off; with it off, an
    :class:`~pyzyme.ActivityError` when a derivative would be read or written through one."""
    ra = analyze_runtime_activity(fn, activity)
    if not ra.values:
        return frozenset()
    if options.runtime_activity:
        return frozenset(ra.values)
    if ra.needs:
        raise _error(where, ra)
    return frozenset()  # no derivative goes through it here: null shadows serve, as before


def _error(where: str, ra) -> ActivityError:
    use = ra.needs[0]
    merge = ra.origin[next(op for op in use.operands if op in ra.values)]
    source = ra.sources[merge]
    err = ActivityError(
        f"{where} merges memory that has no shadow{_whose(source)} with memory that has one, "
        f"then reads or writes derivatives through the merged pointer, so whether it is active "
        f"is known only at run time: {_show(merge)}; {_show(use)}",
        hint="call pyzyme.set_runtime_activity(True), so loads and stores check at run time "
             "whether a pointer's shadow is its primal (a little slower), or pass that "
             "argument as Duplicated", docs="sharp-bits.html#runtime-activity")
    # The memory without a shadow (a parameter, where it is one): the JAX-style layer, which
    # has no annotation for it, gives that argument a zero shadow (pyzyme.api.workspaces).
    err.merged = source
    return err


def _show(inst) -> str:
    return f"{inst.ref} = {inst}" if inst.name else str(inst)


def _whose(value) -> str:
    return whose_memory(value) or (f" ({value.ref})" if isinstance(value, Argument) else "")


def primal_as_shadow(where: str, primal: Value, ty: T.Type) -> Value:
    """The shadow of a value without one that joins a runtime-activity merge: the value
    itself (its memory is its own shadow; the checks keep derivatives out of it)."""
    if contains_type(ty, lambda t: t.is_float):
        raise UnsupportedError(
            f"{where} merges an aggregate holding floats and pointers whose activity is known "
            f"only at run time; runtime activity does not cover that yet")
    return primal


def inactive_here(b: IRBuilder, shadow: Value, primal: Value) -> Value:
    """``shadow == primal``: true where the pointer's memory has no shadow of its own."""
    return b.icmp("eq", shadow, primal, name="rt.inactive")


def guarded_call_shadows(where: str, call: I.CallBase, runtime, shadow_of, primal_of,
                         b: IRBuilder) -> dict:
    """For a call handed pointers of the runtime set: each one's shadow, or null where the
    shadow is the primal (``{operand: guarded shadow}``), to stand in while the call's
    derivative code is emitted. Only reference counts and frees take such pointers."""
    callee = call.called_function
    name = callee.name if callee is not None else None
    guarded = {}
    for arg in call.args:
        if arg not in runtime or arg in guarded:
            continue
        # A call that takes null and then does nothing (its Mirror row's null_ok): the shadow
        # is nulled where it is the primal, so the primal is not counted or freed twice.
        row = default_rules().lookup(name, "call") if name is not None else None
        if not (isinstance(row, Mirror) and row.null_ok):
            raise UnsupportedError(
                f"{where} passes a pointer whose activity is known only at run time to "
                f"{'@' + name if name else 'an indirect call'}; runtime activity does not cover "
                f"calls other than reference counts yet: {call}")
        shadow, primal = shadow_of(arg), primal_of(arg)
        guarded[arg] = b.select(inactive_here(b, shadow, primal), const_null(arg.type), shadow)
    return guarded
