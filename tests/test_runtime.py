"""Compiling modules into Numba's JIT and calling them from Python and from @njit code."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import textwrap
from collections import namedtuple

import numpy as np
import pytest
from numba import njit, types

from pyzyme import ir
from pyzyme.errors import PyzymeError, UnsupportedError, VerifyError
from pyzyme.frontends.numba import capture, njit_callable
from pyzyme.naming import symbol_name
from pyzyme.runtime import compile_module

# A name of its own: Numba 0.68 fails to dispatch on a namedtuple class whose name and field
# types equal those of another class it has already seen (other tests use "Point").
Point = namedtuple("RuntimePoint", ["x", "y"])
RECORD = np.dtype([("mass", np.float64), ("charge", np.int32)], align=True)


def recompiled(fn, args):
    """Capture ``fn``, rename its native function, compile that copy and wrap it for calling."""
    cap = capture(fn, args)
    module = cap.module
    new = symbol_name("copy", cap.text)
    module.get_function(cap.symbol).name = new
    compiled = compile_module(module)
    return njit_callable(compiled, new, cap.signature, arg_names=[a.name for a in cap.abi.args])


@njit
def scale_sum(a, k):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * k
    return s


@njit
def weighted_trace(m, w):
    s = 0.0
    for i in range(min(m.shape[0], m.shape[1])):
        s += m[i, i] * w[i]
    return s


@njit
def tuple_fn(t, p):
    return t[0] * t[1] + p.x, t[1] - 1, p.y > 0


@njit
def complex_fn(z, n):
    return z**2 + n


@njit
def choose(x, flag, n):
    return x * n if flag else -x


@njit
def ramp(n, step):
    return np.arange(n) * step


@njit
def fill(a, v):
    for i in range(a.size):
        a.flat[i] = v + i


@njit
def positive_or_none(x):
    return x if x > 0 else None


@njit
def record_energy(r, scale):
    return r.mass * r.charge * scale


@njit(boundscheck=True)
def checked_get(a, i):
    return a[i] * 2.0


def test_arrays_and_floats():
    f = recompiled(scale_sum, (np.ones(3), 2.0))
    a = np.linspace(0.0, 1.0, 7)
    assert f(a, 3.0) == scale_sum(a, 3.0)  # Numba's IR, no fast-math flags: bitwise anywhere
    g = recompiled(weighted_trace, (np.ones((2, 2)), np.ones(2)))
    m = np.arange(12.0).reshape(3, 4)
    w = np.array([1.0, -2.0, 0.5])
    assert g(m, w) == weighted_trace(m, w) == 0.0 * 1 - 5.0 * 2 + 10.0 * 0.5
    with pytest.raises(TypeError):
        g(np.ones(3), w)  # wrong dimension: Numba's dispatcher refuses it


def test_tuples_namedtuples_complex_bools_and_ints():
    f = recompiled(tuple_fn, ((1.5, 2), Point(1.0, 2.0)))
    assert f((2.5, 4), Point(0.5, -1.0)) == tuple_fn((2.5, 4), Point(0.5, -1.0)) == (10.5, 3, False)
    g = recompiled(complex_fn, (1j, 2))
    assert g(1 + 2j, 3) == complex_fn(1 + 2j, 3) == (1 + 2j) ** 2 + 3
    h = recompiled(choose, (1.0, True, np.int32(3)))
    assert h(2.0, True, np.int32(4)) == 8.0 and h(2.0, False, np.int32(4)) == -2.0


def test_record_argument():
    f = recompiled(record_energy, (np.zeros(1, dtype=RECORD)[0], 1.0))
    recs = np.zeros(2, dtype=RECORD)
    recs[1] = (2.5, 3)
    assert f(recs[1], 2.0) == record_energy(recs[1], 2.0) == 15.0


def test_array_result_is_owned_by_the_caller(nrt_stats):
    f = recompiled(ramp, (3, 1.0))
    expected = np.arange(5) * 0.5
    np.testing.assert_array_equal(f(5, 0.5), expected)

    def allocations(fn):
        before = nrt_stats()
        for _ in range(100):
            out = fn(5, 0.5)
        del out
        after = nrt_stats()
        return after.alloc - before.alloc, after.free - before.free

    # Numba's ramp allocates twice a call (arange, then the product); the copy does the same,
    # and frees all of it once the caller drops the result.
    assert allocations(f) == allocations(ramp) == (200, 200)


def test_mutation_and_none_result():
    f = recompiled(fill, (np.zeros((2, 2)), 1.0))
    a = np.zeros((2, 3))
    assert f(a, 1.0) is None
    np.testing.assert_array_equal(a, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


def test_optional_result():
    f = recompiled(positive_or_none, (1.0,))
    assert f(2.5) == 2.5
    assert f(-1.0) is None


def test_index_error_reaches_python_intact():
    f = recompiled(checked_get, (np.arange(4.0), 2))
    a = np.arange(4.0)
    assert f(a, 3) == 6.0
    with pytest.raises(IndexError, match="index is out of bounds"):
        f(a, 10)

    @njit
    def caller(a, i):
        return f(a, i) + 1.0

    assert caller(a, 1) == 3.0
    with pytest.raises(IndexError, match="index is out of bounds"):
        caller(a, -10)


def test_wrapper_keeps_no_count_pair_on_its_arrays():
    # The caller holds its arrays for the call; the wrapper's own incref / decref pair on each
    # stays only if Numba's pruner takes its error propagation for a return without decrefs
    # (two atomic operations per array per call: a fifth of GradBench's ba Jacobian).
    f = recompiled(checked_get, (np.arange(4.0), 2))
    a = np.arange(4.0)
    assert f(a, 3) == 6.0
    with pytest.raises(IndexError, match="index is out of bounds"):
        f(a, 10)
    text = f.inspect_llvm(f.signatures[0])
    # the wrapper's native function (not its CPython or cfunc entry)
    wrapper = [body for body in text.split("\ndefine ")[1:]
               if re.match(r"[^@\n]*@_ZN13_3cdynamic", body)]
    assert len(wrapper) == 1
    assert "NRT_incref" not in wrapper[0] and "NRT_decref" not in wrapper[0]


def test_an_error_caught_around_the_wrapper_keeps_counts_balanced(nrt_stats):
    # The wrapper's marked raise, inlined into a caller that catches the error: the caller's
    # array stays alive and is freed once (Numba marks its own raises the same way).
    f = recompiled(checked_get, (np.arange(4.0), 2))

    @njit
    def caught(n, m):
        a = np.arange(n) * 1.0
        total = 0.0
        for k in range(m):
            try:
                total += f(a, k)
            except Exception:  # noqa: BLE001  (Numba catches no narrower class)
                total -= a[0] + 1.0
        return total

    assert caught(4, 6) == 2.0 * (0 + 1 + 2 + 3) - 2.0
    before = nrt_stats()
    for _ in range(50):
        assert caught(4, 6) == 10.0
    after = nrt_stats()
    assert after.alloc - before.alloc == after.free - before.free == 100


def build_poly_module(name: str) -> ir.Module:
    """``double name(double x) = 0.5 * x * x + 1``, built with pyzyme.ir."""
    m = ir.Module("poly")
    fn = m.add_function(name, ir.FunctionType(ir.double, [ir.double]))
    b = ir.IRBuilder(fn.append_block("entry"))
    x = fn.args[0]
    sq = b.fmul(x, x)
    b.ret(b.fadd(b.fmul(sq, ir.const_float(ir.double, 0.5)), ir.const_float(ir.double, 1.0)))
    return m


def test_irbuilder_function_from_python_and_njit():
    name = symbol_name("test_poly", "0.5*x*x+1")
    compiled = compile_module(build_poly_module(name))
    poly = njit_callable(compiled, name, "float64(float64)", convention="c", arg_names=["x"])
    assert poly(3.0) == 5.5
    assert poly(2) == 3.0  # int converted by Numba's dispatcher
    raw = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(compiled.address(name))
    assert raw(-1.0) == 1.5

    @njit
    def loop(n):
        s = 0.0
        for i in range(n):
            s += poly(i * 0.5)
        return s

    assert loop(10) == sum(0.5 * (i * 0.5) ** 2 + 1 for i in range(10))
    # Linked into the caller and inlined: no call is left.
    caller_ir = loop.inspect_llvm(loop.signatures[0])
    assert f"@{name}(" not in caller_ir

    @njit
    def apply(g, x):  # the callable passed as an argument, no Python in between
        return g(x) + g(2 * x)

    assert apply(poly, 1.0) == 1.5 + 3.0


def test_irbuilder_function_in_numba_convention():
    name = symbol_name("test_native", "retptr <- x * n")
    m = ir.Module("native")
    fn = m.add_function(name, ir.FunctionType(ir.i32, [ir.ptr, ir.ptr, ir.double, ir.i64]))
    b = ir.IRBuilder(fn.append_block("entry"))
    retptr, _excinfo, x, n = fn.args
    b.store(b.fmul(x, b.sitofp(n, ir.double)), retptr)
    b.ret(ir.const_int(ir.i32, 0))
    f = njit_callable(compile_module(m), name, types.float64(types.float64, types.int64))
    assert f(1.5, 4) == 6.0

    @njit
    def twice(x):
        return f(x, 2) + f(x, 3)

    assert twice(0.5) == 2.5


def test_compile_module_memoizes_and_rejects_redefinition():
    name = symbol_name("test_memo", "x+1")
    text = f"define double @{name}(double %x) {{\n  %y = fadd double %x, 1.0\n  ret double %y\n}}\n"
    first = compile_module(text)
    assert compile_module(text) is first
    other = text.replace("fadd double %x, 1.0", "fadd double %x, 2.0")
    with pytest.raises(VerifyError, match=f"@{name} are already defined in the JIT"):
        compile_module(other)
    with pytest.raises(VerifyError, match="already defined"):  # one symbol, one definition
        compile_module(text, opt=0)


def test_compile_module_errors_are_clear():
    with pytest.raises(VerifyError, match="LLVM cannot parse"):
        compile_module("define double @f(double %x) {\n  ret i32 %x\n}\n")
    with pytest.raises(VerifyError, match="verifier rejects"):
        compile_module(
            "define double @__pyzyme_test_bad() {\nentry:\n  br label %entry\n  ret double 0.0\n}\n"
        )
    missing = (
        "declare double @__pyzyme_no_such_symbol(double)\n"
        "define double @__pyzyme_test_uses_missing(double %x) {\n"
        "  %y = call double @__pyzyme_no_such_symbol(double %x)\n  ret double %y\n}\n"
    )
    with pytest.raises(VerifyError, match="@__pyzyme_no_such_symbol, defined neither"):
        compile_module(missing)
    with pytest.raises(VerifyError, match="no externally visible function"):
        compile_module(
            "define internal double @__pyzyme_test_hidden(double %x) {\n  ret double %x\n}\n"
        )
    with pytest.raises(ValueError, match="optimization level"):
        compile_module("", opt=4)


def test_runtime_symbols_resolve(nrt_stats):
    # Numba's C helpers, its JIT-compiled NRT_incref and libm, all from one compiled module.
    name = symbol_name("test_runtime_syms", "alloc+incref+sqrt")
    text = f"""
declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare void @NRT_incref(ptr)
declare void @NRT_decref(ptr)
declare double @sqrt(double)
define double @{name}(double %x) {{
  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 64, i32 32)
  call void @NRT_incref(ptr %mi)
  call void @NRT_decref(ptr %mi)
  call void @NRT_decref(ptr %mi)
  %r = call double @sqrt(double %x)
  ret double %r
}}
"""
    f = njit_callable(compile_module(text), name, "float64(float64)", convention="c")
    before = nrt_stats()
    assert f(16.0) == 4.0
    after = nrt_stats()
    assert after.mi_alloc - before.mi_alloc == 1 and after.mi_free - before.mi_free == 1


def test_optimization_levels():
    for opt in (0, 3):
        name = symbol_name("test_levels", "alloca", str(opt))
        compiled = compile_module(
            f"define double @{name}(double %x) {{\n  %p = alloca double\n"
            "  store double %x, ptr %p\n  %y = load double, ptr %p\n  ret double %y\n}\n",
            opt=opt,
        )
        assert compiled.opt == opt
        assert ("alloca" in compiled.optimized_ir) == (opt == 0)
        assert njit_callable(compiled, name, "float64(float64)", convention="c")(2.5) == 2.5


def test_njit_callable_errors():
    name = symbol_name("test_errors", "x")
    compiled = compile_module(f"define double @{name}(double %x) {{\n  ret double %x\n}}\n")
    with pytest.raises(PyzymeError, match="defines no function @nope"):
        njit_callable(compiled, "nope", "float64(float64)", convention="c")
    with pytest.raises(ValueError, match="needs a return type"):
        njit_callable(compiled, name, (types.float64,), convention="c")
    with pytest.raises(UnsupportedError, match="C convention can only take"):
        njit_callable(compiled, name, "float64(float64[:])", convention="c")
    with pytest.raises(ValueError, match="identifiers"):
        njit_callable(compiled, name, "float64(float64)", convention="c", arg_names=["lambda"])


def test_symbol_names():
    assert symbol_name("fwd", "a", "b") == symbol_name("fwd", "a", "b")
    assert symbol_name("fwd", "a", "b") != symbol_name("fwd", "ab")
    assert symbol_name("rev", "a").startswith("__pyzyme_rev_")
    with pytest.raises(ValueError):
        symbol_name("bad kind", "a")


def test_captured_locals_do_not_capture_numbas_symbols():
    # A captured module carries an internal (and optimizer-made fastcc) copy of NRT_decref.
    # Compiled as is, MCJIT bound the weak NRT_decref of code Numba compiled later to that copy,
    # and Numba's own string function crashed. Run in a child: the failure mode is a segfault.
    script = textwrap.dedent(
        """
        from numba import njit
        from pyzyme.frontends.numba import capture
        from pyzyme.naming import symbol_name
        from pyzyme.runtime import compile_module
        from pyzyme.runtime.modules import parse

        @njit
        def list_build(n):
            out = [0.0]
            for i in range(1, n):
                out.append(out[-1] + i)
            return sum(out)

        @njit
        def string_ops(n):
            s = "ab" * n + "c"
            return len(s.upper() + s[::-1])

        cap = capture(list_build, (10,))
        assert "define internal fastcc void @NRT_decref" in cap.text
        module = parse(cap.text)
        module.get_function(cap.symbol).name = symbol_name("copy", cap.text)
        compile_module(str(module))
        print(string_ops(3))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert (out.returncode, out.stdout.strip()) == (0, "14"), out.stderr[-2000:]


def test_programs_compile_for_the_cpu_numba_is_told():
    # NUMBA_CPU_NAME=haswell (AVX2) on an AVX-512 machine: C programs (pyzyme run) are
    # compiled for that CPU too, as their optimizer already assumed, so the whole stack can be
    # tested as an AVX2 machine. <8 x double> needs zmm registers on AVX-512, two ymm on AVX2.
    script = textwrap.dedent(
        """
        from pyzyme.runtime.modules import parse
        from pyzyme.runtime.standalone import _target_machine

        m = parse('''define void @add(ptr %p, ptr %q) {
          %a = load <8 x double>, ptr %p
          %b = load <8 x double>, ptr %q
          %c = fadd <8 x double> %a, %b
          store <8 x double> %c, ptr %p
          ret void
        }''')
        asm = _target_machine().emit_assembly(m)
        print("zmm" in asm, "ymm" in asm)
        """
    )
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": ""}
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True,
                         text=True, timeout=120, env=env)
    assert (out.returncode, out.stdout.split()) == (0, ["False", "True"]), out.stderr[-2000:]


def test_njit_callable_compiles_its_wrapper_only_when_called_or_typed():
    """@njit glue calls the intrinsic itself (njit_target): a derivative used only there is
    never compiled into a wrapper too (one more optimization and code generation of it)."""
    from pyzyme.frontends.numba.bridge import njit_target, signature_of
    name = symbol_name("test_lazy", "triple")
    text = f"define double @{name}(double %x) {{\n  %y = fmul double %x, 3.0\n  ret double %y\n}}\n"
    f = njit_callable(compile_module(text), name, "float64(float64)", convention="c")
    call = njit_target(f)
    assert call is not f and str(signature_of(f)) == "(float64,) -> float64"
    assert njit(lambda x: call(x) + 1.0)(2.0) == 7.0
    assert not f.overloads
    assert f(2) == 6.0      # converted to the signature's float64, as numba.njit(sig) does
    assert len(f.overloads) == 1
    assert njit(lambda x: f(x))(1.5) == 4.5
    with pytest.raises(TypeError):
        f("2.0")
    assert len(f.overloads) == 1
    g = njit_callable(compile_module(text.replace(name, name + "_g")), name + "_g",
                      "float64(float64)", convention="c")
    assert njit(lambda x: g(x))(1.0) == 3.0   # typed from @njit code: compiled for its own
    assert [tuple(s) for s in g.signatures] == [(types.float64,)]
