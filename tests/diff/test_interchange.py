"""Loop interchange before differentiation (pyzyme.transforms.interchange): plans tested by their
printed form on hand-written nests, interchanged nests run against the original (bitwise),
and matrix-product gradients through Numba bitwise equal to those of the nest as written."""

import ctypes

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Const, Duplicated, Reverse
from pyzyme.transforms.interchange import interchange, plan
from pyzyme.ir import parse_module
from pyzyme.ir.verify import verify
from pyzyme.naming import symbol_name
from pyzyme.runtime import compile_module
from tests.kernels import matmul, on_and_off

# C[j] = sum_p A[p] * B[p, j] (B is n x m, row-major): the inner loop walks down a column.
NEST = """
define void @nest(ptr {a} %a, ptr {b} %b, ptr {c} %c, i64 %n, i64 %m) {{
entry:
  br label %outer
outer:
  %j = phi i64 [ 0, %entry ], [ %j1, %latch ]
  %bj = getelementptr double, ptr %b, i64 %j
  br label %inner
inner:
  %p = phi i64 [ {p0}, %outer ], [ %p1, %inner ]
  %s = phi double [ 1.5, %outer ], [ %s1, %inner ]
  %pa = getelementptr double, ptr {aroot}, i64 %p
  %x = load double, ptr %pa
  %row = mul i64 %p, {stride}
  %pb = getelementptr double, ptr %bj, i64 %row
  %y = load double, ptr %pb
  %xy = fmul double %x, %y
  {extra}
  %s1 = fadd double %s, %xy
  %p1 = add nuw nsw i64 %p, 1
  %pdone = icmp eq i64 %p1, {bound}
  br i1 %pdone, label %latch, label %inner
latch:
  %pc = getelementptr double, ptr %c, i64 %j
  store double {stored}, ptr %pc
  %j1 = add nuw nsw i64 %j, 1
  %jdone = icmp eq i64 %j1, %m
  br i1 %jdone, label %exit, label %outer
exit:
  ret void
}}
"""


def _nest(**changes):
    fields = dict(a="noalias", b="noalias", c="noalias", p0="0", aroot="%a", stride="%m",
                  extra="", bound="%n", stored="%s1")
    fields.update(changes)
    text = NEST.format(**fields)
    if "@g" in text:
        text += "declare double @g(double)\n"
    m = parse_module(text)
    return m, m.get_function("nest")


def test_column_walk_is_interchanged():
    _, fn = _nest()
    assert "\n".join(map(str, plan(fn))) == """\
nest %outer > %inner: interchanged
  sum %s stored at %pc [%c + 8*j]
  strided accesses innermost: 1 before, 0 after"""


@pytest.mark.parametrize("changes, reason", [
    (dict(b=""), "%y may read the cells of the sums"),
    (dict(aroot="%c"), "%x may read the cells of the sums"),
    (dict(p0="%j"), "the inner loop's counter does not start at the same value every time"),
    (dict(bound="%j1"), "the inner loop's trip count changes with the outer loop"),
    (dict(stride="1"), "it would not pay (0 strided accesses innermost before, 0 after)"),
    (dict(stored="%xy"), "%s is not stored once after the inner loop"),
    (dict(extra="%gx = call double @g(double %x)"), "the inner loop has %gx"),
    (dict(extra="%v = load volatile double, ptr %pa"), "the inner loop has %v"),
], ids=["unknown B", "reads C", "triangular", "varying trip count", "already in order",
        "stores another value", "calls", "volatile"])
def test_refusals(changes, reason):
    _, fn = _nest(**changes)
    (nest,) = plan(fn)
    assert str(nest) == f"nest %outer > %inner: left as it is ({reason})"
    assert interchange(fn) == 0


def test_one_cell_per_outer_iteration_is_required():
    text = NEST.format(a="noalias", b="noalias", c="noalias", p0="0", aroot="%a", stride="%m",
                       extra="", bound="%n", stored="%s1")
    text = text.replace("%pc = getelementptr double, ptr %c, i64 %j",
                        "%pc = getelementptr double, ptr %c, i64 0")
    (nest,) = plan(parse_module(text).get_function("nest"))
    assert "%s may not get a cell of its own per outer iteration" in str(nest)


def _run(text, interchanged, n, m, a, b, c):
    module = parse_module(text)
    fn = module.get_function("nest")
    if interchanged:
        assert interchange(fn) == 1
    verify(module)
    symbol = symbol_name("nest", str(module))   # see test_distribute._run
    cm = compile_module(str(module).replace("@nest", f"@{symbol}"))
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_int64)(cm.address(symbol))
    f(a.ctypes.data, b.ctypes.data, c.ctypes.data, n, m)


@pytest.mark.parametrize("n, m", [(1, 1), (1, 6), (5, 1), (7, 9)])
@pytest.mark.parametrize("extra, stored", [
    ("", "%s1"),
    ("%sq = fmul double %s, %s\n  %xy2 = call double @llvm.fmuladd.f64(double %sq, "
     "double 0.25, double %xy)", "%s1"),
    # vector moves are pure (ir.opcodes.PURE) like the arithmetic around them
    ("%v = insertelement <2 x double> poison, double %xy, i32 0\n  %w = shufflevector "
     "<2 x double> %v, <2 x double> poison, <2 x i32> zeroinitializer\n  "
     "%xy2 = extractelement <2 x double> %w, i32 1", "%s1"),
], ids=["sum", "nonlinear", "vector"])
def test_interchanged_nest_runs_like_the_original(n, m, extra, stored):
    text = NEST.format(a="noalias", b="noalias", c="noalias", p0="0", aroot="%a",
                       stride="%m", extra=extra, bound="%n", stored=stored)
    if extra:
        text = text.replace("%s1 = fadd double %s, %xy", "%s1 = fadd double %s, %xy2")
        text += "declare double @llvm.fmuladd.f64(double, double, double)\n"
    rng = np.random.default_rng(n * 10 + m)
    a, b = rng.standard_normal(n), rng.standard_normal((n, m))
    results = []
    for interchanged in (False, True):
        c = np.full(m, np.nan)
        _run(text, interchanged, n, m, a, b, c)
        results.append(c)
    # bitwise: the same operations per cell, in order (fmuladd fused alike for one CPU)
    np.testing.assert_array_equal(results[0], results[1])
    assert not np.isnan(results[0]).any()


def test_interchanged_blocks():
    module, fn = _nest()
    assert interchange(fn) == 1
    verify(module)
    inner = next(b for b in fn.blocks if b.name == "outer.interchange.inner")
    # The sum is read from its cell and written back on every iteration, the cell's address
    # computed from the outer counter, now the innermost one.
    ops = [i.opcode for i in inner.instructions]
    assert ops[0] == "phi" and ops.count("load") == 3 and ops.count("store") == 1
    load = next(i for i in inner.instructions if i.opcode == "load")
    assert load.pointer.name.startswith("pc.") and load.name.startswith("s.")


# ------------------------------------------------------------------------ through Numba

@numba.njit
def nonlinear(A, B, C):
    n, k = A.shape
    m = B.shape[1]
    for i in range(n):
        for j in range(m):
            s = 1.0
            for p in range(k):
                s = s * 0.5 + A[i, p] * np.sin(B[p, j])
            C[i, j] = s


@numba.njit
def backwards(A, B, C):
    # j counts down (Numba keeps the wrap-around of j < 0) and the sum starts from C: the
    # nest is left as it is, and the gradient must come out the same either way.
    n, k = A.shape
    m = B.shape[1]
    for i in range(n):
        for j in range(m - 1, -1, -1):
            s = C[i, j] * 0.0 + 1.0
            for p in range(k):
                s = s * 0.5 + A[i, p] * np.sin(B[p, j])
            C[i, j] = s


def _vjp(f, A, B, C, cot):
    dA, dB, dC = np.zeros_like(A), np.zeros_like(B), cot.copy()
    pyzyme.autodiff(Reverse, f, Const, Duplicated(A, dA), Duplicated(B, dB), Duplicated(C, dC))
    return dA, dB, dC


def _both_ways(call):
    return on_and_off(call, "interchange_loops")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matmul_vjp_is_bitwise_the_nest_as_written(dtype):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 5)).astype(dtype)
    B = rng.standard_normal((5, 7)).astype(dtype)
    C = np.zeros((6, 7), dtype)
    cot = rng.standard_normal((6, 7)).astype(dtype)
    on, off = _both_ways(lambda: _vjp(matmul, A, B, C, cot))
    for x, y in zip(on, off):
        np.testing.assert_array_equal(x, y)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(on[0], cot @ B.T, rtol=tol, atol=tol)
    np.testing.assert_allclose(on[1], A.T @ cot, rtol=tol, atol=tol)
    assert not on[2].any()   # C is overwritten: its cotangent is consumed
    text = pyzyme.code_llvm(Reverse, matmul, Const, *(Duplicated(x, x * 0) for x in (A, B, C)))
    # In float32 the sum is a double (s = 0.0) rounded once when stored: kept in a float32
    # cell it would be rounded on every step, so that nest stays as it is.
    assert (".interchange.inner" in text) == (dtype == np.float64)


def test_forward_mode_through_the_interchanged_nest():
    rng = np.random.default_rng(4)
    A, B = rng.standard_normal((5, 4)), rng.standard_normal((4, 6))
    tA, tB = rng.standard_normal(A.shape), rng.standard_normal(B.shape)

    def tangent():
        C, tC = np.zeros((5, 6)), np.zeros((5, 6))
        pyzyme.autodiff(pyzyme.Forward, matmul, Const, Duplicated(A, tA), Duplicated(B, tB),
                        Duplicated(C, tC))
        return tC
    on, off = _both_ways(tangent)
    np.testing.assert_array_equal(on, off)
    np.testing.assert_allclose(on, tA @ B + A @ tB, rtol=1e-12, atol=1e-12)
    args = (Duplicated(A, tA), Duplicated(B, tB), Duplicated(np.zeros((5, 6)), np.zeros((5, 6))))
    assert ".interchange.inner" in pyzyme.code_llvm(pyzyme.Forward, matmul, Const, *args)
    # The same array twice: they overlap, so the nest is left as it is (and still right).
    C, tC = np.zeros((5, 5)), np.zeros((5, 5))
    S, tS = A[:, :4].copy(), tA[:, :4].copy()
    Q = S[:4, :4].copy()
    tQ = tS[:4, :4].copy()
    pyzyme.autodiff(pyzyme.Forward, matmul, Const, Duplicated(Q, tQ), Duplicated(Q, tQ),
                    Duplicated(C[:4, :4], tC[:4, :4]))
    np.testing.assert_allclose(tC[:4, :4], tQ @ Q + Q @ tQ, rtol=1e-12, atol=1e-12)
    text = pyzyme.code_llvm(pyzyme.Forward, matmul, Const, Duplicated(Q, tQ), Duplicated(Q, tQ),
                            Duplicated(C[:4, :4], tC[:4, :4]))
    assert ".interchange." not in text


@pytest.mark.parametrize("f, interchanged", [(nonlinear, True), (backwards, False)],
                         ids=["nonlinear", "backwards"])
def test_nonlinear_nest_and_strided_views(f, interchanged):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((4, 12))[:, ::2]          # non-contiguous rows
    B = rng.standard_normal((6, 5))
    C = np.zeros((4, 5))
    cot = rng.standard_normal((4, 5))
    on, off = _both_ways(lambda: _vjp(f, A, B, C, cot))
    for x, y in zip(on, off):
        np.testing.assert_array_equal(x, y)
    # Against central differences of <cot, C(A, B)>.
    h = 1e-6

    def loss(A, B):
        out = np.zeros((4, 5))
        f(A, B, out)
        return float(np.sum(cot * out))
    for (r, c) in [(0, 0), (3, 5), (2, 1)]:
        E = np.zeros_like(A)
        E[r, c] = h
        fd = (loss(A + E, B) - loss(A - E, B)) / (2 * h)
        assert abs(on[0][r, c] - fd) < 1e-6
    text = pyzyme.code_llvm(Reverse, f, Const, *(Duplicated(x, x * 0) for x in (A, B, C)))
    assert (".interchange.inner" in text) == interchanged


def test_overlapping_arrays_take_the_nest_as_written():
    # A is both factors: reads only, still interchanged; C inside A: not, and still right.
    rng = np.random.default_rng(2)
    A = rng.standard_normal((5, 5))
    C = np.zeros((5, 5))
    cot = rng.standard_normal((5, 5))
    dA, dC = np.zeros_like(A), cot.copy()
    pyzyme.autodiff(Reverse, matmul, Const, Duplicated(A, dA), Duplicated(A, dA),
                    Duplicated(C, dC))
    np.testing.assert_allclose(dA, cot @ A.T + A.T @ cot, rtol=1e-12, atol=1e-12)


@numba.njit
def gram_energy(x):
    # sum((X.T @ X)**2) for X = x.reshape(4, -1), the product as loops into a fresh array.
    k = x.shape[0] // 4
    n = x.shape[0] // k     # 4, but not a constant the loop could be unrolled by
    G = np.empty((k, k))
    for i in range(k):
        for j in range(k):
            s = 0.0
            for p in range(n):
                s += x[p * k + i] * x[p * k + j]
            G[i, j] = s
    return np.sum(G * G)


def test_hessian_vector_product_through_an_interchanged_nest():
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal(12), rng.standard_normal(12)
    hv = pyzyme.hvp(gram_energy, x, v)
    h = 1e-5

    def grad(y):
        return pyzyme.gradient(Reverse, gram_energy, y)
    fd = (grad(x + h * v) - grad(x - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-6)
    X = x.reshape(4, 3)
    np.testing.assert_allclose(grad(x), (4 * X @ (X.T @ X)).ravel(), rtol=1e-12)
    text = pyzyme.code_llvm(Reverse, gram_energy, pyzyme.Active,
                            Duplicated(x, np.zeros_like(x)))
    assert ".interchange.inner" in text   # G is fresh: its cells are its own
