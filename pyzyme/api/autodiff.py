"""``autodiff``: Enzyme.jl's entry point, for Numba functions.

Compiled derivatives are kept per (function, argument types, activities, mode, width, options)
in one process-wide :class:`DerivativeCache`, so the second call of a derivative costs what a call
of an ``@njit`` function costs. Reverse and forward derivatives of a function made with
``@njit(cache=True)`` are also kept on disk beside Numba's cache of it
(:mod:`pyzyme.runtime.disk_cache`, keyed as :mod:`pyzyme.frontends.numba.persist` explains), so
another process loads their object code instead of capturing, differentiating and compiling.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence
from typing import Any

import numba
import numpy as np
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

from pyzyme import options
from pyzyme.api import annotations as A
from pyzyme.api.args import complex as C
from pyzyme.api.args import refusals as R
from pyzyme.api.args import structured as S
from pyzyme.api.args.call_shape import CallShape, call_shape, share_memory
from pyzyme.api.modes import Mode
from pyzyme.api.args.typeof import argument_type
from pyzyme.errors import PyzymeError, UnsupportedError
from pyzyme.rules.custom import REGISTRY
from pyzyme.runtime.disk_cache import DiskCache

__all__ = ["autodiff", "DerivativeCache"]


class DerivativeCache:
    """Compiled derivatives by key; one instance serves the process (MCJIT keeps all code
    for the life of the process anyway, so there is nothing to evict).

    Every key gets the current :class:`~pyzyme.options.Options` added, and the build runs with
    that snapshot pinned (:func:`pyzyme.options.using`), so a derivative built under one
    setting of ``set_runtime_activity`` is never returned under the other.
    """

    def __init__(self) -> None:
        self._plans: dict[tuple, Any] = {}
        self._calls: dict[tuple, Any] = {}   # calls of plain arguments, ready to make
        self.disk = DiskCache()

    def call(self, key: tuple):
        """The call remembered under ``key`` (see :func:`autodiff`) for the current options
        and rules, or None."""
        return self._calls.get((*key, options.current(), REGISTRY.generation))

    def remember_call(self, key: tuple, call) -> None:
        self._calls[(*key, options.current(), REGISTRY.generation)] = call

    def get(self, key: tuple, build):
        # A derivative is stale once a rule is registered after it was built, and is another
        # derivative under other options (runtime activity).
        opts = options.current()
        key = (*key, opts, REGISTRY.generation)
        plan = self._plans.get(key)
        if plan is None:
            # Builds are serialized by Numba's global compiler lock, not by a lock of
            # pyzyme's. Every build waits for Numba's lock (capture compiles the primal,
            # compile_module loads the derivative), and Numba holds it while it types a call
            # of jacfwd(f), or of grad(f) in @njit code, whose typer asks this cache for a
            # derivative: a lock of pyzyme's would be taken before Numba's by one thread and
            # after it by another, and both would wait for good. Building outside any lock
            # and keeping the first result would be no faster (a build holds Numba's lock for
            # most of its time). Numba's lock is reentrant, so a typer reached from inside a
            # build (a function calling grad(g) captured for its own derivative) goes on.
            with global_compiler_lock:
                plan = self._plans.get(key)
                if plan is None:
                    with options.using(opts):
                        plan = self._plans[key] = build()
        return plan

    def __len__(self) -> int:
        return len(self._plans)


CACHE = DerivativeCache()
_RETURN_ACTIVITIES = (A.Const, A.Active, A.Duplicated, A.DuplicatedNoNeed, A.BatchDuplicated,
                      A.BatchDuplicatedNoNeed)


def autodiff(mode: Mode, f, *args) -> tuple:
    """Differentiate ``f`` at the annotated arguments ``args``.

    ``autodiff(mode, f, ret_activity, *args)``: ``ret_activity`` is an annotation class and may
    be left out (a float result is then ``Duplicated`` in forward mode).

    Complex numbers: in forward mode ``Duplicated(z, dz)`` gives the derivative along the
    complex direction ``dz``. In reverse mode a real result's derivative with respect to
    ``Active(z)`` is ``df/dRe(z) + i df/dIm(z)`` (Enzyme.jl's and PyTorch's convention; JAX's
    ``grad`` gives its conjugate), accumulated the same way into complex ``Duplicated`` arrays.
    A complex result is refused by ``Reverse``; ``ReverseHolomorphic`` returns ``f'(z)`` for a
    holomorphic ``f``.

    Examples
    --------
    >>> from pyzyme import Forward, Duplicated, DuplicatedNoNeed
    >>> autodiff(Forward, lambda x: x * x, Duplicated, Duplicated(3.14, 1.0))
    (9.8596, 6.28)
    >>> autodiff(Forward, lambda x: x * x, DuplicatedNoNeed, Duplicated(3.14, 1.0))
    (6.28,)
    >>> from pyzyme import Active, Reverse, ReverseHolomorphic
    >>> autodiff(Reverse, lambda z: abs(z) ** 2, Active(1 + 2j))
    (((2+4j),),)
    >>> autodiff(ReverseHolomorphic, lambda z: z * z, Active(1 + 2j))
    (((2+4j),),)
    """
    if not isinstance(mode, Mode):
        raise TypeError(f"autodiff's first argument must be a mode (Forward, Reverse, ...), "
                        f"got {mode!r}")
    ret_activity = None
    if args and isinstance(args[0], type) and issubclass(args[0], A.Annotation):
        ret_activity, args = args[0], args[1:]
        if ret_activity not in _RETURN_ACTIVITIES:
            raise TypeError(f"{ret_activity.__name__} is not a return activity")
    anns = [A.annotate(a) for a in args]
    if mode.split:
        raise UnsupportedError(f"{mode} mode is not implemented yet; use Reverse or "
                               f"ReverseWithPrimal")
    if mode.holomorphic:
        return _holomorphic(mode, f, ret_activity, anns)
    shape = call_shape(anns) if isinstance(f, Hashable) else None
    if shape is None:
        return _forward(mode, f, ret_activity, anns) if mode.is_forward else \
            _reverse(mode, f, ret_activity, anns)
    # A call of plain arguments whose derivative was called before goes straight to it.
    key = (mode, f, ret_activity, shape.key, shape.distinct)
    call = CACHE.call(key)
    if call is not None:
        return call(shape)
    if mode.is_forward:
        result = _forward(mode, f, ret_activity, anns)
        CACHE.remember_call(key, _forward_call(mode, f, ret_activity, shape))
    else:
        result = _reverse(mode, f, ret_activity, anns)
        CACHE.remember_call(key, _reverse_call(mode, f, ret_activity, shape))
    return result


def _reverse(mode: Mode, f, ret_activity, anns: list[A.Annotation], seed=None) -> tuple:
    """Reverse mode: ``((d_arg or None, ...),)``, then the primal result with a primal.

    ``seed`` is the adjoint of an Active result (default 1.0 in every float of it); a one-hot
    tuple gives one row of the Jacobian of a tuple-valued function. For a real result, a
    complex ``Active(z)`` gets ``df/dRe(z) + i df/dIm(z)`` (the conjugate of what JAX's
    ``grad`` gives); see :mod:`pyzyme.api.args.complex`.
    """
    for a in anns:
        if isinstance(a, A.BatchDuplicated):
            raise UnsupportedError("BatchDuplicated arguments are for forward mode; in reverse "
                                   "mode pass Duplicated(x, dx)")
    if ret_activity is not None and ret_activity not in (A.Active, A.Const):
        raise UnsupportedError(f"{ret_activity.__name__} is not a reverse-mode return activity "
                               f"for a Numba function yet; use Active (float results) or Const")
    if any(isinstance(a, A.Active) and S.needs_flattening(a.val) for a in anns):
        if seed is not None:
            raise UnsupportedError("a seeded reverse sweep takes floats, arrays, records, "
                                   "jitclass instances and tuples of floats")
        return _reverse_flattened(mode, f, ret_activity, anns)
    views: dict = {}
    calls = [_ReverseArg(a, views, i) for i, a in enumerate(anns)]
    dispatcher = _dispatcher(f)
    distinct = _distinct(calls)
    plan = reverse_plan(dispatcher, [c.numba_type for c in calls], [c.kind for c in calls],
                        ret_activity, distinct, need_primal=mode.with_primal)
    seeds = _reverse_seeds(mode, plan, dispatcher, seed)
    out = plan.function(*[c.primal for c in calls], *[s for c in calls for s in c.shadows],
                        *seeds)
    for c in calls:
        c.copy_back()
    return _reverse_result(mode, plan, out, [c.kind == "active" for c in calls])


def _reverse_seeds(mode: Mode, plan, dispatcher, seed) -> tuple:
    """The seed arguments ``plan``'s derivative takes after the shadows."""
    if not plan.seeded:
        return ()
    if mode.holomorphic:
        return (C.holomorphic_seed(plan.restype),)
    C.check_complex_result(plan.restype, _where(dispatcher))
    return (_unit_seed(plan.restype) if seed is None else seed,)


def _reverse_result(mode: Mode, plan, out, active: Sequence[bool]) -> tuple:
    """``autodiff``'s result from the tuple a reverse derivative returned: an adjoint for
    each ``active`` argument, None for the others, then the primal result if asked for."""
    parts = () if out is None else tuple(out)
    primal = parts[0] if plan.returns_primal else None
    adjoints = iter(parts[1:] if plan.returns_primal else parts)
    derivs = tuple(next(adjoints) if a else None for a in active)
    if mode.with_primal:
        return (derivs, primal)
    return (derivs,)


_KINDS = {A.Const: "const", A.Active: "active", A.Duplicated: "duplicated",
          A.DuplicatedNoNeed: "duplicated"}


def _reverse_call(mode: Mode, f, ret_activity, shape: CallShape):
    """What :func:`_reverse` does for calls shaped like ``shape``, with everything that the
    shape decides done once: the derivative, its seeds, which arguments get adjoints."""
    kinds = [_KINDS[cls] for cls in shape.classes]
    dispatcher = _dispatcher(f)
    plan = reverse_plan(dispatcher, shape.types, kinds, ret_activity,
                        shape.distinct, need_primal=mode.with_primal)
    seeds = _reverse_seeds(mode, plan, dispatcher, None)
    active = [k == "active" for k in kinds]
    function = plan.function

    def call(shape: CallShape) -> tuple:
        return _reverse_result(mode, plan, function(*shape.primals, *shape.shadows, *seeds),
                               active)
    return call


def _forward_call(mode: Mode, f, ret_activity, shape: CallShape):
    """What :func:`_forward` does for calls shaped like ``shape`` (one tangent each), with
    the derivative found once."""
    ret_activity = ret_activity or A.Duplicated
    plan = forward_plan(_dispatcher(f), shape.types,
                        [cls is not A.Const for cls in shape.classes], ret_activity, 1,
                        mode.with_primal or ret_activity.needs_primal, shape.distinct)
    function = plan.function

    def call(shape: CallShape) -> tuple:
        return _forward_result(mode, ret_activity, plan,
                               function(*shape.primals, *shape.shadows))
    return call


def _holomorphic(mode: Mode, f, ret_activity, anns: list[A.Annotation]) -> tuple:
    """ReverseHolomorphic: ``f'(z)`` for each complex Active argument, ``dx += f'(x)`` per
    element of each complex Duplicated array.

    One reverse sweep seeded with a unit adjoint of ``Re f`` gives ``conj(f'(z))`` for a
    holomorphic ``f`` (Cauchy-Riemann), so adjoints are conjugated on the way out, and shadows
    on the way in and out (so that what they held is added to, not conjugated).
    """
    if ret_activity not in (None, A.Active):
        raise UnsupportedError(f"ReverseHolomorphic needs an Active (complex) result, not "
                               f"{ret_activity.__name__}")
    shadows = []
    for position, a in enumerate(anns):
        if isinstance(a, (A.Active, A.Duplicated)):
            C.check_holomorphic_argument(a.val, position)
        if isinstance(a, A.Duplicated) and C.is_complex_array(a.dval):
            shadows.append(a.dval)
    for s in shadows:
        C.conjugate_in_place(s)
    try:
        out = _reverse(mode, f, A.Active, anns)
    finally:
        for s in shadows:
            C.conjugate_in_place(s)
    derivs = tuple(None if d is None else d.conjugate() for d in out[0])
    return (derivs, *out[1:])


def _where(dispatcher) -> str:
    return getattr(getattr(dispatcher, "py_func", dispatcher), "__qualname__", repr(dispatcher))


def _reverse_flattened(mode: Mode, f, ret_activity, anns: list[A.Annotation]) -> tuple:
    """Reverse mode with Active tuples that are not all floats: ``f`` is called through a flat
    wrapper whose parameters are the tuples' leaves (float leaves Active, float arrays
    Duplicated with zero shadows, the rest Const), and each such tuple's derivative is built
    back in its structure, non-float leaves keeping their values."""
    from pyzyme.api.njit.reverse import _flat_wrapper, _leaf_annotation, _rebuild, _tree

    trees, flat, readers = [], [], []
    for i, a in enumerate(anns):
        if isinstance(a, A.Active) and S.needs_flattening(a.val):
            tree = _tree(a.val, f"argument {i}")
            trees.append(tree)
            places = []
            for leaf in tree.leaves():
                ann, reader = _leaf_annotation(leaf.value, top=False)
                flat.append(ann)
                places.append((len(flat) - 1, reader))
            readers.append(places)
        else:
            trees.append(None)
            flat.append(a)
            readers.append(len(flat) - 1)
    target = _flat_wrapper(_dispatcher(f), trees)
    args = (ret_activity,) if ret_activity is not None else ()
    out = autodiff(mode, target, *args, *flat)
    leaf_derivs = out[0]
    derivs = []
    for tree, place in zip(trees, readers):
        if tree is None:
            derivs.append(leaf_derivs[place])
            continue
        got = [leaf_derivs[p] if kind == "active" else payload() if kind == "after" else payload
               for p, (kind, payload) in place]
        derivs.append(_rebuild(tree, iter(got)))
    return (tuple(derivs), *out[1:])


def _unit_seed(numba_type):
    """The seed of an Active result: 1.0, or 1.0 in every float of a tuple result."""
    from numba.core import types

    if isinstance(numba_type, types.BaseTuple):
        return tuple(_unit_seed(t) for t in numba_type.types)
    return 1.0


def reverse_plan(dispatcher, primal_types, kinds, ret_activity, distinct: bool,
                 need_primal: bool = True):
    """The compiled reverse derivative of ``dispatcher`` for these types and activities
    (without ``need_primal``, the primal result it returns is zero)."""
    from pyzyme.frontends.numba.derive.reverse import build_reverse

    key = ("reverse", dispatcher, tuple(primal_types), tuple(kinds), ret_activity, distinct,
           need_primal)
    return CACHE.get(key, lambda: _persisted(
        dispatcher, primal_types, key,
        lambda: build_reverse(dispatcher, primal_types, kinds, result_activity(ret_activity),
                              distinct, _rules(), need_primal)))


def result_activity(ret_activity):
    """The builders' word for a reverse-mode result annotation (None: deduce it)."""
    from pyzyme.analysis.activity import Activity

    return {None: None, A.Active: Activity.ACTIVE, A.Const: Activity.CONST}.get(
        ret_activity, Activity.DUPLICATED)


def _persisted(dispatcher, primal_types, key: tuple, build):
    """``build()``, or the plan it made in an earlier process when ``dispatcher`` was made
    with ``cache=True`` (Numba's switch for its own cache; without it nothing touches the
    disk). ``key`` is the plan's in-memory key (mode, types, activities, ...): all of it but
    the dispatcher goes into the disk key, written the same way in every process.

    The key holds no identity of custom rules: while any rule is registered (they may apply
    to a callee, and a rule's code is not part of the function's identity) the disk is not
    used.
    """
    from pyzyme.frontends.numba import persist

    location = persist.cache_location(dispatcher)
    if location is None or REGISTRY.functions():
        return build()
    disk = CACHE.disk
    what = _stable(tuple(k for k in key if k is not dispatcher))
    try:
        disk_key = "\n".join([disk.environment(),
                              persist.function_identity(dispatcher, primal_types),
                              repr(what), repr(options.current())])
        fingerprint = persist.ir_fingerprint(dispatcher, primal_types)
    except Exception as err:  # noqa: BLE001  (e.g. closure values Numba cannot pickle)
        warnings.warn(f"pyzyme cannot key the derivative of {dispatcher.py_func.__qualname__} "
                      f"for its disk cache ({err}); it is kept in memory only",
                      RuntimeWarning, stacklevel=2)
        return build()
    path = disk.path(*location, disk_key)
    payload = disk.load(path, disk_key)
    if payload is not None:
        plan = _loaded_plan(payload, fingerprint)
        if plan is not None:
            return plan
        disk.reject()
    plan = build()
    try:
        fingerprint = fingerprint or persist.ir_fingerprint(dispatcher, primal_types)
        payload = (persist.plan_state(plan), fingerprint)
    except Exception as err:  # noqa: BLE001  (the derivative works; only storing it failed)
        warnings.warn(f"pyzyme could not store the derivative of "
                      f"{dispatcher.py_func.__qualname__} in its disk cache: {err}",
                      RuntimeWarning, stacklevel=2)
        return plan
    disk.store(path, disk_key, payload, dumps=persist.state_bytes)
    return plan


def _stable(value):
    """``value`` (a plan's in-memory key) as text that does not depend on the process:
    annotation classes by name, Numba types and plain values by ``repr``."""
    if isinstance(value, tuple):
        return tuple(_stable(v) for v in value)
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def _loaded_plan(payload, fingerprint: str | None):
    """The plan stored in ``payload``, its wrapper loaded; None if it cannot be used: made
    from other primal IR than this process has, or code that would not load here."""
    from pyzyme.frontends.numba import persist
    from pyzyme.runtime.jit import compile_key

    try:
        state, stored_fingerprint = payload
        if fingerprint is not None and stored_fingerprint not in (None, fingerprint):
            return None
        text = next(data for name, _, data in state[1] if name == "ir_text")
        return persist.rebuild_plan(state, compile_key(text))
    except Exception:  # noqa: BLE001  (an entry that does not load is rebuilt, never trusted)
        return None


def _distinct(calls) -> bool:
    """Whether no two arrays the arguments ``calls`` reach (primals and shadows, inside
    tuples, records and jitclass instances too) share memory: then array data can be
    ``noalias``."""
    return not share_memory([a for c in calls for v in (c.primal, *c.shadows)
                             for a in S.reachable_arrays(v) if a.size])


class _ReverseArg:
    """One argument (at ``position``) as the reverse derivative takes it."""

    def __init__(self, ann: A.Annotation, views: dict, position: int) -> None:
        value = ann.val
        where = f"argument {position}"
        R.check_passable(value, where)
        if isinstance(ann, A.Const):
            self.kind, self.primal, self.shadows, self._fwd = "const", value, (), None
        elif isinstance(ann, A.Active):
            if S.all_real(value):
                self.primal = S.active_tuple(value)
            elif _is_real(value):
                self.primal = value if isinstance(value, np.float32) else float(value)
            elif C.is_complex(value):
                self.primal = value
            else:
                raise R.active_not_immutable(where, type(value).__name__,
                                             isinstance(value, np.ndarray))
            self.kind, self.shadows, self._fwd = "active", (), None
        elif isinstance(ann, A.Duplicated):
            if not (isinstance(value, np.ndarray) or S.is_structured(value)):
                raise UnsupportedError(
                    f"Duplicated({type(value).__name__}) in reverse mode: a float cannot hold "
                    f"its adjoint; pass it as Active")
            if S.has_float_leaf(value):
                raise UnsupportedError(
                    "Duplicated(tuple) in reverse mode: the tuple holds floats, passed by "
                    "value, which cannot receive their adjoints; pass the tuple as Active (its "
                    "arrays then get fresh shadows, given back in its derivative)")
            if R.has_read_only_part(ann.dval):
                raise R.read_only_shadow(where, "reverse")
            self._fwd = _ForwardArg(ann, views, position)
            self.kind, self.primal, self.shadows = "duplicated", value, self._fwd.shadows
        else:
            raise UnsupportedError(f"{type(ann).__name__} is not a reverse-mode activity")
        self.numba_type = self._fwd.numba_type if self._fwd is not None else \
            argument_type(self.primal)

    def copy_back(self) -> None:
        if self._fwd is not None:
            self._fwd.copy_back()


def _forward(mode: Mode, f, ret_activity, anns: list[A.Annotation]) -> tuple:
    width = _batch_width(anns, ret_activity)
    views: dict = {}
    calls = [_ForwardArg(a, views, i) for i, a in enumerate(anns)]
    if ret_activity is None:
        ret_activity = A.Duplicated if width == 1 else A.BatchDuplicated
    if ret_activity is A.Active:
        raise UnsupportedError("Active is a reverse-mode return activity; use Duplicated in "
                               "forward mode")
    dispatcher = _dispatcher(f)
    need_primal = mode.with_primal or ret_activity.needs_primal
    distinct = _distinct(calls)
    plan = forward_plan(dispatcher, [c.numba_type for c in calls],
                        [bool(c.shadows) for c in calls], ret_activity, width, need_primal,
                        distinct)
    for i, c in enumerate(calls):
        if c.read_only and plan.may_write(i):
            raise R.read_only_shadow(f"argument {i}", "forward")
    primals = [c.primal for c in calls]
    shadows = [s for c in calls for s in c.shadows]
    out = plan.function(*primals, *shadows)
    for c in calls:
        c.copy_back()
    return _forward_result(mode, ret_activity, plan, out)


def forward_plan(dispatcher, primal_types, shadowed, ret_activity, width: int,
                 need_primal: bool = True, distinct: bool = False):
    """The compiled forward derivative of ``dispatcher`` for these types and activities
    (without ``need_primal``, a float primal result it returns is zero; ``distinct``: no two
    arrays of the call share memory)."""
    from pyzyme.analysis.activity import Activity
    from pyzyme.frontends.numba.derive.forward import build_forward

    key = ("forward", dispatcher, tuple(primal_types), tuple(shadowed), ret_activity, width,
           need_primal) + (("distinct",) if distinct else ())
    result = Activity.CONST if ret_activity is A.Const else Activity.DUPLICATED
    return CACHE.get(key, lambda: _persisted(
        dispatcher, primal_types, key,
        lambda: build_forward(dispatcher, primal_types, shadowed, result, width,
                              _rules(), need_primal, distinct)))


def _forward_result(mode: Mode, ret_activity, plan, out) -> tuple:
    if plan.returns_tangent:
        primal, tangents = out[0], tuple(out[1:])
    else:
        primal, tangents = out, ()
    if ret_activity is A.Const or not tangents:
        return (primal,) if mode.with_primal else ()
    batch = ret_activity in (A.BatchDuplicated, A.BatchDuplicatedNoNeed)
    derivative = tangents if batch else tangents[0]
    if ret_activity.needs_primal or mode.with_primal:
        return (primal, derivative)
    return (derivative,)


def _batch_width(anns: Sequence[A.Annotation], ret_activity) -> int:
    for a in anns:
        if isinstance(a, A.Active):
            raise UnsupportedError(f"Active({a.val!r}) is for reverse mode; in forward mode "
                                   f"pass Duplicated(value, tangent)")
    widths = {len(a.shadows) for a in anns if isinstance(a, A.BatchDuplicated)}
    if len(widths) > 1:
        raise PyzymeError(f"all BatchDuplicated arguments of one call need the same number of "
                          f"shadows; got widths {sorted(widths)}")
    width = widths.pop() if widths else 1
    single = [a for a in anns if isinstance(a, A.Duplicated)]
    if widths or any(isinstance(a, A.BatchDuplicated) for a in anns):
        if single and width > 1:
            raise PyzymeError(
                f"Duplicated arguments (one shadow) cannot be mixed with BatchDuplicated ones "
                f"({width} shadows): give every differentiated argument {width} shadows")
        if ret_activity in (A.Duplicated, A.DuplicatedNoNeed) and width > 1:
            raise PyzymeError(f"the arguments carry {width} shadows each, so the result has "
                              f"{width} tangents: use BatchDuplicated or BatchDuplicatedNoNeed "
                              f"as the return activity")
    return width


class _ForwardArg:
    """One argument (at ``position``) as the compiled derivative takes it: the primal, its
    shadows laid out exactly like it (same shape, dtype and strides), and how to return
    tangents to the user. ``read_only``: a shadow is (or holds) a read-only array, which the
    derivative may only read."""

    def __init__(self, ann: A.Annotation, views: dict, position: int) -> None:
        self.annotation = ann
        self._copies: list[tuple[np.ndarray, np.ndarray]] = []
        self._views = views
        value = ann.val
        R.check_passable(value, f"argument {position}")
        self.read_only = any(R.has_read_only_part(s) for s in ann.shadows)
        if isinstance(ann, A.Const):
            self.primal, self.shadows = value, ()
        elif isinstance(value, np.ndarray):
            self.primal = value
            self.shadows = tuple(self._array_shadow(value, s, i)
                                 for i, s in enumerate(ann.shadows))
        elif _is_real(value):
            self.primal = float(value)
            self.shadows = tuple(_real_shadow(s) for s in ann.shadows)
        elif C.is_complex(value):
            self.primal = value
            self.shadows = tuple(C.complex_shadow(value, s) for s in ann.shadows)
        elif S.all_real(value):
            self.primal = S.active_tuple(value)
            self.shadows = tuple(S.rebuild_like(value, _tuple_shadow(s, len(value)))
                                 for s in ann.shadows)
        elif S.is_structured(value):
            self.primal = value
            self.shadows = tuple(
                S.shadow_of(value, s, lambda x, dx, i=i: self._array_shadow(x, dx, i))
                for i, s in enumerate(ann.shadows))
        else:
            raise UnsupportedError(
                f"{type(ann).__name__} of a {type(value).__name__} is not supported in forward "
                f"mode yet; pass floats or NumPy arrays")
        self.numba_type = argument_type(self.primal)

    def _array_shadow(self, x: np.ndarray, dx, lane: int) -> np.ndarray:
        if not isinstance(dx, np.ndarray):
            raise PyzymeError(f"the shadow of an array must be an array, got "
                              f"{type(dx).__name__}")
        if dx.shape != x.shape or dx.dtype != x.dtype:
            raise PyzymeError(f"shadow {lane} has shape {dx.shape} and dtype {dx.dtype}; the "
                              f"primal has shape {x.shape} and dtype {x.dtype}")
        if dx.size and np.may_share_memory(x, dx):
            raise PyzymeError("a shadow shares memory with its primal array: tangents would "
                              "overwrite the values they are tangents of; pass a separate "
                              "array (np.zeros_like(x))")
        if dx.strides == x.strides and dx.flags.writeable and dx.flags.aligned:
            return dx
        # Shadow addresses are computed like primal ones, so the shadow needs the primal's
        # strides: a buffer spanning the same extent, viewed with the same strides. One such
        # view serves every argument given this same pair of arrays.
        key = (id(x), id(dx))
        if key in self._views:
            return self._views[key]
        span = _extent(x)
        buf = np.zeros(span // x.itemsize + 1, dtype=x.dtype)
        offset = -min(0, _lowest_offset(x)) // x.itemsize
        view = np.lib.stride_tricks.as_strided(buf[offset:], x.shape, x.strides)
        view[...] = dx
        if dx.flags.writeable:  # a read-only one is let through only where nothing is written
            self._copies.append((dx, view))
        self._views[key] = view
        return view

    def copy_back(self) -> None:
        for user, view in self._copies:
            user[...] = view
        self._copies.clear()


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)


def _real_shadow(s) -> float:
    if not _is_real(s):
        raise PyzymeError(f"the shadow of a float must be a float, got {type(s).__name__}")
    return float(s)


def _tuple_shadow(s, n: int) -> tuple:
    if not (isinstance(s, tuple) and len(s) == n and all(_is_real(v) for v in s)):
        raise PyzymeError(f"the shadow of a tuple of {n} floats must be a tuple of {n} floats, "
                          f"got {s!r}")
    return tuple(float(v) for v in s)


def _lowest_offset(x: np.ndarray) -> int:
    return sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides) if n)


def _extent(x: np.ndarray) -> int:
    hi = sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides) if n)
    return hi - _lowest_offset(x) + x.itemsize


def _dispatcher(f):
    """The ``@njit`` dispatcher to differentiate for ``f`` (compiled here if ``f`` is plain
    Python). A function with user rules is differentiated through a one-line caller, so its
    rules apply to it as they do wherever it is called."""
    return _ruled_entry(njit_of(f))


def njit_of(f):
    """``f`` if it is an ``@njit`` dispatcher, else one made of it (once per function)."""
    if isinstance(f, Dispatcher):
        return f
    if callable(f) and hasattr(f, "__code__"):
        cached = getattr(f, "__pyzyme_njit__", None)
        if cached is None:
            # Under the lock builds take (DerivativeCache.get), so that threads calling first
            # at once share one dispatcher, and so one derivative.
            with global_compiler_lock:
                cached = getattr(f, "__pyzyme_njit__", None)
                if cached is None:
                    cached = numba.njit(f)
                    try:
                        f.__pyzyme_njit__ = cached
                    except AttributeError:
                        pass
        return cached
    raise TypeError(f"cannot differentiate {f!r}: expected an @njit function or a plain Python "
                    f"function")


def _ruled_entry(dispatcher):
    if REGISTRY.rules_of(dispatcher) is None:
        return dispatcher
    entry = getattr(dispatcher, "__pyzyme_entry__", None)
    if entry is None:
        with global_compiler_lock:  # one caller for all threads, as in njit_of
            entry = getattr(dispatcher, "__pyzyme_entry__", None)
            if entry is None:
                entry = _caller(dispatcher)
    return entry


def _caller(dispatcher):
    """A new ``@njit`` function of ``dispatcher``'s parameters calling it (remembered on it),
    or ``dispatcher`` itself when it takes ``*args``."""
    import inspect

    py = dispatcher.py_func
    params = inspect.signature(py).parameters.values()
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return dispatcher  # *args: no fixed-arity caller to write; differentiated as is
    names = ", ".join(f"a{i}" for i in range(len(params)))
    scope = {"ruled": dispatcher, "__name__": py.__module__}
    source = f"def {py.__name__}({names}):\n    return ruled({names})\n"
    exec(compile(source, f"<pyzyme: caller of {py.__qualname__}>", "exec"), scope)  # noqa: S102
    entry = dispatcher.__pyzyme_entry__ = numba.njit(scope[py.__name__])
    return entry


def _rules():
    """pyzyme's rule table with the user's rules (:mod:`pyzyme.rules.custom`) in front."""
    from pyzyme.api.custom_rules import rule_table
    from pyzyme.rules import default_rules
    return rule_table(default_rules(), REGISTRY)
