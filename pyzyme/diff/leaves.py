"""What a type holds, as the derivative code asks it: floats (which carry adjoints and
tangents), pointers (which carry shadows), and the elements and scalar leaves of aggregates."""

from __future__ import annotations

from pyzyme.analysis.activity import contains_type
from pyzyme.ir import types as T

__all__ = ["has_float", "has_pointer", "elements", "leaves"]


def has_pointer(ty: T.Type) -> bool:
    """Whether ``ty`` is or holds a pointer (vectors and aggregates included)."""
    return contains_type(ty, lambda t: t.is_pointer)


def has_float(ty: T.Type) -> bool:
    """Whether ``ty`` is or holds a float (vectors and aggregates included)."""
    return contains_type(ty, lambda t: t.is_float)


def elements(ty: T.Type) -> list:
    """The element types of array or struct ``ty``, in order."""
    return [ty.element] * ty.count if isinstance(ty, T.ArrayType) else list(ty.elements)


def leaves(ty: T.Type) -> list:
    """The non-aggregate types inside ``ty`` (vectors count as leaves), in order."""
    if isinstance(ty, (T.ArrayType, T.StructType, T.IdentifiedStructType)) and \
            not ty.is_vector:
        return [leaf for e in elements(ty) for leaf in leaves(e)]
    return [ty]
