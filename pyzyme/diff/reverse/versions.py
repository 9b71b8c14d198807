"""Versions of a reverse function, each a copy of its sweep chosen by one branch at its start:
for strong zero at the cost of a check (the guarded version run only where the forward sweep
saw a non-finite value), and for a parallel loop's body run by one task
(:func:`one_thread_version`: plain adds, no test per add).
:func:`~pyzyme.ir.regions.copy_region` makes the copies.

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
  whether any was infinite or NaN (``|v| == inf`` is true for both); a division ``x / y``,
  whose operands are finite where the other sources are, is tested by ``y == 0``, its only
  pole (overflow ignored), so that the test needs no quotient: where no one reads the
  quotients (a reduction's terms, :attr:`~pyzyme.diff.signature.ParallelBody.unread`), the
  forward sweep computes none;
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
from pyzyme.analysis.loops import analyze_loops
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.regions import copy_region
from pyzyme.ir.values import Value, const_float
from pyzyme.rules import expr as E
from pyzyme.rules.finite import may_be_nonfinite

__all__ = ["FiniteWatch", "one_thread_version", "join_runs"]

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
        self.copies: dict = {}        # the unguarded version: block or instruction -> copy

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
        if primal.opcode == "fdiv":
            # x / y of values that are finite (each source, x's and y's among them, tested
            # too) is non-finite where y is zero, overflow ignored as the analysis ignores it;
            # the test then needs no quotient, which the forward sweep may have no other use
            # for (a reduction's terms, whose sum no one reads: ParallelBody.unread).
            bad = b.fcmp("oeq", st.fwd_value(primal.operands[1]), const_float(ty, 0.0))
            made = [bad]
        else:
            fabs = st.generator.module.declare(
                f"llvm.fabs.{'f64' if ty.kind == 'double' else 'f32'}",
                T.FunctionType(ty, [ty]))
            magnitude = b.call(fabs, [value])
            bad = b.fcmp("ueq", magnitude, const_float(ty, math.inf))
            made = [bad, magnitude]
        seen = b.load(T.i1, self.slot.fwd)
        both = b.or_(seen, bad)
        store = b.store(both, self.slot.fwd)
        self.tests += [store, both, seen] + made
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
        save (a test costs about what a guard does: P3's GMM body, its loads counted as sources
        while the path raising its exceptions seemed to write anywhere, had 16 sources for 8
        guards, and its gradient was 7.2x its primal in two versions, 5.8x in one; now 2 for
        1), the forward sweep's tests taken out."""
        term = st.tape.rev_entry.terminator    # br %discard, %cleanup, %sweep
        if not (self.covered and self.guards and self.slot is not None and st.sig.split
                and self.tested <= len(self.guards)
                and isinstance(term, I.Branch) and term.is_conditional
                and self._two_versions(st)):
            for inst in self.tests:
                inst.erase()
            self.tests = []

    def _two_versions(self, st) -> bool:
        found = _two_versions(st.rev, st.tape.rev_entry, self.slot.rev, self.guards)
        self.copies = found or {}
        return found is not None


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


def _two_versions(rev, entry, flag_slot, guards) -> dict | None:
    """Copy the blocks of ``rev`` the sweep reaches (:func:`_copy_sweep`); branch from
    ``entry`` to the copy where ``flag_slot`` says no source was non-finite; in the copy, each
    guard is the product it guards. The map from each block and instruction to its copy; None
    (nothing changed) where the sweep cannot be copied."""
    found = _copy_sweep(rev, entry, ".finite")
    if found is None:
        return None
    first, mapping = found
    for guard in guards:
        fast = mapping.get(guard)
        if fast is not None:
            fast.replace_all_uses_with(fast.operands[2])
            fast.erase()
    term = entry.terminator
    choose = rev.append_block("sweep.choose")
    b = IRBuilder(choose)
    seen = b.load(T.i1, flag_slot, name=_FLAG)
    b.cbranch(seen, term.operands[2], first)
    term.set_operand(2, choose)
    return mapping


def one_thread_version(st) -> dict | None:
    """The reverse function of a parallel loop's body (a split pair) in a second version for
    one task, run where its ``shared`` parameter says no other thread runs: a copy of the
    sweep in which that parameter is false, each branch on it going straight to its plain
    add (:meth:`~pyzyme.diff.context.ReverseContext.shared_add`), the blocks only the atomic
    side reaches left out and each run of blocks joined by unconditional branches made one
    block again (a single-block reverse loop, as :mod:`pyzyme.transforms.distribute` needs).
    LLVM keeps the per-add branches of the one version (it does not unswitch a loop that
    large), and a loop with them is neither distributed nor vectorized: a 2-D stencil's
    reverse at one thread took 4.1x its primal with them, 2.1x with plain adds, as the
    serial function's gradient does. Where strong zero made two versions, both are copied;
    where no branch on the parameter is in a loop, there is no copy. The map from each block
    of the sweep to its copy (a joined block to the first of its run); None where there is
    no copy."""
    body = st.sig.parallel_body
    if body is None or not st.sig.split:
        return None
    shared = st.rev.args[body.shared]
    term = st.tape.rev_entry.terminator    # br %discard, %cleanup, %sweep
    if not shared.users or not (isinstance(term, I.Branch) and term.is_conditional):
        return None
    looped = {blk for loop in analyze_loops(st.rev).loops for blk in loop.blocks}
    if not any(use.parent in looped for use in shared.users):
        # a branch or two once per row (a reduction slot's add): not worth a copy (P3's
        # GMM body: its first call 2.0 -> 2.3 s of CPU with one, the gradient no faster)
        return None
    found = _copy_sweep(st.rev, st.tape.rev_entry, ".alone", shared)
    if found is None:
        return None
    first, mapping = found
    choose = st.rev.append_block("sweep.threads")
    IRBuilder(choose).cbranch(shared, term.operands[2], first)
    term.set_operand(2, choose)
    joined = join_runs(st.rev, [copy for blk, copy in mapping.items()
                                 if isinstance(blk, BasicBlock) and blk is not copy])
    return {blk: joined.get(copy, copy) for blk, copy in mapping.items()
            if isinstance(blk, BasicBlock)}


def join_runs(fn, blocks) -> dict:
    """Join each block of ``blocks`` that is its predecessor's only successor, and that
    predecessor's only successor, to it (the predecessor in ``blocks`` too, the block without
    phis); the map from each block joined away to the block now holding its instructions."""
    inside = set(blocks)
    joined: dict = {}
    for head in blocks:
        if head in joined:
            continue
        while True:
            term = head.terminator
            if not (isinstance(term, I.Branch) and not term.is_conditional):
                break
            nxt = term.operands[0]
            if nxt is head or nxt not in inside or nxt in joined or nxt.phis \
                    or nxt.predecessors != [head]:
                break
            term.erase()
            fn.join_blocks(head, nxt)
            joined[nxt] = head
    return joined


def _copy_sweep(rev, entry, suffix: str, false_flag: Value | None = None):
    """Copy the blocks of ``rev`` the sweep reaches (not ``entry``, which holds the allocas
    and unpacks the tape: both versions share them, nor the discarded tape's cleanup)
    (:func:`~pyzyme.ir.regions.copy_region`; ``false_flag``, an ``i1`` parameter, false in
    the copy)."""
    taken = {} if false_flag is None else {false_flag: False}
    return copy_region(rev, entry.terminator.operands[2], suffix, taken,
                       lambda blk: blk is not entry)
