"""Index-set splitting before differentiation (pyzyme.transforms.index_split): plans tested by
their printed form on hand-written loops, split loops run against the original (bitwise) over
every placement of the skipped index, and pair-loop gradients through Numba, serial and in a
prange body, against finite differences and against the same function with the rewrite off."""

import ctypes

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse
from pyzyme.ir import parse_module
from pyzyme.ir.verify import verify
from pyzyme.naming import index_split, symbol_name
from pyzyme.runtime import compile_module
from pyzyme.settings import Options, using
from pyzyme.transforms.index_split import plan, split
from tests.kernels import central_gradient
from tests.known_bugs import numba_compiles

# s = sum of x[j] * j over j in [j0, n) but p, out[j] = s along the way; returns s, and
# writes the counter's last step to *last.
LOOP = """
define double @loop(ptr %x, ptr %out, ptr %last, i64 %j0, i64 %n, i64 %p) {{
entry:
  br label %head
head:
  %j = phi i64 [ %j0, %entry ], [ %j1, %latch ]
  %s = phi double [ 0.5, %entry ], [ %s2, %latch ]
  {test}
  br i1 %t, label %{first}, label %{second}
body:
  %px = getelementptr double, ptr %x, i64 %j
  %v = load double, ptr %px
  %jf = sitofp i64 %j to double
  %w = fmul double %v, %jf
  %s1 = fadd double %s, %w
  %po = getelementptr double, ptr %out, i64 %j
  store double %s1, ptr %po
  br label %latch
latch:
  %s2 = phi double [ %s, %head ], [ %s1, %body ]
  {latch_extra}
  %j1 = add nsw i64 %j, {step}
  %done = icmp {exit} i64 %j1, %n
  br i1 %done, label %exit, label %head
exit:
  store i64 %j1, ptr %last
  ret double %s2
}}
"""

TESTS = {
    "ne": ("%t = icmp ne i64 %j, %p", "body", "latch"),
    "eq": ("%t = icmp eq i64 %p, %j", "latch", "body"),
    # Numba compares an int64 counter with a uint64 prange index in double precision.
    "float": ("%jd = uitofp i64 %j to double\n  %pd = uitofp i64 %p to double\n"
              "  %t = fcmp une double %jd, %pd", "body", "latch"),
}


def _loop(kind="ne", step="1", exit="eq", latch_extra=""):
    test, first, second = TESTS[kind]
    m = parse_module(LOOP.format(test=test, first=first, second=second, step=step,
                                 exit=exit, latch_extra=latch_extra))
    return m, m.get_function("loop")


@pytest.mark.parametrize("kind, printed", [
    ("ne", "loop %head: split around %p (skipped where %j == %p)"),
    ("eq", "loop %head: split around %p (skipped where %j == %p)"),
    ("float", "loop %head: split around %p (skipped where %j == %p in double)"),
])
def test_a_loop_skipping_one_index_is_split(kind, printed):
    _, fn = _loop(kind)
    assert [str(s) for s in plan(fn)] == [printed]


@pytest.mark.parametrize("changes, reason", [
    (dict(step="2"), "its counter does not count up by one to a bound tested at the latch"),
    (dict(latch_extra="store double %s2, ptr %x"), "the skipped iteration runs"),
], ids=["step 2", "store in the latch"])
def test_refusals(changes, reason):
    _, fn = _loop(**changes)
    (s,) = plan(fn)
    assert str(s).startswith(f"loop %head: left as it is ({reason}")
    assert split(fn) == 0


def test_a_value_changed_by_the_skipped_iteration_is_refused():
    text = LOOP.format(test=TESTS["ne"][0], first="body", second="latch", step="1", exit="eq",
                       latch_extra="")
    # the sum grows on the skipping edge too: the skipped iteration does something
    text = text.replace("%s2 = phi double [ %s, %head ]", "%s2 = phi double [ %sk, %head ]")
    text = text.replace("  br i1 %t,", "  %sk = fadd double %s, 1.0\n  br i1 %t,")
    (s,) = plan(parse_module(text).get_function("loop"))
    assert str(s) == "loop %head: left as it is (%s changes in the skipped iteration)"


def test_a_split_loop_is_split_once():
    m, fn = _loop()
    assert split(fn) == 1
    verify(m)
    assert split(fn) == 0
    (s,) = [s for s in plan(fn) if s.loop.header.name == "head"]
    assert "split already" in str(s)
    names = [b.name for b in fn.blocks]
    for part in ("check", "enter", "first", "between", "second", "after"):
        assert index_split("head", part) in names


def _run(text: str, rewrite: bool, j0: int, n: int, p: int):
    module = parse_module(text)
    if rewrite:
        assert split(module.get_function("loop")) == 1
    verify(module)
    symbol = symbol_name("loop", str(module))   # distinct texts, distinct symbols
    cm = compile_module(str(module).replace("@loop", f"@{symbol}"))
    f = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(cm.address(symbol))
    x = np.linspace(-1.0, 2.0, 16) ** 3
    out = np.full(16, np.nan)
    last = np.zeros(1, dtype=np.int64)
    s = f(x.ctypes.data, out.ctypes.data, last.ctypes.data, j0, n, p)
    return s, out, last[0]


def _assert_alike(text: str, cases) -> None:
    """The loop of ``text`` split and not, run for each ``(j0, n, p)``: bitwise the same."""
    for j0, n, p in cases:
        before = _run(text, False, j0, n, p)
        after = _run(text, True, j0, n, p)
        assert before[0] == after[0] and before[2] == after[2], (j0, n, p)
        np.testing.assert_array_equal(before[1], after[1])


@pytest.mark.parametrize("kind", ["ne", "eq", "float"])
@pytest.mark.parametrize("exit", ["eq", "sge"], ids=["ne-bound", "slt-bound"])
def test_split_loops_run_like_the_original(kind, exit):
    test, first, second = TESTS[kind]
    text = LOOP.format(test=test, first=first, second=second, step="1", exit=exit,
                       latch_extra="")
    cases = [(j0, n, p) for j0, n in ((0, 9), (3, 9), (0, 1), (5, 6))
             for p in sorted({j0 - 2, j0 - 1, j0, j0 + 1, (j0 + n) // 2, n - 2, n - 1, n, n + 3,
                              -(2 ** 62)})]
    if exit == "sge":
        cases += [(7, 3, 5), (7, 7, 7), (4, 4, 2)]   # a do-while loop entered past its bound
    _assert_alike(text, cases)


def test_a_loop_left_early_from_its_body_runs_like_the_original():
    # an exit from the body (as Numba's ZeroDivisionError), listed before the latch's exit
    test, first, second = TESTS["ne"]
    text = LOOP.format(test=test, first=first, second=second, step="1", exit="eq",
                       latch_extra="")
    text = text.replace("  %po = getelementptr double, ptr %out, i64 %j\n",
                        "  %bad = fcmp ogt double %s1, 50.0\n  br i1 %bad, label %early, "
                        "label %go\ngo:\n  %po = getelementptr double, ptr %out, i64 %j\n")
    text = text.replace("head:\n", "early:\n  %at = phi i64 [ %j, %body ]\n  store i64 %at, "
                        "ptr %last\n  ret double -1.0\nhead:\n")
    text = text.replace("[ %s1, %body ]", "[ %s1, %go ]")
    (s,) = plan(parse_module(text).get_function("loop"))
    assert "split around" in str(s)
    _assert_alike(text, [(0, 16, 3), (0, 16, 14), (0, 9, 4), (2, 16, 2)])


def test_float_compare_beyond_the_mantissa_runs_the_original():
    # 2**53 + 1 converts to the same double as 2**53: the original loop skips both indices
    test, first, second = TESTS["float"]
    text = LOOP.format(test=test, first=first, second=second, step="1", exit="eq",
                       latch_extra="").replace("getelementptr double, ptr %x, i64 %j",
                                               "getelementptr double, ptr %x, i64 %jx")
    text = text.replace("%px =", "%jx = and i64 %j, 15\n  %px =").replace(
        "getelementptr double, ptr %out, i64 %j", "getelementptr double, ptr %out, i64 %jx")
    base = 2 ** 53 - 2
    _assert_alike(text, [(base, base + 6, base + 2), (base, base + 6, base + 3)])


# ------------------------------------------------------------------------ through Numba

@numba.njit(inline="always")
def _pair(pos, i, j, sigma):
    dx = pos[i, 0] - pos[j, 0]
    dy = pos[i, 1] - pos[j, 1]
    r2 = dx * dx + dy * dy + sigma
    return 1.0 / r2 + np.sqrt(r2)


def pair_energy(pos, sigma):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(n):
            if j != i:
                e += _pair(pos, i, j, sigma)
    return e


def pair_energy_prange(pos, sigma):
    n = pos.shape[0]
    e = 0.0
    for i in prange(n):
        ei = 0.0
        for j in range(n):
            if j != i:
                ei += _pair(pos, i, j, sigma)
        e += ei
    return e


serial = numba.njit(pair_energy)
parallel = numba.njit(parallel=True)(pair_energy_prange)


def _positions(n=7):
    return np.random.default_rng(3).standard_normal((n, 2))


def _grad(f, pos, split_loops=True):
    d = np.zeros_like(pos)
    with using(Options(split_loops=split_loops, reassociate_adjoints=False)):
        pyzyme.autodiff(Reverse, f, Active, Duplicated(pos, d), Const(0.3))
    return d


def test_a_pair_loops_derivative_is_split():
    pos = _positions()
    text = pyzyme.code_llvm(Reverse, serial, Active, Duplicated(pos, np.zeros_like(pos)),
                            Const(0.3))
    assert ".skip.first" in text and ".skip.second" in text
    with using(Options(split_loops=False)):
        text = pyzyme.code_llvm(Reverse, serial, Active, Duplicated(pos, np.zeros_like(pos)),
                                Const(0.3))
    assert ".skip." not in text


@pytest.mark.parametrize("f", [serial, parallel], ids=["serial", "prange"])
def test_pair_loop_gradients(f):
    pos = _positions()
    numba_compiles(f, pos, 0.3)
    d = _grad(f, pos)
    np.testing.assert_allclose(d, central_gradient(f, pos, 0.3), rtol=1e-6, atol=1e-7)
    # the rewrite keeps the iterations and their order: the same sums, exactly (adjoints not
    # reassociated, so that LLVM vectorizes neither differently)
    np.testing.assert_array_equal(d, _grad(f, pos, split_loops=False))
    for k in range(pos.size):
        t = np.zeros(pos.size)
        t[k] = 1.0
        (_, tangent) = pyzyme.autodiff(Forward, f, Duplicated(pos, t.reshape(pos.shape)),
                                       Const(0.3))
        assert tangent == pytest.approx(d.flat[k], rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_prange_pair_loop_at_thread_counts(threads):
    pos = _positions(11)
    numba_compiles(parallel, pos, 0.3)
    reference = _grad(serial, pos)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for _ in range(3):
            np.testing.assert_allclose(_grad(parallel, pos), reference, rtol=1e-12, atol=1e-13)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_a_split_loop_raises_where_the_original_does():
    # r2 == 0 for every pair: the body's ZeroDivisionError leaves the first copy
    pos = np.zeros((4, 2))
    with pytest.raises(ZeroDivisionError):
        serial(pos, 0.0)
    with pytest.raises(ZeroDivisionError):
        pyzyme.autodiff(Reverse, serial, Active, Duplicated(pos, np.zeros_like(pos)),
                        Const(0.0))


@pytest.mark.parametrize("f", [serial, parallel], ids=["serial", "prange"])
def test_split_pair_loops_in_split_mode_and_hvp(f):
    numba_compiles(f, _positions(), 0.3)
    pos = _positions()
    reference = _grad(f, pos, split_loops=False)
    d = np.zeros_like(pos)
    fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, f, Active,
                                     Duplicated(pos, d), Const(0.3))
    tape, result, _ = fwd(Duplicated(pos, d), Const(0.3))
    assert result == serial(pos, 0.3) or result == pytest.approx(serial(pos, 0.3), rel=1e-13)
    rev(Duplicated(pos, d), Const(0.3), 1.0, tape)
    np.testing.assert_allclose(d, reference, rtol=1e-12, atol=1e-13)
    # forward over reverse, against differences of the gradient along v
    v = np.random.default_rng(5).standard_normal(pos.shape)
    hv = pyzyme.hvp(f, pos, v, 0.3)
    e = 1e-6
    fd = (_grad(f, pos + e * v) - _grad(f, pos - e * v)) / (2 * e)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)

