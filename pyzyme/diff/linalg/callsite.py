"""What the BLAS and LAPACK rules share at a call site of one of Numba's helpers: constant
arguments read, the element type from the kind argument, how many elements a column-major
operand spans, scalars passed by pointer, the BLAS helpers declared, and heap copies of
operands (kept for the reverse sweep and released after it, or freed at once)."""

from __future__ import annotations

from pyzyme.diff.memory_calls import free_function, malloc, memcpy
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import (ConstantAggregate, ConstantInt, Value, const_float, const_int,
                              const_null)
from pyzyme.rules.constructs import linalg_functions

__all__ = ["constant_arg", "blas_element_type", "is_complex", "element_bytes", "conjugate",
           "extent", "Scalars", "blas_function", "allocate", "copy_of", "free_later"]

_KINDS = {ord("d"): T.double, ord("s"): T.float}
# Numba's complex128 and complex64, as its helpers store them.
_COMPLEX_KINDS = {ord("z"): T.StructType([T.double, T.double]),
                  ord("c"): T.StructType([T.float, T.float])}
# Numba's BLAS helpers (numba/_lapack.c), by the op of their rows.
_SIGNATURES = {
    "dot": ("numba_xxdot", [T.i8, T.i8, T.i64, T.ptr, T.ptr, T.ptr]),
    "gemv": ("numba_xxgemv", [T.i8, T.i8, T.i64, T.i64, T.ptr, T.ptr, T.i64, T.ptr, T.ptr,
                              T.ptr]),
    "gemm": ("numba_xxgemm", [T.i8, T.i8, T.i8, T.i64, T.i64, T.i64, T.ptr, T.ptr, T.i64,
                              T.ptr, T.i64, T.ptr, T.ptr, T.i64]),
}

# Numba's helpers that call BLAS (the rest call LAPACK), for error messages.
_BLAS = {name for name, _ in _SIGNATURES.values()} | {"numba_xxnrm2"}


def constant_arg(inst: I.CallBase, index: int, where: str, what: str) -> int:
    """The value of argument ``index`` of ``inst``, which must be a constant (``what`` names
    it in the error otherwise)."""
    v = inst.args[index]
    if not isinstance(v, ConstantInt):
        raise UnsupportedError(f"{where}: the {what} of {inst.called_function.ref} is not a "
                               f"constant: {inst}")
    return v.value


def blas_element_type(inst: I.CallBase, where: str, complex_kinds: bool = False) -> T.Type:
    """The element type of a BLAS call; its kind and transpose flags must be constants, its
    kind real (``d`` or ``s``), or, with ``complex_kinds``, complex (``z``, ``c``: a struct of
    two floats)."""
    for index in {"numba_xxgemv": (1,), "numba_xxgemm": (1, 2)}.get(
            inst.called_function.name, ()):
        constant_arg(inst, index, where, "transpose flag")
    kind = constant_arg(inst, 0, where, "kind")
    ty = _KINDS.get(kind) or (_COMPLEX_KINDS.get(kind) if complex_kinds else None)
    if ty is None:
        err = UnsupportedError(
            f"{where}: no derivative for {inst.called_function.ref} of kind {chr(kind)!r} "
            f"(complex {'BLAS' if inst.called_function.name in _BLAS else 'LAPACK'}, from "
            f"{linalg_functions(inst.called_function.name)}): {inst}",
            hint="differentiate a real formulation (real and imaginary parts as separate "
                 "float arrays)")
        err.callee = inst.called_function.name  # the Numba layer finds the Python line
        raise err
    return ty


def is_complex(ty: T.Type) -> bool:
    """Whether BLAS element type ``ty`` is complex (a struct of two floats)."""
    return isinstance(ty, T.StructType)


def element_bytes(ty: T.Type) -> int:
    """The size of one element of BLAS element type ``ty``."""
    return 2 * element_bytes(ty.elements[0]) if is_complex(ty) else ty.bits // 8


def conjugate(b: IRBuilder, value: Value) -> Value:
    """The complex conjugate of ``value`` (a struct of two floats)."""
    return b.insertvalue(value, b.fneg(b.extractvalue(value, 1)), 1)


def extent(b: IRBuilder, ld: Value, cols: Value, rows: Value) -> Value:
    """How many elements a column-major ``rows`` x ``cols`` operand with leading dimension
    ``ld`` spans: ``ld * (cols - 1) + rows`` (0 without columns)."""
    last = b.mul(ld, b.sub(cols, const_int(T.i64, 1)))
    total = b.add(last, rows)
    return b.select(b.icmp("eq", cols, const_int(T.i64, 0)), const_int(T.i64, 0), total)


class Scalars:
    """Scalars passed by pointer (alpha and beta of the derivative calls): one stack slot each,
    in the entry block, set where the call is made."""

    def __init__(self, b: IRBuilder, ty: T.Type) -> None:
        self.b, self.ty = b, ty

    def constant(self, value: float):
        """A slot holding the constant ``value`` (real: its imaginary part zero)."""
        if is_complex(self.ty):
            part = self.ty.elements[0]
            return self.holding(ConstantAggregate(self.ty, [const_float(part, value),
                                                            const_float(part, 0.0)]))
        return self.holding(const_float(self.ty, value))

    def holding(self, value):
        """A slot holding ``value``."""
        slot = self.b.entry_alloca(self.ty, name="blas.scalar")
        self.b.store(value, slot)
        return slot


def blas_function(module, op: str):
    """Numba's BLAS helper for ``op`` (``"dot"``, ``"gemv"``, ``"gemm"``), declared."""
    name, params = _SIGNATURES[op]
    return module.declare(name, T.FunctionType(T.i32, params))


def allocate(module, b: IRBuilder, nbytes: Value) -> Value:
    """A heap block of ``nbytes`` for an operand's copy or a work matrix."""
    return malloc(module, b, nbytes, "blas.operand")


def copy_of(module, b: IRBuilder, src: Value, nbytes: Value) -> Value:
    """A heap copy of the ``nbytes`` at ``src``."""
    dest = allocate(module, b, nbytes)
    memcpy(module, b, dest, src, nbytes)
    return dest


def free_later(cx, pointer: Value) -> None:
    """In reverse mode's forward sweep: free ``pointer`` once the reverse sweep is done."""
    free = free_function(cx.module)
    cx.release_later(I.Call(free, [pointer], free.function_type), pointer, const_null(T.ptr))
