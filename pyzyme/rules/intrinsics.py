"""Rows for LLVM intrinsics, by base name (``llvm.sin`` covers ``llvm.sin.f32``,
``llvm.sin.v4f64``).

An intrinsic that is a C math function under another spelling (``llvm.sin`` is ``sin``,
``llvm.minnum`` is ``fmin``) takes its row's partials from :mod:`pyzyme.rules.libm`, so the
two can never disagree. Operand orders are LangRef's (LLVM 22): ``llvm.atan2(y, x)`` as C,
``llvm.powi(x, i32 n)``, ``llvm.ldexp(x, i32 n)``, ``llvm.frexp(x) -> { x-type, i32 }``.

The floating vector reductions and masked memory of vectorized code
(``llvm.vector.reduce.fadd``, ``llvm.masked.load``, ...) have rows of their own kinds
(:class:`~pyzyme.rules.spec.Reduction`, :class:`~pyzyme.rules.spec.Masked`).

Not here yet: intrinsics with two floating results (``llvm.sincos``, ``llvm.sincospi``,
``llvm.modf``), expanding and compressing memory (``llvm.masked.expandload``,
``llvm.masked.compressstore``), vector-predicated operations (``llvm.vp.*``), and intrinsics
that return a pointer derived from an operand (``llvm.threadlocal.address``,
``llvm.ptrmask``, ``llvm.launder.invariant.group``, ``llvm.strip.invariant.group``), whose
shadow must be derived the same way: a call to any of them finds no row.
"""

from __future__ import annotations

from dataclasses import replace

from pyzyme.rules.expr import arg, call, cmp, const, int_add, ret, select, to_float
from pyzyme.rules.libm import LIBM, MIN_MAX_NOTE, PIECEWISE_CONSTANT
from pyzyme.rules.spec import Inactive, Masked, Memory, Partials, Reduction

__all__ = ["ROWS", "LANE_PICK_NOTE"]

x, n, r = arg(0), arg(1), ret()
_LIBM_ROWS = {row.names[0]: row for row in LIBM}


def _same_as(function: str, intrinsic: str | None = None) -> Partials:
    """``llvm.<intrinsic>`` with the partials and note of the C function ``function``."""
    return replace(_LIBM_ROWS[function], names=(f"llvm.{intrinsic or function}",),
                   kind="intrinsic")


def _intrinsics(*names: str) -> tuple[str, ...]:
    return tuple(f"llvm.{name}" for name in names)


_PICKS_FIRST = select(cmp("oeq", r, x), const(1.0), const(0.0))
_PICKS_SECOND = select(cmp("oeq", r, x), const(0.0), const(1.0))

MATH = tuple(_same_as(f) for f in (
    "sqrt", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
    "exp", "exp2", "exp10", "log", "log2", "log10", "pow", "fabs", "copysign", "fma", "ldexp",
)) + (
    _same_as("fma", "fmuladd"),  # fma or a*b+c, as the target likes: the same derivative
    _same_as("fmin", "minnum"),
    _same_as("fmax", "maxnum"),
    # powi(x, n) = x^n, n an i32: d/dx = n x^(n-1). n = 0 makes x^0 = 1 constant, 0 even at x = 0.
    Partials(("llvm.powi",), "intrinsic", (
        select(cmp("oeq", to_float(n), 0.0), const(0.0),
               to_float(n) * call("powi", x, int_add(n, -1))),
        None,
    ), note="d/dx = 0 at n = 0 (also at x = 0); n is an integer"),
    # IEEE 754-2019 minimum/maximum: NaN if either operand is NaN, -0 < +0.
    Partials(("llvm.minimum", "llvm.maximum"), "intrinsic", (_PICKS_FIRST, _PICKS_SECOND),
             note=MIN_MAX_NOTE + "; with a NaN operand the result is NaN and d/dy = 1 "
                                 "(the tangent is not forced to NaN)"),
    # minimumnum/maximumnum (IEEE 754-2019 minimumNumber): NaN operands are ignored, as fmin.
    Partials(("llvm.minimumnum", "llvm.maximumnum"), "intrinsic", (_PICKS_FIRST, _PICKS_SECOND),
             note=MIN_MAX_NOTE + "; minimumnum(x, NaN) = x gets d/dx"),
    # frexp(x) = { m, e } with x = m 2^e: the row is for field 0, m, and ret is m (see libm).
    Partials(("llvm.frexp",), "intrinsic",
             (select(cmp("oeq", x, 0.0), const(1.0), r / x),), result_field=0,
             note="the derivative of field 0 (the mantissa); d/dx = 1 at x = 0 (2^-e, e = 0)"),
    # Identities for values: canonicalize quiets signalling NaNs (and may flush denormals);
    # arithmetic.fence only blocks fast-math reassociation across it.
    Partials(_intrinsics("canonicalize", "arithmetic.fence"), "intrinsic", (const(1.0),)),
)

# Which lane of a max/min reduction gets the derivative: the scalar rows' choice, lane by lane.
LANE_PICK_NOTE = ("the derivative goes to the first lane equal to the result (ties, including "
                  "-0 == +0, to the first such lane); a NaN result (fmaximum/fminimum with a "
                  "NaN lane, fmax/fmin with every lane NaN) sends it to the first NaN lane")

VECTOR = (
    # reduce.fadd(start, v) = start + v[0] + v[1] + ...: linear in both.
    Reduction(("llvm.vector.reduce.fadd",), "intrinsic", op="fadd", vector=1, start=0),
    Reduction(("llvm.vector.reduce.fmul",), "intrinsic", op="fmul", vector=1, start=0,
              note="d/dv[i] is the product of start and the other lanes, computed without "
                   "dividing (exact where lanes are 0)"),
    *(Reduction((f"llvm.vector.reduce.{op}",), "intrinsic", op=op, note=LANE_PICK_NOTE)
      for op in ("fmax", "fmin", "fmaximum", "fminimum")),
    # LLVM 22 operand orders (the alignment is an attribute of the pointer operand).
    Masked(_intrinsics("masked.load", "masked.gather"), "intrinsic", pointer=0, mask=1,
           passthru=2),
    Masked(_intrinsics("masked.store", "masked.scatter"), "intrinsic", value=0, pointer=1,
           mask=2),
)

MEMORY = (
    # The same copy or fill is made on the shadows: shadow(dst) <- shadow(src), shadow(dst) <- 0.
    Memory(_intrinsics("memcpy", "memcpy.inline", "memmove"), "intrinsic", pointer_args=(0, 1)),
    Memory(_intrinsics("memset", "memset.inline"), "intrinsic", pointer_args=(0,)),
)

INACTIVE = (
    Inactive(_intrinsics("floor", "ceil", "trunc", "round", "roundeven", "rint", "nearbyint"),
             "intrinsic", reason=PIECEWISE_CONSTANT),
    Inactive(_intrinsics("lifetime.start", "lifetime.end", "assume", "dbg.value", "dbg.declare",
                         "dbg.assign", "dbg.label", "experimental.noalias.scope.decl",
                         "invariant.start", "invariant.end", "sideeffect", "donothing",
                         "pseudoprobe", "var.annotation", "codeview.annotation", "fake.use",
                         "experimental.convergence.entry", "experimental.convergence.anchor",
                         "experimental.convergence.loop"), "intrinsic",
             reason="a marker for the optimizer or debugger: computes no value and changes no "
                    "memory that derivatives must mirror"),
    Inactive(_intrinsics("stacksave", "stackrestore", "frameaddress", "returnaddress",
                         "sponentry", "prefetch", "readcyclecounter", "trap", "debugtrap",
                         "ubsantrap", "eh.typeid.for", "get.rounding", "allow.runtime.check",
                         "allow.ubsan.check", "objectsize", "is.constant"), "intrinsic",
             reason="machine state, addresses, traps or compile-time queries: no floating "
                    "data flows through it"),
    Inactive(_intrinsics("expect", "expect.with.probability", "smax", "smin", "umax", "umin",
                         "abs", "sadd.with.overflow", "uadd.with.overflow", "ssub.with.overflow",
                         "usub.with.overflow", "smul.with.overflow", "umul.with.overflow",
                         "sadd.sat", "uadd.sat", "ssub.sat", "usub.sat", "sshl.sat", "ushl.sat",
                         "ctpop", "ctlz", "cttz", "bswap", "bitreverse", "fshl", "fshr",
                         "scmp", "ucmp", "vector.reduce.add", "vector.reduce.mul",
                         "vector.reduce.and", "vector.reduce.or", "vector.reduce.xor",
                         "vector.reduce.smax", "vector.reduce.smin", "vector.reduce.umax",
                         "vector.reduce.umin", "experimental.cttz.elts"), "intrinsic",
             reason="integer arithmetic: integers carry no derivative"),
    Inactive(_intrinsics("is.fpclass", "lrint", "llrint", "lround", "llround", "fptosi.sat",
                         "fptoui.sat"), "intrinsic",
             reason="floating operand, integer result: piecewise constant, derivative 0"),
)

ROWS = MATH + VECTOR + MEMORY + INACTIVE
