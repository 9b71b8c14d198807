"""Strong zero: a zero adjoint or tangent contributes nothing, even through an infinite partial.

A branch that is not taken, or a ``select`` that drops one arm, leaves a zero seed on values
whose partials are infinite (``sqrt`` at 0, a division by 0, ``log`` at 0); by IEEE rules
``0 * inf`` is NaN and poisons the whole gradient. Each kernel here is checked in both modes
against finite differences (taken away from the kink), and against the NaN IEEE arithmetic
gives with the option off, so the test shows the option is what makes the difference.
"""

import math

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse
from pyzyme.settings import Options, using

IEEE = Options(strong_zero=False)


@numba.njit
def pair_energy(pos):
    """Pairwise 1/r energy, the self-pair skipped by its distance: sqrt(0) on the diagonal."""
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            r = np.sqrt(dx * dx + dy * dy)
            if r > 1e-6:
                e += 1.0 / r
    return e


def _central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[k] += h
        down[k] -= h
        g[k] = (f(up) - f(down)) / (2 * h)
    return g


def _both_modes(f, x):
    rev = pyzyme.gradient(Reverse, f, x)
    fwd = np.array(pyzyme.gradient(Forward, f, x)).reshape(x.shape)
    return rev, fwd


def test_pairwise_distances_skip_the_self_pair_in_both_modes():
    pos = np.random.default_rng(1).random((6, 2))
    rev, fwd = _both_modes(pair_energy, pos)
    expected = _central(pair_energy, pos)
    np.testing.assert_allclose(rev, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fwd, expected, rtol=1e-6, atol=1e-6)
    with using(IEEE):
        assert np.isnan(pyzyme.gradient(Reverse, pair_energy, pos)).all()


@numba.njit
def sum_sqrt_floor(x):
    return np.sum(np.sqrt(np.maximum(0.0, x)))


@numba.njit
def sum_sqrt_where(x):
    # both arms are evaluated: sqrt(-1) is NaN in the arm np.where drops
    return np.sum(np.where(x > 0.0, np.sqrt(x), 0.0))


@pytest.mark.parametrize("f", [sum_sqrt_floor, sum_sqrt_where])
def test_sqrt_of_a_floor_at_zero(f):
    x = np.array([-1.0, 4.0, 0.25])
    rev, fwd = _both_modes(f, x)
    expected = np.array([0.0, 0.25, 1.0])     # 1 / (2 sqrt(x)), 0 below the floor
    np.testing.assert_allclose(rev, expected, rtol=1e-14)
    np.testing.assert_allclose(fwd, expected, rtol=1e-14)
    with using(IEEE):
        ieee = _both_modes(f, x)
    # the floor's zero tangent meets sqrt's infinite partial in forward mode; the dropped
    # arm's zero adjoint meets sqrt's NaN partial (at -1) in reverse mode
    assert np.isnan(ieee[0]).any() or np.isnan(ieee[1]).any()


def guarded_log(x):
    return math.log(x) if x > 0.0 else 0.0


@numba.njit(error_model="numpy")     # a / 0 is inf, as in NumPy, not ZeroDivisionError
def safe_ratio(a, b):
    q = a / b
    return q if b != 0.0 else a


def test_scalar_poles_in_branches_not_taken():
    assert pyzyme.autodiff(Reverse, guarded_log, Active(0.0)) == ((0.0,),)
    assert pyzyme.autodiff(Forward, guarded_log, Duplicated, Duplicated(0.0, 1.0)) == (0.0, 0.0)
    assert pyzyme.autodiff(Reverse, safe_ratio, Active(3.0), Active(0.0)) == ((1.0, 0.0),)
    for da, db, expected in ((1.0, 0.0, 1.0), (0.0, 1.0, 0.0)):
        _, tangent = pyzyme.autodiff(Forward, safe_ratio, Duplicated,
                                     Duplicated(3.0, da), Duplicated(0.0, db))
        assert tangent == expected
    # away from the pole the derivatives are the plain ones
    assert pyzyme.autodiff(Reverse, safe_ratio, Active(3.0), Active(2.0)) == ((0.5, -0.75),)
    with using(IEEE):
        (d,), = pyzyme.autodiff(Reverse, guarded_log, Active(0.0))
    assert math.isnan(d)


@numba.njit(error_model="numpy")
def blend(x, w):
    """A value made infinite (1 / 0) and then multiplied, in a term a select drops."""
    s = 0.0
    for i in range(x.shape[0]):
        inv = 1.0 / x[i]
        t = inv * w[i]
        s += t if x[i] != 0.0 else w[i]
    return s


def test_an_infinite_value_carried_into_a_product():
    x = np.array([0.0, 2.0, -4.0])
    w = np.array([1.0, 3.0, 5.0])
    dx, dw = np.zeros(3), np.zeros(3)
    pyzyme.autodiff(Reverse, blend, Active, Duplicated(x, dx), Duplicated(w, dw))
    np.testing.assert_allclose(dw, [1.0, 0.5, -0.25], rtol=1e-15)
    np.testing.assert_allclose(dx, [0.0, -0.75, -5.0 / 16.0], rtol=1e-15)


def test_hessian_vector_product_through_a_skipped_sqrt():
    pos = np.random.default_rng(2).random((4, 2))
    v = np.random.default_rng(3).random((4, 2))
    hv = pyzyme.hvp(pair_energy, pos, v)
    h = 1e-5
    g = lambda p: pyzyme.gradient(Reverse, pair_energy, p)  # noqa: E731
    expected = (g(pos + h * v) - g(pos - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, expected, rtol=1e-5, atol=1e-5)


@numba.njit
def scaled_ratio(x):
    return (x[0] * x[1] / x[2]) * x[3]


def test_hessian_vector_product_where_an_adjoint_is_zero():
    """At x3 = 0 the adjoint of x0 x1 / x2 is 0, but its derivative along x3 is not: the
    guard on the division's partial 1/x2 must not drop it (H v was 0)."""
    x = np.array([1.0, 2.0, 4.0, 0.0])
    v = np.array([0.3, -0.7, 0.2, 1.0])
    hv = pyzyme.hvp(scaled_ratio, x, v)
    h = 1e-6
    g = lambda p: pyzyme.gradient(Reverse, scaled_ratio, p)  # noqa: E731
    expected = (g(x + h * v) - g(x - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, expected, rtol=1e-7, atol=1e-9)
    assert abs(hv[0] - 0.5) < 1e-12  # d2f/dx3 dx0 = x1 / x2


@numba.njit
def polynomial(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * np.sin(x[i]) - 3.0 * x[i] / 2.0
    return s


def _guards(mode, f, x):
    """The compares with zero in the derivative's IR: strong zero's guards, and any others
    but the tests that skip a loop's reverse where no adjoint reaches it (marked
    ``!pyzyme.zero_adjoint``, pyzyme.diff.reverse.quiet)."""
    ret = Active if mode is Reverse else Duplicated
    shadow = np.zeros_like(x) if mode is Reverse else np.ones_like(x)
    text = pyzyme.code_llvm(mode, f, ret, Duplicated(x, shadow))
    return sum(1 for line in text.splitlines() if ("fcmp oeq" in line or "fcmp une" in line)
               and "!pyzyme.zero_adjoint" not in line)


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_guards_only_where_a_partial_can_be_infinite(mode):
    x = np.array([0.5, 1.5])
    with using(IEEE):
        plain = _guards(mode, polynomial, x), _guards(mode, sum_sqrt_floor, x)
    strong = _guards(mode, polynomial, x), _guards(mode, sum_sqrt_floor, x)
    assert strong[0] == plain[0]        # sin, products, a division by a constant: finite
    assert strong[1] > plain[1]         # sqrt's partial is infinite at 0


@numba.njit     # Python's error model: each / raises ZeroDivisionError on a zero divisor
def pair_potential(pos):
    """A Lennard-Jones-like sum whose divisions Numba guards: no pole left to guard."""
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(n):
            if j != i:
                d = pos[i] - pos[j]
                q = 1.0 / (d * d)
                e += q * q - q
    return e


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_divisions_numba_guards_need_no_guard(mode):
    """After Numba's ``y == 0`` check a division's partials are finite: the derivative has
    no strong-zero guard (the selects cost 1.8x on a Lennard-Jones gradient) and is right."""
    x = np.array([0.0, 1.3, 2.9, 4.2])
    with using(IEEE):
        plain = _guards(mode, pair_potential, x)
    assert _guards(mode, pair_potential, x) == plain
    rev, fwd = _both_modes(pair_potential, x)
    expected = _central(pair_potential, x)
    np.testing.assert_allclose(rev, expected, rtol=1e-7)
    np.testing.assert_allclose(fwd, expected, rtol=1e-7)
    # the same sum with NumPy's error model divides by a possible zero: guarded
    unchecked = numba.njit(error_model="numpy")(pair_potential.py_func)
    with using(IEEE):
        unguarded = _guards(mode, unchecked, x)
    assert _guards(mode, unchecked, x) > unguarded


@numba.njit
def steps(x):
    n = x.shape[0]
    h = 2.0 / n         # Numba tests n == 0 before dividing: h is finite
    y = 0.0
    for i in range(n):
        y += h * (y * x[i] + x[i] * x[i]) / 6.0
    return y


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_a_step_divided_by_a_count_and_a_division_by_six_need_no_guard(mode):
    """GradBench's ode: ``h = 2.0 / s`` after Numba's ``s == 0`` test (an integer's float is
    finite, and nonzero where the integer is) and ``/ 6.0`` (no pole) leave every partial
    finite, so no guard; the values are right."""
    x = np.array([0.3, -1.2, 0.8])
    with using(IEEE):
        plain = _guards(mode, steps, x)
    assert _guards(mode, steps, x) == plain
    rev, fwd = _both_modes(steps, x)
    expected = _central(steps, x)
    np.testing.assert_allclose(rev, expected, rtol=1e-7)
    np.testing.assert_allclose(fwd, expected, rtol=1e-7)


def test_set_options_names_the_options():
    with pytest.raises(TypeError, match="strong_zero"):
        pyzyme.set_options(strong_zeros=False)
    with pytest.raises(TypeError, match="True or False"):
        pyzyme.set_options(strong_zero="no")


def test_option_is_part_of_the_cache_key():
    x = np.array([-1.0, 4.0])
    pyzyme.set_options(strong_zero=False)
    try:
        ieee = pyzyme.gradient(Forward, sum_sqrt_floor, x)
    finally:
        pyzyme.set_options(strong_zero=True)
    strong = pyzyme.gradient(Forward, sum_sqrt_floor, x)
    assert math.isnan(ieee[0]) and strong == (0.0, 0.25)


def test_const_arguments_are_untouched():
    # A Const argument with a pole in its own branch changes nothing in the others.
    f = lambda x, c: x * x if c > 0.0 else math.sqrt(c) * x  # noqa: E731
    assert pyzyme.autodiff(Reverse, f, Active(3.0), Const(1.0)) == ((6.0, None),)
    assert pyzyme.autodiff(Reverse, f, Active(3.0), Const(0.0)) == ((0.0, None),)
