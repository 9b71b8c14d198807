"""Derivatives of the vector intrinsics that have rows of their own: floating reductions
(:class:`~pyzyme.rules.spec.Reduction`: ``llvm.vector.reduce.fadd``, ...) and masked memory
(:class:`~pyzyme.rules.spec.Masked`: ``llvm.masked.load``, ``store``, ``gather``, ``scatter``),
in forward mode and in both sweeps of reverse mode.

- ``reduce.fadd(s, v) = s + v[0] + ...``: linear; the tangent is the same reduction of the
  tangents, the adjoint goes to ``s`` and, splatted, to every lane of ``v``.
- ``reduce.fmul(s, v)``: the partial in lane ``i`` is ``s`` times the other lanes, from prefix
  and suffix products (no division, so a zero lane is no special case).
- ``reduce.fmax/fmin/fmaximum/fminimum``: the derivative goes to one lane
  (:data:`~pyzyme.rules.intrinsics.LANE_PICK_NOTE`).
- Masked loads and stores are made on the shadows with the same mask. In reverse mode a load
  adds its adjoint into the shadow at the enabled lanes and gives the disabled ones to the
  pass-through operand; a store takes the shadow at the enabled lanes and zeroes them. A gather
  or scatter may name one address in several lanes, so its reverse goes lane by lane: a
  gather's adjoints all accumulate, and only the last lane a scatter writes to an address
  gets the adjoint there, as only its value stayed.
"""

from __future__ import annotations

from pyzyme.analysis.activity import can_carry_derivative, contains_type
from pyzyme.diff.emit import derivative_flags, type_suffix
from pyzyme.diff.memory_calls import with_args
from pyzyme.diff.pointers import no_shadow_error
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantFP, Poison, Value, const_int, const_null
from pyzyme.rules import spec

__all__ = ["reduction_forward", "reduction_augmented", "reduction_reverse", "masked_varied",
           "masked_forward", "masked_augmented", "masked_reverse"]


def masked_varied(row: spec.Masked, inst: I.CallBase, is_varied) -> bool:
    """Activity analysis: a masked load varies with its memory or its pass-through; a store
    has no result."""
    return row.value is None and (is_varied(inst.args[row.pointer])
                                  or is_varied(inst.args[row.passthru]))


# -- forward mode -------------------------------------------------------------------------------
def reduction_forward(cx, inst: I.Call, row: spec.Reduction) -> None:
    """Forward mode: the reduction, then its tangents."""
    new = cx.clone(inst)
    if inst not in cx.activity.varied:
        return
    b = cx.builder
    vector = inst.args[row.vector]
    v = new.args[row.vector]
    _fixed_width(cx, inst, vector.type)
    flags = derivative_flags(inst.flags)
    varied = vector in cx.activity.varied
    start = inst.args[row.start] if row.start is not None else None
    start_varied = start is not None and start in cx.activity.varied
    if row.op == "fadd":
        def make(k: int, name: str) -> Value:
            ds = cx.derivative(start, k)
            if not varied:
                return ds
            args = list(new.args)
            args[row.start], args[row.vector] = ds, cx.derivs[vector][k]
            return b.insert(_with_flags(with_args(new, args), flags), name)
    elif row.op == "fmul":
        others, product = _products(b, v, new.args[row.start], flags)

        def make(k: int, name: str) -> Value:
            if not varied:
                return b.fmul(product, cx.derivs[start][k], flags, name=name)
            by_lanes = _sum_lanes(cx.module, b, b.fmul(others, cx.derivs[vector][k], flags),
                                  flags, "" if start_varied else name)
            if not start_varied:
                return by_lanes
            return b.fadd(b.fmul(product, cx.derivs[start][k], flags), by_lanes, flags,
                          name=name)
    else:
        lane = _picked_lane(cx.module, b, v, new)

        def make(k: int, name: str) -> Value:
            return b.extractelement(cx.derivs[vector][k], lane, name=name)
    cx.lanes(inst, make)


def masked_forward(cx, inst: I.Call, row: spec.Masked) -> None:
    """Forward mode: the masked load or store, then the same on the shadows, tangents for
    values."""
    new = cx.clone(inst)
    b = cx.builder
    pointer = inst.args[row.pointer]
    _no_runtime_activity(cx, inst, pointer)
    shadows = cx.derivs.get(pointer)
    mask = new.args[row.mask]
    if row.value is None:
        if inst not in cx.activity.varied:
            return
        passthru = inst.args[row.passthru]

        def make(k: int, name: str) -> Value:
            dpass = cx.derivative(passthru, k)
            if shadows is None:  # memory without tangents: only the disabled lanes vary
                return b.select(mask, cx.inactive_derivative(inst), dpass, name=name)
            args = list(new.args)
            args[row.pointer], args[row.passthru] = shadows[k], dpass
            return b.insert(with_args(new, args), name)

        cx.lanes(inst, make)
        return
    value = inst.args[row.value]
    varied = value in cx.activity.varied
    if shadows is None:
        if varied:
            raise no_shadow_error(cx.where, inst, pointer)
        return
    for k in range(cx.width):
        if varied:
            d = cx.derivs[value][k]
        elif can_carry_derivative(value.type):
            d = cx.inactive_derivative(value)
        else:  # integers: the shadow keeps the primal's (sizes, counts)
            d = new.args[row.value]
        args = list(new.args)
        args[row.pointer], args[row.value] = shadows[k], d
        b.insert(with_args(new, args))


# -- reverse mode --------------------------------------------------------------------------------
def reduction_augmented(cx, inst: I.Call, row: spec.Reduction) -> None:
    """Reverse mode's forward sweep: the reduction (of a fixed-width vector, where it
    varies)."""
    cx.clone(inst)
    if inst in cx.activity.varied:
        _fixed_width(cx, inst, inst.args[row.vector].type)


def masked_augmented(cx, inst: I.Call, row: spec.Masked) -> None:
    """Reverse mode's forward sweep: the masked load or store; what the reverse sweep cannot
    handle is refused here, before any code is emitted for it."""
    cx.clone(inst)
    pointer = inst.args[row.pointer]
    _no_runtime_activity(cx, inst, pointer)
    moved = inst if row.value is None else inst.args[row.value]
    if pointer not in cx.shadows:
        if row.value is not None and moved in cx.activity.varied and \
                can_carry_derivative(moved.type):
            raise no_shadow_error(cx.where, inst, pointer)
        return
    if pointer.type.is_vector:  # its reverse goes lane by lane
        _fixed_width(cx, inst, pointer.type)
    if row.value is not None and not _floats_only(moved.type):
        # A plain store mirrors integers and pointers into the shadow after checking what
        # the memory holds; a masked one is refused rather than guessed.
        raise UnsupportedError(f"{cx.where} stores {moved.type} lanes into active memory with "
                               f"a mask; reverse mode supports masked stores of floats only: "
                               f"{inst}")
    if row.value is None and inst in cx.activity.varied and \
            contains_type(inst.type, lambda t: t.is_pointer):
        raise UnsupportedError(f"{cx.where} loads pointers from active memory with a mask; "
                               f"reverse mode does not support that yet: {inst}")


def masked_reverse(cx, inst: I.Call, row: spec.Masked) -> None:
    """The reverse sweep of a masked load or store."""
    if row.value is None:
        _masked_load_adjoints(cx, inst, row)
    else:
        _masked_store_adjoints(cx, inst, row)


def reduction_reverse(cx, inst: I.Call, row: spec.Reduction) -> None:
    """The reverse sweep of a reduction: its adjoint to the start value and the lanes."""
    if not cx.active(inst):
        return
    b = cx.rb
    d = cx.consume(inst)
    vector = inst.args[row.vector]
    n = vector.type.count
    flags = derivative_flags(inst.flags)
    start = inst.args[row.start] if row.start is not None else None
    if row.op == "fadd":
        if start is not None and cx.active(start):
            cx.accumulate(start, d)
        if cx.active(vector):
            cx.accumulate(vector, b.splat(d, n))
    elif row.op == "fmul":
        others, product = _products(b, cx.primal(vector), cx.primal(start), flags)
        if cx.active(start):
            cx.accumulate(start, b.fmul(product, d, flags))
        if cx.active(vector):
            cx.accumulate(vector, b.fmul(others, b.splat(d, n), flags))
    elif cx.active(vector):
        lane = _picked_lane(cx.module, b, cx.primal(vector), cx.primal(inst))
        cx.accumulate(vector, b.insertelement(const_null(vector.type), d, lane))


def _masked_load_adjoints(cx, inst: I.Call, row: spec.Masked) -> None:
    if not cx.active(inst):
        return
    b = cx.rb
    d = cx.consume(inst)
    pointer = inst.args[row.pointer]
    mask = cx.primal(inst.args[row.mask])
    if pointer in cx.shadows:
        shadow = cx.shadow(pointer)
        if pointer.type.is_vector:  # lane by lane: two lanes may read one address
            for i in range(d.type.count):
                at = const_int(T.i32, i)
                one = b.insertelement(Poison(T.VectorType(1, d.type.element)),
                                      b.extractelement(d, at), const_int(T.i32, 0))
                _accumulate_masked(cx, b, inst, row, b.extractelement(shadow, at),
                                   b.bitcast(b.extractelement(mask, at), T.VectorType(1, T.i1)),
                                   one)
        else:
            _accumulate_masked(cx, b, inst, row, shadow, mask, d)
    passthru = inst.args[row.passthru]
    if cx.active(passthru):
        cx.accumulate(passthru, b.select(mask, const_null(d.type), d))


def _accumulate_masked(cx, b: IRBuilder, inst, row, shadow, mask, d) -> None:
    """``shadow[lane] += d[lane]`` at the lanes ``mask`` enables."""
    align = inst.arg_attrs[row.pointer]
    old = _masked_load(cx.module, b, shadow, mask, const_null(d.type), align)
    _masked_store(cx.module, b, b.fadd(old, d, cx.sum_flags), shadow, mask, align)


def _masked_store_adjoints(cx, inst: I.Call, row: spec.Masked) -> None:
    pointer = inst.args[row.pointer]
    value = inst.args[row.value]
    if pointer not in cx.shadows:
        return
    b = cx.rb
    shadow = cx.shadow(pointer)
    mask = cx.primal(inst.args[row.mask])
    align = inst.arg_attrs[row.pointer]
    ty = value.type
    if not pointer.type.is_vector:
        d = _masked_load(cx.module, b, shadow, mask, const_null(ty), align)
        _masked_store(cx.module, b, const_null(ty), shadow, mask, align)
    else:
        # The last lane a scatter writes to an address is the one whose value stayed there:
        # the lanes are visited from the last, each taking the adjoint and zeroing it.
        d = const_null(ty)
        lane_ty = T.VectorType(1, ty.element)
        for i in reversed(range(ty.count)):
            at = const_int(T.i32, i)
            address = b.extractelement(shadow, at)
            enabled = b.bitcast(b.extractelement(mask, at), T.VectorType(1, T.i1))
            one = _masked_load(cx.module, b, address, enabled, const_null(lane_ty), align)
            _masked_store(cx.module, b, const_null(lane_ty), address, enabled, align)
            d = b.insertelement(d, b.extractelement(one, const_int(T.i32, 0)), at)
    if cx.active(value):
        cx.accumulate(value, d)


# -- helpers ------------------------------------------------------------------------------------
def _masked_load(module, b: IRBuilder, pointer, mask, passthru, align: str) -> Value:
    ty = passthru.type
    fn = module.declare(f"llvm.masked.load.{type_suffix(ty)}.p{pointer.type.addrspace}",
                        T.FunctionType(ty, [pointer.type, mask.type, ty]))
    return b.insert(I.Call(fn, [pointer, mask, passthru], fn.function_type,
                           arg_attrs=[align, "", ""]))


def _masked_store(module, b: IRBuilder, value, pointer, mask, align: str) -> None:
    ty = value.type
    fn = module.declare(f"llvm.masked.store.{type_suffix(ty)}.p{pointer.type.addrspace}",
                        T.FunctionType(T.void, [ty, pointer.type, mask.type]))
    b.insert(I.Call(fn, [value, pointer, mask], fn.function_type, arg_attrs=["", align, ""]))


def _sum_lanes(module, b: IRBuilder, v: Value, flags, name: str = "") -> Value:
    """The sum of the lanes of ``v`` (``llvm.vector.reduce.fadd`` from -0.0, the identity)."""
    scalar = v.type.element
    fn = module.declare(f"llvm.vector.reduce.fadd.{type_suffix(v.type)}",
                        T.FunctionType(scalar, [scalar, v.type]))
    return b.call(fn, [ConstantFP(scalar, -0.0, "-0.000000e+00"), v], flags=flags, name=name)


def _products(b: IRBuilder, v: Value, start: Value, flags) -> tuple[Value, Value]:
    """``(others, product)``: ``others[i]`` is ``start`` times every lane of ``v`` but lane
    ``i`` (prefix times suffix products, no division); ``product`` is every lane's product."""
    n = v.type.count
    lanes = [b.extractelement(v, const_int(T.i32, i)) for i in range(n)]
    before = [start]          # before[i] = start * v[0] * ... * v[i - 1]
    for lane in lanes[:-1]:
        before.append(b.fmul(before[-1], lane, flags))
    after: list[Value | None] = [None] * n   # after[i] = v[i + 1] * ... * v[n - 1]
    product = None
    for i in reversed(range(n)):
        after[i] = product
        product = lanes[i] if product is None else b.fmul(lanes[i], product, flags)
    others: Value = Poison(v.type)
    for i in range(n):
        other = before[i] if after[i] is None else b.fmul(before[i], after[i], flags)
        others = b.insertelement(others, other, const_int(T.i32, i))
    return others, product


def _picked_lane(module, b: IRBuilder, v: Value, result: Value) -> Value:
    """The lane of ``v`` a max/min reduction's derivative goes to: the first equal to
    ``result``, or where ``result`` is NaN the first NaN lane (an i32)."""
    n = v.type.count
    equal = b.fcmp("oeq", v, b.splat(result, n))
    hit = b.select(b.fcmp("uno", result, result), b.fcmp("uno", v, v), equal)
    bits = T.IntType(n)
    cttz = module.declare(f"llvm.cttz.i{n}", T.FunctionType(bits, [bits, T.i1]))
    first = b.call(cttz, [b.bitcast(hit, bits), const_int(T.i1, 0)])
    if n != 32:
        first = b.zext(first, T.i32) if n < 32 else b.trunc(first, T.i32)
    # No lane hit (a poison result): lane 0 rather than an index past the end.
    return b.select(b.icmp("eq", first, const_int(T.i32, n)), const_int(T.i32, 0), first)


def _with_flags(call: I.Call, flags) -> I.Call:
    call.flags = tuple(flags)
    return call


def _floats_only(ty: T.Type) -> bool:
    return ty.is_float and not contains_type(ty, lambda t: t.is_int or t.is_pointer)


def _fixed_width(cx, inst, ty: T.Type) -> None:
    if ty.scalable:
        raise UnsupportedError(f"{cx.where} uses scalable vectors ({ty}); pyzyme "
                               f"differentiates fixed-width vectors only: {inst}")


def _no_runtime_activity(cx, inst, pointer) -> None:
    if pointer in cx.runtime:
        raise UnsupportedError(f"{cx.where} loads or stores with a mask memory whose activity "
                               f"is known only at run time; runtime activity does not cover "
                               f"that yet: {inst}")
