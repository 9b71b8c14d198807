"""Forward-mode derivatives of a C program's CBLAS calls, made by calling the same routine again.

Enzyme knows BLAS routines by name: a call of ``cblas_ddot`` is differentiated as the dot
product whatever body the program gives it (Enzyme's own tests give it one that only records
the call). The C frontend gives pyzyme's forward mode the same rows
(:mod:`pyzyme.frontends.c.cblas_rows`) for these routines, with CBLAS's arguments by value:

- ``cblas_?dot(n, x, incx, y, incy)``: ``x . y``;
- ``cblas_?gemv(layout, trans, m, n, alpha, A, lda, x, incx, beta, y, incy)``:
  ``y = alpha op(A) x + beta y``;
- ``cblas_?gemm(layout, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)``:
  ``C = alpha op(A) op(B) + beta C``.

Each is bilinear in its two operands, so its tangent is the routine on (tangent, primal) and
(primal, tangent), the second operand's term first for GEMV and GEMM (Enzyme's order): the
first term scales the output's tangent by ``beta``, the others add (``beta = 1``). The tangent
calls come before the call itself, which may overwrite the output they read. A varying
``alpha`` adds a term; a varying ``beta`` is refused (its term needs the output as it was,
through a routine that is not BLAS). Reverse mode has no such rows: the routine's body is
differentiated, as any function's.
"""

from __future__ import annotations

from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir.values import const_float

__all__ = ["forward_mode", "augmented", "reverse", "OPERANDS"]

#: Per op: the (first, second) operand, the output (None: the result), alpha and beta.
OPERANDS = {
    "cblas_dot": ((1, 3), None, None, None),
    "cblas_gemv": ((5, 7), 10, 4, 9),
    "cblas_gemm": ((7, 9), 12, 6, 11),
}


def _name(inst: I.CallBase) -> str:
    return inst.called_function.name


def forward_mode(cx, inst: I.Call, row) -> None:
    """The tangent calls, then the call."""
    (ia, ib), io, ialpha, ibeta = OPERANDS[row.op]
    args = [cx.value(a) for a in inst.args]

    def tangent(index, lane):
        v = inst.args[index]
        return cx.derivs[v][lane] if v in cx.derivs else None

    if io is None:
        _forward_dot(cx, inst, args, ia, ib, tangent)
        return
    varied = [i for i in (ia, ib, ialpha) if inst.args[i] in cx.derivs]
    if inst.args[io] not in cx.derivs:
        if varied:
            raise UnsupportedError(
                f"{cx.where}: {_name(inst)} writes its result through an argument without a "
                f"shadow while argument {varied[0]} carries a derivative: {inst}",
                hint="pass the output matrix or vector as enzyme_dup")
        cx.clone(inst)
        return
    if inst.args[ibeta] in cx.derivs:
        raise UnsupportedError(
            f"{cx.where}: the beta of {_name(inst)} carries a derivative; pyzyme's forward "
            f"rule for it takes beta as a constant: {inst}",
            hint="pass beta as enzyme_const, or scale the output outside the call")
    ty = inst.args[ialpha].type
    b = cx.builder
    for lane in range(cx.width):
        terms = [(i, tangent(i, lane)) for i in (ib, ia, ialpha)]
        terms = [(i, d) for i, d in terms if d is not None]
        if not terms:  # the output's tangent is only scaled: alpha = 0
            terms = [(ialpha, const_float(ty, 0.0))]
        for n, (index, d) in enumerate(terms):
            call_args = list(args)
            call_args[index] = d
            call_args[io] = cx.derivs[inst.args[io]][lane]
            if n:
                call_args[ibeta] = const_float(ty, 1.0)
            b.call(inst.called_function, call_args)
    cx.clone(inst)


def _forward_dot(cx, inst, args, ia, ib, tangent) -> None:
    b = cx.builder
    fn = inst.called_function
    tangents = []
    for lane in range(cx.width):
        total = None
        for index in (ia, ib):
            d = tangent(index, lane)
            if d is None:
                continue
            call_args = list(args)
            call_args[index] = d
            value = b.call(fn, call_args)
            total = value if total is None else b.fadd(total, value)
        tangents.append(total if total is not None else const_float(inst.type, 0.0))
    cx.clone(inst)
    if inst in cx.activity.varied:
        cx.derivs[inst] = tangents


def augmented(cx, inst: I.Call, row) -> None:
    """Never reached: the C frontend gives reverse mode no CBLAS rows."""
    raise UnsupportedError(f"{cx.where}: no reverse-mode rule for {_name(inst)} (a CBLAS "
                           f"row reached reverse mode): {inst}")


reverse = augmented
