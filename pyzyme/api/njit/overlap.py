"""Whether two arrays share memory, asked inside ``@njit`` code (the derivatives that take
array data as ``noalias`` may only be called when no two arrays overlap)."""

from __future__ import annotations

import numba

__all__ = ["overlap", "any_overlap"]


@numba.njit
def _span(a):
    lo = a.ctypes.data
    hi = lo
    for d in range(a.ndim):
        extent = (a.shape[d] - 1) * a.strides[d]
        if extent < 0:
            lo += extent
        else:
            hi += extent
    return lo, hi + a.itemsize


@numba.njit
def overlap(a, b):
    """Whether the memory spans of arrays ``a`` and ``b`` intersect (empty arrays: never)."""
    if a.size == 0 or b.size == 0:
        return False
    alo, ahi = _span(a)
    blo, bhi = _span(b)
    return alo < bhi and blo < ahi


def any_overlap(names, call: str = "overlap") -> str:
    """Source for generated ``@njit`` code: true where two of the arrays named in ``names``
    overlap (``call``: the name :func:`overlap` is bound to there).

    >>> any_overlap(["x", "y", "z"])
    'overlap(x, y) or overlap(x, z) or overlap(y, z)'
    """
    return " or ".join(f"{call}({a}, {b})" for k, a in enumerate(names) for b in names[k + 1:])
