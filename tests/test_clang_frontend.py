"""pyzyme.frontends.c.clang: C and C++ to LLVM 22 IR through ziglang's clang."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import pytest

from pyzyme.errors import FrontendError, PyzymeError
from pyzyme.frontends.c import clang
from pyzyme.frontends.c.clang import compile_to_ir, normalize_ir, ziglang_available

needs_zig = pytest.mark.skipif(not ziglang_available(), reason="needs the 'ziglang' package")

SQUARE = "double square(double x) { return x * x; }\n"


def _host() -> tuple[str, str]:
    llvm.initialize_native_target()
    triple = llvm.get_process_triple()
    return triple, str(llvm.Target.from_triple(triple).create_target_machine().target_data)


@needs_zig
def test_source_string_compiles_to_host_ir() -> None:
    text = compile_to_ir(SQUARE)
    triple, layout = _host()
    assert f'target triple = "{triple}"' in text
    assert f'target datalayout = "{layout}"' in text
    assert 'source_filename = "input.c"' in text  # not the random temporary folder
    assert "fmul double" in text
    llvm.parse_assembly(text).verify()


@needs_zig
def test_optimisation_level() -> None:
    assert "alloca" in compile_to_ir(SQUARE, opt="-O0")
    assert "alloca" not in compile_to_ir(SQUARE, opt="-O2")


@needs_zig
def test_file_path_and_language_from_suffix(tmp_path: Path) -> None:
    src = tmp_path / "k.cpp"
    src.write_text(
        "template <class T> T twice(T x) { return x + x; }\n"
        "double use(double x) { return twice(x); }\n"
    )
    text = compile_to_ir(src)
    assert 'source_filename = "k.cpp"' in text
    assert "_Z3used" in text  # C++ mangling: compiled as C++
    assert compile_to_ir(str(src)) == text  # a str naming a file is a path


@needs_zig
def test_cxx_exceptions_from_string() -> None:
    text = compile_to_ir(
        "int f(int k) { try { if (k) throw k; } catch (int e) { return e; } return 0; }",
        lang="c++",
        opt="-O1",
    )
    assert "__cxa_throw" in text and "landingpad" in text


@needs_zig
def test_extra_args_and_defines() -> None:
    text = compile_to_ir(
        "#include <math.h>\ndouble f(double x) { return sin(x) * N; }",
        extra_args=("-DN=3", "-fno-math-errno"),
    )
    assert "@llvm.sin.f64" in text and "3.0" in text


@needs_zig
def test_debug_info_only_when_asked() -> None:
    assert "DILocation" not in compile_to_ir(SQUARE)
    assert "DILocation" in compile_to_ir(SQUARE, extra_args=("-g",))


@needs_zig
def test_no_sanitizer_calls_by_default() -> None:
    src = "int add(int a, int b) { return a + b; }"
    assert "__ubsan" not in compile_to_ir(src, opt="-O0")
    assert "sspstrong" not in compile_to_ir(src, opt="-O0")
    assert "__ubsan" in compile_to_ir(src, opt="-O0", extra_args=("-fsanitize=undefined",))


@needs_zig
def test_compile_error_carries_diagnostics() -> None:
    with pytest.raises(FrontendError) as info:
        compile_to_ir("int f( { }")
    err = info.value
    assert isinstance(err, PyzymeError)
    assert "compiling input.c as c failed" in str(err)
    assert "error: expected" in str(err) and "error: expected" in err.stderr
    assert "argument unused during compilation" not in str(err)  # zig's noise is dropped


def test_missing_file() -> None:
    with pytest.raises(FrontendError, match="no such source file"):
        compile_to_ir(Path("does/not/exist.c"))
    with pytest.raises(FrontendError, match="no such source file"):
        compile_to_ir("does/not/exist.cpp")


def test_unknown_language() -> None:
    with pytest.raises(FrontendError, match="unknown language"):
        compile_to_ir(SQUARE, lang="fortran")  # type: ignore[arg-type]


def test_without_ziglang(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        clang.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "ziglang" else real(name, *a),
    )
    assert not ziglang_available()
    with pytest.raises(FrontendError, match="ziglang is not installed") as info:
        compile_to_ir(SQUARE)
    assert "pip install 'pyzyme[c]'" in str(info.value)


def test_compiler_that_cannot_run() -> None:
    with pytest.raises(FrontendError, match="cannot run the compiler"):
        compile_to_ir(SQUARE, compiler=["/nonexistent/clang"])


def test_normalize_ir_sets_host_target() -> None:
    old = (
        'target triple = "x86_64-unknown-linux6.18.44-gnu2.36.0"\n'
        "define i32 @f(i32 %x) {\n  ret i32 %x\n}\n"
    )
    text = normalize_ir(old)
    triple, layout = _host()
    assert f'target triple = "{triple}"' in text and f'target datalayout = "{layout}"' in text


def test_normalize_ir_rejects_bad_ir() -> None:
    with pytest.raises(FrontendError, match="^bad.ll:1:17: expected type"):
        normalize_ir("define i32 @f( {", name="bad.ll")
    with pytest.raises(FrontendError):  # parses, but does not verify
        normalize_ir("define i32 @f() {\n  ret i64 0\n}\n")


@needs_zig
def test_compiles_for_the_cpu_numba_is_told() -> None:
    # zig compiles for the host's CPU and says so on every function ("target-cpu"), which
    # overrides the JIT's target machine: with NUMBA_CPU_NAME it must name that CPU instead.
    script = ("from pyzyme.frontends.c.clang import compile_to_ir\n"
              "print(compile_to_ir('double sq(double x) { return x * x; }'))")
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": ""}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=env, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"target-cpu"="haswell"' in out.stdout
    assert "+avx512f" not in out.stdout
