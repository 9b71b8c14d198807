"""Memory the iterations of a parallel loop own: arrays no two iterations touch at one address.

The body of a parallel loop (:class:`~pyzyme.rules.spec.ParallelFor`) runs its iterations on
several threads, and its reverse sweep adds adjoints into shadow memory: atomically, unless no
other iteration can reach the same address. This analysis proves that for the common case, an
array every access of which goes to ``base + a*i + c``, where ``i`` is the loop's index (an
induction variable stepping by one from a start the schedule gives: the schedule's rows split
the iteration space, so each ``i`` runs once; a schedule of several dimensions, whose rows are
boxes, runs each ``i`` once per box: there only a 2-D array indexed by both of two indices is
owned, cell by cell, :func:`_box_owner`), ``base`` and ``a`` (a constant)
are the same for all the accesses, and the bytes ``[c, c + size)`` they touch fit in one stride
``|a|``: then iteration ``i`` owns ``[base + a*i + min c, base + a*i + |a|)``. Other terms of an
address must be invariant (defined in the body's entry block: its arguments, sizes and
strides). Arrays reached through different slots of the argument array are taken not to
overlap, which the caller must know (pyzyme asks only when the arrays of the call are
distinct).

An array whose pointer is passed to a call, stored, merged by a phi or a select, or cast to an
integer is not owned: its accesses cannot all be seen.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @body(ptr %x, ptr %y, ptr %sched, i64 %n) {
... entry:
...   %start = load i64, ptr %sched
...   br label %loop
... loop:
...   %i = phi i64 [ %start, %entry ], [ %i1, %loop ]
...   %px = getelementptr double, ptr %x, i64 %i
...   %v = load double, ptr %px
...   %j = add i64 %i, 1
...   %py = getelementptr double, ptr %y, i64 %j
...   %w = load double, ptr %py
...   %py0 = getelementptr double, ptr %y, i64 %i
...   store double %v, ptr %py0
...   %i1 = add i64 %i, 1
...   %more = icmp slt i64 %i1, %n
...   br i1 %more, label %loop, label %exit
... exit:
...   ret void
... }''')
>>> fn = m.get_function("body")
>>> owned = owned_arrays(fn, [fn.args[2]])
>>> print(owned)
owned by one iteration of @body: %x (8*%i), %y (8*%i, shared within 1 of its row's ends)
>>> loads = [i for i in fn.blocks[1].instructions if i.opcode == "load"]
>>> owned.owns(loads[0].pointer), owned.owns(loads[1].pointer)
(True, False)

A C-ordered 2-D array, ``x[i - 1, j]`` read and ``x[i, j]`` written, its row length ``%m`` a
run-time value: iteration ``i`` keeps to rows ``i - 1`` and ``i`` as long as ``0 <= j < m``,
which the reverse sweep checks where it adds (``near_edges`` gives the column ``j``):

>>> m = parse_module('''
... define void @rows(ptr %x, ptr %sched, i64 %m, i64 %n) {
... entry:
...   %start = load i64, ptr %sched
...   %lastp = getelementptr i64, ptr %sched, i64 1
...   %last = load i64, ptr %lastp
...   br label %row
... row:
...   %i = phi i64 [ %start, %entry ], [ %i1, %next ]
...   %up = add i64 %i, -1
...   %r0 = mul i64 %up, %m
...   %r1 = mul i64 %i, %m
...   br label %col
... col:
...   %j = phi i64 [ 0, %row ], [ %j1, %col ]
...   %a0 = add i64 %r0, %j
...   %p0 = getelementptr double, ptr %x, i64 %a0
...   %v = load double, ptr %p0
...   %a1 = add i64 %r1, %j
...   %p1 = getelementptr double, ptr %x, i64 %a1
...   store double %v, ptr %p1
...   %j1 = add i64 %j, 1
...   %more = icmp slt i64 %j1, %n
...   br i1 %more, label %col, label %next
... next:
...   %i1 = add i64 %i, 1
...   %again = icmp sle i64 %i1, %last
...   br i1 %again, label %row, label %exit
... exit:
...   ret void
... }''')
>>> fn = m.get_function("rows")
>>> owned = owned_arrays(fn, [fn.args[1]])
>>> print(owned)
owned by one iteration of @rows: %x (8*%m*%i, shared within 1 of its row's ends)
>>> read = fn.blocks[2].instructions[3]   # the load of x[i - 1, j]
>>> index, reach, first, last, (column, const, length), _ = owned.near_edges(read.pointer)
>>> index.ref, reach, [(atom.ref, k) for atom, k in column], const, length.ref
('%i', 1, [('%j', 1)], 0, '%m')
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pyzyme.analysis.layout import field_offset, sizeof
from pyzyme.analysis.loops import analyze_loops
from pyzyme.analysis.overwrite import meminfo_of, underlying_objects
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantInt, Value

__all__ = ["OwnedArrays", "owned_arrays", "dense_reads", "linear_address"]

_W = 8  # bytes per word of a schedule's row


class _Product:
    """The atom ``a * b`` of two values, ``b`` known on entry (a row index times a row
    length: ``(i + d) * m`` in a 2-D array's address); equal to another of the same two."""

    __slots__ = ("a", "b")

    def __init__(self, a: Value, b: Value) -> None:
        self.a, self.b = a, b

    def __eq__(self, other) -> bool:
        return isinstance(other, _Product) and other.a is self.a and other.b is self.b

    def __hash__(self) -> int:
        return hash((id(self.a), id(self.b)))


def _order(atom) -> tuple:
    return (id(atom.a), id(atom.b)) if isinstance(atom, _Product) else (id(atom), 0)


@dataclass(frozen=True)
class _Row:
    """The stride of an array owned by rows: ``scale`` bytes times the run-time row length
    ``length`` (a value known on entry). Under a schedule of boxes, ``column`` is the other
    index, the one that picks the cell within the row, and ``reach`` the most two
    iterations' columns may differ by and still touch one cell."""

    length: Value
    scale: int
    column: Value | None = None
    reach: int = 0


@dataclass(frozen=True)
class _Address:
    """``root + const + sum(coef * atom)``, in bytes."""

    root: Value
    const: int
    terms: tuple  # ((atom, coef), ...), sorted by the atom's id


@dataclass
class OwnedArrays:
    """The roots (base pointers) of the arrays of ``function`` one iteration owns, each with
    the index it is owned by and the stride."""

    function: object
    roots: dict = field(default_factory=dict)   # root -> (index phi, stride, reach)
    bounds: dict = field(default_factory=dict)  # index phi -> (first, last) of its row
    wraps: object = None                        # select -> whether it is always 0

    def owns(self, pointer: Value) -> bool:
        """Whether ``pointer`` points into an array one iteration owns."""
        found = self._root(pointer)
        return found is not None and found[2] == 0 and not isinstance(found[1], _Row)

    def near_edges(self, pointer: Value):
        """For ``pointer`` into an array iterations share only with their neighbours (a
        stencil's): ``(index, reach, first, last, column, across)``, the index and the bounds
        of its row (the schedule's, inclusive), so that only an index within ``reach`` of
        either bound shares bytes with another row's iterations; None for any other pointer.
        ``column`` is None, or for an array owned by rows of a run-time length ``m``
        ``(terms, const, m)``: the access stays in its row where ``0 <= sum(k * atom) +
        const < m`` (``terms`` the ``(atom, k)`` pairs); elsewhere it is shared. ``across``
        is None, or under a schedule of boxes ``(column index, reach, first, last)``: the
        same test in the box's other dimension."""
        address = _address(pointer, self.wraps)
        found = None if address is None else self.roots.get(address.root)
        if found is None or found[0] not in self.bounds:
            return None
        index, stride, reach = found
        if not isinstance(stride, _Row):
            return None if reach == 0 else (index, reach, *self.bounds[index], None, None)
        terms = dict(address.terms)
        terms.pop(_Product(index, stride.length), None)
        terms.pop(stride.length, None)
        column = (tuple((atom, coef // stride.scale) for atom, coef in terms.items()),
                  address.const // stride.scale, stride.length)
        across = None
        if stride.column is not None:
            if stride.column not in self.bounds:
                return None
            across = (stride.column, stride.reach, *self.bounds[stride.column])
        return (index, reach, *self.bounds[index], column, across)

    def _root(self, pointer: Value):
        address = _address(pointer, self.wraps)
        return None if address is None else self.roots.get(address.root)

    def __str__(self) -> str:
        parts = []
        for root, (phi, stride, reach) in self.roots.items():
            near = f", shared within {reach} of its row's ends" if reach else ""
            column = ""
            if isinstance(stride, _Row):
                if stride.column is not None:
                    column = f" + {stride.scale}*{_ref(stride.column)}"
                    near = (f", shared within {reach} of its box's ends in {_ref(phi)}, "
                            f"{stride.reach} in {_ref(stride.column)}")
                stride = f"{stride.scale}*{_ref(stride.length)}"
            parts.append(f"{_ref(root)} ({stride}*{_ref(phi)}{column}{near})")
        return (f"owned by one iteration of {self.function.ref}: "
                + (", ".join(parts) if parts else "nothing"))


def _ref(value: Value) -> str:
    return getattr(value, "ref", str(value))


def owned_arrays(fn, schedule: Iterable[Value], first_index: int | None = None) -> OwnedArrays:
    """The arrays of parallel loop body ``fn`` that one iteration owns; ``schedule`` are the
    pointers to its schedule (the loop indices start at values loaded through them and step
    up to the last one it gives). Given ``first_index``, a lower bound of the indices, Numba's
    wrap-around of a negative index ``i + d`` (``select (i + d < 0), n, 0``) is 0 for every
    ``d >= -first_index``."""
    result = OwnedArrays(fn)
    indices = _schedule_indices(fn, set(schedule))
    dimensions = _dimensions(fn, indices) if indices else 0
    if dimensions not in (1, 2):
        # An n-dimensional schedule's rows split the index space in boxes (Numba's
        # scheduler may cut any of its dimensions): iterations apart in one index meet in
        # another, and an address of one index (a bias ``b[j]`` added to each row ``i`` of
        # ``x``) is reached from every row. Of two dimensions, a C-ordered 2-D array
        # indexed by both is owned cell by cell (:func:`_box_owner`).
        return result
    result.wraps = _no_wrap(indices, first_index) if first_index is not None else None
    entry = fn.blocks[0] if fn.blocks else None
    accesses: dict = {}
    escaped: set = set()
    for block in fn.blocks:
        for inst in block.instructions:
            for pointer, size in _accessed(inst):
                address = _address(pointer, result.wraps)
                if address is None:
                    continue
                accesses.setdefault(address.root, []).append((address, size))
            for op in _escaping(inst):
                address = _address(op, result.wraps)
                if address is not None:
                    escaped.add(address.root)
    for root, found in accesses.items():
        if root in escaped:
            continue
        owner = (_box_owner if dimensions == 2 else _owner)(found, indices, entry)
        if owner is not None:
            result.roots[root] = owner
    result.bounds = _row_bounds(fn, indices)
    return result


def _row_bounds(fn, indices: set) -> dict:
    """``{index: (first, last)}``: the schedule's row gives each index its first value
    and, ``n`` words on for an ``n``-dimensional schedule, its last (inclusive), both loaded
    in the body; for the indices stepping up by one whose row shows that shape."""
    loads: dict = {}
    for block in fn.blocks:
        for inst in block.instructions:
            if isinstance(inst, I.Load) and inst.type == T.i64:
                address = _address(inst.pointer)
                if address is not None:
                    loads.setdefault((address.root, address.terms), {})[address.const] = inst
    bounds = {}
    for loop in analyze_loops(fn).loops:
        for iv in loop.inductions:
            if iv.phi not in indices or iv.step != 1:
                continue
            address = _address(iv.start.pointer)
            row = loads.get((address.root, address.terms), {})
            offsets = sorted(row)
            if len(offsets) % 2 or address.const not in offsets:
                continue
            k, n = offsets.index(address.const), len(offsets) // 2
            if k < n and offsets == [offsets[0] + 8 * j for j in range(2 * n)]:
                bounds[iv.phi] = (iv.start, row[offsets[k + n]])
    return bounds


def _dimensions(fn, indices: set) -> int:
    """How many dimensions the schedule the loop indices ``indices`` start from splits:
    Numba's row for an ``n``-dimensional loop nest holds ``n`` first indices, then ``n`` last
    ones (inclusive), and the body reads them for its loops' bounds; at least as many as
    the words the indices start from."""
    starts, rows = set(), {}
    for loop in analyze_loops(fn).loops:
        for iv in loop.inductions:
            if iv.phi in indices:
                address = _address(iv.start.pointer)
                starts.add((address.root, address.terms, address.const))
                rows.setdefault((address.root, address.terms), set()).add(address.const)
    for block in fn.blocks:
        for inst in block.instructions:
            if isinstance(inst, I.Load) and inst.type == T.i64:
                address = _address(inst.pointer)
                if address is not None and (address.root, address.terms) in rows:
                    rows[(address.root, address.terms)].add(address.const)
    words = max((max(row) - min(row)) // _W + 1 for row in rows.values())
    return max(len(starts), -(-words // 2))


def _schedule_indices(fn, schedule: set) -> set:
    """Induction variables stepping by one from a start loaded through a schedule pointer."""
    found = set()
    for loop in analyze_loops(fn).loops:
        for iv in loop.inductions:
            start = iv.start
            if abs(iv.step) == 1 and isinstance(start, I.Load):
                address = _address(start.pointer)
                if address is not None and address.root in schedule:
                    found.add(iv.phi)
    return found


def _accessed(inst) -> list:
    if isinstance(inst, I.Load):
        return [(inst.pointer, sizeof(inst.type))]
    if isinstance(inst, I.Store):
        return [(inst.operands[1], sizeof(inst.operands[0].type))]
    return []


def _escaping(inst) -> list:
    """Pointers ``inst`` lets go where this analysis cannot follow them."""
    if isinstance(inst, I.Store):
        return [inst.operands[0]] if inst.operands[0].type.is_pointer else []
    if isinstance(inst, I.CallBase):
        callee = inst.called_function
        if callee is not None and callee.name.startswith(("llvm.lifetime",
                                                          "llvm.experimental.noalias")):
            return []
        return [a for a in inst.args if a.type.is_pointer]
    if inst.opcode in ("phi", "select", "ptrtoint", "atomicrmw", "cmpxchg"):
        return [op for op in inst.operands if op.type.is_pointer]
    return []


def _owner(found: list, indices: set, entry):
    """``(index, stride, reach)`` where every address of ``found`` is ``a*index + c`` plus
    the same invariant terms, the same ``a`` for all: ``reach`` is the most two iterations'
    indices may differ by and still touch one byte (0: each owns its bytes)."""
    first = found[0][0]
    index = None
    for atom, coef in first.terms:
        if atom in indices:
            if index is not None:
                return None
            index, stride = atom, coef
    if index is None:
        return _row_owner(found, indices, entry)
    if stride == 0:
        return None
    rest = tuple((a, c) for a, c in first.terms if a is not index)
    if not all(_invariant(a, entry) for a, _ in rest):
        return None
    for address, _ in found:
        if address.terms != first.terms:
            return None
    low = min(address.const for address, _ in found)
    high = max(address.const + size for address, size in found)
    # Iterations i and i' reach the same byte only if |a| * |i - i'| < high - low.
    return index, stride, -(-(high - low) // abs(stride)) - 1


def _row_term(found: list, indices: set, entry):
    """``(index * m, s)``: the one term of the first address of ``found`` that is an index
    times a value known on entry (a row length), and its coefficient ``s > 0``; None where
    there is not one such term."""
    rows = [(atom, coef) for atom, coef in found[0][0].terms
            if isinstance(atom, _Product) and atom.a in indices]
    if len(rows) != 1 or rows[0][1] <= 0 or not _invariant(rows[0][0].b, entry):
        return None
    return rows[0]


def _row_owner(found: list, indices: set, entry):
    """``(index, _Row(m, s), reach)`` where every address of ``found`` is ``s*(index + d)*m``
    plus a column offset ``s*k`` (``m`` known on entry, ``d`` a constant, ``k`` anything, the
    access at most ``s`` bytes): a C-ordered 2-D array's rows, ``index + d`` the row. Iteration
    ``i`` keeps to rows ``i + d`` wherever ``0 <= k < m``, which the reverse sweep checks at run
    time (:meth:`OwnedArrays.near_edges`); ``reach`` is the most two iterations' indices may
    differ by and still touch one row."""
    row = _row_term(found, indices, entry)
    if row is None:
        return None
    product, scale = row
    index, length = product.a, product.b
    offsets = []
    for address, size in found:
        terms = dict(address.terms)
        if terms.pop(product, None) != scale or size > scale:
            return None
        shift = terms.pop(length, 0)
        if shift % scale or address.const % scale or \
                any(coef % scale or not isinstance(atom, Value) or atom in indices
                    for atom, coef in terms.items()):
            return None
        offsets.append(shift // scale)
    return index, _Row(length, scale), max(offsets) - min(offsets)


def _box_owner(found: list, indices: set, entry):
    """Under a schedule of two dimensions (rows are boxes ``[a0, b0] x [a1, b1]``):
    ``(i, _Row(m, s, j, reach_j), reach_i)`` where every address of ``found`` is
    ``s*((i + d)*m + j + e)`` (``i``, ``j`` the two indices, ``m`` known on entry, ``d`` and
    ``e`` constants, the access at most ``s`` bytes): a C-ordered 2-D array's cell ``[i + d,
    j + e]``, the same cell for no two iterations while ``0 <= j + e < m``. An iteration at
    least ``reach_i`` from its box's ends in ``i`` and ``reach_j`` in ``j`` touches no cell
    another box's iterations touch: one that does differs from it by more than the reach in
    the dimension where it is outside the box."""
    row = _row_term(found, indices, entry) if len(indices) == 2 else None
    if row is None:
        return None
    product, scale = row
    index, length = product.a, product.b
    (column,) = indices - {index}
    row_offsets, column_offsets = [], []
    for address, size in found:
        terms = dict(address.terms)
        if terms.pop(product, None) != scale or terms.pop(column, None) != scale \
                or size > scale:
            return None
        shift = terms.pop(length, 0)
        if terms or shift % scale or address.const % scale:
            return None
        row_offsets.append(shift // scale)
        column_offsets.append(address.const // scale)
    return (index, _Row(length, scale, column, max(column_offsets) - min(column_offsets)),
            max(row_offsets) - min(row_offsets))


def _invariant(value, entry) -> bool:
    if isinstance(value, _Product):
        return _invariant(value.a, entry) and _invariant(value.b, entry)
    parent = getattr(value, "parent", None)
    return not isinstance(value, I.Instruction) or parent is entry


# -- addresses as linear forms ---------------------------------------------------------------
def _no_wrap(indices: set, low: int):
    """Whether a select is Numba's wrap-around of ``x = i + d`` (``i`` an index of
    ``indices``, all ``>= low``; ``d >= -low``): ``select (x < 0), n, 0`` or ``select (x >
    -1), 0, n``, LLVM's ``select (i > c), 0, n`` for ``x = i - c - 1``, always 0."""
    def always_zero(select) -> bool:
        cond, a, b = select.operands
        if not (isinstance(cond, I.Compare) and cond.opcode == "icmp"):
            return False
        x, bound = cond.operands
        if not isinstance(bound, ConstantInt):
            return False
        if cond.predicate == "slt":     # x < c: x - c < 0
            zero, shift = b, -bound.signed
        elif cond.predicate == "sgt":   # x > c: x - c - 1 > -1
            zero, shift = a, -bound.signed - 1
        else:
            return False
        if not (isinstance(zero, ConstantInt) and zero.value == 0):
            return False
        form = _linear(x)
        return form is not None and form[0] + shift >= -low and len(form[1]) == 1 \
            and next(iter(form[1].items())) in {(i, 1) for i in indices}
    return always_zero


def linear_address(pointer: Value, pick=None) -> tuple | None:
    """``(root, const, {atom: coef})`` with ``pointer == root + const + sum(coef * atom)`` in
    bytes, ``root`` what its chain of ``getelementptr`` starts from; None where an index is
    not a linear form. ``pick(phi)``, where given, says which of a phi's incoming values to
    take for it (None: the phi is an atom), and of a select's two or a minimum's: a guess, as
    of the path a program usually takes.

    >>> from pyzyme.ir import parse_module
    >>> m = parse_module('''
    ... define ptr @f(ptr %x, i64 %n) {
    ... entry:
    ...   %i = add i64 %n, 2
    ...   %p = getelementptr double, ptr %x, i64 %i
    ...   ret ptr %p
    ... }''')
    >>> root, const, terms = linear_address(m.get_function("f").blocks[0].instructions[1])
    >>> root.ref, const, [(atom.ref, coef) for atom, coef in terms.items()]
    ('%x', 16, [('%n', 8)])
    """
    address = _address(pointer, pick=pick)
    return None if address is None else (address.root, address.const, dict(address.terms))


def _address(pointer: Value, wraps=None, depth: int = 16, pick=None) -> _Address | None:
    terms: dict = {}
    const = 0
    while depth > 0:
        depth -= 1
        if pick is not None and isinstance(pointer, (I.Phi, I.Select)):
            chosen = pick(pointer)
            if chosen is None:
                break
            pointer = chosen
            continue
        if not isinstance(pointer, I.GetElementPtr):
            break
        base, *indices = pointer.operands
        ty = pointer.source_type
        for k, index in enumerate(indices):
            if k == 0:
                scale = sizeof(ty)
            elif isinstance(ty, (T.ArrayType, T.VectorType)):
                ty = ty.element
                scale = sizeof(ty)
            else:  # a struct field: a constant index
                if not isinstance(index, ConstantInt):
                    return None
                offset, ty = field_offset(ty, [index.value])
                const += offset
                continue
            form = _linear(index, wraps=wraps, pick=pick)
            if form is None:
                return None
            c, ts = form
            const += scale * c
            for atom, coef in ts.items():
                terms[atom] = terms.get(atom, 0) + scale * coef
        pointer = base
    terms = {a: c for a, c in terms.items() if c != 0}
    return _Address(pointer, const, tuple(sorted(terms.items(), key=lambda t: _order(t[0]))))


def _linear(value: Value, depth: int = 12, wraps=None, pick=None):
    """``(const, {atom: coef})`` with ``value == const + sum(coef * atom)`` (a product of two
    unknowns is an atom of its own); a select ``wraps`` says is always 0 is 0; a phi, a
    select or a minimum ``pick`` takes one value of is that value."""
    if isinstance(value, ConstantInt):
        return value.signed, {}
    if wraps is not None and isinstance(value, I.Select) and wraps(value):
        return 0, {}
    if pick is not None and _choice(value) and depth > 0:
        chosen = pick(value)
        if chosen is not None:
            return _linear(chosen, depth - 1, wraps, pick)
    if depth == 0 or not isinstance(value, I.Instruction):
        return 0, {value: 1}
    op = value.opcode
    if op in ("sext", "zext", "trunc"):
        return _linear(value.operands[0], depth - 1, wraps, pick)
    if op in ("add", "sub"):
        a, b = (_linear(v, depth - 1, wraps, pick) for v in value.operands)
        sign = 1 if op == "add" else -1
        terms = dict(a[1])
        for atom, coef in b[1].items():
            terms[atom] = terms.get(atom, 0) + sign * coef
        return a[0] + sign * b[0], terms
    if op in ("mul", "shl"):
        x, y = value.operands
        if op == "mul" and isinstance(x, ConstantInt):
            x, y = y, x
        if isinstance(y, ConstantInt):
            factor = y.value if op == "mul" else 1 << y.value
            c, ts = _linear(x, depth - 1, wraps, pick)
            return c * factor, {atom: coef * factor for atom, coef in ts.items()}
        if op == "mul":
            # (i + d) * m with m known on entry (a C-ordered array's row length):
            # d * m + (i * m), so accesses to rows i - 1, i, i + 1 share the atom i * m
            if not _on_entry(y) and _on_entry(x):
                x, y = y, x
            if _on_entry(y):
                c, ts = _linear(x, depth - 1, wraps, pick)
                if all(isinstance(atom, Value) for atom in ts):
                    y, factor = _scaled(y)
                    terms = {_Product(atom, y): coef * factor for atom, coef in ts.items()}
                    if c:
                        terms[y] = c * factor
                    return 0, terms
    return 0, {value: 1}


def _choice(value: Value) -> bool:
    """Whether ``value`` is one of several values: a phi, a select, a minimum or maximum
    (``llvm.smin``: how LLVM writes NumPy's clipping of a slice's start)."""
    if isinstance(value, (I.Phi, I.Select)):
        return True
    callee = value.called_function if isinstance(value, I.CallBase) else None
    return callee is not None and callee.name.startswith(("llvm.smin.", "llvm.smax.",
                                                          "llvm.umin.", "llvm.umax."))


def _scaled(length: Value) -> tuple:
    """``(m, k)`` with ``length == k * m``: a row length in bytes made on entry from one in
    elements (``shl m, 3``, as a body whose views were rebased has it:
    :mod:`pyzyme.transforms.view_bases`), so that its rows are ``m`` elements long."""
    if isinstance(length, I.BinaryOp) and length.opcode in ("shl", "mul"):
        m, k = length.operands
        if isinstance(k, ConstantInt) and k.signed >= 0 and _on_entry(m):
            return m, (1 << k.value if length.opcode == "shl" else k.signed)
    return length, 1


def _on_entry(value: Value) -> bool:
    """Whether ``value`` is an argument or made in its function's entry block."""
    if not isinstance(value, I.Instruction):
        return not isinstance(value, ConstantInt)
    block = value.parent
    return block is not None and block.parent is not None and block is block.parent.blocks[0]


def dense_reads(root: Value, reads_whole=None) -> bool:
    """Whether the body only reads memory at ``root`` (loads through it and addresses made
    from it; nothing stored, passed on or merged) at addresses of loop indices and values
    known on entry: densely, every iteration touching much of it (a gather through an index
    read from memory is sparse). Such an array's adjoints are worth a private copy per
    thread rather than an atomic add each. ``reads_whole(call, pointer)``, where given, says
    whether ``call`` only reads the array at ``pointer`` (a matrix product's operand): such
    a call reads it densely too, also through a phi or select (Numba hands BLAS the array or
    a contiguous copy of it)."""
    entry = root.parent.parent.blocks[0] if isinstance(root, I.Instruction) else None
    work, seen = [root], set()
    while work:
        pointer = work.pop()
        if pointer in seen:
            continue
        seen.add(pointer)
        for user in pointer.users:
            if isinstance(user, I.GetElementPtr) and user.operands[0] is pointer:
                work.append(user)
            elif reads_whole is not None and (
                    isinstance(user, I.Phi) or isinstance(user, I.Select)
                    and user.operands[0] is not pointer) and _root_or_copies(user, root):
                work.append(user)   # Numba's copy-if-strided before BLAS: what it reads too
            elif isinstance(user, I.Load) and user.pointer is pointer:
                address = _address(pointer)
                if address is None or not all(_dense_atom(a, entry) for a, _ in address.terms):
                    return False
            elif not (isinstance(user, I.CallBase) and reads_whole is not None
                      and reads_whole(user, pointer)):
                return False
    return True


def _root_or_copies(merge: Value, root: Value) -> bool:
    """Whether a phi or select of pointers into ``root`` merges nothing but them and memory
    the function allocates (Numba's contiguous copy of a strided operand): no other array
    reaches what is read through it."""
    objects = underlying_objects(merge)
    return objects is not None and all(
        o is root or isinstance(o, I.Alloca) or meminfo_of(o) is not None for o in objects)


def _dense_atom(atom: Value, entry) -> bool:
    """An index an address may hold for it to stay dense: a loop's phi, a value known on
    entry, or one computed from those by arithmetic (not read from memory)."""
    if isinstance(atom, _Product):
        return _dense_atom(atom.a, entry) and _dense_atom(atom.b, entry)
    for _ in range(16):
        if isinstance(atom, (I.Phi, ConstantInt)) or not isinstance(atom, I.Instruction) \
                or atom.parent is entry:
            return True
        if isinstance(atom, (I.Load, I.CallBase)):
            return False
        if isinstance(atom, I.Select):
            return all(_dense_atom(op, entry) for op in atom.operands[1:])
        if not atom.operands:
            return True
        if len(atom.operands) > 1:
            return all(_dense_atom(op, entry) for op in atom.operands)
        atom = atom.operands[0]
    return False
