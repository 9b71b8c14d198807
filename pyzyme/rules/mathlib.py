"""Math functions that derivatives need but libm does not have, defined by pyzyme in IR.

``pow_less1(x, y, r)`` is ``x ** (y - 1)`` given ``r = x ** y``: ``pow``'s derivative in ``x``
from its own result by one division (``r / x``), where ``r`` is a normal number (so the division
is as accurate as ``pow``), and ``pow(x, y - 1)`` otherwise (``x = 0``, ``r`` zero, subnormal or
not finite). A derivative that calls ``pow`` again costs twice the primal where ``pow`` is the
work (a Taylor series); this one costs a division. ``pyzyme.pow_less1``/``pyzyme.pow_less1f``.

``int_power(x, n)`` is ``x ** n`` for an integer ``n >= 0`` by binary exponentiation, the
multiplications in Numba's order (``int_power_impl``: ``r *= a`` for each set bit of ``n``, then
``a *= a``), so a loop Numba inlined for ``x ** i`` can be replaced by a call that computes it
bitwise the same (:mod:`pyzyme.transforms.int_power`); its derivative is then a rule,
``n * int_power(x, n - 1)``, not a differentiated loop with a tape of its squares.
``pyzyme.int_power``/``pyzyme.int_powerf`` take the exponent as an ``i64``.
``int_power_pair(x, n)`` is ``{x ** n, x ** (n - 1)}`` from one loop of squarings, each power
multiplied as ``int_power`` multiplies it (bitwise the same): a derivative needs both, and two
loops cost twice one (:func:`pyzyme.transforms.int_power.pair`). ``pyzyme.int_power_pair``/
``pyzyme.int_power_pairf``.

``zero_remainder(m, zero)`` is ``zero``: the signed zero Python's ``x % y`` gives where the
remainder ``m`` is zero (``y``'s sign), standing for ``m`` there, so that its derivative is
``m``'s (:mod:`pyzyme.transforms.zero_remainder`). ``pyzyme.zero_remainder``/
``pyzyme.zero_remainderf``.

``lgamma' = digamma`` and ``tgamma' = tgamma * digamma``, and C has no digamma. Rule expressions
call it as ``call("digamma", x)``; its :class:`~pyzyme.rules.expr.MathFunction` has the symbol
``pyzyme.digamma``. This module owns both of its implementations, which follow one algorithm
step for step:

- :func:`digamma`, on Python floats, for :func:`pyzyme.rules.expr.evaluate`;
- :func:`define`, which adds ``double @pyzyme.digamma(double)`` (and
  ``float @pyzyme.digammaf(float)``, the C convention for the float spelling) to a
  :class:`pyzyme.ir.Module`, for derivative code to call.

The algorithm (as in Cephes' ``psi`` and Boost's ``digamma``, without their rational
approximations):

1. ``x < 0``: reflection, ``psi(x) = psi(1 - x) - pi / tan(pi * x)``. ``tan`` has period 1 in
   ``pi * x``, so it is evaluated at ``r = x - rint(x)`` in ``[-0.5, 0.5]``, which is exact;
   ``r == 0`` (a pole at a non-positive integer) gives NaN, as ``scipy.special.digamma`` does.
2. recurrence, ``psi(x) = psi(x + 1) - 1/x``, until ``x >= 10``.
3. the asymptotic series ``psi(x) = log(x) - 1/(2x) - sum_k B_2k / (2k x^2k)`` to ``k = 7``; at
   ``x >= 10`` the first omitted term is below ``5e-17``.

``psi(+0) = -inf`` and ``psi(-0) = +inf`` (the one-sided limits), ``psi(+inf) = +inf``,
``psi(-inf) = NaN``. The error is a few ulp of the largest term summed, so it is relative to
``|psi(x)|`` except near the zeros of digamma (``x = 1.4616...`` and one in each negative unit
interval), where it is absolute (about ``1e-15``).

Examples
--------
>>> round(digamma(1.0), 14)  # minus Euler's constant
-0.57721566490153
>>> digamma(-2.0)
nan
"""

from __future__ import annotations

import math

from pyzyme import ir, naming

__all__ = ["digamma", "pow_less1", "int_power", "c_pow", "define", "SYMBOLS"]

# The functions define() can add.
SYMBOLS = naming.MATH_HELPERS

# The smallest normal numbers, by IR type name: r / x is used where |r| is at least this.
_NORMAL_MIN = {"double": 2.2250738585072014e-308, "float": 1.1754943508222875e-38}

# Asymptotic series: psi(x) ~ log(x) - 1/(2x) - w * P(w) with w = 1/x^2 and P's coefficients
# B_2k / 2k for k = 1..7 (B_2 = 1/6, B_4 = -1/30, B_6 = 1/42, B_8 = -1/30, B_10 = 5/66,
# B_12 = -691/2730, B_14 = 7/6), lowest power first.
_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)
_ASYMPTOTIC_FROM = 10.0


def digamma(x: float) -> float:
    """The digamma function ``psi(x) = d/dx log(Gamma(x))`` on a Python float.

    Parameters
    ----------
    x
        Any float; non-positive integers give NaN (poles), ``+0``/``-0`` give ``-inf``/``+inf``.

    Returns
    -------
    float
        ``psi(x)``, computed as ``@pyzyme.digamma`` computes it (see the module docstring).
    """
    x = float(x)
    if not math.isfinite(x):
        return x if x > 0 else math.nan
    if x == 0.0:
        return math.copysign(math.inf, -x)  # the loop below divides by zero here
    acc = 0.0
    if x < 0.0:
        r = x - round(x)  # round() is rint: ties to even
        if r == 0.0:
            return math.nan
        acc = -math.pi / math.tan(math.pi * r)
        x = 1.0 - x
    while x < _ASYMPTOTIC_FROM:
        acc -= 1.0 / x
        x += 1.0
    w = 1.0 / (x * x)
    p = 0.0
    for c in reversed(_SERIES):
        p = c + w * p
    return acc + (math.log(x) - 0.5 / x - w * p)


def _odd_integer(v: float) -> bool:
    return v.is_integer() and v % 2.0 == 1.0


def c_pow(x: float, y: float) -> float:
    """C's ``pow`` (C11 Annex F) where Python's raises: ``pow(+-0, y < 0)`` is an infinity,
    overflow is an infinity with the sign of ``x`` when ``y`` is an odd integer."""
    try:
        return math.pow(x, y)
    except ValueError:  # 0 to a negative power, or a negative base to a non-integer power
        if x == 0.0:
            return math.copysign(math.inf, x) if _odd_integer(y) else math.inf
        return math.nan
    except OverflowError:
        return -math.inf if x < 0.0 and _odd_integer(y) else math.inf


def pow_less1(x: float, y: float, r: float) -> float:
    """``x ** (y - 1)`` given ``r = x ** y``, as ``@pyzyme.pow_less1`` computes it.

    Examples
    --------
    >>> pow_less1(2.0, 10.0, 1024.0)   # r / x
    512.0
    >>> pow_less1(0.0, 0.5, 0.0)       # pow(0, -0.5)
    inf
    """
    if x != 0.0 and _NORMAL_MIN["double"] <= abs(r) < math.inf:
        return r / x
    return c_pow(x, y - 1.0)


def int_power(x: float, n: int) -> float:
    """``x ** n`` for an integer ``n >= 0``, multiplied as ``@pyzyme.int_power`` does.

    Examples
    --------
    >>> int_power(3.0, 5), int_power(0.1, 3) == 0.1 * (0.1 * 0.1), int_power(2.0, 0)
    (243.0, True, 1.0)
    """
    x, n = float(x), int(n) & (2 ** 64 - 1)  # the IR shifts the exponent as unsigned
    r = 1.0
    while n:
        if n & 1:
            r *= x
        n >>= 1
        x *= x
    return r


def define(module: ir.Module, symbol: str) -> ir.Function:
    """Add the definition of ``symbol`` (one of :data:`SYMBOLS`) to ``module``.

    The function is ``internal`` (each module that needs it gets its own copy, which LLVM may
    inline) and ``memory(none)``, so LLVM can merge and hoist its calls. Intrinsics it calls
    are declared when the module lacks them. Calling this again returns the existing function.

    Parameters
    ----------
    module
        The module to define it in.
    symbol
        One of :data:`SYMBOLS`: ``"pyzyme.digamma"`` (double) or ``"pyzyme.digammaf"``
        (float: fpext, the double version, fptrunc), and likewise for ``pow_less1``,
        ``int_power`` and ``zero_remainder``.

    Returns
    -------
    pyzyme.ir.Function
        The defined function.

    Raises
    ------
    ValueError
        For a symbol this module does not define.
    """
    if symbol not in SYMBOLS:
        raise ValueError(f"pyzyme.rules.mathlib defines {SYMBOLS}, not {symbol!r}")
    fn = module.get_function(symbol)
    if fn is not None and not fn.is_declaration:
        return fn
    ty = ir.float if symbol.endswith("f") else ir.double
    power, less1 = symbol.startswith(naming.INT_POWER), symbol.startswith(naming.POW_LESS1)
    pair = symbol.startswith(naming.INT_POWER_PAIR)
    zero = symbol.startswith(naming.ZERO_REMAINDER)
    params = [ty, ir.i64] if power else [ty] * 3 if less1 else [ty] * 2 if zero else [ty]
    if fn is None:
        result = ir.StructType([ty, ty]) if pair else ty
        fn = module.add_function(symbol, ir.FunctionType(result, params))
    fn.prefix = "internal"
    fn.suffix = "nounwind willreturn memory(none)"
    if pair:
        _build_int_power_pair(fn, ty)
    elif power:
        _build_int_power(fn, ty)
    elif zero:
        fn.args[0].name, fn.args[1].name = "remainder", "zero"
        ir.IRBuilder(fn.append_block("entry")).ret(fn.args[1])
    elif less1:
        _build_pow_less1(module, fn, ty)
    elif ty is ir.double:
        _build_digamma(module, fn)
    else:
        b = ir.IRBuilder(fn.append_block("entry"))
        wide = b.fpext(fn.args[0], ir.double, name="x")
        psi = b.call(define(module, naming.DIGAMMA), [wide], name="psi")
        b.ret(b.fptrunc(psi, ir.float, name="psif"))
    return fn


def _build_pow_less1(module: ir.Module, fn: ir.Function, ty) -> None:
    """The body of ``@pyzyme.pow_less1`` (``ty`` double) or ``pow_less1f`` (float): a branch
    to ``r / x`` or to ``pow(x, y - 1)`` (see :func:`pow_less1`)."""
    x, y, r = fn.args
    x.name, y.name, r.name = "x", "y", "r"
    entry, divide, again = (fn.append_block(n) for n in ("entry", "divide", "again"))
    b = ir.IRBuilder(entry)
    suffix = "f64" if ty is ir.double else "f32"
    size = b.call(_intrinsic(module, f"llvm.fabs.{suffix}", 1, ty), [r], name="size")
    normal = b.and_(b.fcmp("oge", size, ir.const_float(ty, _NORMAL_MIN[str(ty)])),
                    b.fcmp("olt", size, ir.const_float(ty, math.inf)), name="normal")
    usable = b.and_(normal, b.fcmp("one", x, ir.const_float(ty, 0.0)), name="usable")
    b.cbranch(usable, divide, again)
    b.position_at_end(divide)
    b.ret(b.fdiv(r, x, name="quotient"))
    b.position_at_end(again)
    pow_ = _intrinsic(module, f"llvm.pow.{suffix}", 2, ty)
    b.ret(b.call(pow_, [x, b.fsub(y, ir.const_float(ty, 1.0), name="less1")], name="pow"))


def _build_int_power(fn: ir.Function, ty) -> None:
    """The body of ``@pyzyme.int_power`` (``ty`` double) or ``int_powerf``: Numba's loop,
    guarded for ``n == 0`` (see :func:`int_power`)."""
    x, n = fn.args
    x.name, n.name = "x", "n"
    entry, loop, done = (fn.append_block(name) for name in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    one = ir.const_float(ty, 1.0)
    zero = ir.const_int(ir.i64, 0)
    b.cbranch(b.icmp("eq", n, zero, name="none"), done, loop)
    b.position_at_end(loop)
    r, a, e = b.phi(ty, name="r"), b.phi(ty, name="a"), b.phi(ir.i64, name="e")
    odd = b.icmp("ne", b.and_(e, ir.const_int(ir.i64, 1)), zero, name="odd")
    r_next = b.select(odd, b.fmul(r, a), r, name="r.next")
    e_next = b.lshr(e, ir.const_int(ir.i64, 1), name="e.next")
    a_next = b.fmul(a, a, name="a.next")
    b.cbranch(b.icmp("eq", e_next, zero, name="last"), done, loop)
    for phi, start, step in ((r, one, r_next), (a, x, a_next), (e, n, e_next)):
        phi.add_incoming(start, entry)
        phi.add_incoming(step, loop)
    b.position_at_end(done)
    result = b.phi(ty, name="power")
    result.add_incoming(one, entry)
    result.add_incoming(r_next, loop)
    b.ret(result)


def _build_int_power_pair(fn: ir.Function, ty) -> None:
    """The body of ``@pyzyme.int_power_pair`` (``ty`` double) or ``int_power_pairf``: the loop
    of :func:`_build_int_power` with a second product, for the exponent ``n - 1``, until both
    exponents run out; each product meets the squares its own loop would."""
    x, n = fn.args
    x.name, n.name = "x", "n"
    entry, loop, done = (fn.append_block(name) for name in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    one, zero = ir.const_float(ty, 1.0), ir.const_int(ir.i64, 0)
    bit = ir.const_int(ir.i64, 1)
    m = b.add(n, ir.const_int(ir.i64, -1), name="m")
    b.cbranch(b.icmp("eq", b.or_(n, m), zero, name="none"), done, loop)
    b.position_at_end(loop)
    r, q, a = b.phi(ty, name="r"), b.phi(ty, name="q"), b.phi(ty, name="a")
    e, f = b.phi(ir.i64, name="e"), b.phi(ir.i64, name="f")
    r_next = b.select(b.icmp("ne", b.and_(e, bit), zero), b.fmul(r, a), r, name="r.next")
    q_next = b.select(b.icmp("ne", b.and_(f, bit), zero), b.fmul(q, a), q, name="q.next")
    e_next, f_next = b.lshr(e, bit, name="e.next"), b.lshr(f, bit, name="f.next")
    a_next = b.fmul(a, a, name="a.next")
    b.cbranch(b.icmp("eq", b.or_(e_next, f_next), zero, name="last"), done, loop)
    for phi, start, step in ((r, one, r_next), (q, one, q_next), (a, x, a_next),
                             (e, n, e_next), (f, m, f_next)):
        phi.add_incoming(start, entry)
        phi.add_incoming(step, loop)
    b.position_at_end(done)
    powers = []
    for name, step in (("power", r_next), ("less1", q_next)):
        phi = b.phi(ty, name=name)
        phi.add_incoming(one, entry)
        phi.add_incoming(step, loop)
        powers.append(phi)
    both = b.insertvalue(ir.Undef(fn.function_type.ret), powers[0], 0)
    b.ret(b.insertvalue(both, powers[1], 1))


def _intrinsic(module: ir.Module, name: str, nargs: int = 1, ty=ir.double) -> ir.Function:
    return module.declare(name, ir.FunctionType(ty, [ty] * nargs))


def _build_digamma(module: ir.Module, fn: ir.Function) -> None:
    """The body of ``@pyzyme.digamma``, block for block the steps of :func:`digamma`."""
    def c(v: float) -> ir.ConstantFP:
        return ir.const_float(ir.double, v)

    x = fn.args[0]
    x.name = "x"
    entry, reflect, shifted = (fn.append_block(n) for n in ("entry", "reflect", "shifted"))
    loop, step, series = (fn.append_block(n) for n in ("loop", "step", "series"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.fcmp("olt", x, c(0.0), name="negative"), reflect, shifted)

    # psi(x) = psi(1 - x) - pi / tan(pi * r), r = x - rint(x) exact; NaN at the poles (r == 0).
    b.position_at_end(reflect)
    r = b.fsub(x, b.call(_intrinsic(module, "llvm.rint.f64"), [x], name="n"), name="r")
    tan = b.call(_intrinsic(module, "llvm.tan.f64"), [b.fmul(c(math.pi), r)], name="tan")
    cot = b.fdiv(c(-math.pi), tan, name="reflected")
    pole = b.fcmp("oeq", r, c(0.0), name="pole")
    acc0 = b.select(pole, c(math.nan), cot, name="acc0")
    mirrored = b.fsub(c(1.0), x, name="mirrored")
    b.br(shifted)

    b.position_at_end(shifted)
    start = b.phi(ir.double, name="start")
    start.add_incoming(x, entry)
    start.add_incoming(mirrored, reflect)
    start_acc = b.phi(ir.double, name="start.acc")
    start_acc.add_incoming(c(0.0), entry)
    start_acc.add_incoming(acc0, reflect)
    b.br(loop)

    # psi(v) = psi(v + 1) - 1/v until v >= 10 (NaN and +inf leave at once).
    b.position_at_end(loop)
    v = b.phi(ir.double, name="v")
    acc = b.phi(ir.double, name="acc")
    b.cbranch(b.fcmp("olt", v, c(_ASYMPTOTIC_FROM), name="small"), step, series)
    b.position_at_end(step)
    acc_next = b.fsub(acc, b.fdiv(c(1.0), v), name="acc.next")
    v_next = b.fadd(v, c(1.0), name="v.next")
    b.br(loop)
    v.add_incoming(start, shifted)
    v.add_incoming(v_next, step)
    acc.add_incoming(start_acc, shifted)
    acc.add_incoming(acc_next, step)

    b.position_at_end(series)
    w = b.fdiv(c(1.0), b.fmul(v, v), name="w")
    p = c(0.0)
    for coefficient in reversed(_SERIES):
        p = b.fadd(c(coefficient), b.fmul(w, p))
    log = b.call(_intrinsic(module, "llvm.log.f64"), [v], name="log")
    tail = b.fsub(b.fsub(log, b.fdiv(c(0.5), v)), b.fmul(w, p), name="tail")
    b.ret(b.fadd(acc, tail, name="psi"))
