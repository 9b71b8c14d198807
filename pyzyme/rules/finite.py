"""Which operations keep finite values finite, and which partials can be infinite or NaN.

Strong zero (:class:`pyzyme.settings.Options`) makes a zero adjoint or tangent contribute
nothing even through an infinite partial: ``0 * (0.5 / sqrt(0))`` is NaN by IEEE rules, but
the derivative of a branch that was skipped must not poison the rest. The guard costs a compare
and a select, so derivative code pays it only where the partial can be non-finite. That needs
two facts, both stated here once:

- :data:`TOTAL`: the operations whose result is finite whenever their operands are (overflow
  aside: ``exp(1000)`` is inf, but then so is the primal, on every path). Division has a pole,
  ``sqrt`` and ``log`` leave their domain (NaN, -inf), ``pow`` has both; none of them is here.
- :func:`may_be_nonfinite`: whether a rule's partial, an expression of the operands and the
  result, can be infinite or NaN, given which of those can be.

:mod:`pyzyme.analysis.finite` propagates the first fact through a function's values.

Examples
--------
>>> from pyzyme.rules.expr import arg, call, const, ret
>>> total("llvm.sin.f64"), total("sinf"), total("fdiv"), total("llvm.sqrt.f64")
(True, True, False, False)
>>> finite_operands = lambda place: False
>>> may_be_nonfinite(call("cos", arg(0)), finite_operands)   # sin' = cos: finite
False
>>> may_be_nonfinite(0.5 / ret(), finite_operands)           # sqrt' = 0.5 / sqrt(x): a pole
True
>>> may_be_nonfinite(arg(1) / const(2.0), finite_operands)
False
>>> may_be_nonfinite(arg(1), lambda place: place == 1)     # fmul's partial when y is 1/0
True
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pyzyme import naming
from pyzyme.rules import expr as E
from pyzyme.rules.table import intrinsic_base

__all__ = ["TOTAL", "total", "may_be_nonfinite"]

#: Operations (opcodes, C math functions by their double spelling, the functions rule
#: expressions call) whose result is finite wherever their operands are, overflow aside.
TOTAL = frozenset({
    "fadd", "fsub", "fmul", "fneg", "fma", "fmuladd", "fpext", "fptrunc",
    "sin", "cos", "tan", "atan", "atan2", "sinh", "cosh", "tanh", "asinh",
    "exp", "exp2", "exp10", "expm1", "erf", "erfc", "cbrt", "hypot",
    "fabs", "copysign", "floor", "ceil", "trunc", "rint", "round", "nearbyint", "canonicalize",
    "fmin", "fmax", "maxnum", "minnum", "maximum", "minimum", "maximumnum", "minimumnum",
    "ldexp", "scalbn", "scalbln", "frexp", "numba_frexp", "numba_ldexp",
    "int_power", naming.INT_POWER,
})

# Rule-expression operators that are total in their operands (select: in its two arms).
_ARITHMETIC = frozenset({"fadd", "fsub", "fmul", "fneg", "iadd", "sitofp"})


def total(name: str) -> bool:
    """Whether operation ``name`` (an opcode, an intrinsic with or without its overload
    suffix, or a C symbol in any of its spellings) keeps finite operands finite."""
    if name.startswith("llvm."):
        name = intrinsic_base(name)[len("llvm."):]
    if name in TOTAL:
        return True
    # sinf, sinl: the float and long double spellings of a total double function.
    return name[-1:] in ("f", "l") and name[:-1] in TOTAL


def may_be_nonfinite(e: E.Expr, nonfinite: Callable[[int | str], bool],
                     nonzero: Callable[[int | str], bool] = lambda place: False) -> bool:
    """Whether rule expression ``e`` can be infinite or NaN.

    Parameters
    ----------
    e
        A partial of a rule row (:mod:`pyzyme.rules.expr`).
    nonfinite
        Whether a placeholder can be non-finite: called with an operand's index for
        ``arg(i)`` and with ``"ret"`` for the result.
    nonzero
        Whether a placeholder is known to be nonzero where the partial is used (a division
        by it has no pole there); by default none is.

    Examples
    --------
    >>> from pyzyme.rules.expr import arg, ret
    >>> may_be_nonfinite(-ret() / arg(1), lambda place: False)   # fdiv's partial in y
    True
    >>> may_be_nonfinite(-ret() / arg(1), lambda place: False, lambda place: place == 1)
    False
    """
    if isinstance(e, E.Const):
        return not math.isfinite(e.value)
    if isinstance(e, E.Arg):
        return nonfinite(e.index)
    if isinstance(e, E.Ret):
        return nonfinite("ret")
    name, operands = e.name, e.operands
    if name == "select":
        return any(may_be_nonfinite(o, nonfinite, nonzero) for o in operands[1:])
    if name == "fdiv":
        if not _pole_free(operands[1], nonzero):
            return True
    elif name not in _ARITHMETIC and not total(name):
        return True
    return any(may_be_nonfinite(o, nonfinite, nonzero) for o in operands)


def _pole_free(divisor: E.Expr, nonzero: Callable[[int | str], bool]) -> bool:
    """Whether ``divisor`` is never zero: a nonzero constant, or a placeholder known nonzero
    (its finiteness is asked of the operands, as for any other placeholder)."""
    if isinstance(divisor, E.Const):
        return divisor.value != 0.0 and math.isfinite(divisor.value)
    if isinstance(divisor, E.Arg):
        return nonzero(divisor.index)
    if isinstance(divisor, E.Ret):
        return nonzero("ret")
    return False
