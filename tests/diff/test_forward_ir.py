"""The forward generator on hand-written IR: verified by LLVM, run by MCJIT, checked against
finite differences; and its printed output for a small function."""

import ctypes
import math

import llvmlite.binding as llvm
import numpy as np
import pytest

from pyzyme import ActivityError, UnsupportedError, ir
from pyzyme.analysis.activity import Activity, analyze_activity
from pyzyme.diff.forward.generator import ForwardGenerator, ForwardSignature
from pyzyme.rules import default_rules

A, C, D = Activity.ACTIVE, Activity.CONST, Activity.DUPLICATED

LOOP = r"""
define double @f(double %x, ptr %a, i64 %n) {
entry:
  %c = icmp sgt i64 %n, 0
  br i1 %c, label %loop, label %exit
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %p = getelementptr inbounds double, ptr %a, i64 %i
  %v = load double, ptr %p, align 8
  %s = call double @llvm.sin.f64(double %v)
  %t = fmul double %s, %x
  %acc1 = fadd double %acc, %t
  store double %t, ptr %p, align 8
  %i1 = add i64 %i, 1
  %d = icmp slt i64 %i1, %n
  br i1 %d, label %loop, label %exit
exit:
  %r = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %q = call double @sqrt(double %r)
  %w = fdiv double %q, %x
  ret double %w
}
declare double @llvm.sin.f64(double)
declare double @sqrt(double)
"""


def _jit(module: ir.Module):
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = llvm.Target.from_default_triple().create_target_machine()
    ee = llvm.create_mcjit_compiler(llvm.parse_assembly(str(module)), tm)
    ee.finalize_object()
    return ee


class Pair(ctypes.Structure):
    _fields_ = [("primal", ctypes.c_double), ("tangent", ctypes.c_double)]


def reference(x, a):
    a = a.copy()
    acc = 0.0
    for i in range(len(a)):
        a[i] = math.sin(a[i]) * x
        acc += a[i]
    return math.sqrt(acc) / x, a


def test_loop_with_memory_matches_finite_differences():
    m = ir.parse_module(LOOP)
    f = m.get_function("f")
    gen = ForwardGenerator(m, default_rules())
    df = gen.derivative(f, ForwardSignature.standard(f, [A, D, C]))
    ir.verify(m)
    ee = _jit(m)
    proto = ctypes.CFUNCTYPE(Pair, ctypes.c_double, ctypes.c_void_p, ctypes.c_int64,
                             ctypes.c_double, ctypes.c_void_p)
    fn = proto(ee.get_function_address(df.name))
    x, dx = 1.3, 0.7
    a0, da0 = np.array([0.3, 0.5, 0.9]), np.array([0.1, -0.2, 0.3])
    a, da = a0.copy(), da0.copy()
    out = fn(x, a.ctypes.data, 3, dx, da.ctypes.data)
    h = 1e-6
    (fp, ap), (fm, am) = reference(x + h * dx, a0 + h * da0), reference(x - h * dx, a0 - h * da0)
    assert out.primal == pytest.approx(reference(x, a0)[0], rel=1e-15)
    assert out.tangent == pytest.approx((fp - fm) / (2 * h), rel=1e-7)
    np.testing.assert_allclose(da, (ap - am) / (2 * h), rtol=1e-7)


def test_batch_lanes_equal_single_runs():
    m = ir.parse_module(LOOP.replace("  store double %t, ptr %p, align 8\n", ""))
    f = m.get_function("f")
    gen = ForwardGenerator(m, default_rules())
    d1 = gen.derivative(f, ForwardSignature.standard(f, [A, C, C]))
    d3 = gen.derivative(f, ForwardSignature.standard(f, [A, C, C], width=3))
    assert d3.function_type.ret == ir.StructType([ir.double] * 4)
    ir.verify(m)
    assert gen.derivative(f, ForwardSignature.standard(f, [A, C, C])) is d1  # memoized
    # A struct of four doubles is not returned the C way; store it through a pointer instead.
    w = m.add_function("w", ir.FunctionType(ir.void, [ir.ptr] + list(d3.function_type.params)))
    b = ir.IRBuilder(w.append_block("entry"))
    b.store(b.call(d3, w.args[1:]), w.args[0])
    b.ret_void()
    ee = _jit(m)
    dbl, ptr, i64 = ctypes.c_double, ctypes.c_void_p, ctypes.c_int64
    one = ctypes.CFUNCTYPE(Pair, dbl, ptr, i64, dbl)(ee.get_function_address(d1.name))
    three = ctypes.CFUNCTYPE(None, ptr, dbl, ptr, i64, dbl, dbl, dbl)(
        ee.get_function_address("w"))
    a = np.array([0.3, 0.5, 0.9])
    out = np.zeros(4)
    three(out.ctypes.data, 1.3, a.ctypes.data, 3, 1.0, -2.0, 0.5)
    singles = [one(1.3, a.ctypes.data, 3, t).tangent for t in (1.0, -2.0, 0.5)]
    assert list(out[1:]) == pytest.approx(singles, rel=1e-15)
    assert out[0] == one(1.3, a.ctypes.data, 3, 0.0).primal


def test_printed_derivative_of_a_small_function():
    m = ir.parse_module("""
define double @g(double %x, double %y) {
entry:
  %p = fmul fast double %x, %y
  %e = call fast double @llvm.exp.f64(double %p)
  ret double %e
}
declare double @llvm.exp.f64(double)
""")
    g = m.get_function("g")
    dg = ForwardGenerator(m, default_rules()).derivative(
        g, ForwardSignature.standard(g, [A, C]))
    assert str(dg) == """\
define internal { double, double } @fwddiffe_g(double %x, double %y, double %"x'") {
entry:
  %p = fmul fast double %x, %y
  %"p'" = fmul reassoc nsz arcp contract afn double %y, %"x'"
  %e = call fast double @llvm.exp.f64(double %p)
  %"e'" = fmul reassoc nsz arcp contract afn double %e, %"p'"
  %0 = insertvalue { double, double } undef, double %e, 0
  %1 = insertvalue { double, double } %0, double %"e'", 1
  ret { double, double } %1
}"""
    ir.verify(m)


def test_activity_prints_per_instruction():
    m = ir.parse_module(LOOP)
    act = analyze_activity(m.get_function("f"), [C, D, C])
    text = str(act)
    assert "  %v = load double, ptr %p, align 8: active" in text
    assert "  %t = fmul double %s, %x: active" in text
    assert "  arg %x: const" in text
    assert "  %i1 = add i64 %i, 1: const" in text


def test_active_store_into_memory_without_shadow_is_an_error():
    m = ir.parse_module(LOOP)
    f = m.get_function("f")
    with pytest.raises(ActivityError, match="no shadow"):
        ForwardGenerator(m, default_rules()).derivative(f, ForwardSignature.standard(f, [A, C, C]))


def test_unknown_external_call_is_named():
    m = ir.parse_module("""
define double @h(double %x) {
  %y = call double @mystery(double %x)
  ret double %y
}
declare double @mystery(double)
""")
    h = m.get_function("h")
    with pytest.raises(UnsupportedError, match="@mystery"):
        ForwardGenerator(m, default_rules()).derivative(h, ForwardSignature.standard(h, [A]))


def test_recursive_function():
    m = ir.parse_module("""
define double @p(double %x, i64 %n) {
entry:
  %z = icmp eq i64 %n, 0
  br i1 %z, label %base, label %rec
base:
  ret double 1.0
rec:
  %m = sub i64 %n, 1
  %r = call double @p(double %x, i64 %m)
  %y = fmul double %r, %x
  ret double %y
}
""")
    p = m.get_function("p")
    dp = ForwardGenerator(m, default_rules()).derivative(p, ForwardSignature.standard(p, [A, C]))
    ir.verify(m)
    ee = _jit(m)
    fn = ctypes.CFUNCTYPE(Pair, ctypes.c_double, ctypes.c_int64, ctypes.c_double)(
        ee.get_function_address(dp.name))
    out = fn(1.5, 5, 1.0)
    assert (out.primal, out.tangent) == pytest.approx((1.5 ** 5, 5 * 1.5 ** 4))


VECTOR_POW = r"""
define void @f(ptr %out, ptr %x, ptr %y) {
entry:
  %xv = load <2 x double>, ptr %x, align 16
  %yv = load <2 x double>, ptr %y, align 16
  %p = call <2 x double> @llvm.pow.v2f64(<2 x double> %xv, <2 x double> %yv)
  store <2 x double> %p, ptr %out, align 16
  ret void
}
declare <2 x double> @llvm.pow.v2f64(<2 x double>, <2 x double>)
"""


@pytest.mark.parametrize("xs", [(1.7, 0.0), (2.5, 1e-300)])
def test_vector_pow_lanes_use_pyzymes_scalar_helper(xs):
    """pow's derivative in x comes from its result through @pyzyme.pow_less1, a scalar
    function: a <2 x double> pow calls it per lane (x = 0 and an underflowing result take its
    pow(x, y - 1) branch)."""
    m = ir.parse_module(VECTOR_POW)
    f = m.get_function("f")
    df = ForwardGenerator(m, default_rules()).derivative(
        f, ForwardSignature.standard(f, [D, D, C]))
    ir.verify(m)
    assert "pyzyme.pow_less1" in str(m)
    ee = _jit(m)  # kept: the code lives as long as its engine
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 5)(ee.get_function_address(df.name))
    x, y, dx = np.array(xs), np.array([3.0, 2.0]), np.array([1.0, 1.0])
    out, dout = np.zeros(2), np.zeros(2)
    fn(out.ctypes.data, x.ctypes.data, y.ctypes.data, dout.ctypes.data, dx.ctypes.data)
    # the C library's pow, which the JIT's lanes call (NumPy's x ** y may be its own SIMD pow)
    np.testing.assert_array_equal(out, [math.pow(a, b) for a, b in zip(x, y)])
    np.testing.assert_allclose(dout, y * x ** (y - 1), rtol=1e-15)
