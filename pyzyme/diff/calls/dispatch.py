"""Calls, in both modes: one table from the kind of the callee's rule row to its handlers.

The callee's row in the rule table (user rules first, then intrinsics, C math, memory and
runtime functions; :mod:`pyzyme.rules.spec` lists the kinds) chooses a :class:`CallRule`: how
activity analysis sees the call, and the handler of each mode. A callee without a row is
differentiated through its own body (:mod:`pyzyme.diff.calls.callee`), or refused with an error
naming it when an argument carries a derivative and it has none. A kind the table has no handler
for in a mode raises :class:`~pyzyme.UnsupportedError` naming the kind and the call: the one
place a missing rule is found (as JAX's ``ad.py`` names a primitive without a JVP).

Handlers take ``(cx, inst, row)``: the :mod:`~pyzyme.diff.context` of the function being
differentiated, the primal call and its row. Each copies the call itself (or makes another in
its place), so a handler sees the call before anything of it is emitted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyzyme import naming
from pyzyme.diff.calls import (
    allocation,
    callee,
    checkpoint,
    checkpoint_tangents,
    copies,
    fixed_point,
    custom,
    inactive,
    mpi,
    registered,
    vector,
)
from pyzyme.diff.linalg import blas, cblas, cholesky, eigh, lapack, lu, nrm2
from pyzyme.diff.memory_calls import with_args
from pyzyme.diff.parallel import launch as parallel
from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir.names import readable
from pyzyme.rules import spec
from pyzyme.rules.constructs import construct_of

__all__ = ["CallRule", "RULES", "LINALG", "row_of", "handler_for", "call_result_varied",
           "may_allocate", "forward_mode", "forward_sweep", "reverse_sweep"]

Handler = Callable[..., None]


@dataclass(frozen=True)
class CallRule:
    """How the calls of one kind of rule row are differentiated.

    Attributes
    ----------
    varied
        ``varied(row, inst, is_varied)``: whether the call's result carries a derivative,
        given which values do (activity analysis asks).
    allocates
        Whether such a call may store a fresh allocation through a pointer it is handed (not
        the rows that only compute, copy or count references; activity analysis asks).
    forward
        Forward mode: the call and its tangents, on a
        :class:`~pyzyme.diff.context.ForwardContext`; None where there is none.
    augmented
        Reverse mode's forward sweep: the call and what its reverse needs, on a
        :class:`~pyzyme.diff.context.ReverseContext`; None where there is none.
    reverse
        The reverse sweep: the call's adjoints; None where there is none.
    """

    varied: Callable[..., bool]
    allocates: bool
    forward: Handler | None
    augmented: Handler | None
    reverse: Handler | None


_MODES = {"forward": "forward mode", "augmented": "reverse mode (forward sweep)",
          "reverse": "reverse mode"}


def _missing(kind: str, mode: str, inst: I.CallBase) -> UnsupportedError:
    callee_ = inst.called_function
    where = readable(inst.parent.parent.name) if inst.parent is not None else "?"
    name = callee_.ref if callee_ is not None else "an indirect callee"
    return UnsupportedError(
        f"{where} calls {name}, whose rule is a {kind} row, and {_MODES.get(mode, mode)} has "
        f"no handler for {kind} rows: {inst}",
        hint="add one to pyzyme.diff.calls.dispatch (or report this function)")


def _kind(row) -> str:
    return "no" if row is None else type(row).__name__


def _rule(row, inst: I.CallBase) -> CallRule:
    rule = RULES.get(type(row) if row is not None else None)
    if rule is None:
        raise _missing(_kind(row), "activity analysis", inst)
    return rule


def handler_for(row, mode: str, inst: I.CallBase) -> Handler:
    """The one dispatch point: the handler of call ``inst``, whose callee's rule row is
    ``row`` (None: no row), in ``mode`` (``"forward"``, ``"augmented"`` or ``"reverse"``).

    Raises
    ------
    UnsupportedError
        Naming the row kind and the call, where the table has no handler for them.
    """
    return _handler(RULES.get(type(row) if row is not None else None), mode, _kind(row), inst)


def _handler(rule: CallRule | None, mode: str, kind: str, inst: I.CallBase) -> Handler:
    handler = getattr(rule, mode) if rule is not None else None
    if handler is None:
        raise _missing(kind, mode, inst)
    return handler


def row_of(rules, inst: I.CallBase):
    """The rule row of the function ``inst`` calls, or None (no row, or an indirect call)."""
    callee_ = inst.called_function
    return rules.lookup(callee_.name, "call") if callee_ is not None else None


# -- activity analysis --------------------------------------------------------------------------
def call_result_varied(rules, inst: I.CallBase, is_varied) -> bool:
    """Whether the result of call ``inst`` carries a derivative, given ``is_varied`` of its
    operands (the call policy of :func:`~pyzyme.analysis.activity.analyze_activity`)."""
    row = row_of(rules, inst)
    return _rule(row, inst).varied(row, inst, is_varied)


def may_allocate(rules, inst: I.CallBase) -> bool:
    """Whether call ``inst`` may store a fresh allocation through a pointer it is handed
    (activity analysis asks)."""
    if inst.called_function is None:
        return False
    row = row_of(rules, inst)
    return _rule(row, inst).allocates


# -- the modes ----------------------------------------------------------------------------------
def forward_mode(cx, inst: I.CallBase) -> None:
    """Forward mode: the call and the code of its derivative."""
    if isinstance(inst, (I.Invoke, I.CallBr)):
        _unwinding(cx, inst, "forward", "derivative")
        return
    callee_ = inst.called_function
    if callee_ is not None and naming.is_checkpoint_sweep(callee_.name):
        checkpoint_tangents.forward_mode(cx, inst)  # forward over reverse (hvp)
        return
    row = row_of(cx.rules, inst)
    handler_for(row, "forward", inst)(cx, inst, row)


def forward_sweep(cx, inst: I.CallBase) -> None:
    """Reverse mode's forward sweep: the call, and what its reverse will need."""
    if isinstance(inst, (I.Invoke, I.CallBr)):
        _unwinding(cx, inst, "augmented", "reverse-mode derivative")
        new = cx.values.get(inst)
        edge = cx.entries.get((inst.parent, inst.successors[0]))
        if isinstance(new, I.Invoke) and edge is not None:
            new.set_operand(len(new.operands) - 2, edge)  # the normal edge enters a loop
        return
    row = row_of(cx.rules, inst)
    if cx.sig.shared_adjoints and _any_varied(cx, inst) and (
            isinstance(row, _SERIAL_ONLY) or inst.called_function is None) and \
            not _private_operands(cx, inst, row):
        raise _not_in_parallel(cx, inst, row)
    handler_for(row, "augmented", inst)(cx, inst, row)


def reverse_sweep(cx, inst: I.CallBase) -> None:
    """The reverse sweep of a call: its adjoints."""
    if isinstance(inst, (I.Invoke, I.CallBr)):
        # Only an invoke of a function with a body has any (see _unwinding).
        if inst in cx.callee_tapes:
            callee.reverse(cx, inst)
        return
    row = row_of(cx.rules, inst)
    handler_for(row, "reverse", inst)(cx, inst, row)


#: Rows whose reverse adds into shadow memory by code of its own (a BLAS call, a user's
#: rule, a masked gather's scatter): in the body of a parallel loop other threads would add
#: into the same memory at the same time.
_SERIAL_ONLY = (spec.Blas, spec.Custom, spec.Registered, spec.Masked, spec.Mpi)


def _private_operands(cx, inst: I.CallBase, row) -> bool:
    """Whether a BLAS call in a parallel loop's body adds into memory of its iteration only
    (its own temporaries, elements it owns): then no other thread adds into its adjoints
    (``A[i] @ x[cols[i]]``: a row the iteration owns and a gathered copy). An operand that
    carries no derivative has no adjoint to add into (``P @ B.T`` with ``B`` a constant all
    iterations share)."""
    return isinstance(row, spec.Blas) and all(
        cx.private(a) or a not in cx.activity.varied for a in inst.args if a.type.is_pointer)


def _not_in_parallel(cx, inst: I.CallBase, row) -> UnsupportedError:
    callee_ = inst.called_function
    name = f"@{readable(callee_.name)}" if callee_ is not None else "a function pointer"
    construct = construct_of(callee_.name) if callee_ is not None else None
    what = f"{construct.what} through {name}" if construct is not None else \
        f"{name} (a {_kind(row)} rule)"
    where = cx.where if "prange" in cx.where else \
        f"{cx.where}, called in a prange / parallel=True loop,"
    err = UnsupportedError(
        f"{where} calls {what} with values that carry derivatives: its reverse would add "
        f"into memory other threads add into at the same time",
        hint="move the call out of the prange loop, or write the loop with range instead of "
             "numba.prange")
    return err  # the launch names its loop's line (diff.parallel.launch)


def _unwinding(cx, inst: I.CallBase, mode: str, what: str) -> None:
    """An ``invoke`` (C++: a call that may throw where a destructor must run) of a function
    with a body, or of an inactive one, is handled as a call is (the derivative invoked); any
    other ``invoke`` or ``callbr`` is copied as it is where no argument varies."""
    row = row_of(cx.rules, inst)
    if isinstance(inst, I.Invoke) and (row is None or isinstance(row, spec.Inactive)):
        handler_for(row, mode, inst)(cx, inst, row)
        return
    if _any_varied(cx, inst):
        callee_ = inst.called_function
        name = f"{callee_.ref} ({'a rule' if row is not None else 'no body'})" \
            if callee_ is not None else "an indirect callee"
        raise UnsupportedError(
            f"no {what} for {inst.opcode} with active arguments in {cx.where}: an invoke is "
            f"differentiated only of a function with a body, not of {name}",
            hint="call the function outside a try block, or build with -fno-exceptions")
    cx.clone(inst)


# -- handlers of the kinds that need only a few lines --------------------------------------------
def _any_varied(cx, inst: I.CallBase) -> bool:
    return any(a in cx.activity.varied for a in inst.args)


def _any_argument(row, inst: I.CallBase, is_varied) -> bool:
    return any(is_varied(a) for a in inst.args)


def _never(row, inst: I.CallBase, is_varied) -> bool:
    return False


def _clone(cx, inst: I.CallBase, row) -> None:
    cx.clone(inst)


def _nothing(cx, inst: I.CallBase, row) -> None:
    pass


def _partials_varied(row: spec.Partials, inst: I.CallBase, is_varied) -> bool:
    return any(p is not None and is_varied(a) for p, a in zip(row.partials, inst.args))


def _partials_forward(cx, inst: I.CallBase, row: spec.Partials) -> None:
    new = cx.clone(inst)
    cx.partials(inst, new, row, inst.args, new.args, inst.flags)


def _partials_reverse(cx, inst: I.CallBase, row: spec.Partials) -> None:
    if cx.active(inst):
        cx.partials(inst, row, inst.args, inst.flags)


def _linear_varied(row: spec.Linear, inst: I.CallBase, is_varied) -> bool:
    return is_varied(inst.args[0])


def _linear_forward(cx, inst: I.CallBase, row: spec.Linear) -> None:
    """The same call on the tangent of its one operand."""
    new = cx.clone(inst)
    if inst in cx.activity.varied:
        cx.lanes(inst, lambda k, name: cx.builder.insert(with_args(
            new, [cx.derivs[inst.args[0]][k]] + list(new.args[1:])), name))


def _when_varied(handler: Handler) -> Handler:
    """``handler`` where an argument carries a derivative; the call as it is elsewhere."""
    def handle(cx, inst: I.CallBase, row) -> None:
        if _any_varied(cx, inst):
            handler(cx, inst, row)
        else:
            cx.clone(inst)
    return handle


def _when_kept(handler: Handler) -> Handler:
    """``handler`` for the calls whose forward sweep kept something for it
    (``cx.rule_calls``); nothing for the others."""
    def handle(cx, inst: I.CallBase, row) -> None:
        if inst in cx.rule_calls:
            handler(cx, inst, row)
    return handle


def _linalg_rule(module) -> CallRule:
    return CallRule(_never, False, module.forward_mode, module.augmented,
                    _when_kept(module.reverse))


#: BLAS and LAPACK calls (:class:`~pyzyme.rules.spec.Blas` rows), by the ``op`` of the row.
LINALG: dict[str, CallRule] = {
    "dot": _linalg_rule(blas), "gemv": _linalg_rule(blas), "gemm": _linalg_rule(blas),
    "nrm2": _linalg_rule(nrm2),
    "gesv": _linalg_rule(lapack),
    "getrf": _linalg_rule(lu), "getri": _linalg_rule(lu),
    "potrf": _linalg_rule(cholesky),
    "evd": _linalg_rule(eigh),
    "cblas_dot": _linalg_rule(cblas), "cblas_gemv": _linalg_rule(cblas),
    "cblas_gemm": _linalg_rule(cblas),
}


def _blas_varied(row, inst: I.CallBase, is_varied) -> bool:
    """A BLAS routine returning a float (CBLAS's dot) varies with its operands; the others
    return a status, or nothing."""
    return inst.type.is_float and any(is_varied(inst.args[i]) for i in row.operands)


def _by_op(mode: str) -> Handler:
    """A Blas row's handler for ``mode``: that of :data:`LINALG` for the row's ``op``."""
    def handle(cx, inst: I.CallBase, row: spec.Blas) -> None:
        _handler(LINALG.get(row.op), mode, f"Blas ({row.op!r})", inst)(cx, inst, row)
    return handle


#: The handlers of calls, by the class of the callee's row (None: the callee has no row).
RULES: dict[type | None, CallRule] = {
    None: CallRule(callee.result_varied, True, callee.forward_mode, callee.augmented,
                   callee.reverse),
    spec.Partials: CallRule(_partials_varied, False, _partials_forward, _clone,
                            _partials_reverse),
    # No call has a Linear row (only casts do): reverse mode would need its transpose.
    spec.Linear: CallRule(_linear_varied, False, _linear_forward, None, None),
    spec.Memory: CallRule(_never, False, copies.forward_mode, copies.augmented, copies.reverse),
    spec.Allocation: CallRule(allocation.allocation_varied, True, allocation.allocation_forward,
                              allocation.allocation_augmented, _nothing),
    spec.Mirror: CallRule(allocation.mirror_varied, False, allocation.mirror_forward,
                          allocation.mirror_augmented, allocation.mirror_reverse),
    spec.Inactive: CallRule(_never, False, inactive.forward_mode, inactive.augmented,
                            inactive.reverse),
    spec.Reduction: CallRule(_any_argument, False, vector.reduction_forward,
                             vector.reduction_augmented, vector.reduction_reverse),
    spec.Masked: CallRule(vector.masked_varied, False, vector.masked_forward,
                          vector.masked_augmented, vector.masked_reverse),
    spec.Blas: CallRule(_blas_varied, False, _by_op("forward"), _by_op("augmented"),
                        _by_op("reverse")),
    spec.Custom: CallRule(_any_argument, True, _when_varied(custom.forward_mode),
                          _when_varied(custom.augmented), _when_kept(custom.reverse)),
    spec.Registered: CallRule(_any_argument, True, _when_varied(registered.forward_mode),
                              _when_varied(registered.augmented), registered.reverse),
    spec.ParallelFor: CallRule(parallel.varied, False, parallel.forward_mode,
                               parallel.augmented, parallel.reverse),
    # A call of the gradient log itself (the program's enzymeLogGrad) only logs.
    # MPI: the communication of shadows (a status returned; buffers written).
    spec.Mpi: CallRule(mpi.varied, False, mpi.forward_mode, mpi.augmented,
                       _when_kept(mpi.reverse)),
    spec.GradientLog: CallRule(_never, False, _clone, _clone, _nothing),
    spec.CheckpointLoop: CallRule(checkpoint.varied, False, checkpoint.forward_mode,
                                  checkpoint.augmented, checkpoint.reverse),
    spec.FixedPoint: CallRule(fixed_point.varied, False, fixed_point.forward_mode,
                              fixed_point.augmented, fixed_point.reverse),
}
