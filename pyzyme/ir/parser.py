"""LLVM IR text to a :class:`~pyzyme.ir.module.Module`.

A recursive-descent parser over the token lists of :mod:`pyzyme.ir.lexer`. It reads what LLVM 22
prints (and, through llvmlite, anything older that LLVM upgrades). What pyzyme does not interpret
(attribute groups, metadata, comdats, function and parameter attributes) is kept as the exact
source text. Malformed input raises :class:`~pyzyme.ParseError` with line, column and a caret;
no other exception escapes.

Examples
--------
>>> m = parse_module('''
... define double @sq(double %x) {
... entry:
...   %y = fmul double %x, %x
...   ret double %y
... }''')
>>> print(m.get_function("sq").blocks[0].instructions[0])
fmul double %x, %x
"""

from __future__ import annotations

import gc
import re

from pyzyme.errors import IRTypeError, ParseError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.lexer import tokenize
from pyzyme.ir.parse_instructions import InstructionParser
from pyzyme.ir.parse_values import ValueParser, _Forward, _name_of
from pyzyme.ir.module import BasicBlock, Function, Module
from pyzyme.ir.names import unescape
from pyzyme.ir.values import (
    GlobalAlias,
    GlobalVariable,
    NamedValue,
    Value,
)

_FUNC_HEAD = re.compile(
    r'^[ \t]*(?:define|declare)\b[^\n]*?@("[^"\n]*"|[-a-zA-Z$._0-9]+)\(', re.M)
_GLOBAL_HEAD = re.compile(
    r'^[ \t]*@("[^"\n]*"|[-a-zA-Z$._0-9]+)\s*=\s*(?:[^\n]*?\b(alias|ifunc)\b)?', re.M)
_ADDRSPACE = re.compile(r"addrspace\((\d+)\)")


def parse_module(text: str, name: str = "") -> Module:
    """Parse LLVM IR ``text`` into a :class:`~pyzyme.ir.module.Module`.

    Parameters
    ----------
    text
        LLVM IR as LLVM 22 prints it.
    name
        The module's name (``; ModuleID``); taken from the text when it has one.

    Raises
    ------
    pyzyme.ParseError
        With line, column and a caret excerpt, for any text this parser cannot read.
    """
    # Parsing allocates many objects and frees none of them, so the cycle collector's passes
    # over the young generation are pure overhead here (a third of the time): pause it.
    collecting = gc.isenabled()
    gc.disable()
    parser = _Parser(text, name)
    try:
        return parser.module()
    except ParseError:
        raise
    except IRTypeError as err:
        raise ParseError(str(err), text, parser.offset()) from None
    except (IndexError, KeyError, ValueError, TypeError, AttributeError) as err:
        raise ParseError(f"cannot parse here ({type(err).__name__}: {err})", text,
                         parser.offset()) from None
    finally:
        if collecting:
            gc.enable()


def parse_type(text: str, module: Module | None = None) -> T.Type:
    """Parse one LLVM type, e.g. ``"{ double, [2 x i64] }"``; named structs come from
    ``module``.

    >>> str(parse_type("<4 x double>"))
    '<4 x double>'
    """
    parser = _Parser(text, "")
    if module is not None:
        parser.mod = module
    try:
        ty = parser.type()
    except (IndexError, KeyError, ValueError, TypeError, AttributeError) as err:
        raise ParseError(f"cannot parse a type here ({err})", text, parser.offset()) from None
    if parser.kinds[parser.i] not in ("nl", "eof"):
        raise parser.error(f"unexpected {parser.texts[parser.i]!r} after the type")
    return ty


class _Parser(ValueParser, InstructionParser):
    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.kinds, self.texts, self.offsets = tokenize(text)
        self.i = 0
        self.mod = Module(name)
        if not name:
            m = re.match(r"\s*; ModuleID = '([^'\n]*)'", text)
            if m:
                self.mod.name = m.group(1)
        self.fn: Function | None = None
        self.locals: dict[str, Value] = {}
        self.blocks: dict[str, BasicBlock] = {}
        self.forwards: dict[str, _Forward] = {}
        self.block_uses: dict[str, int] = {}

    # -- token helpers ------------------------------------------------------------------
    def offset(self) -> int:
        return self.offsets[min(self.i, len(self.offsets) - 1)]

    def error(self, message: str, at: int | None = None) -> ParseError:
        return ParseError(message, self.text, self.offsets[self.i] if at is None else at)

    def expect(self, tok: str) -> None:
        if self.texts[self.i] != tok or self.kinds[self.i] not in ("punct", "word"):
            got = self.texts[self.i] or "end of input"
            raise self.error(f"expected {tok!r}, found {got.strip() or 'end of line'!r}")
        self.i += 1

    def accept(self, tok: str) -> bool:
        if self.texts[self.i] == tok and self.kinds[self.i] in ("punct", "word"):
            self.i += 1
            return True
        return False

    def skip_nl(self) -> None:
        while self.kinds[self.i] == "nl":
            self.i += 1

    def end_of_line(self) -> None:
        kind = self.kinds[self.i]
        if kind == "nl":
            self.i += 1
        elif kind != "eof":
            raise self.error(f"expected end of line, found {self.texts[self.i]!r}")

    def int_token(self) -> int:
        if self.kinds[self.i] != "num":
            raise self.error(f"expected an integer, found {self.texts[self.i]!r}")
        value = int(self.texts[self.i])
        self.i += 1
        return value

    def balanced(self) -> None:
        """Skip a parenthesised group starting at the current ``(``."""
        depth = 0
        kinds, texts = self.kinds, self.texts
        while True:
            kind, tok = kinds[self.i], texts[self.i]
            if kind == "eof":
                raise self.error("unbalanced parentheses")
            self.i += 1
            if kind == "punct":
                if tok == "(":
                    depth += 1
                elif tok == ")":
                    depth -= 1
                    if depth == 0:
                        return

    def rest_of_line(self) -> str:
        """The source text from the current token to the end of its line; skips those tokens."""
        start = self.offsets[self.i]
        while self.kinds[self.i] not in ("nl", "eof"):
            self.i += 1
        end = self.offsets[self.i]
        self.end_of_line()
        return self.text[start:end].rstrip()

    def span(self, start_index: int) -> str:
        """The source text of tokens ``start_index .. self.i - 1``."""
        if start_index == self.i:
            return ""
        end = self.offsets[self.i - 1] + len(self.texts[self.i - 1])
        return self.text[self.offsets[start_index]:end]

    # -- module ------------------------------------------------------------------------
    def module(self) -> Module:
        self.prescan()
        kinds, texts = self.kinds, self.texts
        mod = self.mod
        while True:
            self.skip_nl()
            kind, tok = kinds[self.i], texts[self.i]
            if kind == "eof":
                break
            if kind == "word":
                if tok == "define" or tok == "declare":
                    self.function()
                elif tok == "source_filename":
                    self.i += 1
                    self.expect("=")
                    mod.source_filename = unescape(self.string())
                    self.end_of_line()
                elif tok == "target":
                    self.i += 1
                    which = texts[self.i]
                    self.i += 1
                    self.expect("=")
                    value = self.string()
                    if which == "datalayout":
                        mod.data_layout = value
                    elif which == "triple":
                        mod.triple = value
                    else:
                        raise self.error(f"unknown target property {which!r}")
                    self.end_of_line()
                elif tok == "attributes":
                    mod.extra_lines.append(("attributes", self.rest_of_line()))
                elif tok == "module":
                    mod.extra_lines.append(("asm", self.rest_of_line()))
                elif tok == "uselistorder" or tok == "uselistorder_bb":
                    mod.extra_lines.append(("other", self.rest_of_line()))
                else:
                    raise self.error(f"unexpected {tok!r} at top level")
            elif kind == "global":
                self.global_definition()
            elif kind == "local":
                self.type_definition()
            elif kind == "meta":
                mod.extra_lines.append(("metadata", self.rest_of_line()))
            elif kind == "comdat":
                mod.extra_lines.append(("comdat", self.rest_of_line()))
            else:
                raise self.error(f"unexpected {tok!r} at top level")
        return mod

    def string(self) -> str:
        if self.kinds[self.i] != "str":
            raise self.error(f"expected a string, found {self.texts[self.i]!r}")
        tok = self.texts[self.i]
        self.i += 1
        return tok[1:-1]

    def prescan(self) -> None:
        """Create every global symbol first, so uses before definitions resolve directly."""
        mod = self.mod
        for m in _FUNC_HEAD.finditer(self.text):
            name = _name_of("@" + m.group(1))
            if name not in mod._symbols:
                fn = Function(name)
                fn.module = mod
                mod._symbols[name] = fn
        for m in _GLOBAL_HEAD.finditer(self.text):
            name = _name_of("@" + m.group(1))
            if name in mod._symbols:
                raise ParseError(f"redefinition of @{name}", self.text, m.start())
            sym = GlobalAlias(name) if m.group(2) else GlobalVariable(name)
            sym.module = mod
            mod._symbols[name] = sym

    def type_definition(self) -> None:
        name = _name_of(self.texts[self.i])
        self.i += 1
        self.expect("=")
        self.expect("type")
        ty = self.mod.identified_struct(name)
        if self.accept("opaque"):
            self.end_of_line()
            return
        body = self.type()
        if not isinstance(body, T.StructType):
            raise self.error(f"%{name} must be defined as a struct type")
        ty.set_body(body.elements, body.packed)
        self.end_of_line()

    def global_definition(self) -> None:
        name = _name_of(self.texts[self.i])
        sym = self.mod._symbols[name]
        self.i += 1
        self.expect("=")
        if isinstance(sym, GlobalAlias):
            sym.text = self.rest_of_line()
            self.mod.aliases.append(sym)
            return
        start = self.i
        kinds, texts = self.kinds, self.texts
        while not (kinds[self.i] == "word" and texts[self.i] in ("global", "constant")):
            if kinds[self.i] in ("nl", "eof"):
                raise self.error(f"@{name}: expected 'global' or 'constant'")
            if texts[self.i] == "(":
                self.balanced()
            else:
                self.i += 1
        prefix = self.span(start)
        sym.prefix = prefix
        m = _ADDRSPACE.search(prefix)
        if m:
            sym.type = T.PointerType(int(m.group(1)))
        sym.is_constant = texts[self.i] == "constant"
        self.i += 1
        sym.value_type = self.type()
        if kinds[self.i] not in ("nl", "eof") and texts[self.i] != ",":
            sym.initializer = self.value(sym.value_type)
        if kinds[self.i] in ("nl", "eof"):
            sym.suffix = ""
            self.end_of_line()
        else:
            sym.suffix = self.rest_of_line()
        self.mod.globals.append(sym)

    # -- functions ---------------------------------------------------------------------
    def attrs_until_type(self) -> str:
        """Skip attribute-like tokens up to the start of a type; return their text."""
        start = self.i
        while not self.is_type_start():
            kind = self.kinds[self.i]
            if kind in ("nl", "eof"):
                raise self.error("expected a type")
            if self.texts[self.i] == "(" and kind == "punct":
                self.balanced()
            else:
                self.i += 1
        return self.span(start)

    def param_attrs(self) -> str:
        """Parameter attributes: everything up to the value (or ``,``/``)`` in a header)."""
        start = self.i
        kinds, texts = self.kinds, self.texts
        while True:
            kind, tok = kinds[self.i], texts[self.i]
            if kind == "word":
                if tok in _ATTR_STOP_WORDS:
                    break
                self.i += 1
                if texts[self.i] == "(" and kinds[self.i] == "punct":
                    self.balanced()
                elif tok == "align" and kinds[self.i] == "num":
                    self.i += 1
            elif kind == "str" or kind == "hash":
                self.i += 1
            elif kind == "punct" and tok == "=":
                self.i += 1
            else:
                break
        return self.span(start)

    def function(self) -> None:
        is_define = self.texts[self.i] == "define"
        self.i += 1
        prefix = self.attrs_until_type()
        ret = self.type()
        if self.kinds[self.i] != "global":
            raise self.error(f"expected a function name, found {self.texts[self.i]!r}")
        name = _name_of(self.texts[self.i])
        fn = self.mod._symbols.get(name)
        if not isinstance(fn, Function) or fn.function_type is not None:
            raise self.error(f"redefinition of @{name}")
        self.i += 1
        params, var_arg = self.parameter_list(self.parameter)
        start = self.i
        kinds, texts = self.kinds, self.texts
        while kinds[self.i] not in ("nl", "eof") and not (texts[self.i] == "{"
                                                         and kinds[self.i] == "punct"):
            if texts[self.i] == "(" and kinds[self.i] == "punct":
                self.balanced()
            else:
                self.i += 1
        suffix = self.span(start)
        fn.function_type = T.FunctionType(ret, [p[0] for p in params], var_arg)
        fn.prefix = prefix
        fn.suffix = suffix
        fn.args = []
        for index, (pty, attrs, pname) in enumerate(params):
            arg = _make_argument(fn, pty, index, pname, attrs)
            fn.args.append(arg)
        self.mod.functions.append(fn)
        if not is_define:
            self.end_of_line()
            return
        self.expect("{")
        self.body(fn)

    def parameter(self) -> tuple[T.Type, str, str]:
        """One parameter of a definition or declaration: (type, attributes, name)."""
        pty = self.type()
        attrs = self.param_attrs()
        pname = ""
        if self.kinds[self.i] == "local":
            pname = _name_of(self.texts[self.i])
            self.i += 1
        return pty, attrs, pname

    def body(self, fn: Function) -> None:
        self.fn = fn
        self.locals = {}
        self.blocks = {}
        self.forwards = {}
        self.block_uses = {}
        slot = 0
        for arg in fn.args:
            if arg.name:
                self.locals[arg.name] = arg
            else:
                self.locals[str(slot)] = arg
                slot += 1
        kinds, texts = self.kinds, self.texts
        self.skip_nl()
        block: BasicBlock | None = None
        records: list[str] = []
        while True:
            kind = kinds[self.i]
            if kind == "label":
                tok = texts[self.i]
                name = _name_of(tok[:-1])
                if name.isdigit():
                    slot = int(name) + 1
                block = self.define_block(name)
                self.i += 1
                self.skip_nl()
                continue
            if kind == "punct" and texts[self.i] == "}":
                self.i += 1
                break
            if kind == "eof":
                raise self.error(f"@{fn.name}: missing '}}' at end of function body")
            if kind == "hash":
                records.append(self.rest_of_line())
                self.skip_nl()
                continue
            if block is None:
                block = self.define_block(str(slot))
                slot += 1
            inst_start = self.i
            name = ""
            if kind == "local" and texts[self.i + 1] == "=":
                name = _name_of(texts[self.i])
                self.i += 2
            try:
                inst = self.instruction()
            except IRTypeError as err:
                raise self.error(f"@{fn.name}: {err}", self.offsets[inst_start]) from None
            if records:
                inst.debug_records = records
                records = []
            if texts[self.i] == "," and kinds[self.i + 1] == "meta":
                self.attachments(inst)
            self.end_of_line()
            self.skip_nl()
            if name:
                if inst.type is T.void:
                    raise self.error(f"cannot name a {inst.opcode} that has no result",
                                     self.offsets[inst_start])
                self.define_local(name, inst, inst_start)
                if not name.isdigit():
                    inst.name = name
                else:
                    slot = int(name) + 1
            elif inst.type is not T.void and not isinstance(inst.type, T.VoidType):
                self.define_local(str(slot), inst, inst_start)
                slot += 1
            block.instructions.append(inst)
            inst.parent = block
        self.finish_function(fn)

    def define_block(self, name: str) -> BasicBlock:
        fn = self.fn
        block = self.blocks.get(name)
        if block is None:
            block = self.blocks[name] = BasicBlock(fn, "" if name.isdigit() else name)
        elif block.parent is not None:
            raise self.error(f"@{fn.name}: redefinition of label %{name}")
        block.parent = fn
        fn.blocks.append(block)
        return block

    def block_ref(self) -> BasicBlock:
        kind, tok = self.kinds[self.i], self.texts[self.i]
        if kind != "local":
            raise self.error(f"expected a label, found {tok!r}")
        self.i += 1
        name = _name_of(tok)
        block = self.blocks.get(name)
        if block is None:
            block = self.blocks[name] = BasicBlock(None, "" if name.isdigit() else name)
            self.block_uses[name] = self.offsets[self.i - 1]
        return block

    def label(self) -> BasicBlock:
        self.expect("label")
        return self.block_ref()

    def define_local(self, name: str, value: Value, at_index: int) -> None:
        if name in self.locals:
            raise self.error(f"@{self.fn.name}: redefinition of %{name}",
                             self.offsets[at_index])
        self.locals[name] = value

    def finish_function(self, fn: Function) -> None:
        for name, block in self.blocks.items():
            if block.parent is None:
                raise self.error(f"@{fn.name}: use of undefined label %{name}",
                                 self.block_uses.get(name))
        forwards = self.forwards
        locals_ = self.locals
        for name, fwd in forwards.items():
            real = locals_.get(name)
            if real is None:
                raise ParseError(f"@{fn.name}: use of undefined value %{name}", self.text,
                                 fwd.offset)
            if real.type != fwd.type:
                raise ParseError(f"@{fn.name}: %{name} is {real.type} but used as {fwd.type}",
                                 self.text, fwd.offset)
        for block in fn.blocks:
            for inst in block.instructions:
                ops = inst.operands
                for j, op in enumerate(ops):
                    if op.__class__ is _Forward:
                        op = ops[j] = locals_[op.name]
                    if isinstance(op, NamedValue):
                        op.users.append(inst)
                if inst.__class__ is I.Phi:
                    for blk in inst.blocks:
                        if blk.parent is None:
                            raise self.error(f"@{fn.name}: phi names an undefined block")
        self.fn = None

    def attachments(self, inst: I.Instruction) -> None:
        kinds, texts = self.kinds, self.texts
        while texts[self.i] == "," and kinds[self.i + 1] == "meta":
            self.i += 1
            kind = texts[self.i][1:]
            self.i += 1
            start = self.i
            depth = 0
            while True:
                k, tok = kinds[self.i], texts[self.i]
                if k in ("nl", "eof") or (depth == 0 and tok == "," and k == "punct"):
                    break
                if k == "punct":
                    if tok in "({":
                        depth += 1
                    elif tok in ")}":
                        depth -= 1
                self.i += 1
            inst.metadata.append((kind, self.span(start)))


# Words that end a run of parameter attributes: the start of a value or of the next item.
_ATTR_STOP_WORDS = frozenset({"true", "false", "null", "undef", "poison", "zeroinitializer",
                              "none", "asm", "splat", "blockaddress", "dso_local_equivalent",
                              "no_cfi", "ptrauth", "getelementptr"}) | I.CASTS | I.INT_BINOPS

def _make_argument(fn: Function, ty: T.Type, index: int, name: str, attrs: str):
    from pyzyme.ir.values import Argument
    return Argument(fn, ty, index, "" if name.isdigit() else name, attrs)
