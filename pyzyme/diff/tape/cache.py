"""What the forward sweep keeps for the reverse sweep, and where.

Reverse mode runs a function forwards, then its adjoint backwards; a value the adjoint needs
that cannot be recomputed from what is still available is *cached* here. Where it goes depends
on where it was computed:

- outside every loop: one stack slot (``alloca``), which LLVM promotes to a register in the
  combined function, so the fast path costs nothing;
- inside a loop: an array indexed by that loop's *iteration counter*, grown by doubling when
  the counter reaches its capacity, freed when the reverse sweep is done; the arrays of one
  loop share one block (one allocation per loop and growth, not per cached value), except in
  code a later round differentiates. A module global per
  loop remembers the largest capacity reached, where the next call starts (its arrays then
  come from :mod:`pyzyme.diff.tape.pool` at their final size, and are never copied).

Every loop has one counter: a number incremented each time its header runs, never reset, so it
numbers the header's runs across every run of the enclosing loops. The reverse sweep counts it
back down, so in both sweeps ``counter - 1`` (forwards: the value read at the header) names the
iteration a value belongs to, whatever the nesting and whatever the trip counts. The reverse
sweep must also know the counter value a run started from, to tell when it has undone the run's
first iteration: for an inner loop whose trip count is a formula of values fixed before it runs
(``for j in range(i)``) it is the counter less that count, computed again in the reverse sweep;
any other inner loop records it, per run, on a stack.

A value that repeats on every iteration of an outermost loop (the same iterations of its own
loop, in the same order, the value the same on each: a parameter read in a loop over data
points) is cached for one iteration of the outer loop only, at its loop's counter less the
counter when that iteration began (:meth:`TapeCache.repeated`); each iteration stores it again,
over the same cells.

In the combined function the slots are allocas of one function. In split mode the augmented
primal and the reverse function each have their own allocas, and the slots travel between them
in a heap block, the tape (see :meth:`TapeCache.pack` and :meth:`TapeCache.unpack`), which also
holds the shadows of the augmented primal's stack slots (:meth:`TapeCache.shadow_room`).

Examples
--------
The printed layout lists each slot, each loop's caches and each stack (for a triangular double
loop summing ``sin(a[j]) * a[j]``: nothing cached, the inner loop's starts computed from its
trip count)::

    tape of @diffe_triangle
      loop %outer: counter %outer.count, caches none
      loop %inner: counter %inner.count, caches none
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyzyme.analysis.cfg import block_label
from pyzyme.analysis.layout import sizeof, struct_layout
from pyzyme import naming
from pyzyme.ir import IRBuilder, instructions as I, types as T
from pyzyme.diff.memory_calls import free as free_memory, malloc, memcpy
from pyzyme.diff.tape.pool import tape_capacity, tape_free, tape_realloc
from pyzyme.ir.values import Value, const_int, const_null

__all__ = ["TapeCache", "Slot", "Cache", "STACK", "append_function"]

#: Stack slots' shadows of at most this many bytes live in the tape's block (split mode).
_SHADOW_ROOM = 256
#: The alignment of tape blocks (malloc's), and of the room of each shadow in one.
_BLOCK_ALIGN = 16
#: A growable list: ``{ entries, count, capacity }`` (a stack of loop starts, kept as ptr).
STACK = T.StructType([T.ptr, T.i64, T.i64])
_PUSH = naming.TAPE_PUSH


@dataclass(eq=False)
class Slot:
    """A value that lives from the forward sweep into the reverse sweep: ``fwd`` is its alloca
    in the function running the forward sweep, ``rev`` in the one running the reverse sweep
    (the same alloca in the combined function)."""

    name: str
    type: T.Type
    fwd: I.Alloca
    rev: I.Alloca
    constant: bool = False    # holds a value no active input changes (see :meth:`cache`)


@dataclass(eq=False)
class Cache:
    """A value cached per iteration of ``loop`` (or once, when ``loop`` is None). With
    ``outer`` (an outermost loop around ``loop``): per iteration of ``loop`` within one
    iteration of ``outer``, the value being the same there on every iteration of ``outer``
    (see :meth:`TapeCache.repeated`); ``base`` holds ``loop``'s counter as each began."""

    name: str
    type: T.Type
    loop: object
    slot: Slot                # the value itself (no loop) or the array's pointer
    outer: object = None
    base: Cache | None = None
    constant: bool = False


@dataclass
class _LoopState:
    counter: Slot
    capacity: Slot | None = None
    caches: list = field(default_factory=list)


@dataclass
class _RepeatState:
    """The caches of values of ``loop`` repeating on each iteration of ``outer``."""

    loop: object
    outer: object
    base: Cache
    capacity: Slot
    caches: list = field(default_factory=list)

    @property
    def label(self) -> str:
        return naming.repeated(block_label(self.loop.header).lstrip("%"),
                               block_label(self.outer.header).lstrip("%"))


class TapeCache:
    """The slots and loop caches of one derivative.

    Parameters
    ----------
    fwd_entry, rev_entry
        The blocks that hold the allocas of the forward and reverse functions (the same block
        in the combined function). Each must end in its terminator already.
    module
        Where ``realloc`` and ``free`` are declared.
    scopes
        The module's :class:`~pyzyme.transforms.alias_scopes.ScopeTable` (tape accesses get a scope).
    shared_blocks
        Whether the caches of one loop share a block (:meth:`_regroup`); not in code a later
        round differentiates (:func:`_groups`).
    recursive
        Whether the function is on a call cycle: then its tape's own block (split mode) comes
        from the tape allocator, as its caches do, which the side stack it runs on turns
        into cuts from an arena (:mod:`pyzyme.diff.tape.arena`), not from ``malloc``.
    """

    def __init__(self, fwd_entry, rev_entry, module, scopes, shared_blocks: bool = True,
                 recursive: bool = False) -> None:
        self.shared_blocks = shared_blocks
        self.recursive = recursive
        self.fwd_entry = fwd_entry
        self.rev_entry = rev_entry
        self.module = module
        self.scope_node = scopes.scope("tape")
        self.scope = scopes.list([self.scope_node])
        self.slots: list[Slot] = []
        self.loops: dict = {}
        self.top_caches: list[Cache] = []
        self.stacks: list[Slot] = []
        self.repeats: dict = {}     # (loop, outer) -> _RepeatState
        #: Split mode: the tape's block, allocated when the forward sweep starts, once a
        #: stack slot's shadow lives in it (:meth:`shadow_room`); its first ``shadow_bytes``
        #: hold those shadows.
        self.block: I.Call | None = None
        self.shadow_bytes = 0

    @property
    def split(self) -> bool:
        return self.fwd_entry is not self.rev_entry

    # -- slots -------------------------------------------------------------------------
    def slot(self, ty: T.Type, name: str, init: Value | None = None) -> Slot:
        """A new slot, set to ``init`` (default zero) when the forward sweep starts."""
        fwd = self._alloca(self.fwd_entry, ty, name)
        rev = fwd if not self.split else self._alloca(self.rev_entry, ty, name)
        b = IRBuilder()
        b.position_before(self.fwd_entry.terminator)
        b.store(init if init is not None else const_null(ty), fwd)
        slot = Slot(fwd.name, ty, fwd, rev)
        self.slots.append(slot)
        return slot

    def reverse_slot(self, ty: T.Type, name: str) -> I.Alloca:
        """A stack slot of the reverse sweep alone (not on the tape), set before it is read."""
        return self._alloca(self.rev_entry, ty, name)

    @staticmethod
    def _alloca(block, ty: T.Type, name: str) -> I.Alloca:
        inst = I.Alloca(ty, None, None)
        inst.name = block.parent.unique_name(name)
        block.insert(0, inst)
        return inst

    # -- loop counters -----------------------------------------------------------------
    def counter(self, loop) -> Slot:
        state = self.loops.get(loop)
        if state is None:
            state = self.loops[loop] = _LoopState(
                self.slot(T.i64, f"{block_label(loop.header).lstrip('%')}.count"))
        return state.counter

    # -- caches ------------------------------------------------------------------------
    def cache(self, ty: T.Type, loop, name: str, constant: bool = False) -> Cache:
        """Room for one value of type ``ty`` per iteration of ``loop`` (None: just one).
        A ``constant`` one holds values no active input changes: the reverse sweep's reads
        of it are marked so (:data:`~pyzyme.naming.CONSTANT_RELOAD`), for forward mode over
        the derivative, to which the tape they come from is active memory (a pointer kept
        there with a null shadow would be read as varied, its tangent through null)."""
        if loop is None:
            slot = self.slot(ty, f"{name}.cache")
            slot.constant = constant
            c = Cache(name, ty, None, slot, constant=constant)
            self.top_caches.append(c)
            return c
        self.counter(loop)
        state = self.loops[loop]
        if state.capacity is None:
            state.capacity = self.slot(T.i64, f"{block_label(loop.header).lstrip('%')}.capacity")
        c = Cache(name, ty, loop, self.slot(T.ptr, f"{name}.cache"), constant=constant)
        state.caches.append(c)
        return c

    def repeated(self, ty: T.Type, loop, outer, base: Cache, name: str,
                 constant: bool = False) -> Cache:
        """Room for one value of type ``ty`` per iteration of ``loop`` within one iteration
        of ``outer``, an outermost loop each of whose iterations runs ``loop``'s in the same
        order with the value the same on each (parameters read by a loop over data points).
        Such a value is stored at the same place on every iteration of ``outer``, at
        ``loop``'s counter less ``base`` (the counter as the iteration of ``outer`` began,
        one ``i64`` per iteration of ``outer``, which the caller keeps): the cache holds one
        iteration's worth, not all of them. It grows on its own (:meth:`grow`)."""
        state = self.repeats.get((loop, outer))
        if state is None:
            state = _RepeatState(loop, outer, base, None)
            state.capacity = self.slot(T.i64, f"{state.label}.capacity")
            self.repeats[(loop, outer)] = state
        c = Cache(name, ty, loop, self.slot(T.ptr, f"{name}.cache"), outer, base, constant)
        state.caches.append(c)
        return c

    def store(self, b: IRBuilder, cache: Cache, value: Value, index: Value | None) -> None:
        """Forward sweep: save ``value`` for iteration ``index`` of the cache's loop."""
        align = _heap_align(cache.type)
        if cache.loop is None:
            b.store(value, cache.slot.fwd, align)
            return
        base = b.load(T.ptr, cache.slot.fwd)
        self._mark(b.store(value, b.gep(cache.type, base, [index], ("inbounds",)), align))

    def load(self, b: IRBuilder, cache: Cache, index: Value | None, name: str = "",
             forward: bool = False) -> Value:
        """Reverse sweep (or ``forward``): the value saved for iteration ``index``."""
        align = _heap_align(cache.type)
        slot = cache.slot.fwd if forward else cache.slot.rev
        if cache.loop is None:
            return _constant_if(b.load(cache.type, slot, align, name=name), cache.constant)
        base = b.load(T.ptr, slot)
        return _constant_if(self._mark(b.load(
            cache.type, b.gep(cache.type, base, [index], ("inbounds",)), align, name=name)),
            cache.constant)

    def _mark(self, inst):
        """Tape memory is touched only through the tape: its accesses form an alias scope
        that every other access of the derivative is declared not to alias (see
        :mod:`pyzyme.transforms.alias_scopes`), so LLVM keeps tape reads out of loops that write
        shadows."""
        inst.metadata.append(("alias.scope", self.scope))
        return inst

    def grow(self, b: IRBuilder, loop, index: Value, after, outer_index: dict,
             own: bool = True) -> None:
        """At the header of ``loop`` (builder at the end of the block that computed ``index``),
        grow its caches when ``index`` reaches their capacity, then branch to ``after``; and
        so for its repeating caches (:meth:`repeated`), at ``index`` less their base, read at
        ``outer_index[outer]`` (the iteration of ``outer`` the forward sweep is in).
        Not ``own``: its own caches need no test, sized before it ran for every iteration it
        can run (:meth:`ensure` as each run starts, or :meth:`reserve` before its loop nest),
        so only the repeating ones are tested."""
        checks = []
        state = self.loops.get(loop)
        if own and state is not None and state.caches:
            label = block_label(loop.header).lstrip("%")
            checks.append((state.capacity, state.caches, index, label))
        for (inner, outer), rep in self.repeats.items():
            if inner is loop and rep.caches:
                base = self.load(b, rep.base, outer_index[outer], forward=True)
                checks.append((rep.capacity, rep.caches, b.sub(index, base), rep.label))
        fn = b.function
        for k, (capacity, caches, at, label) in enumerate(checks):
            rest = after if k == len(checks) - 1 else fn.append_block(f"{label}.grown")
            cap = b.load(T.i64, capacity.fwd)
            grow = fn.append_block(f"{label}.grow")
            b.cbranch(b.icmp("uge", at, cap), grow, rest)
            g = IRBuilder(grow)
            newcap = g.call(tape_capacity(self.module), [self._hint(label), cap],
                            name="capacity")
            self._regroup(g, caches, capacity, newcap)
            g.br(rest)
            b.position_at_end(rest)
        if not checks:
            b.br(after)

    def ensure(self, b: IRBuilder, loop, need: Value, after) -> None:
        """Where a run of ``loop`` starts (builder at the end of a block without its
        terminator): grow its caches to hold ``need`` iterations (its counter plus the run's
        trip count) if they do not, then branch to ``after``. The header then checks nothing:
        a loop whose capacity is tested on every iteration calls out of it, and LLVM
        vectorizes neither the loop nor the stores of its caches."""
        state = self.loops.get(loop)
        cap = b.load(T.i64, state.capacity.fwd)
        label = block_label(loop.header).lstrip("%")
        grow = b.function.append_block(f"{label}.reserve")
        b.cbranch(b.icmp("ugt", need, cap), grow, after)
        g = IRBuilder(grow)
        doubled = g.call(tape_capacity(self.module), [self._hint(label), cap], name="capacity")
        newcap = g.select(g.icmp("ult", doubled, need), need, doubled)
        self._regroup(g, state.caches, state.capacity, newcap)
        g.br(after)

    def sized(self, loop) -> bool:
        """Whether ``loop`` has caches of its own (per iteration, not repeating)."""
        state = self.loops.get(loop)
        return state is not None and bool(state.caches)

    def _hint(self, label: str):
        """The module global holding the largest capacity the caches of loop ``label`` (or
        of a loop within another, :meth:`repeated`) reached in any call (zero before the
        first)."""
        name = naming.capacity_hint(self.fwd_entry.parent.name, label)
        hint = self.module.get_global(name)
        if hint is None:
            hint = self.module.add_global(name, T.i64, const_int(T.i64, 0), prefix="internal")
        return hint

    def reserve(self, b: IRBuilder, loop, total: Value) -> None:
        """Make room for ``total`` iterations of ``loop`` in each of its caches at once (the
        trip counts of its loop nest are known before it starts), so they never grow."""
        state = self.loops.get(loop)
        if state is None or not state.caches:
            return
        self._regroup(b, state.caches, state.capacity, total)

    def _regroup(self, b: IRBuilder, caches: list, capacity: Slot, newcap: Value) -> None:
        """At ``b``: give the caches of one loop room for ``newcap`` iterations each (at least
        their present capacity), their entries so far copied over, and free their old blocks.
        Caches of one kind share a block (:func:`_groups`; each array at a 16-byte aligned
        offset, the first at its start): a recursive function caching five values per
        iteration made five allocations a call, all alive until the reverse sweep
        (GradBench's det)."""
        old_cap = b.load(T.i64, capacity.fwd)
        if self.shared_blocks:
            # (Blocks of their own keep the capacity asked for: a later round then sees that
            # a loop whose trip count was reserved never grows its caches.)
            newcap = b.select(b.icmp("ult", newcap, old_cap), old_cap, newcap)
        realloc = tape_realloc(self.module)
        for group in _groups(caches, self.shared_blocks):
            if len(group) == 1:  # a block of its own, grown in place where it can be
                c = group[0]
                old = b.load(T.ptr, c.slot.fwd)
                size = b.mul(newcap, const_int(T.i64, sizeof(c.type)))
                b.store(b.call(realloc, [old, size]), c.slot.fwd)
                continue
            olds = [b.load(T.ptr, c.slot.fwd) for c in group]
            offsets, total = _segments(b, group, newcap)
            block = b.call(realloc, [const_null(T.ptr), total], name="block")
            news = [b.gep(T.i8, block, [at]) for at in offsets]
            for c, new, old in zip(group, news, olds):
                # From a first block (null) nothing: llvm.memcpy of no bytes touches neither.
                memcpy(self.module, b, new, old,
                       b.mul(old_cap, const_int(T.i64, sizeof(c.type))))
            b.call(tape_free(self.module), [olds[0]])
            for c, new in zip(group, news):
                b.store(new, c.slot.fwd)
        b.store(newcap, capacity.fwd)

    def free(self, b: IRBuilder, forward: bool = False) -> None:
        """Free every loop cache and stack, and a tape block holding shadows: at the end of
        the reverse sweep, or (``forward``) where the forward sweep gives up with an error and
        no reverse sweep follows."""
        free = tape_free(self.module)
        for state in [*self.loops.values(), *self.repeats.values()]:
            for group in _groups(state.caches, self.shared_blocks):  # at its first
                first = group[0].slot
                b.call(free, [b.load(T.ptr, first.fwd if forward else first.rev)])
        for s in self.stacks:
            base = b.gep(STACK, s.fwd if forward else s.rev,
                         [const_int(T.i64, 0), const_int(T.i32, 0)])
            b.call(free, [b.load(T.ptr, base)])
        if self.block is not None:
            # The tape's own block (see shadow_room): the reverse function's last parameter.
            tape = self.block if forward else self.rev_entry.parent.args[-1]
            self._free_block(b, tape)

    # -- stacks --------------------------------------------------------------------------
    def stack(self, name: str) -> Slot:
        """A stack of i64 (``{entries, depth, capacity}``): pushed forwards, popped in
        reverse, so it holds one entry per run of a loop rather than per iteration around it.
        The entries are kept as pointers: a later round (a third derivative) that
        differentiates the stack's growth as a copy must find its bytes' type, which stores
        of the constant 0 (a loop that always starts at 0) do not tell for an integer."""
        stack = self.slot(STACK, name)
        self.stacks.append(stack)
        return stack

    def push(self, b: IRBuilder, stack: Slot, value: Value) -> None:
        b.call(append_function(self.module, _PUSH, [T.ptr]), [stack.fwd,
                                                             b.inttoptr(value, T.ptr)])

    def peek(self, b: IRBuilder, stack: Slot, name: str = "") -> Value:
        base = b.load(T.ptr, b.gep(STACK, stack.rev, [const_int(T.i64, 0), const_int(T.i32, 0)]))
        depth = b.load(T.i64, b.gep(STACK, stack.rev, [const_int(T.i64, 0),
                                                       const_int(T.i32, 1)]))
        top = b.gep(T.ptr, base, [b.sub(depth, const_int(T.i64, 1))], ("inbounds",))
        return b.ptrtoint(self._mark(b.load(T.ptr, top)), T.i64, name=name)

    def reserve_stack(self, b: IRBuilder, stack: Slot, total: Value) -> None:
        """Make room for ``total`` entries in ``stack`` at once (see :meth:`reserve`)."""
        zero = const_int(T.i64, 0)
        base = b.gep(STACK, stack.fwd, [zero, const_int(T.i32, 0)])
        realloc = tape_realloc(self.module)
        b.store(b.call(realloc, [b.load(T.ptr, base), b.mul(total, const_int(T.i64, 8))]),
                base)
        b.store(total, b.gep(STACK, stack.fwd, [zero, const_int(T.i32, 2)]))

    def pop(self, b: IRBuilder, stack: Slot) -> None:
        at = b.gep(STACK, stack.rev, [const_int(T.i64, 0), const_int(T.i32, 1)])
        b.store(b.sub(b.load(T.i64, at), const_int(T.i64, 1)), at)

    # -- split mode --------------------------------------------------------------------
    def shadow_room(self, b: IRBuilder, size: int, align: int | None) -> tuple | None:
        """Split mode, at forward-sweep builder ``b``: ``size`` bytes of the tape's block for
        the shadow of a stack slot, which must outlive the augmented primal's frame until its
        reverse function is done (that function frees the block at its end): the pointer to
        them in the forward function, and in the reverse function (made in its entry block,
        from its tape parameter). None where the
        slot is too big or too aligned for it (the caller allocates on its own). One block a
        call instead of a block per slot and a deferred free of each: a recursive function
        passing a stack slot for its recursive call's result made one more allocation and
        one more release-list entry a call."""
        if not self.split or size > _SHADOW_ROOM or (align or 1) > _BLOCK_ALIGN:
            return None
        if self.block is None:
            at = IRBuilder()
            at.position_before(self.fwd_entry.terminator)
            # Its size is set once every slot is known (pack).
            self.block = self._new_block(at, const_int(T.i64, 0))
        offset = self.shadow_bytes
        self.shadow_bytes += -(-max(1, size) // _BLOCK_ALIGN) * _BLOCK_ALIGN
        at = const_int(T.i64, offset)
        rev = I.GetElementPtr(T.i8, self.rev_entry.parent.args[-1], [at], ("inbounds",))
        rev.name = self.rev_entry.parent.unique_name("shadow.room")
        self.rev_entry.insert(0, rev)
        return b.gep(T.i8, self.block, [at], ("inbounds",)), rev

    def _fields(self) -> list[T.Type]:
        room = [T.ArrayType(self.shadow_bytes, T.i8)] if self.shadow_bytes else []
        return room + [s.type for s in self.slots]

    def _field(self, i: int) -> int:
        """The field of the tape's type holding slot ``i``."""
        return i + (1 if self.shadow_bytes else 0)

    def layout(self) -> T.StructType:
        """The tape's type in split mode: the room of stack slots' shadows (if any), then one
        field per slot."""
        return T.StructType(self._fields())

    def size(self) -> int:
        return struct_layout(self.layout())[1] if self._fields() else 0

    def pack(self, b: IRBuilder) -> Value:
        """Forward function, at a return: copy every slot into the tape (a new heap block,
        or the one :meth:`shadow_room` allocated)."""
        if not self._fields():
            return const_null(T.ptr)
        size = const_int(T.i64, self.size())
        if self.block is not None:
            self.block.set_operand(self.block.nargs, size)  # its last argument (after the callee)
            tape = self.block
        else:
            tape = self._new_block(b, size)
        ty = self.layout()
        for i, s in enumerate(self.slots):
            field_ptr = b.gep(ty, tape, [const_int(T.i64, 0), const_int(T.i32, self._field(i))])
            b.store(b.load(s.type, s.fwd), field_ptr)
        return tape

    def bytes_function(self, name: str, extra_lists=()):
        """``i64 name(ptr tape)``: the bytes a packed tape holds, its block and the arrays
        hanging off it (loop caches and stacks at their capacity, and ``extra_lists``: slots
        of growable ``{entries, count, capacity}`` lists with their entry size)."""
        fn = self.module.add_function(name, T.FunctionType(T.i64, [T.ptr]), prefix="internal")
        fn.args[0].name = "tape"
        b = IRBuilder(fn.append_block("entry"))
        ty = self.layout() if self._fields() else None
        index = {id(s): self._field(i) for i, s in enumerate(self.slots)}

        def field(slot, sub=None):
            path = [const_int(T.i64, 0), const_int(T.i32, index[id(slot)])]
            if sub is not None:
                path.append(const_int(T.i32, sub))
            return b.gep(ty, fn.args[0], path)

        total = const_int(T.i64, self.size())
        for state in [*self.loops.values(), *self.repeats.values()]:
            if state.caches:
                cap = b.load(T.i64, field(state.capacity))
                total = b.add(total, _segments(b, state.caches, cap)[1])
        for stack, entry in [(s, 8) for s in self.stacks] + list(extra_lists):
            cap = b.load(T.i64, field(stack, 2))
            total = b.add(total, b.mul(cap, const_int(T.i64, entry)))
        b.ret(total)
        return fn

    def unpack(self, b: IRBuilder, tape: Value) -> None:
        """Reverse function, at its start: copy the tape into the slots and free it (at the
        end, :meth:`free`, where shadows of stack slots live in it)."""
        if not self.slots:
            return
        ty = self.layout()
        for i, s in enumerate(self.slots):
            field_ptr = b.gep(ty, tape, [const_int(T.i64, 0), const_int(T.i32, self._field(i))])
            b.store(_constant_if(b.load(s.type, field_ptr), s.constant), s.rev)
        if self.block is None:
            self._free_block(b, tape)

    def _new_block(self, b: IRBuilder, size: Value) -> Value:
        """A block of ``size`` bytes for the tape itself (see ``recursive``)."""
        if self.recursive:
            return b.call(tape_realloc(self.module), [const_null(T.ptr), size], name="tape")
        return malloc(self.module, b, size, "tape")

    def _free_block(self, b: IRBuilder, tape: Value) -> None:
        if self.recursive:
            b.call(tape_free(self.module), [tape])
        else:
            free_memory(self.module, b, tape)

    # -- printing ----------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"tape of {self.fwd_entry.parent.ref}"]
        for c in self.top_caches:
            lines.append(f"  slot %{c.slot.name}: {c.type}")
        for loop, state in self.loops.items():
            caches = ", ".join(f"%{c.slot.name}: {c.type}" for c in state.caches) or "none"
            lines.append(f"  loop {block_label(loop.header)}: counter %{state.counter.name}, "
                         f"caches {caches}")
        for (loop, outer), rep in self.repeats.items():
            caches = ", ".join(f"%{c.slot.name}: {c.type}" for c in rep.caches)
            lines.append(f"  loop {block_label(loop.header)} within each iteration of "
                         f"{block_label(outer.header)}: from %{rep.base.slot.name}, "
                         f"caches {caches}")
        for stack in self.stacks:
            lines.append(f"  stack %{stack.name}: i64")
        return "\n".join(lines)


def _constant_if(load: I.Load, constant: bool) -> I.Load:
    if constant:
        load.metadata.append((naming.CONSTANT_RELOAD, "!{}"))
    return load


def append_function(module, name: str, fields: Sequence[T.Type]):
    """``void name(ptr list, <fields>)``: append one entry to a growable ``STACK``-shaped list
    (``{entries, count, capacity}``), doubling its capacity (from 16) when it is full. Loop
    starts (one i64) and deferred releases (tag, primal, shadow) are both kept this way."""
    fn = module.get_function(name)
    if fn is not None:
        return fn
    fn = module.add_function(name, T.FunctionType(T.void, [T.ptr, *fields]), prefix="internal")
    lst, *values = fn.args
    lst.name = "list"
    entry_ty = fields[0] if len(fields) == 1 else T.StructType(list(fields))
    entry, grow, put = (fn.append_block(n) for n in ("entry", "grow", "put"))
    b = IRBuilder(entry)
    zero = const_int(T.i64, 0)

    def field(i):
        return b.gep(STACK, lst, [zero, const_int(T.i32, i)])

    base = b.load(T.ptr, field(0), name="entries")
    count = b.load(T.i64, field(1), name="count")
    cap = b.load(T.i64, field(2), name="capacity")
    b.cbranch(b.icmp("uge", count, cap), grow, put)
    b.position_at_end(grow)
    newcap = b.select(b.icmp("eq", cap, zero), const_int(T.i64, 16),
                      b.shl(cap, const_int(T.i64, 1)))
    size = b.mul(newcap, const_int(T.i64, sizeof(entry_ty)))
    grown = b.call(tape_realloc(module), [base, size])
    b.store(grown, field(0))
    b.store(newcap, field(2))
    b.br(put)
    b.position_at_end(put)
    entries = b.phi(T.ptr, name="buffer")
    entries.add_incoming(base, entry)
    entries.add_incoming(grown, grow)
    slot = b.gep(entry_ty, entries, [count])
    if len(fields) == 1:
        b.store(values[0], slot)
    else:
        for i, v in enumerate(values):
            b.store(v, b.gep(entry_ty, slot, [zero, const_int(T.i32, i)]))
    b.store(b.add(count, const_int(T.i64, 1)), field(1))
    b.ret_void()
    return fn


def _groups(caches: list, shared: bool = True) -> list[list]:
    """``caches`` (of one loop) in the groups that share a block: all of them, or with
    ``shared`` false each alone. A later round (a third derivative, C's nested
    ``__enzyme_autodiff``) differentiates a shared block as memory whose type is the same at
    every offset, the arrays' offsets not being constants: floats and pointers in one block
    conflict there, and its copies move bytes of no type it can tell."""
    return [list(caches)] if shared and caches else [[c] for c in caches]


def _segments(b: IRBuilder, caches: list, capacity: Value) -> tuple[list, Value]:
    """The offsets of ``caches``' arrays of ``capacity`` entries in their loop's block, each
    rounded up to 16 bytes (tape blocks are 16-byte aligned: see :func:`_heap_align`), and
    the block's size."""
    offsets, total = [], const_int(T.i64, 0)
    for c in caches:
        offsets.append(total)
        size = b.mul(capacity, const_int(T.i64, sizeof(c.type)))
        total = b.add(total, b.and_(b.add(size, const_int(T.i64, _BLOCK_ALIGN - 1)),
                                    const_int(T.i64, -_BLOCK_ALIGN)))
    return offsets, total


def _heap_align(ty: T.Type) -> int | None:
    """The alignment to assume of a cached value in tape memory: tape blocks are 16-byte
    aligned (malloc's), so wider vectors (``<4 x double>`` in C vectorized by clang) must
    not be assumed at their natural 32 or 64; None (the type's own) for everything else."""
    return 16 if ty.is_vector else None
