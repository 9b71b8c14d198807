"""Derivatives of the Euclidean norm: Numba's ``numba_xxnrm2``, which ``np.linalg.norm`` calls
for vectors and (as the Frobenius norm) for matrices.

``numba_xxnrm2(kind, n, x, incx, *r)`` writes ``r = ||x||`` (``n`` elements, ``incx`` apart).
The derivative is ``x / r``:

- forward: ``dr = (x . dx) / r``;
- reverse: ``xbar += (rbar / r) x``, and ``rbar`` is consumed (``r``'s memory was written).

Both are GEMMs on 1 x n views (leading dimension ``incx``, which handles strided vectors), in an
internal function of the module (:class:`pyzyme.diff.linalg.kernels.Kernel`). At ``x = 0`` the
derivative is NaN (0/0); a vector Numba passes with a negative stride gets NaN too (BLAS reads
none of it). Real kinds only.
"""

from __future__ import annotations

from pyzyme.diff.linalg.callsite import copy_of, extent, free_later
from pyzyme.diff.linalg.kernels import Kernel, element_type
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int, const_null

__all__ = ["forward_mode", "augmented", "reverse"]


def _dot(k: Kernel, x, incx, y, alpha=1.0):
    """``alpha x . y`` for vectors of ``k.n`` elements, ``incx`` apart (``incx >= 1``)."""
    one = const_int(T.i64, 1)
    out = k.b.entry_alloca(k.ty, name="nrm2.dot")
    k.gemm_general("n", "t", one, one, k.n, k.constant(alpha), x, incx, y, incx,
                   k.constant(0.0), out, one)
    return k.b.load(k.ty, out)


def _strided_ok(k: Kernel, incx):
    return k.b.icmp("sge", incx, const_int(T.i64, 1))


def _forward(k: Kernel) -> None:
    """``*dr = (x . dx) / r``; 0 for an empty vector, NaN for a negative stride."""
    b = k.b
    x, incx, dx, r, dr = (k.arg(a) for a in ("x", "incx", "dx", "r", "dr"))
    value = k.if_else(
        _strided_ok(k, incx),
        lambda: b.fdiv(_dot(k, x, incx, dx), r),
        lambda: k.constant(float("nan")))
    empty = b.icmp("eq", k.n, const_int(T.i64, 0))
    b.store(b.select(empty, k.constant(0.0), value), dr)


def _reverse(k: Kernel) -> None:
    """``xbar += (rbar / r) x`` (nothing when ``xbar`` is null), then ``rbar = 0``."""
    b = k.b
    x, incx, xbar, r, rbar = (k.arg(a) for a in ("x", "incx", "xbar", "r", "rbar"))
    scale = b.fdiv(b.load(k.ty, rbar), r)
    b.store(k.constant(0.0), rbar)
    one = const_int(T.i64, 1)
    wanted = b.and_(b.icmp("ne", xbar, const_null(T.ptr)),
                    b.icmp("sgt", k.n, const_int(T.i64, 0)))

    def accumulate():
        unit = k.b.entry_alloca(k.ty, name="nrm2.one")
        k.b.store(k.constant(1.0), unit)

        def strided():
            k.gemm_general("n", "n", one, k.n, one, scale, unit, one, x, incx,
                           k.constant(1.0), xbar, incx)

        def negative():   # BLAS read none of x: the derivative is undefined here
            nan = k.constant(float("nan"))
            k.loop(k.n, lambda i: k.b.store(nan, k.b.gep(k.ty, xbar, [k.b.mul(i, incx)])))
        k.when(_strided_ok(k, incx), strided, negative)
    k.when(wanted, accumulate)


_PARAMS = {
    "forward": [("n", T.i64), ("x", T.ptr), ("incx", T.i64), ("dx", T.ptr), ("r", None),
                ("dr", T.ptr)],
    "reverse": [("n", T.i64), ("x", T.ptr), ("incx", T.i64), ("xbar", T.ptr), ("r", None),
                ("rbar", T.ptr)],
}


def _kernel(cx, mode: str, ty: T.Type):
    fn = cx.module.get_function(Kernel.name(f"nrm2.{mode}", ty))
    if fn is None:
        k = Kernel(cx.module, f"nrm2.{mode}", ty,
                   [(name, t or ty) for name, t in _PARAMS[mode]])
        (_forward if mode == "forward" else _reverse)(k)
        fn = k.finish()
    return fn


# -- call sites --------------------------------------------------------------------------------
def forward_mode(cx, inst: I.Call, row) -> None:
    """The call, then the tangent of the norm: ``(x . dx) / r``, per lane."""
    ty = element_type(inst, cx.where)
    new = cx.clone(inst)
    x, out = inst.args[2], inst.args[4]
    if out not in cx.derivs:
        return
    b = cx.builder
    n, incx = cx.value(inst.args[1]), cx.value(inst.args[3])
    r = b.load(ty, new.args[4], name="nrm2")
    for lane in range(cx.width):
        dout = cx.derivs[out][lane]
        if x not in cx.derivs:   # the result depends on constants only
            b.store(const_null(ty), dout)
            continue
        b.call(_kernel(cx, "forward", ty), [n, new.args[2], incx, cx.derivs[x][lane], r, dout])


def augmented(cx, inst: I.Call, row) -> None:
    """Forward sweep: the call and the norm it wrote; ``x`` copied if it may change before
    the reverse sweep (``x /= np.linalg.norm(x)`` does)."""
    ty = element_type(inst, cx.where)
    new = cx.clone(inst)
    x, out = inst.args[2], inst.args[4]
    if out not in cx.shadows:
        return
    b = cx.fb
    kept = None
    if x in cx.shadows and (cx.overwrites.written_after(inst, x) is not None
                            or not cx.stable(x)):
        n, incx = cx.fwd_value(inst.args[1]), cx.fwd_value(inst.args[3])
        positive = b.icmp("sge", incx, const_int(T.i64, 1))
        count = b.select(positive, extent(b, incx, n, const_int(T.i64, 1)),
                         const_int(T.i64, 0))
        nbytes = b.mul(count, const_int(T.i64, ty.bits // 8))
        kept = copy_of(cx.module, b, new.args[2], nbytes)
        free_later(cx, kept)
    cx.rule_calls[inst] = ("nrm2", kept, b.load(ty, new.args[4], name="nrm2"))


def reverse(cx, inst: I.Call, row) -> None:
    """Reverse sweep: ``xbar += (rbar / r) x``; ``rbar`` is consumed."""
    _, kept, norm = cx.rule_calls[inst]
    ty = element_type(inst, cx.where)
    x = inst.args[2]
    xp = cx.avail(kept) if kept is not None else cx.primal(x)
    xbar = cx.shadow(x) if x in cx.shadows else const_null(T.ptr)
    cx.rb.call(_kernel(cx, "reverse", ty),
               [cx.primal(inst.args[1]), xp, cx.primal(inst.args[3]), xbar,
                cx.avail(norm), cx.shadow(inst.args[4])])
