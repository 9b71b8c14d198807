"""``__enzyme_virtualreverse`` and reverse mode through function pointers
(pyzyme.frontends.c.virtual_shadows, pyzyme.diff.calls.indirect): a vtable made a shadow,
built at -O2/-O3 where clang folds the vtable's address, and what pyzyme refuses, naming the
line. tests/corpus/enzyme_c/virtual_reverse.c runs at every level (tests/test_enzyme_c.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyzyme.frontends.c.clang import ziglang_available

pytestmark = pytest.mark.skipif(not ziglang_available(), reason="needs the 'ziglang' package")

VTABLE = Path(__file__).resolve().parent / "corpus" / "enzyme_c" / "optimized" / \
    "vtable_shadow.cpp"


def _cc(src, opt, exe):
    return subprocess.run([sys.executable, "-m", "pyzyme", "cc", str(src), opt,
                           "-fno-exceptions", "-o", str(exe)], capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("opt", ["-O2", "-O3"])
def test_a_shadow_vtable_gives_virtual_calls_their_derivatives(tmp_path, opt):
    build = _cc(VTABLE, opt, tmp_path / "program")
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(tmp_path / "program")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


def test_a_vtable_read_from_memory_is_refused(tmp_path):
    """At -O0 the vtable pointer is read from the object when the program runs: which
    functions it holds is not known here."""
    build = _cc(VTABLE, "-O0", tmp_path / "program")
    assert build.returncode != 0
    assert "vtable_shadow.cpp:42: the argument of __enzyme_virtualreverse is neither a " \
           "function nor the address of a vtable" in build.stderr


_OP = """
void *__enzyme_virtualreverse(void *);
double __enzyme_autodiff(void *, ...);
typedef struct { double (*fn)(double, const double *); } Op;
double wave(double x, const double *w) { return w[0] * x * x + w[1] * x; }
"""


def test_a_pointer_without_shadow_to_a_called_function_pointer_is_refused(tmp_path):
    """The pair's functions take every pointer with its shadow; a constant array has none."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "prog.c"
    src.write_text(_OP + """
const double W[2] = {1.0, 2.0};
double apply(const Op *op, double x) { return op->fn(x, W) * x; }
double run(const Op *op, Op *dop) { return __enzyme_autodiff((void *)apply, op, dop, 1.0); }
""")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O1"))
    assert "passes @W without a shadow to a function called through a pointer" in str(err.value)
    assert "prog.c:9" in str(err.value)


def test_a_pair_without_a_derivative_stops_the_program_when_called(tmp_path):
    """A function pyzyme cannot differentiate gets a pair that stops the program, naming the
    call of __enzyme_virtualreverse and the reason, if the derivative ever calls it."""
    src = tmp_path / "prog.c"
    src.write_text(_OP + """
double opaque(double x, const double *w) {
  double y;
  __asm__("" : "=x"(y) : "0"(x * w[0]));
  return y;
}
double apply(const Op *op, const double *w, double x) { return op->fn(x, w); }
int main(void) {
  double w[2] = {1, 2}, dw[2] = {0};
  Op op = {opaque}, dop = {(double (*)(double, const double *))__enzyme_virtualreverse(
                              (void *)opaque)};
  return (int)__enzyme_autodiff((void *)apply, &op, &dop, w, dw, 1.0);
}
""")
    exe = tmp_path / "prog"
    build = _cc(src, "-O1", exe)
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "pyzyme: prog.c:15: __enzyme_virtualreverse: pyzyme has no derivative of @opaque" in \
        proc.stderr


def test_a_null_shadow_of_a_called_function_pointer_stops_the_program(tmp_path):
    """A shadow struct whose function pointer was left null: the derivative stops, naming
    the function that makes the call, rather than jump to address 0."""
    src = tmp_path / "prog.c"
    src.write_text(_OP + """
double apply(const Op *op, const double *w, double x) { return op->fn(x, w); }
int main(void) {
  double w[2] = {1, 2}, dw[2] = {0};
  Op op = {wave}, dop = {0};
  return (int)__enzyme_autodiff((void *)apply, &op, &dop, w, dw, 1.0);
}
""")
    exe = tmp_path / "prog"
    build = _cc(src, "-O0", exe)
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "pyzyme: apply calls a function through a pointer whose shadow is null" in \
        proc.stderr


def test_a_function_pointer_not_handed_in_keeps_the_error(tmp_path):
    """A function pointer read from a global (not from memory the caller hands in with a
    shadow) has no pair to call: the error for a call without a derivative, as before."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "prog.c"
    src.write_text(_OP + """
double (*volatile chosen)(double, const double *) = wave;
double via_global(const double *w, double x) { return chosen(x, w); }
double run(const double *w, double *dw) {
  return __enzyme_autodiff((void *)via_global, w, dw, 1.0);
}
""")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O1"))
    assert "no derivative for an indirect call" in str(err.value)
