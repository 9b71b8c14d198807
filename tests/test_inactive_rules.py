"""Functions marked ``pyzyme.rules.inactive``: their calls carry no derivative, and one that would
write memory carrying derivatives (returning a float array, filling an argument) is refused
rather than leaving that memory's derivative unset (a zero tangent, a crash in reverse mode)."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Forward, Reverse, UnsupportedError, rules


@numba.njit
def scale_of(a):
    return np.sqrt(np.sum(a * a))


@numba.njit
def order_of(a):
    return np.argsort(a)


@numba.njit
def copy_of(a):
    return a.copy()


@numba.njit
def fill(out):
    for i in range(out.shape[0]):
        out[i] = 1.0 + i


for _f in (scale_of, order_of, copy_of, fill):
    rules.inactive(_f)


@numba.njit
def normalized(a):
    # the scale is held constant: d/da = 2a / s, not the derivative of a.a / |a|
    return np.sum(a * a) / scale_of(a)


@numba.njit
def weighted_by_rank(a):
    idx = order_of(a)
    s = 0.0
    for k in range(a.shape[0]):
        s += (k + 1.0) * a[idx[k]] ** 2
    return s


@numba.njit
def with_copy(a):
    return np.sum(a * copy_of(a))


@numba.njit
def filled(a, out):
    fill(out)
    return np.sum(a * out)


def _both(f, a):
    return pyzyme.gradient(Reverse, f, a), np.array(pyzyme.gradient(Forward, f, a))


def test_an_inactive_function_reading_an_array_is_a_constant():
    a = np.array([3.0, -4.0, 12.0])
    for g in _both(normalized, a):
        np.testing.assert_allclose(g, 2 * a / 13.0, rtol=1e-14)


def test_an_inactive_function_returning_integers():
    a = np.array([0.5, -2.0, 1.5])
    rank = np.empty(3)
    rank[np.argsort(a)] = np.arange(1.0, 4.0)
    for g in _both(weighted_by_rank, a):
        np.testing.assert_allclose(g, 2 * rank * a, rtol=1e-14)


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_an_inactive_function_returning_floats_in_memory_is_refused(mode):
    a = np.array([1.0, 2.0])
    with pytest.raises(UnsupportedError, match=r"copy_of, which is marked inactive"):
        pyzyme.gradient(mode, with_copy, a)


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_an_inactive_function_filling_active_memory_is_refused(mode):
    a, out = np.array([1.0, 2.0]), np.zeros(2)
    with pytest.raises(UnsupportedError, match=r"fill, which is marked inactive"):
        if mode is Reverse:
            pyzyme.autodiff(Reverse, filled, pyzyme.Active, pyzyme.Duplicated(a, np.zeros(2)),
                            pyzyme.Duplicated(out, np.zeros(2)))
        else:
            pyzyme.autodiff(Forward, filled, pyzyme.Duplicated, pyzyme.Duplicated(a, np.ones(2)),
                            pyzyme.Duplicated(out, np.ones(2)))
    # with the array it fills held constant, it is a constant
    (_, _), = pyzyme.autodiff(Reverse, filled, pyzyme.Active,
                              pyzyme.Duplicated(a, da := np.zeros(2)), pyzyme.Const(out))
    np.testing.assert_allclose(da, [1.0, 2.0])
