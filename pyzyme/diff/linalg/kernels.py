"""Building blocks for the derivatives of LAPACK's factorizations: internal functions of the
module being differentiated, made of Numba's BLAS/LAPACK helpers and O(n^2) loops.

The derivative rules of :mod:`pyzyme.diff.linalg.lu` and :mod:`pyzyme.diff.linalg.cholesky` are
each one call, at the call site, to a function built here once per module and element kind
(``pyzyme.lapack.getrf.reverse.d``). Inside, every O(n^3) step is a call to a helper Numba
exports (``numba_xxgemm`` for products, ``numba_ez_xxgetri`` for triangular inverses); loops only
move or mask O(n^2) elements (a triangle, a row permutation, a symmetric part). Keeping the work
in a function of its own keeps the control flow of the loops out of the function being
differentiated (the generators map its blocks one to one), and gives forward mode over a reverse
sweep (``hvp``) an ordinary function body to differentiate.

All matrices are n x n and column-major (as LAPACK stores them); the caller's buffers come with a
leading dimension, temporaries use n.
"""

from __future__ import annotations

from collections.abc import Callable

from pyzyme.diff.memory_calls import free
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import types as T
from pyzyme.ir.values import const_float, const_int, const_null
from pyzyme.rules.constructs import linalg_functions

__all__ = ["Kernel", "pivot_type", "element_type"]

_N, _T = ord("n"), ord("t")
_KIND_CHARS = {T.double: "d", T.float: "s"}


def element_type(inst, where: str) -> T.Type:
    """The element type of a LAPACK helper's call from its kind (argument 0): ``d`` or ``s``;
    complex kinds (``z``, ``c``) raise :class:`~pyzyme.UnsupportedError`."""
    kind = inst.args[0]
    name = inst.called_function.name
    ty = {ord(c): t for t, c in _KIND_CHARS.items()}.get(getattr(kind, "value", None))
    if ty is None:
        what = repr(chr(kind.value)) if hasattr(kind, "value") else "not a constant"
        err = UnsupportedError(
            f"{where}: no derivative for {inst.called_function.ref} "
            f"({linalg_functions(name)}) of kind {what}: only real matrices "
            f"(float64, float32) have LAPACK rules: {inst}",
            hint="differentiate a real formulation (real and imaginary parts as separate "
                 "float arrays)")
        err.callee = name  # the Numba layer finds the Python line
        raise err
    return ty


def pivot_type() -> T.Type:
    """LAPACK's integer (``F_INT`` of numba/_lapack.c): the element type of pivot arrays."""
    try:
        from numba.np.linalg import F_INT_nbtype
    except ImportError:  # Numba absent: the helpers are Numba's, so no call can reach here
        return T.i32
    return T.IntType(F_INT_nbtype.bitwidth)


class Kernel:
    """An internal ``void`` function being built, with n x n matrix operations.

    ``params`` are ``(name, type)`` pairs; one named ``n`` (an ``i64``) is the order of every
    matrix. Temporaries are allocated with :meth:`matrix` and freed by :meth:`finish`.

    Examples
    --------
    >>> from pyzyme import ir
    >>> m = ir.Module()
    >>> k = Kernel(m, "scale", T.double, [("n", T.i64), ("a", T.ptr), ("lda", T.i64)])
    >>> k.fill(k.arg("a"), k.arg("lda"), lambda i, j: const_float(T.double, 0.0))
    >>> k.finish().name
    'pyzyme.lapack.scale.d'
    """

    def __init__(self, module, name: str, ty: T.Type, params: list[tuple[str, T.Type]]) -> None:
        self.module, self.ty = module, ty
        self.kind = const_int(T.i8, ord(_KIND_CHARS[ty]))
        fnty = T.FunctionType(T.void, [t for _, t in params])
        self.fn = module.add_function(self.name(name, ty), fnty, prefix="internal")
        for arg, (pname, _) in zip(self.fn.args, params):
            arg.name = pname
        self._args = {pname: arg for arg, (pname, _) in zip(self.fn.args, params)}
        self.b = IRBuilder(self.fn.append_block("entry"))
        self.n = self._args["n"]
        self._temps: list = []
        self._scalars: dict[float, object] = {}

    @staticmethod
    def name(base: str, ty: T.Type) -> str:
        return f"pyzyme.lapack.{base}.{_KIND_CHARS[ty]}"

    def arg(self, name: str):
        return self._args[name]

    # -- memory ------------------------------------------------------------------------------
    def _malloc(self, count, size: int):
        fn = self.module.declare("malloc", T.FunctionType(T.ptr, [T.i64]))
        return self.b.call(fn, [self.b.mul(count, const_int(T.i64, size))], name="lapack.tmp")

    def matrix(self):
        """A temporary n x n matrix (leading dimension n), freed by :meth:`finish`."""
        m = self._malloc(self.b.mul(self.n, self.n), self.ty.bits // 8)
        self._temps.append(m)
        return m

    def finish(self):
        """Free the temporaries and return; the function built."""
        for m in self._temps:
            free(self.module, self.b, m)
        self.b.ret_void()
        return self.fn

    def at(self, p, ld, i, j, transposed: bool = False):
        """The address of element (i, j) of ``p`` (of (j, i) when ``transposed``)."""
        if transposed:
            i, j = j, i
        return self.b.gep(self.ty, p, [self.b.add(i, self.b.mul(j, ld))])

    def get(self, p, ld, i, j, transposed: bool = False):
        return self.b.load(self.ty, self.at(p, ld, i, j, transposed))

    def constant(self, value: float):
        return const_float(self.ty, value)

    # -- loops -----------------------------------------------------------------------------
    def loop(self, count, body: Callable[[object], None], label: str = "i") -> None:
        """``for i in range(count): body(i)``; ``body`` may build loops of its own."""
        b, fn = self.b, self.fn
        head = b.block
        block, done = fn.append_block(f"{label}.loop"), fn.append_block(f"{label}.done")
        zero = const_int(T.i64, 0)
        b.cbranch(b.icmp("sgt", count, zero), block, done)
        b.position_at_end(block)
        i = b.phi(T.i64, name=label)
        i.add_incoming(zero, head)
        body(i)
        following = b.add(i, const_int(T.i64, 1))
        i.add_incoming(following, b.block)
        b.cbranch(b.icmp("slt", following, count), block, done)
        b.position_at_end(done)

    def fill(self, dst, ld, value: Callable[[object, object], object],
             transposed: bool = False) -> None:
        """``dst[i, j] = value(i, j)`` for every element (column by column); ``value`` emits
        straight-line code (a ``select`` where it depends on the triangle)."""
        def column(j):
            self.loop(self.n, lambda i: self.b.store(value(i, j),
                                                     self.at(dst, ld, i, j, transposed)), "row")
        self.loop(self.n, column, "col")

    def triangle(self, src, ld, part: str, diagonal: float | None = None,
                 transposed: bool = False):
        """A new matrix holding one triangle of ``src`` and zeros elsewhere: ``part`` is
        ``"lower"`` (strictly below the diagonal) or ``"upper"`` (the diagonal included);
        ``diagonal``, when given, is written on the diagonal instead."""
        out = self.matrix()
        self.fill(out, self.n, lambda i, j: self.pick_triangle(src, ld, i, j, part, diagonal,
                                                               transposed))
        return out

    def pick_triangle(self, src, ld, i, j, part: str, diagonal: float | None = None,
                      transposed: bool = False):
        b = self.b
        zero = self.constant(0.0)
        inside = b.icmp("sgt" if part == "lower" else "sle", i, j)
        value = b.select(inside, self.get(src, ld, i, j, transposed), zero)
        if diagonal is not None:
            value = b.select(b.icmp("eq", i, j), self.constant(diagonal), value)
        return value

    def permute_rows(self, p, ld, ipiv, backward: bool) -> None:
        """LAPACK's row interchanges of ``ipiv`` (1-based: row k was swapped with row
        ``ipiv[k]``) applied to ``p``: in order (``P^T p``, as the factorization applied them)
        or, when ``backward``, in reverse order (``P p``)."""
        b, n = self.b, self.n
        pty = pivot_type()
        one = const_int(T.i64, 1)

        def step(k):
            row = b.sub(b.sub(n, one), k) if backward else k
            pivot = b.load(pty, b.gep(pty, ipiv, [row]))
            if pty != T.i64:
                pivot = b.sext(pivot, T.i64)
            other = b.sub(pivot, one)

            def swap(j):
                first, second = self.at(p, ld, row, j), self.at(p, ld, other, j)
                x, y = b.load(self.ty, first), b.load(self.ty, second)
                b.store(y, first)
                b.store(x, second)
            self.loop(n, swap, "col")
        self.loop(n, step, "pivot")

    # -- BLAS and LAPACK -------------------------------------------------------------------
    def _scalar(self, value: float):
        slot = self._scalars.get(value)
        if slot is None:
            slot = self.b.entry_alloca(self.ty, name="lapack.scalar")
            store_at = IRBuilder()  # set once, in the entry block: loops reuse the slot
            store_at.position_after(slot)
            store_at.store(self.constant(value), slot)
            if self.b.block is slot.parent:
                self.b.index += 1
            self._scalars[value] = slot
        return slot

    def gemm_general(self, ta: str, tb: str, m, n, k, alpha, a, lda, b_, ldb, beta, c,
                     ldc) -> None:
        """``c = alpha op(a) op(b) + beta c``, ``op(a)`` m x k, for any shapes; ``alpha`` and
        ``beta`` are values (stored where the call is made)."""
        params = [T.i8, T.i8, T.i8, T.i64, T.i64, T.i64, T.ptr, T.ptr, T.i64, T.ptr, T.i64,
                  T.ptr, T.ptr, T.i64]
        fn = self.module.declare("numba_xxgemm", T.FunctionType(T.i32, params))
        slots = []
        for value in (alpha, beta):
            slot = self.b.entry_alloca(self.ty, name="blas.scalar")
            self.b.store(value, slot)
            slots.append(slot)
        self.b.call(fn, [self.kind, const_int(T.i8, ord(ta)), const_int(T.i8, ord(tb)), m, n,
                         k, slots[0], a, lda, b_, ldb, slots[1], c, ldc])

    def when(self, cond, then: Callable[[], None],
             otherwise: Callable[[], None] | None = None) -> None:
        """``if cond: then() else: otherwise()``; either may build control flow of its own."""
        b, fn = self.b, self.fn
        yes, no, done = (fn.append_block(s) for s in ("then", "else", "endif"))
        b.cbranch(cond, yes, no)
        for block, body in ((yes, then), (no, otherwise)):
            b.position_at_end(block)
            if body is not None:
                body()
            b.br(done)
        b.position_at_end(done)

    def if_else(self, cond, then: Callable[[], object], otherwise: Callable[[], object]):
        """The value of ``then()`` where ``cond``, else of ``otherwise()`` (a phi)."""
        b = self.b
        results = []

        def branch(body):
            def run():
                results.append((body(), b.block))
            return run
        self.when(cond, branch(then), branch(otherwise))
        phi = b.phi(self.ty)
        for value, block in results:
            phi.add_incoming(value, block)
        return phi

    def gemm(self, ta: str, tb: str, alpha: float, a, lda, b_, ldb, beta: float, c,
             ldc) -> None:
        """``c = alpha op(a) op(b) + beta c`` (all n x n), by ``numba_xxgemm``."""
        params = [T.i8, T.i8, T.i8, T.i64, T.i64, T.i64, T.ptr, T.ptr, T.i64, T.ptr, T.i64,
                  T.ptr, T.ptr, T.i64]
        fn = self.module.declare("numba_xxgemm", T.FunctionType(T.i32, params))
        n = self.n
        self.b.call(fn, [self.kind, const_int(T.i8, ord(ta)), const_int(T.i8, ord(tb)), n, n,
                         n, self._scalar(alpha), a, lda, b_, ldb, self._scalar(beta), c, ldc])

    def identity_pivots(self):
        """A pivot array 1, 2, ..., n (no interchanges), freed by :meth:`finish`."""
        pty = pivot_type()
        piv = self._malloc(self.n, pty.width // 8)
        self._temps.append(piv)
        b = self.b
        self.loop(self.n, lambda k: b.store(
            b.trunc(b.add(k, const_int(T.i64, 1)), pty) if pty != T.i64 else
            b.add(k, const_int(T.i64, 1)), b.gep(pty, piv, [k])), "k")
        return piv

    def getri(self, packed, ipiv):
        """``packed`` (n x n, leading dimension n) := the inverse of ``P L U`` it and ``ipiv``
        describe, by ``numba_ez_xxgetri``; the returned ``i32`` is nonzero when ``U`` is
        singular. With identity pivots and ``L = I`` (zeros below the diagonal) this inverts
        an upper triangle; with ``U = I`` a unit lower one."""
        fn = self.module.declare("numba_ez_xxgetri", T.FunctionType(
            T.i32, [T.i8, T.i64, T.ptr, T.i64, T.ptr]))
        return self.b.call(fn, [self.kind, self.n, packed, self.n, ipiv], name="lapack.info")

    def nan_if(self, failed, dst, ld, keep: Callable[[object, object], object] | None = None
               ) -> None:
        """Where ``failed`` (an ``i1``): fill ``dst`` with NaN (the derivative at a singular
        matrix, where a triangular inverse failed), except where ``keep(i, j)`` is true."""
        b, fn = self.b, self.fn
        bad, done = fn.append_block("singular"), fn.append_block("regular")
        b.cbranch(failed, bad, done)
        b.position_at_end(bad)
        nan = self.constant(float("nan"))

        def value(i, j):
            if keep is None:
                return nan
            return b.select(keep(i, j), self.get(dst, ld, i, j), nan)
        self.fill(dst, ld, value)
        b.br(done)
        b.position_at_end(done)

    def failed(self, *statuses):
        b = self.b
        flag = None
        for s in statuses:
            bad = b.icmp("ne", s, const_null(T.i32))
            flag = bad if flag is None else b.or_(flag, bad)
        return flag
