"""``autodiff_thunk``: derivatives as functions to call later, as in Enzyme.jl.

In forward mode the thunk is ``autodiff`` with the function and activities fixed. In split
reverse mode it is a pair: ``forward(*args)`` runs the function and returns a :class:`Tape`
(with the primal result and the shadow result), and ``reverse(*args, seed, tape)`` runs the
reverse sweep from that tape. Between the two, the arguments' memory may change (that is what
split mode is for); the tape holds everything the reverse sweep needs.

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

from typing import Any

from pyzyme.api import annotations as A
from pyzyme.api.modes import Mode
from pyzyme.errors import PyzymeError, UnsupportedError

__all__ = ["autodiff_thunk", "Tape"]


class Tape:
    """What a split forward pass keeps for its reverse pass: opaque, single use.

    It owns its memory: a tape that is never passed to the reverse thunk is freed (with the
    temporaries it keeps alive) when it is collected. ``nbytes`` is the memory it holds: its
    own block, and the loop caches and stacks hanging off it at their capacity (temporaries
    of the function it keeps alive are not counted).
    """

    __slots__ = ("_address", "_plan", "nbytes")

    def __init__(self, address: int, plan) -> None:
        self._address = address
        self._plan = plan
        self.nbytes = int(plan.nbytes(address)) if address else 0

    @property
    def consumed(self) -> bool:
        return self._address is None

    def _take(self, plan) -> int:
        if self._address is None:
            raise PyzymeError("this tape was already used by a reverse pass (or freed); run "
                              "the forward thunk again for a new one")
        if plan is not self._plan:
            raise PyzymeError("this tape comes from another function's (or other argument "
                              "types') forward thunk; pass it to the reverse thunk made with it")
        address, self._address = self._address, None
        return address

    def free(self) -> None:
        """Release the tape now instead of when it is collected."""
        if self._address is not None:
            address, self._address = self._address, None
            if address:
                self._plan.discard(address)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to free into
            pass

    def __repr__(self) -> str:
        state = "used" if self._address is None else f"{self.nbytes} bytes"
        return f"Tape({state})"


def autodiff_thunk(mode: Mode, f, *args) -> Any:
    """Thunks for ``f`` differentiated in ``mode``, fixed by annotated example arguments.

    ``autodiff_thunk(mode, f, ret_activity, *example_args)``. For ``Forward`` modes: one
    callable taking annotated arguments, returning what :func:`~pyzyme.autodiff` returns. For
    ``ReverseSplitWithPrimal`` / ``ReverseSplitNoPrimal``: ``(forward, reverse)`` where
    ``forward(*args)`` returns ``(tape, primal or None, shadow result or None)`` and
    ``reverse(*args, [seed of an Active result], tape)`` returns ``((derivative of each
    Active argument, None for the others),)`` and accumulates into Duplicated shadows.
    """
    from pyzyme.api.autodiff import autodiff

    if not isinstance(mode, Mode):
        raise TypeError(f"autodiff_thunk's first argument must be a mode, got {mode!r}")
    ret_activity = None
    if args and isinstance(args[0], type) and issubclass(args[0], A.Annotation):
        ret_activity, args = args[0], args[1:]
    if mode.is_forward:
        def forward_thunk(*call_args):
            return autodiff(mode, f, *([ret_activity] if ret_activity else []), *call_args)
        return forward_thunk
    if not mode.split:
        raise UnsupportedError(f"autodiff_thunk takes a forward or split reverse mode, not "
                               f"{mode}; for combined reverse mode call autodiff directly")
    return _split(mode, f, ret_activity, [A.annotate(a) for a in args])


def _split(mode: Mode, f, ret_activity, examples) -> tuple:
    from pyzyme.api.autodiff import CACHE, _dispatcher, _ReverseArg, _rules
    from pyzyme.api.numba_split import build_split

    if ret_activity is not None and ret_activity not in (A.Active, A.Const):
        raise UnsupportedError(f"{ret_activity.__name__} results are not supported in split "
                               f"mode yet; use Active or Const")
    dispatcher = _dispatcher(f)
    probe = [_ReverseArg(a, {}) for a in examples]
    types_ = tuple(c.numba_type for c in probe)
    kinds = tuple(c.kind for c in probe)
    plan = CACHE.get(("split", dispatcher, types_, kinds, ret_activity),
                     lambda: build_split(dispatcher, types_, kinds, ret_activity, _rules()))

    def convert(call_args) -> list:
        calls = [_ReverseArg(A.annotate(a), {}) for a in call_args]
        got = tuple(c.numba_type for c in calls), tuple(c.kind for c in calls)
        if got != (types_, kinds):
            raise PyzymeError(f"the thunks were made for arguments {list(zip(kinds, types_))}; "
                              f"got {list(zip(got[1], got[0]))}")
        return calls

    def forward(*call_args):
        calls = convert(call_args)
        out = plan.augmented(*[c.primal for c in calls], *[s for c in calls for s in c.shadows])
        for c in calls:
            c.copy_back()
        tape = Tape(int(out[-1]), plan)
        primal = out[0] if len(out) > 1 else None
        return (tape, primal if mode.with_primal else None, None)

    def reverse(*call_args):
        if not call_args or not isinstance(call_args[-1], Tape):
            raise PyzymeError("the reverse thunk takes the arguments, then the seed of an "
                              "Active result, then the tape from the forward thunk")
        tape = call_args[-1]
        rest = call_args[:-1]
        seeds = ()
        if plan.seeded:
            if len(rest) != len(types_) + 1:
                raise PyzymeError("the result is Active: pass its seed (e.g. 1.0) before the "
                                  "tape")
            seeds, rest = (rest[-1],), rest[:-1]
        elif len(rest) != len(types_):
            raise PyzymeError(f"expected {len(types_)} arguments and the tape; got "
                              f"{len(rest)} arguments")
        calls = convert(rest)
        address = tape._take(plan)
        out = plan.reverse(*[c.primal for c in calls], *[s for c in calls for s in c.shadows],
                           *seeds, address)
        for c in calls:
            c.copy_back()
        adjoints = iter(out if out is not None else ())
        return (tuple(next(adjoints) if c.kind == "active" else None for c in calls),)

    forward.plan = reverse.plan = plan
    return forward, reverse
