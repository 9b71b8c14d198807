"""Tapes of recursive functions come from their side stack's arena (pyzyme.diff.tape.arena):
values where a recursion's tapes fill several chunks, where a derivative is called again (the
arena rewinds its chunk), where split mode's tapes are reversed out of the order they were
made in, on another thread, or dropped unreversed, and where one call's loop cache is too big
for a chunk. A determinant by expansion along the first row, whose gradient is the cofactor
matrix ``det(A) inv(A)^T``."""

import gc
import math
import threading

import numba
import numpy as np
import pytest

from pyzyme import (Active, Const, Duplicated, Reverse, ReverseSplitWithPrimal, autodiff,
                    autodiff_thunk, code_llvm, grad)
from pyzyme.diff.tape.arena import CHUNK_BYTES, LARGEST
from pyzyme.runtime.target import side_stacks


@numba.njit
def _minor(a, rows, cols, m):
    """The determinant of ``a``'s rows ``rows[:m]`` and columns ``cols[:m]``, expanded along
    its first row; ``cols`` is permuted in place and put back."""
    if m == 1:
        return a[rows[0], cols[0]]
    total = 0.0
    for k in range(m):
        cols[0], cols[k] = cols[k], cols[0]
        sub = _minor(a, rows[1:], cols[1:], m - 1)
        # The swap leaves the minor's columns a rotation of k away from their order, whose
        # sign, (-1)^(k-1), times the expansion's (-1)^k is -1 for every k but the first.
        total += (1.0 if k == 0 else -1.0) * a[rows[0], cols[0]] * sub
        cols[0], cols[k] = cols[k], cols[0]
    return total


@numba.njit
def det(a):
    n = a.shape[0]
    rows = np.arange(n)
    cols = np.arange(n)
    return _minor(a, rows, cols, n)


def cofactors(a):
    return np.linalg.det(a) * np.linalg.inv(a).T


def matrix(n, seed):
    return np.random.default_rng(seed).standard_normal((n, n))


def test_det_is_the_determinant():
    # The swap-based expansion keeps the minors' column order: check it once against LAPACK.
    a = matrix(6, 1)
    assert det(a) == pytest.approx(np.linalg.det(a), rel=1e-12)


def test_tapes_filling_several_chunks_and_a_call_again():
    # n = 7: 13,700 calls, a tape block and a cache block each, megabytes in all: more than
    # one chunk. The second call cuts from the chunk the first one left (rewound).
    a = matrix(7, 2)
    first = grad(det)(a)
    np.testing.assert_allclose(first, cofactors(a), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(grad(det)(a), first)


def test_split_tapes_reversed_out_of_order_on_another_thread_or_dropped():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, det, Active,
                              Duplicated(matrix(6, 0), np.zeros((6, 6))))
    mats = [matrix(6, 10 + k) for k in range(4)]
    shadows = [np.zeros((6, 6)) for _ in mats]
    tapes = [fwd(Duplicated(m, s))[0] for m, s in zip(mats, shadows)]
    rev(Duplicated(mats[0], shadows[0]), 1.0, tapes[0])       # the first made, first
    worker = threading.Thread(target=rev, args=(Duplicated(mats[2], shadows[2]), 1.0,
                                                tapes[2]))
    worker.start()
    worker.join()
    del tapes[3]                                               # dropped: its blocks freed
    gc.collect()
    rev(Duplicated(mats[1], shadows[1]), 1.0, tapes[1])
    for k in range(3):
        np.testing.assert_allclose(shadows[k], cofactors(mats[k]), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(shadows[3], 0.0)


@numba.njit
def _sines(x, depth):
    if depth == 0:
        return 0.0
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i] * depth)
    return s + 0.5 * _sines(x, depth - 1)


def test_a_cache_too_big_for_a_chunk():
    # Each call caches a value per element: 8 x 30,000 bytes, over the arena's largest block
    # (those come from the tape pool).
    n = 30_000
    assert 8 * n > LARGEST and LARGEST < CHUNK_BYTES
    x = np.random.default_rng(3).standard_normal(n)
    want = sum(0.5 ** (3 - d) * d * np.cos(d * x) for d in (1, 2, 3))
    np.testing.assert_allclose(grad(_sines)(x, 3), want, rtol=1e-12, atol=1e-14)


def test_the_recursion_takes_its_blocks_from_the_arena():
    text = code_llvm(Reverse, det, Active, Duplicated(matrix(4, 0), np.zeros((4, 4))))
    if side_stacks():
        assert "call ptr @pyzyme.tape_arena(" in text
    assert "@pyzyme.tape_arena" not in code_llvm(Reverse, _plain, Active, Active(0.5), Const(3))
    (dx, _), = autodiff(Reverse, _plain, Active, Active(0.5), Const(3))
    assert dx == pytest.approx(3 * 0.5 ** 2 * 2.0, rel=1e-12)


@numba.njit
def _plain(x, n):
    s = 0.0
    for _ in range(n):
        s += x * x * x
    return s * 2.0 / n


@numba.njit
def _damped(a, n):
    if n == 0:
        return a
    return math.sin(_damped(a, n - 1)) * 0.9 + a


@numba.njit(parallel=True)
def _damped_sum(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += _damped(x[i], 6)
    return s


@pytest.mark.parametrize("threads", [1, 2])
def test_a_recursion_in_a_prange_body(threads):
    # The tasks run on the pool's threads, on no side stack: their blocks come from the tape
    # pool instead of an arena.
    x = np.linspace(0.1, 1.0, 200)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        g = grad(_damped_sum)(x)
    finally:
        numba.set_num_threads(before)
    h = 1e-6
    want = [(_damped(v + h, 6) - _damped(v - h, 6)) / (2 * h) for v in x]
    np.testing.assert_allclose(g, want, rtol=1e-7, atol=1e-9)
