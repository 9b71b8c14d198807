"""Vector instructions and intrinsics in both modes: shufflevector, insertelement,
extractelement, vector arithmetic and select, the floating reductions, masked loads and stores,
gathers and scatters, and the math intrinsics at vector width; in hand-written IR, in clang -O3
output, and in a Numba kernel compiled (vectorized) before pyzyme was imported.

Each derivative is checked against central finite differences of the primal compiled by
llvmlite, and reverse mode against forward mode.
"""

from __future__ import annotations

import ctypes
import functools
import random
import re

import numpy as np
import pytest

import pyzyme.llvm as pl
from pyzyme import ir
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.frontends.c.clang import compile_to_ir, ziglang_available
from pyzyme.rules import default_rules
from pyzyme.rules.spec import Partials
from pyzyme.runtime.standalone import Program
from tests.test_rules_table import case_for

needs_zig = pytest.mark.skipif(not ziglang_available(), reason="needs the 'ziglang' package")

DECLARATIONS = """
declare double @llvm.vector.reduce.fadd.v4f64(double, <4 x double>)
declare double @llvm.vector.reduce.fadd.v5f64(double, <5 x double>)
declare double @llvm.vector.reduce.fmul.v4f64(double, <4 x double>)
declare double @llvm.vector.reduce.fmax.v4f64(<4 x double>)
declare double @llvm.vector.reduce.fmin.v4f64(<4 x double>)
declare double @llvm.vector.reduce.fmaximum.v4f64(<4 x double>)
declare double @llvm.vector.reduce.fminimum.v4f64(<4 x double>)
declare float @llvm.vector.reduce.fadd.v8f32(float, <8 x float>)
declare float @llvm.vector.reduce.fmax.v8f32(<8 x float>)
declare <4 x double> @llvm.masked.load.v4f64.p0(ptr, <4 x i1>, <4 x double>)
declare void @llvm.masked.store.v4f64.p0(<4 x double>, ptr, <4 x i1>)
declare <4 x double> @llvm.masked.gather.v4f64.v4p0(<4 x ptr>, <4 x i1>, <4 x double>)
declare void @llvm.masked.scatter.v4f64.v4p0(<4 x double>, <4 x ptr>, <4 x i1>)
declare <4 x double> @llvm.fmuladd.v4f64(<4 x double>, <4 x double>, <4 x double>)
declare <4 x double> @llvm.fma.v4f64(<4 x double>, <4 x double>, <4 x double>)
declare <4 x double> @llvm.sqrt.v4f64(<4 x double>)
declare <4 x double> @llvm.exp.v4f64(<4 x double>)
declare <4 x double> @llvm.powi.v4f64.i32(<4 x double>, i32)
"""

# name -> (IR of `double @name(ptr %x)`, how many doubles it reads from %x)
KERNELS = {
    # Two operands, lanes taken twice, a poison lane (dropped by the second shuffle before
    # anything sums it), results longer and shorter than the operands.
    "shuffle": ("""
define double @shuffle(ptr %x) {
  %a = load <4 x double>, ptr %x, align 8
  %q = getelementptr double, ptr %x, i64 4
  %b = load <4 x double>, ptr %q, align 8
  %s = shufflevector <4 x double> %a, <4 x double> %b, <6 x i32> <i32 7, i32 0, i32 poison, i32 0, i32 5, i32 2>
  %t = shufflevector <6 x double> %s, <6 x double> poison, <5 x i32> <i32 0, i32 1, i32 3, i32 4, i32 5>
  %w = fmul <5 x double> %t, <double 1.0, double 2.0, double 3.0, double 4.0, double 5.0>
  %sq = fmul <5 x double> %w, %t
  %r = call double @llvm.vector.reduce.fadd.v5f64(double 0.0, <5 x double> %sq)
  ret double %r
}""", 8),
    # A scalar broadcast (what a vectorized saxpy does with `a`), and an active start value.
    "splat": ("""
define double @splat(ptr %x) {
  %s = load double, ptr %x, align 8
  %q = getelementptr double, ptr %x, i64 1
  %v = load <4 x double>, ptr %q, align 8
  %i = insertelement <4 x double> poison, double %s, i64 0
  %b = shufflevector <4 x double> %i, <4 x double> poison, <4 x i32> zeroinitializer
  %m = fmul <4 x double> %b, %v
  %m2 = fmul <4 x double> %m, %b
  %r = call double @llvm.vector.reduce.fadd.v4f64(double %s, <4 x double> %m2)
  ret double %r
}""", 5),
    # Lanes inserted and extracted at an index known only at run time.
    "elements": ("""
define double @elements(ptr %x) {
  %v = load <4 x double>, ptr %x, align 8
  %q = getelementptr double, ptr %x, i64 4
  %e = load double, ptr %q, align 8
  %c = fcmp ogt double %e, 1.0
  %k = select i1 %c, i32 1, i32 2
  %w = insertelement <4 x double> %v, double %e, i32 %k
  %w2 = fmul <4 x double> %w, %w
  %j = xor i32 %k, 3
  %a = extractelement <4 x double> %w2, i32 %j
  %b = extractelement <4 x double> %w2, i32 %k
  %t = fmul double %a, %b
  %u = extractelement <4 x double> %w, i64 0
  %r = fadd double %t, %u
  ret double %r
}""", 5),
    # Lane-wise arithmetic, a vector condition, fused multiply-adds.
    "arith": ("""
define double @arith(ptr %x) {
  %a = load <4 x double>, ptr %x, align 8
  %q = getelementptr double, ptr %x, i64 4
  %b = load <4 x double>, ptr %q, align 8
  %s = fadd <4 x double> %a, %b
  %d = fsub <4 x double> %a, %b
  %p = fmul <4 x double> %s, %d
  %f = fdiv <4 x double> %p, %b
  %n = fneg <4 x double> %f
  %c = fcmp olt <4 x double> %a, %b
  %sel = select <4 x i1> %c, <4 x double> %n, <4 x double> %s
  %g = call <4 x double> @llvm.fmuladd.v4f64(<4 x double> %sel, <4 x double> %a, <4 x double> %b)
  %h = call <4 x double> @llvm.fma.v4f64(<4 x double> %g, <4 x double> %g, <4 x double> %a)
  %r = call double @llvm.vector.reduce.fadd.v4f64(double -0.0, <4 x double> %h)
  ret double %r
}""", 8),
    "fmul": ("""
define double @fmul(ptr %x) {
  %a = load <4 x double>, ptr %x, align 8
  %q = getelementptr double, ptr %x, i64 4
  %s = load double, ptr %q, align 8
  %r = call double @llvm.vector.reduce.fmul.v4f64(double %s, <4 x double> %a)
  ret double %r
}""", 5),
    "minmax": ("""
define double @minmax(ptr %x) {
  %a = load <4 x double>, ptr %x, align 8
  %q = getelementptr double, ptr %x, i64 4
  %b = load <4 x double>, ptr %q, align 8
  %r1 = call double @llvm.vector.reduce.fmax.v4f64(<4 x double> %a)
  %r2 = call double @llvm.vector.reduce.fmin.v4f64(<4 x double> %b)
  %r3 = call double @llvm.vector.reduce.fmaximum.v4f64(<4 x double> %b)
  %r4 = call double @llvm.vector.reduce.fminimum.v4f64(<4 x double> %a)
  %p = fmul double %r1, %r2
  %p2 = fmul double %r3, 3.0
  %p3 = fmul double %r4, %r4
  %s = fadd double %p, %p2
  %r = fadd double %s, %p3
  ret double %r
}""", 8),
    # A masked load (its disabled lanes from an active pass-through), a masked store over a
    # stack slot, and math intrinsics at vector width.
    "masked": ("""
define double @masked(ptr %x) {
  %a = load <4 x double>, ptr %x, align 8
  %q = getelementptr double, ptr %x, i64 4
  %m = fcmp ogt <4 x double> %a, splat (double 1.2)
  %l = call <4 x double> @llvm.masked.load.v4f64.p0(ptr align 8 %q, <4 x i1> %m, <4 x double> %a)
  %sq = fmul <4 x double> %l, %l
  %y = alloca <4 x double>, align 32
  store <4 x double> %a, ptr %y, align 32
  %m2 = xor <4 x i1> %m, <i1 true, i1 false, i1 false, i1 false>
  call void @llvm.masked.store.v4f64.p0(<4 x double> %sq, ptr align 8 %y, <4 x i1> %m2)
  %z = load <4 x double>, ptr %y, align 32
  %z2 = call <4 x double> @llvm.sqrt.v4f64(<4 x double> %z)
  %z3 = call <4 x double> @llvm.powi.v4f64.i32(<4 x double> %z2, i32 3)
  %z4 = call <4 x double> @llvm.exp.v4f64(<4 x double> %z3)
  %r = call reassoc double @llvm.vector.reduce.fadd.v4f64(double -0.0, <4 x double> %z4)
  ret double %r
}""", 8),
    # Lanes 0 and 2 gather one address (both adjoints accumulate there); lanes 0 and 2 scatter
    # to one address (only lane 2's value stays, so only it gets the adjoint).
    "gather": ("""
define double @gather(ptr %x) {
  %a = load <4 x double>, ptr %x, align 8
  %q = getelementptr double, ptr %x, <4 x i64> <i64 4, i64 5, i64 4, i64 6>
  %m = fcmp ogt <4 x double> %a, splat (double 0.8)
  %l = call <4 x double> @llvm.masked.gather.v4f64.v4p0(<4 x ptr> align 8 %q, <4 x i1> %m, <4 x double> %a)
  %sq = fmul <4 x double> %l, %a
  %y = alloca [4 x double], align 8
  store <4 x double> %a, ptr %y, align 8
  %p = getelementptr double, ptr %y, <4 x i64> <i64 1, i64 3, i64 1, i64 0>
  call void @llvm.masked.scatter.v4f64.v4p0(<4 x double> %sq, <4 x ptr> align 8 %p, <4 x i1> %m)
  %z = load <4 x double>, ptr %y, align 8
  %w = fmul <4 x double> %z, <double 1.0, double 2.0, double 3.0, double 4.0>
  %r = call double @llvm.vector.reduce.fadd.v4f64(double -0.0, <4 x double> %w)
  ret double %r
}""", 8),
    # A vectorized loop: vector phis (a lane counter among them), a carried product.
    "loop": ("""
define double @loop(ptr %x) {
entry:
  br label %body
body:
  %i = phi i64 [ 0, %entry ], [ %i.next, %body ]
  %lanes = phi <4 x i32> [ <i32 0, i32 1, i32 2, i32 3>, %entry ], [ %lanes.next, %body ]
  %acc = phi <4 x double> [ splat (double 1.0), %entry ], [ %acc.next, %body ]
  %p = getelementptr double, ptr %x, i64 %i
  %v = load <4 x double>, ptr %p, align 8
  %w = sitofp <4 x i32> %lanes to <4 x double>
  %vw = fmul <4 x double> %v, %w
  %prod = fmul <4 x double> %vw, %acc
  %acc.next = fadd <4 x double> %prod, %v
  %lanes.next = add <4 x i32> %lanes, splat (i32 4)
  %i.next = add i64 %i, 4
  %done = icmp eq i64 %i.next, 12
  br i1 %done, label %exit, label %body
exit:
  %r = call double @llvm.vector.reduce.fadd.v4f64(double -0.0, <4 x double> %acc.next)
  ret double %r
}""", 12),
    # Single precision: eight lanes, reductions of floats.
    "float": ("""
define double @float(ptr %x) {
  %a = load <8 x double>, ptr %x, align 8
  %f = fptrunc <8 x double> %a to <8 x float>
  %r = shufflevector <8 x float> %f, <8 x float> poison, <8 x i32> <i32 7, i32 6, i32 5, i32 4, i32 3, i32 2, i32 1, i32 0>
  %p = fmul <8 x float> %f, %r
  %s = call reassoc float @llvm.vector.reduce.fadd.v8f32(float -0.0, <8 x float> %p)
  %m = call float @llvm.vector.reduce.fmax.v8f32(<8 x float> %f)
  %t = fmul float %s, %m
  %d = fpext float %t to double
  ret double %d
}""", 8),
}


def _points(name: str, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, name)))
    points = [rng.uniform(0.5, 2.0, n) for _ in range(2)]
    if name == "elements":  # both values of the run-time lane index
        points[0][4], points[1][4] = 0.7, 1.6
    if name == "masked":
        points[0][:4] = [0.7, 1.5, 1.9, 0.9]
    return points


def _compiled(text: str, name: str):
    primal = Program(text, name=name, opt_level=0).function(name, ctypes.c_double,
                                                           [ctypes.c_void_p])
    reverse = pl.compile(text, name, "reverse", ["dup"])
    forward = pl.compile(text, name, "forward", ["dup"])
    return primal, reverse, forward


def _finite_differences(f, x: np.ndarray, step: float) -> np.ndarray:
    out = np.empty(len(x))
    for i in range(len(x)):
        up, down = x.copy(), x.copy()
        h = step * max(1.0, abs(x[i]))
        up[i] += h
        down[i] -= h
        out[i] = (f(up.ctypes.data) - f(down.ctypes.data)) / (2 * h)
    return out


def _both_modes(reverse, forward, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The gradient by reverse mode, and by forward mode one direction at a time."""
    grad = np.zeros(len(x))
    reverse(x.ctypes.data, grad.ctypes.data, 1.0)
    tangents = []
    for e in np.eye(len(x)):
        e = np.ascontiguousarray(e)
        tangents.append(forward(x.ctypes.data, e.ctypes.data).f1)
    return grad, np.array(tangents)


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_against_finite_differences_in_both_modes(name):
    body, n = KERNELS[name]
    primal, reverse, forward = _compiled(DECLARATIONS + body, name)
    single = name == "float"
    for x in _points(name, n):
        grad, tangents = _both_modes(reverse, forward, x)
        fd = _finite_differences(primal, x, 2.0 ** -9 if single else 2.0 ** -17)
        np.testing.assert_allclose(grad, fd, rtol=2e-3 if single else 1e-6, atol=1e-6,
                                   err_msg=f"{name} at {x}")
        np.testing.assert_allclose(grad, tangents, rtol=1e-5 if single else 1e-12,
                                   atol=1e-12)
        assert np.count_nonzero(grad) >= n // 2, grad  # the kernels reach most inputs


@pytest.mark.parametrize("name", ["fmul", "minmax", "masked", "gather"])
def test_forward_vector_mode(name):
    """Two tangents per value (width 2) give two columns of the gradient."""
    body, n = KERNELS[name]
    text = DECLARATIONS + body
    x = _points(name, n)[0]
    grad = np.zeros(n)
    pl.compile(text, name, "reverse", ["dup"])(x.ctypes.data, grad.ctypes.data, 1.0)
    forward = pl.compile(text, name, "forward", ["dup"], width=2)
    picked = np.flatnonzero(grad)[[0, -1]]
    e0, e1 = np.eye(n)[picked[0]].copy(), np.eye(n)[picked[1]].copy()
    out = forward(x.ctypes.data, e0.ctypes.data, e1.ctypes.data)
    np.testing.assert_allclose([out.f1, out.f2], grad[picked], rtol=1e-12)


def _gradient(body: str, name: str, x) -> tuple[np.ndarray, np.ndarray]:
    _, reverse, forward = _compiled(DECLARATIONS + body, name)
    return _both_modes(reverse, forward, np.array(x, dtype=float))


MAX_OF_FOUR = """
define double @{name}(ptr %x) {{
  %a = load <4 x double>, ptr %x, align 8
  %r = call double @llvm.vector.reduce.{name}.v4f64(<4 x double> %a)
  ret double %r
}}"""


@pytest.mark.parametrize("name, x, expected", [
    ("fmax", [1.0, 3.0, 3.0, 2.0], [0, 1, 0, 0]),           # a tie: the first lane
    ("fmin", [2.0, -0.0, 0.0, 1.0], [0, 1, 0, 0]),          # -0 == +0 is a tie too
    ("fmax", [np.nan, 2.0, np.nan, 1.0], [0, 1, 0, 0]),     # NaN lanes are ignored
    ("fmaximum", [1.0, 4.0, np.nan, 4.0], [0, 0, 1, 0]),   # NaN result: the NaN lane
    ("fminimum", [np.nan, 4.0, np.nan, 0.5], [1, 0, 0, 0]),
])
def test_max_and_min_reductions_pick_one_lane(name, x, expected):
    grad, tangents = _gradient(MAX_OF_FOUR.format(name=name), name, x)
    np.testing.assert_array_equal(grad, expected)
    np.testing.assert_array_equal(tangents, expected)


def test_product_reduction_at_zero_lanes():
    """The product of the other lanes, not the product divided by the lane: exact at zeros,
    where a quotient would give NaN."""
    _, reverse, forward = _compiled(DECLARATIONS + KERNELS["fmul"][0], "fmul")
    for x in ([2.0, 0.0, 3.0, 4.0, 5.0], [2.0, 0.0, 3.0, 0.0, 5.0], [0.0, 1.5, -2.0, 4.0, 0.0]):
        x = np.array(x)
        grad, tangents = _both_modes(reverse, forward, x)
        expected = [np.prod(np.delete(x, i)) for i in range(5)]  # exact in any order here
        np.testing.assert_array_equal(grad, expected)
        np.testing.assert_array_equal(tangents, expected)


def test_shufflevector_mask_lanes_are_read_from_every_constant_form():
    m = ir.parse_module("""
define <4 x double> @f(<2 x double> %a, <2 x double> %b) {
  %z = shufflevector <2 x double> %a, <2 x double> %b, <4 x i32> zeroinitializer
  %s = shufflevector <2 x double> %a, <2 x double> %b, <4 x i32> splat (i32 3)
  %p = shufflevector <2 x double> %a, <2 x double> %b, <4 x i32> poison
  %c = shufflevector <2 x double> %a, <2 x double> %b, <4 x i32> <i32 2, i32 undef, i32 poison, i32 1>
  ret <4 x double> %c
}""")
    lanes = [inst.mask_lanes for inst in m.get_function("f").instructions()
             if inst.opcode == "shufflevector"]
    assert lanes == [[0] * 4, [3] * 4, [None] * 4, [2, None, None, 1]]


# -- the math intrinsics at vector width ---------------------------------------------------------
INTRINSIC_ROWS = sorted(name for row in default_rules().rows()
                        if isinstance(row, Partials) and row.kind == "intrinsic"
                        for name in row.names)
LANES = 4


def _math_kernel(name: str, row: Partials, samples: list[tuple]) -> tuple[str, list[int]]:
    """``void @k(ptr %out, ptr %a0, ...)``: ``name`` on <4 x double> operands loaded from the
    pointers (its integer operand a constant of the samples), the result stored to %out.
    Returns the IR and the positions of the float operands."""
    vec = f"<{LANES} x double>"
    params, lines, operands, types, floats = ["ptr %out"], [], [], [], []
    for i, p in enumerate(row.partials):
        if isinstance(samples[0][i], int) or (p is None and samples[0][i] is None):
            ints = [s[i] for s in samples]
            if name == "llvm.powi":  # a scalar exponent
                operands.append(f"i32 {ints[0]}")
                types.append("i32")
            else:
                operands.append(f"<{LANES} x i32> <" + ", ".join(f"i32 {k}" for k in ints)
                                + ">")
                types.append(f"<{LANES} x i32>")
            continue
        floats.append(i)
        params.append(f"ptr %a{i}")
        lines.append(f"  %v{i} = load {vec}, ptr %a{i}, align 8")
        operands.append(f"{vec} %v{i}")
        types.append(vec)
    suffix = ".v4f64" + "".join(f".{'v4i32' if t.startswith('<') else 'i32'}"
                                for t in types if "i32" in t)
    ret = vec if row.result_field is None else f"{{ {vec}, <{LANES} x i32> }}"
    lines.append(f"  %r = call {ret} @{name}{suffix}({', '.join(operands)})")
    result = "%r"
    if row.result_field is not None:
        lines.append(f"  %r0 = extractvalue {ret} %r, {row.result_field}")
        result = "%r0"
    lines.append(f"  store {vec} {result}, ptr %out, align 8")
    text = (f"define void @k({', '.join(params)}) {{\n" + "\n".join(lines) + "\n  ret void\n}\n"
            f"declare {ret} @{name}{suffix}({', '.join(types)})\n")
    return text, floats


@pytest.mark.parametrize("name", INTRINSIC_ROWS)
def test_math_intrinsic_at_vector_width(name):
    """Each intrinsic's rule row on <4 x double>: reverse mode against finite differences of
    each lane (the lanes are independent) and against forward mode."""
    row = default_rules().lookup(name, "call")
    primal_of, domain = case_for(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    pyrng = random.Random(name)
    samples = [domain(pyrng) for _ in range(LANES)]
    if name == "llvm.powi":  # one scalar exponent for every lane (not 0: LLVM folds x^0)
        samples = [(s[0], 3) for s in samples]
    text, floats = _math_kernel(name, row, samples)
    xs = [np.array([s[i] for s in samples], dtype=float) for i in floats]
    k = Program(text, name=name, opt_level=0).function(
        "k", None, [ctypes.c_void_p] * (1 + len(floats)))

    def run(args):
        out = np.zeros(LANES)
        k(out.ctypes.data, *[a.ctypes.data for a in args])
        return out

    expected = np.array([primal_of(*s) for s in samples])
    np.testing.assert_allclose(run(xs), expected, rtol=1e-13)
    reverse = pl.compile(text, "k", "reverse", ["dup"] * (1 + len(floats)))
    forward = pl.compile(text, "k", "forward", ["dup"] * (1 + len(floats)))
    seed = rng.uniform(0.5, 1.5, LANES)
    out = np.zeros(LANES)
    shadows = [np.zeros(LANES) for _ in floats]
    reverse(out.ctypes.data, *[a.ctypes.data for a in xs], seed.copy().ctypes.data,
            *[s.ctypes.data for s in shadows])
    for j, x in enumerate(xs):
        h = 2.0 ** -17 * np.maximum(1.0, np.abs(x))
        up, down = list(xs), list(xs)
        up[j], down[j] = x + h, x - h
        fd = (run(up) - run(down)) / (2 * h)
        np.testing.assert_allclose(shadows[j], seed * fd, rtol=1e-6, atol=1e-9,
                                   err_msg=f"{name}, operand {floats[j]}")
        tangents = [np.zeros(LANES) for _ in floats]
        tangents[j][:] = 1.0
        dout = np.zeros(LANES)
        forward(out.ctypes.data, *[a.ctypes.data for a in xs], dout.ctypes.data,
                *[t.ctypes.data for t in tangents])
        np.testing.assert_allclose(seed * dout, shadows[j], rtol=1e-12, atol=1e-300)


# -- refusals ------------------------------------------------------------------------------------
def test_scalable_vectors_are_refused():
    text = """
define double @f(ptr %x) {
  %a = load <vscale x 2 x double>, ptr %x, align 8
  %r = call double @llvm.vector.reduce.fadd.nxv2f64(double -0.0, <vscale x 2 x double> %a)
  ret double %r
}
declare double @llvm.vector.reduce.fadd.nxv2f64(double, <vscale x 2 x double>)"""
    for mode in ("forward", "reverse"):
        with pytest.raises(UnsupportedError, match="scalable vectors"):
            pl.differentiate(text, "f", mode, ["dup"])


def test_floats_read_as_other_floats_are_refused():
    # <2 x double> read as <4 x float>: no linear map of the doubles' derivatives
    text = """
define float @f(<2 x double> %v) {
  %w = bitcast <2 x double> %v to <4 x float>
  %e = extractelement <4 x float> %w, i32 1
  ret float %e
}"""
    for mode, activity in (("forward", "dup"), ("reverse", "active")):
        with pytest.raises(UnsupportedError, match="reinterprets <2 x double> as <4 x float>"):
            pl.differentiate(text, "f", mode, [activity])


def test_masked_store_of_active_lanes_into_memory_without_shadow():
    text = DECLARATIONS + """
define void @f(ptr %x, ptr %y) {
  %a = load <4 x double>, ptr %x, align 8
  %m = fcmp ogt <4 x double> %a, zeroinitializer
  call void @llvm.masked.store.v4f64.p0(<4 x double> %a, ptr align 8 %y, <4 x i1> %m)
  ret void
}"""
    for mode in ("forward", "reverse"):
        with pytest.raises(ActivityError, match="no shadow"):
            pl.differentiate(text, "f", mode, ["dup", "const"])


def test_masked_store_of_integers_into_active_memory_is_refused_in_reverse_mode():
    text = """
define void @f(ptr %x, <4 x i64> %bits, <4 x i1> %m) {
  call void @llvm.masked.store.v4i64.p0(<4 x i64> %bits, ptr align 8 %x, <4 x i1> %m)
  ret void
}
declare void @llvm.masked.store.v4i64.p0(<4 x i64>, ptr, <4 x i1>)"""
    with pytest.raises(UnsupportedError, match="masked stores of floats only"):
        pl.differentiate(text, "f", "reverse", ["dup", "const", "const"])


# -- clang -O3 -----------------------------------------------------------------------------------
C_KERNELS = """
double dot(const double *x, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i] * x[n + i];
  return s;
}
void saxpy_into(double *y, const double *x, int n) {
  double a = x[2 * n];
  for (int i = 0; i < n; i++) y[i] += a * x[i] * x[n + i];
}
double saxpy(const double *x, int n) {
  double y[64];
  for (int i = 0; i < n; i++) y[i] = x[i];
  saxpy_into(y, x, n);
  double s = 0;
  for (int i = 0; i < n; i++) s += y[i] * y[i] * (i + 1);
  return s;
}
double product(const double *x, int n) {
  double p = 1;
  for (int i = 0; i < n; i++) p *= x[i];
  return p;
}
double maximum(const double *x, int n) {
  double m = x[0];
  for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
  return m * x[n];
}
float sdot(const float *x, int n) {
  float s = 0;
  for (int i = 0; i < n; i++) s += x[i] * x[n + i];
  return s;
}
"""
N = 27  # a vector loop and a remainder


@functools.cache
def _vectorized_c(flags: str) -> str:
    opt, *extra = flags.split()
    return compile_to_ir(C_KERNELS, opt=opt, extra_args=tuple(extra))


@needs_zig
@pytest.mark.parametrize("flags, name, size", [
    ("-O3", "saxpy", 2 * N + 1),  # strict floating point vectorizes no reduction
    ("-O3 -ffast-math", "saxpy", 2 * N + 1),
    ("-O3 -ffast-math", "dot", 2 * N),
    ("-O3 -ffast-math", "product", N),
    ("-O3 -ffast-math", "maximum", N + 1),
])
def test_clang_vectorized_loops(flags, name, size):
    text = _vectorized_c(flags)
    body = text.split(f"@{name}(")[1].split("\n}\n")[0]
    assert re.search(r"<\d+ x double>", body), body
    # The reductions, and the broadcast of the saxpy's a.
    assert ("shufflevector" if name == "saxpy" else "llvm.vector.reduce") in body
    primal = Program(text, name=name, opt_level=0).function(
        name, ctypes.c_double, [ctypes.c_void_p, ctypes.c_int])
    reverse = pl.compile(text, name, "reverse", ["dup", "const"])
    forward = pl.compile(text, name, "forward", ["dup", "const"])
    rng = np.random.default_rng(7)
    x = rng.uniform(0.8, 1.2, size)
    grad = np.zeros(size)
    reverse(x.ctypes.data, N, grad.ctypes.data, 1.0)
    fd = _finite_differences(lambda p: primal(p, N), x, 2.0 ** -17)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
    tangents = np.array([forward(x.ctypes.data, N, np.ascontiguousarray(e).ctypes.data).f1
                         for e in np.eye(size)])
    np.testing.assert_allclose(tangents, grad, rtol=1e-12, atol=1e-14)


@needs_zig
def test_clang_vectorized_float_reduction():
    text = _vectorized_c("-O3 -ffast-math")
    assert "llvm.vector.reduce.fadd.v" in text.split("@sdot(")[1].split("\n}\n")[0]
    reverse = pl.compile(text, "sdot", "reverse", ["dup", "const"])
    x = np.random.default_rng(3).uniform(-1, 1, 2 * N).astype(np.float32)
    grad = np.zeros(2 * N, np.float32)
    reverse(x.ctypes.data, N, grad.ctypes.data, 1.0)
    np.testing.assert_array_equal(grad, np.concatenate([x[N:], x[:N]]))  # products of one
