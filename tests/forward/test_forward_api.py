"""The forward-mode contract of API.md: its examples, return shapes, and errors."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import (
    Active,
    BatchDuplicated,
    BatchDuplicatedNoNeed,
    Const,
    Duplicated,
    DuplicatedNoNeed,
    Forward,
    ForwardWithPrimal,
    autodiff,
    gradient,
    jacfwd,
    jacobian,
    jvp,
)


@numba.njit
def square(x):
    return x * x


@numba.njit
def cube(y, x):
    y[()] = x[()] ** 3


@numba.njit
def tmp_power(x, tmp, n):
    tmp[0] = 1.0
    for i in range(n):
        tmp[0] *= x
    return tmp[0]


@numba.njit
def complex_det(x, y):          # complex LAPACK: no rule
    return (np.linalg.det(x) * y[0, 0]).real


_lines, _start = inspect.getsourcelines(complex_det.py_func)
DET_LINE = _start + next(i for i, line in enumerate(_lines) if "np.linalg.det" in line)


@numba.njit
def array_sum(x):
    return x.sum()


@numba.njit
def weighted_sum(x, y):
    return (x * y).sum()


@numba.njit
def store_twice(out, x):
    out[0] = x * 2.0


# --- API.md examples -------------------------------------------------------------------------


def test_doc_square_duplicated():
    primal, tangent = autodiff(Forward, lambda x: x * x, Duplicated, Duplicated(3.14, 1.0))
    assert primal == pytest.approx(9.8596, rel=1e-15)
    assert tangent == pytest.approx(6.28, rel=1e-15)


def test_doc_square_duplicated_no_need():
    res = autodiff(Forward, lambda x: x * x, DuplicatedNoNeed, Duplicated(3.14, 1.0))
    assert len(res) == 1
    assert res[0] == pytest.approx(6.28, rel=1e-15)


def test_doc_gradient_forward():
    g = gradient(Forward, lambda x: x[0] * x[1], np.array([2.0, 3.0]))
    assert g == (3.0, 2.0)


def test_doc_jacobian_forward():
    jac = jacobian(Forward, lambda x: np.array([x[0] * x[1], x[1]]), np.array([2.0, 3.0]))
    assert isinstance(jac, np.ndarray) and jac.shape == (2, 2)
    np.testing.assert_array_equal(jac, [[3.0, 2.0], [0.0, 1.0]])


def test_doc_cube_forward_writes_tangent_into_dy():
    x = np.array(4.0)
    dx = np.array(1.0)
    y = np.array(0.0)
    dy = np.array(0.0)
    assert autodiff(Forward, cube, Const, Duplicated(y, dy), Duplicated(x, dx)) == ()
    assert dy[()] == 48.0
    assert y[()] == 64.0
    assert dx[()] == 1.0 and x[()] == 4.0


def test_doc_cube_plain_python_function():
    def pycube(y, x):
        y[()] = x[()] ** 3

    dy = np.array(0.0)
    autodiff(Forward, pycube, Const, Duplicated(np.array(0.0), dy),
             Duplicated(np.array(4.0), np.array(1.0)))
    assert dy[()] == 48.0


def test_doc_tmp_buffer_duplicated():
    res = autodiff(Forward, tmp_power, Duplicated(1.2, 1.0),
                   Duplicated(np.empty(1), np.zeros(1)), Const(5))
    assert res[0] == pytest.approx(1.2**5, rel=1e-14)
    assert res[1] == pytest.approx(5 * 1.2**4, rel=1e-14)


def test_doc_jvp():
    assert jvp(lambda x, y: x * y, (2.0, 3.0), (1.0, 0.0)) == (6.0, 3.0)


def test_doc_jacfwd():
    np.testing.assert_array_equal(jacfwd(lambda x: x * 2.0)(np.array([1.0, 2.0])),
                                  [[2.0, 0.0], [0.0, 2.0]])


# --- return shapes ----------------------------------------------------------------------------

SCALAR_SHAPES = [
    # (mode, ret_activity, batch args, expected result)
    (Forward, Const, False, ()),
    (ForwardWithPrimal, Const, False, (9.0,)),
    (Forward, Duplicated, False, (9.0, 6.0)),
    (ForwardWithPrimal, Duplicated, False, (9.0, 6.0)),
    (Forward, DuplicatedNoNeed, False, (6.0,)),
    (ForwardWithPrimal, DuplicatedNoNeed, False, (9.0, 6.0)),
    (Forward, BatchDuplicated, True, (9.0, (6.0, 12.0))),
    (ForwardWithPrimal, BatchDuplicated, True, (9.0, (6.0, 12.0))),
    (Forward, BatchDuplicatedNoNeed, True, ((6.0, 12.0),)),
    (ForwardWithPrimal, BatchDuplicatedNoNeed, True, (9.0, (6.0, 12.0))),
    (Forward, Const, True, ()),
    (ForwardWithPrimal, Const, True, (9.0,)),
]



def _shape_params():
    out = []
    for mode, ret, batch, expected in SCALAR_SHAPES:
        out.append(pytest.param(mode, ret, batch, expected,
                                id=f"{mode}-{ret.__name__}-{'batch' if batch else 'single'}"))
    return out


@pytest.mark.parametrize("mode,ret,batch,expected", _shape_params())
def test_return_shape(mode, ret, batch, expected):
    arg = BatchDuplicated(3.0, (1.0, 2.0)) if batch else Duplicated(3.0, 1.0)
    res = autodiff(mode, square, ret, arg)
    assert res == expected
    assert type(res) is tuple


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_return_activity_deduced(batch):
    if batch:
        assert autodiff(Forward, square, BatchDuplicated(3.0, (1.0, 2.0))) == (9.0, (6.0, 12.0))
    else:
        assert autodiff(Forward, square, Duplicated(3.0, 1.0)) == (9.0, 6.0)


def test_return_shapes_with_arrays_returned():
    x = np.array([0.0, 1.0])

    def f(x):
        return np.exp(x) * 2.0

    primal, tangent = autodiff(Forward, f, Duplicated, Duplicated(x, np.ones(2)))
    np.testing.assert_allclose(primal, 2.0 * np.exp(x), rtol=1e-15)
    np.testing.assert_allclose(tangent, 2.0 * np.exp(x), rtol=1e-15)
    (tangents,) = autodiff(Forward, f, BatchDuplicatedNoNeed,
                           BatchDuplicated(x, (np.ones(2), np.array([1.0, 0.0]))))
    assert len(tangents) == 2 and all(isinstance(t, np.ndarray) for t in tangents)
    np.testing.assert_allclose(tangents[1], [2.0, 0.0], rtol=1e-15)


def test_tuple_return_tangent_is_tuple():
    primal, tangent = autodiff(Forward, lambda x, y: (x * y, x + y), Duplicated,
                               Duplicated(2.0, 1.0), Duplicated(3.0, 0.0))
    assert primal == (6.0, 5.0)
    assert tuple(tangent) == (3.0, 1.0)


def test_const_return_of_mutating_function_that_also_returns_a_float():
    @numba.njit
    def fill_and_total(out, x):
        for i in range(x.shape[0]):
            out[i] = x[i] * x[i]
        return out.sum()

    dout = np.zeros(2)
    res = autodiff(ForwardWithPrimal, fill_and_total, Const, Duplicated(np.zeros(2), dout),
                   Duplicated(np.array([1.0, 2.0]), np.ones(2)))
    assert res == (5.0,)
    np.testing.assert_array_equal(dout, [2.0, 4.0])


def test_mutating_function_with_primal_returns_none():
    dy = np.array(0.0)
    res = autodiff(ForwardWithPrimal, cube, Const, Duplicated(np.array(0.0), dy),
                   Duplicated(np.array(2.0), np.array(1.0)))
    assert res == (None,)
    assert dy[()] == 12.0


# --- arguments ------------------------------------------------------------------------------


def test_int_duplicated_is_converted_to_float():
    assert autodiff(Forward, square, Duplicated(3, 1)) == (9.0, 6.0)


def test_bare_values_are_const():
    a = autodiff(Forward, tmp_power, Duplicated(1.2, 1.0), Duplicated(np.empty(1), np.zeros(1)),
                 5)
    b = autodiff(Forward, tmp_power, Duplicated(1.2, 1.0), Duplicated(np.empty(1), np.zeros(1)),
                 Const(5))
    assert a == b


def test_strided_output_and_shadow_views_get_tangents_back():
    base = np.zeros(8)
    out = base[::-2]                        # negative stride, not contiguous
    dbase = np.full(12, 7.0)
    dout = dbase[::3]                        # a shadow with different strides than the primal
    x = np.array([1.0, 2.0, 3.0, 4.0])

    @numba.njit
    def fill(out, x):
        for i in range(x.shape[0]):
            out[i] = x[i] ** 2

    autodiff(Forward, fill, Const, Duplicated(out, dout), Duplicated(x, np.ones(4)))
    np.testing.assert_array_equal(out, x**2)
    np.testing.assert_array_equal(dout, 2.0 * x)
    np.testing.assert_array_equal(dbase[1::3], 7.0)   # nothing outside the view is touched
    np.testing.assert_array_equal(base[::2], 0.0)


def test_float32_array_tangent_dtype():
    x = np.array([1.0, 2.0], dtype=np.float32)
    primal, tangent = autodiff(Forward, lambda x: x * np.float32(3.0), Duplicated,
                               Duplicated(x, np.ones(2, np.float32)))
    assert primal.dtype == np.float32 and tangent.dtype == np.float32
    np.testing.assert_array_equal(tangent, [3.0, 3.0])


def test_njit_and_python_function_agree():
    def py(x, y):
        return np.sin(x) * y

    a = autodiff(Forward, py, Duplicated(0.3, 1.0), Duplicated(2.0, 0.5))
    b = autodiff(Forward, numba.njit(py), Duplicated(0.3, 1.0), Duplicated(2.0, 0.5))
    assert a == b  # the same IR either way, and forward mode reassociates nothing: bitwise


def test_user_exceptions_propagate_unchanged():
    @numba.njit
    def checked(x):
        if x < 0.0:
            raise ValueError("negative input")
        return np.sqrt(x)

    with pytest.raises(ValueError, match="negative input"):
        autodiff(Forward, checked, Duplicated(-1.0, 1.0))
    assert autodiff(Forward, checked, Duplicated(4.0, 1.0)) == (2.0, 0.25)


# --- errors -----------------------------------------------------------------------------------


def test_active_argument_in_forward_mode():
    with pytest.raises(pyzyme.UnsupportedError, match=r"Active.*reverse mode.*Duplicated"):
        autodiff(Forward, square, Active(3.0))


def test_active_return_in_forward_mode():
    with pytest.raises(pyzyme.UnsupportedError, match=r"Active.*reverse.*Duplicated"):
        autodiff(Forward, square, Active, Duplicated(3.0, 1.0))


def test_shadow_of_another_shape():
    with pytest.raises(pyzyme.PyzymeError, match=r"shape \(4,\).*primal has shape \(3,\)"):
        autodiff(Forward, array_sum, Duplicated(np.ones(3), np.ones(4)))


def test_shadow_of_another_dtype():
    with pytest.raises(pyzyme.PyzymeError, match=r"dtype float32.*primal.*dtype float64"):
        autodiff(Forward, array_sum, Duplicated(np.ones(3), np.ones(3, np.float32)))


def test_shadow_of_an_array_must_be_an_array():
    with pytest.raises(TypeError, match=r"the shadow of argument 'x' \(position 0\) must be an "
                       r"array like its primal, not float") as info:
        autodiff(Forward, array_sum, Duplicated(np.ones(3), 1.0))
    assert isinstance(info.value, pyzyme.PyzymeError)


def test_batch_shadow_of_another_shape():
    with pytest.raises(ValueError, match=r"shadow 1 of argument 'x' \(position 0\) has shape "
                       r"\(2,\)") as info:
        autodiff(Forward, array_sum, BatchDuplicated(np.ones(3), (np.ones(3), np.ones(2))))
    assert isinstance(info.value, pyzyme.PyzymeError)


def test_batch_width_mismatch():
    with pytest.raises(pyzyme.PyzymeError, match=r"same number of shadows.*\[2, 3\]"):
        autodiff(Forward, weighted_sum, BatchDuplicated(np.ones(3), (np.ones(3),) * 2),
                 BatchDuplicated(np.ones(3), (np.ones(3),) * 3))


def test_empty_batch():
    with pytest.raises(ValueError, match="at least one shadow"):
        BatchDuplicated(1.0, ())


def _in_subprocess(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=240)


def test_duplicated_mixed_with_batch_arrays_is_an_error_not_a_crash():
    proc = _in_subprocess("""
        import numpy as np, pyzyme
        from pyzyme import Forward, BatchDuplicated, Duplicated, autodiff
        try:
            autodiff(Forward, lambda x, y: (x * y).sum(),
                     BatchDuplicated(np.ones(3), (np.ones(3), np.ones(3))),
                     Duplicated(np.ones(3), np.ones(3)))
        except pyzyme.PyzymeError as e:
            print("PyzymeError:", e)
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "PyzymeError" in proc.stdout


def test_duplicated_mixed_with_batch_scalars_is_an_error():
    with pytest.raises(pyzyme.PyzymeError, match=r"(?i)batch|width|shadow"):
        autodiff(Forward, lambda x, y: x * y, BatchDuplicated(2.0, (1.0, 1.0)),
                 Duplicated(3.0, 1.0))


def test_single_return_activity_with_batch_arguments_is_an_error():
    with pytest.raises(pyzyme.PyzymeError, match=r"(?i)batch|width"):
        autodiff(Forward, square, Duplicated, BatchDuplicated(3.0, (1.0, 2.0)))


_C3 = np.eye(3) + 0j


def test_unsupported_lapack_call_names_the_function():
    with pytest.raises(pyzyme.UnsupportedError,
                       match=r"(?s)no derivative for @numba_xxgetrf.* of kind 'z'.*complex_det.*"
                             r"test_forward_api\.py"):
        autodiff(Forward, complex_det, Duplicated(_C3, _C3.copy()), Const(_C3))


def test_unsupported_lapack_call_names_the_source_line():
    with pytest.raises(pyzyme.UnsupportedError) as info:
        autodiff(Forward, complex_det, Duplicated(_C3, _C3.copy()), Const(_C3))
    msg = str(info.value)
    assert f"test_forward_api.py:{DET_LINE}" in msg or "np.linalg.det(x)" in msg, msg


def test_active_value_stored_into_const_array():
    with pytest.raises(pyzyme.ActivityError, match=r"(?s)active value.*no shadow.*Duplicated"):
        autodiff(Forward, store_twice, Const, Const(np.zeros(1)), Duplicated(1.0, 1.0))


def test_doc_tmp_buffer_const_raises_activity_error():
    with pytest.raises(pyzyme.ActivityError, match=r"(?s)tmp.*Duplicated, not Const"):
        autodiff(Forward, tmp_power, Duplicated(1.2, 1.0), Const(np.empty(1)), Const(5))


def test_int_return_with_duplicated_activity():
    with pytest.raises(pyzyme.UnsupportedError, match=r"returns int64.*use Const"):
        autodiff(Forward, lambda x: int(x), Duplicated(2.5, 1.0))


def test_unsupported_argument_type():
    with pytest.raises(pyzyme.UnsupportedError, match=r"Duplicated of a str"):
        autodiff(Forward, lambda s: len(s), Duplicated("ab", "cd"))


def test_mode_must_be_a_mode():
    with pytest.raises(TypeError, match="must be a mode"):
        autodiff("Forward", square, Duplicated(3.0, 1.0))


def test_every_error_is_a_pyzyme_error():
    assert issubclass(pyzyme.UnsupportedError, pyzyme.PyzymeError)
    assert issubclass(pyzyme.ActivityError, pyzyme.PyzymeError)


def test_gradient_of_int_array():
    with pytest.raises(pyzyme.PyzymeError, match="floating"):
        gradient(Forward, lambda x: x.sum(), np.arange(3))


def test_jvp_needs_one_tangent_per_primal():
    with pytest.raises(pyzyme.PyzymeError, match="one tangent per primal"):
        jvp(square, (1.0, 2.0), (1.0,))


@numba.njit
def add_twice_into(out, x):
    for i in range(x.shape[0]):
        out[i] = 2.0 * x[i] + out[i]


def test_same_contiguous_array_passed_twice():
    x = np.array([1.0, 2.0, 3.0])
    dx = np.array([1.0, 0.0, 0.0])
    autodiff(Forward, add_twice_into, Const, Duplicated(x, dx), Duplicated(x, dx))
    np.testing.assert_array_equal(x, [3.0, 6.0, 9.0])
    np.testing.assert_array_equal(dx, [3.0, 0.0, 0.0])


def test_same_strided_view_passed_twice():
    v = np.arange(6.0)[::2]
    dv = np.array([1.0, 0.0, 0.0])
    autodiff(Forward, add_twice_into, Const, Duplicated(v, dv), Duplicated(v, dv))
    np.testing.assert_array_equal(v, [0.0, 6.0, 12.0])
    np.testing.assert_array_equal(dv, [3.0, 0.0, 0.0])


def test_read_only_input_shadow():
    dx = np.frombuffer(np.ones(3).tobytes())
    assert not dx.flags.writeable
    assert autodiff(Forward, array_sum, Duplicated(np.ones(3), dx)) == (3.0, 3.0)


def test_gradient_of_non_scalar_function_is_a_clear_error():
    with pytest.raises(pyzyme.PyzymeError, match=r"(?i)scalar|jacobian"):
        gradient(Forward, lambda x: (x[0], x[1]), np.ones(2))


def test_jvp_with_tuple_primals():
    primal, tangent = jvp(lambda t: t[0] * t[1], ((2.0, 3.0),), ((1.0, 0.0),))
    assert (primal, tangent) == (6.0, 3.0)


def test_activity_error_names_the_argument():
    with pytest.raises(pyzyme.ActivityError, match=r"argument '?tmp'?"):
        autodiff(Forward, tmp_power, Duplicated(1.2, 1.0), Const(np.empty(1)), Const(5))


def test_shadow_sharing_memory_with_its_primal_is_an_error():
    x = np.ones(3)
    with pytest.raises(pyzyme.PyzymeError, match="shares memory"):
        autodiff(Forward, array_sum, Duplicated(x, x))
