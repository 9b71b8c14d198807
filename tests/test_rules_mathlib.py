"""pyzyme's own math functions (pyzyme.rules.mathlib): the IR definitions of @pyzyme.digamma
and @pyzyme.digammaf, compiled with llvmlite, and the Python twin, against SciPy."""

from __future__ import annotations

import ctypes
import math
from fractions import Fraction

import llvmlite.binding as llvm
import numpy as np
import pytest
import scipy.special

from pyzyme import ir
from pyzyme.rules import mathlib


@pytest.fixture(scope="module")
def compiled():
    """(digamma, digammaf) as native functions: each definition behind an external wrapper."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    m = ir.Module("mathlib_test")
    for symbol, ty in (("pyzyme.digamma", ir.double), ("pyzyme.digammaf", ir.float)):
        wrapper = m.add_function(symbol.replace("pyzyme.", "call_"), ir.FunctionType(ty, [ty]))
        b = ir.IRBuilder(wrapper.append_block("entry"))
        b.ret(b.call(mathlib.define(m, symbol), [wrapper.args[0]]))
    ir.verify(m)
    ref = llvm.parse_assembly(str(m))
    ref.verify()
    engine = llvm.create_mcjit_compiler(ref, llvm.Target.from_default_triple()
                                        .create_target_machine())
    engine.finalize_object()
    double = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(
        engine.get_function_address("call_digamma"))
    single = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(
        engine.get_function_address("call_digammaf"))
    yield double, single
    del engine


def _points():
    rng = np.random.default_rng(7)
    return np.concatenate([
        rng.uniform(-30, 30, 3000), rng.uniform(0, 3, 1000), rng.uniform(9.5, 10.5, 200),
        10.0 ** rng.uniform(-300, 300, 500), -(10.0 ** rng.uniform(-300, 15, 500)),
        [1.0, 2.0, 10.0, 0.5, -0.5, 1.4616321449683622, 1e-300, 1e300],
    ])


def reference(x: float) -> float:
    """digamma(x) from SciPy at x >= 1; below, from SciPy at x + n >= 1 and the recurrence
    psi(x) = psi(x + n) - sum 1/(x + k) summed exactly (SciPy's own reflection loses about
    1e-13 near the negative poles)."""
    if x >= 1.0 or x < -60.0 or x == 0.0 or x == math.floor(x):
        return float(scipy.special.digamma(x))
    n = math.ceil(1.0 - x)
    exact = Fraction(x)
    shifted = float(scipy.special.digamma(float(exact + n)))
    return shifted - float(sum(1 / (exact + k) for k in range(n)))


def _close(got, want):
    """1e-13 relative; near the zeros of digamma the error is absolute, about 1e-15."""
    return abs(got - want) <= 1e-13 * max(abs(want), 0.1)


def test_ir_digamma_matches_scipy(compiled):
    double, _ = compiled
    bad = [(x, double(x), reference(x)) for x in _points() if not _close(double(x), reference(x))]
    assert not bad, bad[:5]


def test_python_digamma_is_the_ir_algorithm(compiled):
    double, _ = compiled
    for x in _points():
        assert mathlib.digamma(x) == double(x), x


@pytest.mark.parametrize("x, want", [
    (0.0, -math.inf), (-0.0, math.inf), (-1.0, math.nan), (-3.0, math.nan), (-1e20, math.nan),
    (math.inf, math.inf), (-math.inf, math.nan), (math.nan, math.nan), (1e-320, -math.inf),
])
def test_special_values(compiled, x, want):
    double, _ = compiled
    for got in (double(x), mathlib.digamma(x)):
        assert got == want or (math.isnan(got) and math.isnan(want))
    assert scipy.special.digamma(x) == want or math.isnan(want)


def test_float_version(compiled):
    _, single = compiled
    for x in np.float32(np.random.default_rng(3).uniform(0.1, 50, 500)):
        want = scipy.special.digamma(np.float64(x))
        assert abs(single(x) - want) <= 1e-6 * max(abs(want), 0.1), x


def test_define_once_and_only_known_symbols():
    m = ir.Module()
    declared = m.add_function("pyzyme.digamma", ir.FunctionType(ir.double, [ir.double]))
    fn = mathlib.define(m, "pyzyme.digammaf")
    assert mathlib.define(m, "pyzyme.digamma") is declared and not declared.is_declaration
    assert mathlib.define(m, "pyzyme.digammaf") is fn
    assert sum(1 for f in m.functions if f.name == "llvm.log.f64") == 1
    ir.verify(m)
    with pytest.raises(ValueError, match="pyzyme.digammal"):
        mathlib.define(m, "pyzyme.digammal")
