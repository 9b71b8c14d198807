"""Calls of plain arguments go straight to a derivative compiled for an earlier call of the same
shape (pyzyme.api.args.call_shape): what decides the derivative must be in the shape, and everything
else must take the general path, which gives the same results and raises the same errors."""

import numba
import numpy as np
import pytest
import pyzyme

from pyzyme import (Active, Const, Duplicated, DuplicatedNoNeed, Forward, ForwardWithPrimal,
                    Reverse, ReverseWithPrimal, autodiff)
from pyzyme.api.annotations import BatchDuplicated
from pyzyme.api.args.call_shape import call_shape, share_memory
from pyzyme.errors import PyzymeError, UnsupportedError


@numba.njit
def weighted(x, y, a, n):
    s = 0.0
    for i in range(x.shape[0]):
        s += a * x[i] * y[i] ** n
    return s


@numba.njit
def scale_into(out, x, a):
    for i in range(x.shape[0]):
        out[i] += a * x[i]


def test_shapes_of_plain_calls_and_what_decides_them():
    x, dx, y = np.arange(1.0, 4.0), np.zeros(3), np.ones(3)
    shape = call_shape([Duplicated(x, dx), Const(y), Active(np.float64(2.0)), Const(3)])
    assert shape.distinct
    assert [c.__name__ for c in shape.classes] == ["Duplicated", "Const", "Active", "Const"]
    assert [repr(t) for t in shape.types] == ["Array(float64, 1, 'C', False, aligned=True)",
                                             "Array(float64, 1, 'C', False, aligned=True)",
                                             "float64", "int64"]
    assert type(shape.primals[2]) is float and shape.shadows == (dx,)
    # The layout of an array is part of the key: a strided view is another derivative.
    strided = call_shape([Duplicated(np.zeros(6)[::2], np.zeros(6)[::2])])
    assert strided.key != call_shape([Duplicated(x, dx)]).key
    assert call_shape([Duplicated(x, dx), Const(x[1:])]).distinct is False
    assert call_shape([Duplicated(x, dx), Const(dx[:1])]).distinct is False


@pytest.mark.parametrize("anns", [
    lambda x, dx: [Duplicated(x, np.zeros(6)[::2])],          # shadow strided unlike x
    lambda x, dx: [Duplicated(x, x)],                          # shadow is the primal
    lambda x, dx: [Duplicated(x, dx.astype(np.float32))],      # shadow of another dtype
    lambda x, dx: [Duplicated(x.astype(np.int64), dx)],        # integer array
    lambda x, dx: [Duplicated(x, [0.0, 0.0, 0.0])],            # shadow not an array
    lambda x, dx: [Active(3)],                                 # Active int
    lambda x, dx: [Const(True)],
    lambda x, dx: [Const((1.0, 2.0))],
    lambda x, dx: [Const(2 ** 64)],
    lambda x, dx: [BatchDuplicated(x, (dx, dx))],
    lambda x, dx: [Duplicated(x + 0j, dx + 0j)],
])
def test_everything_else_takes_the_general_path(anns):
    x, dx = np.arange(3.0), np.zeros(3)
    ro = np.zeros(3)
    ro.flags.writeable = False
    assert call_shape(anns(x, dx)) is None
    assert call_shape([Duplicated(x, ro)]) is None


def test_repeated_calls_give_what_the_general_path_gives():
    rng = np.random.default_rng(0)
    for _ in range(3):  # the first call builds, the others go straight to the derivative
        x, y, a = rng.random(5), rng.random(5), float(rng.random())
        dx = np.zeros(5)
        d, value = autodiff(ReverseWithPrimal, weighted, Active, Duplicated(x, dx),
                               Const(y), Active(a), Const(2))
        assert value == pytest.approx(weighted(x, y, a, 2), rel=1e-14)
        np.testing.assert_allclose(dx, a * y ** 2, rtol=1e-14)
        assert d[0] is None and d[1] is None and d[3] is None
        assert d[2] == pytest.approx(np.sum(x * y ** 2), rel=1e-14)
        # A shadow strided unlike its primal takes the general path: the same numbers.
        wide = np.zeros(10)
        autodiff(Reverse, weighted, Duplicated(x, wide[::2]), Const(y), Active(a), Const(2))
        np.testing.assert_allclose(wide[::2], dx, rtol=1e-15)
        tx = rng.random(5)
        got = autodiff(ForwardWithPrimal, weighted, Duplicated(x, tx), Const(y),
                       Duplicated(a, 0.0), Const(2))
        assert got[0] == pytest.approx(value, rel=1e-14)
        assert got[1] == pytest.approx(np.dot(dx, tx), rel=1e-13)
        assert autodiff(Forward, weighted, DuplicatedNoNeed, Duplicated(x, np.zeros(5)),
                        Const(y), Duplicated(a, 1.0), Const(2)) == \
            (pytest.approx(value / a, rel=1e-14),)


def test_overlapping_arrays_get_the_derivative_that_allows_it():
    x = np.arange(1.0, 5.0)
    out, dout, dx = np.zeros(4), np.ones(4), np.zeros(4)
    for _ in range(2):
        dx[:] = 0.0
        autodiff(Reverse, scale_into, Duplicated(out, dout), Duplicated(x, dx), Const(2.0))
        np.testing.assert_array_equal(dx, np.full(4, 2.0))
    # out is x itself now: out[i] += 2 x[i] with x's shadow the same array as out's.
    for _ in range(2):
        y, dy = np.arange(1.0, 5.0), np.ones(4)
        autodiff(Reverse, scale_into, Duplicated(y, dy), Duplicated(y, dy), Const(2.0))
        np.testing.assert_array_equal(y, 3.0 * np.arange(1.0, 5.0))
        np.testing.assert_array_equal(dy, np.full(4, 3.0))


def test_errors_are_raised_on_every_call():
    x = np.arange(3.0)
    for _ in range(2):
        with pytest.raises(PyzymeError, match="shares memory with its primal"):
            autodiff(Forward, weighted, Duplicated(x, x), Const(x), Const(1.0), Const(1))
        with pytest.raises(UnsupportedError, match="a float cannot hold its adjoint"):
            autodiff(Reverse, weighted, Const(x), Const(x), Duplicated(1.0, 0.0), Const(1))
        with pytest.raises(UnsupportedError, match="Active"):
            autodiff(Forward, weighted, Const(x), Const(x), Active(1.0), Const(1))


def test_memory_shared_between_arrays_is_found_whoever_owns_it():
    a, b = np.arange(8.0), np.arange(8.0)
    assert not share_memory([a, b])                 # each owns its data: no pair asked
    assert share_memory([a, a])                     # one array twice
    assert share_memory([a, b, a[2:5]])             # a view of an owner
    assert share_memory([a[1:4], b, a[3:]])         # two views of one array, overlapping
    assert not share_memory([a[:4], a[4:], b])      # two views of one array, apart
    # groups: arrays of one group (an argument and its shadow) are not checked against each
    # other, only against the other groups'
    assert not share_memory([a, a[:2], b], groups=[0, 0, 1])
    assert share_memory([a, b, a[:2]], groups=[0, 1, 2])


@numba.njit
def dot_of(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


def test_grad_of_one_array_passed_twice_is_not_taken_as_two():
    """The plain path's key says whether the arrays are apart: the derivative compiled for
    apart arrays (noalias) is never called with one array twice or with overlapping views."""
    g = pyzyme.grad(dot_of, argnums=(0, 1))
    a, b = np.arange(1.0, 6.0), np.arange(2.0, 7.0)
    for _ in range(2):
        ga, gb = g(a, b)
        np.testing.assert_allclose(ga, b)
        np.testing.assert_allclose(gb, a)
        ga, gb = g(a, a)
        np.testing.assert_allclose(ga, a)
        np.testing.assert_allclose(gb, a)
        whole = np.arange(1.0, 7.0)
        ga, gb = g(whole[:5], whole[1:])
        np.testing.assert_allclose(ga, whole[1:])
        np.testing.assert_allclose(gb, whole[:5])
