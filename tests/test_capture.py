"""Capturing @njit functions as LLVM modules (pyzyme.frontends.numba.capture and .hook)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections import namedtuple

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest
from numba import njit, types
from numba.core import codegen as numba_codegen

import pyzyme
from pyzyme import ir
from pyzyme.errors import CaptureError
from pyzyme.frontends.numba import capture, check_numba_internals
from tests.kernels import matmul

Point = namedtuple("CapturePoint", ["x", "y"])  # own name: see tests/test_runtime.py
RECORD = np.dtype([("mass", np.float64), ("charge", np.int32)], align=True)


@njit
def poly(x):
    return 3.0 * x**3 - 2.0 * x + 1.0


@njit
def taylor(x, n):
    s = 0.0
    term = 1.0
    for i in range(1, n + 1):
        term *= x / i
        s += term
    return s


@njit
def dot1(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit
def filled_sum(n):
    x = np.zeros(n)
    for i in range(n):
        x[i] = i
    return x.sum()


@njit
def tuple_fn(t):
    return t[0] * t[1], t[1] + 1


@njit
def point_norm2(p):
    return p.x * p.x + p.y * p.y


@njit
def complex_sq(z):
    return z * z


@njit
def record_energy(r):
    return r.mass * r.charge


@njit
def or_zero(x):
    return 0.0 if x is None else x


def native_definitions(text: str) -> list[str]:
    return re.findall(r"^define [^@]*@\"?([^\"(]+)", text, re.MULTILINE)


def native_body(text: str, symbol: str) -> str:
    start = text.index(f"@{symbol}(")
    return text[start : text.index("\n}\n", start)]


CASES = [
    ("scalar", poly, (1.5,), 1),
    ("loop", taylor, (0.5, 10), 2),
    ("1-D arrays", dot1, (np.ones(3), np.ones(3)), 14),
    ("2-D arrays", matmul, (np.ones((2, 2)),) * 3, 27),
    ("allocation", filled_sum, (4,), 1),
    ("tuple", tuple_fn, ((1.5, 2),), 2),
    ("namedtuple", point_norm2, (Point(1.0, 2.0),), 2),
    ("complex", complex_sq, (1 + 2j,), 2),
    ("record", record_energy, (np.zeros(1, dtype=RECORD)[0],), 1),
    ("optional", or_zero, (types.Optional(types.float64),), 2),
]


@pytest.mark.parametrize("what, fn, args, nparams", CASES, ids=[c[0] for c in CASES])
def test_capture_keeps_the_native_function_only(what, fn, args, nparams):
    cap = capture(fn, args)
    # One external definition: the native function; the wrappers are gone.
    assert native_definitions(cap.text)[0] == cap.symbol
    assert "@_ZN7cpython" not in cap.text and "@cfunc." not in cap.text
    assert "PyArg_UnpackTuple" not in cap.text
    # Post-codegen artefacts of MCJIT never reach the captured IR.
    assert (
        "sunkaddr" not in cap.text and "llvm.x86." not in cap.text and "const_mat" not in cap.text
    )
    # Verifies with LLVM, in both llvmlite and pyzyme.ir form, and agrees with the AbiMap.
    fn_ref = cap.llvm_module().get_function(cap.symbol)
    assert len(list(fn_ref.arguments)) == 2 + nparams == 2 + len(cap.abi.native_params)
    assert cap.module.get_function(cap.symbol) is not None
    ir.verify(cap.module)


def test_capture_refcounting_runtime_is_pristine():
    cap = capture(filled_sum, (4,))
    # NRT_decref comes from Numba's runtime library, linked before MCJIT rewrote its atomics.
    assert "define internal fastcc void @NRT_decref" in cap.text
    assert "atomicrmw sub ptr" in cap.text
    assert "@NRT_MemInfo_alloc_aligned(" in cap.text
    # The inlined np.zeros/np.sum are not left as calls.
    assert "_ZN5numba2np" not in native_definitions(cap.text)


def test_ad_pipeline_keeps_loops_rolled():
    A = types.float64[:, ::1]
    ad = capture(matmul, (A, A, A))
    numba_o3 = capture(matmul, (A, A, A), pipeline="numba")
    assert native_body(ad.text, ad.symbol).count("fmul double") == 1
    assert native_body(numba_o3.text, numba_o3.symbol).count("fmul double") > 1  # unrolled by O3
    exp_ad = capture(njit(lambda a: np.exp(a).sum()), (types.float64[::1],))
    assert "<4 x double>" not in exp_ad.text and "@llvm.exp.f64" in exp_ad.text


def test_signature_forms_agree():
    by_values = capture(taylor, (0.5, 10))
    by_types = capture(taylor, (types.float64, types.int64))
    by_string = capture(taylor, "float64(float64, int64)")
    assert by_values.signature == by_types.signature == by_string.signature
    assert str(by_values.signature) == "(float64, int64) -> float64"
    assert by_values.abi.args[1].name == "n"


def test_capture_compiles_plain_python_functions():
    def cube(x):
        return x * x * x

    cap = capture(cube, (2.0,))
    assert isinstance(cap.dispatcher, numba.core.registry.CPUDispatcher)
    assert cap.dispatcher.py_func is cube
    assert "fmul double" in cap.text
    assert repr(cap).startswith("<Captured ")


def test_capture_keeps_the_dispatcher_and_compile_result():
    cap = capture(poly, (1.5,))
    assert cap.dispatcher is poly
    assert cap.compile_result.fndesc.llvm_func_name == cap.symbol
    assert cap.dispatcher(2.0) == poly.py_func(2.0)


def test_unsupported_argument_type_names_function_and_type():
    @njit
    def length(s):
        return len(s)

    with pytest.raises(CaptureError) as err:
        capture(length, (numba.typed.List([1.0, 2.0]),))
    message = str(err.value)
    assert "argument 's' of" in message and "length" in message and "ListType" in message
    assert "numba.typed.List" in message and "np.asarray" in message  # what to pass instead


def test_numba_typing_error_becomes_capture_error():
    @njit
    def bad(x):
        return x.not_an_attribute

    with pytest.raises(CaptureError, match=r"Numba cannot compile .*bad\(float64\)"):
        capture(bad, (1.0,))


def test_bad_signature_argument():
    with pytest.raises(CaptureError, match="as a tuple"):
        capture(poly, 1.5)
    with pytest.raises(ValueError, match="pipeline"):
        capture(poly, (1.5,), pipeline="O3")


def test_numba_links_pristine_callee_ir():
    """The hook hands callers the module before MCJIT codegen rewrote it."""
    filled_sum(3)
    library = filled_sum.overloads[filled_sum.signatures[0]].library
    shared = str(library._get_module_for_linking())
    assert "@NRT_decref" in shared and "llvm.x86." not in shared and "sunkaddr" not in shared
    assert filled_sum(5) == 10.0


def test_capture_after_numba_compiled_before_pyzyme():
    # A fresh process in which Numba compiles (its runtime included) before pyzyme is imported.
    script = textwrap.dedent(
        """
        import numba, numpy as np
        @numba.njit
        def f(n):
            return np.zeros(n).sum() + n
        assert f(3) == 3.0
        import pyzyme
        from pyzyme.frontends.numba import capture
        cap = capture(f, (3,))
        assert cap.dispatcher is not f and cap.dispatcher.py_func is f.py_func
        assert "llvm.x86." not in cap.text, cap.text
        assert "atomicrmw sub" in cap.text
        print("ok", cap.stale_libraries)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


def test_numba_internals_pin_passes():
    check_numba_internals()
    assert pyzyme.frontends.numba.hook._REGISTRY.installed


def test_numba_internals_pin_reports_missing_method(monkeypatch):
    monkeypatch.delattr(numba_codegen.CPUCodeLibrary, "_get_module_for_linking")
    with pytest.raises(CaptureError) as err:
        check_numba_internals()
    message = str(err.value)
    assert (
        f"pyzyme {pyzyme.__version__} was written for Numba 0.68.x; found Numba {numba.__version__}"
        in message
    )
    assert "numba.core.codegen.CPUCodeLibrary._get_module_for_linking is missing" in message


def test_numba_internals_pin_reports_changed_signature(monkeypatch):
    monkeypatch.setattr(
        numba_codegen.CPUCodeLibrary, "add_linking_library", lambda self, lib, extra: None
    )
    with pytest.raises(CaptureError, match=r"add_linking_library\('self', 'lib', 'extra'\)"):
        check_numba_internals()


def test_llvm_module_is_fresh_each_time():
    cap = capture(poly, (1.5,))
    a, b = cap.llvm_module(), cap.llvm_module()
    assert a is not b and isinstance(a, llvm.ModuleRef)
    assert str(a) == str(b) == cap.text


def test_capture_of_a_function_loaded_from_numbas_cache(tmp_path):
    (tmp_path / "cached_kernel.py").write_text(
        textwrap.dedent(
            """
            import numpy as np
            from numba import njit

            @njit(cache=True)
            def kernel(a):
                s = 0.0
                for i in range(a.shape[0]):
                    s += a[i] * a[i]
                return s
            """
        )
    )
    script = textwrap.dedent(
        """
        import sys, numpy as np
        import pyzyme
        from pyzyme.frontends.numba import capture
        from cached_kernel import kernel
        assert kernel(np.arange(3.0)) == 5.0
        cached = bool(kernel.stats.cache_hits)
        cap = capture(kernel, (np.arange(3.0),))
        assert "fmul double" in cap.text and "@_ZN7cpython" not in cap.text
        print("cache hit" if cached else "compiled", cap.dispatcher is kernel)
        """
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", script],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr
    # First process: compiled with the hook watching, captured as is. Second: loaded from the
    # cache (no IR kept), so capture compiled a private copy.
    assert [r.stdout.strip() for r in runs] == ["compiled True", "cache hit False"]


def test_numba_internals_pin_reports_missing_class_and_attribute(monkeypatch):
    monkeypatch.delattr(numba_codegen, "JitEngine")
    monkeypatch.setattr(
        numba_codegen.CPUCodegen,
        "_init",
        lambda self, llvm_module: setattr(self, "_target_machine", None),
    )
    with pytest.raises(CaptureError) as err:
        check_numba_internals()
    assert "numba.core.codegen.JitEngine.is_symbol_defined is missing" in str(err.value)
    assert "numba.core.codegen.CPUCodegen no longer sets self._tm" in str(err.value)


def test_eagerly_compiled_dispatcher():
    @njit("float64(float64)")
    def half(x):
        return x / 2

    assert capture(half, (types.float64,)).signature == types.float64(types.float64)
    with pytest.raises(
        CaptureError, match=r"half was declared for \(float64\) only, not \(int64\)"
    ):
        capture(half, (types.int64,))


@njit
def shifted_exp_4d(x, m):
    return np.sum(np.exp(x - m) / m)


def test_ad_pipeline_does_not_unswitch_broadcast_tests():
    """Numba's per-function passes run at O3, whose loop unswitching copies a 4-D array
    expression's loop nest once per broadcast test (631 blocks here, 1,098 for npbench's
    softmax, whose derivative then took 50 s to build). The captured module has them at O2."""
    x = np.linspace(0.1, 1.0, 48).reshape(2, 2, 3, 4)
    m = np.linspace(1.0, 2.0, 12).reshape(2, 2, 3, 1)
    ad = capture(shifted_exp_4d, (x, m))
    blocks = len(re.findall(r"^[\w.\"-]+:", native_body(ad.text, ad.symbol), re.M))
    assert blocks < 100
    # ... and its derivative is still right.
    dx, dm = np.zeros_like(x), np.zeros_like(m)
    pyzyme.autodiff(pyzyme.Reverse, shifted_exp_4d, pyzyme.Active, pyzyme.Duplicated(x, dx),
                    pyzyme.Duplicated(m, dm))
    np.testing.assert_allclose(dx, np.exp(x - m) / m, rtol=1e-13)
    want = np.sum(-np.exp(x - m) / m - np.exp(x - m) / m**2, axis=3, keepdims=True)
    np.testing.assert_allclose(dm, want, rtol=1e-13)
