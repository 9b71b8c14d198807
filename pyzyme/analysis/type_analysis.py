"""Type analysis: a :class:`~pyzyme.analysis.typetree.TypeTree` for every value of a function.

LLVM types say a value is a ``double`` or a ``ptr``, not what the pointer points to, nor whether
an ``i64`` holds an integer, an address or the bits of a float. Reverse mode needs exactly that
(adjoints are accumulated only where memory holds floats), so this module deduces it, as
Enzyme's TypeAnalysis does: start from the LLVM types and the trees the caller knows for the
arguments, then push trees through every instruction *forwards* (a load's result is what its
pointer points to) and *backwards* (a pointer stored through points to what was stored) until
nothing changes. Calls to functions with a body are analysed with the caller's argument trees
(memoized); known runtime calls have rules: allocators and reallocators are read from the
rule table's Allocation and Mirror rows (:mod:`pyzyme.rules.runtime`), ``memcpy`` and a few
libm functions writing through pointers are known here.

A value's tree is in *value form*: a scalar or vector is ``{[-1]:T}``; an aggregate has an entry
per field offset. Memory is in *memory form*: an entry per byte offset (per byte for integers).

Where this differs from Enzyme, and why:

- A phi or select passes back to its incoming values only their own type, not what they point
  to: Numba's optimised IR merges pointers to different things (one ``NRT_decref`` for a float
  and an integer array). When incoming pointers disagree, the analysis restarts with that merge
  keeping only what they share (:meth:`TypeTree.meet`), so the disagreement becomes Unknown and
  is reported by :meth:`TypeResults.require_known` where it matters, never guessed.
- Likewise one memory slot may hold pointers to different things (libc++'s hash table keeps
  pointers to its nodes and to the node-like head embedded in the table in one bucket array).
  When a function's own values conflict, its analysis runs once more with every store of a
  pointer passing only that the slot holds a pointer, either way: what a pointer read back
  from the slot points to is then what the slot's readers find, which must agree with what
  every pointer stored there points to (checked; the first conflict is raised otherwise).
- Integer arithmetic makes its result Integer (``add`` of a Pointer gives a Pointer, ``sub`` of
  two Pointers an Integer); only ``mul``/``div``/``rem`` and ``zext``/``sext`` also make their
  operands Integer, because shifts and masks are also applied to float bits (``fabs`` as an
  ``and``), which keep their Float type.
- A constant ``0`` says nothing (it is every type's zero); other integer constants are Integer.
- Memory layout is x86-64's (the layout Numba and clang use here), not read from the module.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> from pyzyme.analysis.typetree import TypeTree, POINTER, FLOAT64
>>> m = parse_module('''define double @f(ptr %p, i64 %i) {
... entry:
...   %q = getelementptr i8, ptr %p, i64 8
...   %r = getelementptr double, ptr %q, i64 %i
...   %x = load double, ptr %r
...   %b = bitcast double %x to i64
...   ret double %x
... }''')
>>> res = analyze_types(m.get_function("f"), {0: TypeTree({(-1,): POINTER, (-1, -1): FLOAT64})})
>>> print(res)
type analysis of @f
  arg %p: {[-1]:Pointer, [-1,-1]:Float@double}
  arg %i: {[-1]:Integer}
  %q = getelementptr i8, ptr %p, i64 8: {[-1]:Pointer, [-1,-1]:Float@double}
  %r = getelementptr double, ptr %q, i64 %i: {[-1]:Pointer, [-1,-1]:Float@double}
  %x = load double, ptr %r: {[-1]:Float@double}
  %b = bitcast double %x to i64: {[-1]:Float@double}
  return: {[-1]:Float@double}
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyzyme.analysis.typetree import (
    FLOAT32, FLOAT64, INTEGER, POINTER, ConcreteType, TypeTree,
)
from pyzyme.errors import TypeAnalysisError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir import values as V
from pyzyme.ir.opcodes import FROM_INTEGER, INT_BINOPS, SAME_BITS
from pyzyme.analysis.layout import field_offset, gep_offset, sizeof, struct_layout
from pyzyme.analysis.tbaa import pointee_kind
from pyzyme.analysis.type_runs import PARTIAL, Finished, finished_below, record_finished
from pyzyme.ir.printer import _slots  # the printer's numbering of unnamed values
from pyzyme.rules import default_rules, spec
from pyzyme.rules.runtime import MEMINFO_LAYOUT
from pyzyme.rules.table import RuleTable
from pyzyme.progress import timed

__all__ = [
    "KnownCall", "TypeResults", "analyze_types", "to_memory", "to_value", "ENZYME_HINTS",
]

# ------------------------------------------------------------------------------ tree forms
def _scalar_tree(ty: T.Type) -> TypeTree:
    """What the LLVM type alone says about a value."""
    s = ty.scalar if ty.is_vector else ty
    if isinstance(s, T.FloatType):
        return TypeTree({(-1,): ConcreteType.float(s.kind)})
    if s.is_pointer:
        return TypeTree({(-1,): POINTER})
    if isinstance(s, T.IntType) and s.width == 1:
        return TypeTree({(-1,): INTEGER})  # a truth value is never an address or float bits
    if isinstance(ty, T.ArrayType):
        n = sizeof(ty.element)
        inner = to_memory(_scalar_tree(ty.element), ty.element)
        out = TypeTree()
        for i in range(min(ty.count, 64)):  # as far as MAX_EXPAND-sized regions go
            out.merge(inner.shift(0, n, i * n))
        return out
    if isinstance(ty, (T.StructType, T.IdentifiedStructType)) and ty.elements is not None:
        offsets, _ = struct_layout(ty)
        out = TypeTree()
        for off, e in zip(offsets, ty.elements):
            out.merge(to_memory(_scalar_tree(e), e).shift(0, sizeof(e), off))
        return out
    return TypeTree()


def _is_scalar_like(ty: T.Type) -> bool:
    return not isinstance(ty, (T.ArrayType, T.StructType, T.IdentifiedStructType))


def to_memory(tree: TypeTree, ty: T.Type) -> TypeTree:
    """The bytes a value of type ``ty`` with ``tree`` occupies, from offset 0.

    >>> from pyzyme import ir
    >>> print(to_memory(TypeTree({(-1,): INTEGER}), ir.i32))
    {[0]:Integer, [1]:Integer, [2]:Integer, [3]:Integer}
    """
    return tree.shift(0, sizeof(ty))


def to_value(memory: TypeTree, ty: T.Type) -> TypeTree:
    """The tree of a value of type ``ty`` read from memory described by ``memory``.

    A scalar or a vector collapses to ``[-1]`` (the join of what its bytes hold).

    >>> from pyzyme import ir
    >>> mem = TypeTree({(0,): POINTER, (0, -1): FLOAT64, (8,): FLOAT64})
    >>> print(to_value(mem, ir.ptr), to_value(mem, ir.parse_type("{ ptr, double }")))
    {[-1]:Pointer, [-1,-1]:Float@double} {[0]:Pointer, [0,-1]:Float@double, [8]:Float@double}
    """
    region = memory.shift(0, sizeof(ty))
    if not _is_scalar_like(ty):
        return region
    out = TypeTree()
    for path, ct in region:
        out.insert((-1, *path[1:]), ct)
    return out


def _with_minus_one(tree: TypeTree) -> TypeTree:
    return TypeTree({(-1, *p[1:]): ct for p, ct in tree})


# ------------------------------------------------------------------------------ known calls
@dataclass(frozen=True)
class KnownCall:
    """What a call to an external function means for types: its result's and arguments' trees.

    ``args`` has one entry per argument, None for "nothing known".
    """

    result: TypeTree | None = None
    args: tuple[TypeTree | None, ...] = ()


def meminfo_tree() -> TypeTree:
    """A pointer to NRT's MemInfo, its fields as :data:`pyzyme.rules.runtime.MEMINFO_LAYOUT`
    has them (8 bytes each: pointers, and integers that fill all 8)."""
    mem = TypeTree()
    int8 = TypeTree({(-1,): INTEGER}).shift(0, 8)
    for _, offset, pointer in MEMINFO_LAYOUT:
        if pointer:
            mem.insert((offset,), POINTER)
        else:
            mem |= int8.shift(0, 8, offset)
    return TypeTree.pointer_to(mem)


_INT = TypeTree({(-1,): INTEGER})
_PTR = TypeTree({(-1,): POINTER})


def _builtin_call(rules: RuleTable, name: str, nargs: int) -> KnownCall | None:
    row = rules.lookup(name, "call")
    if isinstance(row, spec.Allocation) and row.resizable:
        # A list's MemInfo, its data block allocated apart: its tree is learnt from its uses
        # alone (a MemInfo tree would hide that a list of integers holds no floats, and
        # give it a shadow list).
        return None
    if isinstance(row, spec.Allocation):
        # A handle (NRT's MemInfo) when the row says where its data pointer is, else the block;
        # the operands its size is computed from are integers.
        result = meminfo_tree() if row.data_offset is not None else _PTR
        return KnownCall(result, tuple(_INT if i in row.size_args else None
                                       for i in range(nargs)))
    if isinstance(row, spec.Mirror) and not (row.resizes or row.refcount):
        # A reallocation (realloc, pyzyme.tape_realloc): a block, its new size the last operand;
        # a release, nothing (not read where defined: tape_free reads any header as integers).
        return (KnownCall(_PTR, (None,) * (nargs - 1) + (_INT,)) if row.allocates
                else KnownCall(None, (None,) * nargs))
    out_ptr = {"frexp": (None, TypeTree.pointer_to(_INT)),
               "modf": (None, TypeTree.pointer_to(TypeTree({(-1,): FLOAT64}))),
               "modff": (None, TypeTree.pointer_to(TypeTree({(-1,): FLOAT32}))),
               "sincos": (None,) + (TypeTree.pointer_to(TypeTree({(-1,): FLOAT64})),) * 2}
    if name in out_ptr:
        return KnownCall(None, out_ptr[name])
    return None


# ------------------------------------------------------------------------------ results
@dataclass
class TypeResults:
    """The tree of every argument and instruction of ``function``, and of its return value."""

    function: object
    trees: dict = field(default_factory=dict)
    return_tree: TypeTree = field(default_factory=TypeTree)

    def tree(self, value: V.Value) -> TypeTree:
        """The tree of ``value`` (constants included); an empty tree when nothing is known."""
        if value in self.trees:
            return self.trees[value]
        return _constant_tree(value)

    def require_known(self, value: V.Value, what: str, *, offset: int = -1,
                      at: I.Instruction | None = None) -> ConcreteType:
        """The type of ``value`` (at byte ``offset``), or :class:`TypeAnalysisError`.

        Use it where a float/integer decision is needed: never guess.

        Parameters
        ----------
        value
            The value whose type is needed.
        what
            What it is needed for, for the message (e.g. ``"the adjoint of a load"``).
        offset
            The byte offset into the value; ``-1`` for what all its bytes hold.
        at
            The instruction needing it (default: the one defining ``value``).

        Examples
        --------
        >>> from pyzyme.ir import parse_module
        >>> f = parse_module('''define i64 @f(ptr %p) {
        ... entry:
        ...   %x = load i64, ptr %p
        ...   ret i64 %x
        ... }''').get_function("f")
        >>> res = analyze_types(f)
        >>> print(res.require_known(f.args[0], "a shadow"))
        Pointer
        >>> res.require_known(next(f.instructions()), "the adjoint of a load")
        Traceback (most recent call last):
        ...
        pyzyme.errors.TypeAnalysisError: type analysis cannot tell what %x (i64) holds, \
needed for the adjoint of a load, in @f: its tree is {}
          at: %x = load i64, ptr %p
          hint: seed the argument trees (seed_from_abi for Numba), or add a KnownCall for \
the external function it comes from
        """
        t = self.tree(value)
        ct = t.lookup(offset)
        if not ct.is_known and offset == -1:
            ct = t.lookup(0)
        if ct.is_known:
            return ct
        at = at if at is not None else (value if isinstance(value, I.Instruction) else None)
        where = f"\n  at: {_line(at)}" if at is not None else ""
        raise TypeAnalysisError(
            f"type analysis cannot tell what {_ref(value)} ({value.type}) holds"
            + (f" at byte {offset}" if offset != -1 else "")
            + f", needed for {what}, in {self.function.ref}: its tree is {t}{where}",
            hint="seed the argument trees (seed_from_abi for Numba), or add a KnownCall for "
                 "the external function it comes from")

    def __str__(self) -> str:
        fn = self.function
        lines = [f"type analysis of {fn.ref}"]
        slots = _slots(fn)
        for arg in fn.args:
            lines.append(f"  arg {_ref(arg, slots)}: {self.tree(arg)}")
        for inst in fn.instructions():
            if inst.has_result:
                lines.append(f"  {_line(inst, slots)}: {self.tree(inst)}")
        if not isinstance(fn.return_type, T.VoidType):
            lines.append(f"  return: {self.return_tree}")
        return "\n".join(lines)


def _ref(value: V.Value, slots: dict | None = None) -> str:
    """``value``'s reference as its function prints it (slot numbers for unnamed values)."""
    fn = _function_of(value)
    if fn is not None and isinstance(value, V.NamedValue) and not value.name:
        slots = slots if slots is not None else _slots(fn)
        return f"%{slots.get(value, '?')}"
    return value.ref


def _function_of(value: V.Value):
    if isinstance(value, V.Argument):
        return value.function
    if isinstance(value, I.Instruction) and value.parent is not None:
        return value.function
    return None


def _line(inst: I.Instruction, slots: dict | None = None) -> str:
    """``inst`` as its function prints it, without metadata."""
    if slots is None:
        fn = _function_of(inst)
        slots = _slots(fn) if fn is not None else {}

    def ref(v: V.Value) -> str:
        n = slots.get(v)
        return v.ref if n is None else f"%{n}"

    body = inst.body(ref)
    return f"{ref(inst)} = {body}" if inst.has_result else body


def _constant_tree(value: V.Value) -> TypeTree:
    if isinstance(value, V.ConstantFP):
        return _scalar_tree(value.type)
    if isinstance(value, V.ConstantInt):
        # zero is every type's zero; any other integer constant is an integer
        return TypeTree() if value.value == 0 else TypeTree({(-1,): INTEGER})
    if isinstance(value, (V.Undef, V.Poison, V.ZeroInitializer)):
        return TypeTree()
    if isinstance(value, V.ConstantAggregate) and not value.type.is_vector:
        out = TypeTree()
        for i, e in enumerate(value.elements):
            off, ety = field_offset(value.type, [i])
            out.merge(to_memory(_constant_tree(e), ety).shift(0, sizeof(ety), off))
        return out
    if value.type.is_pointer or value.type.is_float:
        return _scalar_tree(value.type)
    return TypeTree()


# ------------------------------------------------------------------------------ the analysis
@timed("analyses")
def analyze_types(fn, arg_trees: Mapping[int, TypeTree] | Sequence[TypeTree | None] = (), *,
                  return_tree: TypeTree | None = None,
                  known_calls: Mapping[str, KnownCall] | None = None,
                  rules: RuleTable | None = None, memo: dict | None = None) -> TypeResults:
    """Deduce a tree for every argument and instruction of ``fn``, to a fixed point.

    Parameters
    ----------
    fn
        A function with a body (:class:`pyzyme.ir.Function`).
    arg_trees
        What the caller knows of the arguments: ``{index: tree}`` or one tree (or None) per
        argument, e.g. from :func:`seed_from_abi`.
    return_tree
        What the caller knows of the return value.
    known_calls
        Trees for calls to external functions by name, beyond the built-in ones (NRT and C
        allocation, ``memcpy``/``memmove``, libm functions writing through pointers).
    rules
        The rule table whose Allocation and Mirror rows say which calls allocate (the C
        frontend's adds the allocators a module registers); :func:`pyzyme.rules.default_rules`
        by default.
    memo
        What runs found, to share between calls: a dict the caller keeps for one ``rules``
        and ``known_calls``, over functions that do not change in between. A callee met again
        with the same argument and return trees is not analysed again, and a function met
        with trees that say more than an earlier run's starts from that run's fixed point
        (:mod:`~pyzyme.analysis.type_runs`).

    Raises
    ------
    TypeAnalysisError
        On a conflict (a value both float and integer), naming the value, the function and
        the instruction.
    """
    seeds = dict(arg_trees) if isinstance(arg_trees, Mapping) else dict(enumerate(arg_trees))
    return _Analyzer(fn, known_calls or {}, rules or default_rules(),
                     {} if memo is None else memo, set()).run(seeds, return_tree)


class _Worklist:
    """Instructions to visit, first in first out, each held once. (A dict used so, its first
    key taken and deleted again and again, walks the deleted entries before it on every take:
    quadratic, most of the analysis of a large function.)"""

    __slots__ = ("_queue", "_held")

    def __init__(self, items) -> None:
        self._queue = deque(dict.fromkeys(items))
        self._held = set(self._queue)

    def __bool__(self) -> bool:
        return bool(self._queue)

    def add(self, item) -> None:
        if item not in self._held:
            self._held.add(item)
            self._queue.append(item)

    def pop(self):
        item = self._queue.popleft()
        self._held.discard(item)
        return item


class _Restart(Exception):
    """A phi or select met values that disagree: analyse again with it merging by meet."""

    def __init__(self, inst: I.Instruction) -> None:
        super().__init__(inst)
        self.inst = inst


class _Analyzer:
    """One fixed-point run; ``memo`` and ``active`` are shared with the runs for callees."""

    def __init__(self, fn, known_calls: Mapping[str, KnownCall], rules: RuleTable, memo: dict,
                 active: set) -> None:
        self.fn = fn
        self.known_calls = known_calls
        self.rules = rules
        self.memo = memo
        self.active = active
        self.results = TypeResults(fn)
        self.pending = _Worklist(())
        self.rets: list = []
        self.meet_merges: set = set()  # phis and selects of pointers to different things
        self.meet_stores: set = set()  # stores of pointers to different things into one slot
        self.current: I.Instruction | None = None
        # A call skipped as recursion (or a callee's run that skipped one): not a fixed point
        # another run may start from.
        self.partial = False

    def run(self, seeds: Mapping[int, TypeTree | None], return_tree: TypeTree | None
            ) -> TypeResults:
        conflict: TypeAnalysisError | None = None
        start = finished_below(self.memo, self.fn, seeds, return_tree)
        if start is not None:
            self.meet_merges = set(start.meet_merges)
        while True:
            try:
                res = self._run_once(seeds, return_tree, start)
            except _Restart as restart:
                self.meet_merges.add(restart.inst)
                start = None
                continue
            except TypeAnalysisError as err:
                # A conflict in this function's own values (not one a callee raised): retry
                # once with the stores of pointers merging by meet (module docstring).
                if conflict is not None or getattr(err, "function", None) is not self.fn:
                    raise (conflict or err) from None
                self.meet_stores = {i for i in self.fn.instructions()
                                    if i.opcode == "store" and i.value.type.is_pointer}
                if not self.meet_stores:
                    raise
                conflict = err
                start = None
                continue
            if conflict is not None:
                self._check_meet_stores(conflict)
            elif not self.partial:
                record_finished(self.memo, self.fn, seeds, return_tree, res,
                                 self.meet_merges)
            return res

    def _check_meet_stores(self, conflict: TypeAnalysisError) -> None:
        """A store merging by meet gave its slot nothing: what the slot's other writers and
        its readers say of it must then hold of the pointer it stores too, or the readers'
        trees would be wrong for that pointer. Raises ``conflict`` (the reason for merging
        by meet) when it does not."""
        for store in self.meet_stores:
            slot = to_value(self.tree(store.pointer).data0(), store.value.type)
            try:
                slot | self.tree(store.value)
            except TypeAnalysisError:
                raise conflict from None

    def _run_once(self, seeds: Mapping[int, TypeTree | None], return_tree: TypeTree | None,
                  start: Finished | None = None) -> TypeResults:
        """One run to the fixed point: from the LLVM types, or from ``start``, the fixed
        point of seeds and a return tree below these (:mod:`~pyzyme.analysis.type_runs`)."""
        res = self.results = TypeResults(self.fn)
        insts = list(self.fn.instructions())
        self.rets = [i for i in insts if i.opcode == "ret"]
        # A worklist: when a value's tree grows, its users (forward rules) and its defining
        # instruction (backward rules) are visited again.
        if start is None:
            for arg in self.fn.args:
                res.trees[arg] = _scalar_tree(arg.type)
            for inst in insts:
                if inst.has_result:
                    res.trees[inst] = _scalar_tree(inst.type)
            self.pending = _Worklist(insts)
        else:
            # Every rule holds there already: only what the new seeds change is visited.
            res.trees = {v: t.copy() for v, t in start.results.trees.items()}
            res.return_tree = start.results.return_tree.copy()
            self.pending = _Worklist(())
        for arg in self.fn.args:
            if seeds.get(arg.index) is not None:
                self.update(arg, seeds[arg.index])
        if return_tree is not None and res.return_tree.merge(return_tree):
            for ret in self.rets:
                self.pending.add(ret)
        while self.pending:
            inst = self.pending.pop()
            self.current = inst
            self.visit(inst)
        self.current = None
        return res

    # -------------------------------------------------------------- state
    def tree(self, value: V.Value) -> TypeTree:
        return self.results.tree(value)

    def update(self, value: V.Value, tree: TypeTree) -> None:
        """Join ``tree`` into ``value``'s; constants and globals keep their own."""
        target = self.results.trees.get(value)
        if target is None:
            return
        try:
            if target.merge(tree):
                self._requeue(value)
        except TypeAnalysisError as err:
            at = f"\n  while analysing: {_line(self.current)}" if self.current else ""
            error = TypeAnalysisError(
                f"conflicting types for {_ref(value)} in {self.fn.ref}: it is {target}, "
                f"and also {tree} ({err.message}){at}",
                hint="a byte cannot be both a float and an integer or pointer; check for type "
                     "punning through memory or a wrong argument seed")
            error.function = self.fn  # raised here, not by a callee's analysis
            raise error from None

    def _requeue(self, value: V.Value) -> None:
        pending = self.pending
        for user in value.users:
            if isinstance(user, I.Instruction) and user.function is self.fn:
                pending.add(user)
        if isinstance(value, I.Instruction):
            pending.add(value)

    def update_ct(self, value: V.Value, ct: ConcreteType) -> None:
        self.update(value, TypeTree({(-1,): ct}))

    def ct(self, value: V.Value) -> ConcreteType:
        return self.tree(value).lookup(-1)

    # -------------------------------------------------------------- instructions
    def visit(self, inst: I.Instruction) -> None:
        op = inst.opcode
        handler = getattr(self, "visit_" + op, None)
        if handler is not None:
            handler(inst)
        elif op in INT_BINOPS:
            self.visit_int_op(inst)
        elif op in SAME_BITS:  # an address stays an address, float bits stay float bits
            src = inst.operands[0]
            self.update(inst, self.tree(src))
            self.update(src, self.tree(inst))
        elif op in ("trunc", "zext", "sext", "fptosi", "fptoui", "icmp", "fcmp"):
            self.update_ct(inst, INTEGER)
            if op in ("zext", "sext") and not self.ct(inst.operands[0]).is_float:
                self.update_ct(inst.operands[0], INTEGER)  # widened: a count, not bits
        elif op in FROM_INTEGER:  # sitofp, uitofp (inttoptr keeps its bits, above)
            self.update_ct(inst.operands[0], INTEGER)

    def visit_load(self, inst: I.Load) -> None:
        p = inst.pointer
        self.update(inst, to_value(self.tree(p).data0(), inst.type))
        self.update(p, TypeTree.pointer_to(to_memory(self.tree(inst), inst.type)))
        self._tagged_pointee(inst, inst)

    def visit_store(self, inst: I.Store) -> None:
        p, v = inst.pointer, inst.value
        if inst in self.meet_stores:
            # Only that the slot holds a pointer goes either way, not what it points to.
            self.update(p, TypeTree.pointer_to(to_memory(_PTR, v.type)))
            self.update(v, _PTR)
        else:
            self.update(p, TypeTree.pointer_to(to_memory(self.tree(v), v.type)))
            self.update(v, to_value(self.tree(p).data0(), v.type))
        self._tagged_pointee(inst, v)

    def _tagged_pointee(self, access: I.Instruction, pointer: V.Value) -> None:
        """A pointer loaded or stored under a tag naming it a ``float *`` or ``double *``
        (clang's ``"p1 float"``) points to that float type, at offset 0 at least: which bytes
        a copy through it moves are floats (an array's data pointer, kept in a struct)."""
        if not pointer.type.is_pointer:
            return
        ct = {"float": FLOAT32, "double": FLOAT64}.get(pointee_kind(access) or "")
        if ct is not None:
            self.update(pointer, TypeTree({(-1,): POINTER, (-1, 0): ct}))

    def visit_atomicrmw(self, inst: I.Instruction) -> None:
        p, v = inst.operands[0], inst.operands[1]
        for val in (v, inst):
            self.update(p, TypeTree.pointer_to(to_memory(self.tree(val), v.type)))
            self.update(val, to_value(self.tree(p).data0(), v.type))

    def visit_getelementptr(self, inst: I.GetElementPtr) -> None:
        base = inst.pointer
        for idx in inst.indices:
            self.update_ct(idx, INTEGER)  # indices count elements: never addresses or floats
        if base.type.is_vector or inst.type.is_vector:
            return
        offset, stride = gep_offset(inst)
        if stride == 0:  # a constant offset: move the pointee tree by it
            self.update(inst, TypeTree.pointer_to(self.tree(base).data0().shift(offset)))
            if offset >= 0:  # (a negative one would read as the -1 wildcard)
                self.update(base, TypeTree.pointer_to(self.tree(inst).data0().shift(0, -1, offset)))
            return
        # A variable offset: what holds at every offset of the base holds at every offset of
        # the result; and a single type filling each stride-sized element holds at every
        # offset of the base (the array of doubles indexed by %i).
        self.update(inst, TypeTree.pointer_to(self.tree(base).data0().keep_minus_one()))
        self.update(base, TypeTree.pointer_to(self.tree(inst).data0().keep_minus_one()))
        if offset % stride == 0:
            element = _periodic(self.tree(inst).data0().shift(0, stride), stride)
            if element is not None:
                self.update(base, TypeTree.pointer_to(element))

    def visit_phi(self, inst: I.Phi) -> None:
        self._merge_incoming(inst, inst.operands)

    def visit_select(self, inst: I.Select) -> None:
        self.update_ct(inst.operands[0], INTEGER)
        self._merge_incoming(inst, inst.operands[1:])

    def _merge_incoming(self, inst: I.Instruction, incoming: Sequence[V.Value]) -> None:
        """A phi or select: the join of what flows in; back flows the value's own type.

        Pointers to memory of different types may meet in one phi (Numba sinks the
        ``NRT_decref`` of a float array and of an integer array into one call). On such a
        conflict the analysis restarts with this merge giving only what all incoming values
        agree on, and nothing flowing back: its pointee is Unknown where they disagree, so a
        use needing it fails in ``require_known`` rather than being guessed.
        """
        trees = [self.tree(v) for v in incoming]
        if inst in self.meet_merges:
            common = trees[0]
            for t in trees[1:]:
                common = common.meet(t)
            self.update(inst, common)
            return
        try:
            joined = TypeTree()
            for t in trees:
                joined.merge(t)
            self.update(inst, joined)
            # Back to the incoming values goes only what the value itself is (Integer,
            # Pointer, Float), not what a pointer points to: two pointers meeting here may
            # point to different things, and a conflict must show up here, at the merge.
            own = TypeTree({p: ct for p, ct in self.tree(inst) if len(p) == 1})
            for v in incoming:
                self.update(v, own)
        except TypeAnalysisError:
            # What already flowed through this merge cannot be taken back: start again with
            # it merging by meet.
            raise _Restart(inst) from None

    def visit_extractvalue(self, inst: I.ExtractValue) -> None:
        agg = inst.operands[0]
        off, member = field_offset(agg.type, inst.indices)
        size = sizeof(member)
        self.update(inst, to_value(self.tree(agg).shift(off, size), member))
        self.update(agg, to_memory(self.tree(inst), member).shift(0, size, off))

    def visit_insertvalue(self, inst: I.InsertValue) -> None:
        agg, elem = inst.operands
        off, member = field_offset(agg.type, inst.indices)
        size = sizeof(member)
        self.update(inst, self.tree(agg).without(off, size))
        self.update(inst, to_memory(self.tree(elem), member).shift(0, size, off))
        self.update(agg, self.tree(inst).without(off, size))
        self.update(elem, to_value(self.tree(inst).shift(off, size), member))

    def _same_lanes(self, inst: I.Instruction, operands: Sequence[V.Value]) -> None:
        for v in operands:
            self.update(inst, self.tree(v))
            self.update(v, self.tree(inst))

    def visit_extractelement(self, inst: I.Instruction) -> None:
        self._same_lanes(inst, inst.operands[:1])

    def visit_insertelement(self, inst: I.Instruction) -> None:
        self._same_lanes(inst, inst.operands[:2])

    def visit_shufflevector(self, inst: I.Instruction) -> None:
        self._same_lanes(inst, inst.operands[:2])

    def visit_int_op(self, inst: I.Instruction) -> None:
        op = inst.opcode
        a, b = (self.ct(v) for v in inst.operands[:2])
        if a.is_float or b.is_float:
            if op in ("and", "or", "xor"):  # sign-bit masks on float bits (fabs, fneg)
                self.update_ct(inst, a if a.is_float else b)
            return
        if op == "add" and POINTER in (a, b):
            self.update_ct(inst, POINTER)  # an address plus an offset
        elif op == "sub" and a == POINTER:
            if b == POINTER:
                self.update_ct(inst, INTEGER)  # a distance between addresses
            elif b == INTEGER:
                self.update_ct(inst, POINTER)
        else:
            self.update_ct(inst, INTEGER)
            if op in _ARITHMETIC_ONLY:  # never applied to addresses' or floats' bits
                for v in inst.operands[:2]:
                    self.update_ct(v, INTEGER)

    def visit_ret(self, inst: I.Ret) -> None:
        v = inst.value
        if v is not None:
            if self.results.return_tree.merge(self.tree(v)):
                for ret in self.rets:
                    self.pending.add(ret)
            self.update(v, self.results.return_tree)

    def visit_call(self, inst: I.CallBase) -> None:
        fn = inst.called_function
        if fn is None:
            return
        name = fn.name
        args = inst.args
        if name.startswith(("llvm.memcpy", "llvm.memmove")) or name in ("memcpy", "memmove"):
            self._memcpy(args[0], args[1], args[2])
            return
        if name in ENZYME_HINTS and len(args) >= 2:
            # __enzyme_double(ptr, bytes): the user says what the memory holds (Enzyme's hints)
            memory = TypeTree({(-1,): ENZYME_HINTS[name]})
            if isinstance(args[1], V.ConstantInt):
                memory = memory.shift(0, args[1].value)
            self.update(args[0], TypeTree.pointer_to(memory))
            self.update_ct(args[1], INTEGER)
            return
        known = self.known_calls.get(name) or _builtin_call(self.rules, name, len(args))
        if known is not None:
            if known.result is not None:
                self.update(inst, known.result)
            for a, t in zip(args, known.args):
                if t is not None:
                    self.update(a, t)
            return
        if not fn.is_declaration:
            self._callee(inst, fn, args)

    visit_invoke = visit_call

    def _memcpy(self, dst: V.Value, src: V.Value, length: V.Value) -> None:
        self.update_ct(length, INTEGER)
        if isinstance(length, V.ConstantInt):
            n = length.value
            copy = (lambda t: t.shift(0, n))  # noqa: E731
        else:  # an unknown length: only what holds at every offset is sure to be copied
            copy = TypeTree.keep_minus_one
        self.update(dst, TypeTree.pointer_to(copy(self.tree(src).data0())))
        self.update(src, TypeTree.pointer_to(copy(self.tree(dst).data0())))

    def _callee(self, inst: I.CallBase, fn, args: Sequence[V.Value]) -> None:
        seeds = {i: self.tree(a) for i, a in enumerate(args)}
        ret = self.tree(inst) if inst.has_result else None
        key = (fn, tuple(str(seeds[i]) for i in range(len(args))), str(ret))
        if key in self.active:
            self.partial = True
            return  # recursion: the outer run will come back with what it learns
        res = self.memo.get(key)
        if res is None:
            self.active.add(key)
            callee = _Analyzer(fn, self.known_calls, self.rules, self.memo, self.active)
            try:
                res = callee.run(seeds, ret)
            finally:
                self.active.discard(key)
            self.memo[key] = res
            if callee.partial:
                self.memo.setdefault(PARTIAL, set()).add(key)
        self.partial |= key in self.memo.get(PARTIAL, ())
        if inst.has_result:
            self.update(inst, res.return_tree)
        for a, param in zip(args, fn.args):
            self.update(a, res.tree(param))


#: Enzyme's type hints, ``__enzyme_double(pointer, bytes)``: what the memory holds.
ENZYME_HINTS = {"__enzyme_float": FLOAT32, "__enzyme_double": FLOAT64,
                 "__enzyme_integer": INTEGER, "__enzyme_pointer": POINTER}

# Integer operations whose operands are integers too (shifts and masks also take float bits).
_ARITHMETIC_ONLY = frozenset({"mul", "udiv", "sdiv", "urem", "srem"})


def _periodic(element: TypeTree, stride: int) -> TypeTree | None:
    """``element`` as a tree for every offset, when a single type fills the ``stride`` bytes."""
    tops = {p[0]: ct for p, ct in element if len(p) == 1}
    kinds = set(tops.values())
    if len(kinds) != 1:
        return None
    (ct,) = kinds
    if stride % ct.size or sorted(tops) != list(range(0, stride, ct.size)):
        return None
    return _with_minus_one(element)
