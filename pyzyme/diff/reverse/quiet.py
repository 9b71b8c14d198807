"""Reverse runs of inner loops skipped where no adjoint reaches them.

k-means' cost takes, for each point, the smallest of its distances to the centroids, each the
sum of an inner loop over the coordinates. Only the closest centroid's distance gets an
adjoint; the reverse runs of the other ``k - 1`` inner loops add zero times their partials
into the centroids' shadows, which is most of the gradient's time (and all of it wasted). The
same holds of a ReLU's dot products whose unit is off, of a hinge loss past its margin, or of
any loop whose result a branch or a ``select`` leaves unused.

A run of such a loop's reverse does nothing but pass the adjoints of the values it leaves
(the values defined in it and used after it) back onto the values it read, when:

- it is an innermost loop whose reverse sweep finds where each run began, from its trip count
  (:meth:`~pyzyme.diff.reverse.control.ReverseControl._counted`) or, for a loop in no other,
  which runs once a call, at zero; a skipped run is the counter set back to that start. It is
  entered from one block;
- it stores no floats (a store's reverse takes its adjoint from the shadow memory, not from the
  loop's values) and calls only maths (rule rows of partials, linear maps, reductions, and
  inactive calls), whose reverse is arithmetic on the adjoints;
- each value it leaves that can carry a derivative is one ``double`` or ``float``.

Then its reverse with every such adjoint zero adds only products with zero: under strong zero
(:attr:`~pyzyme.settings.Options.strong_zero`, ``0 * inf`` is 0) that is nothing, and the
run is skipped by a test of those adjoints where the reverse sweep enters it. The test's
compares carry :data:`~pyzyme.naming.ZERO_ADJOINT_TEST`, so that forward mode over the
derivative (``hvp``) skips only where each adjoint's tangent is zero too
(:class:`~pyzyme.diff.forward.generator.ForwardGenerator`). Not in code a later round
differentiates (C's nested derivatives), where the derivative is optimized first and the mark
may be lost.
"""

from __future__ import annotations

from pyzyme.diff.calls.dispatch import row_of
from pyzyme.diff.context import ReverseContext
from pyzyme.diff.leaves import has_float
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.rules import spec

__all__ = ["quiet_exits"]

# Rule rows whose calls' reverse is arithmetic on adjoints, or nothing.
_MATHS = (spec.Partials, spec.Linear, spec.Reduction, spec.Inactive)


def quiet_exits(st: ReverseContext, loop) -> list | None:
    """The values ``loop`` leaves whose adjoints, all zero, let the reverse sweep skip a run
    of it (see the module docstring), or None where a run cannot be skipped."""
    key = ("quiet", loop)
    if key not in st.recomputable:
        st.recomputable[key] = _exits(st, loop)
    return st.recomputable[key]


def _exits(st: ReverseContext, loop) -> list | None:
    if loop.children or st.generator.later_round or \
            not st.generator.options.strong_zero:
        return None
    entering = [p for p in loop.header.predecessors if p in st.last and not loop.contains(p)]
    if len(entering) != 1:
        return None
    exits = []
    for block in loop.blocks:
        for inst in block.instructions:
            if not _adjoint_only(st, inst):
                return None
            if not st.active(inst) or not has_float(inst.type):
                continue
            if any(not loop.contains(user.parent) for user in inst.users):
                if inst.type not in (T.double, T.float):
                    return None
                exits.append(inst)
    return exits


def _adjoint_only(st: ReverseContext, inst: I.Instruction) -> bool:
    """Whether ``inst``'s reverse only moves adjoints between values (no shadow memory read)."""
    if isinstance(inst, I.Store):
        return not has_float(inst.operands[0].type)
    if isinstance(inst, I.CallBase):
        return isinstance(inst, I.Call) and isinstance(row_of(st.rules, inst), _MATHS)
    return inst.opcode not in ("atomicrmw", "cmpxchg", "va_arg")
