"""pyzyme.testing.check_grads: passes on right derivatives (first and second order, every
result shape), and on a wrong one names the input direction that is wrong, with both values."""

import math

import numba
import numpy as np
import pytest

from pyzyme import rules
from pyzyme.testing import check_grads


@numba.njit
def mixed(x, y, n):
    s = 0.0
    for i in range(n):
        s += math.sin(x[i] * y) + x[i] ** 3
    return s


def test_right_derivatives_pass_at_first_and_second_order():
    x = np.array([0.3, -1.1, 0.7])
    check_grads(mixed, (x, 1.3, 3), order=2)
    check_grads(lambda a: a * a[::-1, ::-1], (np.arange(1.0, 7.0).reshape(2, 3) / 5,))
    check_grads(lambda a, b: (a * b, a + b * b), (0.5, -2.0), modes=("rev",))
    check_grads(lambda a: np.sum(a ** 2) * a[0], (np.array([0.2, 0.4], np.float32),),
                modes="fwd")


# a rule that is right for the first derivative only where x[1] is unused: cube(v[0])'s
# forward rule says 3 x instead of 3 x^2
@numba.njit
def cube(x):
    return x ** 3


@rules.forward(cube)
@numba.njit
def cube_fwd(config, x, dx):
    return x ** 3, 3.0 * x * dx


@rules.augmented_primal(cube)
@numba.njit
def cube_aug(config, x, dx):
    return x ** 3, None, None


@rules.reverse(cube)
@numba.njit
def cube_rev(config, dret, tape, x, dx):
    return dret * 3.0 * x * x      # right in reverse mode


@numba.njit
def uses_cube(v):
    return cube(v[0]) + v[1] * v[2]


def test_a_wrong_forward_rule_is_named_by_its_input_direction():
    v = np.array([2.0, 1.5, -0.5])
    check_grads(uses_cube, (v,), modes=("rev",))           # reverse mode is right
    with pytest.raises(AssertionError) as info:
        check_grads(uses_cube, (v,), modes=("fwd", "rev"))
    lines = str(info.value).splitlines()
    assert "forward mode's derivative differs from finite differences along 1 of 3" in lines[0]
    bad = [line for line in lines if "<-- differs" in line]
    assert len(bad) == 1 and "d/d v[0] (argument 'v' (position 0))" in bad[0]
    # both values shown: 3 x = 6 by the rule, 3 x^2 = 12 by differences
    assert "fwd 6.0" in bad[0] and "FD 12.0" in bad[0]
    assert any("d/d v[2]" in line and "fwd 1.5, FD 1.5" in line for line in lines)


@numba.njit
def half_ramp_squared(x, y):
    r = max(x, 0.0)
    return y * r * r / 2.0


def test_a_kink_in_the_first_derivative_is_found_at_order_two_only():
    # f_x = y max(x, 0) is continuous, so order 1 agrees at x = 0; f_xx jumps from 0 to y
    # there: differences straddle the jump (y / 2), AD takes one side
    check_grads(half_ramp_squared, (0.0, 2.0), order=1, atol=1e-3)    # FD: O(h) at the kink
    for mode, word in (("fwd", "forward"), ("rev", "reverse")):
        with pytest.raises(AssertionError, match=rf"forward mode over {word} mode's second "
                                                 rf"derivative") as info:
            check_grads(half_ramp_squared, (0.0, 2.0), order=2, modes=(mode,), atol=1e-3)
        lines = str(info.value).splitlines()
        assert "along 1 of 2 input directions" in lines[0]
        bad = [line for line in lines if "<-- differs" in line]
        assert len(bad) == 1 and bad[0].startswith("  d/d x (argument 'x' (position 0)): ")
        fd = float(bad[0].split("FD {d/d x (argument 'x' (position 0)): ")[1].split(",")[0])
        assert fd == pytest.approx(1.0, rel=1e-6)
        assert any(line.startswith("  d/d y (argument 'y' (position 1))") for line in lines)


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="tuple"):
        check_grads(mixed, np.ones(3))
    with pytest.raises(ValueError, match="order"):
        check_grads(mixed, (np.ones(3), 1.0, 3), order=3)
    with pytest.raises(ValueError, match="modes"):
        check_grads(mixed, (np.ones(3), 1.0, 3), modes=("forward",))
    with pytest.raises(ValueError, match="no float"):
        check_grads(lambda n: 1.0 * n, (3,))
