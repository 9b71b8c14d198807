"""The thunks of :func:`~pyzyme.autodiff_thunk`, called from inside ``@njit`` code.

Design
------
Inside ``@njit`` code a thunk is called exactly as from Python, with pyzyme's own annotations,
which exist in nopython mode (:mod:`pyzyme.api.njit.annotations`: a Numba type per annotation
class and value types, built by the same call, lowered as a struct). A bare argument is
``Const``, as in Python. Each thunk types as an ``@njit`` function
(:func:`~pyzyme.api.njit.overload.overloaded_njit`) whose implementation is generated for the
argument types of the call: it unwraps the annotations, checks each array shadow against its
primal at run time (same shape and strides, no shared memory), and calls the compiled
derivative (:mod:`pyzyme.frontends.numba.derive.split` for the split pair, the forward plan
of :func:`~pyzyme.autodiff` for ``Forward``/``ForwardWithPrimal``). Nothing of Python runs per call.

The split thunks take the argument types and activities they were made for (a mismatch is a
:class:`~pyzyme.PyzymeError` when the ``@njit`` code compiles, naming both); the forward thunk,
like its Python self, takes any. The tape inside ``@njit`` code is an NRT-managed object
(:mod:`pyzyme.api.njit.tape`): dropped unused, it is freed; the reverse thunk consumes it;
reused, it raises :class:`~pyzyme.PyzymeError`; passed to another plan's reverse thunk, it does
not compile. A tape may also move between Python and ``@njit`` code (a forward sweep in one,
the reverse sweep in the other).

Examples
--------
API.md's split example, inside ``@njit`` code (``A[0]`` is overwritten between the sweeps):

>>> import numba
>>> import numpy as np
>>> from pyzyme import Active, Duplicated, ReverseSplitWithPrimal, autodiff_thunk
>>> def f(A, v):
...     res = A[0] * v
...     A[0] = 0.0
...     return res
>>> A, dA = np.array([2.2]), np.zeros(1)
>>> fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated(A, dA), Active(3.3))
>>> @numba.njit
... def split(A, dA, v):
...     tape, result, _ = fwd(Duplicated(A, dA), Active(v))
...     return result, rev(Duplicated(A, dA), Active(v), 1.0, tape)[0]
>>> result, (_, dv) = split(A, dA, 3.3)
>>> round(result, 12), round(dv, 12), dA
(7.26, 2.2, array([3.3]))
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import types

from pyzyme.analysis.activity import Activity
from pyzyme.api import annotations as A
from pyzyme.api.args import refusals as R
from pyzyme.api.njit.annotations import AnnotationType, annotation_of
from pyzyme.api.njit.overlap import any_overlap, overlap
from pyzyme.api.njit.tape import TapeType, tape_intrinsics
from pyzyme.api.plans import forward_plan
from pyzyme.errors import PyzymeError, UnsupportedError
from pyzyme.frontends.numba.abi import argument_refusal
from pyzyme.frontends.numba.bridge import njit_target

__all__ = ["forward_implementation", "split_forward_implementation",
           "split_reverse_implementation", "checks_apart", "SHARED_AFTER_APART"]


@numba.njit
def _check_shadow(x, dx):
    if x.shape != dx.shape or x.strides != dx.strides:
        raise PyzymeError("a shadow array needs the shape and strides of its primal; pass "
                          "np.zeros_like(x)")
    if overlap(x, dx):
        raise PyzymeError("a shadow shares memory with its primal array: derivatives would "
                          "overwrite the values they are derivatives of; pass a separate array")


class _Arg:
    """One argument of a thunk call in ``@njit`` code: what the derivative takes of it."""

    def __init__(self, position: int, argtype: types.Type, reverse: bool) -> None:
        name, where = f"a{position}", f"argument {position}"
        cls, val, dval = annotation_of(argtype)
        refused = argument_refusal(val, where)
        if refused is not None:
            raise UnsupportedError(refused[0], hint=refused[1])
        self.checks: list[str] = []
        self.shadow: str | None = None
        value = f"{name}.val" if isinstance(argtype, AnnotationType) else name
        if cls is A.Const:
            self.kind, self.type, self.primal = Activity.CONST, val, value
        elif cls is A.Active:
            if not reverse:
                raise UnsupportedError(f"Active({val}) is for reverse mode; in forward mode "
                                       f"pass Duplicated(value, tangent)")
            self.kind = Activity.ACTIVE
            self.type, self.primal = _as_float(val, value, keep_float32=True)
            if self.type is None:
                raise R.active_not_immutable(where, str(val), isinstance(val, types.Array))
        else:
            self.kind = Activity.DUPLICATED
            if isinstance(val, types.Array):
                if isinstance(dval, types.Array) and not dval.mutable:
                    # Numba types it apart; the derivative, compiled for the primal's type,
                    # writes shadows (in forward mode, those of arguments it writes).
                    raise R.read_only_shadow(where, "njit")
                if dval != val:
                    raise UnsupportedError(f"{cls.__name__}({val}, {dval}): the shadow of an "
                                           f"array needs the primal's type")
                self.type, self.primal, self.shadow = val, value, f"{name}.dval"
                self.checks.append(f"_check_shadow({value}, {name}.dval)")
            elif reverse:
                raise UnsupportedError(f"{cls.__name__}({val}) in reverse mode: a float cannot "
                                       f"hold its adjoint; pass it as Active")
            else:
                self.type, self.primal = _as_float(val, value, keep_float32=False)
                shadow_type, self.shadow = _as_float(dval, f"{name}.dval", keep_float32=False)
                if self.type is None or shadow_type != self.type:
                    raise UnsupportedError(
                        f"{cls.__name__}({val}, {dval}) is not supported in forward mode; "
                        f"pass floats, tuples of floats or arrays, each with a shadow like it")


def _as_float(t: types.Type, expr: str, keep_float32: bool):
    """``(type, expression)`` of a real, complex or tuple of reals as the derivative takes it
    (floats; float32 kept in reverse mode, as in Python calls), or ``(None, None)``."""
    real = (types.Integer, types.Float)
    if isinstance(t, real) and not isinstance(t, types.Boolean):
        if keep_float32 and t == types.float32:
            return t, expr
        return types.float64, expr if t == types.float64 else f"np.float64({expr})"
    if isinstance(t, types.Complex):
        return t, expr  # two floats to the derivative, as in Python calls
    if isinstance(t, types.BaseTuple) and len(t) and all(isinstance(e, real) for e in t):
        items = "".join(f"np.float64({expr}[{i}]), " for i in range(len(t)))
        return types.UniTuple(types.float64, len(t)), f"({items})"
    return None, None


def _arguments(argtypes, reverse: bool) -> list[_Arg]:
    return [_Arg(i, t, reverse) for i, t in enumerate(argtypes)]


def _compile(lines: list[str], scope: dict):
    scope = {"np": np, "_check_shadow": _check_shadow, "PyzymeError": PyzymeError, **scope}
    exec("\n".join(lines) + "\n", scope)
    return scope["impl"]


def _header(args: list[_Arg], extra=()) -> list[str]:
    lines = [f"def impl({', '.join([f'a{i}' for i in range(len(args))] + list(extra))}):"]
    return lines + [f"    {c}" for a in args for c in a.checks]


# -- forward mode -------------------------------------------------------------------------------
def forward_implementation(dispatcher, mode, ret_activity, argtypes):
    """The implementation of the ``Forward``/``ForwardWithPrimal`` thunk of ``dispatcher`` for
    ``argtypes``; it returns what :func:`~pyzyme.autodiff` returns."""
    args = _arguments(argtypes, reverse=False)
    if ret_activity is None:
        ret_activity = A.Duplicated
    if ret_activity not in (A.Const, A.Duplicated, A.DuplicatedNoNeed):
        raise UnsupportedError(f"{ret_activity.__name__} is not a return activity of a forward "
                               f"thunk inside @njit code; use Duplicated, DuplicatedNoNeed or "
                               f"Const")
    plan = forward_plan(dispatcher, [a.type for a in args],
                        [a.kind is Activity.DUPLICATED for a in args], ret_activity, 1)
    call = ", ".join([a.primal for a in args] + [a.shadow for a in args if a.shadow])
    lines = _header(args) + [f"    r = fwd({call})"]
    primal, tangent = ("r[0]", "r[1]") if plan.returns_tangent else ("r", None)
    if ret_activity is A.Const or tangent is None:
        result = f"({primal},)" if mode.with_primal else "()"
    elif ret_activity.needs_primal or mode.with_primal:
        result = f"({primal}, {tangent})"
    else:
        result = f"({tangent},)"
    return _compile(lines + [f"    return {result}"], {"fwd": njit_target(plan.function)})


# -- split reverse mode -------------------------------------------------------------------------
def _split_arguments(plan, argtypes) -> list[_Arg]:
    args = _arguments(argtypes, reverse=True)
    got = [(a.kind, a.type) for a in args]
    want = list(zip(plan.kinds, plan.primal_types))
    if got != want:
        raise PyzymeError(f"the thunks were made for arguments "
                          f"{[(k.value, t) for k, t in want]}; got "
                          f"{[(k.value, t) for k, t in got]}")
    return args


def split_forward_implementation(plan, tape: TapeType, with_primal: bool, argtypes,
                                 apart: bool = False):
    """The forward thunk's implementation: ``(tape, primal or None, None)``. ``apart``:
    ``plan`` takes array data as ``noalias`` (thunks made on arrays apart): the call checks
    that no two arrays overlap."""
    args = _split_arguments(plan, argtypes)
    new, _, _ = tape_intrinsics(tape)
    call = ", ".join([a.primal for a in args] + [a.shadow for a in args if a.shadow])
    returns_primal = plan.restype != types.none
    primal = "r[0]" if with_primal and returns_primal else "None"
    lines = _header(args) + (_apart_lines(args, APART_IN_NJIT) if apart else []) + [
        f"    r = aug({call})",
        f"    return (new_tape(r[{1 if returns_primal else 0}]), {primal}, None)"]
    return _compile(lines, {"aug": njit_target(plan.augmented), "new_tape": new,
                            "overlap": overlap})


#: A tape the forward thunk made on arrays apart (its build takes array data as ``noalias``),
#: handed to a reverse call whose arrays overlap.
SHARED_AFTER_APART = ("the forward thunk ran on arrays that share no memory, and its tape is "
                      "for such arrays; two arrays of this reverse call share memory: pass the "
                      "reverse thunk the arrays (and shadows) the forward thunk got")


#: Thunks made on example arrays apart, called inside ``@njit`` code on arrays that overlap.
APART_IN_NJIT = ("these thunks were made on example arrays that share no memory, and inside "
                 "@njit code they run the build for such arrays; two arrays of this call "
                 "share memory: make the thunks with example arrays that share memory as these "
                 "do")


def split_reverse_implementation(plan, tape: TapeType, argtypes, apart: bool = False):
    """The reverse thunk's implementation: ``((adjoint of each Active argument, None for the
    others),)``, consuming the tape. ``apart``: ``plan`` takes array data as ``noalias`` (a
    tape made from Python on arrays apart): the call checks that no two arrays overlap."""
    n = len(plan.kinds)
    last = argtypes[-1]
    if not isinstance(last, TapeType):
        raise PyzymeError(f"the reverse thunk's last argument is the tape from the forward "
                          f"thunk; got {last}")
    if last.plan is not plan:
        raise PyzymeError(f"this tape ({last}) comes from another function's (or other "
                          f"argument types') forward thunk; pass it to the reverse thunk made "
                          f"with it")
    if plan.seeded and not isinstance(argtypes[n], (types.Number, types.BaseTuple)):
        raise PyzymeError(f"the result is Active: pass its seed (a {plan.restype}) before the "
                          f"tape; got {argtypes[n]}")
    args = _split_arguments(plan, argtypes[:n])
    _, live, take = tape_intrinsics(tape)
    call = [a.primal for a in args] + [a.shadow for a in args if a.shadow]
    call += ["seed"] if plan.seeded else []
    lines = _header(args, ["seed", "tape"] if plan.seeded else ["tape"])
    if apart:
        lines += _apart_lines(args, SHARED_AFTER_APART)
    lines += [
        "    if not live(tape):",
        "        raise PyzymeError('this tape was already used by a reverse pass; run the "
        "forward thunk again for a new one')",
        f"    r = rev({', '.join(call + ['take(tape)'])})"]
    adjoints, k = [], 0
    for a in args:
        if a.kind is Activity.ACTIVE:
            adjoints.append(f"r[{k}]")
            k += 1
        else:
            adjoints.append("None")
    lines.append(f"    return (({''.join(x + ', ' for x in adjoints)}),)")
    return _compile(lines, {"rev": njit_target(plan.reverse), "live": live, "take": take,
                            "overlap": overlap})


def _checkable(a: _Arg) -> bool:
    """Whether the arrays argument ``a`` passes can be checked for overlap here: an array, or
    no array at all (a number, a tuple of numbers)."""
    t = a.type
    return isinstance(t, (types.Array, types.Number)) or isinstance(t, types.BaseTuple) and all(
        isinstance(e, types.Number) for e in t)


def checks_apart(plan, argtypes) -> bool:
    """Whether a call with ``argtypes`` can check at run time that its arrays are apart (none
    inside a tuple, record or other container), as the build of ``plan`` for arrays apart
    needs."""
    return all(_checkable(a) for a in _split_arguments(plan, argtypes[:len(plan.kinds)]))


def _apart_lines(args: list[_Arg], message: str) -> list[str]:
    """Lines raising ``message`` where two arrays of the call overlap, for a derivative that
    takes array data as ``noalias`` (arrays inside tuples or records cannot be checked here:
    refused)."""
    arrays = []
    for k, a in enumerate(args):
        if isinstance(a.type, types.Array):
            arrays += [a.primal] + ([a.shadow] if a.shadow else [])
        elif not _checkable(a):
            raise PyzymeError(
                f"these thunks were made on example arrays that share no memory, a build "
                f"that needs arrays apart; inside @njit code that can be checked only for "
                f"array arguments, and argument {k} is {a.type}: call the thunks from Python, "
                f"or make them with arrays that share memory")
    if len(arrays) < 2:
        return []
    return [f"    if {any_overlap(arrays)}:", f"        raise PyzymeError({message!r})"]
