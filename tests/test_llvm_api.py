"""pyzyme.llvm (differentiate a module's function directly), the __enzyme_* call errors, and
the command line: ``pyzyme opt``, ``pyzyme cc``, ``pyzyme run``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pyzyme.llvm as pl
from pyzyme.errors import UnsupportedError
from pyzyme.frontends.c.clang import compile_to_ir, ziglang_available
from pyzyme.frontends.c.enzyme_calls import EnzymeCallError
from pyzyme.frontends.c.lower import lower

needs_zig = pytest.mark.skipif(not ziglang_available(), reason="needs the 'ziglang' package")
SQUARE = Path(__file__).parent / "corpus" / "enzyme_c" / "square.c"

NORM = """
double norm2(const double *x, int n, double p) {
  double s = 0;
  for (int i = 0; i < n; i++) s += x[i] * x[i];
  return p * s;
}
"""


@pytest.fixture(scope="module")
def norm_ir():
    if not ziglang_available():
        pytest.skip("needs the 'ziglang' package")
    return compile_to_ir(NORM, opt="-O0")


def test_reverse_with_default_activities(norm_ir):
    grad = pl.compile(norm_ir, "norm2")  # ptr: dup, int: const, double: active
    x, dx = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    out = grad(x.ctypes.data, 3, 2.0, dx.ctypes.data, 1.0)  # params, shadows, seed
    assert out.f0 == pytest.approx(28.0) and out.f1 == pytest.approx(14.0)
    np.testing.assert_allclose(dx, 4 * x)


def test_forward_vector_mode(norm_ir):
    fwd = pl.compile(norm_ir, "norm2", "forward", ["dup", "const", "const"], width=2)
    x = np.array([1.0, 2.0, 3.0])
    e0, e1 = np.array([1.0, 0, 0]), np.array([0, 1.0, 0])
    out = fwd(x.ctypes.data, 3, 2.0, e0.ctypes.data, e1.ctypes.data)
    assert (out.f0, out.f1, out.f2) == pytest.approx((28.0, 4.0, 8.0))


def test_split_mode(norm_ir):
    aug, rev = pl.compile(norm_ir, "norm2", "split", ["dup", "const", "active"])
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    first = aug(x.ctypes.data, 2, 3.0, dx.ctypes.data)
    assert first.f0 == pytest.approx(15.0)
    x[:] = 100.0  # overwritten between the passes
    adj = rev(x.ctypes.data, 2, 3.0, dx.ctypes.data, 1.0, False, first.f1)
    np.testing.assert_allclose(dx, [6.0, 12.0])
    assert adj.f0 == pytest.approx(5.0)


def test_differentiate_returns_the_module_with_the_derivative(norm_ir):
    text = pl.differentiate(norm_ir, "norm2", "reverse", name="grad_norm2")
    assert "define double @norm2(" in text and "@grad_norm2(" in text


def test_wrong_kinds_and_names_are_errors(norm_ir):
    with pytest.raises(UnsupportedError, match="only floats"):
        pl.differentiate(norm_ir, "norm2", "reverse", ["dup", "active", "active"])
    with pytest.raises(UnsupportedError, match="only pointers have shadows"):
        pl.differentiate(norm_ir, "norm2", "reverse", ["dup", "const", "dup"])
    with pytest.raises(UnsupportedError, match="3 parameters, but 2"):
        pl.differentiate(norm_ir, "norm2", "reverse", ["dup", "const"])
    with pytest.raises(UnsupportedError, match="defines no function @nope"):
        pl.differentiate(norm_ir, "nope")
    with pytest.raises(UnsupportedError, match="unknown mode"):
        pl.differentiate(norm_ir, "norm2", "sideways")


# -- errors at call sites ----------------------------------------------------------------------
def _lower_c(src: str, opt: str = "-O0") -> str:
    return lower(compile_to_ir(src, opt=opt, extra_args=("-gline-tables-only",)))


HEAD = "extern int enzyme_dup, enzyme_out, enzyme_const, enzyme_bogus;\n" \
       "double __enzyme_autodiff(void*, ...);\n" \
       "double f(double *x, double y) { return x[0] * y; }\n"


@needs_zig
@pytest.mark.parametrize("call, message", [
    ("__enzyme_autodiff((void*)f, enzyme_bogus, x, dx, 1.0)", r"input.c:6: unknown marker "
                                                              r"enzyme_bogus"),
    ("__enzyme_autodiff((void*)f, x, dx)", r"input.c:6: .*takes 2 arguments, the call passes 1"),
    ("__enzyme_autodiff((void*)f, enzyme_out, x, 1.0)", r"input.c:6: argument 0 of @f .* is "
                                                        r"marked enzyme_out"),
    ("__enzyme_autodiff((void*)f, x, dx, 1.0, 2.0)", r"input.c:6: too many arguments"),
    ("__enzyme_autodiff((void*)g, 1.0)", r"input.c:6: @g has no body"),
    ("__enzyme_autodiff((void*)f, x)", r"input.c:6: .*ends before its shadow"),
])
def test_call_site_errors_name_the_line(call, message):
    src = HEAD + "double g(double);\ndouble use(double *x, double *dx) {\n  return " + call + \
        ";\n}\n"
    with pytest.raises(EnzymeCallError, match=message):
        _lower_c(src)


@needs_zig
def test_a_function_without_derivative_is_named_with_the_call_site():
    src = ("double __enzyme_autodiff(void*, ...);\ndouble opaque(double);\n"
           "double f(double x) { return opaque(x) * x; }\n"
           "double use(double x) { return __enzyme_autodiff((void*)f, x); }\n")
    with pytest.raises(UnsupportedError) as info:
        _lower_c(src)
    text = str(info.value)
    assert "@opaque" in text and "input.c:4" in text


@needs_zig
def test_custom_gradient_registration_with_a_wrong_rule_is_refused():
    """A registered gradient is used (tests/corpus/enzyme_c/custom_gradient*.c); one whose
    functions do not follow Enzyme's convention is refused, naming the registration."""
    src = ("double __enzyme_autodiff(void*, ...);\n"
           "__attribute__((noinline)) double f(double x) { return x * x; }\n"
           "void df(void) {}\nvoid *__enzyme_register_gradient_f[] = {(void*)f, (void*)df, "
           "(void*)df};\ndouble g(double x) { return f(x) + x; }\n"
           "double use(double x) { return __enzyme_autodiff((void*)g, x); }\n")
    with pytest.raises(UnsupportedError, match="__enzyme_register_gradient_f: the augmented "
                                               "forward function @df takes"):
        _lower_c(src)


# -- the command line ---------------------------------------------------------------------------
def _pyzyme(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "pyzyme", *args], capture_output=True,
                          text=True, check=False, cwd=cwd)


@needs_zig
def test_readme_example_through_cc_and_run(tmp_path):
    """The README's C example (the seed's square(x) -> 6.28), which docs/c-cpp.rst shows too,
    built and run by the README's command line as written, printing what its comment shows."""
    import shlex

    from tests.doc_blocks import DOCS, docs_block, readme_block
    source = readme_block("__enzyme_autodiff((void*)square", "c")
    line = readme_block("pyzyme cc square.c", "sh").strip()
    docs = docs_block("c-cpp.rst", "pyzyme cc square.c", "sh")
    assert (DOCS / "snippets" / "square.c").read_text() == source
    assert " ".join(line.split()) in [" ".join(ln.split()) for ln in docs.splitlines()]
    command, shown = (part.strip() for part in line.split("#", 1))
    (tmp_path / "square.c").write_text(source)
    pyzyme = " ".join(map(shlex.quote, [sys.executable, "-m", "pyzyme"]))
    proc = subprocess.run(command.replace("pyzyme", pyzyme, 1), shell=True,  # noqa: S602
                          capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == shown + "\n", proc.stderr
    ran = _pyzyme("run", str(tmp_path / "square.c"))
    assert ran.returncode == 0 and ran.stdout == shown + "\n", ran.stderr


@needs_zig
def test_opt_writes_ir_clang_links(tmp_path):
    ll = tmp_path / "square.ll"
    ll.write_text(compile_to_ir(SQUARE, opt="-O1"))
    out = tmp_path / "square.out.ll"
    proc = _pyzyme("opt", str(ll), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "__pyzyme_reverse" in text and "@__enzyme_autodiff" not in text
    exe = tmp_path / "prog"
    link = subprocess.run([sys.executable, "-m", "ziglang", "cc", "-Wno-override-module",
                           str(out), "-o", str(exe)], capture_output=True, text=True,
                          check=False)
    assert link.returncode == 0, link.stderr
    assert "6.280000" in subprocess.run([str(exe)], capture_output=True, text=True).stdout


@needs_zig
def test_cli_errors(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("double __enzyme_autodiff(void*, ...);\nint enzyme_nope;\n"
                   "double f(double x) { return x; }\n"
                   "int main(void) { return __enzyme_autodiff((void*)f, enzyme_nope, 1.0); }\n")
    proc = _pyzyme("run", str(bad))
    assert proc.returncode == 1
    assert "bad.c:4: unknown marker enzyme_nope" in proc.stderr
    assert _pyzyme("opt", str(tmp_path / "missing.ll")).returncode == 2
    assert _pyzyme("cc").returncode == 2

