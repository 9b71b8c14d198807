"""What pyzyme refuses, it refuses in the user's words: the construct as written (``prange``,
``np.linalg.svd``, ``print``, a ``numba.objmode`` block, ``Active`` of an array, a typed List,
a read-only shadow), the Python file and line, and one thing to do."""

import inspect

import numba
import numpy as np
import pytest
from numba.typed import List

import pyzyme
from pyzyme import (
    ActivityError, Active, Const, Duplicated, Forward, Reverse, ReverseSplitWithPrimal,
    UnsupportedError, autodiff, autodiff_thunk, gradient, grad,
)
from pyzyme.frontends.numba import source_lines


def where(f, text: str) -> str:
    """``file:line`` of the first line of ``f``'s source containing ``text``."""
    lines, start = inspect.getsourcelines(getattr(f, "py_func", f))
    offset = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(getattr(f, 'py_func', f))}:{start + offset}"


def central(f, x, h=1e-6):
    """Central finite differences of the float ``f`` at the array ``x``."""
    g = np.zeros_like(x)
    for k in range(x.size):
        up, down = x.copy(), x.copy()
        up[k] += h
        down[k] -= h
        g[k] = (f(up) - f(down)) / (2 * h)
    return g


# -- constructs named with their Python line ------------------------------------------------
@numba.njit(parallel=True)
def parallel_sum_of_squares(x):
    s = x[0]
    for i in numba.prange(x.shape[0]):
        s += x[i] * x[i]
    return s


@numba.njit
def norm2(v):
    return np.sum(v * v)


@pyzyme.rules.augmented_primal(norm2)
@numba.njit
def _norm2_aug(config, v, dv):
    return norm2(v), None, v.copy()


@pyzyme.rules.reverse(norm2)
@numba.njit
def _norm2_rev(config, dret, kept, v, dv):
    if dv is not None:
        for i in range(dv.size):
            dv[i] += 2.0 * dret * kept[i]
    return None


@numba.njit(parallel=True)
def parallel_norms(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += norm2(a[i])
    return s


def test_a_rule_in_a_prange_loop_is_refused_with_the_loops_line():
    # The loop itself differentiates (tests/parallel); a user rule in its body does not.
    x = np.array([1.0, 2.0, 3.0])
    dx = np.zeros(3)
    autodiff(Reverse, parallel_sum_of_squares, Active, Duplicated(x, dx))
    np.testing.assert_allclose(dx, [1.0 + 2.0, 4.0, 6.0])
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, parallel_norms, Active, Duplicated(np.ones((3, 2)), np.zeros((3, 2))))
    message = str(info.value)
    assert "prange / parallel=True loop" in message and "norm2" in message
    assert where(parallel_norms, "numba.prange") in message
    assert "range instead of numba.prange" in message


@numba.njit(parallel=True)
def shared_vector_dots(a, b):
    s = np.dot(b, b)  # under parallel=True a loop of Numba's own (numba/parfors/parfor.py)
    for i in numba.prange(b.shape[0]):
        s += b[i] * b[i]
    for i in numba.prange(a.shape[0]):  # a user's rule adds into a's adjoint
        s += norm2(a[i]) + a[i] @ b
    return s


@numba.njit
def twice_shared_vector_dots(a, b):
    return 2.0 * shared_vector_dots(a, b)


def test_a_refused_prange_loop_is_named_by_its_own_line_and_function():
    # The message names the loop whose body is refused (not Numba's loop for np.dot, not the
    # function's other prange) and the @njit function it is in.
    a, b = np.ones((3, 2)), np.ones(2)
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, twice_shared_vector_dots, Active, Duplicated(a, np.zeros_like(a)),
                 Duplicated(b, np.zeros_like(b)))
    message = str(info.value)
    assert "norm2" in message
    loop = where(shared_vector_dots, "a user's rule adds into")
    assert f"in Python source: {loop}, in shared_vector_dots\n" in message
    assert "numba/parfors" not in message


@numba.njit(parallel=True)
def shared_vector_products(a, b):
    s = 0.0
    for i in numba.prange(a.shape[0]):  # npbench's spmv and symm: every iteration reads b
        s += (a[i] @ b) ** 2
    return s


def test_a_dot_with_a_shared_operand_in_a_prange_loop_differentiates():
    # Each reverse task adds b's adjoint into a copy of its own (tests/parallel has more).
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((9, 4)), rng.standard_normal(4)
    da, db = np.zeros_like(a), np.zeros_like(b)
    autodiff(Reverse, shared_vector_products, Active, Duplicated(a, da), Duplicated(b, db))
    r = a @ b
    np.testing.assert_allclose(da, 2 * r[:, None] * b[None, :], rtol=1e-12)
    np.testing.assert_allclose(db, 2 * a.T @ r, rtol=1e-12)

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


# -- arguments refused by what they are ------------------------------------------------------
def squares(x):
    return (x * x).sum()


def test_active_of_an_array_says_duplicated():
    x = np.array([1.0, 2.0])
    with pytest.raises(UnsupportedError) as info:
        autodiff(Reverse, squares, Active, Active(x))
    message = str(info.value)
    assert "argument 'x' (position 0)" in message and "mutable" in message
    assert "Duplicated(x, dx)" in message and "gradient(Reverse, f, x)" in message
    # repeated calls take the same path (the first call must not have cached a fast one)
    with pytest.raises(UnsupportedError, match="mutable"):
        autodiff(Reverse, squares, Active, Active(x))


@numba.njit
def list_squares(values):
    s = 0.0
    for v in values:
        s += v * v
    return s


def test_a_typed_list_gets_one_answer_whatever_its_annotation():
    values = List([1.0, 2.0])
    calls = [
        lambda: autodiff(Reverse, list_squares, Active, values),
        lambda: autodiff(Reverse, list_squares, Active, Const(values)),
        lambda: autodiff(Reverse, list_squares, Active, Active(values)),
        lambda: autodiff(Reverse, list_squares, Active, Duplicated(values, List([0.0, 0.0]))),
        lambda: autodiff(Forward, list_squares, Duplicated, Duplicated(values, List([1.0, 0.0]))),
        lambda: grad(list_squares)(values),
    ]
    messages = set()
    for call in calls:
        with pytest.raises(UnsupportedError) as info:
            call()
        messages.add(str(info.value))
    assert len(messages) == 1
    message = messages.pop()
    assert "argument 'values' (position 0)" in message and "numba.typed.List" in message
    assert "Const included" in message and "np.asarray" in message
    # what the hint says works
    x = np.asarray(values)
    dx = np.zeros_like(x)
    autodiff(Reverse, list_squares, Active, Duplicated(x, dx))
    np.testing.assert_allclose(dx, 2 * x)


# -- read-only shadows -----------------------------------------------------------------------
def read_only(a):
    a = np.array(a, dtype=np.float64)
    a.flags.writeable = False
    return a


@numba.njit
def weighted_squares(w, x):
    return (w * x * x).sum()


def test_a_read_only_reverse_shadow_is_refused_and_a_writeable_one_works():
    w, x = np.array([0.5, 2.0, -1.0]), np.array([1.0, -3.0, 0.25])
    with pytest.raises(ActivityError) as info:
        autodiff(Reverse, weighted_squares, Active, Const(w), Duplicated(x, read_only([0, 0, 0])))
    message = str(info.value)
    assert "argument 'x' (position 1)" in message and "read-only" in message
    assert "np.zeros_like(x)" in message
    dx = np.zeros(3)
    autodiff(Reverse, weighted_squares, Active, Const(w), Duplicated(x, dx))
    np.testing.assert_allclose(dx, central(lambda v: weighted_squares(w, v), x), rtol=1e-7)


@numba.njit
def tuple_squares(t):
    return (t[0] * t[1]).sum()


def test_a_read_only_shadow_inside_a_tuple_is_refused():
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    with pytest.raises(ActivityError, match=r"argument 't' \(position 0\)"):
        autodiff(Reverse, tuple_squares, Active,
                 Duplicated((a, b), (np.zeros(2), read_only([0, 0]))))


def test_split_thunks_refuse_a_read_only_shadow():
    x = np.array([1.0, 2.0])
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, squares, Active,
                              Duplicated(x, np.zeros(2)))
    with pytest.raises(ActivityError, match="argument 0"):
        fwd(Duplicated(x, read_only([0, 0])))
    dx = np.zeros(2)
    tape, _, _ = fwd(Duplicated(x, dx))
    with pytest.raises(ActivityError, match="argument 0"):
        rev(Duplicated(x, read_only([0, 0])), 1.0, tape)
    rev(Duplicated(x, dx), 1.0, tape)
    np.testing.assert_allclose(dx, 2 * x)


def test_gradient_refuses_a_read_only_out():
    x = np.array([1.0, 2.0])
    with pytest.raises(ActivityError, match="out= array is a read-only array"):
        gradient(Reverse, squares, x, out=read_only([0, 0]))


@numba.njit
def scale_into(y, x):
    for i in range(x.shape[0]):
        y[i] = 3.0 * x[i]


def test_forward_refuses_a_read_only_shadow_only_where_the_function_writes():
    x, y = np.array([1.0, 2.0]), np.zeros(2)
    # the tangent of x is only read: a read-only one is fine
    dy = np.zeros(2)
    autodiff(Forward, scale_into, Const, Duplicated(y, dy), Duplicated(x, read_only([1, -2])))
    np.testing.assert_allclose(dy, [3.0, -6.0])
    # y is written, so its shadow receives the output tangent
    with pytest.raises(ActivityError) as info:
        autodiff(Forward, scale_into, Const, Duplicated(y, read_only([0, 0])),
                 Duplicated(x, np.ones(2)))
    message = str(info.value)
    assert "argument 'y' (position 0)" in message and "writes the argument" in message


def test_a_read_only_shadow_inside_njit_is_refused():
    x = np.array([1.0, 2.0])
    fwd, _ = autodiff_thunk(ReverseSplitWithPrimal, squares, Active, Duplicated(x, np.zeros(2)))

    @numba.njit
    def forward_sweep(x, dx):
        return fwd(Duplicated(x, dx))[1]

    with pytest.raises(ActivityError, match="argument 0.*read-only"):
        forward_sweep(x, read_only([0, 0]))

    @numba.njit
    def active_array(x):
        return fwd(Active(x))[1]

    with pytest.raises(UnsupportedError, match="argument 0 is Active.*mutable"):
        active_array(x)



def cubes(x):
    return (x ** 3).sum()   # an array expression: x's reference count is written, its data not


def test_read_only_tangents_and_points_of_functions_that_only_read_them():
    x, v = read_only([1.0, 2.0]), read_only([1.0, 0.5])
    expected = 3 * x ** 2 @ v
    assert pyzyme.jvp(cubes, (x,), (v,))[1] == pytest.approx(expected, rel=1e-12)
    fd = (cubes(x + 1e-6 * v) - cubes(x - 1e-6 * v)) / 2e-6
    assert expected == pytest.approx(fd, rel=1e-7)
    for point in (x, np.array(x)):  # the direction read-only, the point either way
        np.testing.assert_allclose(pyzyme.hvp(cubes, point, v), 6 * x * v, rtol=1e-12)


def test_loops_go_unnamed_where_the_functions_file_holds_other_text(tmp_path):
    """Code compiled under the name of a file whose lines are other text (a README's block
    run by its tests, a file edited since): the loops that errors name go unnamed, where
    Python 3.12's inspect raised tokenize.TokenError out of the build."""
    from pyzyme.frontends.numba.source_lines import outer_loop_lines
    other = tmp_path / "other.py"
    other.write_text('x = 1\ns = "unterminated\n' + "y = 2\n" * 5)
    scope: dict = {}
    exec(compile("def f(a):\n    for i in range(3):\n        a += i\n    return a\n",  # noqa: S102
                 str(other), "exec"), scope)
    assert outer_loop_lines(scope["f"]) == []
