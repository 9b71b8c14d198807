"""Enzyme's contexts of global shadows (``__enzyme_context``...) that pyzyme refuses, naming
the call; the programs it runs are tests/corpus/enzyme_c/shadow_contexts.c,
default_shadows.c and shadow_contexts.cpp (tests/test_enzyme_c.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyzyme.frontends.c.clang import ziglang_available

pytestmark = pytest.mark.skipif(not ziglang_available(), reason="needs the 'ziglang' package")

_HEAD = """
void *__enzyme_context(int);
void *__enzyme_shadow(void *, void *, int);
void __enzyme_zero_shadows(void *);
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);
extern int enzyme_context, enzyme_width;
double g = 2.0;
double f(double x) { return g * x * x; }
"""


def _lower(tmp_path, body: str, opt: str = "-O0"):
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "prog.c"
    src.write_text(_HEAD + body)
    return lower(compile_source(src, opt))


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_zeroing_a_context_inside_a_derivative_is_refused(tmp_path, opt):
    from pyzyme.errors import UnsupportedError

    body = """
double h(double x) {
  void *c = __enzyme_context(1);
  __enzyme_zero_shadows(c);
  return f(x);
}
double run(void) { return __enzyme_autodiff((void *)h, 1.0); }
"""
    with pytest.raises(UnsupportedError) as err:
        _lower(tmp_path, body, opt)
    assert "prog.c:13: __enzyme_zero_shadows in @h" in str(err.value)


@pytest.mark.parametrize("call, message", [
    ("__enzyme_autodiff((void *)f, enzyme_context, c, 1.0)",
     "the context passed after enzyme_context has width 2; contexts of width > 1 are "
     "supported in __enzyme_fwddiff only"),
    ("__enzyme_fwddiff((void *)f, enzyme_width, 3, enzyme_context, c, 1.0, 0.0, 0.0, 0.0)",
     "enzyme_width 3, but the context passed after enzyme_context has width 2"),
])
def test_a_context_of_another_width_is_refused(tmp_path, call, message):
    from pyzyme.frontends.c.enzyme_calls import EnzymeCallError

    body = f"double run(void) {{ void *c = __enzyme_context(2); return {call}; }}\n"
    with pytest.raises(EnzymeCallError) as err:
        _lower(tmp_path, body)
    assert str(err.value).startswith("prog.c:10: ")
    assert message in str(err.value)


def test_a_shadow_query_of_another_shape_is_refused(tmp_path):
    from pyzyme.frontends.c.enzyme_calls import EnzymeCallError

    body = "void *q(double *p) { return __enzyme_shadow((void *)p, (void *)p, 0.5); }\n"
    (tmp_path / "prog.c").write_text(_HEAD.replace("void *__enzyme_shadow(void *, void *, int);",
                                                  "void *__enzyme_shadow();") + body)
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    with pytest.raises(EnzymeCallError) as err:
        lower(compile_source(tmp_path / "prog.c", "-O0"))
    assert "prog.c:10: __enzyme_shadow is called with (ptr, ptr, double)" in str(err.value)


def test_a_global_from_a_context_that_cannot_be_passed_is_refused(tmp_path):
    """A variadic function cannot take the global as a parameter; its derivative would
    treat it as a constant."""
    from pyzyme.errors import UnsupportedError

    body = """
#include <stdarg.h>
__attribute__((noinline)) double vf(int n, ...) {
  va_list ap;
  va_start(ap, n);
  double x = va_arg(ap, double);
  va_end(ap);
  return g * x;
}
double h(double x) { return vf(1, x); }
double run(void) {
  void *c = __enzyme_context(1);
  return __enzyme_autodiff((void *)h, enzyme_context, c, 1.0);
}
"""
    with pytest.raises(UnsupportedError) as err:
        _lower(tmp_path, body)
    assert "uses the global @g, whose shadow a context gives (__enzyme_shadow), but pyzyme " \
           "cannot pass it to the variadic function @vf" in str(err.value)


def test_a_context_of_another_width_at_run_time_stops_the_program(tmp_path):
    """A context whose width cannot be read where it is passed is checked when the
    derivative runs: the program stops, naming the call, rather than read past a shadow."""
    src = tmp_path / "prog.c"
    src.write_text(_HEAD + """
__attribute__((noinline)) double run(void *c) {
  return __enzyme_autodiff((void *)f, enzyme_context, c, 1.0);
}
int main(void) { return (int)run(__enzyme_context(2)); }
""")
    exe = tmp_path / "prog"
    build = subprocess.run([sys.executable, "-m", "pyzyme", "cc", str(src), "-O1", "-o",
                            str(exe)], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "prog.c:12: __enzyme_autodiff: the context has 2 lanes, the derivative 1" in \
        proc.stderr
