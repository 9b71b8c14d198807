"""Arguments with structure: tuples and namedtuples (of floats, arrays and other fields), records
and jitclass instances, as compiled derivatives take them.

A ``Duplicated`` structure has a shadow of the same structure, leaf by leaf: an array's shadow is
an array, a float's a float (its tangent), a record's a record of the same dtype, a jitclass
instance's another instance of its class (``make_zero(obj)``), whose fields -- floats, arrays,
other instances, a ``next`` that is an instance or None -- shadow the primal's. Integers, bools,
strings and None carry no derivative: they are passed through, so the shadow holds the primal's
own value there (Numba needs the shadow to have the primal's type).

An ``Active`` tuple in reverse mode whose leaves are not all floats (arrays, integers, strings
beside the floats) is differentiated through a flat wrapper: its float leaves are ``Active``,
its float arrays ``Duplicated`` with fresh zero shadows, the rest constant, and its derivative is
given back in its own structure, non-float leaves unchanged (Enzyme.jl's ``gradient`` of a
namedtuple).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pyzyme.errors import ArgumentTypeError, ArgumentValueError, UnsupportedError

__all__ = ["is_jitclass", "is_structured", "is_real", "all_real", "shadow_of", "has_float_leaf",
           "active_tuple", "needs_flattening", "rebuild_like", "keep_non_float", "reachable_arrays"]


def is_jitclass(value: Any) -> bool:
    """Whether ``value`` is a (boxed) jitclass instance."""
    from numba.experimental.jitclass import _box

    return isinstance(value, _box.Box)


def is_real(v) -> bool:
    """Whether ``v`` is a real number (an int or float of Python or NumPy; not a bool)."""
    return isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)


def all_real(value) -> bool:
    """A non-empty tuple of floats (a namedtuple included). Integers in a tuple are not
    floats: they stay integers and carry no derivative (as in Enzyme.jl)."""
    return isinstance(value, tuple) and bool(value) and all(
        isinstance(v, (float, np.floating)) for v in value)


def is_structured(value: Any) -> bool:
    """A tuple, a record scalar or a jitclass instance: a value :func:`shadow_of` pairs."""
    return isinstance(value, (tuple, np.void)) or is_jitclass(value)


def rebuild_like(value: tuple, items) -> tuple:
    """``items`` as a tuple of ``value``'s kind (the same namedtuple class, or a tuple)."""
    return type(value)(*items) if hasattr(value, "_fields") else tuple(items)


def active_tuple(value: tuple) -> tuple:
    """An all-float tuple as an Active argument: every leaf a float, a namedtuple kept.

    Examples
    --------
    >>> from collections import namedtuple
    >>> P = namedtuple("P", "a b")
    >>> active_tuple(P(np.float64(1.5), 2.0))
    P(a=1.5, b=2.0)
    """
    return rebuild_like(value, [v if isinstance(v, np.float32) else float(v) for v in value])


def has_float_leaf(value: Any) -> bool:
    """Whether a tuple holds a float (at any depth): such a leaf is passed by value, so in
    reverse mode nothing can receive its adjoint unless the tuple is Active."""
    if isinstance(value, tuple):
        return any(has_float_leaf(v) for v in value)
    return isinstance(value, (float, np.floating))


def needs_flattening(value: Any) -> bool:
    """An Active tuple that is not all floats: it goes through a flat wrapper."""
    return isinstance(value, tuple) and not all_real(value)


def shadow_of(value: Any, shadow: Any, array_shadow: Callable, where: str = "the argument"):
    """The shadow of a structured ``value`` as the derivative takes it, leaf by leaf.

    ``array_shadow(x, dx)`` lays out the shadow of an array leaf. Raises ArgumentTypeError when
    the shadow's structure differs from the primal's.

    Examples
    --------
    >>> shadow_of((np.ones(2), 3, "tag"), (np.zeros(2), 0, ""), lambda x, dx: dx)
    (array([0., 0.]), 3, 'tag')
    """
    if isinstance(value, tuple):
        if not isinstance(shadow, tuple) or len(shadow) != len(value):
            raise ArgumentTypeError(f"the shadow of {where} must be a tuple of {len(value)} "
                                    f"items like it, got {shadow!r}")
        items = [shadow_of(v, s, array_shadow, f"{where}[{i}]")
                 for i, (v, s) in enumerate(zip(value, shadow))]
        return rebuild_like(value, items)
    if isinstance(value, np.ndarray):
        return array_shadow(value, shadow)
    if isinstance(value, (float, np.floating)):
        if not is_real(shadow):
            raise ArgumentTypeError(f"the shadow of {where} (a float) must be a float, got "
                                    f"{type(shadow).__name__}")
        return type(value)(shadow) if isinstance(value, np.float32) else float(shadow)
    if isinstance(value, np.void):
        if not isinstance(shadow, np.void) or shadow.dtype != value.dtype:
            raise ArgumentTypeError(f"the shadow of {where} (a record of dtype {value.dtype}) "
                                    f"must be a record of the same dtype, e.g. make_zero(x); "
                                    f"got {shadow!r}")
        if _same_record(value, shadow):
            raise ArgumentValueError(f"the shadow of {where} is the record itself; pass a "
                                     f"separate one (make_zero(x))")
        return shadow
    if is_jitclass(value):
        import numba

        if numba.typeof(shadow) != numba.typeof(value):
            raise ArgumentTypeError(f"the shadow of {where} (a {type(value).__name__}) must be an "
                                    f"instance of the same jitclass, e.g. make_zero(x); got "
                                    f"{type(shadow).__name__}")
        if shadow is value or _same_instance(value, shadow):
            raise ArgumentValueError(f"the shadow of {where} is the instance itself; pass a "
                                     f"separate one (make_zero(x))")
        return shadow
    if isinstance(value, (bool, np.bool_, int, np.integer, str, type(None))):
        return value  # no derivative: the shadow carries the primal's value through
    raise UnsupportedError(f"{where} is a {type(value).__name__}, which pyzyme cannot pass with "
                           f"a shadow; pass it as Const")


def _same_record(a: np.void, b: np.void) -> bool:
    ia = a.__array_interface__ if hasattr(a, "__array_interface__") else None
    ib = b.__array_interface__ if hasattr(b, "__array_interface__") else None
    return bool(ia and ib and ia["data"][0] == ib["data"][0])


def _same_instance(a, b) -> bool:
    from numba.experimental.jitclass import _box

    return _box.box_get_dataptr(a) == _box.box_get_dataptr(b)


def keep_non_float(grad: Any, x: Any, _seen: set | None = None) -> Any:
    """``grad`` (a ``make_zero(x)`` that received df/dx) with the non-float fields of ``x``
    copied back, so that, as Enzyme.jl's ``gradient`` of a struct, ``grad.k == x.k`` for an
    integer field ``k``. Works in place on records, arrays of records and jitclass instances
    (nested ones included); returns ``grad``.

    Examples
    --------
    >>> x = np.array([(1.5, 7)], dtype=[("w", "f8"), ("n", "i8")])
    >>> g = np.array([(3.0, 0)], dtype=x.dtype)
    >>> keep_non_float(g, x)
    array([(3., 7)], dtype=[('w', '<f8'), ('n', '<i8')])
    """
    seen = set() if _seen is None else _seen
    if isinstance(x, (np.ndarray, np.void)) and x.dtype.fields is not None:
        for name in x.dtype.names:
            if x.dtype.fields[name][0].base.kind not in "fc":
                grad[name] = x[name]
        return grad
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "fc":
            grad[...] = x
        return grad
    if not is_jitclass(x) or id(grad) in seen:
        return grad
    from numba.core import types

    seen.add(id(grad))
    for name, ty in type(x)._numba_type_.struct.items():
        if isinstance(ty, types.Optional):
            ty = ty.type
        if isinstance(ty, (types.Integer, types.Boolean)):
            setattr(grad, name, getattr(x, name))
        elif isinstance(ty, (types.Array, types.ClassInstanceType, types.DeferredType)):
            inner, ginner = getattr(x, name), getattr(grad, name)
            if inner is not None and ginner is not None:
                keep_non_float(ginner, inner, seen)
    return grad


def reachable_arrays(value: Any, _seen: set | None = None) -> list[np.ndarray]:
    """The arrays ``value`` reaches: itself, those in its tuples and jitclass fields (linked
    instances followed once), and a record's own bytes as a 0-d array, so that two arguments
    sharing memory through any of them are seen to.

    Examples
    --------
    >>> a = np.ones(3)
    >>> [x is a for x in reachable_arrays((a, 2.0, (a,)))]
    [True, True]
    """
    seen = set() if _seen is None else _seen
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, np.void):
        return [np.ndarray((), dtype=value.dtype, buffer=value)]
    if isinstance(value, tuple):
        return [a for v in value for a in reachable_arrays(v, seen)]
    if is_jitclass(value):
        from numba.experimental.jitclass import _box

        key = _box.box_get_dataptr(value)
        if key in seen:
            return []
        seen.add(key)
        return [a for name in type(value)._numba_type_.struct
                for a in reachable_arrays(getattr(value, name), seen)]
    return []
