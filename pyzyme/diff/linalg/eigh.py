"""Derivatives of the symmetric eigendecomposition: Numba's ``numba_ez_xxxevd``, which
``np.linalg.eigh`` (``jobz = 'V'``) and ``eigvalsh`` (``jobz = 'N'``) call.

``numba_ez_xxxevd(kind, jobz, uplo, n, A, lda, w)`` reads the ``uplo`` triangle of the
symmetric matrix ``S`` in A, writes its eigenvalues (ascending) to ``w`` and, for ``'V'``, its
eigenvectors over A (``S = V diag(w) V^T``); for ``'N'`` the triangle read is destroyed and the
other one left alone. With ``X = V^T dS V`` and ``F_ij = 1 / (w_j - w_i)`` off the diagonal:

- forward: ``dw_i = X_ii``, ``dV = V (F o X)``;
- reverse: ``Sbar = V (diag(wbar) + F o (V^T Vbar)) V^T``, folded onto the triangle read (each
  element off the diagonal stands for two).

``eigvalsh`` computes no eigenvectors: the derivative computes them, from a copy of A, by the
same helper with ``jobz = 'V'``. Where ``V^T dS V`` (or ``V^T Vbar``) is zero the ``F`` term
is taken as zero, so equal eigenvalues give finite eigenvalue derivatives; eigenvector
derivatives at equal eigenvalues are undefined (inf or NaN). Real kinds only.
"""

from __future__ import annotations

from pyzyme.diff.linalg.callsite import allocate, constant_arg, copy_of, extent, free_later
from pyzyme.diff.linalg.kernels import Kernel, element_type
from pyzyme.diff.memory_calls import free
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int, const_null

__all__ = ["forward_mode", "augmented", "reverse"]

_EVD = "numba_ez_xxxevd"


def _check(inst: I.Call, where: str):
    """Element type, whether eigenvectors are computed (``jobz = 'V'``), whether the lower
    triangle is read."""
    ty = element_type(inst, where)
    jobz = chr(constant_arg(inst, 1, where, "jobz flag")).upper()
    uplo = chr(constant_arg(inst, 2, where, "uplo flag")).upper()
    if jobz not in "VN" or uplo not in "UL":
        raise UnsupportedError(f"{where}: {inst.called_function.ref} with jobz {jobz!r} and "
                               f"uplo {uplo!r}: {inst}")
    return ty, jobz == "V", uplo == "L"


def _read(lower: bool, b: IRBuilder, i, j):
    """Whether element (i, j) is in the triangle the helper reads."""
    return b.icmp("sge" if lower else "sle", i, j)


def _f_times(k: Kernel, m, w) -> None:
    """``m := F o m`` in place (zero on the diagonal and where ``m`` is zero)."""
    b, n = k.b, k.n

    def value(i, j):
        x = k.get(m, n, i, j)
        gap = b.fsub(b.load(k.ty, b.gep(k.ty, w, [j])), b.load(k.ty, b.gep(k.ty, w, [i])))
        zero = k.constant(0.0)
        skip = b.or_(b.icmp("eq", i, j), b.fcmp("oeq", x, zero))
        return b.select(skip, zero, b.fdiv(x, gap))
    k.fill(m, n, value)


def _forward(k: Kernel, vectors: bool, lower: bool) -> None:
    """``d``: dA on entry; on exit the tangent of V (``'V'``), or zero on the destroyed
    triangle (``'N'``). ``dw`` gets the eigenvalues' tangent."""
    b, n = k.b, k.n
    v, ldv, w, d, dw = (k.arg(a) for a in ("v", "ldv", "w", "d", "dw"))
    ds = k.matrix()
    k.fill(ds, n, lambda i, j: b.select(_read(lower, b, i, j), k.get(d, ldv, i, j),
                                        k.get(d, ldv, j, i)))
    t, x = k.matrix(), k.matrix()
    k.gemm("t", "n", 1.0, v, ldv, ds, n, 0.0, t, n)       # V^T dS
    k.gemm("n", "n", 1.0, t, n, v, ldv, 0.0, x, n)        # X
    k.loop(n, lambda i: b.store(k.get(x, n, i, i), b.gep(k.ty, dw, [i])))
    if vectors:
        _f_times(k, x, w)
        k.gemm("n", "n", 1.0, v, ldv, x, n, 0.0, d, ldv)  # dV = V (F o X)
    else:
        k.fill(d, ldv, lambda i, j: b.select(_read(lower, b, i, j), k.constant(0.0),
                                             k.get(d, ldv, i, j)))


def _reverse(k: Kernel, vectors: bool, lower: bool) -> None:
    """``s``: Vbar (``'V'``) or the destroyed triangle's adjoint (``'N'``, dropped) on entry,
    Abar on exit; ``wbar`` (may be null) is consumed."""
    b, n = k.b, k.n
    v, ldv, w, s, wbar = (k.arg(a) for a in ("v", "ldv", "w", "s", "wbar"))
    g = k.matrix()
    if vectors:
        k.gemm("t", "n", 1.0, v, ldv, s, ldv, 0.0, g, n)  # V^T Vbar
        _f_times(k, g, w)
    else:
        k.fill(g, n, lambda i, j: k.constant(0.0))

    def add_wbar():
        def step(i):
            slot = b.gep(k.ty, wbar, [i])
            at = k.at(g, n, i, i)
            b.store(b.fadd(b.load(k.ty, at), b.load(k.ty, slot)), at)
            b.store(k.constant(0.0), slot)
        k.loop(n, step)
    k.when(b.icmp("ne", wbar, const_null(T.ptr)), add_wbar)
    m = k.matrix()
    k.gemm("n", "n", 1.0, v, ldv, g, n, 0.0, m, n)        # V (...)
    k.gemm("n", "t", 1.0, m, n, v, ldv, 0.0, g, n)        # Sbar = V (...) V^T

    def fold(i, j):
        both = b.fadd(k.get(g, n, i, j), k.get(g, n, j, i))
        value = b.select(b.icmp("eq", i, j), k.get(g, n, i, j), both)
        other = k.constant(0.0) if vectors else k.get(s, ldv, i, j)
        return b.select(_read(lower, b, i, j), value, other)
    k.fill(s, ldv, fold)


def _kernel(cx, mode: str, ty: T.Type, vectors: bool, lower: bool):
    base = f"evd.{'v' if vectors else 'n'}{'l' if lower else 'u'}.{mode}"
    fn = cx.module.get_function(Kernel.name(base, ty))
    if fn is None:
        last = ("d", "dw") if mode == "forward" else ("s", "wbar")
        params = [("n", T.i64), ("v", T.ptr), ("ldv", T.i64), ("w", T.ptr),
                  (last[0], T.ptr), (last[1], T.ptr)]
        k = Kernel(cx.module, base, ty, params)
        (_forward if mode == "forward" else _reverse)(k, vectors, lower)
        fn = k.finish()
    return fn


def _eigenvectors(cx, b: IRBuilder, inst, value, a, ty):
    """A copy of A holding the eigenvectors of the symmetric matrix in it (by the same helper
    with ``jobz = 'V'``): what ``eigvalsh``'s derivative needs and the call does not give."""
    n, lda = value(inst.args[3]), value(inst.args[5])
    size = ty.bits // 8
    nbytes = b.mul(extent(b, lda, n, n), const_int(T.i64, size))
    v = copy_of(cx.module, b, a, nbytes)
    w = allocate(cx.module, b, b.mul(n, const_int(T.i64, size)))
    args = [value(x) for x in inst.args]
    args[1], args[4], args[6] = const_int(T.i8, ord("V")), v, w
    evd = cx.module.declare(_EVD, T.FunctionType(T.i32, [T.i8, T.i8, T.i8, T.i64, T.ptr,
                                                         T.i64, T.ptr]))
    b.call(evd, args)
    free(cx.module, b, w)
    return v


def _copy(cx, b: IRBuilder, src, count, ty):
    nbytes = b.mul(count, const_int(T.i64, ty.bits // 8))
    dest = copy_of(cx.module, b, src, nbytes)
    return dest


# -- call sites --------------------------------------------------------------------------------
def forward_mode(cx, inst: I.Call, row) -> None:
    """The call, then the tangents of the eigenvalues (and eigenvectors) it wrote, per
    lane."""
    ty, vectors, lower = _check(inst, cx.where)
    a, w = inst.args[4], inst.args[6]
    if a not in cx.derivs:
        cx.clone(inst)
        return
    b = cx.builder
    value = lambda v: cx.value(v)  # noqa: E731
    n, lda = value(inst.args[3]), value(inst.args[5])
    v = None if vectors else _eigenvectors(cx, b, inst, value, value(a), ty)
    new = cx.clone(inst)
    if vectors:
        v = new.args[4]
    scratch = None
    if w not in cx.derivs:   # the eigenvalues' tangent is not wanted
        scratch = allocate(cx.module, b, b.mul(n, const_int(T.i64, ty.bits // 8)))
    fn = _kernel(cx, "forward", ty, vectors, lower)
    for lane in range(cx.width):
        dw = cx.derivs[w][lane] if scratch is None else scratch
        b.call(fn, [n, v, lda, new.args[6], cx.derivs[a][lane], dw])
    for pointer in ([] if vectors else [v]) + ([scratch] if scratch is not None else []):
        free(cx.module, b, pointer)


def augmented(cx, inst: I.Call, row) -> None:
    """Forward sweep: the call, with copies of the eigenvectors (computed apart for
    ``eigvalsh``) and eigenvalues for the reverse sweep."""
    ty, vectors, lower = _check(inst, cx.where)
    a = inst.args[4]
    if a not in cx.shadows:
        cx.clone(inst)
        return
    b = cx.fb
    value = lambda v: cx.fwd_value(v)  # noqa: E731
    n, lda = value(inst.args[3]), value(inst.args[5])
    v = None if vectors else _eigenvectors(cx, b, inst, value, value(a), ty)
    new = cx.clone(inst)
    if vectors:
        v = _copy(cx, b, new.args[4], extent(b, lda, n, n), ty)
    w = _copy(cx, b, new.args[6], n, ty)
    for pointer in (v, w):
        free_later(cx, pointer)
    cx.rule_calls[inst] = ("lapack", v, w)


def reverse(cx, inst: I.Call, row) -> None:
    """Reverse sweep: the adjoint of A from those of the eigenvalues and eigenvectors."""
    _, v, w = cx.rule_calls[inst]
    ty, vectors, lower = _check(inst, cx.where)
    wbar = cx.shadow(inst.args[6]) if inst.args[6] in cx.shadows else const_null(T.ptr)
    cx.rb.call(_kernel(cx, "reverse", ty, vectors, lower),
               [cx.primal(inst.args[3]), cx.avail(v), cx.primal(inst.args[5]),
                cx.avail(w), cx.shadow(inst.args[4]), wbar])
