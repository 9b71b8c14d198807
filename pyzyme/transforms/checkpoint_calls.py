"""Calls of functions marked ``pyzyme.checkpoint``, turned into checkpointed loops of one step.

``pyzyme.checkpoint(g)`` asks reverse mode to recompute each call of ``g`` in the reverse
sweep instead of taping what it computes (``jax.checkpoint``). A call is a loop of one
iteration: :func:`checkpoint_calls` moves it into a block of its own and hands that block to
:mod:`pyzyme.transforms.checkpoint_loops` as such a loop, so that it becomes a call of the
checkpointed-loop intrinsic whose step makes the call: the forward sweep snapshots what the
call writes (and what it reads that later code changes), runs it untaped, and the reverse
sweep restores the snapshot and runs the call's forward and reverse passes together.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.analysis.overwrite import underlying_object
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.rules import default_rules, spec
from pyzyme.transforms.checkpoint_loops import Checkpointed, _i64, _Rewrite

__all__ = ["checkpoint_calls", "UNLIMITED"]

#: The budget of a checkpointed call made without ``tape_budget``: no limit.
UNLIMITED = 1 << 62


@dataclass(eq=False)
class _OneStep:
    """The shape of a loop (as :class:`pyzyme.analysis.loops.Loop` gives it) that a block
    holding one call has, run once."""

    header: object
    preheader: object
    exit: object
    blocks: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.blocks = [self.header]
        self.latches = self.exiting = [self.header]
        self.exits = [self.exit]
        self.trip_count = None


class _CallRewrite(_Rewrite):
    chunks = False  # one step
    def check_shape(self) -> None:
        self.latch, self.count, self.phis = self.loop.header, True, []
        self.exit_block, self.error_targets = self.loop.exit, []
        call = self.loop.header.instructions[0]
        for arg in call.args:  # an array's MemInfo, passed for its reference count
            obj = underlying_object(arg)
            row = _allocation_row(obj)
            if row is not None and row.data_offset is not None:
                self.opaque.add(obj)

    def trip_count(self, b: IRBuilder):
        return _i64(1)


def _allocation_row(obj):
    callee = obj.called_function if isinstance(obj, I.CallBase) else None
    row = default_rules().lookup(callee.name, "call") if callee is not None else None
    return row if isinstance(row, spec.Allocation) else None


def _isolate(fn, call: I.CallBase) -> _OneStep:
    """Move ``call`` into a block of its own between the code before and after it."""
    block = call.parent
    body = fn.append_block(fn.unique_name(f"{block.name or 'ckpt'}.checkpointed"))
    after = fn.append_block(fn.unique_name(f"{block.name or 'ckpt'}.after"))
    k = block.instructions.index(call)
    moved, block.instructions[k:] = block.instructions[k:], []
    for inst in moved[1:]:
        after.instructions.append(inst)
        inst.parent = after
    body.instructions.append(call)
    call.parent = body
    IRBuilder(block).br(body)
    IRBuilder(body).br(after)
    for succ in after.terminator.successors:
        for inst in succ.instructions:
            if isinstance(inst, I.Phi):
                inst.blocks = [after if b is block else b for b in inst.blocks]
    return _OneStep(body, block, after)


def checkpoint_calls(module, fn, checkpointed, budget: int | None, extents: dict, where,
                     stable: bool = True, opaque=()) -> list[Checkpointed]:
    """Rewrite each call in ``fn`` of a function ``checkpointed(name)`` says is marked into a
    checkpointed loop of one step (under ``budget`` bytes, None: no limit); ``where(name)``
    names the call in errors; ``opaque``: parameters whose memory holds no state (array
    handles passed for their reference counts); the other arguments as for
    :func:`~pyzyme.transforms.checkpoint_loops.checkpoint_loops`."""
    calls = [inst for inst in fn.instructions() if isinstance(inst, I.CallBase)
             and inst.called_function is not None and checkpointed(inst.called_function.name)]
    done = []
    for call in calls:
        rewrite = _CallRewrite(module, fn, _isolate(fn, call), extents,
                               where(call.called_function.name))
        rewrite.stable = stable
        rewrite.opaque.update(fn.args[i] for i in opaque)
        done.append(rewrite.run(budget if budget is not None else UNLIMITED))
    return done
