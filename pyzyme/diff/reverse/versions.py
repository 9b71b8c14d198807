"""Strong zero at the cost of a check: a reverse function in two versions, the guarded one run
only where the forward sweep saw a non-finite value.

A strong-zero guard (:meth:`~pyzyme.diff.emit.Emitter.unless_zero`) keeps ``seed * partial``
zero where the seed is zero and the partial infinite or NaN. It is a compare and a select on
every guarded product, on the chain of dependent operations an adjoint runs through, and in a
loop that divides by a value nothing proves nonzero (a parallel loop body, which Numba compiles
without its ``ZeroDivisionError`` check) it doubles the reverse sweep's time. Yet a partial can
be non-finite only where a value the analysis of :mod:`pyzyme.analysis.finite` calls a *source*
(a division, ``sqrt``, a callee's result, ...) is: every other value it marks is computed by
total operations from sources, arguments and memory as the function found it, all finite when
the sources are (overflow ignored, as that analysis ignores it). So:

- the forward sweep tests each source's value as it computes it and records, in a tape slot,
  whether any was infinite or NaN (``|v| == inf`` is true for both);
- the reverse function is copied after it is made, the copy without the guards (each
  guard's select replaced by the product it guards), and it starts with a branch on that
  slot: the guarded version where a source was non-finite, the copy where none was.

Where the copy runs, every guarded partial is finite, so each guard would have kept its
product and both versions compute the same adjoints, short of overflow: a partial that
overflows to inf from finite sources (``q ** 6`` for a huge finite ``q``) times a zero seed is
NaN in the copy, as it is in a serial function whose divisions Numba checks (no guard there
either); the guarantee of strong zero (``pyzyme.set_options``) is for partials that can be
non-finite for finite inputs, and those are all covered. A guard whose partial can be
non-finite for finite operands (``sqrt``'s ``0.5 / sqrt(x)`` at ``x == 0``, whose result is
finite) is not covered by the sources' test, except where the pole makes the value itself
non-finite (``x / y`` at ``y == 0``; ``log``'s ``1 / x`` at ``x == 0``, where ``log`` is
``-inf``): a function with another keeps a single, guarded version, as do functions whose
sources are not scalars.

Applied to the bodies of parallel loops (split pairs); the combined and other split
derivatives keep one version.
"""

from __future__ import annotations

import math

from pyzyme.analysis.finite import NonFinite
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.builder import resolve_later_operands
from pyzyme.ir.values import Value, const_float
from pyzyme.rules import expr as E
from pyzyme.rules.finite import may_be_nonfinite

__all__ = ["FiniteWatch"]

_FLAG = "nonfinite.seen"


class FiniteWatch:
    """The forward sweep's test of one function's sources, and the reverse function's two
    versions (see the module docstring). ``covered`` is False once something the test does
    not cover is found: then the function keeps one, guarded, version."""

    def __init__(self, nonfinite: NonFinite) -> None:
        self.nonfinite = nonfinite
        self.covered = True
        self.slot = None              # the tape slot: whether a source was non-finite
        self.tests: list = []         # the forward sweep's instructions testing sources
        self.tested = 0               # the sources tested
        self.guards: list = []        # the reverse sweep's guard selects

    # -- forward sweep -----------------------------------------------------------------
    def test(self, st, b: IRBuilder, primal: Value) -> None:
        """At ``b`` in the forward sweep, after the copy of primal ``primal``: where it is a
        source, record whether its value is infinite or NaN."""
        if not self.covered or primal not in self.nonfinite.sources:
            return
        ty = primal.type
        if not (ty.is_float and ty.kind in ("double", "float")):
            self.covered = False    # a vector or an aggregate: not tested
            return
        try:
            value = st.fwd_value(primal)
        except UnsupportedError:
            self.covered = False    # not copied into the forward sweep
            return
        if self.slot is None:
            self.slot = st.tape.slot(T.i1, _FLAG)
        fabs = st.generator.module.declare(
            f"llvm.fabs.{'f64' if ty.kind == 'double' else 'f32'}", T.FunctionType(ty, [ty]))
        magnitude = b.call(fabs, [value])
        bad = b.fcmp("ueq", magnitude, const_float(ty, math.inf))
        seen = b.load(T.i1, self.slot.fwd)
        both = b.or_(seen, bad)
        store = b.store(both, self.slot.fwd)
        self.tests += [store, both, seen, bad, magnitude]
        self.tested += 1

    # -- reverse sweep -----------------------------------------------------------------
    def guard(self, select: Value, partial: E.Expr, inst: I.Instruction, operands) -> None:
        """Record a guard made for ``partial`` of primal ``inst`` (whose ``operands`` the
        partial reads); a partial with a pole at finite operands where the value itself is
        finite (see the module docstring) is not covered."""
        if may_be_nonfinite(partial, lambda place: False,
                            lambda place: self.nonfinite.nonzero(
                                inst if place == "ret" else operands[place], inst.parent)) \
                and not (inst in self.nonfinite.sources and _poles_where_nonfinite(inst)):
            self.covered = False
        if isinstance(select, I.Select):
            self.guards.append(select)

    # -- the two versions --------------------------------------------------------------
    def finish(self, st) -> None:
        """Once the pair is made: the reverse function in two versions, or, where there are
        no guards, they are not all covered, or there are more sources to test than guards to
        save (a test costs about what a guard does: P3's GMM body, whose loads count as sources
        since the path raising its exceptions calls functions that may write memory as far
        as the analysis knows (``numba_unpickle``, a pointer), has 16 sources for 8 guards,
        and its gradient was 7.2x its primal in two versions, 5.8x in one), the forward
        sweep's tests taken out."""
        term = st.tape.rev_entry.terminator    # br %discard, %cleanup, %sweep
        if not (self.covered and self.guards and self.slot is not None and st.sig.split
                and self.tested <= len(self.guards)
                and isinstance(term, I.Branch) and term.is_conditional
                and _two_versions(st.rev, st.tape.rev_entry, self.slot.rev, self.guards)):
            for inst in self.tests:
                inst.erase()
            self.tests = []


#: Functions whose partials' only pole is where their value is infinite: ``log``'s ``1 / x`` at
#: ``x == 0`` (``log(0) == -inf``), ``log1p``'s at -1; C's and LLVM's spellings.
_LOGARITHMS = frozenset(f"{base}{suffix}" for base in ("log", "log2", "log10", "log1p")
                        for suffix in ("", "f", "l"))


def _poles_where_nonfinite(inst: I.Instruction) -> bool:
    """Whether every pole of ``inst``'s partials (at finite operands) makes its value
    infinite or NaN: ``x / y`` (at ``y == 0``) and the logarithms. The test of the value then
    covers the partials."""
    if inst.opcode == "fdiv":
        return True
    callee = inst.called_function if isinstance(inst, I.CallBase) else None
    if callee is None:
        return False
    name = callee.name
    if name.startswith("llvm."):
        name = name[len("llvm."):].split(".")[0]
    return name in _LOGARITHMS


def _two_versions(rev, entry, flag_slot, guards) -> bool:
    """Copy the blocks of ``rev`` the sweep reaches (not ``entry``, which holds the allocas
    and unpacks the tape: both versions share them, nor the discarded tape's cleanup); branch
    from ``entry`` to the copy where ``flag_slot`` says no source was non-finite; in the
    copy, each guard is the product it guards. False (nothing changed) where a phi of those
    blocks has an entry from another block (one the sweep never reaches)."""
    term = entry.terminator
    sweep = term.operands[2]
    reached, todo = {sweep}, [sweep]
    while todo:
        for nxt in todo.pop().successors:
            if nxt not in reached and nxt is not entry:
                reached.add(nxt)
                todo.append(nxt)
    blocks = [blk for blk in rev.blocks if blk in reached]
    if any(came not in reached for blk in blocks for phi in blk.phis for came in phi.blocks):
        return False
    mapping: dict = {}
    for blk in blocks:
        mapping[blk] = rev.append_block(f"{blk.name}.finite")
    copies = []
    for blk in blocks:
        b = IRBuilder(mapping[blk])
        for inst in blk.instructions:
            copy = b.insert_copy(inst, mapping)
            mapping[inst] = copy
            copies.append(copy)
    resolve_later_operands(copies, mapping)
    for guard in guards:
        fast = mapping.get(guard)
        if fast is not None:
            fast.replace_all_uses_with(fast.operands[2])
            fast.erase()
    choose = rev.append_block("sweep.choose")
    b = IRBuilder(choose)
    seen = b.load(T.i1, flag_slot, name=_FLAG)
    b.cbranch(seen, sweep, mapping[sweep])
    term.set_operand(2, choose)
    return True
