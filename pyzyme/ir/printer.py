"""Module and function printing: pyzyme.ir objects back to LLVM IR text.

Unnamed values are numbered as LLVM numbers them (arguments, then each block and the results
in it, in order), so the printed text is what LLVM itself would accept and print.
"""

from __future__ import annotations

from pyzyme.ir import types as T
from pyzyme.ir.names import escape, label_def
from pyzyme.ir.values import Value

# Order of the verbatim top-level sections relative to the structured ones.
_SECTIONS_BEFORE_GLOBALS = ("comdat",)
_SECTIONS_AFTER_GLOBALS = ("asm",)
_SECTIONS_AFTER_FUNCTIONS = ("attributes", "metadata", "other")


def print_module(module) -> str:
    out: list[str] = []
    if module.name:
        out.append(f"; ModuleID = '{module.name}'")
    if module.source_filename is not None:
        out.append(f'source_filename = "{escape(module.source_filename)}"')
    if module.data_layout is not None:
        out.append(f'target datalayout = "{module.data_layout}"')
    if module.triple is not None:
        out.append(f'target triple = "{module.triple}"')
    extras: dict[str, list[str]] = {}
    for section, text in module.extra_lines:
        extras.setdefault(section, []).append(text)

    def section(lines: list[str]) -> None:
        if lines:
            out.append("")
            out.extend(lines)

    section([f"{ty} = {ty.body_text()}" for ty in module.struct_types.values()])
    for name in _SECTIONS_BEFORE_GLOBALS:
        section(extras.get(name, []))
    section([str(g) for g in module.globals] + [str(a) for a in module.aliases])
    for name in _SECTIONS_AFTER_GLOBALS:
        section(extras.get(name, []))
    for fn in module.functions:
        out.append("")
        out.append(print_function(fn))
    for name in _SECTIONS_AFTER_FUNCTIONS:
        section(extras.get(name, []))
    out.append("")
    return "\n".join(out)


def _slots(fn) -> dict[Value, int]:
    """Slot numbers of the unnamed arguments, blocks and results of ``fn``."""
    slots: dict[Value, int] = {}
    n = 0
    for arg in fn.args:
        if not arg.name:
            slots[arg] = n
            n += 1
    for block in fn.blocks:
        if not block.name:
            slots[block] = n
            n += 1
        for inst in block.instructions:
            if not inst.name and inst.type is not T.void and not isinstance(inst.type, T.VoidType):
                slots[inst] = n
                n += 1
    return slots


def print_function(fn) -> str:
    slots = _slots(fn)
    get = slots.get

    def ref(value: Value) -> str:
        n = get(value)
        return value.ref if n is None else f"%{n}"

    ty = fn.function_type
    params = []
    for arg in fn.args:
        text = str(arg.type)
        if arg.attrs:
            text += " " + arg.attrs
        if fn.blocks:
            text += " " + ref(arg)
        params.append(text)
    if ty.var_arg:
        params.append("...")
    keyword = "define" if fn.blocks else "declare"
    head = keyword + (" " + fn.prefix if fn.prefix else "")
    header = f"{head} {ty.ret} {fn.ref}({', '.join(params)})"
    if fn.suffix:
        header += " " + fn.suffix
    if not fn.blocks:
        return header
    lines = [header + " {"]
    append = lines.append
    for i, block in enumerate(fn.blocks):
        if block.name:
            if i:
                append("")
            append(label_def(block.name))
        elif i:
            append("")
            append(f"{slots[block]}:")
        for inst in block.instructions:
            for record in inst.debug_records:
                append("    " + record)
            body = inst.body(ref)
            if inst.metadata:
                body += inst._meta_text()
            if inst.type is T.void or isinstance(inst.type, T.VoidType):
                append("  " + body)
            else:
                append(f"  {ref(inst)} = {body}")
    append("}")
    return "\n".join(lines)
