"""pyzyme.testing: test_forward and test_reverse pass on right derivatives in every argument form
and return activity, and fail, naming the argument and showing both values, where the
derivative and the finite differences disagree."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

from pyzyme import (
    Active, BatchDuplicated, BatchDuplicatedNoNeed, Const, Duplicated, DuplicatedNoNeed,
)
from pyzyme.testing import central_fdm, test_forward, test_reverse
from tests.kernels import matmul as matmul_into


@numba.njit
def mixed(x, y, n):
    return math.atan2(y, x) * n + x * y


@numba.njit
def normalize(x, eps):
    """Scales ``x`` in place to unit norm; returns the norm (a result and a mutated array)."""
    s = eps
    for v in x:
        s += v * v
    r = np.sqrt(s)
    for i in range(x.shape[0]):
        x[i] /= r
    return r


@numba.njit
def polar(r, t):
    return (r * math.cos(t), r * math.sin(t))


@numba.njit
def poly(x, A):
    s = 0.0
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            s += A[i, j] * x ** (i + j)
    return s


# -- passing on right derivatives ---------------------------------------------------------------
@pytest.mark.parametrize("ret", [Const, Duplicated, DuplicatedNoNeed])
@pytest.mark.parametrize("form", ["plain", "annotation", "tuple"])
def test_forward_scalar_argument_forms(ret, form):
    x = {"plain": 1.5, "annotation": Duplicated(1.5, 123.0), "tuple": (1.5, Duplicated)}[form]
    test_forward(mixed, ret, x, (0.5, Duplicated), 3)
    test_forward(mixed, ret, x, Const(0.5), 3)


@pytest.mark.parametrize("ret", [Const, Active])
@pytest.mark.parametrize("form", ["plain", "annotation", "tuple", "const"])
def test_reverse_scalar_argument_forms(ret, form):
    x = {"plain": 1.5, "annotation": Active(1.5), "tuple": (1.5, Active),
         "const": (1.5, Const)}[form]
    test_reverse(mixed, ret, x, 0.5, 3)
    # One argument list serves both modes: Active is tested as Duplicated in forward mode,
    # a Duplicated float as Active in reverse mode.
    test_forward(mixed, Duplicated, x, (0.5, Active), 3)
    test_reverse(mixed, ret, x, (0.5, Duplicated), 3)


@pytest.mark.parametrize("ret", [BatchDuplicated, BatchDuplicatedNoNeed, Const])
def test_forward_batches(ret):
    test_forward(mixed, ret, (1.5, BatchDuplicated), (0.5, BatchDuplicated), 3)
    # An instance fixes the width (3 lanes here); its shadows are replaced by random ones.
    test_forward(mixed, ret, BatchDuplicated(1.5, (0.0, 0.0, 0.0)), 0.5, 3)


def test_mutated_arrays_are_outputs():
    x = np.array([3.0, 4.0, 1.0])
    keep = x.copy()
    for ret in (Duplicated, Const):
        test_forward(normalize, ret, x, 1e-3)
    for ret in (Active, Const):
        test_reverse(normalize, ret, x, (1e-3, Active))
    np.testing.assert_array_equal(x, keep)  # every call works on copies


def test_function_writing_its_output():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((3, 2)), rng.standard_normal((2, 4))
    test_forward(matmul_into, Const, A, B, np.zeros((3, 4)))
    test_forward(matmul_into, Const, (A, BatchDuplicated), (B, Const), np.zeros((3, 4)))
    test_reverse(matmul_into, Const, A, (B, Const), np.zeros((3, 4)))


def test_layouts_and_float32():
    strided = (np.arange(12.0) + 0.5)[::3]
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    before = set(normalize.signatures)
    test_forward(normalize, Duplicated, strided, 1e-3)
    test_reverse(normalize, Active, strided, 1e-3)
    test_forward(poly, Duplicated, 1.1, fortran)
    test_reverse(poly, Active, 1.1, fortran)
    # Every call keeps the layout, so no other specialization is compiled.
    assert {sig[0].layout for sig in set(normalize.signatures) - before} <= {"A"}
    assert {sig[1].layout for sig in poly.signatures} == {"F"}
    x32 = np.array([3.0, 4.0, 1.0], dtype=np.float32)  # looser default tolerances
    test_forward(normalize, Duplicated, x32, np.float32(1e-3))
    test_reverse(normalize, Active, x32, np.float32(1e-3))


def test_tuples_and_plain_python_functions():
    test_forward(polar, Duplicated, 1.5, 0.3)
    test_forward(polar, BatchDuplicated, 1.5, 0.3)
    test_reverse(polar, Const, 1.5, 0.3)
    test_reverse(lambda t, s: t[0] * t[1] * s + math.sin(t[0]), Active, (1.0, 2.0), 3.0)
    test_forward(lambda t, s: t[0] * t[1] * s, Duplicated, (1.0, 2.0), 3.0)


def test_reverse_of_a_tuple_result():
    test_reverse(polar, Active, 1.5, 0.3)


def test_int_arguments_are_const_unless_annotated():
    @numba.njit
    def power(x, n):
        return x ** n

    test_forward(power, Duplicated, 1.3, 3)
    test_reverse(power, Active, 1.3, 3)
    test_reverse(power, Active, (3, Active), 2.5)  # an int made Active is a float


def test_custom_fdm_and_rng():
    calls = []
    base = central_fdm(7)

    def fdm(g, x):
        calls.append(x)
        return base(g, x)

    test_forward(mixed, Duplicated, 1.5, 0.5, 3, fdm=fdm, rng=5)
    assert calls == [0.0, 0.0, 0.0]  # along x alone, y alone, then both
    calls.clear()
    test_reverse(mixed, Active, 1.5, 0.5, 3, fdm=fdm, rng=np.random.default_rng(5))
    assert calls == [1.5, 0.5]  # one gradient entry per element, at its value


def test_central_fdm():
    x = 0.7
    for points in (3, 5, 7, 9):
        got = central_fdm(points)(lambda t: t ** 2 - 3 * t, x)
        assert got == pytest.approx(2 * x - 3, rel=1e-9)
    # Exact (to rounding) for polynomials of degree points - 1.
    assert central_fdm(5, step=0.5)(lambda t: t ** 4, 1.0) == pytest.approx(4.0, rel=1e-12)
    got = central_fdm(5)(lambda t: np.array([np.sin(t), np.exp(t)]), x)
    np.testing.assert_allclose(got, [np.cos(x), np.exp(x)], rtol=1e-10)
    assert central_fdm(5).step_at(1e6) == pytest.approx(central_fdm(5).step_at(0.0) * 1e3)
    assert repr(central_fdm(5, 1e-3)) == "central_fdm(5, step=0.001)"
    with pytest.raises(ValueError, match="odd number"):
        central_fdm(4)


# -- failing where the derivatives disagree -----------------------------------------------------
# The wrong "derivatives" here are honest ones: each function is evaluated at a point where it
# is not differentiable, so pyzyme's derivative (one one-sided slope, or 0 for a piecewise
# constant function, both documented choices) and the central difference (which straddles the
# kink or jump) disagree. That is exactly what the utilities must catch and attribute.
@numba.njit
def floor_times(x, y):
    return math.floor(x) * y  # piecewise constant in x: derivative 0, FD sees the jump at 2.0


@numba.njit
def clip_into(out, x, a):
    for i in range(x.shape[0]):
        out[i] = a * max(x[i], 1.0)  # a kink at x[i] == 1.0


def _failure(fn, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        fn(*args, **kwargs)
    return str(info.value)


def test_forward_failure_names_the_argument():
    msg = _failure(test_forward, floor_times, Duplicated, 2.0, 3.0)
    assert msg.startswith("test_forward(floor_times): the tangent of the return value along "
                          "argument 0 (x) does not match finite differences")
    assert "\n  AD: 0.0\n  FD: " in msg
    # Away from the jump the same function passes, in both arguments.
    test_forward(floor_times, Duplicated, 2.5, 3.0)


def test_reverse_failure_names_the_argument():
    msg = _failure(test_reverse, floor_times, Active, 2.0, 3.0)
    assert msg.startswith("test_reverse(floor_times): the derivative with respect to argument "
                          "0 (x) does not match finite differences")
    assert "AD: 0.0" in msg and "FD: " in msg
    test_reverse(floor_times, Active, 2.5, 3.0)


def test_failures_in_mutated_arrays_name_input_and_output():
    x = np.array([0.5, 1.0, 3.5])  # the middle entry sits on the kink
    msg = _failure(test_forward, clip_into, Const, np.zeros(3), x, 2.0)
    assert ("the tangent of argument 0 (out) after the call along argument 1 (x) does not "
            "match") in msg
    assert "entries off: [1]" in msg
    msg = _failure(test_reverse, clip_into, Const, np.zeros(3), x, 2.0)
    assert "the derivative with respect to argument 1 (x) does not match" in msg
    assert "entries off: [1]" in msg
    x[1] = 1.5
    test_forward(clip_into, Const, np.zeros(3), x, 2.0)
    test_reverse(clip_into, Const, np.zeros(3), x, 2.0)


def test_a_wrong_reference_is_caught():
    # A finite-difference method off by a factor of 2 stands in for a derivative off by a factor
    # of 1/2: the comparison is symmetric, so this shows the check (and a custom fdm) is live on
    # a smooth function, and which argument gets blamed when only one is differentiated.
    def twice(g, x):
        return 2.0 * central_fdm()(g, x)

    msg = _failure(test_forward, mixed, Duplicated, Const(1.5), 0.5, 3, fdm=twice)
    assert "along argument 1 (y)" in msg
    msg = _failure(test_reverse, mixed, Active, 1.5, Const(0.5), 3, fdm=twice)
    assert "with respect to argument 0 (x)" in msg


def test_primal_mismatch_is_caught():
    # A plain Python function is called as given for the reference, but differentiated as
    # Numba compiles it: int64 wraps around where Python's ints do not.
    def scaled(x, n):
        return x * (n * n)

    msg = _failure(test_forward, scaled, Duplicated, 1.5, 2 ** 40)
    assert "the primal return value does not match a plain call" in msg
    assert "autodiff: 0.0" in msg


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError, match="argument 0 .x. is an array: pass it as Duplicated"):
        test_reverse(normalize, Active, Active(np.ones(2)), 1e-3)
    with pytest.raises(TypeError, match="dtype is int64"):
        test_forward(normalize, Duplicated, (np.ones(2, dtype=np.int64), Duplicated), 1e-3)
    with pytest.raises(TypeError, match="activity of the return value"):
        test_forward(mixed, 1.5, 0.5, 3)
    with pytest.raises(TypeError, match="Active result must be a float"):
        test_reverse(matmul_into, Active, np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1)))


def test_helpers_are_not_collected_as_tests(tmp_path):
    assert test_forward.__test__ is False and test_reverse.__test__ is False
    (tmp_path / "test_uses_them.py").write_text(textwrap.dedent("""
        from pyzyme.testing import test_forward, test_reverse

        def test_something():
            pass
    """))
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "test_something" in out.stdout
    assert "::test_forward" not in out.stdout and "::test_reverse" not in out.stdout
