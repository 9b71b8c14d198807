"""RuleTable: the rows, indexed by every name they answer to.

Registration rejects a name given twice, so two rows can never disagree about one operation.
Lookup takes an opcode (``fmul``), an intrinsic's full name (``llvm.sin.v4f64`` finds the row
of ``llvm.sin``) or a C symbol (``sinf``).

Examples
--------
>>> from pyzyme.rules.expr import arg
>>> from pyzyme.rules.spec import Partials
>>> t = RuleTable()
>>> t.add(Partials(("llvm.sin",), "intrinsic", (call("cos", arg(0)),)))
>>> t.lookup("llvm.sin.v4f64").names
('llvm.sin',)
>>> t.lookup("llvm.cos.f64") is None
True
>>> t.add(Partials(("llvm.sin",), "intrinsic", (arg(0),)))
Traceback (most recent call last):
...
ValueError: llvm.sin has two rules: intrinsic ('llvm.sin',) and intrinsic ('llvm.sin',)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from pyzyme.rules.expr import call  # noqa: F401 - used by the doctest above
from pyzyme.rules.spec import Row

__all__ = ["RuleTable", "intrinsic_base"]

# One overload suffix of an intrinsic name: f64, v4f64, nxv2f32, i32, p0, bf16, f80, ppcf128.
_TYPE_SUFFIX = re.compile(r"\.(?:(?:nx)?v\d+)?(?:f\d+|i\d+|bf16|p\d+|ppcf128)$")


def intrinsic_base(name: str) -> str:
    """``llvm.powi.f64.i32`` -> ``llvm.powi``: the name without its overload suffixes."""
    while True:
        stripped = _TYPE_SUFFIX.sub("", name)
        if stripped == name:
            return name
        name = stripped


class RuleTable:
    """Rows by name. Build one with :meth:`add`; read it with :meth:`lookup`."""

    def __init__(self, rows: Iterable[Row] = ()) -> None:
        self._rows: dict[str, Row] = {}
        for row in rows:
            self.add(row)

    def add(self, row: Row) -> None:
        for name in row.names:
            old = self._rows.get(name)
            if old is not None:
                raise ValueError(f"{name} has two rules: {old.kind} {old.names} and "
                                 f"{row.kind} {row.names}")
        for name in row.names:
            self._rows[name] = row

    def lookup(self, name: str) -> Row | None:
        """The row for an opcode, an intrinsic (any overload) or a symbol, or None."""
        row = self._rows.get(name)
        if row is None and name.startswith("llvm."):
            row = self._rows.get(intrinsic_base(name))
        return row

    def rows(self) -> Iterator[Row]:
        """Each row once, in the order added."""
        seen: set[int] = set()
        for row in self._rows.values():
            if id(row) not in seen:
                seen.add(id(row))
                yield row

    def __len__(self) -> int:
        return sum(1 for _ in self.rows())

    def __contains__(self, name: str) -> bool:
        return self.lookup(name) is not None
