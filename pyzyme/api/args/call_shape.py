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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyzyme.api import annotations as A
from pyzyme.api.args.typeof import argument_type, array_key

__all__ = ["CallShape", "call_shape", "share_memory"]

_DUPLICATED = (A.Duplicated, A.DuplicatedNoNeed)
_SCALARS = (float, int, np.float64)


@dataclass
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
    """The shape of a call of ``anns`` (annotations), or None unless each is a ``Const`` float,
    int or NumPy array, an ``Active`` float, or a ``Duplicated`` float or float array whose
    shadow is a separate writeable array with its shape, dtype and strides (or a float)."""
    key, primals, shadows, arrays = [], [], [], []
    for a in anns:
        cls, v = type(a), a.val
        vt = type(v)
        if vt is np.ndarray:
            key.append((cls, *array_key(v)))
        elif vt in _SCALARS and (vt is not int or -2 ** 63 <= v < 2 ** 63):
            key.append((cls, vt))
        else:
            return None
        if cls is A.Const:
            if vt is np.ndarray and v.size:
                arrays.append(v)
        elif cls is A.Active:
            if vt is int or vt is np.ndarray:
                return None  # converted, or refused (an array is mutable), by the general path
            v = float(v)
        elif cls in _DUPLICATED:
            d = a.dval
            if vt is not np.ndarray:
                if type(d) not in (float, np.float64) or vt is int:
                    return None
                v, d = float(v), float(d)
            else:
                if type(d) is not np.ndarray:
                    return None
                flags = d.flags
                if not (v.dtype.kind == "f" and d.dtype == v.dtype and d.shape == v.shape
                        and d.strides == v.strides and flags.writeable and flags.aligned):
                    return None
                if v.size:
                    if np.may_share_memory(v, d):
                        return None  # an error, which the general path raises
                    arrays += (v, d)
            shadows.append(d)
        else:
            return None
        primals.append(v)
    return CallShape(tuple(key), not share_memory(arrays), primals, tuple(shadows))


def share_memory(arrays) -> bool:
    """Whether any two of ``arrays`` may share memory (then array data cannot be
    ``noalias``)."""
    return any(np.may_share_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:])
