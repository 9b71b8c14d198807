"""Alias scopes: what pyzyme knows about memory, told to LLVM.

A derivative touches three kinds of memory LLVM cannot tell apart on its own: the tape (arrays
pyzyme allocates and only the tape code reads and writes), shadows (allocated next to primal
allocations, passed as parameters), and the primal memory. Where pyzyme *knows* two accesses
cannot overlap -- tape versus anything else; distinct allocations, stack slots and ``noalias``
parameters versus each other, and their shadows likewise -- it says so with LLVM's scoped
``noalias`` metadata: each such object gets a scope, its accesses are put in it, and they are
declared not to alias every other scope. LLVM then keeps tape reads and adjoint sums in
registers across loops that write other memory, which it could not prove safe otherwise.

Frees are deferred until the reverse sweep is done (:mod:`pyzyme.diff.tape.releases`), so no
address is reused by two of the objects while the derivative runs: distinct allocation sites
really are distinct memory.

Examples
--------
>>> from pyzyme.ir import Module
>>> m = Module("demo")
>>> table = ScopeTable(m)
>>> table.list([table.scope("tape")])
'!2'
>>> print("\\n".join(text for _, text in m.extra_lines))
!0 = distinct !{!0, !"pyzyme"}
!1 = distinct !{!1, !0, !"tape"}
!2 = !{!1}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from pyzyme.analysis.overwrite import fresh_object

__all__ = ["ScopeTable", "annotate"]


class ScopeTable:
    """Scope and scope-list metadata nodes of one module, each made once."""

    def __init__(self, module) -> None:
        self.module = module
        self._domains: dict = {}
        self._scopes: dict = {}
        self._lists: dict = {}
        self._last: int | None = None
        self._lines = 0

    def _next_id(self) -> int:
        # Scanned once per table; the table then numbers its own nodes (other code adding
        # metadata to the module meanwhile would have to use this table too).
        if self._last is None or self._lines != len(self.module.extra_lines):
            ids = [int(m.group(1)) for section, text in self.module.extra_lines
                   if section == "metadata" for m in [re.match(r"!(\d+)\s*=", text)] if m]
            self._last = max(ids, default=-1)
        self._last += 1
        self._lines = len(self.module.extra_lines) + 1
        return self._last

    def _add(self, body: str, distinct: bool = False) -> str:
        n = self._next_id()
        text = body.replace("SELF", f"!{n}")
        self.module.extra_lines.append(
            ("metadata", f"!{n} = {'distinct ' if distinct else ''}{text}"))
        return f"!{n}"

    def scope(self, key, name: str | None = None, domain: str = "pyzyme") -> str:
        """The scope node for ``key`` (any hashable), named ``name`` in the printed IR, in
        the scope domain named ``domain``. LLVM proves two accesses apart within one domain
        (all the scopes one is in there, the other is declared not to alias), and apart
        when one domain does: scopes that cut memory another way (the sides of a parallel
        loop's launch) take a domain of their own, so that an access in one of them and in
        scopes of this one stays apart from what these ones keep it apart from."""
        node = self._scopes.get(key)
        if node is None:
            if domain not in self._domains:
                self._domains[domain] = self._add(f'!{{SELF, !"{domain}"}}', distinct=True)
            label = (name or str(key)).replace('"', "'").replace("\\", "/")
            node = self._scopes[key] = self._add(
                f'!{{SELF, {self._domains[domain]}, !"{label}"}}', distinct=True)
        return node

    def members(self, node: str) -> tuple[str, ...] | None:
        """The scopes of list node ``node`` made by this table (None: not one of ours)."""
        for key, made in self._lists.items():
            if made == node:
                return key
        return None

    def list(self, scopes: Iterable[str]) -> str:
        """A list node of scope nodes (the operand of ``!alias.scope`` and ``!noalias``)."""
        key = tuple(sorted(set(scopes), key=lambda s: int(s[1:])))
        node = self._lists.get(key)
        if node is None:
            node = self._lists[key] = self._add("!{" + ", ".join(key) + "}")
        return node


def annotate(functions: Iterable, table: ScopeTable, tape: str,
             object_of: Callable[[object], object | None],
             outside: Callable[[object], bool] | None = None) -> None:
    """Put the loads and stores of ``functions`` in alias scopes.

    Accesses already in the tape scope (``tape``, a scope node) are left as they are; accesses
    that carry LLVM's own alias metadata keep it (and make no claim). Every other access is
    declared not to alias the tape and, where ``object_of(pointer)`` names the distinct object
    it points into, is put in that object's scope, declared not to alias the other objects.
    Where ``outside(pointer)`` says the memory existed before the function ran (a parallel
    loop body's arrays, read from its launch's argument array), the access is declared not
    to alias the objects allocated here either (stack slots, allocations and their data): in
    a split pair the reverse function reads their addresses from the tape, where LLVM no
    longer sees them fresh, and would keep every adjoint sum in memory. Where it names a
    side (a string: the arrays, or their shadows), the access goes in that side's scope,
    declared not to alias the other sides that accesses name.
    """
    accesses = []
    for fn in functions:
        for inst in fn.instructions():
            if inst.opcode not in ("load", "store"):
                continue
            kinds = {k for k, _ in inst.metadata}
            if "alias.scope" in kinds or "noalias" in kinds:
                continue
            accesses.append((inst, object_of(inst.operands[-1 if inst.opcode == "store"
                                                         else 0])))
    objects = list(dict.fromkeys(obj for _, obj in accesses if obj is not None))
    scopes = {obj: table.scope(obj, _label(obj)) for obj in objects} if len(objects) > 1 else {}
    fresh = [s for o, s in scopes.items() if fresh_object(o)]
    where = {inst: outside(inst.operands[-1 if inst.opcode == "store" else 0])
             for inst, obj in accesses if obj not in scopes and outside is not None}
    named = sorted({w for w in where.values() if isinstance(w, str)})
    sides = {w: table.scope(("side", w), w, domain="pyzyme launch sides") for w in named} \
        if len(named) > 1 else {}
    for inst, obj in accesses:
        if obj in scopes:
            own = scopes[obj]
            inst.metadata.append(("alias.scope", table.list([own])))
            others = [s for o, s in scopes.items() if o is not obj]
            inst.metadata.append(("noalias", table.list(others + [tape])))
        elif where.get(inst) in sides:
            own = sides[where[inst]]
            inst.metadata.append(("alias.scope", table.list([own])))
            others = [s for s in sides.values() if s != own]
            inst.metadata.append(("noalias", table.list(fresh + others + [tape])))
        elif where.get(inst):
            inst.metadata.append(("noalias", table.list(fresh + [tape])))
        else:
            inst.metadata.append(("noalias", table.list([tape])))


def _label(obj) -> str:
    name = getattr(obj, "name", "") or type(obj).__name__
    return f"memory of %{name}"
