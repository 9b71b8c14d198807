"""Floats copied byte by byte (``char *`` loops in C, ``x.view(np.uint8)`` in Numba).

Forward mode copies the shadow's bytes where the primal copies its bytes, so the tangent
travels with the float (it used to copy the primal's bytes into the shadow: a tangent equal
to the value, or garbage). The copy's destination gets a shadow even though only integers
are stored into it (activity used to give it none and drop the derivative). Reverse mode
cannot add a byte's adjoint and refuses the copy, naming the line, as it refuses copies of a
float's width that type analysis cannot prove.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

from pyzyme import Active, Duplicated, DuplicatedNoNeed, Forward, Reverse, autodiff
from pyzyme.errors import UnsupportedError
from pyzyme.frontends.c.clang import ziglang_available

needs_clang = pytest.mark.skipif(not ziglang_available(), reason="needs the 'ziglang' package")

# ``r`` reversed byte by byte into ``y`` and back: ``r`` again, so f = sum (i+1) x[n-1-i]^2.
# The reversal keeps clang from turning the loops into memcpy.
_PROGRAM = r"""
#include <stddef.h>
extern double __enzyme_fwddiff(void *, ...);
extern double __enzyme_autodiff(void *, ...);
extern int enzyme_dup, enzyme_const;
static void reverse_bytes(char *dst, const char *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[n - 1 - i];
}
static double f(double *x, double *y, double *r, int n) {
    for (int i = 0; i < n; i++) r[i] = x[n - 1 - i];
    reverse_bytes((char *)y, (const char *)r, sizeof(double) * n);
    reverse_bytes((char *)r, (const char *)y, sizeof(double) * n);
    double s = 0;
    for (int i = 0; i < n; i++) s += (i + 1) * r[i] * r[i];
    return s;
}
int main(void) {
    enum { N = 24 };
    double x[N], y[N], r[N], dx[N], dy[N], dr[N];
    int bad = 0;
    for (int i = 0; i < N; i++) x[i] = 0.25 * i - 1.0;
    for (int k = 0; k < N; k += 5) {
        for (int i = 0; i < N; i++) { dx[i] = i == k; dy[i] = 0; dr[i] = 0; }
        double t = MODE;
        double want = 2.0 * (N - k) * x[k];
        bad += !(t - want < 1e-12 && want - t < 1e-12);
    }
    return bad;
}
"""
_FORWARD = ("__enzyme_fwddiff((void *)f, enzyme_dup, x, dx, enzyme_dup, y, dy, "
            "enzyme_dup, r, dr, enzyme_const, N)")
_REVERSE = ("(__enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_dup, y, dy, "
            "enzyme_dup, r, dr, enzyme_const, N), dx[k])")


def _program(tmp_path, call: str, opt: str) -> str:
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "bytes.c"
    src.write_text(_PROGRAM.replace("MODE", call))
    return lower(compile_source(src, opt))


@needs_clang
@pytest.mark.parametrize("opt", ["-O0", "-O1", "-O2", "-O3"])
def test_forward_mode_copies_the_tangents_bytes(tmp_path, opt):
    from pyzyme.runtime.standalone import Program

    assert Program(_program(tmp_path, _FORWARD, opt), name="bytes", opt_level=0).run_main() == 0


@needs_clang
def test_reverse_mode_refuses_a_byte_copy_of_floats_naming_its_line(tmp_path):
    from pyzyme.runtime.standalone import Program

    with pytest.raises(UnsupportedError) as err:
        Program(_program(tmp_path, _REVERSE, "-O0"), name="bytes", opt_level=0).run_main()
    text = str(err.value)
    line = 1 + _PROGRAM.splitlines().index(
        "    for (size_t i = 0; i < n; i++) dst[i] = src[n - 1 - i];")
    assert "copies memory that may hold floats through an integer of type i8" in text, text
    assert f"(at bytes.c:{line})" in text, text
    assert "copy floats as floats" in text, text


@numba.njit
def _through_bytes(x):
    y = np.empty_like(x)
    xb, yb = x.view(np.uint8), y.view(np.uint8)
    for i in range(xb.size):
        yb[i] = xb[i]
    return np.sum(np.arange(1.0, x.size + 1.0) * y * y)


def test_numba_forward_mode_through_a_uint8_view_matches_central_differences():
    x = np.array([0.5, -1.25, 2.0, 3.5])
    h = 1e-6
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = 1.0
        (tangent,) = autodiff(Forward, _through_bytes, DuplicatedNoNeed, Duplicated(x, e))
        central = (_through_bytes(x + h * e) - _through_bytes(x - h * e)) / (2 * h)
        assert tangent == pytest.approx(central, rel=1e-7)


def test_numba_reverse_mode_through_a_uint8_view_is_refused():
    x = np.array([0.5, -1.25, 2.0, 3.5])
    with pytest.raises(UnsupportedError, match="copies memory that may hold floats through an "
                                               "integer of type i8"):
        autodiff(Reverse, _through_bytes, Active, Duplicated(x, np.zeros_like(x)))


_FROM_A_CONSTANT = r"""
#include <stddef.h>
extern double __enzyme_fwddiff(void *, ...);
extern void __enzyme_autodiff(void *, ...);
extern int enzyme_dup, enzyme_const;
static void reverse_bytes(char *dst, const char *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[n - 1 - i];
}
static double f(double *x, double *buf, const double *table, int n) {
    double t[8];
    for (int i = 0; i < n; i++) t[i] = table[n - 1 - i];
    reverse_bytes((char *)buf, (const char *)t, sizeof(double) * n);
    double s = 0;
    for (int i = 0; i < n; i++) { buf[i] = buf[i] * x[i]; s += buf[i] * x[i]; }
    return s;
}
int main(void) {
    double x[4] = {1, 2, 3, 4}, dx[4] = {1, 0, 0, 0}, buf[4], dbuf[4] = {0};
    double table[4] = {5, 6, 7, 8};
    CALL;
    return 0;
}
"""
_ARGS = "enzyme_dup, x, dx, enzyme_dup, buf, dbuf, enzyme_const, table, 4"


@needs_clang
@pytest.mark.parametrize("call", [f"__enzyme_fwddiff((void *)f, {_ARGS})",
                                  f"__enzyme_autodiff((void *)f, {_ARGS})"],
                         ids=["forward", "reverse"])
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_bytes_copied_from_memory_without_a_shadow_into_memory_with_one_are_refused(
        tmp_path, opt, call):
    """The bytes of ``table`` (passed Const) land in ``buf``, which has a shadow: a float's
    tangent there is zero, an integer's is itself, and which one they are is not known.
    Forward mode used to copy the primal's bytes into the shadow (a tangent of 1e-318 for 10);
    reverse mode mirrored them there, where they stood for ``buf``'s adjoint."""
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower
    from pyzyme.runtime.standalone import Program

    src = tmp_path / "table.c"
    src.write_text(_FROM_A_CONSTANT.replace("CALL", call))
    with pytest.raises(UnsupportedError, match="copies memory that may hold floats through an "
                                               "integer of type i8") as err:
        Program(lower(compile_source(src, opt)), name="table", opt_level=0).run_main()
    line = 1 + _FROM_A_CONSTANT.splitlines().index(
        "    for (size_t i = 0; i < n; i++) dst[i] = src[n - 1 - i];")
    assert f"(at table.c:{line})" in str(err.value)
