"""autodiff_thunk's thunks called from inside @njit code, with pyzyme's annotations there."""

import numba
import numpy as np
import pytest
from numba.core.runtime import _nrt_python, rtsys

from pyzyme import (
    Active, BatchDuplicated, Const, Duplicated, DuplicatedNoNeed, Forward, ForwardWithPrimal,
    PyzymeError, ReverseSplitNoPrimal, ReverseSplitWithPrimal, UnsupportedError, autodiff_thunk,
)
from tests.kernels import matmul


def seed_f(A, v):
    res = A[0] * v
    A[0] = 0.0
    return res


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


@numba.njit
def with_temporary(x):
    t = np.empty(x.shape[0])
    s = 0.0
    for i in range(x.shape[0]):
        t[i] = np.sin(x[i]) * s + 1.0
        s += t[i]
    return s


def central(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


A0 = np.array([2.2])
SEED_FWD, SEED_REV = autodiff_thunk(ReverseSplitWithPrimal, seed_f, Active,
                                    Duplicated(A0, np.zeros(1)), Active(3.3))


@numba.njit
def seed_example(A, dA, v):
    tape, result, shadow_result = SEED_FWD(Duplicated(A, dA), Active(v))
    overwritten = A[0]
    derivs = SEED_REV(Duplicated(A, dA), Active(v), 1.0, tape)[0]
    return result, derivs[1], overwritten, shadow_result is None and derivs[0] is None


def test_api_split_example_inside_njit():
    A, dA = np.array([2.2]), np.zeros(1)
    result, dv, overwritten, nones = seed_example(A, dA, 3.3)
    assert overwritten == 0.0 and nones
    assert (result, dv) == (pytest.approx(7.26), pytest.approx(2.2))
    np.testing.assert_allclose(dA, [3.3])
    # The same values as the thunks called from Python (one multiply each: exact anywhere).
    A2, dA2 = np.array([2.2]), np.zeros(1)
    tape, result2, _ = SEED_FWD(Duplicated(A2, dA2), Active(3.3))
    (_, dv2), = SEED_REV(Duplicated(A2, dA2), Active(3.3), 1.0, tape)
    assert (result, dv) == (result2, dv2)
    np.testing.assert_array_equal(dA, dA2)


C7 = np.linspace(0.1, 0.9, 7)
SERIES_FWD, SERIES_REV = autodiff_thunk(ReverseSplitNoPrimal, series, Active, Active(1.3),
                                        Duplicated(C7, np.zeros(7)), Const(40))


@numba.njit
def series_split(x, c, dc, n, seed):
    tape, primal, _ = SERIES_FWD(Active(x), Duplicated(c, dc), Const(n))
    for i in range(c.shape[0]):
        c[i] = 0.0  # the reverse sweep uses what the forward sweep saw
    return primal is None, SERIES_REV(Active(x), Duplicated(c, dc), n, seed, tape)


def test_split_no_primal_inside_njit_matches_python_and_finite_differences():
    c, dc = C7.copy(), np.zeros(7)
    no_primal, ((dx, none_c, none_n),) = series_split(1.3, c, dc, 40, 2.0)
    assert no_primal and none_c is None and none_n is None
    c_py, dc_py = C7.copy(), np.zeros(7)
    tape, _, _ = SERIES_FWD(Active(1.3), Duplicated(c_py, dc_py), Const(40))
    (dx_py, _, _), = SERIES_REV(Active(1.3), Duplicated(c_py, dc_py), Const(40), 2.0, tape)
    # inlined into series_split and optimized there: equal to rounding
    assert dx == pytest.approx(dx_py, rel=1e-14)
    np.testing.assert_allclose(dc, dc_py, rtol=1e-14)
    assert dx == pytest.approx(2.0 * central(lambda x: series(x, C7, 40), 1.3), rel=1e-7)
    fd = [2.0 * central(lambda h: series(1.3, C7 + h * e, 40), 0.0) for e in np.eye(7)]
    np.testing.assert_allclose(dc, fd, rtol=1e-6)


def test_split_vjp_of_a_function_writing_its_output_inside_njit():
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((5, 3)), rng.standard_normal((3, 4))
    C = np.zeros((5, 4))
    dA, dB, dC = np.zeros_like(A), np.zeros_like(B), np.zeros_like(C)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, matmul, Const, Duplicated(A, dA),
                              Duplicated(B, dB), Duplicated(C, dC))

    @numba.njit
    def vjp(A, B, C, dA, dB, dC, seed):
        tape, primal, _ = fwd(Duplicated(A, dA), Duplicated(B, dB), Duplicated(C, dC))
        for i in range(C.shape[0]):  # (loops: Numba compiles slice assignment slowly)
            for k in range(A.shape[1]):
                A[i, k] = 0.0
            for j in range(C.shape[1]):
                dC[i, j] = seed[i, j]
        return primal is None, rev(Duplicated(A, dA), Duplicated(B, dB), Duplicated(C, dC),
                                   tape)

    A_before = A.copy()
    seed = rng.standard_normal((5, 4))
    no_primal, out = vjp(A, B, C, dA, dB, dC, seed)
    assert no_primal and out == ((None, None, None),)
    np.testing.assert_allclose(C, A_before @ B, rtol=1e-13)
    np.testing.assert_allclose(dA, seed @ B.T, rtol=1e-13)
    np.testing.assert_allclose(dB, A_before.T @ seed, rtol=1e-13)


def test_forward_thunks_inside_njit():
    both = autodiff_thunk(Forward, series, Duplicated, Duplicated(1.0, 1.0), C7, 40)
    tangent_only = autodiff_thunk(Forward, series, DuplicatedNoNeed, Duplicated(1.0, 1.0),
                                  C7, 40)
    const_result = autodiff_thunk(ForwardWithPrimal, series, Const, Duplicated(1.0, 1.0),
                                  C7, 40)

    @numba.njit
    def run(x, c, dc):
        return (both(Duplicated(x, 1.0), Const(c), 40),
                tangent_only(Duplicated(x, 1.0), c, Const(40)),
                const_result(Duplicated(x, 1.0), c, 40),
                both(x, Duplicated(c, dc), 40))

    dc = np.zeros(7)
    dc[3] = 1.0
    (value, dx), (dx_only,), (value_only,), (value_c, dc3) = run(1.3, C7, dc)
    # Bitwise: forward mode sums no adjoints (nothing reassociated), so every compiled copy
    # performs the same IEEE operations (fmuladd fused alike, on one CPU).
    assert (value, dx) == both(Duplicated(1.3, 1.0), C7, 40)
    assert dx_only == dx and value_only == value and value_c == value
    assert dx == pytest.approx(central(lambda x: series(x, C7, 40), 1.3), rel=1e-7)
    fd = central(lambda h: series(1.3, C7 + h * np.eye(7)[3], 40), 0.0)
    assert dc3 == pytest.approx(fd, rel=1e-6)
    # An integer primal is a float to differentiate, as in Python.
    two = numba.njit(lambda: both(Duplicated(2, 1), C7, 40))()
    assert two == pytest.approx(both(Duplicated(2.0, 1.0), C7, 40))


def test_thunks_passed_as_arguments_and_annotations_across_the_boundary():
    @numba.njit
    def call(fwd, rev, d, a):
        tape, result, _ = fwd(d, a)
        return result, rev(d, a, 1, tape)

    A, dA = np.array([2.2]), np.zeros(1)
    result, ((none, dv),) = call(SEED_FWD, SEED_REV, Duplicated(A, dA), Active(3.3))
    assert none is None and (result, dv) == (pytest.approx(7.26), pytest.approx(2.2))
    np.testing.assert_allclose(dA, [3.3])
    made = numba.njit(lambda x: (Duplicated(x, 2 * x), Active(1), Const(x)))(A)
    assert [type(a) for a in made] == [Duplicated, Active, Const]
    np.testing.assert_array_equal(made[0].dval, 2 * A)


def test_a_tape_moves_between_python_and_njit():
    @numba.njit
    def forward_only(A, dA, v):
        return SEED_FWD(Duplicated(A, dA), Active(v))

    @numba.njit
    def reverse_only(A, dA, v, tape):
        return SEED_REV(Duplicated(A, dA), Active(v), 1.0, tape)

    A, dA = np.array([2.2]), np.zeros(1)
    tape, result, _ = forward_only(A, dA, 3.3)
    assert result == pytest.approx(7.26) and not tape.consumed
    assert SEED_REV(Duplicated(A, dA), Active(3.3), 1.0, tape) == ((None, pytest.approx(2.2)),)
    A, dA = np.array([2.2]), np.zeros(1)
    tape, _, _ = SEED_FWD(Duplicated(A, dA), Active(3.3))
    assert reverse_only(A, dA, 3.3, tape) == ((None, pytest.approx(2.2)),)
    np.testing.assert_allclose(dA, [3.3])
    assert tape.consumed
    with pytest.raises(PyzymeError, match="already used"):
        reverse_only(A, dA, 3.3, tape)


def test_a_tape_made_apart_checks_the_arrays_of_its_njit_reverse_call():
    """A tape the forward thunk made from Python on arrays apart is for the build that takes
    them as noalias; its reverse sweep inside @njit code checks that no two arrays of the
    call overlap. Inside @njit code the thunks run the build they were made with (one build,
    not two), checking the same."""
    def dot(x, y):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] * y[i]
        return s

    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, dot, Active, Duplicated(x, x * 0),
                              Duplicated(y, y * 0))

    @numba.njit
    def reverse_only(x, dx, y, dy, tape):
        return rev(Duplicated(x, dx), Duplicated(y, dy), 1.0, tape)

    tape, _, _ = fwd(Duplicated(x, x * 0), Duplicated(y, y * 0))
    dx, dy = np.zeros(2), np.zeros(2)
    reverse_only(x, dx, y, dy, tape)
    np.testing.assert_array_equal(dx, y)
    np.testing.assert_array_equal(dy, x)
    tape, _, _ = fwd(Duplicated(x, x * 0), Duplicated(y, y * 0))
    with pytest.raises(PyzymeError, match="share no memory"):
        reverse_only(x, dx, x, dy, tape)

    @numba.njit
    def both(x, dx, y, dy):
        tape, _, _ = fwd(Duplicated(x, dx), Duplicated(y, dy))
        return rev(Duplicated(x, dx), Duplicated(y, dy), 1.0, tape)

    dx, dy = np.zeros(2), np.zeros(2)
    both(x, dx, y, dy)      # the build the thunks were made with, arrays apart
    np.testing.assert_array_equal(dx, y)
    np.testing.assert_array_equal(dy, x)
    with pytest.raises(PyzymeError, match="example arrays that share memory"):
        both(x, dx, x, dy)


def test_thunks_made_apart_take_arrays_inside_a_tuple_inside_njit():
    """Arrays inside a tuple cannot be checked for overlap inside @njit code: there the
    thunks made on arrays apart run the build for arrays that may overlap."""
    def weighted(x, pair):
        a, b = pair
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] * a[i] * b[i]
        return s

    x, a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, weighted, Active, Duplicated(x, x * 0),
                              Const((a, b)))

    @numba.njit
    def both(x, dx, pair):
        tape, v, _ = fwd(Duplicated(x, dx), Const(pair))
        rev(Duplicated(x, dx), Const(pair), 1.0, tape)
        return v

    dx = np.zeros(2)
    assert both(x, dx, (a, b)) == 63.0
    np.testing.assert_array_equal(dx, a * b)
    dx = np.zeros(2)
    both(x, dx, (a, a))                     # the same array twice
    np.testing.assert_array_equal(dx, a * a)


@pytest.fixture
def nrt_stats():
    was_enabled = _nrt_python.memsys_stats_enabled()
    _nrt_python.memsys_enable_stats()

    def live():
        s = rtsys.get_allocation_stats()
        return s.alloc - s.free, s.mi_alloc - s.mi_free

    yield live
    if not was_enabled:
        _nrt_python.memsys_disable_stats()


def test_a_hundred_sweeps_and_dropped_tapes_leak_nothing(nrt_stats):
    x = np.linspace(0.1, 1.0, 100)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, with_temporary, Active,
                              Duplicated(x, np.zeros_like(x)))

    @numba.njit
    def sweeps(x, dx, n):
        s = 0.0
        for _ in range(n):
            tape, value, _ = fwd(Duplicated(x, dx))
            rev(Duplicated(x, dx), 1.0, tape)
            s += value
        return s

    @numba.njit
    def dropped(x, dx, n):
        s = 0.0
        for _ in range(n):
            s += fwd(Duplicated(x, dx))[1]  # the tape goes out of scope unused
        return s

    dx = np.zeros_like(x)
    sweeps(x, dx, 1), dropped(x, dx, 1)
    dx[:] = 0.0
    before = nrt_stats()
    total = sweeps(x, dx, 100)
    dropped(x, dx, 100)
    assert nrt_stats() == before
    assert total == pytest.approx(100 * with_temporary(x))
    tape, _, _ = fwd(Duplicated(x, np.zeros_like(x)))
    dx1 = np.zeros_like(x)
    rev(Duplicated(x, dx1), 1.0, tape)
    np.testing.assert_allclose(dx, 100 * dx1, rtol=1e-12)


def test_reusing_a_tape_inside_njit_raises():
    @numba.njit
    def twice(A, dA, v):
        tape, _, _ = SEED_FWD(Duplicated(A, dA), Active(v))
        SEED_REV(Duplicated(A, dA), Active(v), 1.0, tape)
        SEED_REV(Duplicated(A, dA), Active(v), 1.0, tape)

    with pytest.raises(PyzymeError, match="already used"):
        twice(np.array([2.2]), np.zeros(1), 3.3)


def test_wrong_arguments_inside_njit_are_clear_errors():
    @numba.njit
    def forward(A, dA, v):
        return SEED_FWD(Duplicated(A, dA), v)[1]

    @numba.njit
    def foreign_tape(A, dA, v):
        tape, _, _ = SEED_FWD(Duplicated(A, dA), Active(v))
        return SERIES_REV(Active(v), Duplicated(A, dA), 3, 1.0, tape)

    @numba.njit
    def no_seed(A, dA, v):
        tape, _, _ = SEED_FWD(Duplicated(A, dA), Active(v))
        return SEED_REV(Duplicated(A, dA), Active(v), tape)

    @numba.njit
    def annotate(A, dA):
        return SEED_FWD(Duplicated(A, dA), Active(1.0))

    A, dA = np.array([2.2]), np.zeros(1)
    with pytest.raises(PyzymeError, match="made for arguments"):
        forward(np.ones((1, 1)), np.zeros((1, 1)), 3.3)
    with pytest.raises(PyzymeError, match="made for arguments"):
        forward(A, dA, 3.3)  # v passed bare is Const, not Active
    with pytest.raises(PyzymeError, match="another function"):
        foreign_tape(A, dA, 3.3)
    with pytest.raises(numba.TypingError, match="'tape'"):
        no_seed(A, dA, 3.3)
    with pytest.raises(PyzymeError, match="shape and strides"):
        annotate(A, np.zeros(2))
    with pytest.raises(PyzymeError, match="shares memory"):
        annotate(A, A)
    with pytest.raises(UnsupportedError, match="a float cannot hold its adjoint"):
        annotate(1.0, 1.0)
    fwd = autodiff_thunk(Forward, series, Duplicated, Duplicated(1.0, 1.0), C7, 40)
    with pytest.raises(UnsupportedError, match="for reverse mode"):
        numba.njit(lambda: fwd(Active(1.0), C7, 40))()
    with pytest.raises(TypeError, match="BatchDuplicated cannot be passed"):
        numba.njit(lambda d: d)(BatchDuplicated(1.0, (1.0, 0.0)))


@numba.njit
def weighted(p, x):
    return p[0] * x[0] + p[1] * x[1] ** 2


def test_active_tuples_and_integer_values_inside_njit():
    x = np.array([1.5, 2.0])
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, weighted, Active, Active((1.0, 2.0)),
                              Duplicated(x, np.zeros(2)))

    @numba.njit
    def run(p, x, dx):
        tape, value, _ = fwd(Active(p), Duplicated(x, dx))
        return value, rev(Active(p), Duplicated(x, dx), 1, tape)

    dx = np.zeros(2)
    value, ((dp, none),) = run((1, 2), x, dx)  # integers are floats to differentiate
    assert value == 9.5 and dp == (1.5, 4.0) and none is None
    np.testing.assert_array_equal(dx, [1.0, 8.0])
