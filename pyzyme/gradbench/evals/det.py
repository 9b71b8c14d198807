"""GradBench's ``det`` eval: a determinant by expansion by minors, and its gradient.

``primal`` is ``det(A)`` of an ``ell x ell`` matrix (given flat, row-major) computed as cmpad's
``det_by_minor`` does: a recursive expansion along the first row of each minor, with the rows
and columns still in the minor kept as linked lists (``r[i]``, ``c[i]``: the row and column after
``i``; ``r[ell]``, ``c[ell]``: the first) that each call unlinks and relinks in place, so no
minor is ever copied. It costs ``O(ell!)`` multiplications.

``gradient`` is ``d det(A) / dA`` (row-major, flat): one reverse sweep through the recursion of
:func:`_minor`, by ``pyzyme.grad(det)`` called from ``@njit`` code.

Examples
--------
>>> FUNCTIONS["primal"].evaluate({"A": [1.0, 2.0, 3.0, 4.0], "ell": 2})
-2.0
>>> FUNCTIONS["gradient"].evaluate({"A": [1.0, 2.0, 3.0, 4.0], "ell": 2})
[4.0, -3.0, -2.0, 1.0]
"""

import numba
import numpy as np

import pyzyme
from pyzyme.gradbench.protocol import Function, to_json

__all__ = ["FUNCTIONS", "det", "gradient"]


@numba.njit
def _minor(A, m, r, c):
    """The determinant of the ``m x m`` minor of ``A`` whose rows and columns are linked in
    ``r`` and ``c`` (each starting at index ``ell``); ``r`` and ``c`` are left as found."""
    ell = A.shape[0]
    r0 = r[ell]
    cj = c[ell]
    if m == 1:
        return A[r0, cj]
    total = 0.0
    sign = 1.0
    r[ell] = r[r0]          # drop the minor's first row from every sub-minor
    prev = ell              # the column linked before cj
    for _ in range(m):
        c[prev] = c[cj]     # drop column cj
        total += sign * A[r0, cj] * _minor(A, m - 1, r, c)
        c[prev] = cj        # and link it again
        prev = cj
        cj = c[cj]
        sign = -sign
    r[ell] = r0
    return total


@numba.njit
def det(A):
    """The determinant of the square matrix ``A`` by expansion by minors."""
    ell = A.shape[0]
    r = np.empty(ell + 1, dtype=np.intp)
    c = np.empty(ell + 1, dtype=np.intp)
    for i in range(ell + 1):
        r[i] = i + 1
        c[i] = i + 1
    r[ell] = 0
    c[ell] = 0
    return _minor(A, ell, r, c)


_d_det = pyzyme.grad(det)


@numba.njit
def gradient(A):
    """``d det(A) / dA`` by reverse mode."""
    return _d_det(A)


def _prepare(input):
    ell = int(input["ell"])
    return np.array(input["A"], dtype=np.float64).reshape(ell, ell)


FUNCTIONS = {
    "primal": Function(_prepare, det, to_json),
    "gradient": Function(_prepare, gradient, lambda dA: to_json(dA.ravel())),
}
