"""Modules, functions and basic blocks.

A :class:`Module` keeps its top-level entities in the order they were read or added, so a
printed module reads like its source. Anything pyzyme does not interpret (attribute groups,
metadata, comdats, module asm) is kept as verbatim text in ``Module.extra_lines``, each tagged by
the section it belongs to, and printed back unchanged.

Examples
--------
>>> from pyzyme.ir import types as T
>>> m = Module("demo")
>>> f = m.add_function("twice", T.FunctionType(T.double, [T.double]))
>>> f.args[0].name = "x"
>>> f.append_block("entry").name
'entry'
>>> f.is_declaration
False
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pyzyme.errors import IRTypeError
from pyzyme.ir import types as T
from pyzyme.ir.inst_values import Phi
from pyzyme.ir.instruction import Instruction
from pyzyme.ir.names import global_ref
from pyzyme.ir.values import (
    Argument,
    GlobalAlias,
    GlobalValue,
    GlobalVariable,
    NamedValue,
    Linked,
)

_PERSONALITY = re.compile(r'personality\s+ptr\s+(?:@[-\w$.]+|@"[^"]*"|null)')


class BasicBlock(NamedValue):
    """A labelled list of instructions ending in a terminator."""

    __slots__ = ("parent", "instructions")

    def __init__(self, parent: Function | None, name: str = "") -> None:
        super().__init__(T.label, name)
        self.parent = parent
        self.instructions: list[Instruction] = []

    @property
    def terminator(self) -> Instruction | None:
        last = self.instructions[-1] if self.instructions else None
        return last if last is not None and last.is_terminator else None

    @property
    def successors(self) -> list[BasicBlock]:
        term = self.terminator
        return term.successors if term is not None else []

    @property
    def predecessors(self) -> list[BasicBlock]:
        """Blocks whose terminator branches here, each once, in order of first use."""
        seen: dict[BasicBlock, None] = {}
        for user in self.users:
            if user.is_terminator and user.parent is not None:
                seen.setdefault(user.parent, None)
        return list(seen)

    @property
    def phis(self) -> list[Phi]:
        out = []
        for inst in self.instructions:
            if not isinstance(inst, Phi):
                break
            out.append(inst)
        return out

    def insert(self, index: int, inst: Instruction) -> Instruction:
        """Insert ``inst`` at ``index`` and record its uses of its operands."""
        if inst.parent is not None:
            raise IRTypeError(f"{inst.opcode} is already in block {inst.parent.name!r}")
        self.instructions.insert(index, inst)
        inst.parent = self
        inst._link_operands()
        return inst

    def append(self, inst: Instruction) -> Instruction:
        return self.insert(len(self.instructions), inst)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    def __repr__(self) -> str:
        return f"<BasicBlock {self.name or '(unnamed)'}: {len(self.instructions)} instructions>"


class Function(Linked, GlobalValue):
    """A function definition or declaration.

    ``prefix`` is the text between ``define``/``declare`` and the return type (linkage,
    visibility, calling convention, return attributes); ``suffix`` is the text between the
    parameter list and the body (``unnamed_addr``, function attributes, section, comdat,
    personality, metadata). Both are carried verbatim.
    """

    __slots__ = ("function_type", "args", "blocks", "prefix", "suffix", "_declared", "_taken")

    def __init__(self, name: str, function_type: T.FunctionType | None = None,
                 prefix: str = "", suffix: str = "") -> None:
        super().__init__(name)
        self.function_type = function_type
        self.args: list[Argument] = []
        self.blocks: list[BasicBlock] = []
        self.prefix = prefix
        self.suffix = suffix
        self._taken: set[str] | None = None
        if function_type is not None:
            self.args = [Argument(self, t, i) for i, t in enumerate(function_type.params)]

    @property
    def is_declaration(self) -> bool:
        return not self.blocks

    @property
    def return_type(self) -> T.Type:
        return self.function_type.ret

    @property
    def entry(self) -> BasicBlock:
        return self.blocks[0]

    @property
    def personality(self) -> str:
        """The ``personality ptr @f`` clause of :attr:`suffix` ('' without one): a function
        generated from this one that copies its landing pads needs it too."""
        m = _PERSONALITY.search(self.suffix)
        return m.group(0) if m else ""

    def append_block(self, name: str = "") -> BasicBlock:
        """Add an empty block at the end, with ``name`` made unique in this function."""
        block = BasicBlock(self, self.unique_name(name) if name else "")
        self.blocks.append(block)
        return block

    def instructions(self) -> Iterator[Instruction]:
        for block in self.blocks:
            yield from block.instructions

    def remove_blocks(self, blocks) -> None:
        """Remove ``blocks`` and their instructions; nothing outside them may branch to them
        or use their values."""
        for block in blocks:
            for inst in block.instructions:
                inst._unlink_operands()
            block.instructions.clear()
            self.blocks.remove(block)

    def join_blocks(self, head: BasicBlock, tail: BasicBlock) -> None:
        """Move ``tail``'s instructions to the end of ``head`` (which has no terminator
        left), make the phis of ``tail``'s successors come from ``head``, and remove
        ``tail``, which nothing else may branch to."""
        for inst in tail.instructions:
            inst.parent = head
        head.instructions.extend(tail.instructions)
        tail.instructions = []
        for after in head.successors:
            for phi in after.phis:
                phi.blocks = [head if came is tail else came for came in phi.blocks]
        self.blocks.remove(tail)

    def unique_name(self, base: str) -> str:
        """``base``, or ``base.N`` with the smallest N not yet naming a local of this function.

        The names in use are collected on the first call and the ones handed out are added, so
        naming n new values costs O(n), not O(n) each: name new locals through this method (a
        name set directly after the first call is not seen, and LLVM rejects a duplicate)."""
        taken = self._taken
        if taken is None or not taken:
            taken = self._taken = self._local_names()
        name = base
        if name in taken:
            n = 1
            while f"{base}.{n}" in taken:
                n += 1
            name = f"{base}.{n}"
        taken.add(name)
        return name

    def _local_names(self) -> set[str]:
        names = {a.name for a in self.args}
        for block in self.blocks:
            names.add(block.name)
            names.update(i.name for i in block.instructions)
        names.discard("")
        return names

    def __str__(self) -> str:
        from pyzyme.ir.printer import print_function
        return print_function(self)


class Module:
    """A module: header, identified struct types, globals, functions and verbatim extras."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.source_filename: str | None = None
        self.data_layout: str | None = None
        self.triple: str | None = None
        self.struct_types: dict[str, T.IdentifiedStructType] = {}
        self.globals: list[GlobalVariable] = []
        self.aliases: list[GlobalAlias] = []
        self.functions: list[Function] = []
        self._symbols: dict[str, GlobalValue] = {}
        # (section, text): verbatim top-level lines; sections order the printed module.
        self.extra_lines: list[tuple[str, str]] = []

    # -- symbols --------------------------------------------------------------------------
    def get_global(self, name: str) -> GlobalValue | None:
        return self._symbols.get(name)

    def get_function(self, name: str) -> Function | None:
        sym = self._symbols.get(name)
        return sym if isinstance(sym, Function) else None

    def _add_symbol(self, value: GlobalValue) -> None:
        if value.name in self._symbols:
            raise IRTypeError(f"{global_ref(value.name)} is already defined in this module")
        self._symbols[value.name] = value
        value.module = self

    def add_function(self, name: str, function_type: T.FunctionType, prefix: str = "",
                     suffix: str = "") -> Function:
        """Add a function (a declaration until it gets blocks)."""
        fn = Function(name, function_type, prefix, suffix)
        self._add_symbol(fn)
        self.functions.append(fn)
        return fn

    def declare(self, name: str, function_type: T.FunctionType) -> Function:
        """The function ``name``: the module's own if it has one, else a new declaration of
        type ``function_type`` (how generated code reaches ``malloc``, intrinsics, helpers)."""
        return self.get_function(name) or self.add_function(name, function_type)

    def add_global(self, name: str, value_type: T.Type, initializer=None, *,
                   is_constant: bool = False, prefix: str = "", suffix: str = "") -> GlobalVariable:
        gv = GlobalVariable(name, value_type, initializer, is_constant=is_constant,
                            prefix=prefix, suffix=suffix)
        self._add_symbol(gv)
        self.globals.append(gv)
        return gv

    def remove(self, value: GlobalValue) -> None:
        """Remove an unused function, global or alias from the module."""
        if value.users:
            raise IRTypeError(f"cannot remove {value.ref}: it is still used")
        del self._symbols[value.name]
        for seq in (self.functions, self.globals, self.aliases):
            if value in seq:
                seq.remove(value)
                if isinstance(value, Function):
                    for inst in list(value.instructions()):
                        inst._unlink_operands()
        value.module = None

    def unique_global_name(self, base: str) -> str:
        if base not in self._symbols:
            return base
        n = 1
        while f"{base}.{n}" in self._symbols:
            n += 1
        return f"{base}.{n}"

    def identified_struct(self, name: str) -> T.IdentifiedStructType:
        """The named struct ``%name``, created opaque on first use."""
        ty = self.struct_types.get(name)
        if ty is None:
            ty = self.struct_types[name] = T.IdentifiedStructType(name)
        return ty

    def __str__(self) -> str:
        from pyzyme.ir.printer import print_module
        return print_module(self)

    def __repr__(self) -> str:
        return (f"<Module {self.name!r}: {len(self.functions)} functions, "
                f"{len(self.globals)} globals>")
