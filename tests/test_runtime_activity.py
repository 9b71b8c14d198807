"""Runtime activity (``pyzyme.set_runtime_activity``): a pointer that is Duplicated memory on
one run and Const memory on another is refused when the option is off, and differentiated
correctly on both runs when it is on (the seed's ``runtimeActivity!``)."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import (
    ActivityError,
    Const,
    Duplicated,
    Forward,
    Reverse,
    ReverseWithPrimal,
    autodiff,
    code_llvm,
)
from pyzyme.analysis.activity import Activity, analyze_activity
from pyzyme.analysis.runtime_activity import analyze_runtime_activity
from pyzyme.ir import parse_module
from pyzyme.settings import Options, current
from tests.doc_blocks import readme_block, run_block


@pytest.fixture(autouse=True)
def _default_off():
    pyzyme.set_runtime_activity(False)
    yield
    pyzyme.set_runtime_activity(False)


@numba.njit
def pick(x, c, flag):
    # Which memory `a` is (x: Duplicated, c: Const) is known only at run time.
    a = x if flag else c
    a[0] = a[0] * a[1]
    return a[0] + x[1] * x[1]


X = np.array([2.0, 3.0])
C = np.array([5.0, 7.0])


def _fd_gradient(flag: bool, h: float = 1e-6) -> np.ndarray:
    grad = np.zeros(2)
    for i in range(2):
        up, down = X.copy(), X.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (pick.py_func(up, C.copy(), flag) - pick.py_func(down, C.copy(), flag)) / (2 * h)
    return grad


def test_default_is_off():
    assert Options().runtime_activity is False
    assert current() == Options()
    assert Options().tag == ""


@pytest.mark.parametrize("mode", [Forward, Reverse])
def test_off_refuses_a_pointer_whose_activity_is_known_only_at_run_time(mode):
    args = (Duplicated(X.copy(), np.array([1.0, 0.0])), Const(C.copy()), Const(True))
    with pytest.raises(ActivityError, match=r"(?s)argument 'c'.*set_runtime_activity\(True\)"):
        autodiff(mode, pick, *args)


@pytest.mark.parametrize("flag", [False, True])
def test_forward_with_runtime_activity_matches_finite_differences(flag):
    pyzyme.set_runtime_activity(True)
    expected = _fd_gradient(flag)
    for i in range(2):
        x, c = X.copy(), C.copy()
        primal, tangent = autodiff(Forward, pick, Duplicated(x, np.eye(2)[i]), Const(c),
                                   Const(flag))
        assert primal == pick.py_func(X.copy(), C.copy(), flag)
        assert tangent == pytest.approx(expected[i], rel=1e-6)
        # The primal runs as it would: the Const array is written only when it was chosen.
        np.testing.assert_array_equal(c, C if flag else [35.0, 7.0])


@pytest.mark.parametrize("flag", [False, True])
def test_reverse_with_runtime_activity_matches_finite_differences(flag):
    pyzyme.set_runtime_activity(True)
    x, c, dx = X.copy(), C.copy(), np.zeros(2)
    derivs, primal = autodiff(ReverseWithPrimal, pick, Duplicated(x, dx), Const(c), Const(flag))
    assert derivs == (None, None, None)
    assert primal == pick.py_func(X.copy(), C.copy(), flag)
    np.testing.assert_allclose(dx, _fd_gradient(flag), rtol=1e-6)
    np.testing.assert_array_equal(c, C if flag else [35.0, 7.0])  # no adjoint written into c


@numba.njit
def pick_in_a_loop(x, c, n):
    # A select inside a loop: the reverse sweep needs each iteration's primal pointer again.
    s = 0.0
    for i in range(n):
        a = x if i % 3 == 0 else c
        a[i % 2] = a[i % 2] * 1.5
        s += a[i % 2] * a[(i + 1) % 2]
    return s


def test_both_modes_in_a_loop_match_finite_differences():
    pyzyme.set_runtime_activity(True)
    x, c, h = np.array([0.7, 1.3]), np.array([0.4, 0.9]), 1e-6
    fd = [(pick_in_a_loop.py_func(x + h * e, c.copy(), 7)
           - pick_in_a_loop.py_func(x - h * e, c.copy(), 7)) / (2 * h) for e in np.eye(2)]
    dx = np.zeros(2)
    autodiff(Reverse, pick_in_a_loop, Duplicated(x.copy(), dx), Const(c.copy()), Const(7))
    np.testing.assert_allclose(dx, fd, rtol=1e-6)
    for i in range(2):
        _, tangent = autodiff(Forward, pick_in_a_loop, Duplicated(x.copy(), np.eye(2)[i]),
                              Const(c.copy()), Const(7))
        assert tangent == pytest.approx(fd[i], rel=1e-6)


def test_the_option_is_part_of_the_cache_key():
    args = lambda: (Duplicated(X.copy(), np.zeros(2)), Const(C.copy()), Const(False))  # noqa: E731
    pyzyme.set_runtime_activity(True)
    autodiff(Reverse, pick, *args())
    pyzyme.set_runtime_activity(False)
    with pytest.raises(ActivityError):  # not the derivative compiled with the option on
        autodiff(Reverse, pick, *args())
    pyzyme.set_runtime_activity(True)
    dx = np.zeros(2)
    autodiff(Reverse, pick, Duplicated(X.copy(), dx), Const(C.copy()), Const(False))
    np.testing.assert_allclose(dx, _fd_gradient(False), rtol=1e-6)


@numba.njit
def plain(x):
    return x[0] * x[1]


def test_code_without_merges_is_the_same_under_both_settings():
    # The checks go only where a shadow may be its primal: elsewhere, no cost.
    args = (Duplicated(X.copy(), np.zeros(2)),)
    off = code_llvm(Reverse, plain, *args)
    pyzyme.set_runtime_activity(True)
    on = code_llvm(Reverse, plain, *args)
    assert "rt.inactive" not in on
    symbols = lambda text: set(w for w in text.split() if w.startswith("@__pyzyme"))  # noqa
    for a, b in zip(sorted(symbols(off)), sorted(symbols(on))):
        on = on.replace(b, a)
    assert on == off


def test_the_checks_compare_shadow_and_primal():
    pyzyme.set_runtime_activity(True)
    text = code_llvm(Forward, pick, Duplicated(X.copy(), np.zeros(2)), Const(C.copy()),
                     Const(True))
    assert "%rt.inactive = icmp eq ptr" in text


def test_analysis_finds_a_select_of_shadowed_and_unshadowed_memory():
    m = parse_module("""@msg = private constant [3 x i8] c"abc"

define double @f(ptr %x, ptr %c, i1 %flag) {
entry:
  %a = select i1 %flag, ptr %x, ptr %c
  %p = getelementptr i8, ptr %a, i64 8
  %v = load double, ptr %p
  %n = select i1 %flag, ptr %x, ptr null
  %w = load double, ptr %n
  %b = select i1 %flag, ptr %x, ptr @msg
  %u = load double, ptr %b
  %s = fadd double %v, %w
  %t = fadd double %s, %u
  ret double %t
}""")
    fn = m.get_function("f")
    act = analyze_activity(fn, [Activity.DUPLICATED, Activity.CONST, Activity.CONST])
    ra = analyze_runtime_activity(fn, act)
    # Null holds no derivatives; constant bytes read as a double do (Numba's constant arrays
    # are such globals): %c's memory and @msg make %a's and %b's activity vary.
    assert sorted(v.name for v in ra.values) == ["a", "b", "p"]
    assert [u.name for u in ra.needs] == ["v", "u"]
    assert ra.sources[ra.origin[fn.blocks[0].instructions[1]]] is fn.args[1]


def test_set_runtime_activity_rejects_non_booleans():
    with pytest.raises(TypeError):
        pyzyme.set_runtime_activity("yes")


def test_readme_runtime_activity_example():
    scope = run_block(readme_block("set_runtime_activity"))
    np.testing.assert_allclose(scope["dx"], [0.0, 1.0])
    assert current().runtime_activity is False  # the example turns it off again
