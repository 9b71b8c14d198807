"""Dicts at the boundary of the JAX-style layer (``grad``, ``value_and_grad``, ``vjp``, ``jvp``).

A Numba function cannot take a Python dict. Here a dict with string keys becomes, at the
boundary, an instance of a namedtuple class made for its keys (one class per key tuple, so one
compiled derivative serves every dict with those keys), and ``d["w"]`` with a constant key is
given a meaning in Numba for such tuples: the field of that key, chosen at compile time. The
function body reads the dict as it would in Python, its values may have different types (arrays,
floats, tuples, other dicts), and the derivative is given back as a dict with the same keys.

Only reading by constant keys is supported (``d[k]`` for a variable ``k``, ``d.keys()`` and
iteration are not: Numba reports them as typing errors); ``len(d)`` works.

Examples
--------
>>> import numpy as np
>>> from pyzyme import grad
>>> grad(lambda p: p["w"][0] * p["b"])({"w": np.array([2.0]), "b": 3.0})
{'w': array([3.]), 'b': 2.0}
"""

from __future__ import annotations

import functools
import operator
from collections import namedtuple
from typing import Any

from numba.core import types
from numba.extending import overload

from pyzyme.errors import UnsupportedError

__all__ = ["dict_class", "keys_of", "to_numba"]


@functools.lru_cache(maxsize=None)
def dict_class(keys: tuple[str, ...]) -> type:
    """The namedtuple class standing for dicts with exactly these keys, in this order."""
    cls = namedtuple("PytreeDict", [f"f{i}" for i in range(len(keys))])
    cls._pyzyme_keys = keys
    return cls


def keys_of(d: dict, where: str) -> tuple[str, ...]:
    """The keys of ``d``, checked to be strings."""
    keys = tuple(d)
    for k in keys:
        if not isinstance(k, str):
            raise UnsupportedError(f"{where} is a dict with the key {k!r}; pyzyme passes dicts "
                                   f"with string keys (as namedtuples read by d['key'])")
    return keys


def to_numba(value: Any, where: str = "the argument") -> Any:
    """``value`` with every dict in it (in tuples, namedtuples and dicts) made an instance of
    its :func:`dict_class`, so that Numba can take it."""
    if isinstance(value, dict):
        keys = keys_of(value, where)
        return dict_class(keys)(*[to_numba(value[k], f"{where}[{k!r}]") for k in keys])
    if isinstance(value, tuple) and _holds_dict(value):
        items = [to_numba(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def _holds_dict(value: Any) -> bool:
    if isinstance(value, dict):
        return True
    return isinstance(value, (tuple, list)) and any(_holds_dict(v) for v in value)


def _pytree_keys(ty) -> tuple[str, ...] | None:
    if isinstance(ty, types.BaseNamedTuple):
        return getattr(ty.instance_class, "_pyzyme_keys", None)
    return None


@overload(operator.getitem, prefer_literal=True)
def _dict_getitem(d, key):
    keys = _pytree_keys(d)
    if keys is None or not isinstance(key, types.StringLiteral):
        return None
    if key.literal_value not in keys:
        raise KeyError(f"{key.literal_value!r} is not a key of this dict (its keys are "
                       f"{list(keys)})")
    index = keys.index(key.literal_value)

    def getitem(d, key):
        return d[index]

    return getitem
