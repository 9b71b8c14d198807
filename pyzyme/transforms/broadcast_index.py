"""Numba's broadcasting indices, made values of the loop index before differentiation.

Numba evaluates a NumPy array expression (``v[1:-1, 1:-1] + c * (v[:-2, 1:-1] + ...)``) in a
loop over the result's shape and, for each operand, an index per dimension that follows the
loop's only where the operand's extent there is not 1 (broadcasting): ``k = i if shape > 1
else k``, where ``k`` starts at 0 and is carried from one iteration to the next. After LLVM,
each is a ``select`` of the loop index and a phi of the loop carrying the select's own value:

    %k = phi i64 [ 0, %entry ], [ %k.next, %loop ]
    %k.next = select i1 %wide, i64 %i, i64 %k      ; %wide = icmp sgt i64 %shape, 1

The phi makes the index a value the loop carries, which the reverse sweep cannot recompute:
it kept every operand's index of every element on its tape, 12 words per element for a
5-point stencil's 6 operands, and a 2000 x 2000 grid over 30 steps held 17 GB. Yet ``%wide``
is the same on every iteration of the loops: where it is true the select is ``%i``, where it
is false the phi never changes from 0. So :func:`fold_broadcast_indices` replaces the select by
``select i1 %wide, i64 %i, i64 0``, which does not read the phi; the phis, read by nothing
else, go.

Precisely: a select ``s = select c, x, p`` whose false operand ``p`` is a phi, where the phis
reached from ``p`` through the incoming values that are phis (``p`` itself, the phis of
enclosing loops that carry ``s`` out and back in) are each in the header of a loop, get ``s``
or one of them along that loop's back edges, and on entering it one constant ``C`` or the
phi of an enclosing loop's header among them; and ``c`` is computed outside the outermost of
those loops (a time loop around them may compute it again: they start from ``C`` each time
it enters them). While ``c`` is false ``s`` is ``p``, and each of those phis only ever holds
``C`` or a value one of them held before: ``C``. So ``s`` is ``select c, x, C`` at every run.
The results are bitwise the same.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define double @f(ptr %a, i64 %n, i64 %shape) {
... entry:
...   %wide = icmp sgt i64 %shape, 1
...   br label %loop
... loop:
...   %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
...   %k = phi i64 [ 0, %entry ], [ %k1, %loop ]
...   %s = phi double [ 0.0, %entry ], [ %s1, %loop ]
...   %k1 = select i1 %wide, i64 %i, i64 %k
...   %p = getelementptr double, ptr %a, i64 %k1
...   %x = load double, ptr %p
...   %s1 = fadd double %s, %x
...   %i1 = add i64 %i, 1
...   %more = icmp slt i64 %i1, %n
...   br i1 %more, label %loop, label %exit
... exit:
...   ret double %s1
... }''')
>>> fn = m.get_function("f")
>>> fold_broadcast_indices(fn)
1
>>> print(fn)
define double @f(ptr %a, i64 %n, i64 %shape) {
entry:
  %wide = icmp sgt i64 %shape, 1
  br label %loop
<BLANKLINE>
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %s = phi double [ 0.0, %entry ], [ %s1, %loop ]
  %k1 = select i1 %wide, i64 %i, i64 0
  %p = getelementptr double, ptr %a, i64 %k1
  %x = load double, ptr %p
  %s1 = fadd double %s, %x
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %exit
<BLANKLINE>
exit:
  ret double %s1
}
"""

from __future__ import annotations

from pyzyme.analysis.loops import analyze_loops
from pyzyme.ir import instructions as I
from pyzyme.ir.values import ConstantInt, const_int

__all__ = ["fold_broadcast_indices"]


def fold_broadcast_indices(fn) -> int:
    """Fold each broadcasting index of ``fn`` (see the module docstring); how many."""
    if fn.is_declaration:
        return 0
    loops = None
    folded = 0
    for select in [i for i in fn.instructions() if isinstance(i, I.Select)]:
        cond, chosen, kept = select.operands
        if not isinstance(kept, I.Phi) or not select.type.is_int:
            continue
        found = _carried(select, kept)
        if found is None:
            continue
        phis, constant = found
        if chosen in phis or chosen is select:
            continue
        loops = loops or analyze_loops(fn)
        outermost = _reset_on_entry(phis, select, constant, loops)
        if outermost is None or (isinstance(cond, I.Instruction)
                                 and outermost.contains(cond.parent)):
            continue
        select.set_operand(2, constant)
        folded += 1
        _drop_unread(phis)
    return folded


def _carried(select, start):
    """``(phis, C)``: the phis reached from ``start`` through incoming phis, whose incoming
    values are those phis, ``select`` and one constant ``C``; None where there are others."""
    phis, work, constant = set(), [start], None
    while work:
        phi = work.pop()
        if phi in phis:
            continue
        phis.add(phi)
        for value in phi.operands:
            if value is select or value in phis:
                continue
            if isinstance(value, I.Phi):
                work.append(value)
            elif isinstance(value, ConstantInt) and (constant is None
                                                     or constant.signed == value.signed):
                constant = value
            else:
                return None
    return (phis, constant) if constant is not None else None


def _reset_on_entry(phis, select, constant, loops):
    """The outermost of the loops whose headers hold ``phis``, where each phi gets
    ``select`` or one of ``phis`` along its loop's back edges and, entering it, ``constant``
    or the phi of an enclosing loop's header among ``phis``; else None."""
    own = {}
    for phi in phis:
        loop = next((lp for lp in loops.loops if lp.header is phi.parent), None)
        if loop is None:
            return None
        own[phi] = loop
    for phi, loop in own.items():
        for value, block in zip(phi.operands, phi.blocks):
            if loop.contains(block):
                if value is not select and value not in phis:
                    return None
            elif value is not constant and not (value in own and _encloses(own[value], loop)):
                return None
    outer = [lp for lp in own.values() if not any(_encloses(o, lp) for o in own.values())]
    return outer[0] if len(set(map(id, outer))) == 1 else None


def _encloses(outer, inner) -> bool:
    """Whether loop ``outer`` strictly encloses loop ``inner``."""
    parent = inner.parent
    while parent is not None:
        if parent is outer:
            return True
        parent = parent.parent
    return False


def _drop_unread(phis) -> None:
    """Erase ``phis`` where nothing but they read them."""
    if all(all(user in phis for user in phi.users) for phi in phis):
        for phi in phis:
            for k in range(len(phi.operands)):
                phi.set_operand(k, const_int(phi.type, 0))
        for phi in phis:
            phi.erase()
