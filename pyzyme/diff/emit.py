"""The only place rule expressions become IR.

An :class:`Emitter` writes an expression of :mod:`pyzyme.rules.expr` at a builder's insertion
point, in the floating type of the derivative (scalar or vector), with the fast-math flags the
primal instruction allows: its own, less ``nnan`` and ``ninf``, because a derivative may be
infinite or NaN where the primal is not (d/dx sqrt(x) at 0), and with those flags LLVM may treat
such a value as poison.

Strong zero (:mod:`pyzyme.rules.finite`) is applied here too: :func:`guarded` says which
products of a seed and a partial need it, :meth:`Emitter.unless_zero` writes the guard.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder, types as T
from pyzyme.ir.values import ConstantSplat, Undef, Value, const_float, const_int
from pyzyme.rules import expr as E
from pyzyme.rules.finite import may_be_nonfinite

__all__ = ["Emitter", "derivative_flags", "guarded", "type_suffix"]

_UNSAFE_FLAGS = {"nnan", "ninf"}
_FAST_EXPANDED = ("reassoc", "nsz", "arcp", "contract", "afn")


def derivative_flags(flags: Sequence[str]) -> tuple[str, ...]:
    """Flags of a primal instruction, as its derivative code may use them.

    >>> derivative_flags(("fast",))
    ('reassoc', 'nsz', 'arcp', 'contract', 'afn')
    >>> derivative_flags(("nnan", "contract"))
    ('contract',)
    """
    out: list[str] = []
    for flag in flags:
        if flag == "fast":
            out.extend(_FAST_EXPANDED)
        elif flag not in _UNSAFE_FLAGS:
            out.append(flag)  # other fast-math flags, and inbounds/nuw/... of addressing
    return tuple(dict.fromkeys(out))


def guarded(partial: E.Expr, operands: Sequence[Value], result: Value, nonfinite) -> bool:
    """Whether a product of a seed and ``partial`` must be kept zero where the seed is zero:
    the partial can be infinite or NaN, given which of ``operands`` and ``result`` can be
    (``nonfinite``, a :class:`pyzyme.analysis.finite.NonFinite`; None: strong zero is off)."""
    if nonfinite is None:
        return False

    def value(place):
        return result if place == "ret" else operands[place]

    return may_be_nonfinite(partial, lambda place: value(place) in nonfinite,
                            lambda place: nonfinite.nonzero(value(place), result.parent))


def type_suffix(ty: T.Type) -> str:
    """The overload suffix LLVM intrinsics use for ``ty``: ``f64``, ``v4f32``, ``i32``."""
    if ty.is_vector:
        return f"{'nx' if ty.scalable else ''}v{ty.count}{type_suffix(ty.element)}"
    if ty.is_int:
        return f"i{ty.width}"
    if ty.is_float:
        return {"half": "f16", "bfloat": "bf16", "float": "f32", "double": "f64",
                "x86_fp80": "f80", "fp128": "f128", "ppc_fp128": "ppcf128"}[ty.kind]
    raise UnsupportedError(f"no intrinsic overload for type {ty}")


def math_callees(function: str, ty: T.Type) -> set[str]:
    """The names a call of math function ``function`` (:data:`pyzyme.rules.expr.FUNCTIONS`)
    on values of type ``ty`` goes by: its LLVM intrinsic and the C library's."""
    symbol = E.FUNCTIONS[function].symbol
    names = {function, symbol}
    if symbol.startswith("llvm."):
        names.add(f"{symbol}.{type_suffix(ty)}")
    base = symbol.removeprefix("llvm.")
    if ty.scalar.kind in ("double", "float", "x86_fp80"):
        names.add(_libm_name(base, ty))
    return names


def _libm_name(symbol: str, ty: T.Type) -> str:
    kind = ty.scalar.kind
    if kind == "double":
        return symbol
    if kind == "float":
        return symbol + "f"
    if kind == "x86_fp80":
        return symbol + "l"
    raise UnsupportedError(f"no C math function {symbol} for {ty}")


class Emitter:
    """Writes rule expressions at ``builder`` for values of floating type ``ty``."""

    def __init__(self, builder: IRBuilder, module, ty: T.Type, flags: Sequence[str] = (),
                 computed=None) -> None:
        self.b = builder
        self.module = module
        self.ty = ty
        self.flags = derivative_flags(flags)
        # ``computed(function, indices)``: the value of math function ``function`` of the
        # arguments at ``indices`` where the primal computed it already, else None.
        self.computed = computed

    def constant(self, value: float) -> Value:
        if self.ty.is_vector:
            return ConstantSplat(self.ty, const_float(self.ty.element, value))
        return const_float(self.ty, value)

    def expr(self, e: E.Expr, args: Sequence[Value], result: Value | None,
             name: str = "") -> Value:
        """The value of ``e`` with ``arg(i) = args[i]`` and ``ret() = result``."""
        if isinstance(e, E.Arg):
            return args[e.index]
        if isinstance(e, E.Ret):
            if result is None:
                raise UnsupportedError("a rule reads the primal result, which is not available")
            return result
        if isinstance(e, E.Const):
            return self.constant(e.value)
        return self._op(e, args, result, name)

    def _op(self, e: E.Op, args, result, name: str) -> Value:
        b, opname = self.b, e.name
        if opname == "select":
            cond, t, f = e.operands
            a, c = (self.expr(o, args, result) for o in cond.operands)
            test = b.fcmp(cond.name[5:], a, c)
            return b.select(test, self.expr(t, args, result), self.expr(f, args, result),
                            name=name)
        if opname == "iadd":
            v = self.expr(e.operands[0], args, result)
            return b.add(v, const_int(v.type, int(e.operands[1].value)), name=name)
        if opname == "sitofp":
            n = self.expr(e.operands[0], args, result)
            if self.ty.is_vector and not n.type.is_vector:  # powi(<4 x double>, i32 n)
                return b.splat(b.sitofp(n, self.ty.element), self.ty.count, name=name)
            return b.sitofp(n, self.ty, name=name)
        if self.computed is not None and opname in E.FUNCTIONS and e.operands \
                and all(isinstance(o, E.Arg) for o in e.operands):
            known = self.computed(opname, [o.index for o in e.operands])
            if known is not None:
                return known
        vals = [self.expr(o, args, result) for o in e.operands]
        if opname == "fneg":
            return b.fneg(vals[0], self.flags, name=name)
        if opname in ("fadd", "fsub", "fmul", "fdiv"):
            return b.binop(opname, vals[0], vals[1], self.flags, name=name)
        return self.call(opname, vals, name)

    def unless_zero(self, seed: Value, value: Value, otherwise: Value | None = None,
                    name: str = "", partial: Value | None = None) -> Value:
        """``value``, or ``otherwise`` (default 0) where ``seed`` is zero and ``value`` is
        NaN: a zero seed contributes nothing even through a partial that is infinite (strong
        zero).

        Where the partial is finite, ``value`` (the product with the seed) is already what the
        guard would give, and it is kept: a derivative of this code (an hvp, a nested
        ``__enzyme_*`` call) then differentiates the product, ``seed' * partial`` included,
        which a choice made on the seed alone drops wherever the seed is 0 (H v came out 0
        for (x0 x1 / x2) x3 at x3 = 0). The derivative's flags have no ``nnan``, so the test
        for NaN stays.

        Given the ``partial`` that multiplies ``seed`` in ``value``, the test asks whether
        the partial is infinite or NaN (what ``0 * partial`` is NaN for) instead of testing
        the product: the same answer, but off the chain of dependent operations an adjoint
        runs through (multiply, then select, instead of multiply, compare, and, select),
        which is what bounds a reverse loop whose iterations are long."""
        b, zero = self.b, self.constant(0.0)
        if partial is None:
            bad = b.fcmp("uno", value, value)
        else:
            bad = b.fcmp("ueq", self.call("fabs", [partial]), self.constant(math.inf))
        blocked = b.and_(b.fcmp("oeq", seed, zero), bad)
        return b.select(blocked, zero if otherwise is None else otherwise, value, name=name)

    def fmuladd(self, a: Value, b: Value, c: Value, name: str = "") -> Value:
        """``a * b + c``, fused where the target has FMA (``llvm.fmuladd``)."""
        callee = self.module.declare(f"llvm.fmuladd.{type_suffix(self.ty)}",
                                     T.FunctionType(self.ty, [self.ty] * 3))
        return self.b.call(callee, [a, b, c], flags=self.flags, name=name)

    def call(self, function: str, vals: Sequence[Value], name: str = "") -> Value:
        """Call math function ``function`` of :data:`pyzyme.rules.expr.FUNCTIONS`."""
        symbol = E.FUNCTIONS[function].symbol
        ty = self.ty
        if symbol.startswith("llvm."):
            ints = "".join("." + type_suffix(v.type) for v in vals if v.type.scalar.is_int)
            callee_name = f"{symbol}.{type_suffix(ty)}{ints}"
        elif symbol.startswith("pyzyme."):
            from pyzyme.rules import mathlib
            callee = mathlib.define(self.module, _libm_name(symbol, ty.scalar))
            if ty.is_vector:  # pyzyme's own functions are scalar: one call per lane
                out: Value = Undef(ty)
                for lane in range(ty.count):
                    at = const_int(T.i32, lane)
                    lanes = [self.b.extractelement(v, at) for v in vals]
                    out = self.b.insertelement(out, self.b.call(callee, lanes, flags=self.flags),
                                               at, name=name if lane == ty.count - 1 else "")
                return out
            return self.b.call(callee, list(vals), flags=self.flags, name=name)
        else:
            callee_name = _libm_name(symbol, ty)
        callee = self.module.declare(callee_name, T.FunctionType(ty, [v.type for v in vals]))
        return self.b.call(callee, list(vals), flags=self.flags, name=name)
