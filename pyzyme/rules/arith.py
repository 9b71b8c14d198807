"""Rows for LLVM's arithmetic, cast and comparison instructions, by opcode.

Floating arithmetic has partials; value-preserving floating casts are linear; integer, pointer
and comparison instructions are inactive by rule. Instructions that only move values around
(``select``, ``phi``, ``freeze``, ``extractvalue``, ``insertelement``, ``getelementptr``,
``load``, ``store``, ...) are structural: the transform handles them, and they have no row.
"""

from __future__ import annotations

from pyzyme.rules.expr import arg, call, const, ret
from pyzyme.rules.spec import Inactive, Linear, Partials

__all__ = ["ROWS"]

x, y, r = arg(0), arg(1), ret()

ARITHMETIC = (
    Partials(("fadd",), "opcode", (const(1.0), const(1.0))),
    Partials(("fsub",), "opcode", (const(1.0), const(-1.0))),
    Partials(("fmul",), "opcode", (y, x)),
    # d(x/y)/dy = -x/y^2 = -(x/y)/y: the quotient is already computed.
    Partials(("fdiv",), "opcode", (1.0 / y, -r / y)),
    # frem is C's fmod: x - trunc(x/y) y, the quotient piecewise constant.
    Partials(("frem",), "opcode", (const(1.0), -call("trunc", x / y)),
             note="d/dy = -trunc(x / y); jumps are ignored"),
    Partials(("fneg",), "opcode", (const(-1.0),)),
)

CASTS = (
    # Linear maps between floating types; the adjoint of a widening is the narrowing back.
    Linear(("fpext",), "opcode", transpose="fptrunc"),
    Linear(("fptrunc",), "opcode", transpose="fpext"),
    # The same bits under another type: the tangent is the same bitcast of the operand's tangent
    # when both types hold the same floats (double <-> i64 holding a double, <2 x double> <->
    # i128). Type analysis decides what the bits are; a cast that reinterprets floats as other
    # floats (<4 x float> -> <2 x double>) is not linear and must be rejected before this row.
    Linear(("bitcast",), "opcode", transpose="bitcast"),
    # A pointer into another address space: its shadow is the same cast of the shadow pointer.
    Linear(("addrspacecast",), "opcode", transpose="addrspacecast"),
)

INACTIVE = (
    Inactive(("sitofp", "uitofp"), "opcode",
             reason="integer operand: a float made from an integer carries no derivative"),
    Inactive(("fptosi", "fptoui"), "opcode",
             reason="integer result: piecewise constant in the operand, derivative 0"),
    Inactive(("add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr",
              "and", "or", "xor", "trunc", "zext", "sext"), "opcode",
             reason="integer arithmetic: integers carry no derivative"),
    Inactive(("icmp", "fcmp"), "opcode", reason="comparison: its i1 result carries no derivative"),
    Inactive(("ptrtoint", "ptrtoaddr", "inttoptr"), "opcode",
             reason="pointer to or from an integer: the integer carries no derivative, and a "
                    "pointer made from one has no shadow (a transform that needs one must "
                    "reject it, not assume zero), unless the integer is an address moved by "
                    "arithmetic, whose shadow the generators compute from its source's "
                    "(pyzyme.analysis.int_address)"),
)

ROWS = ARITHMETIC + CASTS + INACTIVE
