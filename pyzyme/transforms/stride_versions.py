"""Row strides versioned before differentiation: a second version of a function in which the
row strides of its 2-D arrays are the constants its loops suggest, run where they are.

Numba addresses ``pos[j, k]`` of a C-contiguous 2-D array at ``data + (j * shape1 + k) * 8``,
where ``shape1`` is known only at run time: a parameter of a serial function, a load from
``dims`` in a parallel loop's body. A loop over ``j`` reading ``pos[j, 0]``, ``pos[j, 1]`` and
``pos[j, 2]`` thus reads ``getelementptr double, ptr %data, i64 (mul %j, %S)`` and that
address moved 8 and 16 bytes. Its reverse sweep adds into ``pos'[j, 0..2]`` the same way, and
LLVM, unable to prove that the three adds of one iteration never touch the cells of the
next (they would with ``S == 1``), vectorizes none of it ("unsafe dependent memory
operations"). With ``S`` a constant it forms interleaved access groups: the gradient of a
Lennard-Jones kernel whose pair loop has no branch took 74.9 ms instead of 105.6 ms with the
stride patched to 3.

So :func:`version_strides` looks for such strides (:func:`find_strides`): integers that
dominate the whole function (parameters, or instructions of the entry block), not constants,
multiplied by something to index a ``getelementptr T, ptr base, i64 row`` in a loop, whose
accesses (loads, stores and atomic updates of a ``T``, through that address or others a
constant number of bytes from it) reach element columns ``0 <= c < K`` of the row, at least
two of them, with ``2 <= K <= 8``: a few columns read one by one (xyz, RGB). Each stride is
taken to be the largest such ``K`` of its rows (a row has at least that many columns). It
then splits the entry block after the strides are defined, where one is first used, and
branches on ``S1 == K1 and S2 == K2 ...``: to a copy of the rest of the function
(:func:`~pyzyme.ir.regions.copy_region`) in which each ``S`` is its constant ``K``, or to the
original. The two versions run the same operations on the same values, only their addresses
computed differently: their results are bitwise the same, and so are their derivatives'
(each version is differentiated with the rest of the function).

All the strides in one test, not one stride (or each in a test of its own): LLVM vectorizes a
loop only where it knows the stride of every row the loop reaches, and with one made a
constant and another left unknown it vectorized the reverse loop of ``out[j, k] += pos[j, 1]
* pos[j, 2] ...`` with gathers from the other array, the gradient twice as slow as with the
loop not vectorized at all (3.8 -> 7.7 ms for 10**6 rows, on an AMD EPYC); a version per
stride would double the code again for each. One test of all keeps two versions, the copy
run where every array has the row length its loops suggest.

Functions of more than :data:`MAX_INSTRUCTIONS` instructions are left alone, since the copy
doubles them (and the time to differentiate and compile them), as are functions versioned
already (a parallel loop's body is asked for once per launch that reaches it) and anything
else this does not understand.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @f(ptr noalias %x, i64 %n, i64 %s) {
... entry:
...   br label %loop
... loop:
...   %j = phi i64 [ 0, %entry ], [ %j1, %loop ]
...   %row = mul i64 %j, %s
...   %p0 = getelementptr double, ptr %x, i64 %row
...   %a = load double, ptr %p0
...   %p1 = getelementptr i8, ptr %p0, i64 8
...   %b = load double, ptr %p1
...   %p2 = getelementptr i8, ptr %p0, i64 16
...   %c = fadd double %a, %b
...   store double %c, ptr %p2
...   %j1 = add nuw nsw i64 %j, 1
...   %done = icmp eq i64 %j1, %n
...   br i1 %done, label %exit, label %loop
... exit:
...   ret void
... }''')
>>> fn = m.get_function("f")
>>> for stride in find_strides(fn):
...     print(stride)
stride %s: rows of 3 read one by one (3 accesses)
>>> version_strides(fn)
1
>>> print(fn)
define void @f(ptr noalias %x, i64 %n, i64 %s) {
entry:
  %stride.is3 = icmp eq i64 %s, 3
  br i1 %stride.is3, label %entry.rest.stride3, label %entry.rest
<BLANKLINE>
entry.rest:
  br label %loop
<BLANKLINE>
loop:
  %j = phi i64 [ 0, %entry.rest ], [ %j1, %loop ]
  %row = mul i64 %j, %s
  %p0 = getelementptr double, ptr %x, i64 %row
  %a = load double, ptr %p0
  %p1 = getelementptr i8, ptr %p0, i64 8
  %b = load double, ptr %p1
  %p2 = getelementptr i8, ptr %p0, i64 16
  %c = fadd double %a, %b
  store double %c, ptr %p2
  %j1 = add nuw nsw i64 %j, 1
  %done = icmp eq i64 %j1, %n
  br i1 %done, label %exit, label %loop
<BLANKLINE>
exit:
  ret void
<BLANKLINE>
entry.rest.stride3:
  br label %loop.stride3
<BLANKLINE>
loop.stride3:
  %j.1 = phi i64 [ 0, %entry.rest.stride3 ], [ %j1.1, %loop.stride3 ]
  %row.1 = mul i64 %j.1, 3
  %p0.1 = getelementptr double, ptr %x, i64 %row.1
  %a.1 = load double, ptr %p0.1
  %p1.1 = getelementptr i8, ptr %p0.1, i64 8
  %b.1 = load double, ptr %p1.1
  %p2.1 = getelementptr i8, ptr %p0.1, i64 16
  %c.1 = fadd double %a.1, %b.1
  store double %c.1, ptr %p2.1
  %j1.1 = add nuw nsw i64 %j.1, 1
  %done.1 = icmp eq i64 %j1.1, %n
  br i1 %done.1, label %exit.stride3, label %loop.stride3
<BLANKLINE>
exit.stride3:
  ret void
}
>>> version_strides(fn)     # versioned already
0
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from pyzyme import naming
from pyzyme.analysis.layout import gep_offset, sizeof
from pyzyme.analysis.loops import analyze_loops
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.regions import copy_region
from pyzyme.ir.values import Argument, ConstantInt, Value, const_int

__all__ = ["MAX_INSTRUCTIONS", "MAX_COLUMNS", "Stride", "find_strides", "versioned",
           "version_strides"]

#: Functions larger than this (instructions) keep one version: the copy doubles them, and the
#: time to differentiate and compile them with it (a parallel loop's body of a few hundred
#: instructions is the case this is for).
MAX_INSTRUCTIONS = 4000

#: The most columns a row may have: LLVM forms interleaved access groups of at most 8 members
#: (its ``-max-interleave-group-factor``), and a row wider than that is usually read by a loop
#: of its own, whose stride is 1.
MAX_COLUMNS = 8


@dataclass
class Stride:
    """A row stride worth a version: the value ``S``, the constant ``columns`` (``K``) the
    version takes it to be (the most columns any loop reads of its rows: a row has at least
    as many), and how many loads, stores and atomic updates reach columns of those rows."""

    value: Value
    columns: int
    accesses: int
    writes: int = 0     # of the accesses, stores and atomic updates

    def __str__(self) -> str:
        return (f"stride {self.value.ref}: rows of {self.columns} read one by one "
                f"({self.accesses} accesses)")


def find_strides(fn) -> list[Stride]:
    """The row strides of ``fn`` worth a version (see the module docstring), those with the
    most accesses first."""
    if fn.is_declaration:
        return []
    looped = {blk for loop in analyze_loops(fn).loops for blk in loop.blocks}
    found: dict = {}      # S -> Stride, in the order first found
    for inst in fn.instructions():
        if not (isinstance(inst, I.BinaryOp) and inst.opcode == "mul"):
            continue
        strides = [op for op in dict.fromkeys(inst.operands) if _dominates_all(op, fn)]
        if not strides:
            continue
        # a row: one object indexed by this product, in elements of one type
        rows: dict = defaultdict(list)
        for gep in inst.users:
            if isinstance(gep, I.GetElementPtr) and gep.parent in looped \
                    and len(gep.indices) == 1 and gep.indices[0] is inst \
                    and gep.pointer is not inst:
                root, start = _moved(gep.pointer)
                size = sizeof(gep.source_type)
                for offset, write in _accesses(gep, gep.source_type, start):
                    if size and offset % size == 0:
                        rows[root, gep.source_type].append((offset // size, write))
        for row in rows.values():
            columns = [c for c, _ in row]
            k = max(columns) + 1
            if len(set(columns)) < 2 or min(columns) < 0 or not 2 <= k <= MAX_COLUMNS:
                continue
            for value in strides:
                got = found.setdefault(value, Stride(value, k, 0))
                got.columns = max(got.columns, k)
                got.accesses += len(columns)
                got.writes += sum(write for _, write in row)
    # most accesses first; among equals, the first found (not the order of a set)
    return sorted(found.values(), key=lambda st: -st.accesses)


def _dominates_all(value, fn) -> bool:
    """Whether ``value`` is an integer a version could be chosen on before anything else
    runs: a parameter of ``fn`` or an instruction of its entry block."""
    if not (value.type.is_int and not value.type.is_vector) or value.type.width < 2:
        return False
    if isinstance(value, Argument):
        return value.function is fn
    # (an invoke ending the entry block defines its result only where it returns)
    return isinstance(value, I.Instruction) and value.parent is fn.entry \
        and not value.is_terminator


def _moved(pointer: Value) -> tuple:
    """``pointer`` as an object and a constant number of bytes from it."""
    offset = 0
    while isinstance(pointer, I.GetElementPtr):
        at, variable = gep_offset(pointer)
        if variable or not all(isinstance(i, ConstantInt) for i in pointer.indices):
            break
        offset += at
        pointer = pointer.pointer
    return pointer, offset


def _accesses(pointer: Value, element, offset: int) -> list[tuple[int, bool]]:
    """The byte offsets (``offset`` plus constant moves from ``pointer``) at which loads,
    stores and atomic updates of ``element`` through ``pointer`` reach, each with whether it
    writes."""
    found = []
    for user in pointer.users:
        if isinstance(user, I.GetElementPtr) and user.pointer is pointer \
                and not any(i is pointer for i in user.indices):
            at, variable = gep_offset(user)
            if not variable and all(isinstance(i, ConstantInt) for i in user.indices):
                found += _accesses(user, element, offset + at)
        elif isinstance(user, I.Load) and user.type == element:
            found.append((offset, False))
        elif isinstance(user, I.Store) and user.pointer is pointer \
                and user.value is not pointer and user.value.type == element:
            found.append((offset, True))
        elif isinstance(user, I.AtomicRMW) and user.operands[0] is pointer \
                and user.operands[1] is not pointer and user.type == element:
            found.append((offset, True))
    return found


def versioned(fn) -> bool:
    """Whether ``fn`` has been versioned on its strides already: its entry block ends in a
    branch on a :func:`~pyzyme.naming.stride_test`."""
    term = fn.entry.terminator
    return isinstance(term, I.Branch) and term.is_conditional \
        and isinstance(term.operands[0], I.Instruction) \
        and term.operands[0].name.startswith(naming.stride_test([]))


def version_strides(fn, *, reverse: bool = True) -> int:
    """Version ``fn`` on the row strides :func:`find_strides` finds (see the module
    docstring); how many versions were made (0 or 1). For a forward-mode derivative
    (``reverse`` false), only where the function writes rows: its tangents read rows as the
    primal does, which vectorizes with a stride known at run time, and only the reverse
    sweep turns reads into adds."""
    if fn.is_declaration or versioned(fn) or \
            sum(len(blk.instructions) for blk in fn.blocks) > MAX_INSTRUCTIONS:
        return 0
    if any(isinstance(inst, (I.IndirectBr, I.CallBr)) for inst in fn.instructions()):
        return 0    # their targets are block addresses, which a copy cannot rename
    if not _phis_from_reached(fn):
        return 0
    strides = find_strides(fn)
    if not strides or not (reverse or any(st.writes for st in strides)):
        return 0
    columns = [st.columns for st in strides]
    constants = {st.value: const_int(st.value.type, st.columns) for st in strides}
    entry = fn.entry
    rest = _split(fn, constants)
    found = copy_region(fn, rest, naming.stride_version("", columns), {},
                        lambda blk: blk is not entry, constants)
    if found is None:   # _phis_from_reached rules it out: undone all the same
        _join(entry, rest)
        return 0
    b = IRBuilder(entry)
    test, tested = None, []
    for value, constant in constants.items():
        tested.append(constant.value)
        equal = b.icmp("eq", value, constant, name=naming.stride_test([constant.value]))
        test = equal if test is None else b.and_(test, equal, name=naming.stride_test(tested))
    b.cbranch(test, found[0], rest)
    return 1


def _phis_from_reached(fn) -> bool:
    """Whether every phi of a block reached from the entry has its entries from such blocks
    (:func:`~pyzyme.ir.regions.copy_region` copies only those)."""
    reached, todo = {fn.entry}, [fn.entry]
    while todo:
        for nxt in todo.pop().successors:
            if nxt not in reached:
                reached.add(nxt)
                todo.append(nxt)
    return all(came in reached for blk in reached for phi in blk.phis for came in phi.blocks)


def _split(fn, strides) -> BasicBlock:
    """Move the entry block's instructions from the first that uses one of ``strides`` after
    they are all defined (its terminator at the latest) into a new block after it, which the
    entry block's successors now come from; the new block. What comes before is shared by
    both versions (the arguments a parallel loop's body unpacks), and so are the entry's
    allocas, kept there wherever they were so that they stay static."""
    entry = fn.entry
    insts = entry.instructions
    defined = max((k for k, inst in enumerate(insts) if inst in strides), default=-1)
    first = next(k for k, inst in enumerate(insts)
                 if k > defined and (any(op in strides for op in inst.operands)
                                     or inst is entry.terminator))
    moved = [inst for inst in insts[first:]
             if not (isinstance(inst, I.Alloca) and all(isinstance(op, ConstantInt)
                                                        for op in inst.operands))]
    going = set(map(id, moved))
    kept = [inst for inst in insts if id(inst) not in going]
    rest = BasicBlock(fn, fn.unique_name(naming.stride_version(entry.name, None)))
    fn.blocks.insert(1, rest)
    entry.instructions = kept
    for inst in moved:
        inst.parent = rest
    rest.instructions = moved
    for after in rest.successors:
        for phi in after.phis:
            phi.blocks = [rest if came is entry else came for came in phi.blocks]
    return rest


def _join(entry: BasicBlock, rest: BasicBlock) -> None:
    """Undo :func:`_split`: ``rest``'s instructions back at the end of ``entry``."""
    entry.parent.join_blocks(entry, rest)
