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

__all__ = ["dict_class", "dict_keys", "keys_of", "to_numba"]

# The keys each class dict_class made stands for (its namedtuple fields are f0, f1, ...). The
# classes live as long as dict_class's cache, so the references need not be weak.
_KEYS: dict[type, tuple[str, ...]] = {}


@functools.lru_cache(maxsize=None)
def dict_class(keys: tuple[str, ...]) -> type:
    """The namedtuple class standing for dicts with exactly these keys, in this order."""
    cls = namedtuple("PytreeDict", [f"f{i}" for i in range(len(keys))])
    _KEYS[cls] = keys
    return cls


def dict_keys(cls: type) -> tuple[str, ...] | None:
    """The keys of the dicts :func:`dict_class` class ``cls`` stands for; None for any other
    class."""
    return _KEYS.get(cls)


def keys_of(d: dict, where: str) -> tuple[str, ...]:
    """The keys of ``d``, checked to be strings."""
    keys = tuple(d)
    for k in keys:
        if not isinstance(k, str):
            raise UnsupportedError(f"{where} is a dict with the key {k!r}; pyzyme passes dicts "
                                   f"with string keys (as namedtuples read by d['key'])")
    return keys


def to_numba(value: Any, where: str = "the argument", lists: bool = False) -> Any:
    """``value`` with every dict in it (in tuples, namedtuples and dicts) made an instance of
    its :func:`dict_class`, so that Numba can take it; with ``lists``, lists become tuples too
    (as ``grad`` passes them: a list of an array and a float has no Numba type).

    Examples
    --------
    >>> to_numba({"w": 1.0, "b": (2.0, {"c": 3.0})})
    PytreeDict(f0=1.0, f1=(2.0, PytreeDict(f0=3.0)))
    >>> to_numba([1.0, [2.0]], lists=True)
    (1.0, (2.0,))
    """
    if isinstance(value, dict):
        keys = keys_of(value, where)
        return dict_class(keys)(*[to_numba(value[k], f"{where}[{k!r}]", lists) for k in keys])
    if (isinstance(value, tuple) or (lists and isinstance(value, list))) and \
            _holds_dict(value, lists):
        items = [to_numba(v, f"{where}[{i}]", lists) for i, v in enumerate(value)]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def _holds_dict(value: Any, lists: bool) -> bool:
    """Whether ``value`` holds something :func:`to_numba` changes."""
    if isinstance(value, dict) or (lists and isinstance(value, list)):
        return True
    return isinstance(value, (tuple, list)) and any(_holds_dict(v, lists) for v in value)


def _pytree_keys(ty) -> tuple[str, ...] | None:
    if isinstance(ty, types.BaseNamedTuple):
        return dict_keys(ty.instance_class)
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
