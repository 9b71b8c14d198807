"""Numba's ``x ** i`` loop folded into a call, before differentiation.

Numba computes a float to an integer power by binary exponentiation and inlines the loop
(exponents up to 65536; larger ones call ``pow``)::

    loop:  r = phi [1.0, pre], [r', loop]
           a = phi [x, pre],   [a', loop]
           e = phi [i, pre],   [e', loop]
           r' = select (e & 1) != 0, r * a, r
           e' = e >> 1
           a' = a * a
           br e' == 0, exit, loop

Differentiated as a loop, it costs a tape of ``r`` and ``a`` for every step of every power
(the reverse sweep has to walk the squarings backwards), about ten times the primal in a
Taylor series. As a function it has a rule: ``d/dx x^i = i x^(i-1)``, which the reverse sweep
recomputes from ``x`` and ``i`` with no tape. :func:`fold` replaces each such loop by a call of
``@pyzyme.int_power`` (:mod:`pyzyme.rules.mathlib`), which runs the same multiplications in the
same order, so the primal's results are bitwise the same. (A zero exponent, which the loop
above never sees because Numba guards it, gives 1.0 either way.)

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define double @f(double %x, i64 %i) {
... entry:
...   br label %loop
... loop:
...   %r = phi double [ 1.0, %entry ], [ %r1, %loop ]
...   %a = phi double [ %x, %entry ], [ %a1, %loop ]
...   %e = phi i64 [ %i, %entry ], [ %e1, %loop ]
...   %bit = and i64 %e, 1
...   %even = icmp eq i64 %bit, 0
...   %ra = fmul double %r, %a
...   %r1 = select i1 %even, double %r, double %ra
...   %e1 = lshr i64 %e, 1
...   %a1 = fmul double %a, %a
...   %done = icmp eq i64 %e1, 0
...   br i1 %done, label %exit, label %loop
... exit:
...   ret double %r1
... }''')
>>> fn = m.get_function("f")
>>> for power in find(fn):
...     print(power)
%loop: %x ** %i, result %r1
>>> fold(m, fn)
1
>>> print(fn)
define double @f(double %x, i64 %i) {
entry:
  br label %loop.int_power
<BLANKLINE>
loop.int_power:
  %r1.1 = call double @pyzyme.int_power(double %x, i64 %i)
  br label %exit
<BLANKLINE>
exit:
  ret double %r1.1
}
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme.analysis.loops import analyze_loops
from pyzyme import naming
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.values import ConstantFP, ConstantInt
from pyzyme.rules import mathlib

__all__ = ["Power", "find", "fold", "pair"]


@dataclass
class Power:
    """One binary-exponentiation loop: ``base ** exponent`` leaves it as ``result``."""

    block: BasicBlock
    enter: BasicBlock        # the one block outside the loop that branches into it
    exit: BasicBlock
    base: object
    exponent: object
    result: I.Instruction

    def __str__(self) -> str:
        return (f"{self.block.ref}: {self.base.ref} ** {self.exponent.ref}, "
                f"result {self.result.ref}")


def find(fn) -> list[Power]:
    """The binary-exponentiation loops of ``fn`` (see the module docstring)."""
    found = []
    for loop in analyze_loops(fn).loops:
        if len(loop.blocks) == 1:
            power = _match(loop.header)
            if power is not None:
                found.append(power)
    return found


def fold(module, fn) -> int:
    """Replace every loop :func:`find` finds in ``fn`` by a call of ``@pyzyme.int_power``,
    defined in ``module`` (``fn``'s); how many."""
    if fn.name in mathlib.SYMBOLS:
        return 0   # @pyzyme.int_power's own loop has this shape
    done = 0
    while True:   # one at a time: a fold changes the blocks around it (the next loop's entry)
        powers = find(fn)
        if not powers:
            return done
        _fold(module, fn, powers[0])
        done += 1


def _match(block) -> Power | None:
    term = block.terminator
    if not (isinstance(term, I.Branch) and term.is_conditional and block in term.successors):
        return None
    exit_block = next((s for s in term.successors if s is not block), None)
    if exit_block is None:
        return None
    phis = block.phis
    ints = [p for p in phis if p.type.is_int]
    floats = [p for p in phis if p.type.is_float]
    if len(phis) != 3 or len(ints) != 1 or len(floats) != 2:
        return None
    e = ints[0]
    enter = {blk for phi in phis for _, blk in phi.incoming if blk is not block}
    if len(enter) != 1 or any(len(phi.incoming) != 2 for phi in phis):
        return None
    enter = enter.pop()

    def start(phi):
        return next(v for v, blk in phi.incoming if blk is enter)

    def step(phi):
        return next(v for v, blk in phi.incoming if blk is block)

    # a' = a * a picks out a; r is the other float phi.
    a = next((p for p in floats if _is(step(p), "fmul", p, p)), None)
    if a is None:
        return None
    r = floats[0] if floats[1] is a else floats[1]
    e1, r1, a1 = step(e), step(r), step(a)
    if not (_is(e1, "lshr", e, _int(1)) and isinstance(r1, I.Select)
            and isinstance(start(r), ConstantFP) and start(r).value == 1.0
            and e.type.width <= 64):
        return None
    odd, taken, kept = r1.operands
    odd_test = _odd_test(odd, e)
    if odd_test is None:
        return None
    used, is_odd = odd_test
    times = taken if is_odd else kept
    if (kept if is_odd else taken) is not r or not (_is(times, "fmul", r, a)
                                                   or _is(times, "fmul", a, r)):
        return None
    last = _last_test(term, e, e1, exit_block)
    if last is None:
        return None
    matched = {e, r, a, e1, r1, a1, times, term, *used, *last}
    if set(block.instructions) != matched or len(block.instructions) != len(matched):
        return None
    if any(u.parent is not block for inst in matched - {r1} for u in getattr(inst, "users", ())):
        return None
    return Power(block, enter, exit_block, start(a), start(e), r1)


def _is(v, opcode: str, x, y) -> bool:
    """``v`` is ``opcode x, y`` computed in the same block as ``x``'s phi, x and y in order."""
    return isinstance(v, I.BinaryOp) and v.opcode == opcode and \
        _same(v.operands[0], x) and _same(v.operands[1], y)


def _same(v, want) -> bool:
    if isinstance(want, ConstantInt):
        return isinstance(v, ConstantInt) and v.value == want.value
    return v is want


def _int(value: int) -> ConstantInt:
    return ConstantInt(T.i64, value)


def _odd_test(cond, e):
    """``(instructions, True)`` if ``cond`` says ``e`` is odd, ``(..., False)`` if even."""
    if isinstance(cond, I.Cast) and cond.opcode == "trunc" and cond.operands[0] is e and \
            cond.type == T.i1:
        return [cond], True
    if not (isinstance(cond, I.Compare) and cond.predicate in ("eq", "ne")):
        return None
    bit, zero = cond.operands
    if not (_is(bit, "and", e, _int(1)) and isinstance(zero, ConstantInt) and zero.value == 0):
        return None
    return [cond, bit], cond.predicate == "ne"


def _last_test(term, e, e1, exit_block):
    """The instructions of the loop's exit test, if it leaves exactly when ``e >> 1 == 0``."""
    cond = term.operands[0]
    if not isinstance(cond, I.Compare):
        return None
    x, c = cond.operands
    if not isinstance(c, ConstantInt):
        return None
    leaves_when_true = term.successors[0] is exit_block
    tests = {("eq", e1, 0): True, ("ne", e1, 0): False,
             ("ult", e, 2): True, ("ugt", e, 1): False}
    want = next((v for (p, on, k), v in tests.items()
                 if cond.predicate == p and x is on and c.value == k), None)
    if want is None or want != leaves_when_true:
        return None
    return [cond]


def _fold(module, fn, power: Power) -> None:
    block = power.block
    new = BasicBlock(fn, fn.unique_name(naming.int_power(block.name)))
    fn.blocks.insert(fn.blocks.index(block), new)
    b = IRBuilder(new)
    exponent = power.exponent
    if exponent.type.width < 64:
        exponent = b.zext(exponent, T.i64)   # the loop shifts it as unsigned
    symbol = naming.INT_POWER + ("f" if power.result.type == T.float else "")
    callee = mathlib.define(module, symbol)
    value = b.call(callee, [power.base, exponent], name=power.result.name)
    b.br(power.exit)
    power.enter.terminator.replace_uses_of(block, new)
    for phi in power.exit.phis:
        phi.blocks = [new if blk is block else blk for blk in phi.blocks]
    power.result.replace_all_uses_with(value)
    fn.remove_blocks([block])


def pair(module) -> int:
    """Join each two calls ``@pyzyme.int_power(x, n)`` and ``@pyzyme.int_power(x, n - 1)`` of
    one block of ``module`` into one call of ``@pyzyme.int_power_pair(x, n)``, which walks
    the squares of ``x`` once for both (:mod:`pyzyme.rules.mathlib`; the results are bitwise
    the same); how many pairs. A derivative computes ``x ** i`` and its partial
    ``i * x ** (i - 1)`` side by side (forward mode, and forward mode over reverse), which two
    loops of squarings make twice the primal's work in a Taylor series.

    Examples
    --------
    >>> from pyzyme.ir import parse_module
    >>> m = parse_module('''
    ... declare double @pyzyme.int_power(double, i64)
    ... define double @f(double %x, i64 %i) {
    ... entry:
    ...   %r = call double @pyzyme.int_power(double %x, i64 %i)
    ...   %j = add i64 %i, -1
    ...   %q = call double @pyzyme.int_power(double %x, i64 %j)
    ...   %s = fadd double %r, %q
    ...   ret double %s
    ... }''')
    >>> pair(m)
    1
    >>> print(m.get_function("f"))
    define double @f(double %x, i64 %i) {
    entry:
      %r.pair = call { double, double } @pyzyme.int_power_pair(double %x, i64 %i)
      %r.1 = extractvalue { double, double } %r.pair, 0
      %q.1 = extractvalue { double, double } %r.pair, 1
      %j = add i64 %i, -1
      %s = fadd double %r.1, %q.1
      ret double %s
    }
    """
    done = 0
    for suffix in ("", "f"):
        callee = module.get_function(naming.INT_POWER + suffix)
        if callee is None:
            continue
        calls = [u for u in callee.users if isinstance(u, I.Call) and u.called_function is callee]
        by_operands = {(c.parent, c.args[0], c.args[1]): c for c in calls}
        for less in calls:
            m = less.args[1]
            if not (isinstance(m, I.BinaryOp) and m.opcode == "add"
                    and _same(m.operands[1], _int(-1))):
                continue
            power = by_operands.get((less.parent, less.args[0], m.operands[0]))
            if power is None or less.parent is None or power.parent is None:
                continue
            _join(module, power, less, naming.INT_POWER_PAIR + suffix)
            done += 1
    return done


def _join(module, power: I.Call, less: I.Call, symbol: str) -> None:
    """``power`` (``x ** n``) and ``less`` (``x ** (n - 1)``) from one call, placed at the
    first of them (``n`` is defined before both: ``less`` uses ``n - 1``)."""
    block = less.parent
    first = min(power, less, key=block.instructions.index)
    b = IRBuilder()
    b.position_before(first)
    both = b.call(mathlib.define(module, symbol), [power.args[0], power.args[1]],
                  name=f"{power.name or 'power'}.pair")
    for k, call in enumerate((power, less)):
        call.replace_all_uses_with(b.extractvalue(both, k, name=call.name))
        call.erase()
