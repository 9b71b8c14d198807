"""Parsing of types, values and constants: a mixin of the module parser.

:mod:`pyzyme.ir.parser` provides the token helpers (``expect``, ``accept``, ``balanced``,
``span``, ...) and the symbol tables (``self.mod``, ``self.locals``) these methods use. Operands
are checked against the type written before them, so ``fmul i32 %a`` with a double ``%a`` is a
parse error at ``%a``.
"""

from __future__ import annotations

import re

from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.names import unescape
from pyzyme.ir.parse_instructions import BINOP_FLAGS, CAST_FLAGS, GEP_FLAGS
from pyzyme.ir.values import (
    ConstantAggregate,
    ConstantExpr,
    ConstantFP,
    ConstantInt,
    ConstantSplat,
    ConstantString,
    InlineAsm,
    NoneToken,
    Null,
    OpaqueConstant,
    Poison,
    Undef,
    Value,
    ZeroInitializer,
    float_from_hex,
)

_INT_TYPE = re.compile(r"i(\d+)\Z")
_TYPE_START_PUNCT = frozenset("[{<")
_SIMPLE_CONSTANTS = {"null": Null, "undef": Undef, "poison": Poison,
                     "zeroinitializer": ZeroInitializer, "none": NoneToken}
_OPAQUE_CONSTANT_WORDS = frozenset({"blockaddress", "dso_local_equivalent", "no_cfi",
                                    "ptrauth", "dso_local", "asm"})


class _Forward(Value):
    """A local used before its definition; replaced when the function is complete."""

    __slots__ = ("name", "offset")

    def __init__(self, type: T.Type, name: str, offset: int) -> None:  # noqa: A002
        super().__init__(type)
        self.name = name
        self.offset = offset

    @property
    def ref(self) -> str:
        return "%" + self.name


class ValueParser:
    """Types, values and constants (see the module docstring)."""

    def is_type_start(self) -> bool:
        kind, tok = self.kinds[self.i], self.texts[self.i]
        if kind == "word":
            return tok in T.KEYWORD_TYPES or _INT_TYPE.match(tok) is not None or tok == "target"
        if kind == "punct":
            return tok in _TYPE_START_PUNCT
        return kind == "local"

    def type(self) -> T.Type:
        kind, tok = self.kinds[self.i], self.texts[self.i]
        self.i += 1
        if kind == "word":
            ty = T.KEYWORD_TYPES.get(tok)
            if ty is None:
                m = _INT_TYPE.match(tok)
                if m:
                    ty = T.IntType(int(m.group(1)))
                elif tok == "target":
                    start = self.i - 1
                    self.balanced()
                    ty = T.OpaqueType(self.span(start))
                else:
                    self.i -= 1
                    raise self.error(f"expected a type, found {tok!r}")
            elif ty is T.ptr and self.texts[self.i] == "addrspace":
                self.i += 1
                self.expect("(")
                ty = T.PointerType(self.int_token())
                self.expect(")")
        elif kind == "punct" and tok == "[":
            count = self.int_token()
            self.expect("x")
            elem = self.type()
            self.expect("]")
            ty = T.ArrayType(count, elem)
        elif kind == "punct" and tok == "{":
            ty = T.StructType(self.type_list("}"))
        elif kind == "punct" and tok == "<":
            if self.accept("{"):
                elems = self.type_list("}")
                self.expect(">")
                ty = T.StructType(elems, packed=True)
            else:
                scalable = self.accept("vscale")
                if scalable:
                    self.expect("x")
                count = self.int_token()
                self.expect("x")
                elem = self.type()
                self.expect(">")
                ty = T.VectorType(count, elem, scalable)
        elif kind == "local":
            ty = self.mod.identified_struct(_name_of(tok))
        else:
            self.i -= 1
            raise self.error(f"expected a type, found {tok.strip() or 'end of line'!r}")
        if self.texts[self.i] == "*" and self.kinds[self.i] == "punct":
            raise self.error("typed pointers are not LLVM 22 IR; pass the text through "
                             "llvmlite.binding.parse_assembly first to upgrade it")
        return ty

    def type_list(self, close: str) -> list[T.Type]:
        return self.comma_list(close, self.type)

    def comma_list(self, close: str, item):
        """``item()`` repeated, separated by commas, up to and including ``close``; line breaks
        between items are allowed (hand-written IR splits long constants over lines)."""
        out = []
        self.skip_nl()
        if self.accept(close):
            return out
        while True:
            out.append(item())
            self.skip_nl()
            if self.accept(close):
                return out
            self.expect(",")
            self.skip_nl()

    def function_type_after(self, ret: T.Type) -> T.FunctionType:
        """Parse ``(params)`` after a return type, as in ``call i32 (ptr, ...) @printf``."""
        params, var_arg = self.parameter_list(self.type)
        return T.FunctionType(ret, params, var_arg)

    def parameter_list(self, item) -> tuple[list, bool]:
        """``(item, item, ...)``, possibly ending in ``...``: the items and whether it did."""
        self.expect("(")
        out: list = []
        if self.accept(")"):
            return out, False
        while True:
            if self.accept("..."):
                self.expect(")")
                return out, True
            out.append(item())
            if self.accept(")"):
                return out, False
            self.expect(",")

    # -- values ------------------------------------------------------------------------
    def typed_value(self) -> Value:
        return self.value(self.type())

    def value(self, ty: T.Type) -> Value:
        kind, tok = self.kinds[self.i], self.texts[self.i]
        self.i += 1
        if kind == "local":
            name = tok[1:] if tok[1] != '"' else unescape(tok[2:-1])
            v = self.locals.get(name)
            if v is None:
                v = self.forwards.get(name)
                if v is None:
                    v = self.forwards[name] = _Forward(ty, name, self.offsets[self.i - 1])
            if v.type is not ty and v.type != ty:
                raise self.error(f"%{name} is {v.type} but used as {ty}",
                                 self.offsets[self.i - 1])
            return v
        if kind == "num":
            if ty.is_int:
                return ConstantInt(ty, int(tok))
            if ty.is_float:
                return ConstantFP(ty, float(tok), tok)
            raise self.error(f"number {tok} is not a {ty} value", self.offsets[self.i - 1])
        if kind == "global":
            sym = self.mod._symbols.get(_name_of(tok))
            if sym is None:
                raise self.error(f"use of undefined global {tok}", self.offsets[self.i - 1])
            if not ty.is_pointer:
                raise self.error(f"global {tok} used as {ty}; globals are pointers",
                                 self.offsets[self.i - 1])
            return sym
        if kind == "word":
            if tok == "true" or tok == "false":
                if ty != T.i1:
                    raise self.error(f"{tok} is not a {ty} value", self.offsets[self.i - 1])
                return ConstantInt(ty, int(tok == "true"))
            simple = _SIMPLE_CONSTANTS.get(tok)
            if simple is not None:
                return simple(ty)
            self.i -= 1
            return self.constant_expr(ty)
        if kind == "hex":
            if ty.is_float:
                value = float_from_hex(tok) if tok[2] not in "KLMHR" and ty.kind in (
                    "double", "float") else float("nan")
                return ConstantFP(ty, value, tok)
            if ty.is_int:
                return ConstantInt(ty, int(tok[3:], 16) if tok[0] in "us" else int(tok, 16))
            raise self.error(f"{tok} is not a {ty} value", self.offsets[self.i - 1])
        if kind == "punct":
            if tok == "[":
                return ConstantAggregate(ty, self.constant_list("]"))
            if tok == "{":
                return ConstantAggregate(ty, self.constant_list("}"))
            if tok == "<":
                if self.accept("{"):
                    elems = self.constant_list("}")
                    self.expect(">")
                    return ConstantAggregate(ty, elems)
                return ConstantAggregate(ty, self.constant_list(">"))
        if kind == "cstr":
            return ConstantString(ty, tok[2:-1])
        self.i -= 1
        raise self.error(f"expected a value, found {tok.strip() or 'end of line'!r}")

    def constant_list(self, close: str) -> list[Value]:
        return self.comma_list(close, self.typed_value)

    def constant_expr(self, ty: T.Type) -> Value:
        start = self.i
        op = self.texts[self.i]
        self.i += 1
        if op in I.CASTS:
            flags = self.flags(CAST_FLAGS)
            self.expect("(")
            operand = self.typed_value()
            self.expect("to")
            to = self.type()
            self.expect(")")
            return ConstantExpr(op, to, [operand], flags=flags)
        if op == "getelementptr":
            flags = list(self.flags(GEP_FLAGS))
            while self.texts[self.i] == "inrange":
                s = self.i
                self.i += 1
                self.balanced()
                flags.append(self.span(s))
            self.expect("(")
            source = self.type()
            operands = []
            while self.accept(","):
                operands.append(self.typed_value())
            self.expect(")")
            return ConstantExpr(op, ty, operands, source_type=source, flags=flags)
        if op in I.INT_BINOPS:
            flags = self.flags(BINOP_FLAGS)
            self.expect("(")
            a = self.typed_value()
            self.expect(",")
            b = self.typed_value()
            self.expect(")")
            return ConstantExpr(op, ty, [a, b], flags=flags)
        if op == "splat":
            self.expect("(")
            elem = self.typed_value()
            self.expect(")")
            return ConstantSplat(ty, elem)
        if op in _OPAQUE_CONSTANT_WORDS or op in ("extractelement", "insertelement",
                                                   "shufflevector"):
            if op == "asm":
                return self.inline_asm(ty)
            while self.kinds[self.i] == "word":
                self.i += 1
            if self.texts[self.i] == "(":
                self.balanced()
            elif self.kinds[self.i] == "global":
                self.i += 1
            return OpaqueConstant(ty, self.span(start))
        self.i = start
        raise self.error(f"expected a value, found {op!r}")

    def inline_asm(self, ty: T.Type) -> Value:
        start = self.i - 1
        while self.kinds[self.i] == "word":
            self.i += 1
        self.string()
        self.expect(",")
        self.string()
        return InlineAsm(ty, self.span(start))

    def flags(self, allowed: frozenset) -> tuple[str, ...]:
        out = []
        texts = self.texts
        while texts[self.i] in allowed and self.kinds[self.i] == "word":
            out.append(texts[self.i])
            self.i += 1
        return tuple(out)


def _name_of(tok: str) -> str:
    """The unescaped name in a ``%name``, ``@"quoted"`` or ``label:`` token."""
    if tok[0] in "%@$":
        tok = tok[1:]
    if tok[:1] == '"':
        return unescape(tok[1:-1])
    return tok
