"""Row strides versioned before differentiation: a second version of a function in which an
array's row stride is the constant its loops suggest, run where the stride is that constant.

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

So :func:`version_strides` looks for such a stride (:func:`find_stride`): an integer that
dominates the whole function (a parameter, or an instruction of the entry block), not a
constant, multiplied by something to index a ``getelementptr T, ptr base, i64 row`` in a loop,
whose accesses (loads, stores and atomic updates of a ``T``, through that address or others a
constant number of bytes from it) read element columns ``0 <= c < K`` of the row, at least two
of them, with ``2 <= K <= 8``: a few columns read one by one (xyz, RGB). It then splits the
entry block where the stride is first used and branches on ``S == K``: to a copy of the rest
of the function (:func:`~pyzyme.ir.regions.copy_region`) in which ``S`` is the constant ``K``,
or to the original. The two versions run the same operations on the same values, only their
addresses computed differently: their results are bitwise the same, and so are their
derivatives' (each version is differentiated with the rest of the function).

One stride per function, the one with the most such accesses: each stride versioned doubles
the code again, and the arrays one loop adds into together usually share their row length
(a parallel loop's body reads one ``dims`` entry for all its arrays of the same shape).
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
>>> print(find_stride(fn))
stride %s: rows of 3 double read one by one (3 accesses)
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

from collections import Counter, defaultdict
from dataclasses import dataclass

from pyzyme import naming
from pyzyme.analysis.layout import gep_offset, sizeof
from pyzyme.analysis.loops import analyze_loops
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.regions import copy_region
from pyzyme.ir.values import Argument, ConstantInt, Value, const_int

__all__ = ["MAX_INSTRUCTIONS", "MAX_COLUMNS", "Stride", "find_stride", "versioned",
           "version_strides"]

#: Functions larger than this (instructions) keep one version: the copy doubles them, and the
#: time to differentiate and compile them with it (a parallel loop's body of a few hundred
#: instructions is the case this is for).
MAX_INSTRUCTIONS = 4000

#: The most columns a row may have: beyond a few, LLVM's interleaved groups cost more than
#: they save, and a row that wide is read by a loop of its own, whose stride is 1.
MAX_COLUMNS = 8


@dataclass
class Stride:
    """A row stride worth a version: the value ``S``, the constant ``columns`` (``K``) the
    version takes it to be, the element type of the rows and how many accesses read or write
    columns of those rows."""

    value: Value
    columns: int
    element: object
    accesses: int

    def __str__(self) -> str:
        return (f"stride {self.value.ref}: rows of {self.columns} {self.element} read one by "
                f"one ({self.accesses} accesses)")


def find_stride(fn) -> Stride | None:
    """The row stride of ``fn`` worth a version (see the module docstring), or None."""
    if fn.is_declaration:
        return None
    looped = {blk for loop in analyze_loops(fn).loops for blk in loop.blocks}
    # (S, K, element type) -> accesses; a row is one base object indexed by one product.
    votes: Counter = Counter()
    order: dict = {}
    for inst in fn.instructions():
        if not (isinstance(inst, I.BinaryOp) and inst.opcode == "mul"):
            continue
        strides = [op for op in dict.fromkeys(inst.operands) if _dominates_all(op, fn)]
        if not strides:
            continue
        rows: dict = defaultdict(list)
        for gep in inst.users:
            if isinstance(gep, I.GetElementPtr) and gep.parent in looped \
                    and len(gep.indices) == 1 and gep.indices[0] is inst \
                    and gep.pointer is not inst:
                root, start = _moved(gep.pointer)
                size = sizeof(gep.source_type)
                for offset in _accesses(gep, gep.source_type, start):
                    if size and offset % size == 0:
                        rows[root, gep.source_type].append(offset // size)
        for (_, element), columns in rows.items():
            k = max(columns) + 1
            if len(set(columns)) < 2 or min(columns) < 0 or not 2 <= k <= MAX_COLUMNS:
                continue
            for s in strides:
                key = (s, k, element)
                votes[key] += len(columns)
                order.setdefault(key, len(order))
    if not votes:
        return None
    # The most accesses; among equals, the first found (the result must not depend on the
    # order of a set).
    (s, k, element), count = max(votes.items(), key=lambda kv: (kv[1], -order[kv[0]]))
    return Stride(s, k, element, count)


def _dominates_all(value, fn) -> bool:
    """Whether ``value`` is an integer a version could be chosen on before anything else
    runs: a parameter of ``fn`` or an instruction of its entry block."""
    if not (value.type.is_int and not value.type.is_vector) or value.type.width < 2:
        return False
    if isinstance(value, Argument):
        return value.function is fn
    return isinstance(value, I.Instruction) and value.parent is fn.entry


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


def _accesses(pointer: Value, element, offset: int) -> list[int]:
    """The byte offsets (``offset`` plus constant moves from ``pointer``) at which loads,
    stores and atomic updates of ``element`` through ``pointer`` reach."""
    found = []
    for user in pointer.users:
        if isinstance(user, I.GetElementPtr) and user.pointer is pointer \
                and not any(i is pointer for i in user.indices):
            at, variable = gep_offset(user)
            if not variable and all(isinstance(i, ConstantInt) for i in user.indices):
                found += _accesses(user, element, offset + at)
        elif isinstance(user, I.Load) and user.type == element:
            found.append(offset)
        elif isinstance(user, I.Store) and user.pointer is pointer \
                and user.value is not pointer and user.value.type == element:
            found.append(offset)
        elif isinstance(user, I.AtomicRMW) and user.operands[0] is pointer \
                and user.operands[1] is not pointer and user.type == element:
            found.append(offset)
    return found


def versioned(fn) -> bool:
    """Whether ``fn`` has been versioned on a stride already: its entry block ends in a branch
    on :func:`~pyzyme.naming.stride_test`."""
    term = fn.entry.terminator
    if not (isinstance(term, I.Branch) and term.is_conditional):
        return False
    test = term.operands[0]
    return isinstance(test, I.Compare) and isinstance(test.operands[1], ConstantInt) \
        and test.name.startswith(naming.stride_test(test.operands[1].value))


def version_strides(fn) -> int:
    """Version ``fn`` on the row stride :func:`find_stride` finds (see the module
    docstring); how many versions were made (0 or 1)."""
    if fn.is_declaration or versioned(fn) or \
            sum(len(blk.instructions) for blk in fn.blocks) > MAX_INSTRUCTIONS:
        return 0
    if any(isinstance(inst, (I.IndirectBr, I.CallBr)) for inst in fn.instructions()):
        return 0    # their targets are block addresses, which a copy cannot rename
    if not _phis_from_reached(fn):
        return 0
    stride = find_stride(fn)
    if stride is None:
        return 0
    entry = fn.entry
    rest = _split(fn, stride.value)
    constant = const_int(stride.value.type, stride.columns)
    found = copy_region(fn, rest, naming.stride_version("", stride.columns), {},
                        lambda blk: blk is not entry, {stride.value: constant})
    if found is None:   # _phis_from_reached rules it out: undone all the same
        _join(entry, rest)
        return 0
    b = IRBuilder(entry)
    test = b.icmp("eq", stride.value, constant, name=naming.stride_test(stride.columns))
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


def _split(fn, stride: Value) -> BasicBlock:
    """Move the entry block's instructions from the first that uses ``stride`` (its
    terminator at the latest) into a new block after it, which the entry block's successors
    now come from; the new block. What comes before is shared by both versions (the
    arguments a parallel loop's body unpacks), and so are the entry's allocas, kept there
    wherever they were so that they stay static."""
    entry = fn.entry
    insts = entry.instructions
    first = next(k for k, inst in enumerate(insts)
                 if any(op is stride for op in inst.operands) or inst is entry.terminator)
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
    for inst in rest.instructions:
        inst.parent = entry
    entry.instructions.extend(rest.instructions)
    rest.instructions = []
    for after in entry.successors:
        for phi in after.phis:
            phi.blocks = [entry if came is rest else came for came in phi.blocks]
    entry.parent.blocks.remove(rest)
