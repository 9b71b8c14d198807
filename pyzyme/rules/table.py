"""RuleTable: the rows, indexed by every name they answer to.

Registration rejects a name given twice, so two rows can never disagree about one operation.
Lookup takes an opcode (``fmul``), an intrinsic's full name (``llvm.sin.v4f64`` finds the row
of ``llvm.sin``) or a C symbol (``sinf``).

Opcodes and called symbols are two name spaces (:data:`SPACES`): the ``trunc`` instruction and
a call to C's ``trunc`` are different operations, and a user function called ``@add`` is not
the ``add`` instruction. The transform says which it means, ``lookup("trunc", "opcode")`` or
``lookup("trunc", "call")``; ``lookup(name)`` alone searches both and raises where both answer.

Examples
--------
>>> from pyzyme.rules.expr import arg
>>> from pyzyme.rules.spec import Inactive, Partials
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
>>> t.add(Inactive(("add",), "opcode", reason="integer"))
>>> t.lookup("add", "call") is None
True
>>> t.freeze().add(Partials(("llvm.cos",), "intrinsic", (arg(0),)))
Traceback (most recent call last):
...
TypeError: this RuleTable is frozen; extend a copy: RuleTable(table.rows())
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from pyzyme.naming import linked_original
from pyzyme.rules.expr import call  # noqa: F401 - used by the doctest above
from pyzyme.rules.spec import Row

__all__ = ["RuleTable", "SPACES", "intrinsic_base", "space_of"]

# One overload suffix of an intrinsic name: f64, v4f64, nxv2f32, i32, p0, bf16, f80, ppcf128.
_TYPE_SUFFIX = re.compile(r"\.(?:(?:nx)?v\d+)?(?:f\d+|i\d+|bf16|p\d+|ppcf128)$")


def intrinsic_base(name: str) -> str:
    """``llvm.powi.f64.i32`` -> ``llvm.powi``: the name without its overload suffixes."""
    while True:
        stripped = _TYPE_SUFFIX.sub("", name)
        if stripped == name:
            return name
        name = stripped


def space_of(row: Row) -> str:
    """The name space a row's names live in: ``"opcode"`` or ``"call"``."""
    return "opcode" if row.kind == "opcode" else "call"


SPACES = ("opcode", "call")


class RuleTable:
    """Rows by name. Build one with :meth:`add`; read it with :meth:`lookup`."""

    def __init__(self, rows: Iterable[Row] = ()) -> None:
        self._spaces: dict[str, dict[str, Row]] = {space: {} for space in SPACES}
        self._order: list[Row] = []
        self._frozen = False
        for row in rows:
            self.add(row)

    def add(self, row: Row) -> None:
        """Register ``row`` under each of its names.

        Raises
        ------
        ValueError
            If one of its names already has a row in the same name space.
        TypeError
            If the table is frozen.
        """
        if self._frozen:
            raise TypeError("this RuleTable is frozen; extend a copy: RuleTable(table.rows())")
        rows = self._spaces[space_of(row)]
        for name in row.names:
            old = rows.get(name)
            if old is not None:
                raise ValueError(f"{name} has two rules: {old.kind} {old.names} and "
                                 f"{row.kind} {row.names}")
        for name in row.names:
            rows[name] = row
        self._order.append(row)

    def freeze(self) -> RuleTable:
        """Reject further :meth:`add` calls (a shared table stays as built); returns ``self``."""
        self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        return self._frozen

    def lookup(self, name: str, space: str | None = None) -> Row | None:
        """The row for an opcode, an intrinsic (any overload) or a symbol, or None.

        Parameters
        ----------
        name
            An opcode, a full intrinsic name (``llvm.powi.f64.i32``) or a symbol (``sinf``).
        space
            ``"opcode"`` for an instruction, ``"call"`` for a callee; None searches both.

        Raises
        ------
        ValueError
            If ``space`` is None and ``name`` has a row in both spaces (``trunc``).
        """
        if space is not None:
            return self._lookup_in(self._spaces[space], name)
        found = [row for rows in self._spaces.values()
                 if (row := self._lookup_in(rows, name)) is not None]
        if len(found) > 1:
            raise ValueError(f"{name} is both an opcode and a symbol with a rule; "
                             "pass space='opcode' or space='call'")
        return found[0] if found else None

    @staticmethod
    def _lookup_in(rows: dict[str, Row], name: str) -> Row | None:
        row = rows.get(name)
        if row is None and name.startswith("llvm."):
            row = rows.get(intrinsic_base(name))
        if row is None:
            # A runtime function defined in each module that uses it (Numba's NRT_incref,
            # the tape pool's functions) is renamed NAME.N by the linker where two such
            # modules meet, as when two derivatives are linked into one @njit caller: the
            # copy is the same function.
            original = linked_original(name)
            if original != name:
                copied = rows.get(original)
                if copied is not None and copied.kind == "runtime":
                    row = copied
        return row

    def rows(self) -> Iterator[Row]:
        """Each row once, in the order added."""
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: str) -> bool:
        return any(self._lookup_in(rows, name) is not None for rows in self._spaces.values())
