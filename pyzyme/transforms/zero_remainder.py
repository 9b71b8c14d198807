"""The signed zero of Python's ``x % y`` where the remainder is zero, given the remainder's
derivative, before differentiation.

Numba lowers ``%`` on floats as CPython does (``float_divmod``)::

    m = frem x, y                         ; C's fmod: m has x's sign
    if m != 0:  r = m + y if (m < 0) != (y < 0) else m
    else:       r = +0.0, or -0.0 if y < 0 ; CPython squares m to make it +0; LLVM folds that

Differentiated as it stands, ``r`` is a constant wherever ``m`` is zero (``x`` a multiple of
``y``, an angle ``atan2(0, x) % (2 pi)``), so its derivative there is 0, where ``x % y = x - y
floor(x / y)`` has slope 1 in ``x`` on both sides (JAX's and PyTorch's remainders give 1). A
gradient through an angle normalized this way came out wrong at such points: poliastro's
``rv2coe`` on an orbit in the reference plane, a derivative of 7.1 where it is 0.34.

:func:`fold` finds each merge of a remainder ``m``'s values (``m``, or ``m`` plus or minus
something: a phi or a select) with a signed-zero constant on the path where ``m == 0``, and
passes that constant through ``@pyzyme.zero_remainder(m, zero)``, whose value is the constant
and whose derivative is ``m``'s (:mod:`pyzyme.rules.mathlib`, :mod:`pyzyme.rules.libm`). The
primal's results are bitwise the same. A merge that gives anything else where ``m`` is zero
(``0.0 if m == 0 else m * m``) is left alone: there the constant does not stand for ``m``.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define double @f(double %x) {
... entry:
...   %m = frem double %x, 2.0
...   %nz = fcmp une double %m, 0.0
...   br i1 %nz, label %sign, label %out
... sign:
...   %neg = fcmp olt double %m, 0.0
...   %up = fadd double %m, 2.0
...   %fixed = select i1 %neg, double %up, double %m
...   br label %out
... out:
...   %r = phi double [ %fixed, %sign ], [ 0.0, %entry ]
...   ret double %r
... }''')
>>> fn = m.get_function("f")
>>> [str(site) for site in find(fn)]
['%r: 0.0 where %m is zero']
>>> fold(m, fn)
1
>>> print(fn)
define double @f(double %x) {
entry:
  %m = frem double %x, 2.0
  %nz = fcmp une double %m, 0.0
  %m.zero = call double @pyzyme.zero_remainder(double %m, double 0.0)
  br i1 %nz, label %sign, label %out
<BLANKLINE>
sign:
  %neg = fcmp olt double %m, 0.0
  %up = fadd double %m, 2.0
  %fixed = select i1 %neg, double %up, double %m
  br label %out
<BLANKLINE>
out:
  %r = phi double [ %fixed, %sign ], [ %m.zero, %entry ]
  ret double %r
}
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme import naming
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantFP
from pyzyme.rules import mathlib

__all__ = ["Site", "find", "fold"]

# How far a merge's other values may be from the remainder: m, m + y, select(s, m + y, m).
_DEPTH = 3


@dataclass
class Site:
    """A merge ``at`` whose operand ``index`` is the signed zero given where ``remainder`` is
    zero; for a phi, the call goes at the end of the incoming block ``block``."""

    at: I.Instruction
    index: int
    remainder: I.Instruction
    block: object = None

    def __str__(self) -> str:
        return f"{self.at.ref}: {self.at.operands[self.index].ref} where " \
               f"{self.remainder.ref} is zero"


def find(fn) -> list[Site]:
    """The signed zeros of ``fn`` that stand for a zero remainder (the module docstring)."""
    sites: list[Site] = []
    for m in fn.instructions():
        if m.opcode != "frem" or m.type not in (T.double, T.float):
            continue
        for test in m.users:
            when_zero = _zero_test(test, m)
            if when_zero is None:
                continue
            for user in test.users:
                if isinstance(user, I.Select) and user.operands[0] is test:
                    sites += _select_site(user, 1 if when_zero else 2, m)
                elif isinstance(user, I.Branch) and user.is_conditional:
                    sites += _phi_sites(user, 0 if when_zero else 1, m)
    return sites


def fold(module, fn) -> int:
    """Pass each signed zero :func:`find` finds in ``fn`` (of ``module``) through
    ``@pyzyme.zero_remainder``; how many."""
    if fn.name in mathlib.SYMBOLS:
        return 0
    sites = find(fn)
    for site in sites:
        symbol = naming.ZERO_REMAINDER + ("f" if site.remainder.type == T.float else "")
        callee = mathlib.define(module, symbol)
        if site.block is not None:   # a phi's incoming value: at the end of its block
            b = IRBuilder(site.block)
            b.position_before(site.block.terminator)
        else:
            b = IRBuilder(site.at.parent)
            b.position_before(site.at)
        zero = site.at.operands[site.index]
        value = b.call(callee, [site.remainder, zero],
                       name=naming.zero_remainder(site.remainder.name))
        site.at.set_operand(site.index, value)
    return len(sites)


def _zero_test(test, m) -> bool | None:
    """What ``test`` is where ``m`` is zero, if it is ``m != 0`` or ``m == 0`` (else None)."""
    if not (isinstance(test, I.Compare) and test.opcode == "fcmp"
            and test.predicate in ("une", "oeq")):
        return None
    a, b = test.operands
    other = b if a is m else a if b is m else None
    if not (isinstance(other, ConstantFP) and other.value == 0.0):
        return None
    return test.predicate == "oeq"


def _signed_zero(v) -> bool:
    """A zero constant, or a select of two (the divisor's sign picking one)."""
    if isinstance(v, ConstantFP):
        return v.value == 0.0
    return isinstance(v, I.Select) and all(
        isinstance(c, ConstantFP) and c.value == 0.0 for c in v.operands[1:])


def _of_remainder(v, m, depth: int = _DEPTH) -> bool:
    """``v`` is ``m``, ``m`` plus or minus something, or a select of such values."""
    if v is m:
        return True
    if depth == 0:
        return False
    if isinstance(v, I.BinaryOp) and v.opcode in ("fadd", "fsub"):
        a, b = v.operands
        return _of_remainder(a, m, depth - 1) or (v.opcode == "fadd"
                                                  and _of_remainder(b, m, depth - 1))
    if isinstance(v, I.Select):
        return all(_of_remainder(o, m, depth - 1) for o in v.operands[1:])
    return False


def _select_site(select: I.Select, index: int, m) -> list[Site]:
    other = select.operands[3 - index]
    if _signed_zero(select.operands[index]) and _of_remainder(other, m):
        return [Site(select, index, m)]
    return []


def _phi_sites(branch: I.Branch, side: int, m) -> list[Site]:
    """The phis that the branch's edge taken where ``m`` is zero reaches with a signed zero:
    directly, or through a block of its own that only passes on to them."""
    here, target = branch.parent, branch.successors[side]
    if branch.successors[1 - side] is target:
        return []
    edges = [(here, target)]
    term = target.terminator
    if target.predecessors == [here] and isinstance(term, I.Branch) and not term.is_conditional:
        edges.append((target, term.successors[0]))
    found = []
    for source, block in edges:
        for phi in block.phis:
            incoming = list(phi.incoming)
            picks = [k for k, (_, b) in enumerate(incoming) if b is source]
            rest = [v for v, b in incoming if b is not source]
            if len(picks) == 1 and rest and _signed_zero(incoming[picks[0]][0]) \
                    and all(_of_remainder(v, m) for v in rest):
                found.append(Site(phi, picks[0], m, source))
    return found
