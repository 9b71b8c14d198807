"""Views of one array in a parallel loop, rebased onto one pointer before differentiation.

NumPy code under ``parallel=True`` writes a stencil with slices of one array::

    v[1:-1, 1:-1] = w[1:-1, 1:-1] + c * (w[:-2, 1:-1] + w[2:, 1:-1] + w[1:-1, :-2] + ...)

Numba makes each slice a view (a data pointer into ``w`` and ``w``'s strides) and hands the
views to the parallel loop's body (:class:`~pyzyme.rules.spec.ParallelFor`) as arrays of their
own, their strides read from the launch's ``steps`` at run time. To the body they are five
arrays that may overlap anywhere, so the reverse sweep added every adjoint into them
atomically: at two threads the gradient ran slower than at one. They are one array read at
five offsets, cell ``[i + d, j + e]`` of ``w`` for iteration ``[i, j]``, which
:mod:`pyzyme.analysis.parallel_access` knows how to own cell by cell, if the body said so.

:func:`rebase_views` makes it say so, where it can check at run time that it holds. For each
launch in a function, it finds the arrays the body indexes with strides from ``steps`` (two
for a 2-D array, one for a 1-D one) or by elements (a contiguous view: Numba's slice of a
C-ordered array in its first dimension, ``u[2:]``, whose rows, where it has them, are as long
as a ``dims`` word says), all elements of one size ``s``; groups those whose data pointers the
launching function computes from one root; and guesses each one's offset from the group's
first in rows and elements (:func:`_guess`: the offsets of slices with constant starts, ``d *
shape[1] + e`` elements, read on the path where the shapes are not so small that NumPy clips
the slice). It then copies the body (:func:`_copy`), in which each view of a group is the
group's first moved by ``d`` rows of ``m`` elements and ``e`` elements, its strides ``s * m``
and ``s`` (``m``: the row length the first view's stride gives, in elements); and before the
launch it tests that this is so (each view's inner stride is ``s``, its row stride the
first's, a multiple of ``s``, and its data pointer where the guess puts it, rows of the length
the launch stores in ``dims`` for contiguous views) and launches the
copy if it is, the body as it was if not. In the copy a group is one array read at constant
offsets in rows and elements; the slots of the views moved from another are no longer read,
and a slot the copy does not read carries nothing into it
(:mod:`pyzyme.diff.parallel.launch`), so the arrays of the copy's launch are distinct where the
groups are. A launch of views that are not moved has its strides made the element size all
the same, where they are: with a stride known, a 2-D view is owned cell by cell as well.

Both versions compute the same values from the same memory: in the copy each pointer and stride
is replaced by one the test showed equal to it. So results, and derivatives, are those of the
loop as written. A function whose views pass the test pays for one compare per view per
launch; one whose views do not (an array in Fortran order, a slice with a step) runs the body
as written, its adjoints added atomically as before.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... declare void @numba_parallel_for(ptr, ptr, ptr, ptr, ptr, i64, i64, i64)
... define void @g(ptr %args, ptr %dims, ptr %steps, ptr %data) {
... entry:
...   %pa = getelementptr i8, ptr %args, i64 8
...   %a = load ptr, ptr %pa
...   %pb = getelementptr i8, ptr %args, i64 16
...   %b = load ptr, ptr %pb
...   %psa = getelementptr i8, ptr %steps, i64 32
...   %sa = load i64, ptr %psa
...   %psb = getelementptr i8, ptr %steps, i64 40
...   %sb = load i64, ptr %psb
...   %sched = load ptr, ptr %args
...   %first = load i64, ptr %sched
...   br label %loop
... loop:
...   %i = phi i64 [ %first, %entry ], [ %i1, %loop ]
...   %oa = mul i64 %i, %sa
...   %qa = getelementptr i8, ptr %a, i64 %oa
...   %x = load double, ptr %qa
...   %ob = mul i64 %i, %sb
...   %qb = getelementptr i8, ptr %b, i64 %ob
...   store double %x, ptr %qb
...   %i1 = add i64 %i, 1
...   %more = icmp slt i64 %i1, 100
...   br i1 %more, label %loop, label %exit
... exit:
...   ret void
... }
... define void @f(ptr %w, i64 %n, i64 %stride) {
... entry:
...   %a = alloca [3 x ptr]
...   %s = alloca [6 x i64]
...   %sched = alloca [2 x i64]
...   store ptr %sched, ptr %a
...   %w2 = getelementptr double, ptr %w, i64 2
...   %sa = getelementptr i8, ptr %a, i64 8
...   store ptr %w2, ptr %sa
...   %sb = getelementptr i8, ptr %a, i64 16
...   store ptr %w, ptr %sb
...   %ta = getelementptr i8, ptr %s, i64 32
...   store i64 %stride, ptr %ta
...   %tb = getelementptr i8, ptr %s, i64 40
...   store i64 %stride, ptr %tb
...   call void @numba_parallel_for(ptr @g, ptr %a, ptr null, ptr %s, ptr null, i64 0, i64 3, i64 2)
...   ret void
... }''')
>>> f = m.get_function("f")
>>> for views in find_views(f):
...     print(views)
views of one array in @g: slot 1 at 0, slot 2 at -2 (1-D, 8-byte elements)
>>> rebase_views(m, f)
1
>>> print(f.blocks[0].instructions[-1])
br i1 %views.apart, label %views.rebased, label %views.as.written
>>> copy = m.get_function("g.views")
>>> print(copy)
define internal void @g.views(ptr %args, ptr %dims, ptr %steps, ptr %data) {
entry:
  %pa = getelementptr i8, ptr %args, i64 8
  %a = load ptr, ptr %pa
  %sched = load ptr, ptr %args
  %first = load i64, ptr %sched
  br label %loop
<BLANKLINE>
loop:
  %i = phi i64 [ %first, %entry ], [ %i1, %loop ]
  %oa = mul i64 %i, 8
  %qa = getelementptr i8, ptr %a, i64 %oa
  %x = load double, ptr %qa
  %views.column = getelementptr i8, ptr %qa, i64 -16
  store double %x, ptr %views.column
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, 100
  br i1 %more, label %loop, label %exit
<BLANKLINE>
exit:
  ret void
}

In the copy, slot 2 is slot 1 moved back two elements at its access, slot 2 is no longer read,
and both strides are the element size the test checked: the two addresses share their
arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme import naming
from pyzyme.analysis.overwrite import underlying_object
from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.parallel_access import linear_address
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.builder import resolve_later_operands
from pyzyme.ir.values import ConstantInt, Value, const_int
from pyzyme.rules import spec
from pyzyme.transforms.parallel_body import argument_slots, launch_row

__all__ = ["Views", "find_views", "rebase_views", "MAX_INSTRUCTIONS"]

#: Bodies larger than this are launched as they are: the copy doubles the code to
#: differentiate and compile.
MAX_INSTRUCTIONS = 4000


@dataclass
class _View:
    """Slot ``slot`` of a launch: the data pointer ``pointer`` the launching function stores
    there, the ``steps`` words ``words`` the body reads its strides from (outer dimension
    first) and the values stored there (``strides``), the size of its elements, its offset
    from its group's first in rows and elements (``rows``, ``elements``)."""

    slot: int
    pointer: Value
    words: tuple
    strides: tuple
    size: int
    rows: int = 0
    elements: int = 0
    #: A contiguous view of rows: the ``dims`` word its rows' length is read from, and the
    #: value stored there
    length: tuple = ()

    def __str__(self) -> str:
        at = f"{self.elements}" if len(self.words) < 2 else f"[{self.rows}, {self.elements}]"
        return f"slot {self.slot} at {at}"

    @property
    def shape(self) -> str:
        """How the body steps through it: by strides of one or two dimensions, or by elements
        (a contiguous view, whose stride is its element size)."""
        return f"{len(self.words)}-D" if self.words else "contiguous"


@dataclass
class Views:
    """The arrays of one launch of ``body`` that the copy rebases: ``groups`` of views of
    one dimension and element size (the first of each the one the others are moved
    from)."""

    launch: I.CallBase
    body: object
    groups: list

    def __str__(self) -> str:
        parts = [", ".join(map(str, group))
                 + f" ({group[0].shape}, {group[0].size}-byte elements)"
                 for group in self.groups]
        return f"views of one array in {self.body.ref}: " + "; ".join(parts)


def find_views(fn) -> list[Views]:
    """The launches of parallel loops in ``fn`` whose body reads views of one array (see the
    module docstring), each with the views it rebases."""
    found = []
    for inst in list(fn.instructions()):
        row = launch_row(inst)
        if row is not None:
            views = _views(inst, row)
            if views is not None:
                found.append(views)
    return found


def _views(launch: I.CallBase, row: spec.ParallelFor) -> Views | None:
    body = launch.args[row.body]
    count = launch.args[row.array_count]
    if not hasattr(body, "blocks") or body.is_declaration or not isinstance(count, ConstantInt) \
            or body.name.startswith(naming.PARALLEL_BODY) \
            or sum(len(blk.instructions) for blk in body.blocks) > MAX_INSTRUCTIONS:
        return None
    read = argument_slots(body.args[0])
    words = argument_slots(body.args[2], word=True)
    dims = argument_slots(body.args[1], word=True) or {}
    args_array, steps_array = launch.args[row.args], launch.args[row.steps]
    dims_array = launch.args[row.dims]
    stored = argument_slots(args_array, launch=launch)
    steps = argument_slots(steps_array, launch=launch, word=True)
    shapes = (argument_slots(dims_array, launch=launch, word=True) or {}) \
        if isinstance(dims_array, I.Instruction) else {}
    if not read or words is None or stored is None or steps is None:
        return None
    entry = body.blocks[0]
    word_of = {load: w for w, uses in words.items() for load in uses
               if isinstance(load, I.Load) and load.parent is entry}
    length_of = {load: w for w, uses in dims.items() for load in uses
                 if isinstance(load, I.Load) and load.parent is entry}
    views = []
    for k, uses in sorted(read.items()):
        if k == row.schedule or len(uses) != 1 or not isinstance(uses[0], I.Load) \
                or uses[0].parent is not entry:
            continue
        found = _stride_words(uses[0], word_of, count.value, length_of)
        if found is None:
            continue
        strides, size, lengths = found
        pointer = _stored(stored.get(k, ()), launch, args_array)
        values = [_stored(steps.get(w, ()), launch, steps_array) for w in strides]
        length = ()
        if len(lengths) == 1 and not strides:
            (w,) = lengths
            value = _stored(shapes.get(w, ()), launch, dims_array)
            length = () if value is None or len(dims[w]) != 1 else (w, value)
        # the copy divides a row stride by the element size with a shift
        if pointer is not None and all(v is not None for v in values) and \
                len(strides) <= 2 and not size & (size - 1) and \
                all(len([u for u in words[w] if isinstance(u, I.Load)]) == 1 for w in strides):
            views.append(_View(k, pointer, strides, tuple(values), size, length=length))
    groups = _groups(views)
    return Views(launch, body, groups) if groups else None


def _stride_words(data: I.Load, word_of: dict, count: int, length_of: dict) -> tuple | None:
    """``(words, size, lengths)``: the ``steps`` words whose loads (in the body's entry)
    multiply indices into addresses made from ``data``, outer first (the words below
    ``count`` are the rows' outer steps: not strides), and the size of the elements
    accessed there; no words for a contiguous array, indexed by elements of that size
    (Numba's slice of a C-ordered array in its first dimension), whose rows' length, where
    it has rows, is read from the ``dims`` words ``lengths``. None where the sizes differ,
    or the body does anything else with those addresses than load, store and move them."""
    found, sizes, work, seen, elements = set(), set(), [data], set(), set()
    lengths = set()
    while work:
        pointer = work.pop()
        if pointer in seen:
            continue
        seen.add(pointer)
        for user in pointer.users:
            if isinstance(user, I.GetElementPtr) and user.operands[0] is pointer:
                if user.source_type != T.i8:
                    elements.add(sizeof(user.source_type))
                for index in user.operands[1:]:
                    if isinstance(index, I.BinaryOp) and index.opcode == "mul":
                        found.update(w for w in map(word_of.get, index.operands)
                                     if w is not None and w >= count)
                        if user.source_type != T.i8:
                            lengths.update(w for w in map(length_of.get, index.operands)
                                           if w is not None)
                work.append(user)
            elif isinstance(user, I.Load) and user.pointer is pointer:
                sizes.add(sizeof(user.type))
            elif isinstance(user, I.Store) and user.operands[1] is pointer \
                    and user.operands[0] is not pointer:
                sizes.add(sizeof(user.operands[0].type))
            else:
                return None
    words = tuple(sorted(found))
    if len(sizes) != 1 or (words and words != tuple(range(words[0], words[0] + len(words)))):
        return None     # elements of several sizes, or strides not one array's words
    size = sizes.pop()
    if not words and elements != {size}:
        return None     # neither strided nor indexed by its elements
    return words, size, lengths


def _stored(stores, launch: I.CallBase, array: Value) -> Value | None:
    """The value the launch reads from a slot of ``array`` that ``stores`` write: the one
    store, in the launch's block before it, with no call that may write ``array`` between
    them (the test before the launch compares what it stored)."""
    stores = [s for s in stores if isinstance(s, I.Store)]
    if len(stores) != 1 or stores[0].parent is not launch.parent:
        return None
    order = launch.parent.instructions
    at, end = order.index(stores[0]), order.index(launch)
    if at > end or any(isinstance(inst, I.CallBase) and any(
            underlying_object(arg) is array for arg in inst.args if arg.type.is_pointer)
            for inst in order[at + 1:end]):
        return None
    return stores[0].operands[0]


def _groups(views: list) -> list:
    """The views grouped by the root of their data pointers (and their dimensions and
    element size), each with its guessed offset from the group's first (rows and elements);
    views whose offset cannot be guessed, or whose row offsets are in different units, make
    groups of their own."""
    by_root: dict = {}
    for view in views:
        form = linear_address(view.pointer, pick=_guess)
        key = (form[0], len(view.words), view.size) if form is not None else view
        by_root.setdefault(key, []).append((view, form))
    groups = []
    for members in by_root.values():
        (first, base), rest = members[0], members[1:]
        group, unit = [first], None
        for view, form in rest:
            offset = _offset(form, base, view.size)
            if offset is None:
                groups.append([view])
                continue
            rows, atom, elements = offset
            if atom is not None and unit is not None and atom is not unit:
                groups.append([view])
                continue
            unit = atom if atom is not None else unit
            # rows apart: of a strided 2-D view, or of contiguous ones whose rows' length
            # is read from one dims word
            same_rows = len(view.words) == 2 or (
                not view.words and view.length and first.length
                and view.length[0] == first.length[0])
            if rows and not same_rows:
                groups.append([view])
                continue
            view.rows, view.elements = rows, elements
            group.append(view)
        groups.append(group)
    return groups


def _offset(form, base, size: int):
    """``(rows, row length atom, elements)``: ``form - base`` as ``size * (rows * atom +
    elements)``; None where it is not one."""
    if form is None or base is None:
        return None
    const = form[1] - base[1]
    terms = dict(form[2])
    for atom, coef in base[2].items():
        terms[atom] = terms.get(atom, 0) - coef
    terms = {a: c for a, c in terms.items() if c}
    if const % size or len(terms) > 1 or any(c % size for c in terms.values()):
        return None
    (atom, coef), = terms.items() if terms else ((None, 0),)
    return coef // size, atom, const // size


def _guess(choice):
    """Of a phi's incoming values (a select's two, a minimum's operands), the simplest: a
    constant, else a value other than a product (NumPy's clipping of a slice to a short
    dimension gives the dimension, or its product with another, where the slice's start is
    a constant otherwise); of pointers, the one fewest run-time terms from its root. None
    where two are as simple."""
    def rank(value) -> int:
        if isinstance(value, ConstantInt):
            return 0
        if value.type.is_pointer:
            form = linear_address(value)
            return 99 if form is None else len(form[2])
        return 2 if _product(value) else 1
    values = choice.operands[1:] if isinstance(choice, I.Select) else \
        choice.args if isinstance(choice, I.CallBase) else choice.operands
    ranked = sorted(set(values), key=rank)
    if len(ranked) > 1 and rank(ranked[0]) == rank(ranked[1]):
        return None
    return ranked[0]


def _product(value) -> bool:
    """Whether ``value`` is a product of two unknowns: a ``mul``, or the product of an
    overflow-checked multiplication (Numba's of an array's shape, which LLVM may reuse)."""
    if isinstance(value, I.BinaryOp) and value.opcode == "mul":
        return not any(isinstance(op, ConstantInt) for op in value.operands)
    if isinstance(value, I.ExtractValue) and isinstance(value.operands[0], I.CallBase):
        callee = value.operands[0].called_function
        return callee is not None and callee.name.startswith(("llvm.smul.with.overflow",
                                                              "llvm.umul.with.overflow"))
    return False


def rebase_views(module, fn) -> int:
    """Version each launch of ``fn`` whose body reads views of one array (see the module
    docstring): a copy of the body with each group's views moved from its first, launched
    where a test before the launch finds them there. How many launches were versioned."""
    done = 0
    for views in find_views(fn):
        if views.launch.parent.name.startswith(naming.views("")):
            continue    # versioned already
        # something to gain: views to move, or strides to make the element size
        if any(len(group) > 1 or group[0].words for group in views.groups):
            copy = _copy(module, views)
            _version(fn, views, copy)
            done += 1
    return done


def _copy(module, views: Views):
    """The body with each group's views moved from its first (see the module docstring).

    A view ``[d, e]`` from the first is read as the first's row ``d`` (one pointer for all the
    group's views of that row) with ``e`` elements added at each access, after the address
    the body computes, and the copy's identical address arithmetic is then shared
    (:func:`_share`): so the views of one row reach memory through one pointer and constant
    offsets, which the reverse sweep's loop distribution
    (:mod:`pyzyme.transforms.distribute`) needs to turn their adjoints into a gather."""
    body = views.body
    # a name of its own for each launch: two launches of one body may guess apart
    name = module.unique_global_name(naming.views_rebased(body.name))
    new = module.add_function(name, body.function_type, prefix="internal", suffix=body.suffix)
    mapping: dict = {}
    for old, arg in zip(body.args, new.args):
        arg.name = old.name
        mapping[old] = arg
    for block in body.blocks:
        mapping[block] = new.append_block(block.name)
    slots = argument_slots(body.args[0])
    words = argument_slots(body.args[2], word=True)
    dims = argument_slots(body.args[1], word=True) or {}
    copies = []
    for block in body.blocks:
        b = IRBuilder(mapping[block])
        for inst in block.instructions:
            copy = b.insert_copy(inst, mapping)
            mapping[inst] = copy
            copies.append(copy)
    resolve_later_operands(copies, mapping)
    entry = new.blocks[0]
    b = IRBuilder(entry)
    b.position_before(entry.terminator)

    def loads(word):
        return [mapping[u] for u in words.get(word, ()) if isinstance(u, I.Load)]

    for group in views.groups:
        first = group[0]
        data = mapping[slots[first.slot][0]]
        size = const_int(T.i64, first.size)
        for v in group:
            for load in loads(v.words[-1]) if v.words else ():
                load.replace_all_uses_with(size)
            # Numba's launcher passes every array but the schedule whole to each row (an
            # outer step of 0), as split_arguments reads them too
            for load in loads(v.slot):
                load.replace_all_uses_with(const_int(load.type, 0))
        rows = {0: data}
        if len(first.words) == 2:
            shift = const_int(T.i64, first.size.bit_length() - 1)
            outer = loads(first.words[0])[0]
            length = b.ashr(outer, shift, ["exact"], name=naming.views("rows"))
            stride = b.shl(length, shift, ["nsw"], name=naming.views("stride"))
            for v in group:
                for load in loads(v.words[0]):
                    for user in list(load.users):
                        if user is not length:
                            user.replace_uses_of(load, stride)
        elif first.length:      # contiguous rows, their length read from dims
            length = next(mapping[u] for u in dims[first.length[0]] if isinstance(u, I.Load))
        for d in sorted({v.rows for v in group} - {0}):
            rows[d] = b.gep(T.i8, data, [b.mul(length, const_int(T.i64, first.size * d))],
                            name=naming.views(f"row{d}"))
        for v in group[1:]:
            pointer = mapping[slots[v.slot][0]]
            column = const_int(T.i64, v.size * v.elements)
            for access in _accesses(pointer) if v.elements else ():
                at = IRBuilder()
                at.position_before(access)
                k = 1 if isinstance(access, I.Store) else 0
                access.set_operand(k, at.gep(T.i8, access.operands[k], [column],
                                             name=naming.views("column")))
            pointer.replace_all_uses_with(rows[v.rows])
    # the slots the copy no longer reads (its launch passes them no shadow), the strides
    # it no longer loads
    dead = [i for i in entry.instructions if isinstance(i, (I.Load, I.GetElementPtr))]
    while dead:
        unused = [i for i in dead if not i.users]
        for inst in unused:
            inst.erase()
        dead = [i for i in dead if i not in unused] if unused else []
    _share(new)
    return new


def _accesses(pointer: Value) -> list:
    """The loads and stores through ``pointer`` and the addresses made from it."""
    found, work = [], [pointer]
    while work:
        p = work.pop()
        for user in list(p.users):
            if isinstance(user, I.GetElementPtr) and user.operands[0] is p:
                work.append(user)
            elif isinstance(user, (I.Load, I.Store)):
                found.append(user)
    return found


def _share(fn) -> None:
    """Within each block of ``fn``, an arithmetic instruction or address computation the same
    as one before it (opcode, flags, types and operands) is replaced by that one."""
    def key(inst):
        operands = tuple(("c", str(op.type), op.signed) if isinstance(op, ConstantInt)
                         else id(op) for op in inst.operands)
        return (inst.opcode, str(inst.type), tuple(inst.flags), operands,
                str(getattr(inst, "source_type", "")))

    changed = True
    while changed:
        changed = False
        for block in fn.blocks:
            seen: dict = {}
            for inst in list(block.instructions):
                if not isinstance(inst, (I.BinaryOp, I.GetElementPtr, I.Cast)):
                    continue
                earlier = seen.setdefault(key(inst), inst)
                if earlier is not inst:
                    inst.replace_all_uses_with(earlier)
                    inst.erase()
                    changed = True


def _version(fn, views: Views, copy) -> None:
    """Before the launch, test that the views are where the copy puts them; launch the copy
    if they are, the body as written if not."""
    launch = views.launch
    block = launch.parent
    k = block.instructions.index(launch)
    moved, block.instructions[k:] = block.instructions[k:], []
    rebased = fn.append_block(naming.views("rebased"))
    written = fn.append_block(naming.views("as.written"))
    after = fn.append_block(naming.views("launched"))
    for inst in moved[1:]:
        after.instructions.append(inst)
        inst.parent = after
    for succ in after.terminator.successors:
        for phi in succ.phis:
            phi.blocks = [after if b is block else b for b in phi.blocks]
    written.instructions.append(launch)
    launch.parent = written
    IRBuilder(written).br(after)
    b = IRBuilder(rebased)
    ops = list(launch.operands)
    ops[ops.index(views.body)] = copy
    b.insert_copy(launch, {}, ops)
    b.br(after)
    b = IRBuilder(block)
    test = _test(b, views)
    b.cbranch(test, rebased, written)


def _test(b: IRBuilder, views: Views) -> Value:
    """Whether each view of each group is where the copy puts it (see the module
    docstring)."""
    checks, unit = [], set()
    for group in views.groups:
        first = group[0]
        outer = first.strides[0] if first.strides else None
        if len(first.words) == 2:
            checks.append(b.icmp("eq", b.and_(outer, const_int(T.i64, first.size - 1)),
                                 const_int(T.i64, 0)))
        for v in group:
            if v.strides and (v.strides[-1], v.size) not in unit:
                unit.add((v.strides[-1], v.size))
                checks.append(b.icmp("eq", v.strides[-1], const_int(T.i64, v.size)))
            if len(v.words) == 2 and v.strides[0] is not outer:
                checks.append(b.icmp("eq", v.strides[0], outer))
            if v is first:
                continue
            moved = const_int(T.i64, v.size * v.elements)
            if len(v.words) == 2 and v.rows:
                moved = b.add(b.mul(outer, const_int(T.i64, v.rows)), moved)
            elif v.rows:     # contiguous rows of the length the body reads from dims
                if v.length[1] is not first.length[1]:
                    checks.append(b.icmp("eq", v.length[1], first.length[1]))
                moved = b.add(b.mul(first.length[1], const_int(T.i64, v.size * v.rows)),
                              moved)
            there = b.gep(T.i8, first.pointer, [moved])
            checks.append(b.icmp("eq", v.pointer, there))
    test = checks[0]
    for check in checks[1:]:
        test = b.and_(test, check)
    test.name = b.function.unique_name(naming.views("apart"))
    return test
