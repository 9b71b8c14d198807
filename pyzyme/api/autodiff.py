"""``autodiff``: Enzyme.jl's entry point, for Numba functions.

It marshals the annotated arguments (:mod:`pyzyme.api.args.marshal`), finds the compiled
derivative for their types and activities (:mod:`pyzyme.api.plans`, which builds it once) and
calls it. A call of plain arguments whose derivative was called before goes straight to it
(:mod:`pyzyme.api.args.call_shape`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from operator import itemgetter

from pyzyme.analysis.activity import Activity
from pyzyme.api import annotations as A
from pyzyme.api.args import complex as C
from pyzyme.api.args import refusals as R
from pyzyme.api.args import structured as S
from pyzyme.api.args.call_shape import CallShape, read_call
from pyzyme.api.args.marshal import ForwardArg, ReverseArg, batch_width, distinct
from pyzyme.api.args.trees import leaf_annotation, rebuild, tree
from pyzyme.api.dispatchers import dispatcher_of, parameter_names, qualname
from pyzyme.api.modes import Mode
from pyzyme.api.plans import CACHE, forward_plan, reverse_plan
from pyzyme.api.wrappers import flat_wrapper
from pyzyme.errors import ArgumentName, UnsupportedError

__all__ = ["autodiff", "reverse_sweep", "compiled_reverse", "reverse_entry"]

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
    if not (mode.split or mode.holomorphic):
        # A call of plain arguments whose derivative was called before goes straight to it.
        read = read_call(args)
        if read is not None:
            key = (mode.name, f, ret_activity, read[0], read[1])   # a name hashes fastest
            try:
                call = CACHE.call(key)
            except TypeError:   # an unhashable f: the general path, every time
                read = None
            else:
                if call is not None:
                    return call(read[2], read[3])
    anns = [A.annotate(a) for a in args]
    if mode.split:
        raise UnsupportedError(f"autodiff does not take the split mode {mode}: call "
                               f"autodiff_thunk({mode}, f, ...) for its augmented forward and "
                               f"reverse functions, or autodiff with Reverse or "
                               f"ReverseWithPrimal")
    if mode.holomorphic:
        return _holomorphic(mode, f, ret_activity, anns)
    if read is None:
        return _forward(mode, f, ret_activity, anns) if mode.is_forward else \
            reverse_sweep(mode, f, ret_activity, anns)
    shape = CallShape(*read)
    if mode.is_forward:
        result = _forward(mode, f, ret_activity, anns)
        CACHE.remember_call(key, _forward_call(mode, f, ret_activity, shape))
    else:
        result = reverse_sweep(mode, f, ret_activity, anns)
        CACHE.remember_call(key, _reverse_call(mode, f, ret_activity, shape))
    return result


def reverse_sweep(mode: Mode, f, ret_activity, anns: list[A.Annotation], seed=None) -> tuple:
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
    names = partial(parameter_names, f)     # looked up only when a message names an argument
    calls = [ReverseArg(a, views, i, names) for i, a in enumerate(anns)]
    dispatcher = dispatcher_of(f)
    apart = distinct(calls)
    plan = reverse_plan(dispatcher, [c.numba_type for c in calls], [c.kind for c in calls],
                        ret_activity, apart, need_primal=mode.with_primal)
    seeds = _reverse_seeds(mode, plan, dispatcher, seed)
    out = plan.function(*[c.primal for c in calls], *[s for c in calls for s in c.shadows],
                        *seeds)
    for c in calls:
        c.copy_back()
    return _reverse_result(mode, plan, out, [c.kind is Activity.ACTIVE for c in calls])


def _reverse_seeds(mode: Mode, plan, dispatcher, seed) -> tuple:
    """The seed arguments ``plan``'s derivative takes after the shadows."""
    if not plan.seeded:
        return ()
    if mode.holomorphic:
        return (C.holomorphic_seed(plan.restype),)
    C.check_complex_result(plan.restype, qualname(dispatcher))
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


_KINDS = {A.Const: Activity.CONST, A.Active: Activity.ACTIVE, A.Duplicated: Activity.DUPLICATED,
          A.DuplicatedNoNeed: Activity.DUPLICATED}


def _reverse_call(mode: Mode, f, ret_activity, shape: CallShape):
    """What :func:`_reverse` does for calls shaped like ``shape``, with everything that the
    shape decides done once: the derivative, its seeds, which arguments get adjoints; called
    with the call's primals and shadows."""
    return compiled_reverse(mode, f, ret_activity, shape.classes, shape.types, shape.distinct)


def reverse_entry(mode: Mode, f, ret_activity, classes, types, distinct: bool) -> tuple:
    """``(plan, seeds)``: the reverse derivative of ``f`` for arguments of these annotation
    ``classes`` and Numba ``types`` (``distinct``: no two of their arrays share memory), and
    the seed arguments it takes after the shadows."""
    dispatcher = dispatcher_of(f)
    plan = reverse_plan(dispatcher, types, [_KINDS[cls] for cls in classes], ret_activity,
                        distinct, need_primal=mode.with_primal)
    return plan, _reverse_seeds(mode, plan, dispatcher, None)


def compiled_reverse(mode: Mode, f, ret_activity, classes, types, distinct: bool):
    """``run(primals, shadows)``: a call of the reverse derivative of ``f`` for arguments of
    these annotation ``classes`` and Numba ``types`` (``distinct``: no two of their arrays
    share memory), its seeds found once, giving :func:`autodiff`'s result."""
    kinds = [_KINDS[cls] for cls in classes]
    plan, seeds = reverse_entry(mode, f, ret_activity, classes, types, distinct)
    function = plan.function
    # What _reverse_result does, worked out once: the derivative returns the primal result
    # (if it returns one) and then the active arguments' adjoints; the adjoints go to their
    # arguments' places, None (the slot past the end) to the others'.
    first = 1 if plan.returns_primal else 0
    n_active = sum(k is Activity.ACTIVE for k in kinds)
    places, p = [], first
    for k in kinds:
        places.append(p if k is Activity.ACTIVE else first + n_active)
        p += k is Activity.ACTIVE
    pick = _picker(places)
    if mode.with_primal:
        def run(primals, shadows) -> tuple:
            parts = (*(function(*primals, *shadows, *seeds) or ()), None)
            return (pick(parts), parts[0] if first else None)
    elif kinds == [Activity.ACTIVE] and not first:   # one Active argument: the commonest call
        def run(primals, shadows) -> tuple:
            return (function(*primals, *shadows, *seeds)[:1],)
    else:
        def run(primals, shadows) -> tuple:
            return (pick((*(function(*primals, *shadows, *seeds) or ()), None)),)
    return run


def _picker(places: list[int]):
    """``parts -> tuple(parts[p] for p in places)``, at C speed."""
    if len(places) > 1:
        return itemgetter(*places)
    if places:
        place = places[0]
        return lambda parts: (parts[place],)
    return lambda parts: ()


def _forward_call(mode: Mode, f, ret_activity, shape: CallShape):
    """What :func:`_forward` does for calls shaped like ``shape`` (one tangent each), with
    the derivative found once; called with the call's primals and shadows."""
    ret_activity = ret_activity or A.Duplicated
    plan = forward_plan(dispatcher_of(f), shape.types,
                        [cls is not A.Const for cls in shape.classes], ret_activity, 1,
                        mode.with_primal or ret_activity.needs_primal, shape.distinct)
    function = plan.function
    if not plan.returns_tangent or ret_activity not in (A.Duplicated, A.DuplicatedNoNeed):
        return lambda primals, shadows: _forward_result(mode, ret_activity, plan,
                                                        function(*primals, *shadows))
    # One tangent: what _forward_result gives, without its questions each call.
    if ret_activity.needs_primal or mode.with_primal:
        return lambda primals, shadows: function(*primals, *shadows)[:2]
    return lambda primals, shadows: function(*primals, *shadows)[1:2]


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
        out = reverse_sweep(mode, f, A.Active, anns)
    finally:
        for s in shadows:
            C.conjugate_in_place(s)
    derivs = tuple(None if d is None else d.conjugate() for d in out[0])
    return (derivs, *out[1:])


def _reverse_flattened(mode: Mode, f, ret_activity, anns: list[A.Annotation]) -> tuple:
    """Reverse mode with Active tuples that are not all floats: ``f`` is called through a flat
    wrapper whose parameters are the tuples' leaves (float leaves Active, float arrays
    Duplicated with zero shadows, the rest Const), and each such tuple's derivative is built
    back in its structure, non-float leaves keeping their values."""
    trees, flat, readers = [], [], []
    for i, a in enumerate(anns):
        if isinstance(a, A.Active) and S.needs_flattening(a.val):
            node = tree(a.val, f"argument {i}")
            trees.append(node)
            places = []
            for leaf in node.leaves():
                ann, reader = leaf_annotation(leaf.value, top=False)
                flat.append(ann)
                places.append((len(flat) - 1, reader))
            readers.append(places)
        else:
            trees.append(None)
            flat.append(a)
            readers.append(len(flat) - 1)
    target = flat_wrapper(dispatcher_of(f), trees)
    args = (ret_activity,) if ret_activity is not None else ()
    out = autodiff(mode, target, *args, *flat)
    leaf_derivs = out[0]
    derivs = []
    for node, place in zip(trees, readers):
        if node is None:
            derivs.append(leaf_derivs[place])
            continue
        got = [leaf_derivs[p] if kind == "active" else payload() if kind == "after" else payload
               for p, (kind, payload) in place]
        derivs.append(rebuild(node, iter(got)))
    return (tuple(derivs), *out[1:])


def _unit_seed(numba_type):
    """The seed of an Active result: 1.0, or 1.0 in every float of a tuple result."""
    from numba.core import types

    if isinstance(numba_type, types.BaseTuple):
        return tuple(_unit_seed(t) for t in numba_type.types)
    return 1.0


def _forward(mode: Mode, f, ret_activity, anns: list[A.Annotation]) -> tuple:
    width = batch_width(anns, ret_activity)
    views: dict = {}
    names = partial(parameter_names, f)     # looked up only when a message names an argument
    calls = [ForwardArg(a, views, i, names) for i, a in enumerate(anns)]
    if ret_activity is None:
        ret_activity = A.Duplicated if width == 1 else A.BatchDuplicated
    if ret_activity is A.Active:
        raise UnsupportedError("Active is a reverse-mode return activity; use Duplicated in "
                               "forward mode")
    dispatcher = dispatcher_of(f)
    need_primal = mode.with_primal or ret_activity.needs_primal
    apart = distinct(calls)
    plan = forward_plan(dispatcher, [c.numba_type for c in calls],
                        [bool(c.shadows) for c in calls], ret_activity, width, need_primal,
                        apart)
    for i, c in enumerate(calls):
        if c.read_only and plan.may_write(i):
            raise R.read_only_shadow(ArgumentName(names, i), "forward")
    primals = [c.primal for c in calls]
    shadows = [s for c in calls for s in c.shadows]
    out = plan.function(*primals, *shadows)
    for c in calls:
        c.copy_back()
    return _forward_result(mode, ret_activity, plan, out)


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
