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
from pyzyme.analysis.activity import Activity
from pyzyme.api.plans import current_rules
from pyzyme.frontends.numba.derive.reverse import CONST, DUPLICATED, reverse_module
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


@numba.njit
def centred_remainders(m, x):
    """As centred_products, the row a remainder (LLVM's frem): rebuilt, not cached, too."""
    n, d = x.shape
    xc = np.empty(d)
    s = 0.0
    for p in range(n):
        for k in range(m.shape[0]):
            for j in range(d):
                xc[j] = np.fmod(x[p, j] - m[k, j], 0.75)
            for i in range(d):
                for j in range(i + 1, d):
                    s += math.sin(xc[i] * xc[j])
    return s


def _double_caches(f, m, x) -> list[str]:
    """The loops with a cache of type double, from the printed tape."""
    tape = str(reverse_module(f, [numba.typeof(m), numba.typeof(x)], [DUPLICATED, CONST],
                              Activity.ACTIVE, True, current_rules()).tape)
    return [line.split(":")[0].strip() for line in tape.splitlines()
            if "caches" in line and "double" in line.split("caches", 1)[1]]


@pytest.mark.parametrize("f, forwarded", [(centred_products, True), (centred_remainders, True),
                                          (row_changed_in_between, False),
                                          (row_from_changing_memory, False)])
def test_gradient_and_tape(f, forwarded):
    rng = np.random.default_rng(5)
    m, x = rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((5, 4)) * 0.5
    assert (_double_caches(f, m, x) == []) is forwarded
    dm = np.zeros_like(m)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(m.copy(), dm), Const(x))
    check_gradient(f, m, x, dm, fd_atol=1e-8)


def _fill_then_read(fill_start: int, read: str):
    """A row refilled from ``fill_start`` on for each weight, then read by ``read``; the
    entries below the fill's start stay zero."""
    from tests.kernels import njit_source
    return njit_source(f"""
import math
def f(w, x):
    n = x.shape[0]
    t = np.zeros(n)
    s = 0.0
    for k in range(w.shape[0]):
        for j in range({fill_start}, n):
            t[j] = x[j] * w[k]
{read}
    return s
""")


READS = {
    "one loop": """
        for i in range({start}, n):
            s += math.sin(t[i] * w[k])""",
    "a triangle": """
        for i in range(n):
            for j in range(i + {start}, n):
                s += math.sin(t[j] * w[k])""",
}


@pytest.mark.parametrize("fill_start", [0, 2])
@pytest.mark.parametrize("read_start", [0, 1, 3])
@pytest.mark.parametrize("read", sorted(READS))
def test_reads_below_the_fill_are_not_forwarded(fill_start, read_start, read):
    """Reading from below where the fill starts reads zeros the fill never wrote: the load
    stays cached there; the gradient agrees with forward mode at every size (rows empty,
    partly filled, or full). Forwarding is found for the plain loop over the fill's own
    range; in the other shapes LLVM rewrites the reading loop's exit test so that its bound
    is no longer the fill's, and the load stays cached (the start rule itself is tested by
    printed form in tests/analysis/test_forwarding.py). Whatever the analysis decides, the
    gradients must agree."""
    f = _fill_then_read(fill_start, READS[read].format(start=read_start))
    cached = _double_caches(f, np.zeros(3), np.zeros(4))
    if read_start < fill_start:
        assert cached, "a read below the fill's start was forwarded"
    if read == "one loop" and read_start == fill_start:
        assert cached == [], cached
    for n in (0, 1, 2, 3, 6):
        rng = np.random.default_rng(n)
        w, x = rng.standard_normal(3) * 0.7, rng.standard_normal(n)
        dw = np.zeros_like(w)
        pyzyme.autodiff(Reverse, f, Active, Duplicated(w.copy(), dw), Const(x))
        for k in range(w.size):
            t = np.zeros_like(w)
            t[k] = 1.0
            _, tangent = pyzyme.autodiff(pyzyme.Forward, f, Duplicated(w.copy(), t),
                                         Const(x))
            assert dw[k] == pytest.approx(tangent, rel=1e-12, abs=1e-13), (n, k)
