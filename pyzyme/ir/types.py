"""LLVM types.

Types are immutable and compared by structure, except identified (named) structs, which are
compared by name as LLVM does. Common types are module-level constants (``i64``, ``double``,
``ptr``); they are immutable values, not state.

Examples
--------
>>> str(ArrayType(4, IntType(8)))
'[4 x i8]'
>>> str(FunctionType(double, [ptr, i64]))
'double (ptr, i64)'
>>> IntType(64) == i64
True
"""

from __future__ import annotations

from collections.abc import Sequence


class Type:
    """Base of all LLVM types. ``str(t)`` is the type as LLVM prints it."""

    __slots__ = ("_text",)

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"<ir type {self._text}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Type) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple:
        return (type(self), self._text)

    # Classification helpers used by the builder's checks and by analyses.
    is_int = False
    is_float = False
    is_pointer = False
    is_vector = False
    is_aggregate = False
    is_first_class = True
    is_sized = True

    @property
    def scalar(self) -> Type:
        """The element type of a vector, else the type itself."""
        return self


class IntType(Type):
    """An integer type of ``width`` bits."""

    __slots__ = ("width",)
    is_int = True

    def __init__(self, width: int) -> None:
        self.width = width
        self._text = f"i{width}"


class FloatType(Type):
    """A floating-point type: half, bfloat, float, double, x86_fp80, fp128, ppc_fp128."""

    __slots__ = ("kind", "bits")
    is_float = True
    _BITS = {"half": 16, "bfloat": 16, "float": 32, "double": 64,
             "x86_fp80": 80, "fp128": 128, "ppc_fp128": 128}

    def __init__(self, kind: str) -> None:
        if kind not in self._BITS:
            raise ValueError(f"unknown floating-point type {kind!r}")
        self.kind = kind
        self.bits = self._BITS[kind]
        self._text = kind


class PointerType(Type):
    """An opaque pointer, optionally in a non-default address space."""

    __slots__ = ("addrspace",)
    is_pointer = True

    def __init__(self, addrspace: int = 0) -> None:
        self.addrspace = addrspace
        self._text = "ptr" if addrspace == 0 else f"ptr addrspace({addrspace})"


class VoidType(Type):
    __slots__ = ()
    is_first_class = False
    is_sized = False

    def __init__(self) -> None:
        self._text = "void"


class LabelType(Type):
    __slots__ = ()
    is_sized = False

    def __init__(self) -> None:
        self._text = "label"


class MetadataType(Type):
    __slots__ = ()
    is_sized = False

    def __init__(self) -> None:
        self._text = "metadata"


class TokenType(Type):
    __slots__ = ()
    is_sized = False

    def __init__(self) -> None:
        self._text = "token"


class OpaqueType(Type):
    """A type pyzyme does not interpret (``x86_amx``, ``target("...")``), kept as text."""

    __slots__ = ()
    is_sized = False

    def __init__(self, text: str) -> None:
        self._text = text


class VectorType(Type):
    """``<count x element>``, or ``<vscale x count x element>`` when scalable."""

    __slots__ = ("count", "element", "scalable")
    is_vector = True

    def __init__(self, count: int, element: Type, scalable: bool = False) -> None:
        self.count = count
        self.element = element
        self.scalable = scalable
        prefix = "vscale x " if scalable else ""
        self._text = f"<{prefix}{count} x {element}>"

    @property
    def scalar(self) -> Type:
        return self.element

    @property
    def is_int(self) -> bool:  # type: ignore[override]
        return self.element.is_int

    @property
    def is_float(self) -> bool:  # type: ignore[override]
        return self.element.is_float

    @property
    def is_pointer(self) -> bool:  # type: ignore[override]
        return self.element.is_pointer


class ArrayType(Type):
    """``[count x element]``."""

    __slots__ = ("count", "element")
    is_aggregate = True

    def __init__(self, count: int, element: Type) -> None:
        self.count = count
        self.element = element
        self._text = f"[{count} x {element}]"


class StructType(Type):
    """A literal struct ``{ a, b }`` or packed ``<{ a, b }>``."""

    __slots__ = ("elements", "packed")
    is_aggregate = True

    def __init__(self, elements: Sequence[Type], packed: bool = False) -> None:
        self.elements = tuple(elements)
        self.packed = packed
        body = "{ " + ", ".join(map(str, self.elements)) + " }" if self.elements else "{}"
        self._text = f"<{body}>" if packed else body


class IdentifiedStructType(Type):
    """A named struct ``%name``; its body is set by the module's type definition.

    ``elements`` is None while the struct is opaque.
    """

    __slots__ = ("name", "elements", "packed")
    is_aggregate = True

    def __init__(self, name: str) -> None:
        from pyzyme.ir.names import local_ref

        self.name = name
        self.elements: tuple[Type, ...] | None = None
        self.packed = False
        # An all-digit name is an unnamed type's number (%0 = type {...}) and stays bare.
        self._text = "%" + name if name.isdigit() else local_ref(name)

    def set_body(self, elements: Sequence[Type], packed: bool = False) -> None:
        self.elements = tuple(elements)
        self.packed = packed

    def _key(self) -> tuple:
        return (IdentifiedStructType, self.name)

    @property
    def is_sized(self) -> bool:  # type: ignore[override]
        return self.elements is not None

    def body_text(self) -> str:
        """The definition's right-hand side: ``type { ... }`` or ``type opaque``."""
        if self.elements is None:
            return "type opaque"
        return "type " + str(StructType(self.elements, self.packed))


class FunctionType(Type):
    """``ret (params...)``, with ``...`` when variadic."""

    __slots__ = ("ret", "params", "var_arg")
    is_first_class = False
    is_sized = False

    def __init__(self, ret: Type, params: Sequence[Type], var_arg: bool = False) -> None:
        self.ret = ret
        self.params = tuple(params)
        self.var_arg = var_arg
        parts = [str(p) for p in self.params] + (["..."] if var_arg else [])
        self._text = f"{ret} ({', '.join(parts)})"


i1 = IntType(1)
i8 = IntType(8)
i16 = IntType(16)
i32 = IntType(32)
i64 = IntType(64)
i128 = IntType(128)
half = FloatType("half")
bfloat = FloatType("bfloat")
float = FloatType("float")  # noqa: A001 - LLVM's name for the type
double = FloatType("double")
x86_fp80 = FloatType("x86_fp80")
fp128 = FloatType("fp128")
ppc_fp128 = FloatType("ppc_fp128")
ptr = PointerType(0)
void = VoidType()
label = LabelType()
metadata = MetadataType()
token = TokenType()

# Keyword types the parser looks up by their spelling.
KEYWORD_TYPES: dict[str, Type] = {
    str(t): t
    for t in (i1, i8, i16, i32, i64, i128, half, bfloat, float, double, x86_fp80, fp128,
              ppc_fp128, ptr, void, label, metadata, token)
}
KEYWORD_TYPES["x86_amx"] = OpaqueType("x86_amx")
