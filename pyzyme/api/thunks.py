"""``autodiff_thunk``: derivatives as functions to call later, as in Enzyme.jl.

In forward mode the thunk is ``autodiff`` with the function and activities fixed. In split
reverse mode it is a pair: ``forward(*args)`` runs the function and returns a
:class:`~pyzyme.api.njit.tape.Tape` (with the primal result and the shadow result), and
``reverse(*args, seed, tape)`` runs the reverse sweep from that tape. Between the two, the
arguments' memory may change (that is what split mode is for); the tape holds everything the
reverse sweep needs.

Like :func:`~pyzyme.autodiff`, the pair runs one build for calls whose arrays share no memory
(their data ``noalias``) and another for calls whose arrays may overlap (:class:`SplitPlans`);
the tape remembers which build made it, and the reverse thunk runs that build's sweep.

The thunks are also callable from inside ``@njit`` code, with the same annotated arguments
(:mod:`pyzyme.api.njit.thunks`); there the tape is a Numba-managed object.

Examples
--------
>>> import numpy as np
>>> from pyzyme import Active, Duplicated, ReverseSplitWithPrimal
>>> def f(A, v):
...     res = A[0] * v
...     A[0] = 0.0
...     return res
>>> A = np.array([2.2]); dA = np.zeros(1)
>>> fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated(A, dA), Active(3.3))
>>> tape, result, shadow_result = fwd(Duplicated(A, dA), Active(3.3))
>>> _, dv = rev(Duplicated(A, dA), Active(3.3), 1.0, tape)[0]
>>> round(result, 12), round(dv, 12), dA
(7.26, 2.2, array([3.3]))
"""

from __future__ import annotations

import inspect
from functools import partial
from typing import Any

from pyzyme import settings
from pyzyme.analysis.activity import Activity
from pyzyme.api import annotations as A
from pyzyme.api.args.marshal import ReverseArg, distinct
from pyzyme.api.autodiff import autodiff
from pyzyme.api.dispatchers import dispatcher_of, parameter_names
from pyzyme.api.modes import Mode
from pyzyme.api.njit import annotations as njit_annotations  # noqa: F401  annotations inside @njit code
from pyzyme.api.njit.overload import NjitObject, overloaded_njit
from pyzyme.api.njit.tape import Tape, TapeType
from pyzyme.api.njit.thunks import (
    SHARED_AFTER_APART,
    checks_apart,
    forward_implementation,
    split_forward_implementation,
    split_reverse_implementation,
)
from pyzyme.api.plans import split_plan
from pyzyme.errors import ArgumentTypeError, UnsupportedError

__all__ = ["autodiff_thunk", "Tape", "ForwardThunk", "SplitPlans", "SplitForward",
           "SplitReverse"]


def autodiff_thunk(mode: Mode, f, *args) -> Any:
    """Thunks for ``f`` differentiated in ``mode``, fixed by annotated example arguments.

    ``autodiff_thunk(mode, f, ret_activity, *example_args)``. For ``Forward`` modes: one
    callable taking annotated arguments, returning what :func:`~pyzyme.autodiff` returns. For
    ``ReverseSplitWithPrimal`` / ``ReverseSplitNoPrimal``: ``(forward, reverse)`` where
    ``forward(*args)`` returns ``(tape, primal or None, shadow result or None)`` and
    ``reverse(*args, [seed of an Active result], tape)`` returns ``((derivative of each
    Active argument, None for the others),)`` and accumulates into Duplicated shadows.

    The thunks can be called from inside ``@njit`` code too, with the same annotations (see
    :mod:`pyzyme.api.njit.thunks`).
    """
    if not isinstance(mode, Mode):
        raise TypeError(f"autodiff_thunk's first argument must be a mode, got {mode!r}")
    ret_activity = None
    if args and isinstance(args[0], type) and issubclass(args[0], A.Annotation):
        ret_activity, args = args[0], args[1:]
    if mode.is_forward:
        return ForwardThunk(mode, f, ret_activity)
    if not mode.split:
        raise UnsupportedError(f"autodiff_thunk takes a forward or split reverse mode, not "
                               f"{mode}; for combined reverse mode call autodiff directly")
    return _split(mode, f, ret_activity, [A.annotate(a) for a in args])


def _positional_arity(dispatcher) -> int:
    params = list(inspect.signature(dispatcher.py_func).parameters.values())
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        raise UnsupportedError("a thunk inside @njit code needs a function with a fixed list of "
                               "positional parameters")
    return len(params)


class ForwardThunk(NjitObject):
    """``autodiff(mode, f, ret_activity, *args)`` with ``mode``, ``f`` and ``ret_activity``
    fixed; callable from Python and from ``@njit`` code."""

    def __init__(self, mode: Mode, f, ret_activity) -> None:
        super().__init__()
        self.mode, self.f, self.ret_activity = mode, f, ret_activity

    def __call__(self, *call_args):
        ret = [self.ret_activity] if self.ret_activity else []
        return autodiff(self.mode, self.f, *ret, *call_args)

    def __repr__(self) -> str:
        return f"<pyzyme {self.mode} thunk of {getattr(self.f, '__name__', 'f')}>"

    def _make_njit(self):
        dispatcher = dispatcher_of(self.f)

        def typer(*argtypes):
            return forward_implementation(dispatcher, self.mode, self.ret_activity, argtypes)

        names = [f"a{i}" for i in range(_positional_arity(dispatcher))]
        return overloaded_njit("forward_thunk", names, typer)


def _convert(plan, call_args) -> list:
    calls = [ReverseArg(A.annotate(a), {}, i) for i, a in enumerate(call_args)]
    got = tuple(c.numba_type for c in calls), tuple(c.kind for c in calls)
    if got != (plan.primal_types, plan.kinds):
        made = [(k.value, t) for k, t in zip(plan.kinds, plan.primal_types)]
        raise ArgumentTypeError(f"the thunks were made for arguments {made}; got "
                                f"{[(k.value, t) for k, t in zip(got[1], got[0])]}")
    return calls


class SplitPlans:
    """The split derivative of one function for one set of argument types and activities, in
    two builds: for calls whose arrays may share memory and for calls whose arrays share none
    (array data ``noalias``, as :func:`autodiff` builds it for such calls: a parallel loop's
    reverse then adds shared adjoints into a copy per thread instead of atomically). ``first``
    is the one the example arguments asked for, made with the thunks, and the one ``@njit``
    code calls (checking at run time that arrays are apart, where it is that build, unless an
    argument holds arrays inside a container: then the other); the other is built when a call
    first needs it, under the options in force when the thunks were made."""

    def __init__(self, dispatcher, primal_types: tuple, kinds: tuple, ret_activity,
                 apart: bool) -> None:
        self._key = (dispatcher, primal_types, kinds, ret_activity)
        self._options = settings.current()
        self._built: dict = {}
        self.first = self.plan(apart)

    def plan(self, apart: bool):
        """The build for calls whose arrays share no memory (``apart``) or may."""
        plan = self._built.get(apart)
        if plan is None:
            with settings.using(self._options):
                plan = self._built[apart] = split_plan(*self._key, distinct=apart)
        return plan

    def made(self, plan) -> bool:
        """Whether ``plan`` is one of these builds (a tape's, say)."""
        return any(p is plan for p in self._built.values())

    @property
    def apart(self):
        """The build for arrays apart, where it was made; else None."""
        return self._built.get(True)


class SplitForward(NjitObject):
    """The forward thunk of split reverse mode: ``(tape, primal or None, None)``."""

    def __init__(self, mode: Mode, plans: SplitPlans, dispatcher) -> None:
        super().__init__()
        self.mode, self.plans, self._dispatcher = mode, plans, dispatcher

    def __call__(self, *call_args):
        calls = _convert(self.plans.first, call_args)
        plan = self.plans.plan(distinct(calls))
        out = plan.augmented(*[c.primal for c in calls], *[s for c in calls for s in c.shadows])
        for c in calls:
            c.copy_back()
        tape = Tape(int(out[-1]), plan)
        primal = out[0] if len(out) > 1 else None
        return (tape, primal if self.mode.with_primal else None, None)

    def __repr__(self) -> str:
        return f"<pyzyme {self.mode} forward thunk of {self._dispatcher.py_func.__name__}>"

    def _make_njit(self):
        # The build the thunks were made with: one for arrays apart checks them at run time,
        # where it can (an array inside a tuple or record: the build for any arrays).
        plans = self.plans

        def typer(*argtypes):
            plan = plans.first
            apart = plan is plans.apart
            if apart and not checks_apart(plan, argtypes):
                plan, apart = plans.plan(False), False
            return split_forward_implementation(plan, TapeType(plan), self.mode.with_primal,
                                                argtypes, apart=apart)

        names = [f"a{i}" for i in range(len(plans.first.kinds))]
        return overloaded_njit("forward_thunk", names, typer)


class SplitReverse(NjitObject):
    """The reverse thunk of split reverse mode: ``reverse(*args, [seed], tape)``, with the
    build of the forward thunk that made the tape."""

    def __init__(self, mode: Mode, plans: SplitPlans, dispatcher) -> None:
        super().__init__()
        self.mode, self.plans, self._dispatcher = mode, plans, dispatcher

    def __call__(self, *call_args):
        plans = self.plans
        if not call_args or not isinstance(call_args[-1], Tape):
            raise ArgumentTypeError("the reverse thunk takes the arguments, then the seed of an "
                                    "Active result, then the tape from the forward thunk")
        tape = call_args[-1]
        rest = call_args[:-1]
        plan = tape.plan if plans.made(tape.plan) else plans.first
        seeds = ()
        if plan.seeded:
            if len(rest) != len(plan.kinds) + 1:
                raise ArgumentTypeError("the result is Active: pass its seed (e.g. 1.0) before "
                                        "the tape")
            seeds, rest = (rest[-1],), rest[:-1]
        elif len(rest) != len(plan.kinds):
            raise ArgumentTypeError(f"expected {len(plan.kinds)} arguments and the tape; got "
                                    f"{len(rest)} arguments")
        calls = _convert(plan, rest)
        if plan is plans.apart and not distinct(calls):
            raise ArgumentTypeError(SHARED_AFTER_APART)
        address = tape.take(plan)
        out = plan.reverse(*[c.primal for c in calls], *[s for c in calls for s in c.shadows],
                           *seeds, address)
        for c in calls:
            c.copy_back()
        adjoints = iter(out if out is not None else ())
        return (tuple(next(adjoints) if c.kind is Activity.ACTIVE else None for c in calls),)

    def __repr__(self) -> str:
        return f"<pyzyme {self.mode} reverse thunk of {self._dispatcher.py_func.__name__}>"

    def _make_njit(self):
        plans = self.plans

        def typer(*argtypes):
            last = argtypes[-1] if argtypes else None
            plan = last.plan if isinstance(last, TapeType) and plans.made(last.plan) \
                else plans.first
            return split_reverse_implementation(plan, TapeType(plan), argtypes,
                                                apart=plan is plans.apart)

        first = plans.first
        names = [f"a{i}" for i in range(len(first.kinds))]
        names += ["seed", "tape"] if first.seeded else ["tape"]
        return overloaded_njit("reverse_thunk", names, typer)


def _split(mode: Mode, f, ret_activity, examples) -> tuple:
    if ret_activity is not None and ret_activity not in (A.Active, A.Const):
        raise UnsupportedError(f"{ret_activity.__name__} results are not supported in split "
                               f"mode yet; use Active or Const")
    dispatcher = dispatcher_of(f)
    names = partial(parameter_names, f)
    probe = [ReverseArg(a, {}, i, names) for i, a in enumerate(examples)]
    types_ = tuple(c.numba_type for c in probe)
    kinds = tuple(c.kind for c in probe)
    plans = SplitPlans(dispatcher, types_, kinds, ret_activity, distinct(probe))
    return SplitForward(mode, plans, dispatcher), SplitReverse(mode, plans, dispatcher)
