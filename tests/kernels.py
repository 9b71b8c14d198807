"""Kernels several test modules differentiate, defined once."""

import numba
import numpy as np


@numba.njit
def matmul(A, B, C):
    """``C = A @ B`` as the triple loop the seed documents differentiate."""
    n, k = A.shape
    m = B.shape[1]
    for i in range(n):
        for j in range(m):
            s = 0.0
            for p in range(k):
                s += A[i, p] * B[p, j]
            C[i, j] = s


@numba.njit
def taylor(x, n):
    """The seed documents' Taylor series ``sum(x ** i / i for i in range(1, n))``."""
    s = 0.0
    for i in range(1, n):
        s += x ** i / i
    return s


def njit_source(source: str, name: str = "f"):
    """``@njit`` of the function ``name`` that ``source`` defines (with ``np`` in scope): the
    property-based tests write their programs as text."""
    scope = {"np": np}
    exec(source, scope)  # noqa: S102
    return numba.njit(scope[name])
