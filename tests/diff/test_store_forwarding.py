"""A load of what a loop before it stored is computed again in the reverse sweep, as that loop
computed it, instead of cached (pyzyme.analysis.forwarding): ADBench's GMM's ``xc`` row in
small, by the tape the derivative prints and against forward mode and finite differences;
where the row is changed in between or is computed from memory that changes, the load is
cached as before, and the derivative is still right."""

import math

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse
from pyzyme.api.autodiff import _rules
from pyzyme.api.numba_reverse import CONST, DUPLICATED, reverse_module
from tests.kernels import check_gradient


@numba.njit
def centred_products(m, x):
    """For each point and centre: the row xc = x[p] - m[k], then products of its entries
    (``xc[j]`` read over a part of the row's range)."""
    n, d = x.shape
    xc = np.empty(d)
    s = 0.0
    for p in range(n):
        for k in range(m.shape[0]):
            for j in range(d):
                xc[j] = x[p, j] - m[k, j]
            for i in range(d):
                for j in range(i + 1, d):
                    s += math.sin(xc[i] * xc[j])
    return s


@numba.njit
def row_changed_in_between(m, x):
    """As above, but the row's first entry is changed after it is filled."""
    n, d = x.shape
    xc = np.empty(d)
    s = 0.0
    for p in range(n):
        for k in range(m.shape[0]):
            for j in range(d):
                xc[j] = x[p, j] - m[k, j]
            xc[0] = xc[0] * 2.0
            for i in range(d):
                for j in range(i + 1, d):
                    s += math.sin(xc[i] * xc[j])
    return s


@numba.njit
def row_from_changing_memory(m, x):
    """The row is filled from ``y``, which is rewritten after the loops."""
    n, d = x.shape
    xc = np.empty(d)
    y = x.copy()
    s = 0.0
    for p in range(n):
        for k in range(m.shape[0]):
            for j in range(d):
                xc[j] = y[p, j] - m[k, j]
            for i in range(d):
                for j in range(i + 1, d):
                    s += math.sin(xc[i] * xc[j])
    y[:] = 0.0
    return s + y[0, 0]


def _double_caches(f, m, x) -> list[str]:
    """The loops with a cache of type double, from the printed tape."""
    tape = str(reverse_module(f, [numba.typeof(m), numba.typeof(x)], [DUPLICATED, CONST],
                              Active, True, _rules()).tape)
    return [line.split(":")[0].strip() for line in tape.splitlines()
            if "caches" in line and "double" in line.split("caches", 1)[1]]


@pytest.mark.parametrize("f, forwarded", [(centred_products, True),
                                          (row_changed_in_between, False),
                                          (row_from_changing_memory, False)])
def test_gradient_and_tape(f, forwarded):
    rng = np.random.default_rng(5)
    m, x = rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((5, 4)) * 0.5
    assert (_double_caches(f, m, x) == []) is forwarded
    dm = np.zeros_like(m)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(m.copy(), dm), Const(x))
    check_gradient(f, m, x, dm, fd_atol=1e-8)
