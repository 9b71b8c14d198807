"""Rows for the C math library, every spelling listed (``sin``, ``sinf``, ``sinl``).

LLVM turns many of these calls into intrinsics (``sin`` -> ``llvm.sin``) and lowers intrinsics
back into them; :mod:`pyzyme.rules.intrinsics` reuses these rows' partials for the intrinsic of
the same function, so each derivative is written once. ``x, y, z`` are the operands in C's
order (``atan2(y, x)`` takes ``y`` first), ``ret`` the result. Where a derivative is undefined
(a kink, a tie, a pole) the row's ``note`` records the value chosen; the table test checks it.
"""

from __future__ import annotations

import math

from pyzyme import naming
from pyzyme.rules.expr import arg, call, cmp, const, int_add, ret, select, to_float
from pyzyme.rules.spec import Inactive, Partials

__all__ = ["ROWS", "LIBM", "PIECEWISE_CONSTANT", "spellings"]

x, y, z, r = arg(0), arg(1), arg(2), ret()
_ONE, _ZERO = const(1.0), const(0.0)
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def spellings(*names: str) -> tuple[str, ...]:
    """Each of ``names`` with its float (``f``) and long double (``l``) spellings.

    >>> spellings("sin", "cos")
    ('sin', 'sinf', 'sinl', 'cos', 'cosf', 'cosl')
    """
    return tuple(s for n in names for s in (n, n + "f", n + "l"))


def _c(name: str, *partials, note: str = "") -> Partials:
    return Partials(spellings(name), "libm", partials, note=note, costly=name in _COSTLY)


# What a C library computes by a polynomial or series (tens of instructions, against a single
# instruction for sqrt, fabs, fma, fmin): a reverse sweep keeps these results on its tape
# rather than calling them again, where that does not change how the tape grows
# (pyzyme.diff.reverse.values: GradBench's lse 1.95x its primal recomputing each exp, 1.22x
# keeping them; lstm 2.40x -> 1.74x).
_COSTLY = frozenset((
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh",
    "acosh", "atanh", "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow",
    "cbrt", "hypot", "erf", "erfc", "lgamma", "tgamma", "fmod", "remainder"))


def _where_zero(v, value, otherwise):
    """``value`` where ``v == 0``, else ``otherwise``."""
    return select(cmp("oeq", v, 0.0), value, otherwise)


# d/dx of min/max-like functions: to the operand the result equals, the first one on ties.
# Comparing with the result covers NaN too: fmin(x, NaN) = x sends the derivative to x.
_PICKS_FIRST = select(cmp("oeq", r, x), _ONE, _ZERO)
_PICKS_SECOND = select(cmp("oeq", r, x), _ZERO, _ONE)
MIN_MAX_NOTE = ("ties (x == y, including -0 == +0) send the whole derivative to the first operand "
                "(d/dx = 1, d/dy = 0); the derivative goes to the operand the result equals")

_ATAN2_Y, _ATAN2_X = arg(0), arg(1)
_ATAN2_R2 = _ATAN2_X * _ATAN2_X + _ATAN2_Y * _ATAN2_Y

LIBM = (
    # Trigonometric. tan' = 1 + tan^2; asin' = 1/sqrt(1 - x^2) with 1 - x^2 = (1 - x)(1 + x),
    # exact near |x| = 1 where 1 - x*x loses digits.
    _c("sin", call("cos", x)),
    _c("cos", -call("sin", x)),
    _c("tan", 1.0 + r * r),
    _c("asin", 1.0 / call("sqrt", (1.0 - x) * (1.0 + x)), note="+inf at x = +-1"),
    _c("acos", -1.0 / call("sqrt", (1.0 - x) * (1.0 + x)), note="-inf at x = +-1"),
    _c("atan", 1.0 / (1.0 + x * x)),
    # atan2(y, x) is the angle of the point (x, y); C puts y first, so here arg(0) is y and
    # arg(1) is x: d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2). NaN (0/0) at the origin.
    _c("atan2", _ATAN2_X / _ATAN2_R2, -_ATAN2_Y / _ATAN2_R2,
       note="operand 0 is y, operand 1 is x (C order); NaN at (0, 0)"),
    # Hyperbolic. tanh' = 1 - tanh^2; acosh' = 1/sqrt(x^2 - 1), atanh' = 1/(1 - x^2), factored.
    _c("sinh", call("cosh", x)),
    _c("cosh", call("sinh", x)),
    _c("tanh", 1.0 - r * r),
    _c("asinh", 1.0 / call("sqrt", x * x + 1.0)),
    _c("acosh", 1.0 / call("sqrt", (x - 1.0) * (x + 1.0)), note="+inf at x = 1"),
    _c("atanh", 1.0 / ((1.0 - x) * (1.0 + x)), note="+inf at x = +-1"),
    # Exponentials and logarithms. (b^x)' = b^x log(b); log_b' = 1/(x log b); expm1' = e^x.
    _c("exp", r),
    _c("exp2", r * _LN2),
    _c("exp10", r * _LN10),
    _c("expm1", r + 1.0),
    _c("log", 1.0 / x, note="+inf at x = +0 (-inf at -0)"),
    _c("log2", 1.0 / (x * _LN2), note="+inf at x = +0"),
    _c("log10", 1.0 / (x * _LN10), note="+inf at x = +0"),
    _c("log1p", 1.0 / (1.0 + x), note="+inf at x = -1"),
    # pow(x, y) = x^y: d/dx = y x^(y-1), d/dy = x^y log(x). At x = 0, d/dy would be 0 * -inf:
    # it is 0 there (x^y is constant in y for y > 0), as Enzyme chooses. y = 0 makes x^y
    # constant in x, so d/dx is 0 even at x = 0 (JAX's choice), not 0 * inf.
    # x^(y-1) is computed as r / x where that is exact to pow's accuracy (mathlib.pow_less1).
    _c("pow", select(cmp("oeq", y, 0.0), _ZERO, y * call("pow_less1", x, y, r)),
       _where_zero(x, _ZERO, r * call("log", x)),
       note="d/dy = 0 at x = 0; d/dx = 0 at y = 0 (also at x = 0); d/dx = y * pow(0, y - 1) "
            "at x = 0 otherwise: +inf for 0 < y < 1; d/dy is NaN for x < 0"),
    # Roots: sqrt' = 1/(2 sqrt(x)), cbrt' = 1/(3 cbrt(x)^2), both +inf at 0 (vertical tangents).
    _c("sqrt", 0.5 / r, note="+inf at x = +0 (-inf at -0, where sqrt returns -0)"),
    _c("cbrt", 1.0 / (3.0 * (r * r)), note="+inf at x = 0"),
    # hypot(x, y) = sqrt(x^2 + y^2): d/dx = x / hypot. At the origin (a cone's tip) both are 0,
    # as fabs' is at 0 (hypot(x, 0) = |x|).
    _c("hypot", _where_zero(r, _ZERO, x / r), _where_zero(r, _ZERO, y / r),
       note="0 and 0 at (0, 0)"),
    # Error and gamma functions. erf' = 2/sqrt(pi) e^(-x^2); lgamma' = digamma (also for x < 0,
    # where lgamma = log|Gamma|); Gamma' = Gamma digamma.
    _c("erf", (2.0 / math.sqrt(math.pi)) * call("exp", -(x * x))),
    _c("erfc", (-2.0 / math.sqrt(math.pi)) * call("exp", -(x * x))),
    _c("lgamma", call("digamma", x),
       note="NaN at the negative integers; -inf at +0 and +inf at -0 (the one-sided limits)"),
    _c("tgamma", r * call("digamma", x),
       note="NaN at the negative integers; -inf at +0 and -0 (the one-sided limits)"),
    # Remainders: fmod(x, y) = x - trunc(x/y) y, remainder(x, y) = x - rint(x/y) y, with the
    # quotient piecewise constant. (x/y is rounded: within an ulp of a jump it may be off by one.)
    _c("fmod", _ONE, -call("trunc", x / y), note="d/dy = -trunc(x / y); jumps are ignored"),
    _c("remainder", _ONE, -call("rint", x / y), note="d/dy = -rint(x / y); jumps are ignored"),
    # fmin/fmax return the other operand when one is NaN (IEEE minNum/maxNum).
    _c("fmin", _PICKS_FIRST, _PICKS_SECOND, note=MIN_MAX_NOTE + "; fmin(x, NaN) = x gets d/dx"),
    _c("fmax", _PICKS_FIRST, _PICKS_SECOND, note=MIN_MAX_NOTE + "; fmax(x, NaN) = x gets d/dx"),
    # |x| has a kink at 0: the derivative from the side the zero's sign records (+1 at +0,
    # -1 at -0), a one-sided derivative as Enzyme gives, so that a derivative through |f|
    # where f crosses 0 is that of one branch (|-x*x|'' = 2 at 0 needs |'(-0) = -1).
    _c("fabs", call("copysign", 1.0, x),
       note="copysign(1, x): +1 at +0, -1 at -0 (the one-sided derivative); +-1 for NaN"),
    # copysign(x, y) = |x| sign(y): d/dx = sign(x) sign(y), as +-1 (so +-0 count by their sign
    # bit); the sign of y is piecewise constant, so y gets no derivative.
    _c("copysign", call("copysign", 1.0, x) * call("copysign", 1.0, y), None,
       note="d/dx = copysign(1, x) * copysign(1, y) (+-1 also at x = +-0); d/dy = 0"),
    _c("fma", y, x, _ONE),
    # ldexp(x, n) = x 2^n: d/dx = 2^n; n is an integer.
    _c("ldexp", call("exp2", to_float(y)), None),
    _c("scalbn", call("exp2", to_float(y)), None),
    _c("scalbln", call("exp2", to_float(y)), None),
    # frexp(x, int *e) = m with x = m 2^e: m = x 2^-e with e piecewise constant, so
    # dm/dx = 2^-e = m / x (exact: a power of two). At 0, e = 0 and this is 2^0 = 1.
    _c("frexp", _where_zero(x, _ONE, r / x), None,
       note="operand 1 is the int* the exponent is stored to; d/dx = 1 at x = 0 (2^-e, e = 0)"),
)

# Rounding to an integral value: constant between the jumps.
PIECEWISE_CONSTANT = ("piecewise constant: the derivative is 0 wherever it exists, and 0 is "
                      "chosen at the jumps")

ROWS = LIBM + (
    Inactive(spellings("floor", "ceil", "trunc", "round", "roundeven", "rint", "nearbyint"),
             "libm", reason=PIECEWISE_CONSTANT),
    Inactive(spellings("lrint", "llrint", "lround", "llround", "ilogb"), "libm",
             reason="integer result"),
    # pyzyme's own x ** n (mathlib.int_power), which a loop Numba inlined for x ** i is folded
    # into: d/dx = n x^(n-1); n is an integer.
    Partials((naming.INT_POWER, naming.INT_POWER + "f"), "libm", (
        _where_zero(to_float(y), _ZERO, to_float(y) * call("int_power", x, int_add(y, -1))),
        None,
    ), note="d/dx = 0 at n = 0 (also at x = 0); n is an integer"),
    # The signed zero that Python's x % y gives where the remainder m is zero, standing for m
    # there (mathlib.zero_remainder): its derivative is m's; the constant carries none.
    Partials((naming.ZERO_REMAINDER, naming.ZERO_REMAINDER + "f"), "libm", (_ONE, None),
             note="d/dm = 1: x % y is x - y floor(x / y), slope 1 in x on both sides of a "
                  "multiple of y"),
)
