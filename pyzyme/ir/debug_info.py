"""Where an instruction came from: the ``file:line`` its ``!dbg`` location names.

C and C++ compiled with ``-g`` (``pyzyme cc`` always asks for it) carry a ``!DILocation`` on
each instruction; an error about an instruction then names the line of the user's source.
Inlined code has a chain of locations (``inlinedAt``); ``skip`` names the files whose lines
say nothing to the user (a library's headers), whose code is reported where the user's code
called it.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define double @f(double %x) {
...   %y = fmul double %x, %x, !dbg !7
...   ret double %y
... }
... !3 = !DIFile(filename: "square.c", directory: "/tmp")
... !5 = distinct !DISubprogram(name: "f", scope: !3, file: !3, line: 1)
... !7 = !DILocation(line: 2, column: 14, scope: !5)''')
>>> source_location(m, next(m.get_function("f").instructions()))
'square.c:2'
"""

from __future__ import annotations

import re

__all__ = ["DebugInfo", "source_location", "located"]


class DebugInfo:
    """The metadata nodes of a module (``!N = ...``), read for source locations."""

    def __init__(self, module) -> None:
        self.nodes: dict[str, str] = {}
        for section, text in module.extra_lines:
            if section == "metadata":
                m = re.match(r"(!\d+)\s*=\s*(?:distinct\s+)?(.*)", text)
                if m:
                    self.nodes[m.group(1)] = m.group(2)
        self.default = module.source_filename or module.name or "<module>"

    def field(self, node: str, name: str) -> str | None:
        """Field ``name`` of metadata node ``node`` (quotes taken off), or None."""
        m = re.search(rf"\b{name}:\s*(\"(?:[^\"\\]|\\.)*\"|[^,)]+)", self.nodes.get(node, ""))
        return m.group(1).strip().strip('"') if m else None

    def location(self, inst, skip: re.Pattern | None = None) -> str | None:
        """``file:LINE`` of ``inst``, or None where it has no location; code inlined from a
        file ``skip`` matches is reported at its call."""
        dbg = next((t for k, t in getattr(inst, "metadata", ()) if k == "dbg"), None)
        line = self.field(dbg, "line") if dbg else None
        if line is None:
            return None
        filename = self._filename(dbg)
        for _ in range(16):
            outer = self.field(dbg, "inlinedAt")
            if outer is None or skip is None or not skip.search(filename or ""):
                break
            dbg, line = outer, self.field(outer, "line") or line
            filename = self._filename(dbg)
        return f"{filename or self.default}:{line}"

    def _filename(self, dbg: str) -> str | None:
        scope = self.field(dbg, "scope")
        for _ in range(16):  # lexical blocks nest; their chain ends at the subprogram
            if scope is None:
                return None
            file = self.field(scope, "file")
            if file is not None:
                return self.field(file, "filename")
            scope = self.field(scope, "scope")
        return None


def source_location(module, inst, skip: re.Pattern | None = None) -> str | None:
    """``file:LINE`` of ``inst`` in ``module`` (see :meth:`DebugInfo.location`), or None."""
    return DebugInfo(module).location(inst, skip)


def located(inst) -> str:
    """``inst`` as text, followed by its source location where it has one: what an error about
    it names."""
    fn = inst.function if inst.parent is not None else None
    where = source_location(fn.module, inst) if fn is not None and fn.module is not None \
        else None
    return f"{inst}" if where is None else f"{inst} (at {where})"
