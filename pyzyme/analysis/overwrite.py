"""Which loads read memory that may be overwritten before the reverse sweep.

Reverse mode runs the function forwards, then its adjoint backwards. An adjoint that needs a
loaded value (d(x*y)/dx needs y) can load it again in the reverse sweep only if nothing wrote
that memory in between; otherwise the value must be cached in the forward sweep. This analysis
answers that question for every load: a load is *overwritten* when some instruction that may
write the same memory can run after it (later in its block, in a block reachable from it, or
in a later iteration of an enclosing loop).

Memory is told apart by its underlying object (the pointer with GEPs and casts stripped):
distinct stack slots, distinct allocations, and ``noalias`` parameters never alias each other
or other parameters; anything else may alias anything. That is Enzyme's conservative baseline;
it never calls a written location safe.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''define double @f(ptr noalias %a, ptr noalias %b) {
... entry:
...   %x = load double, ptr %a, align 8
...   %y = load double, ptr %b, align 8
...   store double 0.0, ptr %a, align 8
...   %p = fmul double %x, %y
...   ret double %p
... }''')
>>> print(analyze_overwrites(m.get_function("f")))
overwrites in @f
  %x = load double, ptr %a, align 8: overwritten by store double 0.0, ptr %a, align 8
  %y = load double, ptr %b, align 8: not overwritten
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from pyzyme.analysis.cfg import reverse_post_order
from pyzyme.ir import instructions as I
from pyzyme.ir import types as ir_types
from pyzyme.ir.opcodes import ADDRESS_CASTS, READ_MODIFY_WRITE
from pyzyme.ir.printer import _slots  # the printer's numbering of unnamed values
from pyzyme.ir.values import Argument, GlobalValue, GlobalVariable, Null, Poison, Undef, Value
from pyzyme.rules import default_rules, spec
from pyzyme.progress import timed

__all__ = ["OverwriteResult", "analyze_overwrites", "identified_object", "underlying_object",
           "underlying_objects", "may_alias", "objects_may_alias", "swapped_apart",
           "PURE_INTRINSICS", "pure_call", "list_block_of", "written_pointers", "fresh_object",
           "link_time_object", "meminfo_of", "refcount_call", "rule_row", "released_in_loops"]

# Intrinsics (by name, overload suffix left out) that read and write no memory and cannot
# trap: the loop rewrites (distribute, interchange) may move and repeat their calls.
PURE_INTRINSICS = ("llvm.fmuladd.", "llvm.fma.", "llvm.fabs.", "llvm.sqrt.", "llvm.exp.",
                   "llvm.log.", "llvm.sin.", "llvm.cos.", "llvm.pow.", "llvm.powi.",
                   "llvm.copysign.", "llvm.minnum.", "llvm.maxnum.", "llvm.floor.",
                   "llvm.ceil.", "llvm.trunc.", "llvm.round.", "llvm.exp2.", "llvm.log2.",
                   "llvm.log10.", "llvm.tanh.", "llvm.smax.", "llvm.smin.", "llvm.umax.",
                   "llvm.umin.", "llvm.abs.", "llvm.minimum.", "llvm.maximum.",
                   "llvm.usub.sat.", "llvm.uadd.sat.", "llvm.ssub.sat.", "llvm.sadd.sat.")


def pure_call(inst) -> bool:
    """Whether ``inst`` is a call of one of :data:`PURE_INTRINSICS`."""
    fn = inst.called_function
    return fn is not None and fn.name.startswith(PURE_INTRINSICS)

# Calls known not to write memory the function can see (markers and pure math).
_NO_WRITES_PREFIXES = ("llvm.lifetime.", "llvm.assume", "llvm.dbg.", "llvm.experimental.noalias",
                       "llvm.invariant.", "llvm.expect")


def underlying_object(pointer: Value) -> Value:
    """``pointer`` with getelementptr and pointer casts stripped: the object it points into."""
    seen = 0
    while seen < 256:
        if isinstance(pointer, I.GetElementPtr) or (
                isinstance(pointer, I.Cast) and pointer.opcode in ADDRESS_CASTS):
            pointer = pointer.operands[0]
            seen += 1
        else:
            return pointer
    return pointer


@lru_cache(maxsize=None)
def _runtime_row(name: str):
    """The shipped rule row of callee ``name``: what the runtime's allocators, releases,
    reference counts and BLAS helpers do to memory is read there (:mod:`pyzyme.rules.runtime`)."""
    return default_rules().lookup(name, "call")


def rule_row(call: Value):
    """The shipped rule row of the function ``call`` calls, or None (not a direct call)."""
    callee = call.called_function if isinstance(call, I.CallBase) else None
    return _runtime_row(callee.name) if callee is not None else None


def _allocation(obj: Value) -> bool:
    """A call that allocates fresh memory: its result aliases nothing that existed before."""
    return isinstance(rule_row(obj), spec.Allocation)


def _meminfo_data(obj: Value) -> bool:
    """The data pointer of a MemInfo this function allocated: ``load ptr (meminfo + 24)``,
    or the new data block a resize of it returns."""
    return _meminfo_of(obj) is not None


def _meminfo_of(obj: Value) -> Value | None:
    """The MemInfo (allocated by this function) whose data ``obj`` is, else None."""
    if isinstance(obj, I.CallBase):
        row = rule_row(obj)
        if not (isinstance(row, spec.Mirror) and row.resizes):
            return None
        base, offset = obj.args[0], None   # the new data block of the handle
    elif isinstance(obj, I.Load) and obj.type.is_pointer:
        base, offset = obj.pointer, 0
        if isinstance(base, I.GetElementPtr) and len(base.indices) == 1 and \
                base.source_type == ir_types.i8 and hasattr(base.indices[0], "value"):
            base, offset = base.pointer, base.indices[0].value
    else:
        return None
    row = rule_row(base)
    if isinstance(row, spec.Allocation) and row.data_offset is not None and \
            offset in (None, row.data_offset):
        return base
    return None


def meminfo_of(obj: Value) -> Value | None:
    """The MemInfo this function allocated whose data block ``obj`` (an object of
    :func:`underlying_object`) is, else None."""
    return _meminfo_of(obj)


def refcount_call(inst: Value) -> bool:
    """Whether ``inst`` calls one of the runtime's reference counts (it writes only the
    count of the MemInfo it is handed)."""
    row = rule_row(inst)
    return isinstance(row, spec.Mirror) and bool(row.refcount)


def list_block_of(pointer: Value) -> Value | None:
    """The variable-size MemInfo this function allocated (Numba's list) into whose data block
    ``pointer`` points, else None."""
    owner = _meminfo_of(underlying_object(pointer))
    return owner if owner is not None and rule_row(owner).resizable else None


def identified_object(obj: Value) -> bool:
    """An object distinct from every other identified object: a stack slot, a fresh allocation
    (or the data of a fresh MemInfo), a global, or a ``noalias`` parameter."""
    if isinstance(obj, (I.Alloca, GlobalVariable)):
        return True
    if _allocation(obj) or _meminfo_data(obj):
        return True
    return isinstance(obj, Argument) and "noalias" in obj.attrs.split()


def _root(obj: Value) -> bool:
    """An object whose identity this analysis understands (not a phi, select or load result,
    which could stand for any of several objects)."""
    if isinstance(obj, (Argument, I.Alloca, GlobalVariable)):
        return True
    return _allocation(obj) or _meminfo_data(obj)


def _noalias_argument(obj: Value) -> bool:
    return isinstance(obj, Argument) and "noalias" in obj.attrs.split()


def fresh_object(obj: Value) -> bool:
    """A stack slot or an allocation made by this function: no parameter can point into it."""
    return isinstance(obj, I.Alloca) or _allocation(obj) or _meminfo_data(obj)


def link_time_object(obj: Value, depth: int = 4) -> bool:
    """Whether ``obj`` is an object whose address is fixed when the module is linked: a
    global or function, or a pointer read (through ``extractvalue``) from constant globals,
    whose initializers can hold no other kind of address (Numba's exception info: its
    pickled exception, the function building its arguments)."""
    if isinstance(obj, GlobalValue):
        return True
    if depth == 0:
        return False
    if isinstance(obj, I.ExtractValue):
        return link_time_object(obj.operands[0], depth - 1)
    if isinstance(obj, I.Load):
        sources = underlying_objects(obj.pointer)
        return bool(sources) and all(isinstance(g, GlobalVariable) and g.is_constant
                                     for g in sources)
    return False


def underlying_objects(pointer: Value, limit: int = 32) -> list[Value] | None:
    """Every object ``pointer`` may point into, through phis and selects (a null pointer points
    into none); None when there are more than ``limit`` to follow."""
    found, work, seen = [], [pointer], set()
    while work:
        obj = underlying_object(work.pop())
        if obj in seen:
            continue
        seen.add(obj)
        if len(seen) > limit:
            return None
        if isinstance(obj, I.Phi):
            work.extend(obj.operands)
        elif isinstance(obj, I.Instruction) and obj.opcode == "select":
            work.extend(obj.operands[1:])
        elif not isinstance(obj, (Null, Undef, Poison)):
            found.append(obj)
    return found


def swapped_apart(a: Value, b: Value) -> bool:
    """Whether ``a`` and ``b`` are phis of one block that always point into two different
    identified objects: a time loop's two grids swapped after each step (``v, w = w, v``).

    On every edge into the block the pair either swaps (``(b, a)``), stays, or starts as two
    identified objects apart from each other (two allocations); by induction over the loop's
    iterations the two never meet. The proof is about the two values of one run of the
    block: one launch of a parallel loop given both. It is not :func:`may_alias`'s answer,
    which also covers a pointer of one iteration against one of the next (``w`` after a
    step is ``v`` before it): the overwrite analysis asks that.

    Examples
    --------
    >>> from pyzyme.ir import parse_module
    >>> m = parse_module('''
    ... define void @f(i64 %n) {
    ... entry:
    ...   %a = alloca [8 x double]
    ...   %b = alloca [8 x double]
    ...   br label %loop
    ... loop:
    ...   %v = phi ptr [ %a, %entry ], [ %w, %loop ]
    ...   %w = phi ptr [ %b, %entry ], [ %v, %loop ]
    ...   %u = phi ptr [ %a, %entry ], [ %v, %loop ]
    ...   %x = load double, ptr %v
    ...   store double %x, ptr %w
    ...   br label %loop
    ... }''')
    >>> v, w, u = m.get_function("f").blocks[1].instructions[:3]
    >>> swapped_apart(v, w), may_alias(v, w), swapped_apart(v, u)
    (True, True, False)
    """
    a, b = underlying_object(a), underlying_object(b)
    if not (isinstance(a, I.Phi) and isinstance(b, I.Phi)) or a is b or a.parent is not b.parent:
        return False
    into_b = dict(zip(b.blocks, b.operands))
    for va, block in a.incoming:
        if block not in into_b:
            return False
        oa, ob = underlying_object(va), underlying_object(into_b[block])
        if {oa, ob} == {a, b} and oa is not ob:
            continue
        if identified_object(oa) and identified_object(ob) and \
                not _objects_may_alias(oa, ob):
            continue
        return False
    return True


def may_alias(a: Value, b: Value, apart=None) -> bool:
    """Whether pointers ``a`` and ``b`` may point into the same object; ``apart(oa, ob)``
    says of two objects that the caller knows them not to overlap."""
    objects_a, objects_b = underlying_objects(a), underlying_objects(b)
    if objects_a is None or objects_b is None:
        return True
    return any(_objects_may_alias(oa, ob, apart) for oa in objects_a for ob in objects_b)


def objects_may_alias(oa: Value, ob: Value, apart=None) -> bool:
    """Whether two objects (of :func:`underlying_objects`) may overlap: :func:`may_alias` for
    a caller that keeps the objects of its pointers."""
    return _objects_may_alias(oa, ob, apart)


def _objects_may_alias(oa: Value, ob: Value, apart=None) -> bool:
    if oa is ob:
        return True
    if apart is not None and apart(oa, ob):
        return False
    if not (_root(oa) and _root(ob)):
        return True
    # Data pointers loaded at different times from one MemInfo point into one block (or, after
    # a resize, into the block it moved to).
    owner = _meminfo_of(oa)
    if owner is not None and owner is _meminfo_of(ob):
        return True
    if identified_object(oa) and identified_object(ob):
        return False
    if _noalias_argument(oa) or _noalias_argument(ob):
        return False  # noalias: nothing else the function sees points into it
    if fresh_object(oa) or fresh_object(ob):
        return False
    return True  # two plain parameters, or a parameter and a global


def written_pointers(inst: I.Instruction) -> list[Value]:
    """Pointers ``inst`` may write through; every pointer argument of an unknown call."""
    op = inst.opcode
    if op == "store":
        return [inst.operands[1]]
    if op in READ_MODIFY_WRITE:
        return [inst.operands[0]]
    if isinstance(inst, I.CallBase):
        callee = inst.called_function
        name = callee.name if callee is not None else ""
        if name.startswith(_NO_WRITES_PREFIXES):
            return []
        if name.startswith(("llvm.memcpy", "llvm.memmove", "llvm.memset")):
            return [inst.args[0]]
        row = _runtime_row(name) if name else None
        if isinstance(row, spec.Allocation) or (isinstance(row, spec.Mirror) and row.refcount):
            return []  # a reference count writes only the count; the caller holds one
        if isinstance(row, (spec.Blas, spec.Mpi)):
            return [inst.args[i] for i in row.writes]  # BLAS and LAPACK write their results
        if isinstance(row, spec.Inactive) and row.writes is not None:
            return [inst.args[i] for i in row.writes]
        if isinstance(row, spec.Mirror) and row.resizes:
            return [inst.args[0], inst]  # the MemInfo, and its data (moved)
        return [a for a in inst.args if a.type.is_pointer]
    return []


def released_in_loops(fn, loops) -> frozenset:
    """The reference counts of ``fn`` (``NRT_decref``) that reverse mode makes in the forward
    sweep, where the primal makes them, instead of deferring them until the reverse sweep is
    done: each may release a MemInfo allocated in the same iteration of the same loop (a time
    step's NumPy temporary, ``tmp = v[1:-1] + c * v[2:]`` in a loop: ``loops`` is ``fn``'s
    :class:`~pyzyme.analysis.loops.LoopInfo`). Deferred, every iteration's temporary stays
    alive until the reverse sweep is done (50 steps of a 2000 x 2000 stencil kept 1.6 GB of
    them). :func:`analyze_overwrites` counts each as a write of the memory it may free, so
    the reverse sweep never loads from that memory again (its values are cached where it
    needs them; a loop's temporary is written on every iteration, so they are already).

    ``free`` and other releases stay deferred: pyzyme's own checkpoints keep their snapshots
    in blocks a loop's iteration allocates and frees, and read them back in the reverse sweep
    by copying, not by loads this analysis answers for."""
    found = []
    for block in fn.blocks:
        loop = loops.loop_of(block)
        if loop is None:
            continue
        for inst in block.instructions:
            if not refcount_call(inst):
                continue
            row = rule_row(inst)
            if not row.releases or row.resizes:
                continue
            obj = underlying_object(inst.args[row.pointer_args[0]])
            if _allocation(obj) and loops.loop_of(obj.parent) is loop:
                found.append(inst)
    return frozenset(found)


@dataclass
class _Release:
    """A release :func:`released_in_loops` chose, as a writer: of the allocation ``object``
    and of the data of the MemInfo it is."""

    object: Value

    def covers(self, pointer: Value) -> bool:
        objects = underlying_objects(pointer)
        return objects is None or any(o is self.object or _meminfo_of(o) is self.object
                                      for o in objects)


@dataclass
class OverwriteResult:
    """For each load of ``function``, the first instruction found that may overwrite what it
    read before the reverse sweep, or None."""

    function: object
    overwritten_by: dict = field(default_factory=dict)
    search: object = None

    def is_overwritten(self, load: I.Load) -> bool:
        return self.overwritten_by.get(load) is not None

    def written_after(self, inst: I.Instruction, pointer: Value) -> I.Instruction | None:
        """The first instruction found that may write memory at ``pointer`` after ``inst``
        runs (searched as for a load), or None.

        Examples
        --------
        >>> from pyzyme.ir import parse_module
        >>> m = parse_module('''define void @g(ptr noalias %a, ptr noalias %b) {
        ... entry:
        ...   call void @use(ptr %a, ptr %b)
        ...   store double 0.0, ptr %b, align 8
        ...   ret void
        ... }
        ... declare void @use(ptr, ptr)''')
        >>> g = m.get_function("g"); call = g.blocks[0].instructions[0]
        >>> result = analyze_overwrites(g)
        >>> result.written_after(call, g.args[0]), str(result.written_after(call, g.args[1]))
        (None, 'store double 0.0, ptr %b, align 8')
        """
        return self.search.writer_after(inst, pointer)

    def __str__(self) -> str:
        slots = _slots(self.function)

        def ref(value: Value) -> str:
            n = slots.get(value)
            return value.ref if n is None else f"%{n}"

        lines = [f"overwrites in {self.function.ref}"]
        for load, writer in self.overwritten_by.items():
            text = f"{ref(load)} = {load.body(ref)}"
            verdict = f"overwritten by {writer.body(ref)}" if writer is not None \
                else "not overwritten"
            lines.append(f"  {text}: {verdict}")
        return "\n".join(lines)


@timed("analyses")
def analyze_overwrites(fn, apart=None, released=frozenset()) -> OverwriteResult:
    """Find, for every load of ``fn``, whether memory it read may be written after it.

    The search follows the control-flow graph from the load: the rest of its block, then every
    block reachable from it (which, in a loop, includes the load's own block again, so a store
    earlier in the loop body that runs in the next iteration counts). ``apart(oa, ob)`` says
    of two objects that the caller knows them not to overlap (the arrays of a parallel loop's
    body, where its launch passed distinct ones). The calls in ``released`` (of
    :func:`released_in_loops`) write the memory they release.
    """
    search = _Search(fn, apart, released)
    result = OverwriteResult(fn, search=search)
    for block in search.order:
        for inst in block.instructions:
            if isinstance(inst, I.Load):
                result.overwritten_by[inst] = search.writer_after(inst, inst.pointer)
    return result


class _Search:
    """Who writes what, per block, and which blocks follow which."""

    def __init__(self, fn, apart=None, released=frozenset()) -> None:
        self.apart = apart
        self.released = released
        self.order = reverse_post_order(fn)
        self.writers = {block: [(i, w) for i in block.instructions for w in self._writes(i)]
                        for block in self.order}
        self.reach = _reachable_from_successors(self.order)

    def _writes(self, inst: I.Instruction) -> list:
        if inst in self.released:
            row = rule_row(inst)
            return [_Release(underlying_object(inst.args[row.pointer_args[0]]))]
        return written_pointers(inst)

    def _may_write(self, pointer: Value, w) -> bool:
        if isinstance(w, _Release):
            return w.covers(pointer)
        return may_alias(pointer, w, self.apart)

    def writer_after(self, inst: I.Instruction, pointer: Value) -> I.Instruction | None:
        block = inst.parent
        index = block.instructions.index(inst)
        for later in block.instructions[index + 1:]:
            if any(self._may_write(pointer, w) for w in self._writes(later)):
                return later
        for other in self.reach[block]:
            found = next((i for i, w in self.writers[other] if self._may_write(pointer, w)),
                         None)
            if found is not None:
                return found
        return None


def _reachable_from_successors(order: list) -> dict:
    """For each block, the blocks reachable through one or more edges, in CFG order."""
    position = {b: n for n, b in enumerate(order)}
    reach: dict = {}
    for block in order:
        seen: dict = {}
        stack = list(block.successors)
        while stack:
            b = stack.pop()
            if b in seen or b not in position:
                continue
            seen[b] = None
            stack.extend(b.successors)
        reach[block] = sorted(seen, key=position.__getitem__)
    return reach
