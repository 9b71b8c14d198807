"""Calls of functions that have user rules (:mod:`pyzyme.rules.custom`), in both modes.

The call is replaced by calls of the user's rule functions, which Numba compiled; they use
Numba's native convention like the function itself (``i32 (ptr retptr, ptr excinfo, args...)``),
so a rule's arguments are the call's own operands, regrouped: each argument of the function is
followed by its shadow (its tangent, its shadow array, or a null ``None``). What the rule returns
lands where the function's result would: the primal in the call's ``retptr``, the tangent or
shadow in the shadow of ``retptr``.

The row's ``rules`` object (built by :mod:`pyzyme.api.custom_rules`) answers:

- ``name``: the function, as messages name it; ``abi``: its native layout (an ``AbiMap``:
  which native parameters each argument has, the offsets of the result's scalars);
- ``forward(shadowed, width, needs_shadow)``, ``augmented(shadowed, needs_shadow)`` and
  ``reverse(shadowed, needs_shadow)``: the compiled rule for a call whose arguments carry
  shadows where ``shadowed`` says, as an object with ``symbol`` (its native function), ``abi``
  (its layout), ``config`` (the :class:`~pyzyme.rules.custom.Config` it is compiled for) and
  ``elements``: the result fields of each element of what it returns.

Reverse mode keeps the scalars of the augmented rule's tape as values of the forward sweep (the
reverse sweep recomputes or caches them like any other), and releases the references the tape
holds when the reverse sweep is done, with the other deferred releases.
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.parser import parse_type
from pyzyme.ir.values import const_float, const_int, const_null

__all__ = ["forward_mode", "augmented", "reverse", "shadowed_args"]


# -- shared ------------------------------------------------------------------------------------
def _declare(cx, native) -> object:
    abi = native.abi
    params = [T.ptr, T.ptr] + [parse_type(p.llvm_type) for a in abi.args for p in a.params]
    return cx.module.declare(native.symbol, T.FunctionType(T.i32, params))


def _constant(ty: T.Type, value):
    if ty.is_float:
        return const_float(ty, float(value))
    if ty.is_pointer:
        return const_null(ty)
    return const_int(ty, int(value))


def _config_args(native) -> list:
    config = native.config
    out = []
    for p in native.abi.args[0].params:
        field = p.field.split(".", 1)[1]           # config.overwritten[2] -> overwritten[2]
        name, _, index = field.partition("[")
        value = getattr(config, name)
        if index:
            value = value[int(index.rstrip("]"))]
        out.append(_constant(parse_type(p.llvm_type), value))
    return out


def shadowed_args(abi, has_shadow) -> tuple[bool, ...]:
    """Per argument of the function: whether any of its native parameters has a shadow."""
    return tuple(any(has_shadow(p.index) for p in arg.params) for arg in abi.args)


def _shadow_params(arg, primal, shadow_of) -> list:
    """The native parameters of an argument's shadow: a pointer's shadow, a float's tangent
    (zero where it has none), integers (shape, strides) as the primal's; pointers without a
    shadow (a meminfo, the parent object) are null: the shadow is borrowed, never owned."""
    out = []
    for p, value in zip(arg.params, primal):
        ty = parse_type(p.llvm_type)
        d = shadow_of(p.index)
        if d is not None:
            out.append(d)
        elif ty.is_float or ty.is_pointer:
            out.append(_constant(ty, 0))
        else:
            out.append(value)
    return out


def _leaves(native, element: int) -> list:
    """The result fields of element ``element`` of what the rule returns, in order (the
    compiled rule lists them per element: primal, tangent; primal, shadow, tape; or one
    derivative per argument)."""
    return list(native.elements[element]) if element < len(native.elements) else []


def _load_leaves(b: IRBuilder, out, leaves, part: str) -> list:
    name = naming.rule_value(part)
    values = []
    for f in leaves:
        ptr = b.gep(T.i8, out, [const_int(T.i64, f.offset)], ("inbounds",)) if f.offset else out
        values.append(b.load(parse_type(f.llvm_type), ptr, name=name))
    return values


def _store_result(b: IRBuilder, fields, values, pointer) -> None:
    """Store the scalars of a result at the offsets the function's ``retptr`` has them."""
    for f, v in zip(fields, values):
        ptr = b.gep(T.i8, pointer, [const_int(T.i64, f.offset)], ("inbounds",)) \
            if f.offset else pointer
        b.store(v, ptr)


def _result_slot(b: IRBuilder, native) -> object:
    """A stack slot for the rule's result (in the entry block: a call in a loop reuses it)."""
    return b.entry_alloca(parse_type(native.abi.result.llvm_type), 16,
                          naming.rule_value("result"))


def _check_result(rules, where: str) -> None:
    if rules.abi.result.kind == "optional":
        raise UnsupportedError(f"{where} calls {rules.name}, which has custom rules and returns "
                               f"an Optional; rules for such functions are not supported")


# -- forward mode --------------------------------------------------------------------------------
def forward_mode(cx, inst: I.Call, row) -> None:
    """The forward-mode rule called in place of ``inst``."""
    rules = row.rules
    abi = rules.abi
    _check_result(rules, cx.where)
    width = cx.width
    args = inst.args

    def shadow_of(lane):
        return lambda i: (cx.derivs[args[i]][lane] if args[i] in cx.activity.varied
                          and args[i] in cx.derivs else None)

    shadowed = shadowed_args(abi, lambda i: args[i] in cx.activity.varied)
    retptr = args[0]
    needs_shadow = retptr in cx.derivs and any(f.llvm_type in ("double", "float", "ptr")
                                               for f in abi.result.fields)
    native = rules.forward(shadowed, width, needs_shadow)
    b = cx.builder
    out = _result_slot(b, native)
    fields = abi.result.fields
    per_call = width // native.lanes   # tangents each call takes
    status = None
    for call in range(native.lanes):
        call_args = [out, cx.value(args[1])] + _config_args(native)
        for arg, has in zip(abi.args, shadowed):
            primal = [cx.value(args[p.index]) for p in arg.params]
            call_args += primal
            if not has:
                call_args.append(const_null(T.ptr))
                continue
            for lane in range(call * per_call, (call + 1) * per_call):
                call_args += _shadow_params(arg, primal, shadow_of(lane))
        status = _first_failure(b, status, b.call(_declare(cx, native), call_args,
                                                  name=inst.name or naming.rule_value("status")))
        primal_leaves = _leaves(native, 0)
        if call == 0 and fields:
            _store_result(b, fields, _load_leaves(b, out, primal_leaves, "primal"),
                          cx.value(retptr))
        elif call > 0:  # the same primal again: an array of it is dropped now
            for v in _load_leaves(b, out, [f for f in primal_leaves if _is_meminfo(f)],
                                  "ref"):
                b.insert(_decref(cx, v))
        tangents = _load_leaves(b, out, _leaves(native, 1), "tangent")
        if needs_shadow:
            n = len(fields)
            for k in range(per_call):
                _store_result(b, fields, tangents[k * n:(k + 1) * n],
                              cx.derivs[retptr][call * per_call + k])
        else:  # a tangent array nobody takes is dropped now
            for f, v in zip(_leaves(native, 1), tangents):
                if _is_meminfo(f):
                    b.insert(_decref(cx, v))
    cx.values[inst] = status


def _first_failure(b: IRBuilder, status, new):
    """The status of a sequence of calls: the first nonzero one."""
    if status is None:
        return new
    return b.select(b.icmp("ne", status, const_int(T.i32, 0)), status, new)


# -- reverse mode ------------------------------------------------------------------------------
def augmented(cx, inst: I.Call, row) -> None:
    """Forward sweep: the augmented rule in place of ``inst``; its tape is kept for
    :func:`reverse`."""
    rules = row.rules
    abi = rules.abi
    _check_result(rules, cx.where)
    args = inst.args
    shadowed = shadowed_args(abi, lambda i: args[i] in cx.shadows)
    retptr = args[0]
    fields = abi.result.fields
    needs_shadow = retptr in cx.shadows and any(f.llvm_type in ("double", "float", "ptr")
                                                for f in fields)
    native = rules.augmented(shadowed, needs_shadow)
    b = cx.fb
    out = _result_slot(b, native)
    call_args = [out, cx.fwd_value(args[1])] + _config_args(native)
    for arg, has in zip(abi.args, shadowed):
        primal = [cx.fwd_value(args[p.index]) for p in arg.params]
        call_args += primal
        call_args += (_shadow_params(arg, primal, lambda i: cx.shadows.get(args[i]))
                      if has else [const_null(T.ptr)])
    status = b.call(_declare(cx, native), call_args,
                    name=inst.name or naming.rule_value("status"))
    cx.values[inst] = status
    if fields:
        _store_result(b, fields, _load_leaves(b, out, _leaves(native, 0), "primal"),
                      cx.fwd_value(retptr))
    shadow_leaves = _leaves(native, 1)
    if needs_shadow and any(f.llvm_type == "ptr" for f in fields):
        _store_result(b, fields, _load_leaves(b, out, shadow_leaves, "shadow"),
                      cx.shadows[retptr])
    else:
        _release_refs(cx, b, out, shadow_leaves)
    tape_leaves = _leaves(native, 2)
    tape = _load_leaves(b, out, tape_leaves, "tape")
    _release_refs(cx, b, out, tape_leaves, tape)
    cx.rule_calls[inst] = (native, shadowed, needs_shadow, tape)


def _nrt_decref(cx):
    return cx.module.declare("NRT_decref", T.FunctionType(T.void, [T.ptr]))


def _decref(cx, pointer) -> I.Call:
    """``NRT_decref(pointer)``, not inserted, in the calling convention the module defines it
    with (Numba's copy is ``fastcc``; a call in another convention would be undefined)."""
    fn = _nrt_decref(cx)
    call = I.Call(fn, [pointer], fn.function_type)
    call.cconv = next((w for w in fn.prefix.split() if w.endswith("cc") and w != "cc"), "")
    return call


def _is_meminfo(f) -> bool:
    return f.llvm_type == "ptr" and type(f.numba_type).__name__ == "MemInfoPointer"


def _release_refs(cx, b, out, leaves, values=None) -> None:
    """The references in ``leaves`` of the rule's result (arrays it returned and nobody
    keeps, or keeps only until the reverse sweep) are dropped when the reverse sweep is done."""
    refs = [f for f in leaves if _is_meminfo(f)]
    if not refs:
        return
    if values is None:
        values = _load_leaves(b, out, refs, "ref")
    else:
        values = [v for f, v in zip(leaves, values) if _is_meminfo(f)]
    for v in values:
        cx.release_later(_decref(cx, v), v, const_null(T.ptr))


def reverse(cx, inst: I.Call, row) -> None:
    """Reverse sweep: the reverse rule, with the tape kept by :func:`augmented`."""
    rules = row.rules
    abi = rules.abi
    native_aug, shadowed, needs_shadow, tape = cx.rule_calls[inst]
    native = rules.reverse(shadowed, needs_shadow)
    args = inst.args
    b = cx.rb
    retptr = args[0]
    out = _result_slot(b, native)
    call_args = [out, cx.primal(args[1])] + _config_args(native)
    # dret: what the result's store left in the shadow of retptr, moved out (as a store's
    # adjoint is); zeros where the result has no shadow.
    fields = abi.result.fields
    if not fields or any(f.llvm_type not in ("double", "float") for f in fields):
        call_args.append(const_null(T.ptr))  # dret is None: the result is not a float
    elif retptr in cx.shadows:
        shadow = cx.shadow(retptr)
        values = _load_leaves(b, shadow, fields, "dret")
        _store_result(b, fields, [_constant(v.type, 0) for v in values], shadow)
        call_args += values
    else:
        call_args += [_constant(parse_type(f.llvm_type), 0) for f in fields]
    call_args += [cx.avail(v) for v in tape]
    for arg, has in zip(abi.args, shadowed):
        primal = [cx.primal(args[p.index]) for p in arg.params]
        call_args += primal
        call_args += (_shadow_params(arg, primal, lambda i: cx.shadow(args[i])
                                     if args[i] in cx.shadows else None)
                      if has else [const_null(T.ptr)])
    status = b.call(_declare(cx, native), call_args, name=naming.rule_value("status"))
    _propagate_status(cx, b, status)
    # The compiled rule lists, per argument, the result fields of the derivative of each of
    # its floats (checked against the argument's type when it was compiled), else nothing.
    for k, arg in enumerate(abi.args):
        floats = [p for p in arg.params if p.llvm_type in ("double", "float")]
        leaves = _leaves(native, k)
        if not leaves:
            continue
        for p, v in zip(floats, _load_leaves(b, out, leaves, "adjoint")):
            cx.accumulate(args[p.index], v)


def _propagate_status(cx, b: IRBuilder, status) -> None:
    """A reverse rule that raised: the combined derivative returns its status (the caller then
    raises the exception it left). Elsewhere there is no status to return it through."""
    slot = cx.ret_slot
    if cx.sig.split or not cx.sig.status_return or slot is None or slot.type != T.i32:
        return
    failed = b.icmp("ne", status, const_int(T.i32, 0))
    b.store(b.select(failed, status, b.load(T.i32, slot.rev)), slot.rev)
