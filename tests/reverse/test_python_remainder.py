"""Python's ``x % y`` on floats where the remainder is zero: ``x`` a multiple of ``y``, an angle
``atan2(0, x) % (2 pi)``. Numba gives a signed-zero constant there (the divisor's sign, as
CPython does), so a derivative through it was 0 where ``x % y = x - y floor(x / y)`` has slope
1 in ``x`` and ``-floor(x / y)`` in ``y`` on both sides (poliastro's ``rv2coe`` on an orbit in
the reference plane gave a gradient of 7.1 where differences give 0.34). Checked in reverse
and forward mode against those slopes, the primal's results bit for bit (zeros' signs
included), and a merge whose zero does not stand for the remainder left alone."""

import math

import numba
import numpy as np
import pytest
from numba import prange

from pyzyme import Active, Const, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff

TWO_PI = 2.0 * np.pi


@numba.njit
def remainder(x, y):
    return x % y


@numba.njit
def angle_of(x):
    return x % TWO_PI


@numba.njit
def in_minus_three(x):
    return x % -3.0


@numba.njit
def wrapped_sine(y, x):      # sin is 2 pi-periodic: sin(atan2(y, x) % 2 pi) = y / hypot(x, y)
    return math.sin(math.atan2(y, x) % TWO_PI)


@numba.njit
def summed(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] % y
    return s


@numba.njit(parallel=True)
def summed_in_prange(x, y):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i] % y
    return s


@numba.njit
def squared_unless_zero(x, y):
    r = np.fmod(x, y)            # frem; the zero below is r * r's value there, not r's
    return r * r if r != 0.0 else 0.0


@numba.njit
def single(x):
    return np.float32(x) % np.float32(1.5)


POINTS = [(x, y) for y in (TWO_PI, 1.5, -3.0, -0.75)
          for x in (0.0, -0.0, y, -y, 2.0 * y, -3.0 * y, 0.3 * y, -1.7 * y)]


@pytest.mark.parametrize("x, y", POINTS)
def test_slopes_of_the_remainder_in_both_operands(x, y):
    (dx, dy), = autodiff(Reverse, remainder, Active, Active(x), Active(y))
    assert dx == 1.0
    assert dy == pytest.approx(-math.floor(x / y), abs=1e-12)
    primal, tx = autodiff(Forward, remainder, Duplicated, Duplicated(x, 1.0), Const(y))
    assert tx == 1.0
    # the primal is Python's remainder, the sign of a zero included
    assert primal == x % y and math.copysign(1.0, primal) == math.copysign(1.0, x % y)
    _, ty = autodiff(Forward, remainder, Duplicated, Const(x), Duplicated(y, 1.0))
    assert ty == pytest.approx(-math.floor(x / y), abs=1e-12)


@pytest.mark.parametrize("f, y", [(angle_of, TWO_PI), (in_minus_three, -3.0)])
def test_a_constant_divisor(f, y):
    for x in (0.0, -0.0, y, -y, 5.0 * y, 0.4 * y):
        (dx,), value = autodiff(ReverseWithPrimal, f, Active, Active(x))
        assert dx == 1.0
        assert value == x % y and math.copysign(1.0, value) == math.copysign(1.0, x % y)
        assert autodiff(Forward, f, Duplicated, Duplicated(x, 1.0))[1] == 1.0


def test_an_angle_normalized_on_the_axis():
    for y in (0.0, 0.3, -0.3):
        x = 0.5
        (dy, dx), = autodiff(Reverse, wrapped_sine, Active, Active(y), Active(x))
        r2 = x * x + y * y
        assert dy == pytest.approx(x * x / r2 ** 1.5, rel=1e-12)
        assert dx == pytest.approx(-x * y / r2 ** 1.5, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("f", [summed, summed_in_prange])
def test_in_a_loop_with_a_divisor_known_at_run_time(f):
    y = 0.75
    x = np.array([0.0, 0.75, -1.5, 0.3, 2.25, -0.1, 3.0, 1.1])
    dx = np.zeros_like(x)
    (_, dy), = autodiff(Reverse, f, Active, Duplicated(x, dx), Active(y))
    np.testing.assert_array_equal(dx, np.ones_like(x))
    assert dy == pytest.approx(-np.floor(x / y).sum(), abs=1e-12)


def test_a_zero_that_does_not_stand_for_the_remainder_is_left_alone():
    # r * r has slope 2 r = 0 where r is zero: the constant is right there
    for x, y in ((0.0, 2.0), (4.0, 2.0), (3.0, 2.0)):
        (dx, _), = autodiff(Reverse, squared_unless_zero, Active, Active(x), Active(y))
        r = math.fmod(x, y)
        assert dx == 2.0 * r


def test_single_precision():
    for x in (0.0, 1.5, -3.0, 0.7):
        (dx,), value = autodiff(ReverseWithPrimal, single, Active, Active(x))
        assert dx == 1.0
        assert value == np.float32(x) % np.float32(1.5)
