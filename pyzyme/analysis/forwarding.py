"""Loads that read back what a loop before them stored: the value can be computed again.

``xc[j] = x[p, j] - m[k, j]`` in one loop, then ``... xc[i] ...`` in a loop after it over the
same range: the load of ``xc[i]`` reads what the first loop stored on its iteration ``j = i``.
Reverse mode caches a load of memory that is later overwritten (``xc`` is rewritten for the
next ``k``), once per iteration of its loop; here it need not, since ``x[p, i] - m[k, i]`` can
be computed again from memory nothing overwrites (ADBench's GMM at d=64: the ``xc`` cache was
100 MB of a 104 MB tape).

:func:`store_forwarding` finds, in one function, each load ``L`` of ``gep T, %base, %i`` with a
store ``S`` of ``gep T, %base, %j`` (the same ``%base`` value) such that

- ``%j`` and ``%i`` are induction variables of two different loops, ``S``'s and ``L``'s, with
  the same step, bound and exit test, both counted exactly (one exit each), and the same start
  or, counting up by one, ``%i``'s provably no lower than ``%j``'s constant one (``for j in
  range(i + 1, d)`` after ``for j in range(d)``), so that ``L``'s loop reads indices ``S``'s
  wrote;
- ``S`` runs on every iteration of its loop (its block dominates the loop's latches), its loop
  has one exit block, entered only from the loop (or from blocks it dominates), and that
  block dominates ``L``'s loop's header, which is in the loop around ``S``'s loop: each run
  of ``L``'s loop follows a whole run of ``S``'s in the same iteration of the loop around
  both;
- ``S`` is the only instruction of the loop around both (of the whole function, if none) that
  may write where ``%base`` points;
- ``S``'s stored value is built, within a few steps, from ``%j``, values defined outside
  ``S``'s loop, pure instructions (:data:`pyzyme.ir.opcodes.PURE`), pure intrinsics and
  loads (whether those can be read again in the reverse sweep is for the caller to decide).

Then ``L`` reads the value ``S`` computed with ``%j = %i``.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define double @f(ptr noalias %x, ptr noalias %t, i64 %n) {
... entry:
...   br label %fill
... fill:
...   %j = phi i64 [ 0, %entry ], [ %j1, %fill ]
...   %px = getelementptr double, ptr %x, i64 %j
...   %v = load double, ptr %px
...   %w = fmul double %v, %v
...   %pt = getelementptr double, ptr %t, i64 %j
...   store double %w, ptr %pt
...   %j1 = add nuw nsw i64 %j, 1
...   %jd = icmp eq i64 %j1, %n
...   br i1 %jd, label %use, label %fill
... use:
...   %i = phi i64 [ 0, %fill ], [ %i1, %use ]
...   %s = phi double [ 0.0, %fill ], [ %s1, %use ]
...   %qt = getelementptr double, ptr %t, i64 %i
...   %y = load double, ptr %qt
...   %s1 = fadd double %s, %y
...   %i1 = add nuw nsw i64 %i, 1
...   %id = icmp eq i64 %i1, %n
...   br i1 %id, label %exit, label %use
... exit:
...   ret double %s1
... }''')
>>> print(store_forwarding(m.get_function("f")))
stores forwarded to loads in @f
  %y = load %qt: the value stored at %pt in loop %fill, %j = %i
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.analysis.cfg import dominators
from pyzyme.analysis.loops import _INVERSE, LoopInfo, _ref, analyze_loops
from pyzyme.analysis.overwrite import may_alias, pure_call, written_pointers
from pyzyme.ir import instructions as I
from pyzyme.ir.opcodes import PURE
from pyzyme.ir.values import ConstantInt, Value
from pyzyme.progress import timed

__all__ = ["Forwarded", "StoreForwarding", "store_forwarding"]

_DEPTH = 6
# Exit tests of a loop counting up to its bound: a later start visits a part of its indices.
_UP_TO = frozenset({"ne", "slt", "ult", "sle", "ule"})


@dataclass(frozen=True)
class Forwarded:
    """Load ``load`` reads what ``store`` stored with ``stored`` (the store's loop's induction
    variable) equal to ``loaded`` (the load's)."""

    load: I.Load
    store: I.Store
    loop: object       # the store's loop
    stored: Value
    loaded: Value


@dataclass
class StoreForwarding:
    """The forwarded loads of ``function`` (see the module docstring)."""

    function: object
    loads: dict = field(default_factory=dict)     # load -> Forwarded

    def get(self, load) -> Forwarded | None:
        return self.loads.get(load)

    def __str__(self) -> str:
        lines = [f"stores forwarded to loads in {self.function.ref}"]
        for f in self.loads.values():
            lines.append(f"  {_ref(f.load)} = load {_ref(f.load.pointer)}: the value stored "
                         f"at {_ref(f.store.operands[1])} in loop {f.loop.header.ref}, "
                         f"{_ref(f.stored)} = {_ref(f.loaded)}")
        if len(lines) == 1:
            lines.append("  none")
        return "\n".join(lines)


@timed("analyses")
def store_forwarding(fn, loops: LoopInfo | None = None, doms=None) -> StoreForwarding:
    """The loads of ``fn`` whose value a store in a loop before them can give.

    Parameters
    ----------
    fn
        A function with a body.
    loops, doms
        Its loops and dominator tree, where the caller has them already (computed if not).

    Returns
    -------
    StoreForwarding
        Each such load with its store and the two induction variables (printed as in the
        module docstring's example).
    """
    doms = doms or dominators(fn)
    loops = loops or analyze_loops(fn, doms)
    result = StoreForwarding(fn)
    stores = [inst for block in fn.blocks for inst in block.instructions
              if isinstance(inst, I.Store) and not inst.volatile
              and inst.ordering in (None, "")]
    by_base: dict = {}
    for s in stores:
        parts = _indexed(s.operands[1])
        if parts is not None:
            by_base.setdefault(id(parts[1]), []).append((s, parts))
    if not by_base:
        return result
    sole: dict = {}     # store -> whether it alone writes its object in the loop around it
    for block in fn.blocks:
        for inst in block.instructions:
            if not isinstance(inst, I.Load) or inst.volatile or inst.ordering not in (None, ""):
                continue
            parts = _indexed(inst.pointer)
            if parts is None:
                continue
            for s, sparts in by_base.get(id(parts[1]), ()):
                found = _match(fn, loops, doms, inst, parts, s, sparts, sole)
                if found is not None:
                    result.loads[inst] = found
                    break
    return result


def _indexed(pointer):
    """``(element type, base, index)`` of ``getelementptr T, base, index`` (seen through
    ``getelementptr T, p, 0`` around it, as Numba indexes); else None."""
    while _single_index(pointer) and _is_const(pointer.operands[1], 0):
        pointer = pointer.operands[0]
    if not _single_index(pointer):
        return None
    return pointer.source_type, pointer.operands[0], pointer.operands[1]


def _single_index(pointer) -> bool:
    return isinstance(pointer, I.GetElementPtr) and len(pointer.operands) == 2


def _is_const(v, value: int) -> bool:
    return isinstance(v, ConstantInt) and v.value == value


def _induction(loops: LoopInfo, value):
    """``(loop, induction variable)`` of header phi ``value``; else None."""
    if not isinstance(value, I.Phi):
        return None
    loop = loops.loop_of(value.parent)
    if loop is None or loop.header is not value.parent:
        return None
    iv = loop.induction_of(value)
    return (loop, iv) if iv is not None else None


def _match(fn, loops, doms, load, parts, store, sparts, sole: dict) -> Forwarded | None:
    ty, base, i = parts
    sty, _, j = sparts
    if ty != sty or store.operands[0].type != load.type:
        return None
    li, lj = _induction(loops, i), _induction(loops, j)
    if li is None or lj is None:
        return None
    (iloop, iv), (sloop, jv) = li, lj
    if sloop is iloop or sloop.contains(load.parent) \
            or not _covered(loops, doms, iloop, iv, sloop, jv):
        return None
    if not all(doms.dominates(store.parent, latch) for latch in sloop.latches):
        return None
    if len(sloop.exits) != 1 or not doms.dominates(sloop.exits[0], iloop.header) \
            or not all(sloop.contains(p) or doms.dominates(sloop.exits[0], p)
                       for p in sloop.exits[0].predecessors):
        return None
    around = sloop.parent
    if around is not None and not around.contains(iloop.header):
        return None
    if store not in sole:
        sole[store] = _sole_writer(store, around.blocks if around is not None else fn.blocks)
    if not sole[store] or not _buildable(store.operands[0], sloop, j, _DEPTH):
        return None
    return Forwarded(load, store, sloop, j, i)


def _sole_writer(store, blocks) -> bool:
    """Whether nothing in ``blocks`` but ``store`` may write where it writes."""
    return not any(inst is not store and any(may_alias(store.operands[1], w)
                                             for w in written_pointers(inst))
                   for block in blocks for inst in block.instructions)


def _covered(loops, doms, iloop, iv, sloop, jv) -> bool:
    """Whether every index ``iv`` takes is one ``jv`` takes: the same step, bound and test,
    and the same start, or (counting up by one to the bound) one no lower, ``iv``'s loop
    then entered only below the bound."""
    ti, tj = iloop.trip_count, sloop.trip_count
    if ti is None or tj is None or not (ti.exact and tj.exact):
        return False
    if ti.induction is not iv or tj.induction is not jv or iv.step != jv.step:
        return False
    if not (_same(ti.bound, tj.bound) and ti.predicate == tj.predicate
            and ti.uses_next == tj.uses_next):
        return False
    if _same(iv.start, jv.start):
        return True
    return (iv.step == 1 and ti.predicate in _UP_TO and isinstance(jv.start, ConstantInt)
            and jv.start.value >= 0 and _at_least(loops, iv.start, jv.start.value, _DEPTH)
            and (not ti.uses_next
                 or _entered_below(doms, iloop, iv.start, ti.bound, ti.predicate)))


def _entered_below(doms, loop, start, bound, test: str) -> bool:
    """Whether ``loop`` (tested at its latch, so its body runs once before any test) is
    entered only where ``start < bound``: its one way in comes, through at most one block,
    from a branch on that comparison (``bound > start`` as well), signed or not as ``test``
    (the loop's own) is."""
    signs = {"s": "slt sle ne", "u": "ult ule ne"}
    outside = [p for p in loop.header.predecessors if not loop.contains(p)]
    if len(outside) != 1:
        return False
    block, came = outside[0], loop.header
    for _ in range(2):
        term = block.terminator
        if isinstance(term, I.Branch) and term.is_conditional:
            cond, yes, no = term.operands
            if not isinstance(cond, I.Compare) or cond.opcode != "icmp" or yes is no:
                return False
            taken = {yes: True, no: False}[came]
            pred = cond.predicate if taken else _INVERSE[cond.predicate]
            a, b = cond.operands
            if pred not in ("slt", "ult", "sgt", "ugt") or test not in signs[pred[0]].split():
                return False
            return (_same(a, start) and _same(b, bound) and pred in ("slt", "ult")) or \
                (_same(a, bound) and _same(b, start) and pred in ("sgt", "ugt"))
        if len(block.predecessors) != 1:
            return False
        block, came = block.predecessors[0], block
    return False


def _at_least(loops, v, low: int, depth: int) -> bool:
    """Whether ``v`` is ``low`` or more (signed): a constant, a sum without signed overflow
    of such values, or an induction variable rising from one without signed overflow."""
    if isinstance(v, ConstantInt):
        return low <= v.value < 2**62
    if depth == 0 or not isinstance(v, I.Instruction):
        return False
    if v.opcode == "add" and "nsw" in v.flags:
        a, b = v.operands
        return (_at_least(loops, a, low, depth - 1) and _at_least(loops, b, 0, depth - 1)) \
            or (_at_least(loops, b, low, depth - 1) and _at_least(loops, a, 0, depth - 1))
    found = _induction(loops, v)
    if found is None:
        return False
    iv = found[1]
    return iv.step > 0 and "nsw" in iv.update.flags \
        and _at_least(loops, iv.start, low, depth - 1)


def _same(a, b) -> bool:
    if a is b:
        return True
    return isinstance(a, ConstantInt) and isinstance(b, ConstantInt) and a.type == b.type \
        and a.value == b.value


def _buildable(v, sloop, j, depth: int) -> bool:
    """Whether ``v`` is ``j``, defined outside ``sloop``, or pure operations and loads of
    such values, at most ``depth`` deep."""
    if v is j or not isinstance(v, I.Instruction) or not sloop.contains(v.parent):
        return True
    if depth == 0 or isinstance(v, I.Phi):
        return False
    if isinstance(v, I.Load):
        if v.volatile or v.ordering not in (None, ""):
            return False
    elif isinstance(v, I.CallBase):
        if not pure_call(v):
            return False
        return all(_buildable(a, sloop, j, depth - 1) for a in v.args)
    elif v.opcode not in PURE:  # rebuilt on operands the store's own run had
        return False
    return all(_buildable(op, sloop, j, depth - 1) for op in v.operands)
