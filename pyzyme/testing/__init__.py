"""Test derivatives against finite differences, as EnzymeTestUtils does for Enzyme.jl.

:func:`test_forward` checks ``autodiff(Forward, ...)`` and :func:`test_reverse` checks the
split reverse-mode thunks of ``autodiff_thunk(ReverseSplitWithPrimal, ...)``;
:func:`check_grads` (:mod:`pyzyme.testing.grads`) checks a function's Jacobian, and Hessian,
by every mode along each input direction, as JAX's does. Both generate
random tangents, shadows and cotangents, compare every derivative with central finite
differences (:func:`central_fdm`, five points by default) and raise :class:`AssertionError`
naming the argument and showing both values where they disagree. They are what pyzyme's own
test suite uses for its rule tables, and they are meant for users writing custom rules.

Arguments are given as they would be to :func:`pyzyme.autodiff`, with three forms:

- a plain value: a float (or a tuple of floats) is ``Active`` in reverse mode and ``Duplicated``
  in forward mode; a float ndarray is ``Duplicated``; ints, bools and anything else are
  ``Const``;
- an annotation: ``Const(x)``, ``Active(x)``, ``Duplicated(x, dx)``, ... (the shadow ``dx`` is
  ignored: a random one is generated, as EnzymeTestUtils does);
- a tuple ``(value, ActivityClass)``, e.g. ``(x, Duplicated)``.

One argument list serves both functions: an ``Active`` argument is tested as ``Duplicated`` in
forward mode, and a ``Duplicated`` float (not an array) as ``Active`` in reverse mode.

Arrays the function mutates are outputs too: their final contents are compared with the primal
run, and their shadows carry output tangents (forward mode) or receive random cotangents of
their final values (reverse mode). Arguments are copied for every call; the caller's arrays are
never modified.

Examples
--------
>>> import math
>>> import numba
>>> import numpy as np
>>> from pyzyme import Active, Const, Duplicated
>>> @numba.njit
... def f(x, y, n):
...     return math.atan2(y, x) * n + x * y
>>> test_forward(f, Duplicated, 1.5, (0.5, Duplicated), 3)
>>> test_reverse(f, Active, 1.5, (0.5, Active), 3)

A wrong derivative is reported with the argument it belongs to. ``floor`` is piecewise constant
so pyzyme rightly gives it derivative 0; at an integer the finite difference straddles the jump
and sees a slope, so the two disagree there:

>>> @numba.njit
... def g(x, y):
...     return math.floor(x) * y
>>> test_reverse(g, Active, 2.0, 3.0)  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
AssertionError: test_reverse(g): the derivative with respect to argument 0 (x) does not match ...
  AD: 0.0
  FD: ...
  ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyzyme.api import annotations as A
from pyzyme.api.autodiff import autodiff
from pyzyme.api.modes import Forward, ReverseSplitWithPrimal
from pyzyme.api.thunks import autodiff_thunk
from pyzyme.testing.fdm import CentralFDM, central_fdm
from pyzyme.testing.grads import check_grads

__all__ = ["test_forward", "test_reverse", "check_grads", "central_fdm", "CentralFDM"]

_F64_TOL = (1e-6, 1e-8)
_F32_TOL = (1e-3, 1e-5)
_BATCH_WIDTH = 2  # lanes of a (value, BatchDuplicated) argument when no instance fixes it


# -- arguments ---------------------------------------------------------------------------------
def _is_float_scalar(v) -> bool:
    return isinstance(v, (float, np.floating))


def _is_real_scalar(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool,
                                                                                     np.bool_))


def _is_float_tuple(v) -> bool:
    return isinstance(v, tuple) and bool(v) and all(_is_real_scalar(e) for e in v)


def _is_float_array(v) -> bool:
    return isinstance(v, np.ndarray) and np.issubdtype(v.dtype, np.floating)


@dataclass
class _Arg:
    """One argument of the function under test: its value and how it is differentiated."""

    index: int
    label: str  # "argument 0 (x)"
    value: Any
    kind: str  # "const", "active" (reverse, immutable), "dup" (shadowed)

    @property
    def is_array(self) -> bool:
        return isinstance(self.value, np.ndarray)

    @property
    def differentiated(self) -> bool:
        return self.kind != "const"


def _labels(f, n: int) -> list[str]:
    """``argument i (name)`` for each position, the name from ``f``'s signature where it has
    one."""
    names: list[str | None] = [None] * n
    try:
        params = list(inspect.signature(getattr(f, "py_func", f)).parameters.values())
    except (TypeError, ValueError):
        params = []
    for i in range(n):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                  params[i].POSITIONAL_OR_KEYWORD):
            names[i] = params[i].name
        elif params and params[-1].kind is params[-1].VAR_POSITIONAL and i >= len(params) - 1:
            names[i] = f"{params[-1].name}[{i - len(params) + 1}]"
    return [f"argument {i}" + (f" ({name})" if name else "") for i, name in enumerate(names)]


def _split_arg(a) -> tuple[Any, type | None]:
    """(value, annotation class or None for a plain value)."""
    if isinstance(a, A.Annotation):
        return a.val, type(a)
    if (isinstance(a, tuple) and len(a) == 2 and isinstance(a[1], type)
            and issubclass(a[1], A.Annotation)):
        return a[0], a[1]
    return a, None


def _batch_width(args: Sequence, ret_activity) -> int:
    """The batch width of a forward test: 1, or the width of the BatchDuplicated arguments."""
    widths = {a.width for a in args if isinstance(a, A.BatchDuplicated)}
    if len(widths) > 1:
        raise ValueError(f"BatchDuplicated arguments of one test need the same width; got "
                         f"{sorted(widths)}")
    batched = bool(widths) or issubclass(ret_activity, A.BatchDuplicated) or any(
        _split_arg(a)[1] is not None and issubclass(_split_arg(a)[1], A.BatchDuplicated)
        for a in args)
    if not batched:
        return 1
    return widths.pop() if widths else _BATCH_WIDTH


def _parse(f, args: Sequence, forward: bool, name: str) -> list[_Arg]:
    labels = _labels(f, len(args))
    out = []
    for i, a in enumerate(args):
        value, cls = _split_arg(a)
        if cls is None:
            if _is_float_scalar(value) or isinstance(value, tuple) and value and all(
                    _is_float_scalar(e) for e in value):
                kind = "dup" if forward else "active"
            elif _is_float_array(value):
                kind = "dup"
            else:
                kind = "const"
        elif cls is A.Const:
            kind = "const"
        elif cls is A.Active or issubclass(cls, (A.Duplicated, A.BatchDuplicated)):
            if isinstance(value, np.ndarray):
                if cls is A.Active:
                    raise TypeError(f"{name}: {labels[i]} is an array: pass it as Duplicated, "
                                    f"not Active")
                if not _is_float_array(value):
                    raise TypeError(f"{name}: {labels[i]} is {cls.__name__} but its dtype is "
                                    f"{value.dtype}; only float arrays are differentiated")
                kind = "dup"
            elif _is_real_scalar(value) or _is_float_tuple(value):
                if not forward and issubclass(cls, A.BatchDuplicated):
                    raise TypeError(f"{name}: {labels[i]}: test_reverse takes one shadow per "
                                    f"argument; pass scalars as Active")
                kind = "dup" if forward else "active"
                if not _is_float_scalar(value) and not isinstance(value, tuple):
                    value = float(value)  # an int made Active is differentiated as a float
                elif isinstance(value, tuple):
                    value = _rebuild(value, [v if _is_float_scalar(v) else float(v)
                                             for v in value])
            else:
                raise TypeError(f"{name}: {labels[i]} is {cls.__name__} but holds a "
                                f"{type(value).__name__}; pyzyme.testing differentiates floats, "
                                f"tuples of floats and float arrays")
        else:
            raise TypeError(f"{name}: {labels[i]}: {cls!r} is not an activity")
        out.append(_Arg(i, labels[i], value, kind))
    return out


# -- values: copies, random directions, flattening ----------------------------------------------
def _rebuild(v: tuple, items) -> tuple:
    """A tuple of ``v``'s type (a namedtuple stays one) holding ``items``."""
    return type(v)(*items) if hasattr(v, "_fields") else tuple(items)


def _copy(v):
    """A copy of ``v`` with the same Numba type: arrays keep their dtype, layout (C, F or
    strided) and writability, so no call compiles a new specialization."""
    if isinstance(v, tuple):
        return _rebuild(v, map(_copy, v))
    if not isinstance(v, np.ndarray):
        return v
    if v.flags.c_contiguous:
        out = v.copy(order="C")
    elif v.flags.f_contiguous:
        out = v.copy(order="F")
    else:
        base = np.empty(tuple(2 * n for n in v.shape), dtype=v.dtype)
        out = base[tuple(slice(None, None, 2) for _ in v.shape)]
        out[...] = v
    if not v.flags.writeable:
        out.flags.writeable = False
    return out


def _scale(x) -> np.ndarray | float:
    """How far a unit direction moves ``x``: max(1, sqrt|x|), as the step of CentralFDM."""
    return np.maximum(1.0, np.sqrt(np.abs(np.asarray(x, dtype=np.float64))))


def _random_like(v, rng: np.random.Generator, scaled: bool = True):
    """A random direction shaped like ``v``: entries uniform in [-1, 1] (times the scale of
    ``v``'s entries when ``scaled``), arrays with ``v``'s dtype and layout."""
    if isinstance(v, np.ndarray):
        d = rng.uniform(-1.0, 1.0, v.shape)
        if scaled:
            d = d * _scale(v)
        out = _copy(v)
        if not out.flags.writeable:
            out = _copy(np.require(v, requirements="W"))
        out[...] = d.astype(v.dtype)
        return out
    if isinstance(v, tuple):
        return _rebuild(v, [_random_like(e, rng, scaled) for e in v])
    return float(rng.uniform(-1.0, 1.0) * (_scale(v) if scaled else 1.0))


def _zero_like(v):
    if isinstance(v, np.ndarray):
        out = _copy(np.require(v, requirements="W") if not v.flags.writeable else v)
        out[...] = 0
        return out
    if isinstance(v, tuple):
        return _rebuild(v, [_zero_like(e) for e in v])
    return 0.0


def _moved(v, d, t: float):
    """``v + t * d`` with ``v``'s type (float32 stays float32, arrays keep their layout)."""
    if d is None or t == 0.0:
        return _copy(v)
    if isinstance(v, np.ndarray):
        out = _copy(v)
        writable = out.flags.writeable
        out.flags.writeable = True
        out[...] = (v.astype(np.float64) + t * np.asarray(d, dtype=np.float64)).astype(v.dtype)
        out.flags.writeable = writable
        return out
    if isinstance(v, tuple):
        return _rebuild(v, [_moved(e, de, t) for e, de in zip(v, d)])
    moved = float(v) + t * float(d)
    return type(v)(moved) if isinstance(v, np.floating) else moved


def _flat(v) -> np.ndarray:
    """``v`` (None, a number, an array, a tuple of them) as a 1-D float64 array."""
    if v is None:
        return np.zeros(0)
    if isinstance(v, tuple):
        parts = [_flat(e) for e in v]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(v, dtype=np.float64).reshape(-1)


def _with_element(v, k: int, s: float):
    """A copy of ``v`` (float, tuple of floats or array) with flat element ``k`` set to ``s``."""
    if isinstance(v, np.ndarray):
        out = _copy(v)
        writable = out.flags.writeable
        out.flags.writeable = True
        out[np.unravel_index(k, v.shape)] = s
        out.flags.writeable = writable
        return out
    if isinstance(v, tuple):
        items = list(v)
        items[k] = type(v[k])(s) if isinstance(v[k], np.floating) else float(s)
        return _rebuild(v, items)
    return type(v)(s) if isinstance(v, np.floating) else float(s)


def _returns_float32(f, values) -> bool:
    """Whether ``f``, an ``@njit`` function already called on ``values``, returns float32
    values (its result then carries float32 precision whatever its arguments are)."""
    try:
        import numba

        cres = f.overloads.get(tuple(numba.typeof(v) for v in values))
    except Exception:  # noqa: BLE001 - not a dispatcher, or an untypeable value: no evidence
        return False
    return cres is not None and "float32" in str(cres.signature.return_type)


def _has_float32(values) -> bool:
    for v in values:
        if isinstance(v, tuple):
            if _has_float32(v):
                return True
        elif isinstance(v, (np.ndarray, np.floating)) and v.dtype == np.float32:
            return True
    return False


# -- comparison --------------------------------------------------------------------------------
def _show(v: np.ndarray) -> str:
    if v.size == 1:
        return repr(float(v[0]))
    return np.array2string(v, precision=12, max_line_width=100, threshold=60)


def _check(name: str, what: str, ad, fd, rtol: float, atol: float, left: str = "AD",
           right: str = "FD", against: str = "finite differences") -> None:
    """Raise AssertionError unless ``ad`` and ``fd`` agree: ``|ad - fd| <= atol * s + rtol *
    |fd|`` elementwise, with ``s = max(1, max |fd|)``; NaNs must match."""
    a, b = _flat(ad), _flat(fd)
    if a.shape != b.shape:
        raise AssertionError(f"{name}: {what} has {a.size} entries from AD but {b.size} from "
                             f"{against}\n  {left}: {_show(a)}\n  {right}: {_show(b)}")
    finite = np.isfinite(b)
    scale = max(1.0, float(np.max(np.abs(b[finite])))) if finite.any() else 1.0
    with np.errstate(invalid="ignore"):
        ok = (np.abs(a - b) <= atol * scale + rtol * np.abs(b)) | (a == b)
    ok |= np.isnan(a) & np.isnan(b)
    if not ok.all():
        with np.errstate(invalid="ignore"):
            err = float(np.nanmax(np.abs(a - b)))
        raise AssertionError(
            f"{name}: {what} does not match {against}\n  {left}: {_show(a)}\n  {right}: "
            f"{_show(b)}\n  max |{left} - {right}| = {err:.3g} (rtol={rtol:g}, atol={atol:g}); "
            f"entries off: {np.flatnonzero(~ok)[:10].tolist()}")


class _Outputs:
    """Runs the function on fresh copies of arguments: its return value and the final contents
    of the shadowed arrays, as one flat vector and as labelled pieces."""

    def __init__(self, f, args: list[_Arg]) -> None:
        self.f = f
        self.args = args
        self.arrays = [a for a in args if a.kind == "dup" and a.is_array]

    def run(self, values: list) -> tuple[Any, list]:
        """(return value, final contents of each shadowed array) of one call on ``values``
        (which it mutates)."""
        ret = self.f(*values)
        return ret, [values[a.index] for a in self.arrays]

    def vector(self, values: list, with_return: bool) -> np.ndarray:
        ret, finals = self.run(values)
        parts = ([_flat(ret)] if with_return else []) + [_flat(x) for x in finals]
        return np.concatenate(parts) if parts else np.zeros(0)


# -- test_forward ------------------------------------------------------------------------------
def _tolerances(rtol, atol, float32: bool) -> tuple[float, float]:
    dr, da = _F32_TOL if float32 else _F64_TOL
    return (dr if rtol is None else rtol), (da if atol is None else atol)


def _rng(rng) -> np.random.Generator:
    if rng is None:
        return np.random.default_rng(0)
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def _check_ret_activity(ret_activity, name: str) -> None:
    if not (isinstance(ret_activity, type) and issubclass(ret_activity, A.Annotation)):
        raise TypeError(f"{name}: the second argument is the activity of the return value (an "
                        f"annotation class such as Active, Duplicated or Const), got "
                        f"{ret_activity!r}")


def _fname(f) -> str:
    return getattr(getattr(f, "py_func", f), "__name__", repr(f))


def _reference(f, parsed: list[_Arg], rtol, atol, fdm):
    """A plain call of ``f`` on copies of the arguments, and the tolerances and finite
    difference method to judge derivatives by (float32 tolerances when float32 is involved):
    ``(outputs, result, final arrays, rtol, atol, fdm)``."""
    outputs = _Outputs(f, parsed)
    ref_ret, ref_finals = outputs.run([_copy(a.value) for a in parsed])
    values = [a.value for a in parsed]
    float32 = (_has_float32(values) or _has_float32([ref_ret, *ref_finals])
               or _returns_float32(f, values))
    rtol, atol = _tolerances(rtol, atol, float32)
    if fdm is None:
        fdm = central_fdm(5, eps=float(np.finfo(np.float32 if float32 else np.float64).eps))
    return outputs, ref_ret, ref_finals, rtol, atol, fdm


def test_forward(f: Callable, ret_activity: type, *args, rtol: float | None = None,
                 atol: float | None = None, fdm: Callable | None = None,
                 rng: np.random.Generator | int | None = None) -> None:
    """Test ``autodiff(Forward, f, ret_activity, ...)`` against finite differences.

    The function is differentiated along random tangents: first along each differentiated
    argument alone (so a failure names the argument), then along all of them together. The
    tangent of the return value and of every mutated ``Duplicated`` array (read from its shadow
    after the call) is compared with the finite-difference derivative of the same outputs
    along the same direction; the primal result and the arrays' final contents are compared
    with a plain call of ``f``.

    Parameters
    ----------
    f
        An ``@njit`` function or a plain Python function (called as given for the reference
        values, and compiled by pyzyme for the derivative).
    ret_activity
        The activity of the result, as :func:`pyzyme.autodiff` takes it: ``Duplicated``,
        ``DuplicatedNoNeed``, ``Const``, ``BatchDuplicated`` or ``BatchDuplicatedNoNeed``.
    *args
        Each a plain value, an annotation (``Duplicated(x, dx)``: ``dx`` is replaced by a
        random tangent) or a ``(value, ActivityClass)`` tuple; see the module's notes.
        ``Active`` arguments are tested as ``Duplicated``. With ``BatchDuplicated`` anywhere,
        every differentiated argument gets that many random tangents (2 where only classes
        are given).
    rtol, atol
        Tolerances: ``|AD - FD| <= atol * max(1, max|FD|) + rtol * |FD|``. By default
        ``rtol=1e-6, atol=1e-8``, or ``1e-3, 1e-5`` where float32 values are involved.
    fdm
        The finite-difference method, a callable ``fdm(g, x) -> g'(x)`` where ``g`` maps a
        float to a 1-D float64 array (here the outputs at ``args + t * tangent``, called
        with ``x = 0.0``). Default: :func:`central_fdm` with 5 points (with float32
        precision where float32 values are involved).
    rng
        A ``numpy.random.Generator`` or a seed for the random tangents (default: seed 0).

    Raises
    ------
    AssertionError
        If a primal value or a tangent differs from its reference; the message names the
        argument (position and parameter name) and shows both values.

    Notes
    -----
    Tangent entries are uniform in [-1, 1], scaled by ``max(1, sqrt|x|)`` like the default
    finite-difference step, so large values are moved in proportion.

    Examples
    --------
    >>> import numba
    >>> import numpy as np
    >>> from pyzyme import BatchDuplicated, Const, Duplicated, DuplicatedNoNeed
    >>> @numba.njit
    ... def scale(out, x, a):
    ...     for i in range(x.shape[0]):
    ...         out[i] = a * np.sin(x[i])
    >>> x = np.linspace(0.1, 1.0, 4)
    >>> test_forward(scale, Const, np.zeros(4), x, 2.5)
    >>> test_forward(scale, Const, (np.zeros(4), BatchDuplicated), x, (2.5, Const))
    >>> test_forward(lambda x: x * x, DuplicatedNoNeed, 3.0)
    """
    name = f"test_forward({_fname(f)})"
    _check_ret_activity(ret_activity, name)
    width = _batch_width(args, ret_activity)
    parsed = _parse(f, args, forward=True, name=name)
    gen = _rng(rng)
    outputs, ref_ret, ref_finals, rtol, atol, fdm = _reference(f, parsed, rtol, atol, fdm)
    values = [a.value for a in parsed]

    diff = [a for a in parsed if a.differentiated]
    has_tangent = ret_activity is not A.Const
    with_primal = ret_activity.needs_primal and ret_activity is not A.Const
    sizes = ([_flat(ref_ret).size] if has_tangent else []) + [_flat(x).size for x in ref_finals]
    pieces = ((["the tangent of the return value"] if has_tangent else [])
              + [f"the tangent of {a.label} after the call" for a in outputs.arrays])

    experiments = [[a] for a in diff] if len(diff) > 1 else []
    experiments.append(diff)
    for group in experiments:
        along = ("all arguments together" if len(group) > 1 and len(diff) > 1
                 else group[0].label if group else "no argument")
        lanes = [{a.index: _random_like(a.value, gen) for a in group} for _ in range(width)]
        annotated = []
        for a in parsed:
            if not a.differentiated:
                annotated.append(A.Const(_copy(a.value)))
                continue
            shadows = [lane.get(a.index) for lane in lanes]
            shadows = [_copy(s) if s is not None else _zero_like(a.value) for s in shadows]
            annotated.append(A.BatchDuplicated(_copy(a.value), shadows) if width > 1
                             else A.Duplicated(_copy(a.value), shadows[0]))
        result = autodiff(Forward, f, ret_activity, *annotated)
        primal, tangents = _forward_result(ret_activity, result, width, name)
        if with_primal:
            _check(name, "the primal return value", primal, ref_ret, rtol, atol,
                   left="autodiff", right="f(*args)", against="a plain call")
        for a, ref in zip(outputs.arrays, ref_finals):
            _check(name, f"{a.label} after the call", annotated[a.index].val, ref, rtol, atol,
                   left="autodiff", right="f(*args)", against="a plain call")
        for k, lane in enumerate(lanes):
            def g(t, lane=lane):
                return outputs.vector([_moved(v, lane.get(i), t) for i, v in enumerate(values)],
                                      has_tangent)

            fd = _flat(fdm(g, 0.0))
            tangent = tangents[k] if has_tangent and tangents[k] is not None else np.zeros(
                sizes[0] if has_tangent else 0)
            ad_parts = ([tangent] if has_tangent else []) + [
                annotated[a.index].shadows[k] for a in outputs.arrays]
            offsets = np.cumsum([0, *sizes])
            if fd.size != offsets[-1]:
                raise AssertionError(f"{name}: the finite-difference method returned {fd.size} "
                                     f"values for {offsets[-1]} outputs")
            lane_note = f" (batch lane {k})" if width > 1 else ""
            for piece, ad, lo, hi in zip(pieces, ad_parts, offsets, offsets[1:]):
                _check(name, f"{piece} along {along}{lane_note}", ad, fd[lo:hi], rtol, atol)


test_forward.__test__ = False  # a helper, not a test, wherever it is imported


def _forward_result(ret_activity, result: tuple, width: int, name: str) -> tuple[Any, list]:
    """(primal or None, [tangent of each lane]) from what ``autodiff(Forward, ...)`` gave."""
    if ret_activity is A.Const:
        return None, []
    batch = issubclass(ret_activity, A.BatchDuplicated)
    if not result or (ret_activity.needs_primal and len(result) == 1):
        # No tangent came back: the result is not a float (an int, None), so it has none.
        return (result[0] if result else None), [None] * width
    if ret_activity.needs_primal:
        primal, derivative = result
    else:
        primal, (derivative,) = None, result
    tangents = list(derivative) if batch else [derivative]
    if len(tangents) != width:
        raise AssertionError(f"{name}: autodiff returned {len(tangents)} tangents for a batch "
                             f"of width {width}")
    return primal, tangents


# -- test_reverse ------------------------------------------------------------------------------
def test_reverse(f: Callable, ret_activity: type, *args, rtol: float | None = None,
                 atol: float | None = None, fdm: Callable | None = None,
                 rng: np.random.Generator | int | None = None) -> None:
    """Test the split reverse-mode thunks of ``f`` against finite differences.

    Builds ``fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, ret_activity, ...)``, runs
    ``fwd`` (checking its primal result and the arrays' final contents against a plain call of
    ``f``), gives the result a random seed (when ``Active``) and each ``Duplicated`` array a
    random cotangent of its final contents, runs ``rev``, and compares the derivative of each
    argument, element by element, with the finite-difference gradient of
    ``<seed, f(args)> + sum <cotangent, final array>``.

    Parameters
    ----------
    f
        An ``@njit`` function or a plain Python function.
    ret_activity
        ``Active`` (a float or tuple-of-floats result) or ``Const``.
    *args
        Each a plain value, an annotation (``Duplicated(x, dx)``: ``dx`` is replaced) or a
        ``(value, ActivityClass)`` tuple; see the module's notes. A ``Duplicated`` float is
        tested as ``Active``.
    rtol, atol
        Tolerances: ``|AD - FD| <= atol * max(1, max|FD|) + rtol * |FD|``. By default
        ``rtol=1e-6, atol=1e-8``, or ``1e-3, 1e-5`` where float32 values are involved.
    fdm
        The finite-difference method, a callable ``fdm(g, x) -> g'(x)``; here ``g`` maps the
        value of one input element to the weighted outputs and ``x`` is that element's value.
        Default: :func:`central_fdm` with 5 points.
    rng
        A ``numpy.random.Generator`` or a seed for the random seeds and cotangents (default:
        seed 0).

    Raises
    ------
    AssertionError
        If the primal or a derivative differs from its reference; the message names the
        argument (position and parameter name) and shows both values.

    Notes
    -----
    The finite-difference gradient takes ``points - 1`` calls of ``f`` per differentiated
    input element: keep test arrays small.

    Examples
    --------
    >>> import numba
    >>> import numpy as np
    >>> from pyzyme import Active, Const, Duplicated
    >>> @numba.njit
    ... def normalize(x, eps):
    ...     s = eps
    ...     for v in x:
    ...         s += v * v
    ...     r = np.sqrt(s)
    ...     for i in range(x.shape[0]):
    ...         x[i] /= r
    ...     return r
    >>> test_reverse(normalize, Active, np.array([3.0, 4.0, 1.0]), 1e-3)
    >>> test_reverse(normalize, Const, (np.array([3.0, 4.0]), Duplicated), (1e-3, Const))
    """
    name = f"test_reverse({_fname(f)})"
    _check_ret_activity(ret_activity, name)
    parsed = _parse(f, args, forward=False, name=name)
    gen = _rng(rng)
    outputs, ref_ret, ref_finals, rtol, atol, fdm = _reference(f, parsed, rtol, atol, fdm)
    values = [a.value for a in parsed]

    seeded = ret_activity is A.Active
    if seeded and not (_is_real_scalar(ref_ret) or _is_float_tuple(ref_ret)):
        raise TypeError(f"{name}: an Active result must be a float or a tuple of floats; f "
                        f"returned a {type(ref_ret).__name__}")
    seed = _random_like(ref_ret, gen, scaled=False) if seeded else None
    cotangents = {a.index: _random_like(ref, gen, scaled=False)
                  for a, ref in zip(outputs.arrays, ref_finals)}

    annotated = []
    for a in parsed:
        if a.kind == "const":
            annotated.append(A.Const(_copy(a.value)))
        elif a.kind == "active":
            annotated.append(A.Active(_copy(a.value)))
        else:
            annotated.append(A.Duplicated(_copy(a.value), _copy(cotangents[a.index])))
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, ret_activity, *annotated)
    tape, primal, _ = fwd(*annotated)
    if ref_ret is not None:
        _check(name, "the primal return value of the forward thunk", primal, ref_ret, rtol,
               atol, left="thunk", right="f(*args)", against="a plain call")
    for a, ref in zip(outputs.arrays, ref_finals):
        _check(name, f"{a.label} after the forward thunk", annotated[a.index].val, ref, rtol,
               atol, left="thunk", right="f(*args)", against="a plain call")
        # The shadow holds the cotangent of the array's final contents when the reverse pass
        # starts (set again: what the forward pass does to shadows is its own business).
        annotated[a.index].dval[...] = cotangents[a.index]
    rest = (seed, tape) if seeded else (tape,)
    (derivs,) = rev(*annotated, *rest)

    weights = ([_flat(seed)] if seeded else []) + [_flat(cotangents[a.index])
                                                  for a in outputs.arrays]
    weight = np.concatenate(weights) if weights else np.zeros(0)

    def objective(vals: list) -> float:
        return float(weight @ outputs.vector(vals, seeded))

    for a in parsed:
        if not a.differentiated:
            continue
        ad = derivs[a.index] if a.kind == "active" else annotated[a.index].dval
        flat_value = _flat(a.value)
        fd = np.empty(flat_value.size)
        for k, x0 in enumerate(flat_value):
            def g(s, a=a, k=k):
                return objective([_with_element(v, k, s) if i == a.index else _copy(v)
                                  for i, v in enumerate(values)])
            fd[k] = float(np.asarray(fdm(g, float(x0))).reshape(()))
        _check(name, f"the derivative with respect to {a.label}", ad, fd, rtol, atol)


test_reverse.__test__ = False  # a helper, not a test, wherever it is imported
