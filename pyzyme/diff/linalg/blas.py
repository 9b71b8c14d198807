"""Derivatives of BLAS calls, made by calling BLAS again.

Numba lowers ``np.dot`` and ``@`` to three helpers of its own (numba/_lapack.c), which call the
BLAS of SciPy; column-major, as BLAS is:

- ``numba_xxdot(kind, conj, n, x, y, *r)``: ``r = x . y``;
- ``numba_xxgemv(kind, trans, m, n, *alpha, A, lda, x, *beta, y)``:
  ``y = alpha op(A) x + beta y`` with ``A`` stored m x n;
- ``numba_xxgemm(kind, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc)``:
  ``C = alpha op(A) op(B) + beta C``, ``op(A)`` m x k and ``op(B)`` k x n.

Each is bilinear in its two operands, so the tangent is the same call on one tangent and one
primal, twice (plus one with the tangent of ``alpha`` when that varies, as it does when forward
mode runs over a reverse sweep); the adjoint of a GEMM is two GEMMs with transposed operands,
that of a GEMV a GEMV and a rank-one GEMM, that of a dot product two GEMVs. Results are
accumulated with ``beta = 1``; the output's own adjoint is scaled by ``beta`` last, by the same
call with ``alpha = 0`` (which BLAS defines as ``C = beta C``).

Complex kinds (``z``, ``c``) take the adjoint as pyzyme's complex derivatives are
(``df/dRe + i df/dIm``, :mod:`pyzyme.api.args.complex`): that of ``y = M x`` is
``x_bar += M^H y_bar``, so each adjoint call conjugates alpha and beta and takes its other
operand conjugate-transposed (BLAS's ``c``) where the real call transposes it. Where the real
call takes it as it is stored, it is conjugated in a copy (BLAS has no "conjugate only").
``vdot`` (``conj = 1``) conjugates its first operand: ``x_bar += conj(r_bar) y``,
``y_bar += r_bar x``.

The reverse sweep reads the operands again where nothing writes them before it runs; otherwise
the forward sweep copies them (into memory released with the deferred releases).
"""

from __future__ import annotations

from pyzyme.diff.linalg.callsite import (
    Scalars,
    copy_of,
    blas_element_type,
    blas_function,
    conjugate,
    element_bytes,
    extent,
    free_later,
    is_complex,
)
from pyzyme.diff.linalg.kernels import Kernel
from pyzyme.diff.memory_calls import free
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantFP, const_int, const_null

__all__ = ["forward_mode", "augmented", "reverse"]

_N, _T, _C = ord("n"), ord("t"), ord("c")


def _flip(trans: int) -> int:
    return _N if trans == _T else _T


def _call(b: IRBuilder, fn, args) -> None:
    b.call(fn, args)


# -- forward mode --------------------------------------------------------------------------------
def forward_mode(cx, inst: I.Call, row) -> None:
    """The call, then its tangent: the same call on (tangent, primal) and (primal, tangent)
    pairs, accumulated into the tangent of the output."""
    op = row.op
    ty = blas_element_type(inst, cx.where, complex_kinds=True)
    new = cx.clone(inst)
    (ia, ib), (io,) = row.operands, row.writes  # argument indices, from the row
    out = inst.args[io]
    if out not in cx.derivs:
        return
    b = cx.builder
    scalars = Scalars(b, ty)
    fn = blas_function(cx.module, op)
    args = list(new.args)

    def tangent(v, lane):
        return cx.derivs[v][lane] if v in cx.derivs else None

    for lane in range(cx.width):
        dout = cx.derivs[out][lane]
        if op == "dot":
            _forward_dot(b, fn, args, ty, tangent(inst.args[ia], lane),
                         tangent(inst.args[ib], lane), dout, scalars)
            continue
        ialpha, ibeta = (4, 8) if op == "gemv" else (6, 11)
        if tangent(inst.args[ibeta], lane) is not None:
            raise UnsupportedError(
                f"{cx.where}: np.dot or @ (Numba's {inst.called_function.ref}) is passed a "
                f"beta, the factor it scales its output by, that carries a derivative; "
                f"forward mode differentiates it only as Numba calls it, with beta = 0: {inst}")
        terms = []
        da, db = tangent(inst.args[ia], lane), tangent(inst.args[ib], lane)
        if da is not None:
            terms.append({ia: da})
        if db is not None:
            terms.append({ib: db})
        dalpha = tangent(inst.args[ialpha], lane)
        if dalpha is not None:
            terms.append({ialpha: dalpha})
        one = scalars.constant(1.0) if len(terms) > 1 else None
        if not terms:  # output = beta * output: its tangent likewise
            terms.append({ialpha: scalars.constant(0.0)})
        for n, term in enumerate(terms):
            call_args = list(args)
            for index, value in term.items():
                call_args[index] = value
            call_args[io] = dout
            if n:
                call_args[ibeta] = one
            _call(b, fn, call_args)


def _forward_dot(b, fn, args, ty, dx, dy, dout, scalars) -> None:
    total = None
    for pair in ((dx, args[4]), (args[3], dy)):
        if pair[0] is None or pair[1] is None:
            continue
        slot = scalars.holding(const_null(ty))
        _call(b, fn, args[:3] + [pair[0], pair[1], slot])
        value = b.load(ty, slot)
        total = value if total is None else _add(b, total, value)
    b.store(total if total is not None else const_null(ty), dout)


def _add(b: IRBuilder, x, y):
    """``x + y``, real or complex."""
    if not x.type.is_aggregate:
        return b.fadd(x, y)
    for part in (0, 1):
        x = b.insertvalue(x, b.fadd(b.extractvalue(x, part), b.extractvalue(y, part)), part)
    return x


# -- reverse mode ------------------------------------------------------------------------------
def augmented(cx, inst: I.Call, row) -> None:
    """Forward sweep: the call; operands that may change before the reverse sweep are copied,
    and the scalars alpha and beta read."""
    op = row.op
    ty = blas_element_type(inst, cx.where, complex_kinds=True)
    new = cx.clone(inst)
    (ia, ib), (io,) = row.operands, row.writes  # argument indices, from the row
    if inst.args[io] not in cx.shadows:
        return
    b = cx.fb
    kept = {}
    for index in (ia, ib):
        pointer = inst.args[index]
        stable = (cx.overwrites.written_after(inst, pointer) is None
                  and cx.stable(pointer))
        if stable:
            continue
        count = _operand_elements(b, new.args, op, index)
        copy = copy_of(cx.module, b, new.args[index], _bytes(b, count, ty))
        free_later(cx, copy)
        kept[index] = copy
    scalars = {}
    if op != "dot":
        ialpha, ibeta = (4, 8) if op == "gemv" else (6, 11)
        scalars = {i: _slot_constant(inst.args[i]) or b.load(ty, new.args[i], name=f"blas.{n}")
                   for i, n in ((ialpha, "alpha"), (ibeta, "beta"))}
    cx.rule_calls[inst] = ("blas", kept, scalars)


def _slot_constant(pointer):
    """The constant in stack slot ``pointer`` where every store to it stores that constant
    and nothing else writes it (Numba's ``np.dot`` passes ``alpha = 1`` and ``beta = 0`` so):
    the reverse sweep then needs no tape for it, and forward mode over that sweep sees a
    constant, not a load from a tape that holds derivatives as well. None otherwise."""
    if not isinstance(pointer, I.Alloca):
        return None
    found = None
    for user in pointer.users:
        if isinstance(user, I.Store):
            if user.pointer is not pointer or not isinstance(user.value, ConstantFP) or \
                    (found is not None and user.value.value != found.value):
                return None
            found = user.value
        elif not _reads_only(user):
            return None
    return found


def _reads_only(user) -> bool:
    """Whether ``user`` only reads the slot: a BLAS helper's scalar argument, a load, or the
    slot's lifetime markers."""
    if isinstance(user, I.Load):
        return True
    if isinstance(user, I.CallBase):
        callee = user.called_function
        name = callee.name if callee is not None else ""
        return name.startswith(("numba_xxgemv", "numba_xxgemm", "llvm.lifetime."))
    return False


def _bytes(b: IRBuilder, count, ty: T.Type):
    """The size of ``count`` elements of BLAS element type ``ty``."""
    return b.mul(count, const_int(T.i64, element_bytes(ty)))


def _operand_elements(b: IRBuilder, a, op: str, index: int):
    """How many elements BLAS reads of operand ``index`` of a call with arguments ``a``:
    ``ld * (cols - 1) + rows``."""
    if op == "dot":
        return a[2]
    if op == "gemv":
        m, n, trans = a[2], a[3], a[1].value
        if index == 5:
            return extent(b, a[6], n, m)
        return n if trans == _N else m
    m, n, k = a[3], a[4], a[5]
    ta, tb = a[1].value, a[2].value
    if index == 7:
        rows, cols = (m, k) if ta == _N else (k, m)
        return extent(b, a[8], cols, rows)
    rows, cols = (k, n) if tb == _N else (n, k)
    return extent(b, a[10], cols, rows)


def reverse(cx, inst: I.Call, row) -> None:
    """Reverse sweep: the adjoints of the operands, by BLAS, then the output's adjoint scaled
    by beta."""
    op = row.op
    _, kept, scalars = cx.rule_calls[inst]
    ty = blas_element_type(inst, cx.where, complex_kinds=True)
    (ia, ib), (io,) = row.operands, row.writes  # argument indices, from the row
    b = cx.rb
    fn = blas_function(cx.module, op)
    args = [None if a.type.is_pointer else cx.primal(a) for a in inst.args]
    for index in (ia, ib):
        args[index] = cx.avail(kept[index]) if index in kept else \
            cx.primal(inst.args[index])
    shadow = {i: cx.shadow(inst.args[i]) for i in (ia, ib, io)
              if inst.args[i] in cx.shadows}
    box = Scalars(b, ty)
    other = _Other(cx.module, b, ty, op, args)
    if op == "dot":
        _reverse_dot(cx, b, args, ty, shadow, box, other)
    else:
        alpha, beta = (other.scalar(cx.avail(scalars[i]))  # as loaded then
                       for i in ((4, 8) if op == "gemv" else (6, 11)))
        alpha, beta = box.holding(alpha), box.holding(beta)
        one, zero = box.constant(1.0), box.constant(0.0)
        if op == "gemv":
            _reverse_gemv(cx, b, args, shadow, alpha, beta, one, zero, other)
        else:
            _reverse_gemm(b, fn, args, shadow, alpha, beta, one, zero, other)
    other.free_copies()


class _Other:
    """The operand an adjoint call multiplies the output's adjoint by, as the call takes it:
    for a real kind, as the primal call's transposition says; for a complex kind conjugated
    too, by BLAS's ``c`` where that transposes it, by a conjugated copy where it does not
    (freed after the calls)."""

    def __init__(self, module, b: IRBuilder, ty, op: str, args: list) -> None:
        self.module, self.b, self.ty, self.op, self.args = module, b, ty, op, args
        self.complex, self.copies = is_complex(ty), []

    def scalar(self, value):
        """alpha or beta as the adjoint calls take it: conjugated for a complex kind."""
        return conjugate(self.b, value) if self.complex else value

    def __call__(self, index: int, code: int):
        """(pointer, transposition code) of operand ``index`` taken as ``code`` says."""
        pointer = self.args[index]
        if not self.complex:
            return pointer, code
        if code == _T:
            return pointer, _C
        return self._conjugated(pointer, _operand_elements(self.b, self.args, self.op,
                                                           index)), code

    def _conjugated(self, pointer, count):
        copy = copy_of(self.module, self.b, pointer, _bytes(self.b, count, self.ty))
        self.copies.append(copy)
        self.b.call(_conjugate_function(self.module, self.ty.elements[0]), [count, copy])
        return copy

    def free_copies(self) -> None:
        """Free the conjugated copies, after the adjoint calls that read them."""
        for copy in self.copies:
            free(self.module, self.b, copy)


def _conjugate_function(module, part: T.Type):
    """``void conj(i64 n, ptr z)``: negates the imaginary parts of the ``n`` complex numbers
    at ``z`` (each two ``part`` floats), built once per module."""
    fn = module.get_function(Kernel.name("conj", part))
    if fn is not None:
        return fn
    k = Kernel(module, "conj", part, [("n", T.i64), ("z", T.ptr)])
    b = k.b

    def negate(i):
        imag = b.gep(part, k.arg("z"), [b.add(b.mul(i, const_int(T.i64, 2)),
                                             const_int(T.i64, 1))])
        b.store(b.fneg(b.load(part, imag)), imag)
    k.loop(k.n, negate)
    return k.finish()


def _reverse_dot(cx, b, args, ty, shadow, box, other) -> None:
    """``r = x . y``: ``x_bar += r_bar y``, ``y_bar += r_bar x`` (GEMVs with one column);
    complex: ``x_bar += r_bar conj(y)`` and ``y_bar += r_bar conj(x)``, or for ``vdot``
    (``r = conj(x) . y``) ``x_bar += conj(r_bar) y`` and ``y_bar += r_bar x``."""
    if 5 not in shadow:
        return
    rbar = b.load(ty, shadow[5])
    b.store(const_null(ty), shadow[5])
    n = args[2]
    one = box.constant(1.0)
    gemv = blas_function(cx.module, "gemv")
    ld = _at_least_one(b, n)
    vdot = is_complex(ty) and args[1].value != 0
    for target, source in ((3, 4), (4, 3)):
        if target not in shadow:
            continue
        if vdot:   # nothing conjugated but r_bar, for x
            alpha = box.holding(conjugate(b, rbar) if target == 3 else rbar)
            operand = args[source]
        else:
            alpha = box.holding(rbar)
            operand, _ = other(source, _N)
        _call(b, gemv, [args[0], const_int(T.i8, _N), n, const_int(T.i64, 1), alpha, operand,
                        ld, one, one, shadow[target]])


def _at_least_one(b: IRBuilder, v):
    return b.select(b.icmp("sgt", v, const_int(T.i64, 1)), v, const_int(T.i64, 1))


def _reverse_gemv(cx, b, args, shadow, alpha, beta, one, zero, other) -> None:
    """``y = alpha op(A) x + beta y``, ``A`` m x n: ``x_bar += alpha op(A)^T y_bar``,
    ``A_bar += alpha y_bar x^T`` (or ``x y_bar^T`` for ``op(A) = A^T``), ``y_bar *= beta``
    (conjugated for a complex kind: see :class:`_Other`)."""
    if 9 not in shadow:
        return
    kind, trans, m, n = args[0], args[1].value, args[2], args[3]
    a, lda, x, ybar = args[5], args[6], args[7], shadow[9]
    gemv, gemm = blas_function(cx.module, "gemv"), blas_function(cx.module, "gemm")
    if 7 in shadow:
        a_op, code = other(5, _flip(trans))
        _call(b, gemv, [kind, const_int(T.i8, code), m, n, alpha, a_op, lda, ybar, one,
                        shadow[7]])
    if 5 in shadow:
        # A_bar (m x n) += alpha * u v^T: u, v are y_bar and x, in the order op(A) says.
        if trans == _N:
            (u, ucode), (v, vcode) = (ybar, _N), other(7, _T)
        else:
            (u, ucode), (v, vcode) = other(7, _N), (ybar, _T)
        _call(b, gemm, [kind, const_int(T.i8, ucode), const_int(T.i8, vcode), m, n,
                        const_int(T.i64, 1), alpha, u, _at_least_one(b, m), v,
                        _at_least_one(b, n), one, shadow[5], lda])
    _call(b, gemv, [kind, args[1], m, n, zero, a, lda, x, beta, ybar])


def _reverse_gemm(b, gemm, args, shadow, alpha, beta, one, zero, other) -> None:
    """``C = alpha op(A) op(B) + beta C``: ``op(A)_bar += alpha C_bar op(B)^T``,
    ``op(B)_bar += alpha op(A)^T C_bar``, each written for the way A and B are stored;
    then ``C_bar *= beta`` (conjugated for a complex kind: see :class:`_Other`)."""
    if 12 not in shadow:
        return
    kind, ta, tb = args[0], args[1].value, args[2].value
    m, n, k = args[3], args[4], args[5]
    a, lda, bm, ldb, ldc = args[7], args[8], args[9], args[10], args[13]
    cbar = shadow[12]

    def t(code):
        return const_int(T.i8, code)

    if 7 in shadow:
        if ta == _N:   # A m x k: A_bar += alpha C_bar op(B)^T
            b_op, code = other(9, _flip(tb))
            _call(b, gemm, [kind, t(_N), t(code), m, k, n, alpha, cbar, ldc, b_op, ldb,
                            one, shadow[7], lda])
        else:          # A k x m: A_bar += alpha op(B) C_bar^T
            b_op, code = other(9, tb)
            _call(b, gemm, [kind, t(code), t(_T), k, m, n, alpha, b_op, ldb, cbar, ldc, one,
                            shadow[7], lda])
    if 9 in shadow:
        if tb == _N:   # B k x n: B_bar += alpha op(A)^T C_bar
            a_op, code = other(7, _flip(ta))
            _call(b, gemm, [kind, t(code), t(_N), k, n, m, alpha, a_op, lda, cbar, ldc, one,
                            shadow[9], ldb])
        else:          # B n x k: B_bar += alpha C_bar^T op(A)
            a_op, code = other(7, ta)
            _call(b, gemm, [kind, t(_T), t(code), n, k, m, alpha, cbar, ldc, a_op, lda, one,
                            shadow[9], ldb])
    _call(b, gemm, [kind, args[1], args[2], m, n, k, zero, a, lda, bm, ldb, beta, cbar, ldc])
