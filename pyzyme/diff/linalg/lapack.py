"""Derivatives of ``np.linalg.solve``: Numba's ``numba_xgesv`` helper, by LAPACK and BLAS again.

``numba_xgesv(kind, n, nrhs, A, lda, ipiv, B, ldb)`` solves ``A X = B`` in place (column-major):
``B`` becomes ``X`` and ``A`` its LU factors, which Numba's ``solve`` discards (so they carry
no derivative here). With ``X = A^-1 B``:

- forward: ``dX = A^-1 (dB - dA X)``: one GEMM into the tangent of ``B``, then a solve with a
  copy of ``A`` taken before the call (the helpers offer no solve from LU factors);
- reverse: ``Y = A^-T Xbar`` (a solve with the transposed copy), then ``Bbar = Y`` and
  ``Abar = -Y X^T`` (a GEMM).

Real kinds only, as for BLAS (:mod:`pyzyme.diff.linalg.blas`).
"""

from __future__ import annotations

from pyzyme.diff.linalg.callsite import (
    Scalars,
    allocate,
    copy_of,
    blas_element_type,
    blas_function,
    extent,
    free_later,
)
from pyzyme.diff.memory_calls import free
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int

__all__ = ["forward_mode", "augmented", "reverse"]

_GESV = ("numba_xgesv", [T.i8, T.i64, T.i64, T.ptr, T.i64, T.ptr, T.ptr, T.i64])


def _gesv(cx):
    name, params = _GESV
    return cx.module.declare(name, T.FunctionType(T.i32, params))


def _bytes(b: IRBuilder, count, ty: T.Type):
    return b.mul(count, const_int(T.i64, 8 if ty == T.double else 4))


def _copy(cx, b: IRBuilder, src, count, ty: T.Type):
    size = _bytes(b, count, ty)
    dest = copy_of(cx.module, b, src, size)
    return dest


def _solve(cx, b: IRBuilder, kind, n, nrhs, a, lda, rhs, ldb) -> None:
    """``rhs = a^-1 rhs``; ``a`` is destroyed."""
    ipiv = allocate(cx.module, b, b.mul(n, const_int(T.i64, 4)))
    b.call(_gesv(cx), [kind, n, nrhs, a, lda, ipiv, rhs, ldb])
    free(cx.module, b, ipiv)


# -- forward mode --------------------------------------------------------------------------------
def forward_mode(cx, inst: I.Call, row) -> None:
    """The call, then the tangent of the solution: ``dX = A^-1 (dB - dA X)``, per lane."""
    ty = blas_element_type(inst, cx.where)
    b = cx.builder
    kind, n, nrhs = (cx.value(v) for v in inst.args[:3])
    lda, ldb = cx.value(inst.args[4]), cx.value(inst.args[7])
    a_in, b_in = inst.args[3], inst.args[6]
    varied = b_in in cx.derivs
    a_count = extent(b, lda, n, n)
    saved = _copy(cx, b, cx.value(a_in), a_count, ty) if varied else None
    new = cx.clone(inst)
    if not varied:
        return
    x = new.args[6]
    scalars = Scalars(b, ty)
    gemm = blas_function(cx.module, "gemm")
    for lane in range(cx.width):
        rhs = cx.derivs[b_in][lane]
        if a_in in cx.derivs:  # rhs = dB - dA X
            minus, one = scalars.constant(-1.0), scalars.constant(1.0)
            b.call(gemm, [kind, const_int(T.i8, ord("n")), const_int(T.i8, ord("n")), n, nrhs,
                          n, minus, cx.derivs[a_in][lane], lda, x, ldb, one, rhs, ldb])
        work = _copy(cx, b, saved, a_count, ty)
        _solve(cx, b, kind, n, nrhs, work, lda, rhs, ldb)
        free(cx.module, b, work)
    free(cx.module, b, saved)


# -- reverse mode ------------------------------------------------------------------------------
def augmented(cx, inst: I.Call, row) -> None:
    """Forward sweep: a copy of ``A`` before the call, and of ``X`` after it unless nothing
    writes it before the reverse sweep."""
    ty = blas_element_type(inst, cx.where)
    b = cx.fb
    a_in, b_in = inst.args[3], inst.args[6]
    if b_in not in cx.shadows:
        cx.clone(inst)
        return
    n, lda, ldb, nrhs = (cx.fwd_value(inst.args[i]) for i in (1, 4, 7, 2))
    saved_a = _copy(cx, b, cx.fwd_value(a_in), extent(b, lda, n, n), ty)
    free_later(cx, saved_a)
    new = cx.clone(inst)
    saved_x = None
    if cx.overwrites.written_after(inst, b_in) is not None or not cx.stable(b_in):
        saved_x = _copy(cx, b, new.args[6], extent(b, ldb, nrhs, n), ty)
        free_later(cx, saved_x)
    cx.rule_calls[inst] = ("lapack", saved_a, saved_x)


def reverse(cx, inst: I.Call, row) -> None:
    """Reverse sweep: ``Bbar = A^-T Xbar``, ``Abar = -Bbar X^T``."""
    _, saved_a, saved_x = cx.rule_calls[inst]
    ty = blas_element_type(inst, cx.where)
    b = cx.rb
    kind, n, nrhs, lda, ldb = (cx.primal(inst.args[i]) for i in (0, 1, 2, 4, 7))
    a_in, b_in = inst.args[3], inst.args[6]
    x = cx.avail(saved_x) if saved_x is not None else cx.primal(b_in)
    xbar = cx.shadow(b_in)
    # A^T, column-major with leading dimension n, from the copy of A taken before the call.
    a_t = _transposed(cx, b, cx.avail(saved_a), n, lda, ty)
    _solve(cx, b, kind, n, nrhs, a_t, n, xbar, ldb)   # xbar := A^-T xbar = Bbar
    free(cx.module, b, a_t)
    if a_in in cx.shadows:
        # Abar = -Bbar X^T, replacing the adjoint of the LU factors (they carry none).
        scalars = Scalars(b, ty)
        gemm = blas_function(cx.module, "gemm")
        b.call(gemm, [kind, const_int(T.i8, ord("n")), const_int(T.i8, ord("t")), n, n, nrhs,
                      scalars.constant(-1.0), xbar, ldb, x, ldb, scalars.constant(0.0),
                      cx.shadow(a_in), lda])


def _transposed(cx, b: IRBuilder, a, n, lda, ty: T.Type):
    """A new n x n column-major block holding ``a^T`` (``a`` has leading dimension ``lda``)."""
    out = allocate(cx.module, b, _bytes(b, b.mul(n, n), ty))
    fn = b.function
    head = b.block
    outer, inner, done = (fn.append_block(f"transpose.{s}") for s in ("col", "row", "done"))
    zero, one = const_int(T.i64, 0), const_int(T.i64, 1)
    b.cbranch(b.icmp("sgt", n, zero), outer, done)
    b.position_at_end(outer)
    j = b.phi(T.i64, name="j")
    j.add_incoming(zero, head)
    b.br(inner)
    b.position_at_end(inner)
    i = b.phi(T.i64, name="i")
    i.add_incoming(zero, outer)
    value = b.load(ty, b.gep(ty, a, [b.add(i, b.mul(j, lda))]))
    b.store(value, b.gep(ty, out, [b.add(j, b.mul(i, n))]))
    i_next = b.add(i, one)
    i.add_incoming(i_next, inner)
    latch = fn.append_block("transpose.next")
    b.cbranch(b.icmp("slt", i_next, n), inner, latch)
    b.position_at_end(latch)
    j_next = b.add(j, one)
    j.add_incoming(j_next, latch)
    b.cbranch(b.icmp("slt", j_next, n), outer, done)
    b.position_at_end(done)
    return out
