"""Tangents that need nothing of the primal's values run in a loop of their own.

Forward mode writes each instruction's tangent beside it, so a loop streaming two arrays
streams four in its derivative: a diffusion step ``w[i] = v[i] + c*(v[i-1] - 2 v[i] + v[i+1])``
reads ``v`` and ``v'`` and writes ``w`` and ``w'`` in one loop. Four 16 KB rows do not fit a
48 KB first-level cache where the primal's two do, and at 2,000 cells the derivative took
4.2 times the primal (a tangent written by hand beside the primal's statement, 4.4). The
tangent of a linear statement reads only tangents, so it can run after the primal's loop in a
copy of it: two loops of two streams each, 2.0 to 2.7 times the primal from 250 cells to
20,000, and no slower than one loop of four beyond noise at 16 cells (1.40x against 1.38x;
measured on the hand-written pair).

:func:`split_tangents` does this for a one-block loop of a forward derivative when

- the tangent instructions (those not copied from the primal) are used by no primal one, and
  use no primal value of the loop but its counting: phis stepped by integer arithmetic, the
  integer arithmetic, casts and address computations on them (copied into the new loop);
- they are plain arithmetic, selects, comparisons, phis, loads and stores (no calls); the
  loop's exit test is counting too;
- no shadow may be its primal at run time (runtime activity): the primal's stores and the
  tangents' loads and stores then touch different memory, and moving every tangent access
  after every primal one changes no value read.

The new loop runs the same iterations (its counting is a copy), and its tangents are what the
loop leaves to the code after it.
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.ir import instructions as I
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.values import Undef

__all__ = ["split_tangents"]

# Integer work a copy of the counting may repeat: no memory, no floats.
_COUNTING = {"add", "sub", "mul", "shl", "lshr", "ashr", "and", "or", "xor", "sext", "zext",
             "trunc", "icmp", "getelementptr", "select", "phi", "ptrtoint", "inttoptr"}
# What a tangent statement may do.
_TANGENT = {"fadd", "fsub", "fmul", "fdiv", "fneg", "select", "fcmp", "icmp", "and", "or",
            "xor", "phi", "load", "store", "getelementptr", "bitcast", "extractelement",
            "insertelement", "shufflevector", "extractvalue", "insertvalue", "freeze",
            "add", "sub", "mul", "shl", "sext", "zext", "trunc", "fpext", "fptrunc"}


def split_tangents(new, primal: set) -> int:
    """Move the tangents of each one-block loop of forward derivative ``new`` that qualifies
    (see the module docstring) into a loop of their own after it; ``primal`` holds the
    instructions copied from the primal. How many loops were split."""
    done = 0
    for block in list(new.blocks):
        if block in block.successors and _split(new, block, primal):
            done += 1
    return done


def _split(fn, block: BasicBlock, primal: set) -> bool:
    term = block.terminator
    if not (isinstance(term, I.Branch) and term.is_conditional and len(set(term.successors)) == 2):
        return False
    insts = block.instructions[:-1]
    tangents = [i for i in insts if i not in primal]
    if not tangents or any(i.opcode not in _TANGENT for i in tangents):
        return False
    tangent_set = set(tangents)
    if any(op in tangent_set for i in insts if i in primal for op in i.operands) or \
            any(op in tangent_set for op in term.operands):
        return False
    entering = [p for p in block.predecessors if p is not block]
    if len(entering) != 1 or any(len(phi.blocks) != 2 for phi in block.phis):
        return False
    counting = _counting(block, [term.operands[0]] + [op for t in tangents for op in t.operands
                                                       if op not in tangent_set])
    if counting is None:
        return False
    _copy_loop(fn, block, term, counting, tangent_set)
    return True


def _counting(block, roots) -> set | None:
    """The primal instructions of ``block`` that ``roots`` reach through operands (their
    counting), or None where one is not integer or address arithmetic."""
    found, work = set(), [r for r in roots if isinstance(r, I.Instruction) and r.parent is block]
    while work:
        inst = work.pop()
        if inst in found:
            continue
        if inst.opcode not in _COUNTING or inst.type.is_float:
            return None
        found.add(inst)
        work.extend(op for op in inst.operands
                    if isinstance(op, I.Instruction) and op.parent is block)
    return found


def _copy_loop(fn, block, term, counting: set, tangents: set) -> None:
    """A copy of ``block`` holding ``counting`` and ``tangents`` (in their order), entered
    where ``block`` leaves, leaving where it left; the tangents then leave ``block``."""
    exit_block = next(s for s in term.successors if s is not block)
    copy = BasicBlock(fn, fn.unique_name(naming.tangent_loop(block.name)))
    fn.blocks.insert(fn.blocks.index(block) + 1, copy)
    moved = [i for i in block.instructions[:-1] if i in counting or i in tangents]
    mapping: dict = {}
    for inst in moved:
        clone = inst.copy_with(list(inst.operands), keep_metadata=True)
        copy.append(clone)
        clone.name = fn.unique_name(inst.name) if inst.name else ""
        mapping[inst] = clone
    for inst, clone in mapping.items():
        for k, op in enumerate(inst.operands):
            if op in mapping:
                clone.set_operand(k, mapping[op])
        if isinstance(clone, I.Phi):
            clone.blocks = [copy if came is block else block for came in inst.blocks]
    branch = term.copy_with([mapping.get(op, op) if op is term.operands[0] else
                             (copy if op is block else op) for op in term.operands])
    copy.append(branch)
    term.replace_uses_of(exit_block, copy)
    for phi in exit_block.phis:
        phi.blocks = [copy if came is block else came for came in phi.blocks]
    for inst in tangents:
        for user in list(inst.users):
            if user.parent is not block and user.parent is not copy:
                user.replace_uses_of(inst, mapping[inst])
    gone = [i for i in block.instructions if i in tangents]
    for inst in gone:  # a tangent phi and its step use each other: cut the cycle first
        for k, op in enumerate(inst.operands):
            if op in tangents:
                inst.set_operand(k, Undef(op.type))
    for inst in gone:
        inst.erase()
