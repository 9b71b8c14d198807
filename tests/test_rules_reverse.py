"""The rule table through whole derivatives: every Partials row that Numba code reaches, in a
tiny ``@njit`` function, checked by :func:`pyzyme.testing.test_forward` and
:func:`pyzyme.testing.test_reverse` (split reverse mode) against finite differences.

``test_rules_table.py`` checks each row's formulas as data; this file checks that forward and
reverse mode apply them where Numba calls the function. Each case names the symbol (or opcode)
it reaches, and a test checks that the captured IR really contains it, so a change in how Numba
lowers ``math.tan`` (say) shows up here instead of leaving the row silently untested. Rows that
no Numba code reaches are listed with the reason, and a coverage test keeps the two lists in
step with the table.

Each function is compiled once (by Numba and, per mode, by pyzyme) and shared by its points.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numba
import numpy as np
import pytest

from pyzyme import Active, Const, Duplicated
from pyzyme.frontends.numba import capture
from pyzyme.rules import default_rules
from pyzyme.rules.spec import Partials
from pyzyme.testing import test_forward, test_reverse

RULES = default_rules()
OPCODES = {"fadd", "fsub", "fmul", "fdiv", "frem", "fneg"}
f32 = np.float32


@dataclass(frozen=True)
class Case:
    """One row reached from Numba: the symbol or opcode in the IR, the function, its points."""

    id: str
    symbol: str
    fn: object
    points: tuple

    @property
    def row(self):
        return RULES.lookup(self.symbol, "opcode" if self.symbol in OPCODES else "call")


def case(id_, symbol, fn, *points):
    return Case(id_, symbol, numba.njit(fn), points)


def _atan2_into(out, y, x):
    out[:] = np.arctan2(y, x)


# Points are well inside each function's smooth domain and away from branch cuts.
CASES = [
    # opcodes
    case("fadd", "fadd", lambda x, y: x + y, (1.5, -0.7), (3.0, 2.0)),
    case("fsub", "fsub", lambda x, y: x - y, (1.5, -0.7), (3.0, 2.0)),
    case("fmul", "fmul", lambda x, y: x * y, (1.5, -0.7), (3.0, 2.0)),
    case("fdiv", "fdiv", lambda x, y: x / y, (1.5, -0.7), (-2.0, 3.0)),
    case("frem", "frem", lambda x, y: np.fmod(x, y), (7.3, 2.0), (-5.2, 1.5)),
    case("fneg", "fneg", lambda x: -x, (1.5,), (-0.3,)),
    # LLVM intrinsics
    case("llvm.sqrt", "llvm.sqrt.f64", lambda x: x ** 0.5, (2.0,), (0.3,)),
    case("llvm.sin", "llvm.sin.f64", lambda x: math.sin(x), (0.7,), (-2.0,)),
    case("llvm.cos", "llvm.cos.f64", lambda x: math.cos(x), (0.7,), (-2.0,)),
    case("llvm.exp", "llvm.exp.f64", lambda x: math.exp(x), (0.5,), (-1.2,)),
    case("llvm.exp2", "llvm.exp2.f64", lambda x: np.exp2(x), (0.5,), (-1.2,)),
    case("llvm.log", "llvm.log.f64", lambda x: math.log(x), (0.5,), (3.0,)),
    case("llvm.log2", "llvm.log2.f64", lambda x: np.log2(x), (0.5,), (3.0,)),
    case("llvm.log10", "llvm.log10.f64", lambda x: math.log10(x), (0.5,), (3.0,)),
    case("llvm.pow", "llvm.pow.f64", lambda x, y: math.pow(x, y), (1.5, 2.3), (0.7, -1.1)),
    case("llvm.fabs", "llvm.fabs.f64", lambda x: abs(x), (-1.5,), (0.8,)),
    case("llvm.copysign", "llvm.copysign.f64", lambda x, y: math.copysign(x, y), (1.5, -2.0),
         (-0.7, 3.0)),
    case("llvm.sin.f32", "llvm.sin.f32", lambda x: np.sin(f32(x)), (0.7,), (-2.0,)),
    case("llvm.exp.f32", "llvm.exp.f32", lambda x: np.exp(f32(x)), (0.5,), (-1.2,)),
    case("llvm.pow.f32", "llvm.pow.f32", lambda x, y: f32(x) ** f32(y), (1.5, 2.3)),
    # C math functions
    case("tan", "tan", lambda x: math.tan(x), (0.4,), (-1.1,)),
    case("asin", "asin", lambda x: math.asin(x), (0.3,), (-0.6,)),
    case("acos", "acos", lambda x: math.acos(x), (0.3,), (-0.6,)),
    case("atan", "atan", lambda x: math.atan(x), (0.5,), (-2.0,)),
    case("atan2", "atan2", lambda y, x: math.atan2(y, x), (0.5, 1.2), (-1.0, -0.4)),
    case("np.arctan2", "atan2", _atan2_into,
         (np.zeros(3), np.array([0.5, -1.0, 2.0]), np.array([1.2, -0.4, -0.3]))),
    case("sinh", "sinh", lambda x: math.sinh(x), (0.5,), (-2.0,)),
    case("cosh", "cosh", lambda x: math.cosh(x), (0.5,), (-2.0,)),
    case("tanh", "tanh", lambda x: math.tanh(x), (0.5,), (-1.3,)),
    case("asinh", "asinh", lambda x: math.asinh(x), (0.5,), (-2.0,)),
    case("acosh", "acosh", lambda x: math.acosh(x), (1.5,), (3.0,)),
    case("atanh", "atanh", lambda x: math.atanh(x), (0.3,), (-0.6,)),
    case("expm1", "expm1", lambda x: math.expm1(x), (0.5,), (-1.2,)),
    case("log2", "log2", lambda x: math.log2(x), (0.5,), (3.0,)),
    case("log1p", "log1p", lambda x: math.log1p(x), (0.5,), (-0.4,)),
    case("sqrt", "sqrt", lambda x: math.sqrt(x), (2.0,), (0.3,)),
    case("hypot", "hypot", lambda x, y: math.hypot(x, y), (3.0, 4.0), (-0.5, 1.2)),
    case("erf", "erf", lambda x: math.erf(x), (0.3,), (-1.1,)),
    case("erfc", "erfc", lambda x: math.erfc(x), (0.3,), (-1.1,)),
    case("lgamma", "lgamma", lambda x: math.lgamma(x), (3.7,), (-1.5,)),
    case("tanf", "tanf", lambda x: np.tan(f32(x)), (0.4,)),
    case("atan2f", "atan2f", lambda y, x: np.arctan2(f32(y), f32(x)), (0.5, 1.2)),
    case("sqrtf", "sqrtf", lambda x: np.sqrt(f32(x)), (2.0,)),
    case("hypotf", "hypotf", lambda x, y: np.hypot(f32(x), f32(y)), (3.0, 4.0)),
    case("lgammaf", "lgammaf", lambda x: math.lgamma(f32(x)), (3.7,)),
    # Numba's helpers around C functions
    case("numba_gamma", "numba_gamma", lambda x: math.gamma(x), (2.5,), (-1.5,)),
    case("numba_gammaf", "numba_gammaf", lambda x: math.gamma(f32(x)), (2.5,)),
    case("numba_frexp", "numba_frexp", lambda x: math.frexp(x)[0], (5.0,), (-0.3,)),
    case("numba_ldexp", "numba_ldexp", lambda x, n: math.ldexp(x, n), (1.5, 3), (-0.7, -2)),
]

_NOT_EMITTED = "Numba does not emit it"
# First name of each Partials row no Numba code reaches -> why.
UNREACHABLE = {
    **{f"llvm.{n}": f"Numba calls the C function {n}" for n in
       ("tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh")},
    **{n: f"Numba emits llvm.{n} instead" for n in
       ("sin", "cos", "exp", "exp2", "log", "log10", "pow", "fabs", "copysign")},
    "llvm.exp10": "Numba has no exp10; 10.0 ** x is llvm.pow",
    "exp10": "Numba has no exp10; 10.0 ** x is llvm.pow",
    "cbrt": "np.cbrt is llvm.pow with exponent 1/3",
    "tgamma": "math.gamma calls numba_gamma",
    "fmod": "np.fmod and % are the frem instruction; math.fmod is not in Numba",
    "remainder": "math.remainder is not in Numba; np.remainder is frem and a select",
    "fmin": "np.fmin is fcmp and select", "fmax": "np.fmax is fcmp and select",
    "llvm.minnum": "min, np.minimum and np.fmin are fcmp and select",
    "llvm.maxnum": "max, np.maximum and np.fmax are fcmp and select",
    "llvm.minimum": "np.minimum is fcmp and select",
    "llvm.minimumnum": "np.fmin is fcmp and select",
    "llvm.fma": "Numba has no fma and does not contract a * b + c",
    "llvm.fmuladd": "Numba does not contract a * b + c",
    "fma": "Numba has no fma",
    "llvm.powi": "x ** n with an int n is llvm.pow of n converted to float",
    "llvm.ldexp": "math.ldexp calls numba_ldexp", "ldexp": "math.ldexp calls numba_ldexp",
    "scalbn": "math.ldexp calls numba_ldexp", "scalbln": "math.ldexp calls numba_ldexp",
    "llvm.frexp": "math.frexp calls numba_frexp", "frexp": "math.frexp calls numba_frexp",
    "llvm.canonicalize": _NOT_EMITTED,
    "pyzyme.int_power": "not in Numba's IR: the loop Numba inlines for x ** i is folded into "
                        "it before differentiation (tests/diff/test_int_power.py)",
    "pyzyme.zero_remainder": "not in Numba's IR: the zero of x % y where the remainder is zero "
                             "goes through it before differentiation "
                             "(tests/reverse/test_python_remainder.py)",
}

POINTS = [(c, p) for c in CASES for p in c.points]
POINT_IDS = [f"{c.id}-{i}" for c in CASES for i in range(len(c.points))]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_reaches_its_row(case):
    assert isinstance(case.row, Partials), case.symbol
    text = capture(case.fn, case.points[0]).text
    body = text[text.index("define "):]
    if case.symbol in OPCODES:
        pattern = rf"= {case.symbol} "
    else:
        pattern = rf"call [^\n]*@{re.escape(case.symbol)}\("
    assert re.search(pattern, body), f"{case.id} no longer reaches {case.symbol}:\n{body}"


@pytest.mark.parametrize("case, point", POINTS, ids=POINT_IDS)
def test_forward_mode(case, point):
    ret = Const if case.fn.py_func is _atan2_into else Duplicated
    test_forward(case.fn, ret, *point)


@pytest.mark.parametrize("case, point", POINTS, ids=POINT_IDS)
def test_reverse_mode(case, point):
    ret = Const if case.fn.py_func is _atan2_into else Active
    test_reverse(case.fn, ret, *point)


def test_every_partials_row_is_reached_or_explained():
    rows = [row for row in RULES.rows() if isinstance(row, Partials)]
    covered = {id(c.row) for c in CASES}
    missing = [row.names[0] for row in rows
               if id(row) not in covered and row.names[0] not in UNREACHABLE]
    assert not missing, f"Partials rows with neither a case nor a reason: {missing}"
    stale = [c.id for c in CASES if c.row.names[0] in UNREACHABLE]
    assert not stale, f"rows listed as unreachable but reached: {stale}"
    known = {row.names[0] for row in rows}
    assert set(UNREACHABLE) <= known, set(UNREACHABLE) - known
