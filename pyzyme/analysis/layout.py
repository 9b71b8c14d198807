"""Sizes, alignments and field offsets of LLVM types under the x86-64 data layout.

Type analysis turns typed GEPs into byte offsets with these; they follow LLVM's rules for the
layout string Numba and clang use on x86-64 (natural alignment, ``x86_fp80`` in 16 bytes).

>>> from pyzyme.ir import parse_type
>>> sizeof(parse_type("{ i8, double }")), alignof(parse_type("<4 x float>"))
(16, 16)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pyzyme.errors import TypeAnalysisError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantInt

__all__ = ["alignof", "sizeof", "field_offset", "gep_offset", "scalar_at", "struct_layout"]

# x86-64 System V, the layout Numba and clang emit on this platform
# (e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128).
_FLOAT_ALIGN = {"half": 2, "bfloat": 2, "float": 4, "double": 8, "x86_fp80": 16, "fp128": 16,
                "ppc_fp128": 16}


#: Layouts of literal structs that name no other struct: their text says all of it. (A tape's
#: struct has a field per cached value; type analysis asks for its layout at every GEP into
#: it, and a Hessian-vector product of a prange loop spent seconds computing them again.)
_LAYOUTS: dict[str, tuple[tuple[int, ...], int]] = {}
_ALIGNS: dict[str, int] = {}


def _cache_key(ty: T.Type) -> str | None:
    """The key ``ty``'s layout is kept under: its text, where it is a literal struct naming
    no other struct (a named one's body may differ between modules); else None."""
    if type(ty) is not T.StructType:
        return None
    text = str(ty)
    return None if "%" in text else text


def _store_bytes(ty: T.Type) -> int:
    if isinstance(ty, T.IntType):
        return (ty.width + 7) // 8
    if isinstance(ty, T.FloatType):
        return {"x86_fp80": 10}.get(ty.kind, ty.bits // 8)
    if isinstance(ty, T.VectorType):
        return (ty.count * _store_bytes(ty.element) * 8 + 7) // 8
    return sizeof(ty)


def alignof(ty: T.Type) -> int:
    """ABI alignment of ``ty`` in bytes (x86-64).

    >>> from pyzyme import ir
    >>> [alignof(t) for t in (ir.i1, ir.i32, ir.i128, ir.double, ir.x86_fp80, ir.ptr)]
    [1, 4, 16, 8, 16, 8]
    """
    if isinstance(ty, T.IntType):
        return min(16, 1 << max(0, (ty.width - 1).bit_length() - 3)) if ty.width > 8 else 1
    if isinstance(ty, T.FloatType):
        return _FLOAT_ALIGN[ty.kind]
    if isinstance(ty, T.PointerType):
        return 8
    if isinstance(ty, T.VectorType):
        n = _store_bytes(ty)
        return 1 << max(0, (n - 1).bit_length())  # vectors: their size, rounded to a power of 2
    if isinstance(ty, T.ArrayType):
        return alignof(ty.element)
    if isinstance(ty, (T.StructType, T.IdentifiedStructType)):
        key = _cache_key(ty)
        if key in _ALIGNS:
            return _ALIGNS[key]
        if ty.elements is None:
            raise TypeAnalysisError(f"the opaque struct {ty} has no layout")
        a = 1 if ty.packed else max((alignof(e) for e in ty.elements), default=1)
        if key is not None:
            _ALIGNS[key] = a
        return a
    raise TypeAnalysisError(f"{ty} has no size")


def sizeof(ty: T.Type) -> int:
    """Allocation size of ``ty`` in bytes (x86-64): padding included, as a GEP steps.

    >>> from pyzyme import ir
    >>> [sizeof(t) for t in (ir.i1, ir.i64, ir.x86_fp80, ir.ptr)]
    [1, 8, 16, 8]
    >>> [sizeof(ir.parse_type(s)) for s in ("{ i32, double }", "<{ i32, double }>",
    ...                                     "[3 x { i64, i8 }]", "<3 x float>", "<4 x double>")]
    [16, 12, 48, 16, 32]
    """
    if isinstance(ty, (T.IntType, T.FloatType, T.PointerType, T.VectorType)):
        n, a = 8 if isinstance(ty, T.PointerType) else _store_bytes(ty), alignof(ty)
        return -(-n // a) * a
    if isinstance(ty, T.ArrayType):
        return ty.count * sizeof(ty.element)
    if isinstance(ty, (T.StructType, T.IdentifiedStructType)):
        offsets, end = struct_layout(ty)
        a = alignof(ty)
        return -(-end // a) * a
    raise TypeAnalysisError(f"{ty} has no size")


def struct_layout(ty) -> tuple[Sequence[int], int]:
    """The byte offset of each field of struct ``ty``, and the end of its last field."""
    key = _cache_key(ty)
    if key in _LAYOUTS:
        return _LAYOUTS[key]
    if ty.elements is None:
        raise TypeAnalysisError(f"the opaque struct {ty} has no layout")
    offsets, at = [], 0
    for e in ty.elements:
        if not ty.packed:
            a = alignof(e)
            at = -(-at // a) * a
        offsets.append(at)
        at += sizeof(e)
    if key is not None:
        _LAYOUTS[key] = (tuple(offsets), at)
    return offsets, at


def field_offset(ty: T.Type, indices: Sequence[int]) -> tuple[int, T.Type]:
    """Byte offset and type of the member of aggregate ``ty`` at constant ``indices``.

    >>> from pyzyme import ir
    >>> off, ty = field_offset(ir.parse_type("{ i32, [2 x double] }"), [1, 1])
    >>> print(off, ty)
    16 double
    """
    offset = 0
    for i in indices:
        if isinstance(ty, (T.ArrayType, T.VectorType)):
            offset += i * sizeof(ty.element)
            ty = ty.element
        else:
            offset += struct_layout(ty)[0][i]
            ty = ty.elements[i]
    return offset, ty


def gep_offset(inst: I.GetElementPtr) -> tuple[int, int]:
    """The constant part of a GEP's byte offset, and the gcd of its variable strides (0: none).

    >>> from pyzyme import ir
    >>> f = ir.parse_module("define ptr @f(ptr %p, i64 %i) {\\n"
    ...     "  %q = getelementptr { i32, [4 x double] }, ptr %p, i64 1, i32 1, i64 %i\\n"
    ...     "  ret ptr %q\\n}").get_function("f")
    >>> gep_offset(f.blocks[0].instructions[0])
    (48, 8)
    """
    ty = inst.source_type
    offset, stride = 0, 0
    for n, idx in enumerate(inst.indices):
        if n == 0:
            step, nxt = sizeof(ty), ty
        elif isinstance(ty, (T.ArrayType, T.VectorType)):
            step, nxt = sizeof(ty.element), ty.element
        else:  # a struct: the index is a constant
            offset += struct_layout(ty)[0][idx.value]
            ty = ty.elements[idx.value]
            continue
        if isinstance(idx, ConstantInt):
            offset += idx.value * step
        else:
            stride = math.gcd(stride, step)
        ty = nxt
    return offset, stride


def scalar_at(ty: T.Type, offset: int) -> T.Type | None:
    """The scalar member of ``ty`` that starts at byte ``offset``, or None (padding, the
    middle of a scalar, past the end, an opaque struct).

    >>> from pyzyme import ir
    >>> t = ir.parse_type("{ ptr, i64, [2 x double] }")
    >>> print(scalar_at(t, 8), scalar_at(t, 24), scalar_at(t, 12))
    i64 double None
    """
    while True:
        if isinstance(ty, (T.ArrayType, T.VectorType)):
            size = sizeof(ty.element)
            if not 0 <= offset < size * ty.count:
                return None
            ty, offset = ty.element, offset % size
        elif isinstance(ty, (T.StructType, T.IdentifiedStructType)):
            if ty.elements is None:
                return None
            starts, _ = struct_layout(ty)
            inside = [(s, e) for s, e in zip(starts, ty.elements) if s <= offset < s + sizeof(e)]
            if not inside:
                return None
            start, ty = inside[0]
            offset -= start
        else:
            return ty if offset == 0 else None
