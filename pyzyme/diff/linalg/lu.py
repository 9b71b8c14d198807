"""Derivatives of LU factorization and of the inverse from it: Numba's ``numba_xxgetrf`` and
``numba_ez_xxgetri``, which ``np.linalg.det``, ``slogdet`` and ``inv`` call.

``numba_xxgetrf(kind, m, n, A, lda, ipiv)`` overwrites A with ``L`` (unit lower, below the
diagonal) and ``U`` (upper) such that ``A = P L U``, ``P`` the row interchanges in ``ipiv``.
With ``F = L^-1 P^T dA U^-1``:

- forward: ``dL = L strictly_lower(F)``, ``dU = upper(F) U`` (both written over the tangent of
  A, packed as A is);
- reverse: with ``Lbar``, ``Ubar`` the strictly lower and upper parts of the adjoint,
  ``Fbar = strictly_lower(L^T Lbar) + upper(Ubar U^T)`` and ``Abar = P L^-T Fbar U^-T``.

``numba_ez_xxgetri(kind, n, A, lda, ipiv)`` overwrites the factors with ``X = (P L U)^-1``.
With ``dM = P (dL U + L dU)`` (the change of the matrix the factors describe):

- forward: ``dX = -X dM X``;
- reverse: ``Mbar = -X^T Xbar X^T``, then ``Lbar = strictly_lower(P^T Mbar U^T)`` and
  ``Ubar = upper(L^T P^T Mbar)``.

So ``inv`` (getrf then getri) gets ``dX = -X dA X``, and ``det``/``slogdet``, whose products
and logarithms of the diagonal Numba writes as ordinary code after getrf, get theirs from the
getrf rule. Triangular inverses come from getri with identity pivots; products are GEMMs
(:mod:`pyzyme.diff.linalg.kernels`). Square factorizations of real kinds only; at a singular
matrix (a zero on U's diagonal) the derivative is NaN.
"""

from __future__ import annotations

from pyzyme.diff.linalg.callsite import copy_of, extent, free_later
from pyzyme.diff.linalg.kernels import Kernel, element_type, pivot_type
from pyzyme.diff.memory_calls import free
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantInt, const_int

__all__ = ["forward_mode", "augmented", "reverse"]

_GETRF, _GETRI = "numba_xxgetrf", "numba_ez_xxgetri"
# Argument positions: (n, A, lda, ipiv) of each helper.
_ARGS = {_GETRF: (2, 3, 4, 5), _GETRI: (1, 2, 3, 4)}
_MATRIX = [("n", T.i64), ("lu", T.ptr), ("lda", T.i64), ("ipiv", T.ptr)]


def _check(inst: I.Call, where: str) -> T.Type:
    ty = element_type(inst, where)
    if inst.called_function.name == _GETRF:
        m, n = inst.args[1], inst.args[2]
        same = m is n or (isinstance(m, ConstantInt) and isinstance(n, ConstantInt)
                          and m.value == n.value)
        if not same:
            raise UnsupportedError(
                f"{where}: no derivative for {inst.called_function.ref} of a matrix that may "
                f"not be square (LU of an m x n matrix): {inst}",
                hint="np.linalg.det, slogdet and inv factor square matrices; differentiate "
                     "those")
    return ty


def _operands(cx, inst, value):
    n, a, lda, ipiv = (inst.args[i] for i in _ARGS[inst.called_function.name])
    return value(n), a, value(lda), value(ipiv)


def _bytes(b: IRBuilder, count, size: int):
    return b.mul(count, const_int(T.i64, size))


def _copy(cx, b: IRBuilder, src, count, size: int):
    nbytes = _bytes(b, count, size)
    dest = copy_of(cx.module, b, src, nbytes)
    return dest


# -- the kernels ------------------------------------------------------------------------------
def _kernel(cx, base: str, ty: T.Type, params, build):
    fn = cx.module.get_function(Kernel.name(base, ty))
    if fn is None:
        k = Kernel(cx.module, base, ty, params)
        build(k)
        fn = k.finish()
    return fn


def _getrf_forward(k: Kernel) -> None:
    """``d``: dA on entry, the tangent of the packed factors on exit."""
    n, lu, lda, ipiv, d = (k.arg(s) for s in ("n", "lu", "lda", "ipiv", "d"))
    linv = k.triangle(lu, lda, "lower", diagonal=1.0)
    uinv = k.triangle(lu, lda, "upper")
    ident = k.identity_pivots()
    failed = k.failed(k.getri(linv, ident), k.getri(uinv, ident))
    k.permute_rows(d, lda, ipiv, backward=False)               # P^T dA
    t, f = k.matrix(), k.matrix()
    k.gemm("n", "n", 1.0, linv, n, d, lda, 0.0, t, n)          # L^-1 P^T dA
    k.gemm("n", "n", 1.0, t, n, uinv, n, 0.0, f, n)            # F
    lower = k.triangle(f, n, "lower")
    k.fill(f, n, lambda i, j: k.pick_triangle(f, n, i, j, "upper"))
    full_l = k.triangle(lu, lda, "lower", diagonal=1.0)
    full_u = k.triangle(lu, lda, "upper")
    k.gemm("n", "n", 1.0, full_l, n, lower, n, 0.0, d, lda)    # dL
    k.gemm("n", "n", 1.0, f, n, full_u, n, 1.0, d, lda)        # + dU
    k.nan_if(failed, d, lda)


def _getrf_reverse(k: Kernel) -> None:
    """``s``: the adjoint of the packed factors on entry, that of A on exit."""
    n, lu, lda, ipiv, s = (k.arg(a) for a in ("n", "lu", "lda", "ipiv", "s"))
    full_l = k.triangle(lu, lda, "lower", diagonal=1.0)
    full_u = k.triangle(lu, lda, "upper")
    lbar = k.triangle(s, lda, "lower")
    ubar = k.triangle(s, lda, "upper")
    g1, g2 = k.matrix(), k.matrix()
    k.gemm("t", "n", 1.0, full_l, n, lbar, n, 0.0, g1, n)      # L^T Lbar
    k.gemm("n", "t", 1.0, ubar, n, full_u, n, 0.0, g2, n)      # Ubar U^T
    b = k.b
    k.fill(g1, n, lambda i, j: b.select(b.icmp("sgt", i, j), k.get(g1, n, i, j),
                                        k.get(g2, n, i, j)))   # Fbar
    ident = k.identity_pivots()
    failed = k.failed(k.getri(full_l, ident), k.getri(full_u, ident))   # L^-1, U^-1
    k.gemm("t", "n", 1.0, full_l, n, g1, n, 0.0, g2, n)        # L^-T Fbar
    k.gemm("n", "t", 1.0, g2, n, full_u, n, 0.0, s, lda)       # L^-T Fbar U^-T
    k.permute_rows(s, lda, ipiv, backward=True)                # P ...
    k.nan_if(failed, s, lda)


def _getri_forward(k: Kernel) -> None:
    """``lu``: the factors (a copy taken before the call), ``x``: the inverse; ``d``: their
    tangent on entry, the inverse's on exit."""
    n, lu, lda, ipiv, x, d = (k.arg(a) for a in ("n", "lu", "lda", "ipiv", "x", "d"))
    full_l = k.triangle(lu, lda, "lower", diagonal=1.0)
    full_u = k.triangle(lu, lda, "upper")
    dl = k.triangle(d, lda, "lower")
    du = k.triangle(d, lda, "upper")
    dm = k.matrix()
    k.gemm("n", "n", 1.0, dl, n, full_u, n, 0.0, dm, n)        # dL U
    k.gemm("n", "n", 1.0, full_l, n, du, n, 1.0, dm, n)        # + L dU
    k.permute_rows(dm, n, ipiv, backward=True)                 # dM = P (...)
    k.gemm("n", "n", 1.0, x, lda, dm, n, 0.0, dl, n)           # X dM
    k.gemm("n", "n", -1.0, dl, n, x, lda, 0.0, d, lda)         # -X dM X


def _getri_reverse(k: Kernel) -> None:
    """``s``: the adjoint of the inverse on entry, that of the factors on exit."""
    n, lu, lda, ipiv, x, s = (k.arg(a) for a in ("n", "lu", "lda", "ipiv", "x", "s"))
    t, mbar = k.matrix(), k.matrix()
    k.gemm("t", "n", 1.0, x, lda, s, lda, 0.0, t, n)           # X^T Xbar
    k.gemm("n", "t", -1.0, t, n, x, lda, 0.0, mbar, n)         # Mbar
    k.permute_rows(mbar, n, ipiv, backward=False)              # P^T Mbar
    full_l = k.triangle(lu, lda, "lower", diagonal=1.0)
    full_u = k.triangle(lu, lda, "upper")
    k.gemm("n", "t", 1.0, mbar, n, full_u, n, 0.0, t, n)       # P^T Mbar U^T
    g = k.matrix()
    k.gemm("t", "n", 1.0, full_l, n, mbar, n, 0.0, g, n)       # L^T P^T Mbar
    b = k.b
    k.fill(s, lda, lambda i, j: b.select(b.icmp("sgt", i, j), k.get(t, n, i, j),
                                         k.get(g, n, i, j)))


_KERNELS = {
    (_GETRF, "forward"): (_MATRIX + [("d", T.ptr)], _getrf_forward),
    (_GETRF, "reverse"): (_MATRIX + [("s", T.ptr)], _getrf_reverse),
    (_GETRI, "forward"): (_MATRIX + [("x", T.ptr), ("d", T.ptr)], _getri_forward),
    (_GETRI, "reverse"): (_MATRIX + [("x", T.ptr), ("s", T.ptr)], _getri_reverse),
}


def _derivative(cx, inst: I.Call, ty: T.Type, mode: str):
    name = inst.called_function.name
    params, build = _KERNELS[(name, mode)]
    short = "getrf" if name == _GETRF else "getri"
    return _kernel(cx, f"{short}.{mode}", ty, params, build)


# -- forward mode --------------------------------------------------------------------------------
def forward_mode(cx, inst: I.Call, row) -> None:
    """The call, then the tangent of what it overwrote, per lane."""
    ty = _check(inst, cx.where)
    b = cx.builder
    n, a, lda, ipiv = _operands(cx, inst, lambda v: cx.value(v))
    if a not in cx.derivs:
        cx.clone(inst)
        return
    size = ty.bits // 8
    factors = None
    if inst.called_function.name == _GETRI:   # the factors, before getri overwrites them
        factors = _copy(cx, b, cx.value(a), extent(b, lda, n, n), size)
    new = cx.clone(inst)
    out = new.args[_ARGS[inst.called_function.name][1]]
    fn = _derivative(cx, inst, ty, "forward")
    for lane in range(cx.width):
        tangent = cx.derivs[a][lane]
        if factors is None:
            b.call(fn, [n, out, lda, ipiv, tangent])
        else:
            b.call(fn, [n, factors, lda, ipiv, out, tangent])
    if factors is not None:
        free(cx.module, b, factors)


# -- reverse mode ------------------------------------------------------------------------------
def augmented(cx, inst: I.Call, row) -> None:
    """Forward sweep: the call, with copies of the factors and pivots (and for getri of the
    inverse) for the reverse sweep: the caller overwrites them soon after (getri overwrites
    getrf's factors, Numba frees the pivots)."""
    ty = _check(inst, cx.where)
    b = cx.fb
    index = _ARGS[inst.called_function.name]
    a = inst.args[index[1]]
    if a not in cx.shadows:
        cx.clone(inst)
        return
    n, _, lda, ipiv = _operands(cx, inst, lambda v: cx.fwd_value(v))
    size, count = ty.bits // 8, extent(b, lda, n, n)
    kept = {}
    if inst.called_function.name == _GETRI:
        kept["lu"] = _copy(cx, b, cx.fwd_value(a), count, size)
    new = cx.clone(inst)
    out = new.args[index[1]]
    kept["lu" if "lu" not in kept else "x"] = _copy(cx, b, out, count, size)
    kept["ipiv"] = _copy(cx, b, ipiv, n, pivot_type().width // 8)
    for pointer in kept.values():
        free_later(cx, pointer)
    cx.rule_calls[inst] = ("lapack", kept)


def reverse(cx, inst: I.Call, row) -> None:
    """Reverse sweep: the adjoint of A (or of the factors) from the adjoint of what the call
    wrote, in place."""
    _, kept = cx.rule_calls[inst]
    ty = element_type(inst, cx.where)
    b = cx.rb
    index = _ARGS[inst.called_function.name]
    n, lda = cx.primal(inst.args[index[0]]), cx.primal(inst.args[index[2]])
    args = [n, cx.avail(kept["lu"]), lda, cx.avail(kept["ipiv"])]
    if "x" in kept:
        args.append(cx.avail(kept["x"]))
    args.append(cx.shadow(inst.args[index[1]]))
    b.call(_derivative(cx, inst, ty, "reverse"), args)
