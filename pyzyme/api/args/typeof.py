"""The Numba type of an argument, without Numba's cost for the common ones.

``numba.typeof`` of a NumPy array builds its ``Array`` type anew on every call (about 15 us,
the largest part of what ``autodiff`` costs beyond the derivative itself on small inputs).
An array's type is a function of its dtype, dimensions, contiguity, writeability and
alignment, so :func:`argument_type` keeps one per combination; plain floats are ``float64``
and ints that fit are ``int64``, as Numba types them.
Everything else goes to ``numba.typeof``.

Examples
--------
>>> import numpy as np
>>> argument_type(np.zeros((2, 3)))
Array(float64, 2, 'C', False, aligned=True)
>>> argument_type(np.zeros((2, 3))[:, ::2]) == numba.typeof(np.zeros((2, 3))[:, ::2])
True
>>> argument_type(1.5), argument_type(7), argument_type(2 ** 63) == numba.typeof(2 ** 63)
(float64, int64, True)
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import types

__all__ = ["argument_type", "array_key"]

_ARRAYS: dict = {}   # (dtype, ndim, C, F, writeable, aligned) -> numba type; bounded by them


def array_key(value: np.ndarray) -> tuple:
    """What Numba's type of the array ``value`` depends on: its dtype, dimensions,
    contiguity, writeability and alignment."""
    flags = value.flags
    return (value.dtype, value.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable,
            flags.aligned)


def argument_type(value) -> types.Type:
    """``numba.typeof(value)``, remembered for NumPy arrays (exactly ``np.ndarray``)."""
    cls = type(value)
    if cls is float:
        return types.float64
    if cls is int and -2 ** 63 <= value < 2 ** 63:
        return types.int64
    if cls is np.ndarray:
        key = array_key(value)
        got = _ARRAYS.get(key)
        if got is None:
            got = _ARRAYS[key] = numba.typeof(value)
        return got
    return numba.typeof(value)
