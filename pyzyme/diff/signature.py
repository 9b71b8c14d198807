"""The interfaces of derivatives: what a generated function takes and returns.

A signature is the key a generator memoizes a derivative under (with the primal function), and
what a call handler asks for when it wants the derivative of a callee
(:meth:`~pyzyme.diff.context.ForwardContext.callee_derivative`,
:meth:`~pyzyme.diff.context.ReverseContext.callee_derivative`): it lives below the generators
and the handlers alike, so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyzyme.analysis.activity import Activity
from pyzyme.ir import types as T

__all__ = ["ExtraParam", "ForwardSignature", "ReverseSignature", "SplitPair", "ParallelBody"]


@dataclass(frozen=True)
class ExtraParam:
    """A parameter the derivative adds after the primal ones: the shadow or tangent of primal
    parameter ``of`` in lane ``lane``, or (``of`` None) a parameter the derivative ignores."""

    type: T.Type
    of: int | None = None
    lane: int = 0


@dataclass(frozen=True)
class ForwardSignature:
    """The interface of a forward-mode derivative.

    ``activities`` has one entry per primal parameter. ``extra`` lists the added parameters, in
    order. ``derived`` gives, for a pointer parameter whose shadow is not passed but lies at a
    fixed byte offset from the parameter itself (Numba's ``retptr`` when the result slot holds
    the primal and then each tangent), the offset of each lane's shadow. ``scratch`` gives, for
    a pointer parameter whose derivative nobody wants (the result slot of a ``Const`` result),
    the byte size of a stack buffer that receives it and is thrown away. With
    ``return_derivative``, a function returning a float (or pointer, or aggregate) returns
    ``{ primal, d0, ..., dN-1 }`` instead.
    """

    activities: tuple[Activity, ...]
    extra: tuple[ExtraParam, ...]
    width: int = 1
    derived: tuple[tuple[int, tuple[int, ...]], ...] = ()
    return_derivative: bool = False
    scratch: tuple[tuple[int, int], ...] = ()
    #: The parameter through which the function reports an exception (Numba's ``excinfo``):
    #: pointers stored there are read by the caller only when it raises, and need no shadow.
    exception_param: int | None = None

    @staticmethod
    def standard(fn, activities: Sequence[Activity], width: int = 1) -> ForwardSignature:
        """Each non-const parameter followed by its N derivatives, derivative returned."""
        extra = []
        for i, (arg, act) in enumerate(zip(fn.args, activities)):
            if act is not Activity.CONST:
                extra += [ExtraParam(arg.type, i, lane) for lane in range(width)]
        return ForwardSignature(tuple(activities), tuple(extra), width, (), True)


@dataclass(frozen=True)
class ParallelBody:
    """What the reverse of a parallel loop's body may rely on: parameter ``shared`` (an
    ``i1``) says whether other threads run other rows at the same time (no atomic add where
    none does). Where the arrays of its launch do not overlap (``distinct``), arrays one
    iteration owns take plain adds (:mod:`pyzyme.analysis.parallel_access`): ``schedule``
    is the slot of its argument array holding the schedule (see
    :class:`~pyzyme.rules.spec.ParallelFor`), ``first_index`` a lower bound of the
    schedule's indices (None: none known). The memory of the slots ``stable`` keeps its
    contents until the body's reverse runs (the caller writes none of it after the launch):
    the reverse reads it again instead of the forward sweep taping what it read. The
    adjoints of the slots ``private`` go into a copy of their own per task (plain adds).
    The primal contents of the slots ``unread`` (a reduction's per-thread sums, where the
    derivative does not return the result: :mod:`pyzyme.analysis.unread_slots`) are read by
    no part of the derivative: the forward sweep need not store into them. With ``apart``
    no shadow in the launch's shadow argument array is memory its argument array points
    into (no runtime activity where it launches: a shadow is never its primal), and the
    body's reverse tells LLVM so (:func:`~pyzyme.diff.reverse.launch_memory.launch_side`)."""

    shared: int
    distinct: bool
    schedule: int
    first_index: int | None
    stable: frozenset = frozenset()
    private: frozenset = frozenset()
    unread: frozenset = frozenset()
    apart: bool = False


@dataclass(frozen=True)
class ReverseSignature:
    """The interface of a reverse-mode derivative.

    ``activities`` has one entry per primal parameter: a ``DUPLICATED`` pointer gets a shadow
    parameter (after all primal parameters, in order) whose memory accumulates adjoints; an
    ``ACTIVE`` float's adjoint is returned. With ``return_active`` the primal's returned float
    is an output: its seed (``dret``) comes after the shadows. With ``status_return`` the
    primal returns an integer status (Numba's convention): a nonzero status skips the reverse
    sweep and is passed on. ``memory_stable`` says nothing writes the memory the parameters
    point to between the sweeps (true of a whole call from Python; not of a callee, whose
    caller runs on before the reverse sweep). ``split`` asks for the augmented primal and
    reverse function instead of the combined one. ``nested``: the split pair of a callee,
    called from another derivative; its augmented primal takes the caller's deferred-release
    list as a last parameter and defers its releases there, so they are made when the
    outermost reverse sweep is done (the callee may free memory its caller allocated, whose
    shadow the caller's reverse sweep, after the callee's, still reads). With
    ``return_shadow`` (split only) the primal returns pointers into active memory: the
    augmented primal returns their shadows too (a value of the result's type, after the
    result), as Enzyme's augmented forward pass returns the shadow of a duplicated return;
    adjoints reach that memory through the shadow, so the reverse function takes no seed for
    it. With ``shared_adjoints`` the reverse function runs on several threads at once over
    the same shadow memory (the body of a parallel loop, :mod:`pyzyme.diff.parallel`): adjoints
    are added into shadow memory atomically unless the address is proven to belong to one
    iteration, and the callees it differentiates inherit the flag; ``parallel_body`` says what
    proves such an address (a :class:`ParallelBody`; None: nothing does). With
    ``result_unread`` (``status_return`` only) no one reads the memory of the primal's result
    parameter (Numba's ``retptr``) after the call: the primal result is not returned.
    """

    activities: tuple[Activity, ...]
    return_active: bool = False
    status_return: bool = False
    memory_stable: bool = True
    split: bool = False
    nested: bool = False
    return_shadow: bool = False
    shared_adjoints: bool = False
    parallel_body: ParallelBody | None = None
    result_unread: bool = False


@dataclass(frozen=True)
class SplitPair:
    """``augmented(params, shadows, releases?) -> {primal result?, its shadow?, tape}``
    (``releases``: the caller's list, when nested; the shadow: with ``return_shadow``) and
    ``reverse(params, shadows, dret?, discard, tape) -> {adjoints}``: with ``discard`` set,
    the reverse function only frees the tape (and what it keeps alive)."""

    augmented: object
    reverse: object
    nbytes: object = None      # i64 (ptr tape): the bytes it holds (TapeCache.bytes_function)
