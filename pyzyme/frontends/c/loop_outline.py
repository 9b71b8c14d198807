"""One loop of clang's unoptimised module, outlined into a step function of its own.

Enzyme marks loops in the source for two things pyzyme runs through a step function: a
checkpointed loop (:mod:`~pyzyme.frontends.c.loop_annotations`, a ``for`` loop whose reverse
sweep recomputes iterations from snapshots) and a fixed-point loop
(:mod:`~pyzyme.frontends.c.fixed_point_markers`, a loop marked from inside by
``__enzyme_set_fixed_point``). Both read the loop from the module clang makes before optimising
it, where the loop's variables are still in stack slots, so that what one iteration leaves
for the next is memory, not registers. :class:`LoopOutliner` owns what they share: finding the
loop next to the marker call, sorting the stack slots it uses (its own temporaries, the slots
it writes, those it only reads), and copying its blocks into a new function, the step; each
user decides where its step starts and what it returns, and what replaces the loop.
"""

from __future__ import annotations

import re

from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.loops import analyze_loops
from pyzyme.analysis.overwrite import underlying_object, written_pointers
from pyzyme.errors import UnsupportedError
from pyzyme.frontends.c.enzyme_calls import source_location
from pyzyme.ir import IRBuilder
from pyzyme.ir.builder import resolve_later_operands
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Argument, ConstantInt

__all__ = ["LoopOutliner", "calls_of", "is_lifetime", "slot_bytes"]


class LoopOutliner:
    """The loop a marker call ``call`` stands for, read from ``module`` and outlined.

    ``what`` names the loop in errors ("checkpointed loop"); each error starts with the
    marker's ``file:line``.
    """

    def __init__(self, module, call: I.Call, what: str) -> None:
        self.module, self.call, self.fn = module, call, call.function
        self.what = what
        self.where = source_location(module, call)
        self.loop = None
        self.blocks: set = set()

    def refuse(self, why: str, hint: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where}: this {self.what} {why}", hint=hint)

    def use(self, loop) -> None:
        """Outline ``loop``."""
        self.loop, self.blocks = loop, set(loop.blocks)

    # -- finding the loop ------------------------------------------------------------------
    def loop_after_call(self, hint: str):
        """The loop the marker call's block falls through to (through a few blocks)."""
        loops = analyze_loops(self.fn)
        block = self.call.parent
        for _ in range(8):
            term = block.terminator
            if not (isinstance(term, I.Branch) and not term.is_conditional):
                break
            block = term.operands[0]
            loop = next((lp for lp in loops.loops if lp.header is block), None)
            if loop is not None:
                return loop
        raise self.refuse("is not followed by a loop pyzyme can find", hint=hint)

    def loop_around_call(self, hint: str):
        """The innermost loop holding the marker call."""
        loop = analyze_loops(self.fn).loop_of(self.call.parent)
        if loop is None:
            raise self.refuse("is marked by a call outside any loop", hint=hint)
        return loop

    # -- reading it ------------------------------------------------------------------------
    def defined_inside(self, value) -> bool:
        return isinstance(value, I.Instruction) and value.parent in self.blocks

    def writes(self):
        """(instruction, pointer) for each pointer the loop's instructions write through."""
        for block in self.blocks:
            for inst in block.instructions:
                for pointer in written_pointers(inst):
                    yield inst, pointer

    def written_inside(self, obj) -> bool:
        """Whether the loop writes into ``obj`` (a stack slot, a global) itself."""
        return any(underlying_object(p) is obj for _, p in self.writes())

    def check_live_outs(self) -> None:
        """Refuses a loop whose values code after it uses in registers (none at -O0)."""
        for block in self.blocks:
            for inst in block.instructions:
                if any(isinstance(u, I.Instruction) and u.parent not in self.blocks
                       for u in inst.users):
                    raise self.refuse("passes values out in registers",
                                      hint="compile without optimisation of the loop")

    def slots(self, own=()) -> dict:
        """What the step takes: ``own`` (``own``, and the slots of variables declared in the
        loop's body, which only the loop uses), ``written`` (the other slots the loop
        writes), ``values`` (slots it only loads whole; and other values from before the
        loop), ``pointers`` (the other slots)."""
        live_in = []
        # In the function's order: the step's parameters must not depend on a set's order.
        for block in [b for b in self.fn.blocks if b in self.blocks]:
            for inst in block.instructions:
                for op in inst.operands:
                    if (isinstance(op, Argument) or (isinstance(op, I.Instruction)
                                                     and op.parent not in self.blocks)) \
                            and op not in live_in:
                        live_in.append(op)
        found = {"own": list(own), "written": [], "values": [], "pointers": []}
        for v in live_in:
            if v in own:
                continue
            if isinstance(v, I.Alloca):
                outside = [u for u in v.users if isinstance(u, I.Instruction)
                           and u.parent not in self.blocks and not is_lifetime(u)]
                # A slot whose lifetime starts in the loop is a variable of its body, which
                # no iteration leaves for the next; one declared before the loop may carry
                # a value from one iteration to the next though only the loop uses it.
                if not outside and any(is_lifetime(u) and u.parent in self.blocks
                                       and u.called_function.name.startswith(
                                           "llvm.lifetime.start") for u in v.users):
                    found["own"].append(v)
                elif self.written_inside(v):
                    found["written"].append(v)
                elif all(isinstance(u, I.Load) and u.pointer is v and u.type == v.allocated_type
                         for u in v.users if isinstance(u, I.Instruction)
                         and u.parent in self.blocks):
                    found["values"].append(v)
                else:
                    found["pointers"].append(v)
            else:
                found["values"].append(v)
        return found

    def materialize(self, b: IRBuilder, value):
        """``value`` where ``b`` is, before the loop: values the loop computes are computed
        again there (casts, addresses, loads of what the loop does not write); None when one
        cannot be."""
        if not self.defined_inside(value):
            return value
        if isinstance(value, I.Load) and self.written_inside(underlying_object(value.pointer)):
            return None
        if not isinstance(value, (I.Load, I.Cast, I.GetElementPtr, I.BinaryOp, I.Compare)):
            return None
        ops = [self.materialize(b, op) for op in value.operands]
        if any(op is None for op in ops):
            return None
        return b.insert(value.copy_with(ops))

    # -- the step ----------------------------------------------------------------------------
    def new_step(self, name: str, ret, params: list):
        """An internal function ``ret name(params...)`` (``(name, type)`` pairs), with the
        caller's attributes, its arguments named."""
        suffix = re.sub(r"\s*!dbg\s+!\d+", "", self.fn.suffix)
        step = self.module.add_function(self.module.unique_global_name(name),
                                        T.FunctionType(ret, [t for _, t in params]),
                                        prefix="internal", suffix=suffix)
        for k, (arg, (pname, _)) in enumerate(zip(step.args, params)):
            arg.name = f"{pname}.{k}" if k else pname
        return step

    def own_slots(self, b: IRBuilder, slots, mapping: dict) -> None:
        """The step's copies of the slots only the loop uses, where ``b`` is."""
        for slot in slots:
            mapping[slot] = b.insert(slot.copy_with(list(slot.operands)), slot.name)

    def copy_blocks(self, step, mapping: dict, start, ends: dict, loaded=None) -> None:
        """Copies the loop's blocks into ``step`` after its entry block (at whose end ``mapping``
        holds what the entry defines), the entry branching to the copy of ``start``.

        ``ends`` maps a loop block to ``end(builder, terminator)``, which ends that block's
        copy instead of its terminator; ``loaded`` maps a slot to the value its loads become.
        """
        loaded = loaded or {}
        order = [blk for blk in self.fn.blocks if blk in self.blocks]
        for block in order:
            mapping[block] = step.append_block(block.name)
        IRBuilder(step.blocks[0]).br(mapping[start])
        for block in order:
            bb = IRBuilder(mapping[block])
            for inst in block.instructions:
                if isinstance(inst, I.Load) and inst.pointer in loaded:
                    mapping[inst] = loaded[inst.pointer]
                    continue
                if inst is block.terminator and block in ends:
                    ends[block](bb, inst)
                    continue
                mapping[inst] = bb.insert_copy(inst, mapping, debug=False)
        resolve_later_operands(step.instructions(), mapping)

    def remove_loop(self, keep=()) -> None:
        """Removes the loop's blocks from the caller, but for ``keep``."""
        self.fn.remove_blocks([blk for blk in self.fn.blocks
                               if blk in self.blocks and blk not in keep])

    def marker_global(self, name: str):
        """The ``extern int`` marker ``name`` (``enzyme_checkpoint_region``)."""
        gv = self.module.get_global(name)
        return gv if gv is not None else self.module.add_global(name, T.i32,
                                                                prefix="external")


def is_lifetime(inst) -> bool:
    callee = inst.called_function if isinstance(inst, I.CallBase) else None
    return callee is not None and callee.name.startswith("llvm.lifetime")


def calls_of(module, name: str) -> list:
    """The calls of the function ``name`` in ``module``."""
    fn = module.get_function(name)
    return [] if fn is None else [u for u in fn.users if isinstance(u, I.Call)]


def slot_bytes(slot) -> int:
    """The bytes of the stack slot ``slot``."""
    count = slot.count
    return sizeof(slot.allocated_type) * (count.value if isinstance(count, ConstantInt) else 1)
