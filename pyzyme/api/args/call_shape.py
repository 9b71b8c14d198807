"""The shape of a call of plain arguments: what :func:`~pyzyme.autodiff` needs to find a
compiled derivative again without its general per-argument work.

Most calls pass floats, ints and NumPy float arrays whose shadows are arrays laid out like
them. For those the general path (annotations unpacked into primal and shadow values, shadow
views made for mismatched strides, structured values flattened, every Numba type worked out)
does nothing that the types of the arguments did not already decide, yet it costs tens of
microseconds a call: more than the derivative of a small function. :func:`call_shape` reads
such a call in one pass and says what decides its derivative; anything else gives None and
takes the general path, which also raises the errors.

Examples
--------
>>> import numpy as np
>>> from pyzyme.api.annotations import Active, Const, Duplicated
>>> x, dx = np.ones(3), np.zeros(3)
>>> shape = call_shape([Duplicated(x, dx), Active(2.0), Const(5)])
>>> shape.types
[Array(float64, 1, 'C', False, aligned=True), float64, int64]
>>> shape.distinct, shape.primals, shape.shadows == (dx,)
(True, [array([1., 1., 1.]), 2.0, 5], True)
>>> call_shape([Duplicated(x, x)]) is None   # shares memory with its shadow: the general path
True
>>> call_shape([5]).key == call_shape([Const(5)]).key   # a plain value is a Const
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyzyme.api import annotations as A
from pyzyme.api.args.typeof import argument_type, array_key

__all__ = ["CallShape", "call_shape", "read_call", "share_memory"]

_DUPLICATED = (A.Duplicated, A.DuplicatedNoNeed)
_SCALARS = (float, int, np.float64)
_ANNOTATIONS = frozenset((A.Const, A.Active, *_DUPLICATED))
# Module-level names, read once: read_call runs on every call from Python.
_CONST, _ACTIVE, _NDARRAY = A.Const, A.Active, np.ndarray


@dataclass(slots=True)
class CallShape:
    """A call of plain arguments, read once.

    ``key`` holds per argument its annotation class and what decides its Numba type (for an
    array its dtype, dimensions, contiguity, writeability and alignment): with ``distinct``
    (no two arrays of the call share memory) it decides which derivative the call needs.
    ``primals`` and ``shadows`` are what that derivative takes, in order.
    """

    key: tuple
    distinct: bool
    primals: list
    shadows: tuple

    @property
    def classes(self) -> list[type]:
        """The annotation class of each argument."""
        return [k[0] for k in self.key]

    @property
    def types(self) -> list:
        """The Numba type of each argument."""
        return [argument_type(v) for v in self.primals]


def call_shape(anns) -> CallShape | None:
    """The shape of a call of ``anns`` (annotations, or plain values, which are ``Const``), or
    None unless each is a ``Const`` float, int or NumPy array, an ``Active`` float, or a
    ``Duplicated`` float or float array whose shadow is a separate writeable array with its
    shape, dtype and strides (or a float)."""
    read = read_call(anns)
    return None if read is None else CallShape(*read)


def read_call(anns) -> tuple | None:
    """:func:`call_shape`'s fields as a tuple ``(key, distinct, primals, shadows)``: what a
    call whose derivative is ready needs, without making the object."""
    key, primals, shadows, arrays = [], [], [], []
    for a in anns:
        cls = type(a)
        if cls in _ANNOTATIONS:
            v = a.val
        else:
            cls, v = _CONST, a
        vt = type(v)
        if vt is float:
            key.append((cls, vt))
        elif vt is _NDARRAY:
            key.append((cls, *array_key(v)))
        elif vt in _SCALARS and (vt is not int or -2 ** 63 <= v < 2 ** 63):
            key.append((cls, vt))
        else:
            return None
        if cls is _CONST:
            if vt is _NDARRAY and v.size:
                arrays.append((v,))
        elif cls is _ACTIVE:
            if vt is not float:
                if vt is int or vt is _NDARRAY:
                    return None  # converted, or refused (an array is mutable), by the general path
                v = float(v)
        elif cls in _DUPLICATED:
            d = a.dval
            if vt is not _NDARRAY:
                if type(d) not in (float, np.float64) or vt is int:
                    return None
                v, d = float(v), float(d)
            else:
                if type(d) is not _NDARRAY:
                    return None
                flags = d.flags
                if not (v.dtype.kind == "f" and d.dtype == v.dtype and d.shape == v.shape
                        and d.strides == v.strides and flags.writeable and flags.aligned):
                    return None
                if v.size:
                    if np.may_share_memory(v, d):
                        return None  # an error, which the general path raises
                    arrays.append((v, d))
            shadows.append(d)
        else:
            return None
        primals.append(v)
    # An argument's array and its shadow were checked apart above; each pair of arguments here.
    distinct = len(arrays) < 2 or not _arguments_share_memory(arrays)
    return tuple(key), distinct, primals, tuple(shadows)


def _arguments_share_memory(groups: list[tuple]) -> bool:
    """Whether an array of one of ``groups`` may share memory with one of another group."""
    for i, group in enumerate(groups):
        for other in groups[i + 1:]:
            for a in group:
                for b in other:
                    if np.may_share_memory(a, b):
                        return True
    return False


def share_memory(arrays) -> bool:
    """Whether any two of ``arrays`` may share memory (then array data cannot be
    ``noalias``)."""
    return any(np.may_share_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:])
