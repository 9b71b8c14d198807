"""Reverse mode of functions that build Python lists and grow them (``append``, ``extend``,
``insert``), shrink them (``pop``, ``del``): a list of integers needs no shadow; a list of
floats (or of arrays) gets a shadow list whose block moves with the primal's, the old blocks
kept until the reverse sweep has read the adjoints of the items made before each move.

Each derivative is checked against forward mode and central finite differences, at sizes on
both sides of the list's first reallocations (Numba grows a list to ``n + n // 4 + 8``)."""

import numba
import numpy as np
import pytest
from numba.typed import List

import pyzyme
from pyzyme import (
    Active, Const, Duplicated, Forward, Reverse, ReverseSplitWithPrimal, UnsupportedError,
    autodiff, autodiff_thunk,
)

SIZES = (0, 1, 9, 10, 60)


@numba.njit
def int_list(x, n):
    ns = [1]
    for i in range(n):
        ns.append(i * 2)
    s = 0.0
    for v in ns:
        s += x * v
    return s


@numba.njit
def int_list_read_before_growing(x, n):
    ns = [n + 3]
    first = ns[0]           # read through the block that the appends below move
    for i in range(n):
        ns.append(i)
    return x * first + x * x * ns[-1]


@numba.njit
def float_list(x, n):
    ys = []
    for i in range(n):
        ys.append(x * i)
    s = 0.0
    for v in ys:
        s += v * v
    return s


@numba.njit
def recurrence(x, n):
    ys = [x]
    for i in range(n):
        ys.append(ys[-1] * x + 0.1 * i)  # an item read, then the block moves
    s = 0.0
    for v in ys:
        s += v
    return s


@numba.njit
def extend_and_pop(x, n):
    ys = [x]
    for i in range(n):
        ys.extend([x * i, ys[-1] * 0.5])
    t = 0.0
    while len(ys) > 1:
        t += ys.pop() * (len(ys) % 3 + 1.0)
    return t + ys[0] * ys[0]


@numba.njit
def insert_and_delete(x, n):
    ys = [x, 2.0 * x, 3.0 * x]
    for i in range(n):
        ys.insert(1, ys[-1] * 0.5 + x * i)
    del ys[0]               # the items move down over it
    s = 0.0
    for i in range(len(ys)):
        s += ys[i] * ys[i] * (i + 1)
    return s


@numba.njit
def list_of_arrays(a, n):
    ys = []
    for i in range(n):
        ys.append(a * (i + 1.0))
    s = 0.0
    for y in ys:
        s += np.sum(y * y) * a[0]
    return s


def _fd(f, x, n, h=1e-6):
    return (f(x + h, n) - f(x - h, n)) / (2 * h)


def _check(f, x, n):
    rev = autodiff(Reverse, f, Active, Active(x), Const(n))[0][0]
    fwd = autodiff(Forward, f, Duplicated, Duplicated(x, 1.0), Const(n))[1]
    np.testing.assert_allclose(rev, fwd, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rev, _fd(f, x, n), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("f", [int_list, int_list_read_before_growing, float_list, recurrence,
                               extend_and_pop, insert_and_delete],
                         ids=lambda f: f.__name__)
def test_growing_lists_against_forward_mode_and_finite_differences(f, n):
    _check(f, 0.9, n)


def test_a_list_of_integers_gets_no_shadow_list():
    # Type analysis finds only integers in its blocks: its growth is the primal's alone.
    ints = pyzyme.code_llvm(Reverse, int_list, Active, Active(0.9), Const(4))
    floats = pyzyme.code_llvm(Reverse, float_list, Active, Active(0.9), Const(4))
    assert "shadow_regrow" not in ints
    assert "shadow_regrow" in floats


@pytest.mark.parametrize("n", (0, 3, 12))
def test_a_list_of_arrays(n):
    a = np.array([0.5, -1.0, 2.0])
    da = np.zeros(3)
    autodiff(Reverse, list_of_arrays, Active, Duplicated(a, da), Const(n))
    fwd = [autodiff(Forward, list_of_arrays, Duplicated, Duplicated(a, e), Const(n))[1]
           for e in np.eye(3)]
    np.testing.assert_allclose(da, fwd, rtol=1e-12, atol=1e-12)
    h = 1e-6
    fd = [(list_of_arrays(a + h * e, n) - list_of_arrays(a - h * e, n)) / (2 * h)
          for e in np.eye(3)]
    np.testing.assert_allclose(da, fd, rtol=1e-6, atol=1e-8)


@numba.njit
def grow_a_list(x):
    acc = []
    for i in range(x.shape[0]):
        acc.append(x[i] * i)
    s = 0.0
    for v in acc:
        s += v * v
    return s


def test_a_list_grown_from_an_array():
    x = np.linspace(0.5, 2.0, 23)
    dx = np.zeros_like(x)
    autodiff(Reverse, grow_a_list, Active, Duplicated(x, dx))
    np.testing.assert_allclose(dx, 2 * x * np.arange(23.0) ** 2, rtol=1e-14)


def test_split_mode_matches_combined_mode():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, recurrence, Active, Active(0.9),
                              Const(5))
    for n in (0, 10, 60):
        tape, result, _ = fwd(Active(0.9), Const(n))
        assert result == pytest.approx(recurrence(0.9, n), rel=1e-14)
        split = rev(Active(0.9), Const(n), 1.0, tape)[0][0]
        combined = autodiff(Reverse, recurrence, Active, Active(0.9), Const(n))[0][0]
        np.testing.assert_allclose(split, combined, rtol=1e-14)


def test_lists_and_their_shadows_are_released(nrt_stats):
    a = np.array([0.5, -1.0, 2.0])
    calls = [lambda: autodiff(Reverse, float_list, Active, Active(0.9), Const(60)),
             lambda: autodiff(Reverse, extend_and_pop, Active, Active(0.9), Const(30)),
             lambda: autodiff(Reverse, list_of_arrays, Active, Duplicated(a, np.zeros(3)),
                              Const(30))]
    for call in calls:
        call()  # compiled before counting
        before = nrt_stats()
        call()
        after = nrt_stats()
        assert after.alloc - before.alloc == after.free - before.free
        assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free


@numba.njit
def typed_list(x, n):
    ys = List()
    for i in range(n):
        ys.append(x * i)
    s = 0.0
    for v in ys:
        s += v * v
    return s


def test_a_typed_list_is_refused_naming_it():
    with pytest.raises(UnsupportedError, match="numba.typed.List"):
        autodiff(Reverse, typed_list, Active, Active(0.9), Const(4))


@numba.njit
def pad(items, k):
    # Recursive, so it stays a call: its appends move the block that its caller filled.
    if k > 1:
        pad(items, k - 1)
    for _ in range(4):
        items.append(0.0)


@numba.njit
def cubes_through_a_callee(x):
    items = [x[0] * x[0]]
    for i in range(1, x.shape[0]):
        items.append(x[i] * x[i])
    pad(items, x.shape[0] // 2)
    s = 0.0
    for i in range(x.shape[0]):
        s += items[i] * x[i]
    return s


@pytest.mark.parametrize("n", (200, 1000))
def test_a_callee_moving_its_callers_list(n, nrt_stats):
    """The callee's reverse sweep used to free the shadow's old block (the caller's), which
    the caller's reverse sweep reads after it: the first items' adjoints were the
    allocator's free-list links."""
    x = np.linspace(0.5, 2.0, n)
    for _ in range(2):  # the second call counted, once compiled
        dx = np.zeros_like(x)
        before = nrt_stats()
        autodiff(Reverse, cubes_through_a_callee, Active, Duplicated(x, dx))
        after = nrt_stats()
        np.testing.assert_allclose(dx, 3 * x * x, rtol=1e-13)
    assert after.alloc - before.alloc == after.free - before.free
    assert after.mi_alloc - before.mi_alloc == after.mi_free - before.mi_free
