"""The expression language derivative rules are written in.

A rule's partial derivatives are small expressions over placeholders: the operands of the
instruction or call (``x``, ``y``, ``z`` by position), its primal result (``ret``), and constants.
Python operators build the expression tree, so a row reads like the math:

>>> x, y = arg(0), arg(1)
>>> d = -y / (x * x + y * y)
>>> print(d)
(-y / ((x * x) + (y * y)))
>>> evaluate(d, (1.0, 2.0), None)
-0.4

Expressions are data: :func:`evaluate` runs them on Python floats (the rule table is checked
against finite differences that way, with no LLVM involved), and ``pyzyme.diff`` turns them into
IR. Nothing here knows about modes, widths, activity or fast-math flags.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyzyme import naming
from pyzyme.rules import mathlib

__all__ = [
    "Expr", "Arg", "Ret", "Const", "Op", "MathFunction", "arg", "ret", "const", "call",
    "select", "cmp", "to_float", "int_add", "evaluate", "FUNCTIONS",
]

_NAMES = "xyzwabcd"


class Expr:
    """A node of a rule expression. Build with operators and the helpers below."""

    __slots__ = ()

    def __add__(self, other) -> Op:
        return Op("fadd", (self, _lift(other)))

    def __radd__(self, other) -> Op:
        return Op("fadd", (_lift(other), self))

    def __sub__(self, other) -> Op:
        return Op("fsub", (self, _lift(other)))

    def __rsub__(self, other) -> Op:
        return Op("fsub", (_lift(other), self))

    def __mul__(self, other) -> Op:
        return Op("fmul", (self, _lift(other)))

    def __rmul__(self, other) -> Op:
        return Op("fmul", (_lift(other), self))

    def __truediv__(self, other) -> Op:
        return Op("fdiv", (self, _lift(other)))

    def __rtruediv__(self, other) -> Op:
        return Op("fdiv", (_lift(other), self))

    def __neg__(self) -> Op:
        return Op("fneg", (self,))

    def placeholders(self) -> set[int | str]:
        """Argument positions (ints) and ``"ret"`` this expression reads."""
        out: set[int | str] = set()
        _collect(self, out)
        return out


@dataclass(frozen=True, slots=True)
class Arg(Expr):
    """The primal value of operand ``index``."""

    index: int

    def __str__(self) -> str:
        return _NAMES[self.index] if self.index < len(_NAMES) else f"arg{self.index}"


@dataclass(frozen=True, slots=True)
class Ret(Expr):
    """The primal result of the instruction or call."""

    def __str__(self) -> str:
        return "ret"


@dataclass(frozen=True, slots=True)
class Const(Expr):
    """A floating constant, of the operands' type when emitted."""

    value: float

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True)
class Op(Expr):
    """An operation: an IR opcode (``fadd``), a math function (``sqrt``), ``select`` or a
    comparison (``fcmp.olt``)."""

    name: str
    operands: tuple[Expr, ...]

    def __str__(self) -> str:
        if self.name in _INFIX:
            a, b = self.operands
            return f"({a} {_INFIX[self.name]} {b})"
        if self.name == "fneg":
            return f"-{self.operands[0]}"
        return f"{self.name}({', '.join(map(str, self.operands))})"


_INFIX = {"fadd": "+", "fsub": "-", "fmul": "*", "fdiv": "/"}


def arg(index: int) -> Arg:
    return Arg(index)


def ret() -> Ret:
    return Ret()


def const(value: float) -> Const:
    return Const(float(value))


def _lift(value) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, (int, float)):
        return Const(float(value))
    raise TypeError(f"cannot use {value!r} in a rule expression")


def call(name: str, *operands) -> Op:
    """A math function of :data:`FUNCTIONS` applied to ``operands``."""
    if name not in FUNCTIONS:
        raise ValueError(f"unknown function {name!r} in a rule expression")
    return Op(name, tuple(_lift(o) for o in operands))


def to_float(e: Expr) -> Op:
    """An integer operand converted to the row's floating type (``sitofp``)."""
    return Op("sitofp", (e,))


def int_add(e: Expr, k: int) -> Op:
    """An integer operand plus the integer constant ``k`` (``powi``'s ``n - 1``)."""
    return Op("iadd", (e, Const(float(k))))


def cmp(predicate: str, a, b) -> Op:
    """A floating comparison with an LLVM ``fcmp`` predicate (``olt``, ``oeq``, ...)."""
    if predicate not in _CMP:
        raise ValueError(f"unknown comparison {predicate!r}")
    return Op(f"fcmp.{predicate}", (_lift(a), _lift(b)))


def select(condition: Op, if_true, if_false) -> Op:
    """``if_true`` where ``condition`` (a :func:`cmp`) holds, else ``if_false``."""
    return Op("select", (condition, _lift(if_true), _lift(if_false)))


def _collect(e: Expr, out: set) -> None:
    if isinstance(e, Arg):
        out.add(e.index)
    elif isinstance(e, Ret):
        out.add("ret")
    elif isinstance(e, Op):
        for o in e.operands:
            _collect(o, out)


def _ordered(a: float, b: float) -> bool:
    return not (math.isnan(a) or math.isnan(b))


_CMP: dict[str, Callable[[float, float], bool]] = {
    "oeq": lambda a, b: a == b,
    "one": lambda a, b: _ordered(a, b) and a != b,
    "olt": lambda a, b: a < b,
    "ole": lambda a, b: a <= b,
    "ogt": lambda a, b: a > b,
    "oge": lambda a, b: a >= b,
    "ult": lambda a, b: not a >= b,
    "ugt": lambda a, b: not a <= b,
}


def _safe(fn: Callable[..., float],
          overflow: Callable[..., float] = lambda *args: math.inf) -> Callable[..., float]:
    """IEEE semantics for Python's math functions: inf/nan instead of exceptions. ``overflow``
    gives the result where Python raises OverflowError (``+inf`` unless told otherwise)."""

    def wrapped(*args: float) -> float:
        try:
            return fn(*args)
        except ZeroDivisionError:
            return math.copysign(math.inf, args[0]) if args[0] else math.nan
        except ValueError:
            return math.nan
        except OverflowError:
            return overflow(*args)

    return wrapped


def _rounding(fn: Callable[[float], int]) -> Callable[[float], float]:
    """C's rounding functions: a float with the sign of ``v`` (``trunc(-0.5) = -0.0``);
    infinities and NaN unchanged."""
    return lambda v: math.copysign(float(fn(v)), v) if math.isfinite(v) else v


def _log(v: float) -> float:
    """C's ``log``: ``-inf`` at zero, NaN below."""
    if v == 0.0:
        return -math.inf
    return math.log(v) if v > 0.0 or math.isnan(v) else math.nan


def _div(a: float, b: float) -> float:
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


@dataclass(frozen=True)
class MathFunction:
    """A function rule expressions may call: how to evaluate it on floats, and what the IR
    emitter calls. ``symbol`` is an LLVM intrinsic base name (``llvm.sqrt``: the emitter adds
    the type suffix), a C math symbol (``erf``: ``erff`` for float) or a function pyzyme itself
    defines in IR (``pyzyme.digamma``)."""

    evaluate: Callable[..., float]
    symbol: str


# The closed set of functions rule expressions may call: every rule stays both evaluable (for the
# finite-difference test of the table) and emittable (for derivative code).
FUNCTIONS: dict[str, MathFunction] = {
    "sqrt": MathFunction(_safe(math.sqrt), "llvm.sqrt"),
    "exp": MathFunction(_safe(math.exp), "llvm.exp"),
    "exp2": MathFunction(_safe(lambda v: 2.0 ** v), "llvm.exp2"),
    "log": MathFunction(_log, "llvm.log"),
    "sin": MathFunction(_safe(math.sin), "llvm.sin"),
    "cos": MathFunction(_safe(math.cos), "llvm.cos"),
    "tan": MathFunction(_safe(math.tan), "llvm.tan"),
    "sinh": MathFunction(_safe(math.sinh, lambda v: math.copysign(math.inf, v)), "llvm.sinh"),
    "cosh": MathFunction(_safe(math.cosh), "llvm.cosh"),
    "tanh": MathFunction(math.tanh, "llvm.tanh"),
    "fabs": MathFunction(math.fabs, "llvm.fabs"),
    "pow": MathFunction(mathlib.c_pow, "llvm.pow"),
    # powi(x, n): n is an integer operand (``int_add(n, -1)`` in powi's own rule).
    "powi": MathFunction(lambda x, n: mathlib.c_pow(x, float(n)), "llvm.powi"),
    "copysign": MathFunction(math.copysign, "llvm.copysign"),
    "floor": MathFunction(_rounding(math.floor), "llvm.floor"),
    "trunc": MathFunction(_rounding(math.trunc), "llvm.trunc"),
    "rint": MathFunction(_rounding(round), "llvm.rint"),  # round(): ties to even, as rint
    "erf": MathFunction(math.erf, "erf"),
    # Not in libm: pyzyme defines it in IR (pyzyme.rules.mathlib); lgamma' and tgamma' need it.
    "digamma": MathFunction(mathlib.digamma, naming.DIGAMMA),
    # pow's derivative in x from its result (pow_less1(x, y, pow(x, y)) = pow(x, y - 1)).
    "pow_less1": MathFunction(mathlib.pow_less1, naming.POW_LESS1),
    # x ** n by Numba's binary exponentiation, n an i64 >= 0 (mathlib.int_power).
    "int_power": MathFunction(mathlib.int_power, naming.INT_POWER),
}


def evaluate(e: Expr, args: Sequence[float], result: float | None) -> float:
    """The value of ``e`` with ``arg(i) = args[i]`` and ``ret() = result``, in float arithmetic."""
    if isinstance(e, Arg):
        return float(args[e.index])
    if isinstance(e, Ret):
        if result is None:
            raise ValueError("this expression reads ret(), but no result was given")
        return float(result)
    if isinstance(e, Const):
        return e.value
    assert isinstance(e, Op)
    name = e.name
    if name == "select":
        cond, a, b = e.operands
        return evaluate(a if _truth(cond, args, result) else b, args, result)
    vals = [evaluate(o, args, result) for o in e.operands]
    if name == "fadd":
        return vals[0] + vals[1]
    if name == "fsub":
        return vals[0] - vals[1]
    if name == "fmul":
        return vals[0] * vals[1]
    if name == "fdiv":
        return _div(vals[0], vals[1])
    if name == "fneg":
        return -vals[0]
    if name == "sitofp":
        return float(vals[0])
    if name == "iadd":
        return vals[0] + vals[1]
    return FUNCTIONS[name].evaluate(*vals)


def _truth(cond: Expr, args: Sequence[float], result: float | None) -> bool:
    if not (isinstance(cond, Op) and cond.name.startswith("fcmp.")):
        raise ValueError(f"select needs a comparison, got {cond}")
    a, b = (evaluate(o, args, result) for o in cond.operands)
    return _CMP[cond.name[5:]](a, b)
