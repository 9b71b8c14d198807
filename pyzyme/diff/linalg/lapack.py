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

from pyzyme.diff.linalg.blas import (
    _Scalars,
    _element_type,
    _extent,
    _helper,
    _malloc,
    _memcpy,
    _release_later,
)
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int

__all__ = ["forward_mode", "augmented", "reverse"]

_GESV = ("numba_xgesv", [T.i8, T.i64, T.i64, T.ptr, T.i64, T.ptr, T.ptr, T.i64])


def _gesv(gen):
    name, params = _GESV
    return gen.module.declare(name, T.FunctionType(T.i32, params))


def _free(gen, b: IRBuilder, pointer) -> None:
    fn = gen.module.declare("free", T.FunctionType(T.void, [T.ptr]))
    b.call(fn, [pointer])


def _bytes(b: IRBuilder, count, ty: T.Type):
    return b.mul(count, const_int(T.i64, 8 if ty == T.double else 4))


def _copy(gen, b: IRBuilder, src, count, ty: T.Type):
    size = _bytes(b, count, ty)
    dest = _malloc(gen, b, size)
    _memcpy(gen, b, dest, src, size)
    return dest


def _solve(gen, b: IRBuilder, kind, n, nrhs, a, lda, rhs, ldb) -> None:
    """``rhs = a^-1 rhs``; ``a`` is destroyed."""
    ipiv = _malloc(gen, b, b.mul(n, const_int(T.i64, 4)))
    b.call(_gesv(gen), [kind, n, nrhs, a, lda, ipiv, rhs, ldb])
    _free(gen, b, ipiv)


# -- forward mode --------------------------------------------------------------------------------
def forward_mode(gen, st, inst: I.Call, row) -> None:
    ty = _element_type(inst, st.where)
    b = st.builder
    kind, n, nrhs = (gen._value(st, v) for v in inst.args[:3])
    lda, ldb = gen._value(st, inst.args[4]), gen._value(st, inst.args[7])
    a_in, b_in = inst.args[3], inst.args[6]
    varied = b_in in st.derivs
    a_count = _extent(b, lda, n, n)
    saved = _copy(gen, b, gen._value(st, a_in), a_count, ty) if varied else None
    new = gen._clone(st, inst)
    if not varied:
        return
    x = new.args[6]
    scalars = _Scalars(b, ty)
    gemm = _helper(gen, "gemm")
    for lane in range(st.width):
        rhs = st.derivs[b_in][lane]
        if a_in in st.derivs:  # rhs = dB - dA X
            minus, one = scalars.constant(-1.0), scalars.constant(1.0)
            b.call(gemm, [kind, const_int(T.i8, ord("n")), const_int(T.i8, ord("n")), n, nrhs,
                          n, minus, st.derivs[a_in][lane], lda, x, ldb, one, rhs, ldb])
        work = _copy(gen, b, saved, a_count, ty)
        _solve(gen, b, kind, n, nrhs, work, lda, rhs, ldb)
        _free(gen, b, work)
    _free(gen, b, saved)


# -- reverse mode ------------------------------------------------------------------------------
def augmented(gen, st, inst: I.Call, row) -> None:
    """Forward sweep: a copy of ``A`` before the call, and of ``X`` after it unless nothing
    writes it before the reverse sweep."""
    ty = _element_type(inst, st.where)
    b = st.fb
    a_in, b_in = inst.args[3], inst.args[6]
    if b_in not in st.shadows:
        gen._clone(st, inst)
        return
    n, lda, ldb, nrhs = (gen._fwd_value(st, inst.args[i]) for i in (1, 4, 7, 2))
    saved_a = _copy(gen, b, gen._fwd_value(st, a_in), _extent(b, lda, n, n), ty)
    _release_later(gen, st, saved_a)
    new = gen._clone(st, inst)
    saved_x = None
    if st.overwrites.written_after(inst, b_in) is not None or not gen._stable(st, b_in):
        saved_x = _copy(gen, b, new.args[6], _extent(b, ldb, nrhs, n), ty)
        _release_later(gen, st, saved_x)
    st.rule_calls[inst] = ("lapack", saved_a, saved_x)


def reverse(gen, st, inst: I.Call, row) -> None:
    _, saved_a, saved_x = st.rule_calls[inst]
    ty = _element_type(inst, st.where)
    b = st.rb
    kind, n, nrhs, lda, ldb = (gen.primal(st, inst.args[i]) for i in (0, 1, 2, 4, 7))
    a_in, b_in = inst.args[3], inst.args[6]
    x = gen.avail(st, saved_x) if saved_x is not None else gen.primal(st, b_in)
    xbar = gen.shadow(st, b_in)
    # A^T, column-major with leading dimension n, from the copy of A taken before the call.
    a_t = _transposed(gen, b, gen.avail(st, saved_a), n, lda, ty)
    _solve(gen, b, kind, n, nrhs, a_t, n, xbar, ldb)   # xbar := A^-T xbar = Bbar
    _free(gen, b, a_t)
    if a_in in st.shadows:
        # Abar = -Bbar X^T, replacing the adjoint of the LU factors (they carry none).
        scalars = _Scalars(b, ty)
        b.call(_helper(gen, "gemm"), [kind, const_int(T.i8, ord("n")), const_int(T.i8, ord("t")),
                                      n, n, nrhs, scalars.constant(-1.0), xbar, ldb, x, ldb,
                                      scalars.constant(0.0), gen.shadow(st, a_in), lda])


def _transposed(gen, b: IRBuilder, a, n, lda, ty: T.Type):
    """A new n x n column-major block holding ``a^T`` (``a`` has leading dimension ``lda``)."""
    out = _malloc(gen, b, _bytes(b, b.mul(n, n), ty))
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
