"""autodiff_thunk: the forward thunk, and split reverse mode with its tape."""

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

from pyzyme import (
    Active, Const, Duplicated, DuplicatedNoNeed, Forward, PyzymeError, Reverse,
    ReverseSplitNoPrimal, ReverseSplitWithPrimal, autodiff, autodiff_thunk,
)
from tests.kernels import matmul


def seed_f(A, v):
    res = A[0] * v
    A[0] = 0.0
    return res


def test_seed_example_overwritten_between_the_passes():
    A = np.array([2.2])
    dA = np.zeros(1)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, seed_f, Active, Duplicated(A, dA),
                              Active(3.3))
    tape, result, shadow_result = fwd(Duplicated(A, dA), Active(3.3))
    assert A[0] == 0.0 and shadow_result is None
    (none, dv), = rev(Duplicated(A, dA), Active(3.3), 1.0, tape)
    assert none is None
    assert (result, dv) == (pytest.approx(7.26), pytest.approx(2.2))
    np.testing.assert_allclose(dA, [3.3])


def test_forward_thunk_gives_the_seed_results():
    square = lambda x: x * x  # noqa: E731
    fwd = autodiff_thunk(Forward, square, Duplicated, Duplicated(1.0, 1.0))
    assert fwd(Duplicated(3.14, 1.0)) == pytest.approx((9.8596, 6.28))
    fwd = autodiff_thunk(Forward, square, DuplicatedNoNeed, Duplicated(1.0, 1.0))
    assert fwd(Duplicated(3.14, 1.0)) == pytest.approx((6.28,))


@numba.njit
def series(x, c, n):
    s = 0.0
    t = 1.0
    for i in range(1, n):
        t = t * x / i + c[i % c.shape[0]]
        if t > 1.0:
            t = np.sqrt(t)
        s += t * t
    return s


def test_split_matches_combined_on_loops_and_branches():
    c = np.linspace(0.1, 0.9, 7)
    dc_split, dc_comb = np.zeros(7), np.zeros(7)
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, series, Active, Active(1.3),
                              Duplicated(c, dc_split), Const(40))
    tape, primal, _ = fwd(Active(1.3), Duplicated(c, dc_split), Const(40))
    assert primal is None
    (dx_split, _, _), = rev(Active(1.3), Duplicated(c, dc_split), Const(40), 2.0, tape)
    (dx_comb, _, _), = autodiff(Reverse, series, Active, Active(1.3), Duplicated(c, dc_comb),
                                Const(40))
    assert dx_split == pytest.approx(2.0 * dx_comb, rel=1e-13)
    np.testing.assert_allclose(dc_split, 2.0 * dc_comb, rtol=1e-13)


def test_split_vjp_of_a_function_writing_its_output():
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((5, 3)), rng.standard_normal((3, 4))
    C = np.zeros((5, 4))
    dA, dB, dC = np.zeros_like(A), np.zeros_like(B), np.zeros_like(C)
    args = (Duplicated(A, dA), Duplicated(B, dB), Duplicated(C, dC))
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, matmul, Const, *args)
    tape, _, _ = fwd(*args)
    A_before = A.copy()
    A[:] = 0.0  # the reverse pass must use what the forward pass saw
    seed = rng.standard_normal((5, 4))
    dC[:] = seed
    rev(*args, tape)
    np.testing.assert_allclose(dA, seed @ B.T, rtol=1e-13)
    np.testing.assert_allclose(dB, A_before.T @ seed, rtol=1e-13)


def test_a_tape_is_used_once_and_only_with_its_thunk():
    A, dA = np.array([2.2]), np.zeros(1)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, seed_f, Active, Duplicated(A, dA),
                              Active(3.3))
    tape, _, _ = fwd(Duplicated(A, dA), Active(3.3))
    assert tape.nbytes > 0 and "bytes" in repr(tape)
    rev(Duplicated(A, dA), Active(3.3), 1.0, tape)
    assert tape.consumed
    with pytest.raises(PyzymeError, match="already used"):
        rev(Duplicated(A, dA), Active(3.3), 1.0, tape)
    _, other_rev = autodiff_thunk(ReverseSplitWithPrimal, series, Active, Active(1.0),
                                  Duplicated(np.ones(3), np.zeros(3)), Const(5))
    tape2, _, _ = fwd(Duplicated(A, dA), Active(3.3))
    with pytest.raises(PyzymeError, match="another"):
        other_rev(Active(1.0), Duplicated(np.ones(3), np.zeros(3)), Const(5), 1.0, tape2)
    tape2.free()
    with pytest.raises(PyzymeError, match="already used"):
        rev(Duplicated(A, dA), Active(3.3), 1.0, tape2)


def dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


def test_thunks_follow_whether_the_arrays_share_memory():
    """Arrays apart run the build that takes them as noalias (as ``autodiff`` does); arrays
    that overlap run the build that does not, with the same values. A tape made apart is
    refused by a reverse call whose arrays overlap; one made on overlapping arrays serves
    any call."""
    x, y = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, dot, Active, Duplicated(x, x * 0),
                              Duplicated(y, y * 0))
    tape_apart, r, _ = fwd(Duplicated(x, x * 0), Duplicated(y, y * 0))
    assert r == 32.0
    a = np.array([1.0, 2.0, 3.0])
    da, db = np.zeros(3), np.zeros(3)
    tape_shared, r, _ = fwd(Duplicated(a, da), Duplicated(a, db))
    assert r == 14.0 and tape_shared.plan is not tape_apart.plan
    rev(Duplicated(a, da), Duplicated(a, db), 1.0, tape_shared)
    np.testing.assert_array_equal(da, a)
    np.testing.assert_array_equal(db, a)
    with pytest.raises(PyzymeError, match="share no memory"):
        rev(Duplicated(a, da), Duplicated(a, db), 1.0, tape_apart)
    dx, dy = np.zeros(3), np.zeros(3)
    rev(Duplicated(x, dx), Duplicated(y, dy), 1.0, tape_apart)
    np.testing.assert_array_equal(dx, y)
    np.testing.assert_array_equal(dy, x)
    tape_shared, _, _ = fwd(Duplicated(a, da), Duplicated(a, db))
    dx, dy = np.zeros(3), np.zeros(3)
    rev(Duplicated(x, dx), Duplicated(y, dy), 1.0, tape_shared)
    np.testing.assert_array_equal(dx, a)    # what the forward sweep read
    np.testing.assert_array_equal(dy, a)


def test_thunks_check_argument_types():
    A, dA = np.array([2.2]), np.zeros(1)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, seed_f, Active, Duplicated(A, dA),
                              Active(3.3))
    with pytest.raises(PyzymeError, match="made for arguments"):
        fwd(Duplicated(np.ones((1, 1)), np.zeros((1, 1))), Active(3.3))
    tape, _, _ = fwd(Duplicated(A, dA), Active(3.3))
    with pytest.raises(PyzymeError, match="seed"):
        rev(Duplicated(A, dA), Active(3.3), tape)


def test_unused_tapes_free_what_they_keep_alive():
    script = textwrap.dedent("""
        import gc
        import numba
        import numpy as np
        from numba.core.runtime import rtsys
        from pyzyme import Active, Duplicated, ReverseSplitWithPrimal, autodiff_thunk

        @numba.njit
        def f(x):
            t = np.empty(x.shape[0])
            s = 0.0
            for i in range(x.shape[0]):
                t[i] = np.sin(x[i]) * s + 1.0
                s += t[i]
            return s

        x = np.linspace(0.1, 1.0, 100)
        dx = np.zeros_like(x)
        f(x)
        fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated(x, dx))
        fwd(Duplicated(x, dx))
        gc.collect()
        before = rtsys.get_allocation_stats()
        for _ in range(20):
            fwd(Duplicated(x, dx))  # the tape is dropped at once
        gc.collect()
        after = rtsys.get_allocation_stats()
        print((after.alloc - before.alloc) - (after.free - before.free))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "NUMBA_NRT_STATS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == 0


@pytest.mark.parametrize("mode", [ReverseSplitWithPrimal, ReverseSplitNoPrimal])
def test_autodiff_of_a_split_mode_points_to_autodiff_thunk(mode):
    # split modes exist, through autodiff_thunk: the error says so rather than "not
    # implemented yet"
    with pytest.raises(PyzymeError, match=r"autodiff_thunk\(ReverseSplit") as info:
        autodiff(mode, seed_f, Active, Duplicated(np.array([2.2]), np.zeros(1)), Active(3.3))
    assert "not implemented" not in str(info.value)
