"""Shadow cells carried from one reverse iteration to the next in registers.

A stencil overwriting its state in place, ``v[i] = v[i] + c*(left - 2*v[i] + v[i+1])``, reads
``v[i + 1]`` on iteration ``i`` and ``v[i]`` (read and written) on iteration ``i + 1``. Its
reverse sweep runs ``i`` down: iteration ``i + 1`` leaves its adjoint in ``v_bar[i + 1]``,
then iteration ``i`` adds to it. Through memory that is two stores to each cell, one iteration
apart; LLVM forwards the second load from the first store, but keeps both stores, and that
order of stores keeps the loop from being vectorized (or interleaved): its sums, such as
``c_bar``, stay one chain of additions a cell (on the in-place stencil at 1,000 cells, the
reverse of a step took 7x the step).

Here, in a one-block loop whose induction variable steps by one (up or down) and whose shadow
accesses are all at ``base + size*i + offset`` for the same ``base`` and two offsets ``size``
apart, the cell the reverse sweep reaches first (at ``offset`` ``size`` lower than the other
when ``i`` counts up, higher when it counts down) is loaded once at the start of the reverse
iteration into a register ``q``; the other cell is the register ``r`` that the reverse
iteration before left in ``q``; each iteration stores only ``r`` to memory, after everything
else it does, and the last one also stores ``q``. The loop's first reverse iteration reads
``r`` from memory instead (its cell was not reached before). Both registers are stack slots
here: SSA construction makes them phis.

A mixin of :class:`~pyzyme.diff.reverse.generator.ReverseGenerator`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme.analysis.layout import sizeof
from pyzyme.diff.context import ReverseContext
from pyzyme.diff.leaves import has_float
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import Function
from pyzyme.ir.values import ConstantInt, Value, const_null

__all__ = ["CarriedCells", "ReverseCarried"]

# Words in the names of intrinsics that may touch memory (a shadow), unlike maths, assumptions
# and lifetimes.
_MEMORY_WORDS = ("mem", "masked", "gather", "scatter", "va_", "stack", "prefetch", "load",
                 "store", "atomic")


@dataclass(eq=False)
class CarriedCells:
    """The plan for one loop: which shadow accesses go to the registers ``q`` and ``r``."""

    loop: object
    first: dict          # primal load/store -> True at the cell reached first (q), else r
    q_pointer: Value     # a primal pointer at q's offset
    r_pointer: Value     # a primal pointer at r's offset
    type: T.Type
    q: I.Alloca | None = None
    r: I.Alloca | None = None
    # True on a run's first reverse iteration only. A flag, not a comparison of the counter
    # with its value on entry: a phi that is false after one iteration is what LLVM's loop
    # peeling makes invariant, which leaves the loop free of the select (a compare and a
    # blend a cell once vectorized, and the load of r's cell it feeds).
    opening: I.Alloca | None = None


class ReverseCarried:
    """Plans and emits carried shadow cells (see the module docstring)."""

    def carried_plan(self, st: ReverseContext, loop) -> CarriedCells | None:
        """The plan of ``loop`` (None where it has none), decided once."""
        if loop is None:
            return None
        if loop not in st.carried:
            st.carried[loop] = _plan(st, loop)
        return st.carried[loop]

    def _carrying(self, st: ReverseContext, inst) -> CarriedCells | None:
        """The plan of ``inst``'s loop if it carries ``inst``'s shadow cell in a register."""
        plan = self.carried_plan(st, st.loops.loop_of(inst.parent))
        return plan if plan is not None and inst in plan.first else None

    def carried_pointer(self, st: ReverseContext, inst) -> Value | None:
        """The register slot standing for ``inst``'s shadow cell, if planned."""
        plan = self._carrying(st, inst)
        if plan is None:
            return None
        self._carried_slots(st, plan)
        return plan.q if plan.first[inst] else plan.r

    def _carried_slots(self, st: ReverseContext, plan: CarriedCells) -> None:
        if plan.q is not None:
            return
        entry = st.tape.rev_entry
        b = IRBuilder()
        b.position_before(entry.terminator) if entry.terminator is not None \
            else b.position_at_end(entry)
        for attr, ty in (("q", plan.type), ("r", plan.type), ("opening", T.i1)):
            slot = I.Alloca(ty, None, None)
            slot.name = st.rev.unique_name(f"carried.{attr}")
            entry.insert(0, slot)
            b.store(const_null(ty), slot)
            setattr(plan, attr, slot)

    def carried_begin(self, st: ReverseContext, block) -> None:
        """At the start of the reverse of ``block``: ``q`` from memory, and ``r`` too on the
        run's first reverse iteration."""
        loop = st.loops.loop_of(block)
        plan = self.carried_plan(st, loop)
        if plan is None:
            return
        self._carried_slots(st, plan)
        b, ty = st.rb, plan.type
        b.store(b.load(ty, st.shadow(plan.q_pointer)), plan.q)
        fresh = b.load(ty, st.shadow(plan.r_pointer))
        b.store(b.select(b.load(T.i1, plan.opening), fresh, b.load(ty, plan.r)), plan.r)

    def carried_end(self, st: ReverseContext, block) -> None:
        """At the end of the reverse of ``block``: ``r`` stored (its cell is done), ``q``
        carried to the next reverse iteration in ``r``."""
        plan = self.carried_plan(st, st.loops.loop_of(block))
        if plan is None:
            return
        b, ty = st.rb, plan.type
        b.store(b.load(ty, plan.r), st.shadow(plan.r_pointer))
        b.store(b.load(ty, plan.q), plan.r)
        b.store(ConstantInt(T.i1, 0), plan.opening)

    def carried_leave(self, st: ReverseContext, loop, target):
        """``target``, through a block that stores ``q``'s cell (held in ``r``) when the
        reverse sweep leaves ``loop``."""
        plan = self.carried_plan(st, loop)
        if plan is None:
            return target
        pointer = st.shadow(plan.q_pointer)  # this iteration's: it dominates the way out
        block = st.rev.append_block(f"{st.rblocks[loop.header].name}.carried")
        b = IRBuilder(block)
        b.store(b.load(plan.type, plan.r), pointer)
        b.br(target)
        return block

    def carried_enter(self, st: ReverseContext, b: IRBuilder, loops) -> None:
        """On an edge entering the reverse of ``loops``: each planned one's next reverse
        iteration is its run's first."""
        for loop in loops:
            plan = self.carried_plan(st, loop)
            if plan is not None:
                self._carried_slots(st, plan)
                b.store(ConstantInt(T.i1, 1), plan.opening)


def _plan(st: ReverseContext, loop) -> CarriedCells | None:
    if loop.children or loop.blocks != [loop.header] or loop.latches != [loop.header] \
            or st.sig.shared_adjoints:
        return None
    iv = loop.induction
    if iv is None or iv.step not in (1, -1):
        return None
    places = {}
    for inst in loop.header.instructions:
        if isinstance(inst, I.CallBase):
            fn = inst.called_function
            if not (isinstance(fn, Function) and fn.name.startswith("llvm.")
                    and not any(w in fn.name for w in _MEMORY_WORDS)):
                return None
        elif inst.opcode in ("atomicrmw", "cmpxchg", "va_arg"):
            return None
        elif isinstance(inst, I.Load) and st.active(inst):
            places[inst] = (inst.pointer, inst.type)
        elif isinstance(inst, I.Store):
            value, pointer = inst.operands
            if pointer in st.shadows and has_float(value.type):
                places[inst] = (pointer, value.type)
    bases, offsets = set(), {}
    for inst, (pointer, ty) in places.items():
        if pointer in st.runtime or ty not in (T.double, T.float):
            return None
        found = _address(loop, iv, pointer)
        if found is None or found[1] != sizeof(ty):
            return None
        bases.add((found[0], ty))
        offsets[inst] = found[2]
    if len(bases) != 1:
        return None
    (_, ty), = bases
    lo = min(offsets.values(), default=0)
    if set(offsets.values()) != {lo, lo + sizeof(ty)}:
        return None
    # Counting up, the reverse sweep runs i down and reaches base + size*i + lo first.
    first = {inst: (off == lo) == (iv.step == 1) for inst, off in offsets.items()}
    pick = {flag: places[next(i for i, f in first.items() if f is flag)][0]
            for flag in (True, False)}
    return CarriedCells(loop, first, pick[True], pick[False], ty)


def _address(loop, iv, pointer):
    """``(base, bytes a step, offset)`` where ``pointer`` is ``base + bytes*iv + offset`` on
    every iteration, ``base`` the same throughout the loop; None otherwise."""
    offset = 0
    while isinstance(pointer, I.GetElementPtr) and len(pointer.indices) == 1:
        index = pointer.indices[0]
        size = sizeof(pointer.source_type)
        if isinstance(index, ConstantInt):
            offset += size * index.signed
            pointer = pointer.pointer
            continue
        steps = _iv_plus(iv, index)
        if steps is None or not loop.is_invariant(pointer.pointer):
            return None
        return pointer.pointer, size, offset + size * steps
    return None


def _iv_plus(iv, index) -> int | None:
    """``k`` where ``index`` is the induction variable plus ``k``."""
    if index is iv.phi:
        return 0
    if isinstance(index, I.BinaryOp) and index.opcode == "add" and index.operands[0] is iv.phi \
            and isinstance(index.operands[1], ConstantInt):
        return index.operands[1].signed
    return None
