"""The outermost counted loops of an optimized function, turned into checkpointed loops.

Under a tape budget (``Options.tape_budget``) the reverse sweep must not keep what every
iteration of a long time loop needs. :func:`checkpoint_loops` rewrites each outermost loop
whose trip count is known at its entry into a call of the checkpointed-loop intrinsic
(:data:`pyzyme.naming.CHECKPOINT_FOR`, differentiated by :mod:`pyzyme.diff.calls.checkpoint`)
over a *step*: a function of its own running one iteration, or (a counted loop carrying no
pointers) a chunk of them (:mod:`pyzyme.transforms.checkpoint_chunks`), whose derivative tapes
them as any loop. Optimized SSA carries values from
one iteration to the next in header phis, not memory, so they become a state region of their
own: a block of memory (``carried``) the step loads at its start and stores at its end, which
also receives the values code after the loop uses. The loop's other inputs that are not
pointers travel in a second block (``inputs``; reverse mode passes derivatives between steps
through memory only), pointers as the step's arguments. Both are allocated on the heap, so that
they outlive a split pair's forward thunk. A snapshot is ``carried`` and every piece of
memory the body writes (found with :func:`~pyzyme.analysis.overwrite.written_pointers`):
contiguous array arguments (their extents are the frontend's facts) and stack slots; memory
it only reads is not copied. The schedule is Revolve's (:mod:`pyzyme.transforms.revolve`),
its snapshots as many as the budget allows once the sizes are known, at run time.

Before the loop, the rewritten function checks that one iteration fits what the loops before
it left of the budget (the driver's two states, one snapshot and the step derivative's
reserve; :mod:`pyzyme.transforms.checkpoint_budget` shares it at run time) and otherwise
returns Numba's status -1 with :class:`~pyzyme.TapeBudgetError` set, naming the loop and the
bytes one iteration needs. A loop that cannot be checkpointed (its exit is not its latch, its state
holds pointers, it writes memory whose size is not known) raises
:class:`~pyzyme.UnsupportedError` naming it: never a tape over the budget, silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme import naming
from pyzyme.analysis.cfg import dominators, error_only_blocks, reverse_post_order
from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.loops import analyze_loops, runs_at_most_twice
from pyzyme.analysis.overwrite import underlying_object, underlying_objects, written_pointers
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir.builder import resolve_later_operands
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Argument, Constant, ConstantInt, GlobalVariable, const_int
from pyzyme.transforms import revolve
from pyzyme.transforms.checkpoint_chunks import (chunk_ir, chunk_range, iteration_tape,
                                                kept_beside, tape_states, trip_count)
from pyzyme.transforms.checkpoint_budget import (check_fits, free_counter, give_back_unused,
                                                 iteration_need, need_parts, take_share)
from pyzyme.transforms.checkpoint_merges import (allocated_extent, merge_operands,
                                                 merged_size, roots)
from pyzyme.transforms.checkpoint_state import CarriedLayout
from pyzyme.transforms.parallel_body import argument_slots, launch_row

__all__ = ["checkpoint_loops", "Checkpointed", "RESERVE"]

#: States of memory reserved for what one step's derivative keeps (its own tape: the values
#: of an iteration that its reverse pass needs; a stencil overwriting its 1-double state in
#: place keeps 1 double a cell, where it kept 3 before only the sum its coefficient's adjoint
#: reads was taped: 3 stays as a margin for bodies that keep more). At least that: a loop nest
#: whose inner loops' trip counts are known before it, or a loop allocating blocks whose
#: sizes are, reserves what an iteration keeps (checkpoint_chunks.iteration_tape); a body
#: calling functions with tapes of their own keeps an amount this does not bound.
RESERVE = 3


@dataclass
class Checkpointed:
    """One loop rewritten: where it is, and the bytes of a snapshot that do not depend on
    sizes known only at run time (``carried``)."""

    where: str
    carried: int
    regions: int

    def __str__(self) -> str:
        return (f"{self.where}: checkpointed (Revolve), a snapshot holds {self.carried} bytes "
                f"of carried values and {self.regions} region(s) of memory the loop writes")


def _i64(n: int):
    return const_int(T.i64, n)


def checkpoint_loops(module, fn, budget: int, extents: dict, where,
                     growth: dict | None = None, stable: bool = True,
                     tangents: int = 0) -> list[Checkpointed]:
    """Rewrite the outermost counted loops of ``fn`` (which returns Numba's i32 status) into
    checkpointed loops under ``budget`` bytes. ``extents`` maps a parameter index to the
    indices of the parameters (or constants) whose product is its bytes (contiguous
    arrays); ``where(k)``
    names the k-th of ``total`` such loops (its Python line), as ``where(k, total)``.

    ``growth`` (None: unknown, every loop is checkpointed) maps a loop's header name to how the
    unbudgeted derivative's tape grows with it: ``(bytes an iteration caches, whether loops
    inside it cache too)``. A loop whose tape does not grow is left alone; one whose
    iterations cache a known number of bytes keeps its plain (taped) form too, run when its
    trip count times that stays within half the budget and its share of what is free (at run time:
    :mod:`pyzyme.transforms.checkpoint_budget`).
    ``stable``: the arguments' memory does not change between the sweeps (false in split
    mode). ``tangents``: the directions forward mode will carry through the derivative (1
    under hvp), each holding a copy of what the snapshots, the tape and the state hold
    (:mod:`pyzyme.diff.calls.checkpoint_tangents`)."""
    doms = dominators(fn)
    info = analyze_loops(fn, doms)
    order = {blk: k for k, blk in enumerate(reverse_post_order(fn))}  # the order they run in
    # A loop of at most two iterations (Numba's over a 2-D array's dimensions) keeps no
    # tape that grows: it is no time loop, whatever its shape.
    loops = [lp for lp in sorted(info.top, key=lambda lp: order.get(lp.header, 0))
             if _worth(lp) and not runs_at_most_twice(lp, doms)]
    plans = []
    for k, loop in enumerate(loops):
        own, nested, inner = (growth or {}).get(loop.header.name, (0, False, ())) \
            if growth is not None else (None, True, None)
        allocations, calls = kept_beside(loop)
        if own == 0 and not (nested or allocations or calls):
            continue  # the unbudgeted tape does not grow with this loop
        # a loop nest, or one that allocates: what an iteration keeps, from its inner loops'
        # trip counts and its allocations' sizes at run time
        inside = (own, inner if nested else (), allocations) \
            if (nested or allocations) and not calls and own is not None \
            and (inner is not None or not nested) else None
        plans.append((k, loop, None if nested or allocations or calls else own, inside))
    done = []
    # Their snapshots are all held at once: each takes its share at run time.
    counter = free_counter(fn, budget) if plans else None
    for j, (k, loop, own, inside) in enumerate(plans):
        rewrite = _Rewrite(module, fn, loop, extents, where(k, len(loops)))
        rewrite.stable, rewrite.copies = stable, 1 + tangents
        rewrite.counter, rewrite.first = counter, j == 0
        later = [plan[2] for plan in plans[j + 1:]]
        rewrite.left = 1 + len(later)
        rewrite.after = (sum(own is None for own in later), sum(own is not None for own in later))
        rewrite.nest = inside
        done.append(rewrite.run(budget, own))
    return done


def _worth(loop) -> bool:
    """A loop whose tape can grow with its trip count: it computes floats or writes memory."""
    for block in loop.blocks:
        for inst in block.instructions:
            if inst.type.is_float:  # vectors of floats too
                return True
            if written_pointers(inst):
                return True
    return False


class _Rewrite:
    chunks = True  # whether a counted loop's steps may be chunks of iterations
    def __init__(self, module, fn, loop, extents: dict, where: str) -> None:
        self.module, self.fn, self.loop, self.extents = module, fn, loop, extents
        self.where = where
        self.blocks = set(loop.blocks)
        self.opaque: set = set()   # pointers whose memory is no state (reference counts)
        self.offsets: list = []    # live-in pointers the step computes again (run)
        self.own: list = []        # stack slots each step has its own of (run)
        self.own_inits: list = []  # the constants stored into them before the loop
        self.error_targets: list = []  # exits into code that only raises (check_shape)
        self.error_edges: list = []    # (exiting block, target) into those (check_shape)
        self.break_edges: list = []    # the other edges out but the test's (check_shape)
        self.exit_edges: list = []     # both, each a code of its own
        self.copies = 1            # of each state: the values, then each direction's tangents
        self.counter = None        # the budget still free in this call (checkpoint_budget)
        self.left, self.first = 1, True  # loops still to come, this one too; the first?
        self.after = (0, 0)        # later loops always checkpointed, and that may run plain
        self.nest = None           # (own bytes, inner loops', allocations): iteration_tape

    def refuse(self, why: str, hint: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where}: this loop cannot be checkpointed under "
                                f"tape_budget: it {why}", hint=hint)

    # -- what the loop is made of -----------------------------------------------------------

    def inside(self, v) -> bool:
        return isinstance(v, I.Instruction) and v.parent in self.blocks

    # -- what the loop is made of -----------------------------------------------------------
    def check_shape(self):
        loop = self.loop
        latch = loop.latches[0] if len(loop.latches) == 1 else None
        count = loop.trip_count
        # Exits into code that only raises (Numba's exception paths: a division by zero, an
        # index out of bounds) end the computation: a step taking one records which and
        # does nothing more, and the code after the loop takes it there.
        failing = error_only_blocks(self.fn, True)
        self.error_targets = [b for b in loop.exits if b in failing]
        ends = [s for s in (latch.successors if latch is not None else ())
                if s not in self.blocks]
        if latch is None or loop.preheader is None or len(ends) != 1 or ends[0] in failing:
            raise self.refuse("does not end at its test (its last block leaves it only by "
                              "a break or a return)",
                              hint="write it so that its test ends it (for t in range(n), "
                                   "or while cond:), with a break inside if need be; or "
                                   "build without tape_budget")
        # Each edge into an exception exit, and each other way out (a break, a return), is
        # a code of its own: the code after the loop takes the edge the step took, so the
        # phis where it leads get that edge's value.
        self.error_edges = [(e, target) for target in self.error_targets
                            for e in dict.fromkeys(target.predecessors) if e in self.blocks]
        self.break_edges = [(e, target) for e in loop.exiting if e is not latch
                            for target in dict.fromkeys(e.successors)
                            if target not in self.blocks and target not in failing]
        self.exit_edges = self.error_edges + self.break_edges
        self.exit_block = ends[0]
        if count is not None and (count.exiting is not latch or self.break_edges):
            count = None  # a while loop (its steps known at its end): the online schedule
        if not isinstance(latch.terminator, I.Branch):
            raise self.refuse("ends in a switch", hint="build without tape_budget")
        self.latch, self.count = latch, count
        self.phis = [p for p in loop.header.instructions if isinstance(p, I.Phi)]

    def exit_outs(self, outs: list) -> dict:
        """For each edge out of the loop but its test's, the values of the loop that code
        after it may use (after an exception exit: a parallel region's report of its thread
        count, a message's arguments): the step taking it stores them as it stores the
        values code after the loop uses."""
        if not self.exit_edges:
            return {}
        failing = error_only_blocks(self.fn, True)
        raising = [v for v in outs if any(isinstance(u, I.Instruction) and not self.inside(u)
                                          and u.parent in failing for u in v.users)]
        dom = dominators(self.fn)
        found = {edge: [v for v in raising if dom.dominates(v.parent, edge[0])]
                 for edge in self.error_edges}
        found.update({edge: [v for v in outs if dom.dominates(v.parent, edge[0])]
                      for edge in self.break_edges})
        return {edge: values for edge, values in found.items() if values}

    def live_ins(self) -> list:
        found = []
        for block in [b for b in self.fn.blocks if b in self.blocks]:
            for inst in block.instructions:
                if inst in self.phis:
                    continue
                for op in inst.operands:
                    if (isinstance(op, Argument) or (isinstance(op, I.Instruction)
                                                     and not self.inside(op))) \
                            and op not in found:
                        found.append(op)
        return found

    def live_outs(self) -> list:
        return [inst for block in [b for b in self.fn.blocks if b in self.blocks]
                for inst in block.instructions
                if inst.has_result and any(isinstance(u, I.Instruction) and not self.inside(u)
                                           for u in inst.users)]

    def regions(self, stable: bool) -> list:
        """``(object, extent)`` for each object the loop writes, and each it reads that may
        change before the reverse sweep recomputes its steps (written after the loop by this
        function; with ``stable`` false, any: a split pair's caller may change it between
        the thunks): extent a tuple of values whose product is its bytes."""
        found: dict = {}
        dom, entered = dominators(self.fn), self.loop.preheader

        def available(v) -> bool:  # defined where the checkpoint driver is called
            return not isinstance(v, I.Instruction) or dom.dominates(v.parent, entered)

        def add(pointer, inst) -> None:
            # Through phis: arrays swapped from one iteration to the next (v, w = w, v) are
            # each a region; the carried pointers say which is which. A merge before the
            # loop of an object made on some paths only is one (checkpoint_merges).
            objects = roots(pointer, self.inside, available)
            if objects is None:
                objects = [underlying_object(pointer)]
            for obj in objects:
                if not available(obj) and not self.inside(obj):
                    raise self.refuse(f"reads or writes memory ({obj.ref}) made after its "
                                      f"start on some paths only",
                                      hint="build without tape_budget")
                if obj in found or (isinstance(obj, I.Instruction) and self.inside(obj)):
                    continue  # memory the iteration makes for itself
                if (obj is self.fn.args[1] and len(self.fn.args) > 1) or obj in self.opaque \
                        or obj in self.own:
                    continue  # Numba's exception record (written only when raising), handles
                if isinstance(obj, GlobalVariable) and obj.is_constant:
                    continue  # never changes
                if merge_operands(obj) is not None and not self.inside(obj):
                    found[obj] = (merged_size(obj, lambda o, b: self.bytes(b, o, inst),
                                              lambda why: self.refuse(why, hint="build "
                                                                      "without tape_budget")),)
                else:
                    found[obj] = self.extent(obj, inst)

        for block in self.loop.blocks:
            for inst in block.instructions:
                pointers = self.written(inst)
                if pointers is None:
                    raise self.refuse("launches a parallel loop whose arguments pyzyme cannot "
                                      "follow", hint="build without tape_budget")
                for pointer in pointers:
                    add(pointer, inst)
        changed = None if not stable else self.written_elsewhere()
        for block in self.loop.blocks:
            for inst in block.instructions:
                if not isinstance(inst, I.Load):
                    continue
                objects = underlying_objects(inst.pointer) or [underlying_object(inst.pointer)]
                if changed is None or any(o in changed for o in objects):
                    if any(not (isinstance(o, I.Instruction) and self.inside(o))
                           and o not in found for o in objects):
                        add(inst.pointer, inst)
        return list(found.items())

    def written(self, inst) -> list | None:
        """The pointers ``inst`` may write through: a parallel loop's launch, those its body
        is handed in its argument array (the arrays of a ``prange``), and the arrays it
        hands over; None where those cannot be told."""
        row = launch_row(inst)
        if row is None:
            return written_pointers(inst)
        args = inst.args[row.args]
        slots = argument_slots(args, inst)
        if slots is None:
            return None
        stored = [use.operands[0] for uses in slots.values() for use in uses
                  if isinstance(use, I.Store) and use.operands[0].type.is_pointer]
        return [args, inst.args[row.dims], inst.args[row.steps]] + stored

    def launch_arrays(self) -> list:
        """The stack slots used nowhere but in the loop that are the argument, dimension and
        step arrays of a parallel loop launched in it, or whose lifetime starts in it: each
        step gets its own (the derivative of a launch follows what its own function stores
        into them), filled by the step as the loop's iteration filled them."""
        own: list = []
        for block in self.loop.blocks:
            for inst in block.instructions:
                row = launch_row(inst)
                callee = inst.called_function if isinstance(inst, I.CallBase) else None
                if callee is not None and callee.name.startswith("llvm.lifetime.start"):
                    found = [inst.args[-1]]
                elif row is not None:
                    found = [inst.args[pos] for pos in (row.args, row.dims, row.steps)]
                else:
                    continue
                for obj in found:
                    if self.inside(obj) or obj in own:
                        continue
                    if isinstance(obj, I.Alloca) and self.used_only_inside(obj):
                        own.append(obj)
                    elif row is not None:
                        raise self.refuse(
                            "launches a parallel loop (a prange) whose argument arrays code "
                            "outside the loop uses too: its steps cannot each fill their own",
                            hint="write that loop with range instead of numba.prange, or "
                                 "build without tape_budget")
        return own

    def used_only_inside(self, obj) -> bool:
        """Whether the loop's code is all that uses stack slot ``obj`` (outside it: constant
        offsets into it, used only inside, its lifetime's markers, and constants stored at
        its start, which the step's own slot gets too: :attr:`own_inits`)."""
        inits = []
        work = [obj]
        while work:
            v = work.pop()
            for u in v.users:
                if not isinstance(u, I.Instruction) or self.inside(u):
                    continue
                if isinstance(u, I.GetElementPtr) and u.operands[0] is v and all(
                        isinstance(op, ConstantInt) for op in u.operands[1:]):
                    work.append(u)
                elif isinstance(u, I.Store) and v is obj and u.operands[1] is obj \
                        and isinstance(u.operands[0], Constant):
                    inits.append(u)
                elif not (isinstance(u, I.CallBase) and u.called_function is not None
                          and u.called_function.name.startswith("llvm.lifetime")):
                    return False
        self.own_inits += inits
        return True

    def address_offsets(self, ins: list) -> list:
        """The pointers among ``ins`` that are constant offsets into others (the slots of a
        parallel loop's argument array): the step computes them again from their bases, so
        that what it stores through them is seen stored into the base (its argument array,
        which the derivative of the launch reads slot by slot), in the order to compute
        them."""
        out: list = []

        def visit(v) -> None:
            if v in out or not isinstance(v, I.GetElementPtr) or self.inside(v) \
                    or not all(isinstance(op, ConstantInt) for op in v.operands[1:]):
                return
            visit(v.operands[0])
            out.append(v)
        for v in ins:
            visit(v)
        return out

    def written_elsewhere(self):
        """The objects code outside the loop writes (None: some it writes cannot be told)."""
        out: set = set()
        for block in self.fn.blocks:
            if block in self.blocks:
                continue
            for inst in block.instructions:
                pointers = self.written(inst)  # a prange's arrays too
                if pointers is None:
                    return None
                for pointer in pointers:
                    if underlying_object(pointer) is self.fn.args[0] and \
                            isinstance(inst, I.Store):
                        continue  # the result slot, which the loop does not read
                    objects = underlying_objects(pointer)
                    if objects is None:
                        return None
                    out.update(objects)
        return out

    def extent(self, obj, inst) -> tuple:
        if isinstance(obj, Argument) and obj.index in self.extents:
            return tuple(self.fn.args[i] if isinstance(i, int) else i
                         for i in self.extents[obj.index])
        if isinstance(obj, I.Alloca) and (obj.count is None or isinstance(obj.count,
                                                                          ConstantInt)):
            n = obj.count.value if obj.count is not None else 1
            return (_i64(sizeof(obj.allocated_type) * n),)
        found = allocated_extent(obj)
        if found is not None:
            return found
        if isinstance(obj, GlobalVariable) and obj.value_type is not None \
                and not obj.is_declaration:
            return (_i64(sizeof(obj.value_type)),)
        raise self.refuse(f"writes memory whose size pyzyme does not know ({inst.opcode} "
                          f"through {obj.ref if hasattr(obj, 'ref') else obj!r}: not a "
                          f"contiguous array argument)",
                          hint="pass the arrays the loop updates as contiguous arguments")

    def bytes(self, b: IRBuilder, obj, inst):
        """An i64 of the bytes of ``obj`` (:meth:`extent`), built with ``b``."""
        size = _i64(1)
        for e in self.extent(obj, inst):
            size = b.mul(size, e if e.type == T.i64 else b.sext(e, T.i64))
        return size

    # -- the rewrite -----------------------------------------------------------------------
    def pointer_bases(self, outs: list) -> list:
        """The objects the carried pointers (header phis, values used after the loop) point
        into, each made before the loop: a carried pointer travels as (which of them, byte
        offset), two integers, so that each step rebuilds it (and the derivative its shadow)
        from a base it is passed, never from a pointer kept in memory, whose shadow no
        snapshot would bring back."""
        bases: list = []
        carried = [p for p in self.phis if p.type.is_pointer]
        values = [next(v for v, blk in p.incoming if blk is self.loop.preheader)
                  for p in carried]
        values += [next(v for v, blk in p.incoming if blk is self.latch) for p in carried]
        values += [v for v in outs if v.type.is_pointer]
        for v in values:
            obj = underlying_object(v)
            if obj in carried:
                continue
            if self.inside(obj):
                raise self.refuse("carries a pointer it makes inside the loop",
                                  hint="index the arrays the loop uses instead")
            if obj not in bases:
                bases.append(obj)
        return bases

    def run(self, budget: int, taped: int | None = None) -> Checkpointed:
        """Rewrite the loop; with ``taped`` (the bytes its plain derivative caches an
        iteration, for a counted loop), keep the plain loop for trip counts that keep that
        within half the budget and its share of what is free."""
        self.check_shape()
        self.own = self.launch_arrays()
        ins, outs, regions = self.live_ins(), self.live_outs(), self.regions(self.stable)
        self.bases = self.pointer_bases(outs)
        self.offsets = self.address_offsets(ins)
        made = set(self.offsets) | set(self.own)   # the step makes these itself
        pointers = [v for v in ins if v.type.is_pointer and v not in made]
        pointers += [g.operands[0] for g in self.offsets
                     if g.operands[0] not in made and g.operands[0] not in pointers]
        pointers += [v for v in self.bases if v not in pointers]
        values = [v for v in ins if not v.type.is_pointer]
        layout = CarriedLayout(self.phis, outs, bool(self.exit_edges))
        self.raised = self.exit_outs(outs)
        # A counted loop's steps are chunks of iterations where it carries no pointer (a
        # chunk carries its values in phis: a pointer's base could change on the way).
        self.chunked = self.chunks and self.count is not None and not any(
            p.type.is_pointer for p in self.phis)
        inputs_ty = T.StructType([v.type for v in values] + [T.i64] * (2 * self.chunked)
                                 or [T.i64])
        step = self.step(layout, inputs_ty, pointers, values, outs)

        fn = self.fn
        # Values an exception exit uses come out of the checkpointed loop only (a plain loop
        # kept beside it would need them merged on the way to the exception).
        keep = taped is not None and self.count is not None and not self.raised \
            and self.counter is not None
        block = fn.append_block(fn.unique_name("ckpt.loop"))
        b = IRBuilder(block)
        if keep:  # choose, before the loop, between the plain loop and the checkpoints
            choose = fn.append_block(fn.unique_name("ckpt.choose"))
            self.loop.preheader.terminator.replace_uses_of(self.loop.header, choose)
            for p in self.phis:
                p.blocks = [choose if blk is self.loop.preheader else blk for blk in p.blocks]
            cb = IRBuilder(choose)
            n = self.trip_count(cb)
            # Plain where its tape (the unbudgeted derivative's estimate) fits its share of
            # what is free and half the budget; it then takes it.
            tape = cb.mul(n, _i64(max(taped, 1) * self.copies))
            free = cb.load(T.i64, self.counter)
            small = cb.and_(cb.icmp("ule", tape, cb.sdiv(free, _i64(self.left))),
                            cb.icmp("ule", tape, _i64(budget // 2)), name="ckpt.taped.fits")
            cb.store(cb.sub(free, cb.select(small, tape, _i64(0))), self.counter)
            cb.cbranch(small, self.loop.header, block)
        else:
            self.loop.preheader.terminator.replace_uses_of(self.loop.header, block)
            n = self.trip_count(b) if self.count is not None else _i64(-1)
        sizes = [_i64(sizeof(layout.type))]
        for obj, extent in regions:
            size = _i64(1)
            for e in extent:
                size = b.mul(size, e if e.type == T.i64 else b.sext(e, T.i64))
            sizes.append(size)
        total = _i64(0)
        for size in sizes:
            total = b.add(total, size)
        # what one iteration's derivative tapes (its tangents' too), where known
        per = _i64((taped or 0) * self.copies)
        nest = iteration_tape(b, self.loop, *self.nest) if self.nest is not None else None
        if nest is not None:
            per = b.mul(nest, _i64(self.copies), name="ckpt.iteration.tape")
        need = iteration_need(b, total, self.copies, RESERVE, per if nest is not None else None)
        counter = self.counter  # None: a checkpointed call's (checkpoint_calls)
        free = _i64(budget) if counter is None else b.load(T.i64, counter)
        b = check_fits(self.module, fn, b, need, free, self.where,
                       need_parts(self.copies, RESERVE, nest is not None), self.first)
        share = free if counter is None else take_share(b, counter, need, *self.after)
        state = b.mul(total, _i64(self.copies))
        chunk, reserve, steps = _i64(1), _i64(RESERVE), n
        if self.chunked:  # the scheme's steps are chunks of iterations (checkpoint_chunks)
            chunk, reserve, steps = chunk_ir(b, share, state, per, n, RESERVE)
        elif nest is not None:  # steps of one iteration: the states its tape takes
            reserve = tape_states(b, state, per, RESERVE)
        data = IRBuilder()
        data.position_before(counter or fn.blocks[0].instructions[0])
        data = data.alloca(T.ArrayType(3, T.i64), name="ckpt.data")
        for k, v in enumerate((share, reserve, chunk)):
            b.store(v, b.gep(T.i64, data, [_i64(k)]))
        # On the heap, not the stack: in split mode the reverse thunk runs after the forward
        # thunk's frame is gone (the derivative frees them after its reverse sweep).
        malloc = self.module.declare("malloc", T.FunctionType(T.ptr, [T.i64]))
        carried = b.call(malloc, [_i64(sizeof(layout.type))], name="ckpt.carried")
        inputs = b.call(malloc, [_i64(sizeof(inputs_ty))], name="ckpt.inputs")
        entered = choose if keep else self.loop.preheader
        for p in self.phis:
            init = next(v for v, blk in p.incoming if blk is entered)
            layout.put(b, carried, ("phi", p), init,
                       lambda bb, x: self.encode(bb, x, x, {}, self.bases))
        for k, v in enumerate(values + ([chunk, n] if self.chunked else [])):
            b.store(v, b.gep(inputs_ty, inputs, [_i64(0), const_int(T.i32, k)]))
        if self.exit_edges:
            b.store(const_int(T.i32, 0), layout.failed(b, carried))
        pairs = list(zip([carried] + [obj for obj, _ in regions], sizes))
        scheme = revolve.scheme(self.module)
        loop_fn = self.module.declare(
            naming.CHECKPOINT_FOR if self.count is not None else naming.CHECKPOINT_WHILE,
            T.FunctionType(T.void, [T.ptr], var_arg=True))
        b.call(loop_fn, [step, _i64(0), steps, scheme, data, _i64(len(pairs))]
               + [v for pair in pairs for v in pair] + [carried, inputs] + pointers)
        if counter is not None:
            give_back_unused(b, counter, share, state, steps, reserve, chunk)
        loaded = {v: layout.get(b, carried, ("out", v), self.bases)[0] for v in outs}
        failed = b.load(T.i32, layout.failed(b, carried)) if self.exit_edges else None
        free = self.module.declare("free", T.FunctionType(T.void, [T.ptr]))
        b.call(free, [carried])
        b.call(free, [inputs])
        if failed is not None:
            b = self.dispatch_failures(b, failed, keep, loaded)
        exit_block, last = self.exit_block, b.block
        b.br(exit_block)
        if keep:
            self.merge_exit(exit_block, last, loaded)
        else:
            for inst in exit_block.instructions:
                if isinstance(inst, I.Phi):
                    inst.blocks = [last if blk is self.latch else blk for blk in inst.blocks]
            for v, new in loaded.items():
                for u in list(v.users):
                    if isinstance(u, I.Instruction) and not self.inside(u) \
                            and u.parent is not None:
                        u.replace_uses_of(v, new)
            fn.remove_blocks([blk for blk in fn.blocks if blk in self.blocks])
        return Checkpointed(self.where, sizeof(layout.type), len(regions))

    def dispatch_failures(self, b: IRBuilder, failed, keep: bool, loaded: dict) -> IRBuilder:
        """Where a step took an edge out of the loop other than its test's (into an
        exception exit, a break), on to where it leads, through a block of that edge's own
        (the phis there get the value they had on it: one of the loop's, ``loaded`` after
        it); the builder for the rest (the loop ended at its test)."""
        fn = self.fn
        ok = fn.append_block(fn.unique_name("ckpt.ok"))
        edges = []
        for k, (exiting, target) in enumerate(self.exit_edges):
            edge = fn.append_block(fn.unique_name(f"ckpt.raise.{k + 1}"))
            IRBuilder(edge).br(target)
            edges.append(edge)
        b.switch(failed, ok, [(const_int(T.i32, k + 1), edge) for k, edge in enumerate(edges)])
        for target in dict.fromkeys(t for _, t in self.exit_edges):
            for phi in [i for i in target.instructions if isinstance(i, I.Phi)]:
                values = {blk: v for v, blk in phi.incoming}
                if not keep:  # the loop's blocks go (its test's edge: see run)
                    kept = [(v, blk) for v, blk in phi.incoming
                            if blk not in self.blocks or blk is self.latch]
                    phi._unlink_operands()
                    phi.operands, phi.blocks = [], []
                    for v, blk in kept:
                        phi.add_incoming(v, blk)
                for (exiting, t), edge in zip(self.exit_edges, edges):
                    if t is target:
                        value = values[exiting]
                        phi.add_incoming(loaded.get(value, value), edge)
        return IRBuilder(ok)

    def merge_exit(self, exit_block, last, loaded: dict) -> None:
        """The exit reached from the plain loop (its latch) and from the checkpointed one
        (``last``): its phis get the checkpointed loop's values, and a value of the loop used
        after it otherwise gets a phi of its own there."""
        phis = [i for i in exit_block.instructions if isinstance(i, I.Phi)]
        for phi in phis:
            value = next(v for v, blk in phi.incoming if blk is self.latch)
            phi.add_incoming(loaded.get(value, value), last)
        for v, new in loaded.items():
            users = [u for u in v.users if isinstance(u, I.Instruction) and not self.inside(u)
                     and u.parent is not None and u not in phis]
            if not users:
                continue
            merged = I.Phi(v.type)
            exit_block.insert(0, merged)
            merged.name = self.fn.unique_name(f"{v.name or 'ckpt'}.merged")
            merged.add_incoming(v, self.latch)
            merged.add_incoming(new, last)
            for u in users:
                u.replace_uses_of(v, merged)

    def encode(self, b: IRBuilder, value, here, known: dict, bases: list) -> tuple:
        """(which base, byte offset) of pointer ``value`` of the loop's code, ``here`` where
        ``b`` is; ``known`` maps a carried pointer phi to its (pointer, which, offset) there,
        ``bases`` are the bases there."""
        obj = underlying_object(value)
        if obj in known:
            at, which, offset = known[obj]
            delta = b.sub(b.ptrtoint(here, T.i64), b.ptrtoint(at, T.i64))
            # An index computed, not an integer moved from memory (which reverse mode would
            # have to prove holds no float bits).
            return b.add(which, _i64(0)), b.add(offset, delta)
        k = self.bases.index(obj)
        return _i64(k), b.sub(b.ptrtoint(here, T.i64), b.ptrtoint(bases[k], T.i64))

    def trip_count(self, b: IRBuilder):
        return trip_count(b, self.count, self.refuse)

    def step(self, layout, inputs_ty, pointers: list, values: list, outs: list):
        """``void step(i64 k, ptr carried, ptr inputs, pointers...)``: one iteration, or
        (``chunked``) the iterations of chunk ``k``; a while loop's returns an i32, nonzero to
        go on."""
        module = self.module
        params = [T.i64, T.ptr, T.ptr] + [p.type for p in pointers]
        ret = T.void if self.count is not None else T.i32
        step = module.add_function(
            module.unique_global_name(naming.checkpoint_step(self.fn.name)),
            T.FunctionType(ret, params), prefix="internal")
        _, carried, inputs, *args = step.args
        step.args[0].name, carried.name, inputs.name = "k", "carried", "inputs"
        for k, a in enumerate(args):
            a.name = f"p{k}"
        entry = step.append_block("entry")
        b = IRBuilder(entry)
        mapping: dict = dict(zip(pointers, args))
        for a in self.own:
            mapping[a] = b.insert_copy(a, mapping, debug=False)
        for store in self.own_inits:
            b.insert_copy(store, mapping, debug=False)
        for g in self.offsets:
            mapping[g] = b.insert_copy(g, mapping, debug=False)
        bases = [mapping[v] for v in self.bases]
        known: dict = {}
        for p in self.phis:
            value, which, offset = layout.get(b, carried, ("phi", p), bases)
            mapping[p] = value
            if p.type.is_pointer:
                known[p] = (value, which, offset)
        for k, v in enumerate(values):
            mapping[v] = b.load(v.type, b.gep(inputs_ty, inputs,
                                              [_i64(0), const_int(T.i32, k)]), name=v.name)
        order = [blk for blk in self.fn.blocks if blk in self.blocks]
        for block in order:
            mapping[block] = step.append_block(block.name)
        if self.chunked:  # the iterations of chunk k, the carried values in phis
            chunk, n = (b.load(T.i64, b.gep(inputs_ty, inputs, [_i64(0), const_int(
                T.i32, len(values) + j)])) for j in (0, 1))
            count = chunk_range(b, step.args[0], chunk, n)
            hb = IRBuilder(mapping[self.loop.header])
            loaded = {p: mapping[p] for p in self.phis}
            j = hb.phi(T.i64, name="ckpt.j")
            for p in self.phis:
                mapping[p] = hb.phi(p.type, name=p.name)
        # A value made on the way to a break is used only after it: stored on its edge.
        latch_outs = [v for v in outs if dominators(self.fn).dominates(v.parent, self.latch)]
        if self.exit_edges:
            # A step after one that left other than by the test (an exception, a break) does
            # nothing; one leaving so records which edge it took.
            stop = step.append_block("ckpt.failed.before")
            failed = b.load(T.i32, layout.failed(b, carried), name="failed")
            b.cbranch(b.icmp("ne", failed, const_int(T.i32, 0)), stop,
                      mapping[self.loop.header])
            self.step_return(IRBuilder(stop))
            fails = {}
            for k, edge in enumerate(self.exit_edges):
                fail = fails[edge] = step.append_block(f"ckpt.failed.{k + 1}")
                fb = IRBuilder(fail)
                fb.store(const_int(T.i32, k + 1), layout.failed(fb, carried))
        else:
            b.br(mapping[self.loop.header])
        if self.chunked:
            j.add_incoming(_i64(0), b.block)
            for p in self.phis:
                mapping[p].add_incoming(loaded[p], b.block)

        def encode(bb, x):
            return self.encode(bb, x, mapping.get(x, x), known, bases)

        for block in order:
            bb = IRBuilder(mapping[block])
            for exiting, target in self.exit_edges:
                if exiting is block:  # its branch there goes to that edge's block
                    mapping[target] = fails[(exiting, target)]
            for inst in block.instructions:
                if inst in self.phis:
                    continue
                if inst is block.terminator and block is self.latch:
                    if self.chunked:  # on to the chunk's next iteration, or out
                        j1, done = bb.add(j, _i64(1)), step.append_block("ckpt.chunk.done")
                        bb.cbranch(bb.icmp("slt", j1, count), mapping[self.loop.header], done)
                        j.add_incoming(j1, bb.block)
                        for p in self.phis:
                            nxt = next(v for v, blk in p.incoming if blk is self.latch)
                            mapping[p].add_incoming(mapping.get(nxt, nxt), bb.block)
                        bb = IRBuilder(done)
                    for p in self.phis:
                        nxt = next(v for v, blk in p.incoming if blk is self.latch)
                        layout.put(bb, carried, ("phi", p), nxt if nxt.type.is_pointer
                                   else mapping.get(nxt, nxt), encode)
                    for v in latch_outs:
                        layout.put(bb, carried, ("out", v), v if v.type.is_pointer
                                   else mapping.get(v, v), encode)
                    if self.count is not None:
                        bb.ret_void()
                        continue
                    term = inst
                    cond = mapping.get(term.operands[0], term.operands[0])
                    if term.successors[0] is not self.loop.header:
                        cond = bb.xor(cond, const_int(T.i1, 1))
                    bb.ret(bb.zext(cond, T.i32))
                    continue
                mapping[inst] = bb.insert_copy(inst, mapping, debug=False)
        for edge in self.exit_edges:  # past the copy: the values code after it uses
            fb = IRBuilder(fails[edge])
            for v in self.raised.get(edge, ()):
                layout.put(fb, carried, ("out", v), v if v.type.is_pointer
                           else mapping.get(v, v), encode)
            self.step_return(fb)
        resolve_later_operands(step.instructions(), mapping)
        return step


    def step_return(self, b: IRBuilder) -> None:
        """A step's return that stops the loop (a while loop's false; a counted loop's
        steps return nothing)."""
        if self.count is not None:
            b.ret_void()
        else:
            b.ret(const_int(T.i32, 0))
