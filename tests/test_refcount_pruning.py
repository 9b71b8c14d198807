"""Numba's reference-count pairs on a function's array arguments are pruned before
differentiation, also where an inlined callee can raise (GradBench's ba residual: a division by
the depth in its projection), so no derivative mirrors them onto the shadows; a count that keeps
an array alive (a returned view) stays."""

import math
import os
import re
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, BatchDuplicated, Const, Duplicated, Forward, Reverse, autodiff
from pyzyme.runtime.modules import parse
from pyzyme.runtime.raising_blocks import mark_raising_stores

RTOL, ATOL = 1e-6, 1e-8


@numba.njit
def _project(cam, X):
    """A callee Numba inlines, which raises ZeroDivisionError where the depth is 0."""
    depth = X[2] - cam[2]
    return (X[0] - cam[0]) / depth, (X[1] - cam[1]) / depth


@numba.njit
def residual(q, feat):
    """ba's shape: one block of parameters, sliced and indexed; a scalar out."""
    a, b = _project(q, q[3:6])
    w = q[6]
    return w * (a - feat[0]) ** 2 + w * math.sin(b - feat[1])


def _counts(text):
    return (len(re.findall(r"call[^@\n]*@NRT_incref\b", text)),
            len(re.findall(r"call[^@\n]*@NRT_decref\b", text)))


Q = np.array([0.1, -0.2, 0.3, 1.0, 2.0, 4.0, 0.8])
FEAT = np.array([0.2, 0.5])


def _central(f, x, h=1e-6):
    g = np.empty_like(x)
    for i in range(x.shape[0]):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        g[i] = (f(up, FEAT) - f(down, FEAT)) / (2 * h)
    return g


def test_reverse_derivative_has_no_refcount_pairs():
    text = pyzyme.code_llvm(Reverse, residual, Active, Duplicated(Q, np.zeros_like(Q)),
                            Const(FEAT), optimized=True)
    assert _counts(text) == (0, 0)


@pytest.mark.parametrize("width", [1, 4])
def test_forward_derivative_has_no_refcount_pairs(width):
    arg = (Duplicated(Q, np.zeros_like(Q)) if width == 1
           else BatchDuplicated(Q, [np.zeros_like(Q) for _ in range(width)]))
    text = pyzyme.code_llvm(Forward, residual, arg, Const(FEAT), optimized=True)
    assert _counts(text) == (0, 0)


def test_values_against_central_differences():
    expected = _central(residual, Q)
    dq = np.zeros_like(Q)
    autodiff(Reverse, residual, Active, Duplicated(Q, dq), Const(FEAT))
    np.testing.assert_allclose(dq, expected, rtol=RTOL, atol=ATOL)
    seeds = list(np.eye(Q.shape[0])[:4])
    primal, lanes = autodiff(Forward, residual, BatchDuplicated(Q, seeds), Const(FEAT))
    assert primal == pytest.approx(residual(Q, FEAT), rel=1e-12)
    np.testing.assert_allclose(lanes, expected[:4], rtol=RTOL, atol=ATOL)


def test_raising_derivative_still_raises():
    q = Q.copy()
    q[5] = q[2]  # depth 0
    with pytest.raises(ZeroDivisionError):
        autodiff(Reverse, residual, Active, Duplicated(q, np.zeros_like(q)), Const(FEAT))
    with pytest.raises(ZeroDivisionError):
        autodiff(Forward, residual, Duplicated(q, np.ones_like(q)), Const(FEAT))


# A returned view keeps its argument alive: its count must survive the pruning. The argument is
# allocated by Numba (its lifetime is NRT's), dropped by Python while the views live, and
# other arrays are allocated over it; the views must still read its values, and once they are
# dropped every allocation must have been freed.
SCRIPT = textwrap.dedent("""
    import numba
    import numpy as np
    from numba.core.runtime import rtsys
    from pyzyme import Duplicated, ForwardWithPrimal, autodiff

    @numba.njit
    def _project(cam, X):
        depth = X[2] - cam[2]
        return (X[0] - cam[0]) / depth, (X[1] - cam[1]) / depth

    @numba.njit
    def tail(q):
        a, b = _project(q, q[3:6])
        v = q[1:]
        v[0] = a * b
        return v

    @numba.njit
    def make(n, c):
        return np.arange(n) * c

    make(7, 1.0)
    autodiff(ForwardWithPrimal, tail, Duplicated(make(7, 1.0), make(7, 0.0)))
    before = rtsys.get_allocation_stats()
    kept = []
    for i in range(200):
        x, dx = make(7, 1.0 + i), make(7, 1.0)
        kept.append((i, autodiff(ForwardWithPrimal, tail, Duplicated(x, dx))))
        del x, dx
    junk = [make(7, -1.0) for _ in range(400)]
    ok = True
    for i, (v, dv) in kept:
        c = 1.0 + i
        ok &= np.allclose(v, [1.0, 2 * c, 3 * c, 4 * c, 5 * c, 6 * c])  # a = b = 1
        ok &= np.allclose(dv, [0.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    del kept, junk, v, dv
    after = rtsys.get_allocation_stats()
    print(int(ok), (after.alloc - before.alloc) - (after.free - before.free),
          (after.mi_alloc - before.mi_alloc) - (after.mi_free - before.mi_free))
""")


def test_returned_view_keeps_its_count():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env={**os.environ, "NUMBA_NRT_STATS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    ok, leaked, leaked_meminfos = map(int, out.stdout.split())
    assert ok == 1
    assert (leaked, leaked_meminfos) == (0, 0)


def _function(raise_block: str, status: str) -> str:
    return "\n".join([
        "define i32 @f(ptr %retptr, ptr %excinfo, i1 %c, i1 %d) {",
        "entry:",
        "  br i1 %c, label %bad, label %common.ret",
        raise_block,
        "after:",
        "  store ptr null, ptr %excinfo, align 8",
        "  br label %common.ret",
        "common.ret:",
        f"  %status = phi i32 [ 0, %entry ], [ {status}, %bad ], [ 0, %after ]",
        "  ret i32 %status",
        "}"])


@pytest.mark.parametrize("block, status, marked", [
    ("bad:\n  store ptr @exc, ptr %excinfo, align 8\n  br label %common.ret", "1", True),
    ("bad:\n  store ptr @exc, ptr %excinfo, align 8\n  br label %common.ret", "-1", True),
    # a return of None (-2) or success, a cleared excinfo: not raising
    ("bad:\n  store ptr @exc, ptr %excinfo, align 8\n  br label %common.ret", "-2", False),
    ("bad:\n  store ptr @exc, ptr %excinfo, align 8\n  br label %common.ret", "0", False),
    ("bad:\n  store ptr null, ptr %excinfo, align 8\n  br label %common.ret", "1", False),
    # a caught exception goes on (to a handler), not to a return
    ("bad:\n  store ptr @exc, ptr %excinfo, align 8\n  br i1 %d, label %after, label %common.ret",
     "1", False),
    ("bad:\n  store ptr @exc, ptr %excinfo, align 8\n  br label %after", "1", False),
])
def test_raising_stores_are_marked_only_where_the_block_raises(block, status, marked):
    text = _function(block, status)
    out = mark_raising_stores(text)
    assert ("!numba_exception_output" in out) == marked
    if marked:  # what LLVM reads, and only the exception's store carries the mark
        [line] = [ln for ln in out.splitlines() if "numba_exception_output" in ln]
        assert "@exc" in line
        parse("@exc = external global i8\n" + out)
