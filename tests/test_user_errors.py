"""What pyzyme refuses, it refuses in the user's words: the construct as written (``prange``,
``np.linalg.svd``, ``print``, a ``numba.objmode`` block), the Python file and line, and one
thing to do."""

import inspect

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Duplicated, Forward, Reverse, UnsupportedError, autodiff
from pyzyme.frontends.numba import source_lines


def where(f, text: str) -> str:
    """``file:line`` of the first line of ``f``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(getattr(f, "py_func", f))
    offset = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(getattr(f, 'py_func', f))}:{start + offset}"


# -- constructs named with their Python line ------------------------------------------------
@numba.njit(parallel=True)
def parallel_sum_of_squares(x):
    s = x[0]
    for i in numba.prange(x.shape[0]):
        s += x[i] * x[i]
    return s


def test_a_prange_loop_is_named_with_its_own_line():
    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, parallel_sum_of_squares, Active, Duplicated(x, np.zeros(3)))
    message = str(info.value)
    assert "prange / parallel=True loop" in message and "numba_parallel_for" in message
    assert where(parallel_sum_of_squares, "numba.prange") in message
    assert "range instead of numba.prange" in message and "parallel=False" in message


@numba.njit
def singular_value_sum(a):
    b = a * 2.0
    u, s, vt = np.linalg.svd(b)
    return s.sum()


def test_svd_is_named_as_written_without_compiling_a_debug_copy(monkeypatch):
    def no_debug_copy(*args):
        raise AssertionError("np.linalg.svd is found in Numba's typed IR, not by a recompile")

    monkeypatch.setattr(source_lines, "line_of_call", no_debug_copy)
    a = np.array([[3.0, 1.0], [1.0, 2.0]])
    for mode, ret in ((Reverse, Active), (Forward, Duplicated)):
        with pytest.raises(UnsupportedError) as info:
            autodiff(mode, singular_value_sum, ret, Duplicated(a, np.zeros_like(a)))
        message = str(info.value)
        assert message.startswith("np.linalg.svd in ")
        assert "gesdd" in message and "pyzyme.rules" in message
        assert where(singular_value_sum, "np.linalg.svd") in message


@numba.njit
def helper_with_eig(a):
    return np.linalg.eigvals(a).real.sum()


@numba.njit
def calls_a_helper_with_eig(a):
    return helper_with_eig(a) * 2.0


def test_a_construct_in_a_called_function_is_named_at_its_own_file_and_line():
    a = np.array([[3.0, 1.0], [1.0, 2.0]])
    with pytest.raises(UnsupportedError, match=r"^np\.linalg\.eigvals in ") as info:
        autodiff(Reverse, calls_a_helper_with_eig, Active, Duplicated(a, np.zeros_like(a)))
    assert where(helper_with_eig, "np.linalg.eigvals") in str(info.value)


@numba.njit
def prints_its_argument(x):
    print("step")             # no float: never the one refused
    y = x * x
    print("x is", x)
    return y


def test_a_print_is_named_with_its_line_and_what_to_do():
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, prints_its_argument, Active, Active(2.0))
    message = str(info.value)
    assert message.startswith("print(...) in ")
    assert "PyFloat_FromDouble" in message and "objmode" not in message
    assert where(prints_its_argument, 'print("x is"') in message
    assert "remove the print" in message and "pyzyme.rules.inactive" in message


@numba.njit
def leaves_nopython_mode(x):
    y = x * 3.0
    with numba.objmode(z="float64"):
        z = float(np.tanh(x))
    return y * z


def test_an_objmode_block_is_named_with_its_line_and_what_to_do():
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, leaves_nopython_mode, Active, Active(0.5))
    message = str(info.value)
    assert message.startswith("a `with numba.objmode(...)` block in ")
    assert "print" not in message
    assert where(leaves_nopython_mode, "numba.objmode") in message
    assert "move the block out" in message


def test_a_print_in_an_inactive_helper_is_differentiated_as_the_hint_says():
    @numba.njit
    def show(v):
        print("value", v)

    pyzyme.rules.inactive(show)

    @numba.njit
    def f(x):
        show(x)
        return x * x

    assert autodiff(Reverse, f, Active, Active(3.0)) == ((6.0,),)
