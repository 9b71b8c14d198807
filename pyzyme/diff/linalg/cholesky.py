"""Derivatives of the Cholesky factorization: Numba's ``numba_xxpotrf``, which
``np.linalg.cholesky`` calls.

``numba_xxpotrf(kind, uplo, n, A, lda)`` reads one triangle of the symmetric matrix ``S`` in A
and overwrites it with the factor: ``S = U^T U`` for ``uplo = 'U'`` (what Numba passes, for its
C-ordered arrays), ``S = L L^T`` for ``'L'``; the other triangle is left as it was, so its
tangent and adjoint pass through unchanged. Written with ``L = U^T`` and
``Phi(X) = strictly_lower(X) + diag(X) / 2`` (Murray 2016, "Differentiation of the Cholesky
decomposition"):

- forward: ``dL = L Phi(L^-1 dS L^-T)``, with ``dS`` the symmetric matrix of the triangle read;
- reverse: ``Sbar = L^-T Phi(L^T Lbar) L^-1``; the read triangle's adjoint is
  ``Sbar + Sbar^T`` off the diagonal and ``Sbar`` on it (each element stands for two).

``L^-1`` comes from getri with identity pivots, products from GEMM
(:mod:`pyzyme.diff.linalg.kernels`). Real kinds only; where the factor is singular the
derivative is NaN.
"""

from __future__ import annotations

from pyzyme.diff.linalg.callsite import constant_arg, copy_of, extent, free_later
from pyzyme.diff.linalg.kernels import Kernel, element_type
from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int

__all__ = ["forward_mode", "augmented", "reverse"]

_PARAMS = [("n", T.i64), ("u", T.ptr), ("lda", T.i64)]


def _check(inst: I.Call, where: str) -> tuple[T.Type, bool]:
    """The element type, and whether the lower triangle is the one used (``uplo = 'L'``)."""
    ty = element_type(inst, where)
    uplo = chr(constant_arg(inst, 1, where, "uplo flag")).upper()
    if uplo not in "UL":
        raise UnsupportedError(f"{where}: {inst.called_function.ref} with uplo {uplo!r}: {inst}")
    return ty, uplo == "L"


def _kernel(cx, mode: str, ty: T.Type, lower: bool):
    base = f"potrf.{'l' if lower else 'u'}.{mode}"
    fn = cx.module.get_function(Kernel.name(base, ty))
    if fn is None:
        k = Kernel(cx.module, base, ty, _PARAMS + [("d" if mode == "forward" else "s", T.ptr)])
        (_forward if mode == "forward" else _reverse)(k, lower)
        fn = k.finish()
    return fn


def _factor(k: Kernel, lower: bool):
    """``U`` (upper, zeros below), ``U^-1`` and whether inverting failed. With ``uplo = 'L'``
    the caller's buffers are read transposed throughout, which turns ``L`` into ``U``."""
    u, lda = k.arg("u"), k.arg("lda")
    full_u = k.triangle(u, lda, "upper", transposed=lower)
    uinv = k.triangle(u, lda, "upper", transposed=lower)
    failed = k.failed(k.getri(uinv, k.identity_pivots()))
    return full_u, uinv, failed


def _phi(k: Kernel, m) -> None:
    """``m := strictly_lower(m) + diag(m) / 2``, in place."""
    b, n = k.b, k.n

    def value(i, j):
        v = k.get(m, n, i, j)
        v = b.select(b.icmp("eq", i, j), b.fmul(v, k.constant(0.5)), v)
        return b.select(b.icmp("sge", i, j), v, k.constant(0.0))
    k.fill(m, n, value)


def _forward(k: Kernel, lower: bool) -> None:
    """``d``: the tangent of A on entry; its triangle read holds that of the factor on exit."""
    n, lda, d = k.n, k.arg("lda"), k.arg("d")
    b = k.b
    full_u, uinv, failed = _factor(k, lower)
    ds = k.matrix()   # dS, symmetric, from the triangle potrf reads

    def sym(i, j):
        upper = b.icmp("sle", i, j)
        return b.select(upper, k.get(d, lda, i, j, lower), k.get(d, lda, j, i, lower))
    k.fill(ds, n, sym)
    t, x = k.matrix(), k.matrix()
    k.gemm("t", "n", 1.0, uinv, n, ds, n, 0.0, t, n)            # L^-1 dS
    k.gemm("n", "n", 1.0, t, n, uinv, n, 0.0, x, n)             # L^-1 dS L^-T
    _phi(k, x)
    k.gemm("t", "n", 1.0, full_u, n, x, n, 0.0, t, n)           # dL = L Phi(...)
    k.fill(d, lda, lambda i, j: b.select(b.icmp("sle", i, j), k.get(t, n, j, i),
                                         k.get(d, lda, i, j, lower)), transposed=lower)
    k.nan_if(failed, d, lda, keep=lambda i, j: b.icmp("sgt", i, j) if not lower
             else b.icmp("slt", i, j))


def _reverse(k: Kernel, lower: bool) -> None:
    """``s``: the adjoint of the factor's triangle on entry, that of the triangle read on
    exit (the other triangle's adjoint is left alone)."""
    n, lda, s = k.n, k.arg("lda"), k.arg("s")
    b = k.b
    full_u, uinv, failed = _factor(k, lower)
    lbar = k.matrix()   # Lbar = Ubar^T

    def lower_bar(i, j):
        return b.select(b.icmp("sge", i, j), k.get(s, lda, j, i, lower), k.constant(0.0))
    k.fill(lbar, n, lower_bar)
    m, t = k.matrix(), k.matrix()
    k.gemm("n", "n", 1.0, full_u, n, lbar, n, 0.0, m, n)        # L^T Lbar
    _phi(k, m)
    k.gemm("n", "n", 1.0, uinv, n, m, n, 0.0, t, n)             # L^-T Phi
    k.gemm("n", "t", 1.0, t, n, uinv, n, 0.0, m, n)             # Sbar = L^-T Phi L^-1

    def read_triangle(i, j):
        both = b.fadd(k.get(m, n, i, j), k.get(m, n, j, i))
        value = b.select(b.icmp("eq", i, j), k.get(m, n, i, j), both)
        return b.select(b.icmp("sle", i, j), value, k.get(s, lda, i, j, lower))
    k.fill(s, lda, read_triangle, transposed=lower)
    k.nan_if(failed, s, lda, keep=lambda i, j: b.icmp("sgt", i, j) if not lower
             else b.icmp("slt", i, j))


# -- call sites --------------------------------------------------------------------------------
def forward_mode(cx, inst: I.Call, row) -> None:
    """The call, then the tangent of the factor it wrote, per lane."""
    ty, lower = _check(inst, cx.where)
    new = cx.clone(inst)
    a = inst.args[3]
    if a not in cx.derivs:
        return
    fn = _kernel(cx, "forward", ty, lower)
    n, lda = cx.value(inst.args[2]), cx.value(inst.args[4])
    for lane in range(cx.width):
        cx.builder.call(fn, [n, new.args[3], lda, cx.derivs[a][lane]])


def augmented(cx, inst: I.Call, row) -> None:
    """Forward sweep: the call and a copy of the factor it wrote."""
    ty, _ = _check(inst, cx.where)
    new = cx.clone(inst)
    if inst.args[3] not in cx.shadows:
        return
    b = cx.fb
    n, lda = cx.fwd_value(inst.args[2]), cx.fwd_value(inst.args[4])
    nbytes = b.mul(extent(b, lda, n, n), const_int(T.i64, ty.bits // 8))
    kept = copy_of(cx.module, b, new.args[3], nbytes)
    free_later(cx, kept)
    cx.rule_calls[inst] = ("lapack", kept)


def reverse(cx, inst: I.Call, row) -> None:
    """Reverse sweep: the adjoint of A from the adjoint of the factor, in place."""
    _, kept = cx.rule_calls[inst]
    ty, lower = _check(inst, cx.where)
    n, lda = cx.primal(inst.args[2]), cx.primal(inst.args[4])
    cx.rb.call(_kernel(cx, "reverse", ty, lower),
               [n, cx.avail(kept), lda, cx.shadow(inst.args[3])])
