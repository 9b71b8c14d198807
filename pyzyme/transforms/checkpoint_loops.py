"""The outermost counted loops of an optimized function, turned into checkpointed loops.

Under a tape budget (``Options.tape_budget``) the reverse sweep must not keep what every
iteration of a long time loop needs. :func:`checkpoint_loops` rewrites each outermost loop
whose trip count is known at its entry into a call of the checkpointed-loop intrinsic
(:data:`pyzyme.naming.CHECKPOINT_FOR`, differentiated by :mod:`pyzyme.diff.calls.checkpoint`)
over a *step*: a function of its own running one iteration. Optimized SSA carries values from
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

Before the loop, the rewritten function checks that one iteration fits the budget (the
driver's two states, one snapshot and the step derivative's reserve) and otherwise returns
Numba's status -1 with :class:`~pyzyme.TapeBudgetError` set, naming the loop and the bytes
one iteration needs. A loop that cannot be checkpointed (its exit is not its latch, its state
holds pointers, it writes memory whose size is not known) raises
:class:`~pyzyme.UnsupportedError` naming it: never a tape over the budget, silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme import naming
from pyzyme.analysis.cfg import error_only_blocks, reverse_post_order
from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.loops import analyze_loops
from pyzyme.analysis.overwrite import underlying_object, underlying_objects, written_pointers
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir.builder import resolve_later_operands
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.rules import default_rules, spec
from pyzyme.ir.values import (Argument, ConstantAggregate, ConstantInt, GlobalVariable,
                              const_c_string, const_int)
from pyzyme.runtime.target import TAPE_BUDGET_ERROR_SYMBOL
from pyzyme.transforms import revolve

__all__ = ["checkpoint_loops", "Checkpointed", "RESERVE"]

#: States of memory reserved for what one step's derivative keeps (its own tape: the values
#: of an iteration that its reverse pass needs; a stencil overwriting its 1-double state in
#: place keeps 1 double a cell, where it kept 3 before only the sum its coefficient's adjoint
#: reads was taped: 3 stays as a margin for bodies that keep more).
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
                     growth: dict | None = None, stable: bool = True) -> list[Checkpointed]:
    """Rewrite the outermost counted loops of ``fn`` (which returns Numba's i32 status) into
    checkpointed loops under ``budget`` bytes. ``extents`` maps a parameter index to the
    indices of the parameters whose product is its bytes (contiguous arrays); ``where(k)``
    names the k-th of ``total`` such loops (its Python line), as ``where(k, total)``.

    ``growth`` (None: unknown, every loop is checkpointed) maps a loop's header name to how the
    unbudgeted derivative's tape grows with it: ``(bytes an iteration caches, whether loops
    inside it cache too)``. A loop whose tape does not grow is left alone; one whose
    iterations cache a known number of bytes keeps its plain (taped) form too, run when its
    trip count times that stays within its share of half the budget (decided at run time).
    ``stable``: the arguments' memory does not change between the sweeps (false in split
    mode)."""
    info = analyze_loops(fn)
    order = {blk: k for k, blk in enumerate(reverse_post_order(fn))}  # the order they run in
    loops = [lp for lp in sorted(info.top, key=lambda lp: order.get(lp.header, 0))
             if _worth(lp)]
    plans = []
    for k, loop in enumerate(loops):
        own, nested = (growth or {}).get(loop.header.name, (0, False)) if growth is not None \
            else (None, True)
        nested = nested or _keeps_more(loop)
        if own == 0 and not nested:
            continue  # the unbudgeted tape does not grow with this loop
        plans.append((k, loop, None if nested else own))
    # The loops that may run plain share half the budget: their tapes add up.
    plain = sum(1 for *_, own in plans if own is not None)
    done = []
    for k, loop, own in plans:
        rewrite = _Rewrite(module, fn, loop, extents, where(k, len(loops)))
        rewrite.stable = stable
        rewrite.plain_share = budget // (2 * max(plain, 1))
        done.append(rewrite.run(budget, own))
    return done
    return done


def _keeps_more(loop) -> bool:
    """Whether an iteration may keep memory its loop's tape does not show: a call of a
    function with a body (its derivative's tape, kept per iteration) or an allocation (its
    shadow, kept until the reverse sweep)."""
    for block in loop.blocks:
        for inst in block.instructions:
            callee = inst.called_function if isinstance(inst, I.CallBase) else None
            if callee is None or callee.name.startswith("llvm."):
                continue
            if not callee.is_declaration or isinstance(
                    default_rules().lookup(callee.name, "call"), spec.Allocation):
                return True
    return False


def _worth(loop) -> bool:
    """A loop whose tape can grow with its trip count: it computes floats or writes memory."""
    for block in loop.blocks:
        for inst in block.instructions:
            if inst.type.is_float:  # vectors of floats too
                return True
            if written_pointers(inst):
                return True
    return False


def _allocated_extent(obj):
    """The size arguments of the allocation ``obj`` is (``malloc``), or whose data it is (a
    Numba array made before the loop: ``load ptr (meminfo + data offset)``); else None."""
    base, offset = obj, None
    if isinstance(obj, I.Load) and obj.type.is_pointer:
        inner = obj.pointer
        base = underlying_object(inner)
        offset = 0
        if isinstance(inner, I.GetElementPtr) and len(inner.operands) == 2:
            offset = getattr(inner.operands[1], "value", None)
    callee = base.called_function if isinstance(base, I.CallBase) else None
    row = default_rules().lookup(callee.name, "call") if callee is not None else None
    if not isinstance(row, spec.Allocation) or not row.size_args:
        return None
    if offset != row.data_offset:
        return None
    return tuple(base.args[i] for i in row.size_args)


class _Rewrite:
    def __init__(self, module, fn, loop, extents: dict, where: str) -> None:
        self.module, self.fn, self.loop, self.extents = module, fn, loop, extents
        self.where = where
        self.blocks = set(loop.blocks)
        self.opaque: set = set()   # pointers whose memory is no state (reference counts)
        self.plain_share = 0       # the bytes of plain tape this loop may keep (run)

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
        normal = [b for b in loop.exits if b not in failing]
        if latch is None or loop.preheader is None or len(normal) != 1 \
                or normal[0] not in latch.successors \
                or any(s in normal for b in loop.exiting if b is not latch
                       for s in b.successors):
            raise self.refuse("leaves from more than one place (a break or a return)",
                              hint="write it so that only its test ends it (for t in range(n), "
                                   "or while cond:); or build without tape_budget")
        for target in self.error_targets:
            self.check_error_target(target)
        self.exit_block = normal[0]
        if count is not None and count.exiting is not latch:
            count = None  # a while loop, as far as the schedule is concerned
        if not isinstance(latch.terminator, I.Branch):
            raise self.refuse("ends in a switch", hint="build without tape_budget")
        self.latch, self.count = latch, count
        self.phis = [p for p in loop.header.instructions if isinstance(p, I.Phi)]

    def check_error_target(self, target) -> None:
        """The code after an exception exit must not need the loop's values."""
        for inst in target.instructions:
            if isinstance(inst, I.Phi):
                values = {v for v, blk in inst.incoming if blk in self.blocks}
                if len(values) > 1 or any(self.inside(v) for v in values):
                    break
            elif any(self.inside(op) for op in inst.operands):
                break
        else:
            return
        raise self.refuse("raises an exception made from values of its iterations",
                          hint="raise it with constant arguments, or build without "
                               "tape_budget")

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

        def add(pointer, inst) -> None:
            # Through phis: arrays swapped from one iteration to the next (v, w = w, v) are
            # each a region; the carried pointers say which is which.
            objects = underlying_objects(pointer)
            if objects is None:
                objects = [underlying_object(pointer)]
            for obj in objects:
                if obj in found or (isinstance(obj, I.Instruction) and self.inside(obj)):
                    continue  # memory the iteration makes for itself
                if (obj is self.fn.args[1] and len(self.fn.args) > 1) or obj in self.opaque:
                    continue  # Numba's exception record (written only when raising), handles
                if isinstance(obj, GlobalVariable) and obj.is_constant:
                    continue  # never changes
                found[obj] = self.extent(obj, inst)

        for block in self.loop.blocks:
            for inst in block.instructions:
                for pointer in written_pointers(inst):
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

    def written_elsewhere(self):
        """The objects code outside the loop writes (None: some it writes cannot be told)."""
        out: set = set()
        for block in self.fn.blocks:
            if block in self.blocks:
                continue
            for inst in block.instructions:
                for pointer in written_pointers(inst):
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
            return tuple(self.fn.args[i] for i in self.extents[obj.index])
        if isinstance(obj, I.Alloca) and (obj.count is None or isinstance(obj.count,
                                                                          ConstantInt)):
            n = obj.count.value if obj.count is not None else 1
            return (_i64(sizeof(obj.allocated_type) * n),)
        found = _allocated_extent(obj)
        if found is not None:
            return found
        if isinstance(obj, GlobalVariable) and obj.value_type is not None \
                and not obj.is_declaration:
            return (_i64(sizeof(obj.value_type)),)
        raise self.refuse(f"writes memory whose size pyzyme does not know ({inst.opcode} "
                          f"through {obj.ref if hasattr(obj, 'ref') else obj!r}: not a "
                          f"contiguous array argument)",
                          hint="pass the arrays the loop updates as contiguous arguments")

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
        within half the budget."""
        self.check_shape()
        ins, outs, regions = self.live_ins(), self.live_outs(), self.regions(self.stable)
        self.bases = self.pointer_bases(outs)
        pointers = [v for v in ins if v.type.is_pointer]
        pointers += [v for v in self.bases if v not in pointers]
        values = [v for v in ins if not v.type.is_pointer]
        layout = _Layout(self.phis, outs, bool(self.error_targets))
        inputs_ty = T.StructType([v.type for v in values] or [T.i64])
        step = self.step(layout, inputs_ty, pointers, values, outs)

        fn = self.fn
        keep = taped is not None and self.count is not None
        block = fn.append_block(fn.unique_name("ckpt.loop"))
        b = IRBuilder(block)
        if keep:  # choose, before the loop, between the plain loop and the checkpoints
            choose = fn.append_block(fn.unique_name("ckpt.choose"))
            self.loop.preheader.terminator.replace_uses_of(self.loop.header, choose)
            for p in self.phis:
                p.blocks = [choose if blk is self.loop.preheader else blk for blk in p.blocks]
            cb = IRBuilder(choose)
            n = self.trip_count(cb)
            small = cb.icmp("ule", cb.mul(n, _i64(max(taped, 1))), _i64(self.plain_share),
                            name="ckpt.taped.fits")
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
        b = self.budget_check(b, budget, total)
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
        for k, v in enumerate(values):
            b.store(v, b.gep(inputs_ty, inputs, [_i64(0), const_int(T.i32, k)]))
        if self.error_targets:
            b.store(const_int(T.i32, 0), layout.failed(b, carried))
        pairs = list(zip([carried] + [obj for obj, _ in regions], sizes))
        scheme = revolve.scheme(self.module)
        data = self.module.add_global(
            self.module.unique_global_name("pyzyme.revolve.data"), T.ArrayType(2, T.i64),
            ConstantAggregate(T.ArrayType(2, T.i64), [_i64(budget), _i64(RESERVE)]),
            is_constant=True, prefix="internal")
        loop_fn = self.module.declare(
            naming.CHECKPOINT_FOR if self.count is not None else naming.CHECKPOINT_WHILE,
            T.FunctionType(T.void, [T.ptr], var_arg=True))
        b.call(loop_fn, [step, _i64(0), n, scheme, data, _i64(len(pairs))]
               + [v for pair in pairs for v in pair] + [carried, inputs] + pointers)
        loaded = {v: layout.get(b, carried, ("out", v), self.bases)[0] for v in outs}
        failed = b.load(T.i32, layout.failed(b, carried)) if self.error_targets else None
        free = self.module.declare("free", T.FunctionType(T.void, [T.ptr]))
        b.call(free, [carried])
        b.call(free, [inputs])
        if failed is not None:
            b = self.dispatch_failures(b, failed, keep)
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

    def dispatch_failures(self, b: IRBuilder, failed, keep: bool) -> IRBuilder:
        """Where a step took an exception exit, on to the code that raises it; the builder
        for the rest (no step failed)."""
        fn = self.fn
        ok = fn.append_block(fn.unique_name("ckpt.ok"))
        here = b.block
        b.switch(failed, ok, [(const_int(T.i32, k + 1), target)
                              for k, target in enumerate(self.error_targets)])
        for target in self.error_targets:
            for phi in [i for i in target.instructions if isinstance(i, I.Phi)]:
                value = next(v for v, blk in phi.incoming if blk in self.blocks)
                if not keep:  # the loop's blocks go
                    kept = [(v, blk) for v, blk in phi.incoming if blk not in self.blocks]
                    phi._unlink_operands()
                    phi.operands, phi.blocks = [], []
                    for v, blk in kept:
                        phi.add_incoming(v, blk)
                phi.add_incoming(value, here)
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
        """The iterations of the rotated loop (at least one: it is entered)."""
        c = self.count
        start, bound, step = c.start, c.bound, c.step
        if start.type != T.i64:
            start, bound = b.sext(start, T.i64), b.sext(bound, T.i64)
        distance = b.sub(bound, start)
        pred = c.predicate
        extra = 1 - int(c.uses_next)
        if pred in ("sle", "ule", "sge", "uge"):
            if abs(step) != 1:
                raise self.refuse("counts with <= and a stride", hint="count with <")
            extra += 1
        if pred == "ne" or abs(step) == 1:
            runs = b.sdiv(distance, _i64(step)) if abs(step) != 1 else (
                distance if step == 1 else b.sub(_i64(0), distance))
        else:  # ceil(distance / step)
            adjust = step - 1 if step > 0 else step + 1
            runs = b.sdiv(b.add(distance, _i64(adjust)), _i64(step))
        runs = b.add(runs, _i64(extra))
        return b.select(b.icmp("slt", runs, _i64(1)), _i64(1), runs, name="ckpt.steps")

    def budget_check(self, b: IRBuilder, budget: int, total) -> IRBuilder:
        """Past the check that one iteration fits ``budget``: else TapeBudgetError."""
        fn = self.fn
        need = b.add(b.mul(total, _i64(3 + RESERVE)),
                     _i64(revolve.STATE_WORDS * 8 + revolve.SNAPSHOT_OVERHEAD),
                     name="ckpt.need")
        over = fn.append_block(fn.unique_name("ckpt.over"))
        ok = fn.append_block(fn.unique_name("ckpt.fits"))
        b.cbranch(b.icmp("ugt", need, _i64(budget)), over, ok)
        ob = IRBuilder(over)
        ob.call(self.raiser(), [self.message(), need, _i64(budget)])
        ob.ret(const_int(fn.function_type.ret, -1))
        return IRBuilder(ok)

    def message(self):
        """The error's format (``need`` and ``budget`` its two ``%lld``)."""
        module = self.module
        text = (f"{self.where.replace('%', '%%')}: one iteration of this checkpointed loop "
                f"needs %lld bytes (its state, {3 + RESERVE} times: the driver's two copies, "
                f"one snapshot, and {RESERVE} for the tape of the step's own derivative), more "
                f"than tape_budget (%lld bytes); raise tape_budget to at least that, or build "
                f"without it")
        return module.add_global(module.unique_global_name("pyzyme.ckpt.message"),
                                 T.ArrayType(len(text.encode()) + 1, T.i8),
                                 const_c_string(text), is_constant=True, prefix="private")

    def raiser(self):
        """``void raise(ptr format, i64 need, i64 budget)``: TapeBudgetError set as the
        Python error (the GIL taken for it)."""
        module = self.module
        fn = module.get_function(naming.CHECKPOINT_BUDGET_ERROR)
        if fn is not None:
            return fn
        fn = module.add_function(naming.CHECKPOINT_BUDGET_ERROR,
                                 T.FunctionType(T.void, [T.ptr, T.i64, T.i64]),
                                 prefix="internal", suffix="noinline cold")
        cls = module.get_global(TAPE_BUDGET_ERROR_SYMBOL) or module.add_global(
            TAPE_BUDGET_ERROR_SYMBOL, T.i8, None, prefix="external")
        b = IRBuilder(fn.append_block("entry"))
        gil = b.call(module.declare("PyGILState_Ensure", T.FunctionType(T.i32, [])), [])
        b.call(module.declare("PyErr_Format",
                              T.FunctionType(T.ptr, [T.ptr, T.ptr], var_arg=True)),
               [cls, *fn.args])
        b.call(module.declare("PyGILState_Release", T.FunctionType(T.void, [T.i32])), [gil])
        b.ret_void()
        return fn

    def step(self, layout, inputs_ty, pointers: list, values: list, outs: list):
        """``void step(i64 k, ptr carried, ptr inputs, pointers...)``: one iteration; a while
        loop's returns an i32, nonzero to go on."""
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
        if self.error_targets:
            # A step after one that took an exception exit does nothing (a while loop's
            # stops the loop); one taking such an exit records which.
            stop = step.append_block("ckpt.failed.before")
            failed = b.load(T.i32, layout.failed(b, carried), name="failed")
            b.cbranch(b.icmp("ne", failed, const_int(T.i32, 0)), stop,
                      mapping[self.loop.header])
            self.step_return(IRBuilder(stop))
            for k, target in enumerate(self.error_targets):
                fail = mapping[target] = step.append_block(f"ckpt.failed.{k + 1}")
                fb = IRBuilder(fail)
                fb.store(const_int(T.i32, k + 1), layout.failed(fb, carried))
                self.step_return(fb)
        else:
            b.br(mapping[self.loop.header])

        def encode(bb, x):
            return self.encode(bb, x, mapping.get(x, x), known, bases)

        for block in order:
            bb = IRBuilder(mapping[block])
            for inst in block.instructions:
                if inst in self.phis:
                    continue
                if inst is block.terminator and block is self.latch:
                    for p in self.phis:
                        nxt = next(v for v, blk in p.incoming if blk is self.latch)
                        layout.put(bb, carried, ("phi", p), nxt if nxt.type.is_pointer
                                   else mapping.get(nxt, nxt), encode)
                    for v in outs:
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
        resolve_later_operands(step.instructions(), mapping)
        return step


    def step_return(self, b: IRBuilder) -> None:
        """A step's return that stops the loop (a while loop's false; a counted loop's
        steps return nothing)."""
        if self.count is not None:
            b.ret_void()
        else:
            b.ret(const_int(T.i32, 0))


class _Layout:
    """The carried block: a field for each carried value, a pointer as two i64 fields (which
    of the loop's pointer bases, and the byte offset into it)."""

    FAILED = ("failed", None)

    def __init__(self, phis: list, outs: list, failing: bool = False) -> None:
        types: list = []
        self.field: dict = {}
        # A header phi code after the loop uses has two fields: its value on the next
        # iteration and its value on the last one.
        for key in [("phi", p) for p in phis] + [("out", v) for v in outs]:
            self.field[key] = len(types)
            types += [T.i64, T.i64] if key[1].type.is_pointer else [key[1].type]
        if failing:  # 0, or 1 + which exception exit a step took
            self.field[self.FAILED] = len(types)
            types.append(T.i32)
        self.type = T.StructType(types or [T.i64])

    def failed(self, b: IRBuilder, block):
        """The pointer to the failed field."""
        return self._slot(b, block, self.FAILED)

    def _slot(self, b: IRBuilder, block, key, j: int = 0):
        return b.gep(self.type, block, [_i64(0), const_int(T.i32, self.field[key] + j)])

    def put(self, b: IRBuilder, block, key, value, encode) -> None:
        """Store ``value`` as carried value ``key`` (``("phi", phi)`` or ``("out", value)``):
        ``encode(b, pointer)`` gives a pointer's (which, offset)."""
        v = key[1]
        if not v.type.is_pointer:
            b.store(value, self._slot(b, block, key))
            return
        which, offset = encode(b, value)
        b.store(which, self._slot(b, block, key), 8)
        b.store(offset, self._slot(b, block, key, 1), 8)

    def get(self, b: IRBuilder, block, key, bases: list) -> tuple:
        """(value, which, offset) of carried value ``key`` (which and offset None unless it
        is a pointer, rebuilt from ``bases``)."""
        v = key[1]
        if not v.type.is_pointer:
            return b.load(v.type, self._slot(b, block, key), name=v.name), None, None
        which = b.load(T.i64, self._slot(b, block, key), 8)
        offset = b.load(T.i64, self._slot(b, block, key, 1), 8)
        base = bases[-1]
        for k in range(len(bases) - 2, -1, -1):
            base = b.select(b.icmp("eq", which, _i64(k)), bases[k], base)
        return b.gep(T.i8, base, [offset], name=v.name), which, offset
