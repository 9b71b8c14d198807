"""The state of one derivative being generated, and the handler API over it.

A generator (:class:`~pyzyme.diff.forward.generator.ForwardGenerator`,
:class:`~pyzyme.diff.reverse.generator.ReverseGenerator`) makes one context per function it
differentiates and hands it to every handler: the call handlers of :mod:`pyzyme.diff.calls`
(chosen by rule-row kind), the BLAS and LAPACK rules of :mod:`pyzyme.diff.linalg`, forward mode's
memory handlers. A handler reads the context's maps and builders and calls only the methods
documented here; it never imports a generator. Asking for a callee's derivative goes through the
context too (:meth:`ForwardContext.callee_derivative`, :meth:`ReverseContext.callee_derivative`),
so the generators may import the handlers and not the other way round.

The handler API, by mode:

- forward mode (:class:`ForwardContext`): :meth:`~ForwardContext.value`,
  :meth:`~ForwardContext.clone`, :meth:`~ForwardContext.lanes`,
  :meth:`~ForwardContext.derivative`, :meth:`~ForwardContext.inactive_derivative`,
  :meth:`~ForwardContext.partials`, :meth:`~ForwardContext.callee_derivative`;
- reverse mode's forward sweep (:class:`ReverseContext`): :meth:`~ReverseContext.fwd_value`,
  :meth:`~ReverseContext.fwd_shadow`, :meth:`~ReverseContext.clone`,
  :meth:`~ReverseContext.stable`, :meth:`~ReverseContext.release_later`,
  :meth:`~ReverseContext.types`, :meth:`~ReverseContext.callee_derivative`,
  :meth:`~ReverseContext.callee_releases`;
- its reverse sweep: :meth:`~ReverseContext.primal`, :meth:`~ReverseContext.avail`,
  :meth:`~ReverseContext.shadow`, :meth:`~ReverseContext.active`,
  :meth:`~ReverseContext.accumulate`, :meth:`~ReverseContext.consume`,
  :meth:`~ReverseContext.partials`, :meth:`~ReverseContext.private` and
  :meth:`~ReverseContext.shared_add` (adjoints into memory a parallel loop's threads share).

Both have ``module``, ``rules`` and ``options`` (the generator's) and ``where`` (the primal
function, as error messages name it). The parts of the reverse generator use the same methods
on the same object, and two more of their own (:meth:`~ReverseContext.fwd_edge`,
:meth:`~ReverseContext.entering`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyzyme import naming
from pyzyme.analysis.activity import ActivityResult, can_carry_derivative
from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.overwrite import underlying_object, underlying_objects
from pyzyme.analysis.parallel_access import owned_arrays
from pyzyme.analysis.type_analysis import analyze_types
from pyzyme.analysis.unread_slots import unread_stores
from pyzyme.diff.leaves import elements, has_float, has_pointer
from pyzyme.diff.memory_calls import add_leaves, atomic_add
from pyzyme.diff.tape.cache import TapeCache
from pyzyme.diff.tape.releases import Releases
from pyzyme.errors import TypeAnalysisError, UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.names import readable
from pyzyme.ir.values import (
    Argument,
    GlobalValue,
    NamedValue,
    Poison,
    Undef,
    Value,
    ZeroInitializer,
    const_int,
    const_null,
)
from pyzyme.rules import spec
from pyzyme.transforms.parallel_body import slot_loads

__all__ = ["ForwardContext", "ReverseContext"]


def _mapped(values: dict, value: Value, where: str) -> Value:
    """``value`` as ``values`` maps it; constants and globals as they are."""
    mapped = values.get(value)
    if mapped is not None:
        return mapped
    if isinstance(value, NamedValue) and not isinstance(value, GlobalValue):
        raise UnsupportedError(f"{where} uses {value!r} before it is defined")
    return value


class _Generated:
    """What both contexts read from the generator that made them."""

    generator: object
    old: object

    @property
    def where(self) -> str:
        """The primal function, as error messages name it."""
        return readable(self.old.name)

    @property
    def module(self):
        """The module the derivative is generated in (declare helpers here)."""
        return self.generator.module

    @property
    def rules(self):
        """The rule table (:class:`~pyzyme.rules.table.RuleTable`)."""
        return self.generator.rules

    @property
    def options(self):
        """What the derivative is generated under (:class:`~pyzyme.settings.Options`)."""
        return self.generator.options

    def allocation_row(self, value: Value):
        """The :class:`~pyzyme.rules.spec.Allocation` row of the call ``value`` is, if it is
        a call of an allocator; else None."""
        callee = value.called_function if isinstance(value, I.CallBase) else None
        row = self.rules.lookup(callee.name, "call") if callee is not None else None
        return row if isinstance(row, spec.Allocation) else None


@dataclass(eq=False)
class ForwardContext(_Generated):
    """One forward-mode derivative being generated: maps from primal values to new ones and to
    their derivatives (``derivs``: one per lane, tangents for floats, shadows for pointers),
    and the builder at the new function's insertion point."""

    generator: object
    old: object
    new: object
    activity: ActivityResult
    width: int
    values: dict = field(default_factory=dict)
    derivs: dict = field(default_factory=dict)
    phis: list = field(default_factory=list)
    #: (pred, block) -> the new block ending that edge, where it is not pred's own (an
    #: invoke's normal edge, through the block taking its results apart).
    edges: dict = field(default_factory=dict)
    builder: IRBuilder = field(default_factory=IRBuilder)
    exception_arg: object = None
    #: Values whose shadow may be their primal at run time (empty unless runtime activity).
    runtime: frozenset = frozenset()
    #: Primal values that can be infinite or NaN (strong zero), or None where it is off.
    nonfinite: object = None
    #: Integer loads from shadowed memory that may read a float's bits, stored into
    #: shadowed memory: the same load from each lane's shadow, what the store copies there.
    bits: dict = field(default_factory=dict)

    def value(self, value: Value) -> Value:
        """The new function's copy of primal ``value`` (constants and globals as they are).

        Raises
        ------
        UnsupportedError
            Where ``value`` is an instruction not copied yet (used before it is defined).
        """
        return _mapped(self.values, value, self.where)

    def clone(self, inst: I.Instruction) -> I.Instruction:
        """Copy primal ``inst`` (operands mapped, metadata kept) at the builder, and map it to
        the copy, which is returned."""
        new = inst.copy_with([self.value(op) for op in inst.operands], keep_metadata=True)
        self.builder.insert(new, inst.name)
        self.values[inst] = new
        return new

    def lanes(self, inst: I.Instruction, make: Callable[[int, str], Value]) -> None:
        """Record ``make(lane, name)`` as the derivative of ``inst`` in every lane, ``name``
        being the tangent's name in that lane."""
        self.derivs[inst] = [make(k, naming.tangent(inst.name, k, self.width))
                             for k in range(self.width)]

    def derivative(self, value: Value, lane: int) -> Value:
        """The derivative of ``value`` in ``lane``, or :meth:`inactive_derivative` where it
        has none."""
        d = self.derivs.get(value)
        if d is not None:
            return d[lane]
        return self.inactive_derivative(value)

    def inactive_derivative(self, value: Value) -> Value:
        """What stands for the derivative of a value that has none: zero for floats, the
        value itself for integers, null for pointers (never the primal address: tangents
        written through it would overwrite primal memory)."""
        ty = value.type
        if not can_carry_derivative(ty):
            return self.value(value)
        if ty.is_float or ty.is_pointer:
            return const_null(ty)
        if isinstance(value, (Undef, Poison, ZeroInitializer)):
            return value  # an aggregate with nothing in it yet, or all zeros
        # An aggregate: zero its float and pointer leaves, keep its integers.
        return self._zero_leaves(self.value(value), ty, ())

    def _zero_leaves(self, agg: Value, ty: T.Type, path: tuple) -> Value:
        b = self.builder
        for i, ety in enumerate(elements(ty)):
            if not can_carry_derivative(ety):
                continue
            if ety.is_float or ety.is_pointer:
                agg = b.insertvalue(agg, const_null(ety), path + (i,))
            else:
                agg = self._zero_leaves(agg, ety, path + (i,))
        return agg

    def partials(self, inst: I.Instruction, new: I.Instruction, row: spec.Partials,
                 operands: Sequence[Value], new_operands: Sequence[Value],
                 flags: Sequence[str] = ()) -> None:
        """The tangent of ``inst`` (copied as ``new``) from ``row``: ``sum_i partial_i *
        d operand_i`` over the operands that carry derivatives; ``new_operands`` are
        ``operands`` in the new function, ``flags`` the fast-math flags allowed."""
        self.generator.partials(self, inst, new, row, operands, new_operands, flags)

    def callee_derivative(self, callee, sig):
        """The forward-mode derivative of function ``callee`` with interface ``sig`` (a
        :class:`~pyzyme.diff.signature.ForwardSignature`), generated once per pair."""
        return self.generator.derivative(callee, sig)


@dataclass(eq=False)
class ReverseContext(_Generated):
    """One reverse-mode derivative being generated: the forward sweep (builder ``fb``, maps
    ``values`` and ``shadows``), the reverse sweep (builder ``rb``, adjoint slots), the tape
    between them, and what the generator's parts record along the way."""

    generator: object
    old: object
    sig: object                                        # ReverseSignature
    fwd: object
    rev: object
    activity: object
    loops: object
    overwrites: object
    tape: TapeCache
    releases: Releases                                 # what is released after the sweep
    fb: IRBuilder = field(default_factory=IRBuilder)   # forward sweep
    rb: IRBuilder = field(default_factory=IRBuilder)   # reverse sweep
    values: dict = field(default_factory=dict)         # primal -> forward value
    shadows: dict = field(default_factory=dict)        # primal -> forward shadow
    first: dict = field(default_factory=dict)          # primal block -> its first fwd block
    last: dict = field(default_factory=dict)           # primal block -> fwd block with its exit
    origin: dict = field(default_factory=dict)         # fwd block -> primal block
    origin_load: dict = field(default_factory=dict)    # fwd load -> primal load it repeats
    inductions: dict = field(default_factory=dict)     # fwd phi -> (loop, InductionVariable)
    fidx: dict = field(default_factory=dict)           # loop -> forward iteration number
    rblocks: dict = field(default_factory=dict)        # primal block -> reverse block
    rev_args: dict = field(default_factory=dict)       # fwd argument -> rev argument
    rev_fixed: dict = field(default_factory=dict)      # fwd value -> rev value made at entry
    adjoints: dict = field(default_factory=dict)       # primal value -> adjoint slot
    caches: dict = field(default_factory=dict)         # fwd value -> Cache
    memo: dict = field(default_factory=dict)           # fwd value -> its reverse value here
    recomputable: dict = field(default_factory=dict)
    starts: dict = field(default_factory=dict)         # loop -> Cache of its start count
    counted: dict = field(default_factory=dict)        # loop -> reverse slot of its start
    carried: dict = field(default_factory=dict)        # loop -> CarriedCells, or None
    current: object = None                             # primal block being reversed
    recorded: dict = field(default_factory=dict)       # primal block -> Cache of pred index
    callee_tapes: dict = field(default_factory=dict)   # primal call -> (pair, sig, fwd tape)
    rule_calls: dict = field(default_factory=dict)     # primal call -> user rule and its tape
    indirect: dict = field(default_factory=dict)       # indirect call -> its pair's reverse
    ret_slot: object = None
    which_exit: object = None                          # split: Slot of the exit taken
    exits: list = field(default_factory=list)          # split: (fwd block, value, shadow, from)
    headers: list = field(default_factory=list)        # (loop, index, first, rest)
    phis: list = field(default_factory=list)
    shadow_args: dict = field(default_factory=dict)    # primal param -> fwd shadow param
    entries: dict = field(default_factory=dict)        # (pred, block) -> fwd edge block
    copies: dict = field(default_factory=dict)         # memcpy -> float type copied, or None
    resizes: dict = field(default_factory=dict)        # block move -> (old, size, new) shadow
    float_pointers: list | None = None                 # pointers of float loads and stores
    written: dict = field(default_factory=dict)        # loop -> pointers written in it
    bulk: list = field(default_factory=list)           # reverse.bulk.BulkCopy of loop caches
    same_runs: dict = field(default_factory=dict)      # (loop, outer) -> bool
    forwarding: object = None                          # StoreForwarding, lazily
    rev_origin: dict = field(default_factory=dict)     # reverse value -> fwd value it stands for
    error_exits: list = field(default_factory=list)    # fwd blocks returning an error status
    doms: object = None
    doomed: frozenset = frozenset()                    # blocks that can only end in an error
    released_now: frozenset = frozenset()              # releases made in the forward sweep
    increments: dict | None = None                     # reverse.increments, lazily
    increment_parts: set = field(default_factory=set)  # loads and adds an increment took
    dret: object = None
    runtime: frozenset = frozenset()                   # shadows that may be primals at run time
    nonfinite: object = None                           # NonFinite values (strong zero), or None
    finite_watch: object = None                        # FiniteWatch (reverse.versions), or None
    owned: object = None                               # OwnedArrays of a parallel body, lazily
    slot_loads: dict | None = None                     # a parallel body's slot reads, lazily
    unread_stores: frozenset | None = None             # stores the forward sweep leaves out
    edge_tests: list = field(default_factory=list)     # shared_add's row-edge tests (i1)
    primals: dict = field(default_factory=dict)        # fwd value -> primal (see primal_of)
    primals_at: int = -1                               # len(values) when primals was made

    def primal_of(self, fv: Value) -> Value | None:
        """The primal value forward-sweep value ``fv`` stands for (None: a shadow, or
        something only the derivative computes)."""
        if self.primals_at != len(self.values):   # the forward sweep mapped more since
            self.primals = {v: p for p, v in self.values.items()}
            self.primals_at = len(self.values)
        return self.primals.get(fv)

    def unvaried(self, fv: Value) -> bool:
        """Whether forward-sweep value ``fv`` is a primal value no active input changes (not
        a shadow): the tape keeps such a value marked so
        (:meth:`~pyzyme.diff.tape.cache.TapeCache.cache`)."""
        primal = self.primal_of(fv)
        return primal is not None and not self.activity.is_varied(primal) \
            and primal not in self.runtime

    @property
    def sum_flags(self) -> tuple[str, ...]:
        """The fast-math flags of sums that accumulate adjoints
        (:func:`~pyzyme.diff.reverse.adjoints.sum_flags`)."""
        return self.generator.sum_flags

    def active(self, value: Value) -> bool:
        """Whether ``value`` carries an adjoint: active, and holding floats."""
        return self.activity.is_active(value) and has_float(value.type)

    def entering(self, loop) -> list[IRBuilder]:
        """A builder before the end of each forward edge block entering ``loop`` from
        outside: where what a run of it starts from is recorded, once per run."""
        builders = []
        for (_, header), edge in self.entries.items():
            if header is loop.header:
                b = IRBuilder()
                b.position_before(edge.terminator)
                builders.append(b)
        return builders

    # -- the forward sweep ---------------------------------------------------------------
    def fwd_value(self, value: Value) -> Value:
        """The forward sweep's copy of primal ``value`` (constants and globals as they are).

        Raises
        ------
        UnsupportedError
            Where ``value`` is an instruction not copied yet (used before it is defined).
        """
        return _mapped(self.values, value, self.where)

    def fwd_shadow(self, value: Value) -> Value:
        """The shadow of primal ``value`` in the forward sweep: null pointers and zero floats
        where it has none, its integers as they are."""
        s = self.shadows.get(value)
        if s is not None:
            return s
        return self._no_shadow(self.fwd_value(value), value.type)

    def _no_shadow(self, value: Value, ty: T.Type) -> Value:
        if not can_carry_derivative(ty):
            return value
        if ty.is_float or ty.is_pointer or not has_pointer(ty):
            return const_null(ty)
        agg = value
        for i, ety in enumerate(elements(ty)):
            if can_carry_derivative(ety):
                part = self.fb.extractvalue(agg, i)
                agg = self.fb.insertvalue(agg, self._no_shadow(part, ety), i)
        return agg

    def fwd_edge(self, pred, block):
        """The forward block that branches to ``block`` for the primal edge from ``pred``."""
        return self.entries.get((pred, block), self.last[pred])

    def fwd_edges(self, pred, block) -> int:
        """How many edges the forward block :meth:`fwd_edge` names has to ``block``: as many
        as ``pred`` has (a switch may send several cases there, and a phi needs one entry
        for each), or one from a loop's entry block."""
        if (pred, block) in self.entries:
            return 1
        return pred.terminator.successors.count(block)

    def clone(self, inst: I.Instruction) -> I.Instruction:
        """Copy primal ``inst`` into the forward sweep (operands mapped, metadata kept) and
        map it to the copy, which is returned."""
        new = inst.copy_with([self.fwd_value(op) for op in inst.operands], keep_metadata=True)
        self.fb.insert(new, inst.name)
        self.values[inst] = new
        return new

    def stable(self, pointer: Value) -> bool:
        """Whether memory at ``pointer`` keeps its contents until the reverse sweep (given
        that nothing in the function overwrites it): then the reverse sweep may read it
        again instead of the forward sweep keeping a copy."""
        obj = underlying_object(pointer)
        if self._caller_keeps(obj):
            return True
        if isinstance(obj, I.Alloca):
            return not self.sig.split  # a callee's stack is gone when its reverse runs
        if isinstance(obj, I.CallBase):
            return True  # allocated here, freed only after the reverse sweep
        if isinstance(obj, I.Load):
            return self.stable(obj.pointer) if self.sig.split else self.sig.memory_stable
        return self.sig.memory_stable

    def private(self, pointer: Value) -> bool:
        """Whether memory at ``pointer`` belongs to one run of this function: a stack slot,
        or a block allocated here (Numba's temporaries: a MemInfo and the data block it points
        to). In the body of a parallel loop, no other thread adds into its shadow."""
        if self._owned(pointer):
            return True
        # Through phis and selects: Numba hands BLAS an operand or its contiguous copy, and a
        # temporary of this iteration or of the one before on the same thread.
        objects = underlying_objects(pointer) or [underlying_object(pointer)]
        return all(self._private_object(obj) for obj in objects)

    def _private_object(self, obj: Value) -> bool:
        if isinstance(obj, I.Load):  # the data block a MemInfo allocated here points to
            inner = underlying_object(obj.pointer)
            if self.allocation_row(inner) is not None:
                obj = inner
        return isinstance(obj, I.Alloca) or self.allocation_row(obj) is not None \
            or self._slot_in(obj, "private")

    def _owned(self, pointer: Value) -> bool:
        """In the body of a parallel loop whose arrays do not overlap: whether ``pointer``
        points into an array one iteration owns (:mod:`pyzyme.analysis.parallel_access`)."""
        owned = self._owned_arrays()
        return owned is not None and owned.owns(pointer)

    def near_row_edges(self, pointer: Value):
        """In the body of a parallel loop: for ``pointer`` into an array iterations share
        only with their neighbours, ``(index, reach, first, last, column)`` (primal values; see
        :meth:`~pyzyme.analysis.parallel_access.OwnedArrays.near_edges`): adjoints need an
        atomic add only within ``reach`` of the row's ends. None otherwise."""
        owned = self._owned_arrays()
        return None if owned is None else owned.near_edges(pointer)

    def _caller_keeps(self, obj: Value) -> bool:
        """In the body of a parallel loop: whether ``obj`` is an array read from a slot of
        the argument array whose memory the launching function keeps unchanged until this
        reverse sweep (:attr:`~pyzyme.diff.signature.ParallelBody.stable`)."""
        return self._slot_in(obj, "stable")

    def _slot_in(self, obj: Value, which: str) -> bool:
        """In the body of a parallel loop: whether ``obj`` is an array read from one of the
        slots ``which`` names (a set of :class:`~pyzyme.diff.signature.ParallelBody`)."""
        body = self.sig.parallel_body
        chosen = getattr(body, which, None) if body is not None else None
        return bool(chosen) and self._slot_loads().get(obj) in chosen

    def unread_store(self, inst: I.Instruction) -> bool:
        """In the body of a parallel loop: whether ``inst`` stores into memory of a slot
        whose primal contents no part of the derivative reads
        (:attr:`~pyzyme.diff.signature.ParallelBody.unread`), as only linear operations carry
        what the body reads there to its stores (:func:`~pyzyme.analysis.unread_slots.
        unread_stores`): the forward sweep leaves such a store out."""
        body = self.sig.parallel_body
        if body is None or not body.unread or not isinstance(inst, I.Store):
            return False
        if self.unread_stores is None:
            found: set = set()
            for k in body.unread:
                slots = [load for load, slot in self._slot_loads().items() if slot == k]
                found.update(unread_stores(slots, self.activity.is_active) or ())
            self.unread_stores = frozenset(found)
        return inst in self.unread_stores

    def _slot_loads(self) -> dict:
        """The body's pointers read from its argument array, with their slots, once."""
        if self.slot_loads is None:
            self.slot_loads = slot_loads(self.old)
        return self.slot_loads

    def array_extent(self, pointer: Value):
        """Primal values whose product is the number of bytes memory at ``pointer`` spans
        from it on: a contiguous array parameter's (the frontend's facts,
        :attr:`ReverseGenerator.array_extents`), or the data block of an allocation made
        here; None where that is not known."""
        if isinstance(pointer, I.Alloca) and pointer.count is None:
            return (const_int(T.i64, sizeof(pointer.allocated_type)),)
        if isinstance(pointer, Argument) and pointer.function is self.old:
            found = self.generator.array_extents.get(self.old, {}).get(pointer.index)
            return None if found is None else tuple(self.old.args[i] for i in found)
        if isinstance(pointer, I.Load):
            inner = pointer.pointer
            base = underlying_object(inner)
            if self.allocation_row(base) is not None:
                row = self.rules.lookup(base.called_function.name, "call")
                offset = inner.operands[1] if isinstance(inner, I.GetElementPtr) and \
                    len(inner.operands) == 2 else None
                if row.data_offset is not None and getattr(offset, "value", None) == \
                        row.data_offset and row.size_args:
                    return tuple(base.args[i] for i in row.size_args)
        return None

    def shared_add(self, pointer: Value, shadow: Value, ty: T.Type, delta: Value,
                   align: int | None = None) -> None:
        """In the reverse sweep of the body of a parallel loop (or a function it calls):
        ``*shadow += delta``, the shadow of primal ``pointer``, into memory other iterations
        may add into. Atomic, unless no other thread runs (:meth:`threads_share`) or, for an
        array iterations share with their neighbours only (a stencil's), the index is more
        than ``reach`` from its row's ends (:meth:`near_row_edges`), where no other thread's
        row reaches. ``align``: the primal access's alignment."""
        b = self.rb
        shared = self.threads_share()
        edge = self.near_row_edges(pointer)
        if shared is None and edge is None:
            atomic_add(b, ty, shadow, delta)
            return
        atomic, own, done = (self.rev.append_block(name) for name in
                             ("adjoint.shared", "adjoint.own", "adjoint.done"))
        if edge is not None:
            # The primal values first, here, where they dominate what follows (a value made
            # in the test's block would not); the test itself only where other threads run,
            # so one thread pays a branch an add, as without it.
            index, reach, first, last, column, across = edge
            i, lo, hi = self.primal(index), self.primal(first), self.primal(last)
            box = across is not None and across[1] > 0   # cells shared near the box's ends
            if box:
                j, lo_j, hi_j = (self.primal(v) for v in (across[0], *across[2:]))
            if column is not None:
                terms, const, length = column
                terms = [(self._as_i64(self.primal(atom)), k) for atom, k in terms]
                length = self._as_i64(self.primal(length))
            if shared is not None:
                test = self.rev.append_block("adjoint.edge")
                b.cbranch(shared, test, own)
                b.position_at_end(test)
            r = const_int(i.type, reach)
            near = b.or_(b.icmp("ult", b.sub(i, lo), r), b.icmp("ult", b.sub(hi, i), r),
                         name="row.edge")
            if column is not None:
                # a 2-D array's row: the access keeps to it where 0 <= column < length
                at = const_int(T.i64, const)
                for v, k in terms:
                    at = b.add(at, v if k == 1 else b.mul(v, const_int(T.i64, k)))
                near = b.or_(near, b.icmp("uge", at, length), name="row.outside")
            if box:   # in the box's other dimension too
                r = const_int(j.type, across[1])
                near = b.or_(near, b.or_(b.icmp("ult", b.sub(j, lo_j), r),
                                         b.icmp("ult", b.sub(hi_j, j), r)), name="box.edge")
            self.edge_tests.append(near)   # for the interior version of its loop
            shared = near
        b.cbranch(shared, atomic, own)
        b.position_at_end(atomic)
        atomic_add(b, ty, shadow, delta)
        b.br(done)
        b.position_at_end(own)
        b.store(add_leaves(b, ty, b.load(ty, shadow, align), delta, self.sum_flags), shadow,
                align)
        b.br(done)
        b.position_at_end(done)

    def _as_i64(self, v: Value) -> Value:
        return self.rb.sext(v, T.i64) if v.type != T.i64 else v

    def threads_share(self):
        """In the reverse sweep of the body of a parallel loop: the ``i1`` that says whether
        other threads run at the same time (an adjoint added into shared memory need not be
        atomic where none does); None elsewhere (a callee of such a body: always shared)."""
        body = self.sig.parallel_body
        return None if body is None else self.primal(self.old.args[body.shared])

    def _owned_arrays(self):
        body = self.sig.parallel_body
        if body is None or not body.distinct:
            return None
        if self.owned is None:
            schedule = [load for load, k in self._slot_loads().items() if k == body.schedule]
            self.owned = owned_arrays(self.old, schedule, body.first_index)
        return self.owned

    def release_later(self, call: I.Call, primal: Value, shadow: Value) -> None:
        """In the forward sweep: record ``call`` (a release of its one pointer argument) to
        be made on ``primal``, and on ``shadow`` unless that is null, when the reverse sweep
        is done (:class:`~pyzyme.diff.tape.releases.Releases`)."""
        self.releases.defer(self.fb, call, primal, shadow)

    def types(self):
        """Type analysis of the primal function (a
        :class:`~pyzyme.analysis.type_analysis.TypeResults`), run once, when first asked."""
        return self.generator.function_types(self.old)

    def seed_types(self, fn, seeds: dict) -> None:
        """Type analysis of function ``fn`` (a callee, or a loop body this one launches)
        starts from ``seeds`` (argument index -> TypeTree): what this function knows of the
        arguments it passes."""
        self.generator.type_seeds.setdefault(fn, {}).update(seeds)

    def seed_callee_types(self, callee, indices: Sequence[int]) -> None:
        """Before ``callee``'s derivative is first asked for: its type analysis starts from
        what every call of it knows of its pointer arguments ``indices`` (Enzyme's
        interprocedural type analysis; a callee that only copies memory shows no type of
        its own). Derivatives are made once per function and signature, whichever call asks
        first, so a seed is what *all* its calls agree on (the meet of their trees): none
        where a call knows nothing, where its address is taken or where a caller's analysis
        fails. A callee analysed or seeded already keeps what it has."""
        gen = self.generator
        if callee in gen.types or callee in gen.type_seeds or not indices:
            return
        calls = [u for u in callee.users
                 if isinstance(u, I.CallBase) and u.called_function is callee]
        if len(calls) != len(callee.users):
            return  # its address is taken: callers unseen
        trees: dict = {}
        for call in calls:
            caller = call.function
            try:
                if caller is self.old:
                    types = self.types()
                elif caller is callee:  # recursion: its own facts, unseeded
                    types = analyze_types(callee, {}, rules=self.rules)
                else:
                    types = analyze_types(caller, gen.type_seeds.get(caller, {}),
                                          rules=self.rules)
            except TypeAnalysisError:
                return
            for i in indices:
                if caller is callee and call.args[i] is callee.args[i]:
                    continue  # passes its own argument on: what the other calls know holds
                tree = types.tree(call.args[i])
                trees[i] = tree if i not in trees else trees[i].meet(tree)
        seeds = {i: t for i, t in trees.items() if any(len(p) > 1 for p, _ in t)}
        if seeds:
            self.seed_types(callee, seeds)

    def callee_derivative(self, callee, sig):
        """The reverse-mode derivative of function ``callee`` with interface ``sig`` (a
        :class:`~pyzyme.diff.signature.ReverseSignature`): a
        :class:`~pyzyme.diff.signature.SplitPair` when ``sig.split``, generated once."""
        return self.generator.derivative(callee, sig)

    def callee_releases(self, pair) -> Value:
        """In the forward sweep: what a nested callee's augmented primal (of ``pair``, a
        :class:`~pyzyme.diff.signature.SplitPair`) takes as its last parameter, the list it
        defers its releases into: this function's (its caller's, when this one is nested too),
        so they are made when the outermost reverse sweep is done; null where the callee is
        known to defer none (its pair is complete and does not use the parameter)."""
        if pair.nbytes is not None and not pair.augmented.args[-1].users:
            return const_null(T.ptr)
        return self.releases.pass_on()

    # -- the reverse sweep ---------------------------------------------------------------
    def avail(self, fv: Value) -> Value:
        """Forward-sweep value ``fv`` where the reverse sweep now is: recomputed, or cached
        by the forward sweep (:mod:`pyzyme.diff.reverse.values`)."""
        return self.generator.avail(self, fv)

    def primal(self, value: Value) -> Value:
        """Primal ``value`` where the reverse sweep now is."""
        return self.avail(self.fwd_value(value))

    def shadow(self, value: Value) -> Value:
        """The shadow of primal pointer ``value`` where the reverse sweep now is."""
        return self.avail(self.shadows[value])

    def accumulate(self, value: Value, delta: Value) -> None:
        """``value_bar += delta``, for an active primal value (nothing for others)."""
        self.generator.accumulate(self, value, delta)

    def consume(self, value: Value) -> Value:
        """``value_bar``, read and reset to zero (the value's uses are all done)."""
        return self.generator.consume(self, value)

    def partials(self, inst: I.Instruction, row: spec.Partials, operands: Sequence[Value],
                 flags: Sequence[str] = ()) -> None:
        """``operand_i_bar += partial_i * inst_bar`` over the active ``operands``, from
        ``row``; ``flags`` are the fast-math flags allowed."""
        self.generator.partials(self, inst, row, operands, flags)
