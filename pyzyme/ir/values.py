"""Values: everything an instruction can take as an operand.

A :class:`Value` has a type and, when it can be named and used (arguments, instructions, basic
blocks, globals), a list of its users. Constants are plain immutable objects: like LLVM they can
be shared, and unlike LLVM they do not track users (a use of a constant is found from the user).

Examples
--------
>>> from pyzyme.ir import types as T
>>> const_int(T.i64, -3).ref
'-3'
>>> const_float(T.double, 0.5).ref
'5.000000e-01'
>>> ConstantExpr("getelementptr", T.ptr, [Null(T.ptr), const_int(T.i64, 8)],
...              source_type=T.i8, flags=("inbounds",)).ref
'getelementptr inbounds (i8, ptr null, i64 8)'
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

from pyzyme.ir import types as T
from pyzyme.ir.names import global_ref, local_ref


class Value:
    """Base of every operand. ``ref`` is how the value is written as an operand."""

    __slots__ = ("type",)

    def __init__(self, type: T.Type) -> None:  # noqa: A002 - LLVM's word
        self.type = type

    @property
    def ref(self) -> str:
        raise NotImplementedError

    def typed_ref(self) -> str:
        return f"{self.type} {self.ref}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.typed_ref()}>"


class NamedValue(Value):
    """A value with a (possibly empty) local or global name and a list of users.

    ``users`` holds one entry per use, so an instruction using a value twice appears twice.
    """

    __slots__ = ("name", "users")

    def __init__(self, type: T.Type, name: str = "") -> None:  # noqa: A002
        super().__init__(type)
        self.name = name
        self.users: list = []

    def replace_all_uses_with(self, new: Value) -> None:
        """Make every user of this value use ``new`` instead."""
        for user in list(self.users):
            user.replace_uses_of(self, new)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.type} {self.name or '(unnamed)'}>"

    @property
    def ref(self) -> str:
        if not self.name:
            raise ValueError("unnamed value has no reference outside a printed function")
        return local_ref(self.name)


class Argument(NamedValue):
    """A function parameter; ``attrs`` is its parameter-attribute text, carried verbatim."""

    __slots__ = ("function", "index", "attrs")

    def __init__(self, function, type: T.Type, index: int, name: str = "",  # noqa: A002
                 attrs: str = "") -> None:
        super().__init__(type, name)
        self.function = function
        self.index = index
        self.attrs = attrs


# ----------------------------------------------------------------------------------- constants

class Constant(Value):
    """A value known at compile time."""

    __slots__ = ()


class ConstantInt(Constant):
    __slots__ = ("value",)

    def __init__(self, type: T.Type, value: int) -> None:  # noqa: A002
        super().__init__(type)
        self.value = value

    @property
    def signed(self) -> int:
        """The value read as a signed integer of the type's width (``i8 255`` is -1)."""
        bits = self.type.width
        return self.value - (1 << bits) if self.value >= 1 << (bits - 1) else self.value

    @property
    def ref(self) -> str:
        if self.type.width == 1:
            return "true" if self.value else "false"
        return str(self.value)


class ConstantFP(Constant):
    """A floating constant. ``text`` keeps the spelling it was parsed from, so a round trip
    reproduces it; built constants print as LLVM does (decimal when exact, else hex)."""

    __slots__ = ("value", "text")

    def __init__(self, type: T.Type, value: float, text: str | None = None) -> None:  # noqa: A002
        super().__init__(type)
        self.value = value
        self.text = text if text is not None else _format_float(type, value)

    @property
    def ref(self) -> str:
        return self.text


def _format_float(type: T.Type, value: float) -> str:  # noqa: A002
    kind = type.kind
    if kind not in ("double", "float"):
        raise ValueError(f"cannot spell a {kind} constant; give its text")
    if kind == "float":
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    if math.isfinite(value):
        decimal = f"{value:.6e}"
        if float(decimal) == value:
            return decimal
    # LLVM spells float constants as the hex of the double they widen to.
    return "0x%X" % struct.unpack("<Q", struct.pack("<d", value))[0]


def float_from_hex(text: str) -> float:
    """The value of LLVM's ``0x...`` double-precision hex spelling."""
    return struct.unpack("<d", struct.pack("<Q", int(text[2:], 16)))[0]


class Null(Constant):
    __slots__ = ()
    ref = "null"  # type: ignore[assignment]


class NoneToken(Constant):
    __slots__ = ()
    ref = "none"  # type: ignore[assignment]


class Undef(Constant):
    __slots__ = ()
    ref = "undef"  # type: ignore[assignment]


class Poison(Constant):
    __slots__ = ()
    ref = "poison"  # type: ignore[assignment]


class ZeroInitializer(Constant):
    __slots__ = ()
    ref = "zeroinitializer"  # type: ignore[assignment]


class ConstantAggregate(Constant):
    """An array ``[...]``, struct ``{ ... }`` / ``<{ ... }>`` or vector ``<...>`` constant."""

    __slots__ = ("elements",)

    def __init__(self, type: T.Type, elements: Sequence[Constant]) -> None:  # noqa: A002
        super().__init__(type)
        self.elements = tuple(elements)

    @property
    def ref(self) -> str:
        body = ", ".join(e.typed_ref() for e in self.elements)
        ty = self.type
        if ty.is_vector:
            return f"<{body}>"
        if isinstance(ty, T.ArrayType):
            return f"[{body}]"
        packed = ty.packed
        inner = "{ " + body + " }" if body else "{}"
        return f"<{inner}>" if packed else inner


class ConstantString(Constant):
    """``c"..."``; ``text`` is the escaped body between the quotes."""

    __slots__ = ("text",)

    def __init__(self, type: T.Type, text: str) -> None:  # noqa: A002
        super().__init__(type)
        self.text = text

    @property
    def ref(self) -> str:
        return f'c"{self.text}"'


class ConstantExpr(Constant):
    """A constant expression: a cast, a getelementptr or a binary operator on constants."""

    __slots__ = ("opcode", "operands", "source_type", "flags")

    def __init__(self, opcode: str, type: T.Type, operands: Sequence[Constant],  # noqa: A002
                 source_type: T.Type | None = None, flags: Sequence[str] = ()) -> None:
        super().__init__(type)
        self.opcode = opcode
        self.operands = tuple(operands)
        self.source_type = source_type
        self.flags = tuple(flags)

    @property
    def ref(self) -> str:
        head = " ".join((self.opcode,) + self.flags)
        if self.opcode == "getelementptr":
            args = ", ".join([str(self.source_type)] + [o.typed_ref() for o in self.operands])
            return f"{head} ({args})"
        if len(self.operands) == 1:
            return f"{head} ({self.operands[0].typed_ref()} to {self.type})"
        return f"{head} ({', '.join(o.typed_ref() for o in self.operands)})"


class ConstantSplat(Constant):
    """``splat (<ty> <c>)``: a vector whose every element is ``element``."""

    __slots__ = ("element",)

    def __init__(self, type: T.Type, element: Constant) -> None:  # noqa: A002
        super().__init__(type)
        self.element = element

    @property
    def ref(self) -> str:
        return f"splat ({self.element.typed_ref()})"


class _Verbatim:
    """A value pyzyme carries as its source text, which is also its reference."""

    __slots__ = ()

    @property
    def ref(self) -> str:
        return self.text


class OpaqueConstant(_Verbatim, Constant):
    """A constant pyzyme carries as text (``blockaddress``, ``dso_local_equivalent``, ...)."""

    __slots__ = ("text",)

    def __init__(self, type: T.Type, text: str) -> None:  # noqa: A002
        super().__init__(type)
        self.text = text


class MetadataValue(_Verbatim, Value):
    """A metadata operand of a call (``metadata !5``, ``metadata i64 0``), kept as text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        super().__init__(T.metadata)
        self.text = text


class InlineAsm(_Verbatim, Value):
    """``asm [sideeffect] "code", "constraints"`` as the callee of a call; kept as text."""

    __slots__ = ("text",)

    def __init__(self, type: T.Type, text: str) -> None:  # noqa: A002
        super().__init__(type)
        self.text = text


# ------------------------------------------------------------------------------------ globals

class GlobalValue(NamedValue):
    """A function, global variable, alias or ifunc: a module-level named pointer."""

    __slots__ = ("module",)

    def __init__(self, name: str, addrspace: int = 0) -> None:
        super().__init__(T.PointerType(addrspace) if addrspace else T.ptr, name)
        self.module = None

    @property
    def ref(self) -> str:
        return global_ref(self.name)


class Linked:
    """The linkage of a global whose ``prefix`` text holds it (variables and functions)."""

    __slots__ = ()

    @property
    def linkage(self) -> str:
        return _linkage_of(self.prefix)

    @linkage.setter
    def linkage(self, value: str) -> None:
        self.prefix = with_linkage(self.prefix, value)


class GlobalVariable(Linked, GlobalValue):
    """``@name = <linkage...> global|constant <type> [<initializer>][, <attributes>]``.

    ``prefix`` is the text between ``=`` and ``global``/``constant`` (linkage, visibility,
    thread_local, unnamed_addr, addrspace, externally_initialized), ``suffix`` the text after
    the initializer (section, comdat, align, metadata): both carried verbatim.
    """

    __slots__ = ("value_type", "initializer", "is_constant", "prefix", "suffix")

    def __init__(self, name: str, value_type: T.Type | None = None,
                 initializer: Constant | None = None, *, is_constant: bool = False,
                 prefix: str = "", suffix: str = "", addrspace: int = 0) -> None:
        super().__init__(name, addrspace)
        self.value_type = value_type
        self.initializer = initializer
        self.is_constant = is_constant
        self.prefix = prefix
        self.suffix = suffix

    @property
    def is_declaration(self) -> bool:
        return self.initializer is None

    def __str__(self) -> str:
        parts = [f"{self.ref} ="]
        if self.prefix:
            parts.append(self.prefix)
        parts.append("constant" if self.is_constant else "global")
        parts.append(str(self.value_type))
        if self.initializer is not None:
            parts.append(self.initializer.ref)
        text = " ".join(parts)
        return f"{text}{self.suffix}"


class GlobalAlias(GlobalValue):
    """``@name = ... alias|ifunc ...``: carried verbatim; ``text`` is everything after ``=``."""

    __slots__ = ("text",)

    def __init__(self, name: str, text: str = "") -> None:
        super().__init__(name)
        self.text = text

    def __str__(self) -> str:
        return f"{self.ref} = {self.text}"


LINKAGES = frozenset({
    "private", "internal", "available_externally", "linkonce", "weak", "common", "appending",
    "extern_weak", "linkonce_odr", "weak_odr", "external",
})


def _linkage_of(prefix: str) -> str:
    for word in prefix.split():
        if word in LINKAGES:
            return word
    return "external"


def with_linkage(prefix: str, linkage: str) -> str:
    """``prefix`` (the text before a global's type) with its linkage replaced by ``linkage``.

    Visibility and DLL storage must go with local linkage, so they are dropped with it.

    >>> with_linkage("linkonce_odr hidden", "internal")
    'internal'
    >>> with_linkage("dso_local", "external")
    'dso_local'
    """
    if linkage not in LINKAGES:
        raise ValueError(f"unknown linkage {linkage!r}")
    drop = LINKAGES | ({"hidden", "protected", "default", "dllimport", "dllexport"}
                       if linkage in ("internal", "private") else set())
    words = [w for w in prefix.split() if w not in drop]
    if linkage != "external":
        words.insert(0, linkage)
    return " ".join(words)


# ------------------------------------------------------------------------- constant builders

def const_int(type: T.Type, value: int) -> ConstantInt:  # noqa: A002
    """An integer constant, wrapped to the type's width as a signed value."""
    if not type.is_int or type.is_vector:
        raise TypeError(f"const_int needs an integer type, got {type}")
    width = type.width
    value &= (1 << width) - 1
    if width > 1 and value >= 1 << (width - 1):
        value -= 1 << width
    return ConstantInt(type, value)


def const_float(type: T.Type, value: float) -> ConstantFP:  # noqa: A002
    """A floating constant of ``type`` (float or double)."""
    if not type.is_float or type.is_vector:
        raise TypeError(f"const_float needs a floating type, got {type}")
    return ConstantFP(type, float(value))


def const_c_string(text: str) -> ConstantString:
    """``text`` as a C string: its UTF-8 bytes and a terminating zero, as ``c"..."``.

    >>> c = const_c_string('say "hi"\\n')
    >>> print(c.type, c.ref)
    [10 x i8] c"say \\22hi\\22\\0A\\00"
    """
    data = text.encode() + b"\0"
    body = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                   for c in data)
    return ConstantString(T.ArrayType(len(data), T.i8), body)


def const_null(type: T.Type) -> Constant:  # noqa: A002
    """The all-zero value of ``type``: 0, 0.0, null or zeroinitializer."""
    if type.is_vector or type.is_aggregate:
        return ZeroInitializer(type)
    if type.is_int:
        return ConstantInt(type, 0)
    if type.is_float:
        return ConstantFP(type, 0.0, "0.000000e+00")
    if type.is_pointer:
        return Null(type)
    if isinstance(type, T.TokenType):
        return NoneToken(type)
    raise TypeError(f"no zero value of type {type}")
