"""Calls of functions whose derivatives the module registers itself, Enzyme's way.

A C/C++ program declares a derivative with a global (read by
:func:`pyzyme.frontends.c.registrations.find_registrations` into a
:class:`~pyzyme.rules.spec.Registered` row)::

    void *__enzyme_register_gradient_f[3] = {(void *)f, (void *)f_aug, (void *)f_rev};
    void *__enzyme_register_derivative_f[2] = {(void *)f, (void *)f_fwd};

The rule functions are plain functions of the module, called in place of ``f`` with Enzyme's
conventions (``CreateAugmentedPrimal``/``CreatePrimalAndGradient``/``CreateForwardDiff`` with a
custom rule, where every argument is taken as differentiable):

- **forward** ``f_fwd``: each argument followed by its tangent when it is a float, or its
  shadow when it is a pointer; it returns the tangent of the result, or ``{primal, tangent}``
  (void for a void ``f``). Called once per lane in vector mode. When it returns the tangent
  only and the primal result is used, ``f`` itself is called for it.
- **augmented forward** ``f_aug``: each argument followed by its shadow when it is a pointer;
  it returns, by its type (``R`` being ``f``'s result type): ``R`` (the primal), ``{tape, R}``,
  ``{R, R}`` (primal and shadow), ``{tape, R, R}``, void, or anything else (the tape alone).
  When it returns no primal result and one is used, ``f`` itself is called for it (as in
  forward mode), provided ``f`` writes nothing outside its own frame; a pointer result must
  come from ``f_aug`` with its shadow.
- **reverse** ``f_rev``: the same arguments, then the seed of the result when ``R`` is a
  float, then the tape when ``f_aug`` returns one; it returns the derivatives of ``f``'s float
  arguments, in order: void when there are none, the value when there is one, a struct.

An argument without a derivative gets a zero tangent (a float) or, as in Enzyme, its primal as
shadow (a pointer: a rule can tell, since under Enzyme's runtime activity a shadow equal to its
primal means "inactive"); the derivative returned for a constant float is dropped. The tape is
one value of the forward sweep: the reverse sweep gets it back as any other value (cached per
iteration in a loop).
"""

from __future__ import annotations

from pyzyme.analysis.overwrite import underlying_object
from pyzyme import naming
from pyzyme.diff.calls.callee import augmented_call, call_derivative, reverse_call
from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import READ_WRITE
from pyzyme.ir.values import Undef, const_null

__all__ = ["forward_mode", "augmented", "reverse", "expected_params"]


def _floaty(ty: T.Type) -> bool:
    return ty.is_float or (ty.is_vector and ty.scalar.is_float)


def expected_params(fn, mode: str) -> list:
    """The parameter types Enzyme's convention gives the ``mode`` (``"forward"`` or
    ``"augmented"``) rule of ``fn``: each parameter, followed by its shadow where it has one."""
    out = []
    for ty in fn.function_type.params:
        out.append(ty)
        if ty.is_pointer or (mode == "forward" and _floaty(ty)):
            out.append(ty)
    return out


def _show(types) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


def _rule(cx, row, name: str, what: str, callee):
    fn = cx.module.get_function(name)
    if fn is None:
        raise UnsupportedError(f"{row.source}: the {what} function @{name} of {callee.ref} is "
                               f"not in the module", hint="define it in the same file")
    if any("sret" in a.attrs for a in fn.args):
        raise UnsupportedError(f"{row.source}: the {what} function {fn.ref} returns a struct "
                               f"through memory (sret), which is not supported",
                               hint="return at most two doubles, or write results through "
                                    "pointer arguments")
    return fn


def _mismatch(row, what: str, fn, callee, expected, why: str = "") -> UnsupportedError:
    return UnsupportedError(
        f"{row.source}: the {what} function {fn.ref} takes {_show(fn.function_type.params)}, "
        f"but Enzyme's convention for {callee.ref} {_show(callee.function_type.params)} is "
        f"{_show(expected)}{why}",
        hint="each argument is followed by its shadow (pointers) or tangent (floats, forward "
             "mode only); the reverse function then takes the result's seed (a float result) "
             "and the tape")


def _check(row, what: str, fn, callee, expected) -> None:
    if list(fn.function_type.params) != list(expected):
        raise _mismatch(row, what, fn, callee, expected)


# -- forward mode ------------------------------------------------------------------------------
def forward_mode(cx, inst: I.Call, row) -> None:
    """The registered forward derivative in place of ``inst``."""
    callee = inst.called_function
    if row.forward is None:
        if not callee.is_declaration:
            call_derivative(cx, inst, callee)
            return
        raise UnsupportedError(
            f"{cx.where} calls {callee.ref} in forward mode: {row.source} registers only a "
            f"gradient for it, and it has no body to differentiate",
            hint=f"register a forward derivative: void *__enzyme_register_derivative_"
                 f"{callee.name}[2] = {{(void *){callee.name}, (void *){callee.name}_fwd}};")
    rule = _rule(cx, row, row.forward, "forward derivative", callee)
    _check(row, "forward derivative", rule, callee, expected_params(callee, "forward"))
    ret, rret = callee.return_type, rule.return_type
    pair = ret != T.void and rret == T.StructType([ret, ret])
    if not pair and rret != ret:
        raise UnsupportedError(
            f"{row.source}: the forward derivative {rule.ref} returns {rret}; for "
            f"{callee.ref} it must return {ret} (the tangent)"
            + (f" or {{ {ret}, {ret} }} (primal, tangent)" if ret != T.void else ""))
    b = cx.builder
    primal = None
    if ret != T.void and not pair and inst.users:
        primal = cx.clone(inst)  # the rule gives the tangent only
    tangents = []
    for lane in range(cx.width):
        args = []
        for a in inst.args:
            v = cx.value(a)
            args.append(v)
            if a.type.is_pointer or _floaty(a.type):
                d = cx.derivs.get(a) if a in cx.activity.varied else None
                args.append(d[lane] if d is not None else
                            (v if a.type.is_pointer else const_null(a.type)))
        out = b.call(rule, args, name=naming.rule_value("tangent") if ret != T.void else "")
        if pair:
            if primal is None:
                primal = b.extractvalue(out, 0, name=inst.name)
            tangents.append(b.extractvalue(out, 1, name=naming.tangent(inst.name, lane,
                                                                         cx.width)))
        else:
            tangents.append(out)
    cx.values[inst] = primal if primal is not None else Undef(ret) if ret != T.void else out
    if ret != T.void and inst in cx.activity.varied:
        cx.derivs[inst] = tangents


# -- reverse mode ------------------------------------------------------------------------------
def _augmented_layout(rret: T.Type, ret: T.Type) -> dict:
    """Where Enzyme finds the tape, the primal and the result's shadow in what the augmented
    forward function returns (-1: the whole value)."""
    if rret == T.void:
        return {}
    if ret != T.void and rret == ret:
        return {"primal": -1}
    if isinstance(rret, T.StructType):
        els = list(rret.elements)
        if len(els) == 3:
            return {"tape": 0, "primal": 1, "shadow": 2}
        if len(els) == 2 and els[0] == els[1]:
            return {"primal": 0, "shadow": 1}
        if len(els) == 2:
            return {"tape": 0, "primal": 1}
    return {"tape": -1}


def augmented(cx, inst: I.Call, row) -> None:
    """Forward sweep: the registered augmented forward function in place of ``inst``; what the
    reverse sweep needs is kept for :func:`reverse`."""
    callee = inst.called_function
    if row.augmented is None:
        if not callee.is_declaration:
            augmented_call(cx, inst, callee)
            return
        raise UnsupportedError(
            f"{cx.where} calls {callee.ref} in reverse mode: {row.source} registers only a "
            f"forward derivative for it, and it has no body to differentiate",
            hint=f"register a gradient: void *__enzyme_register_gradient_{callee.name}[3] = "
                 f"{{(void *){callee.name}, (void *)augment, (void *)reverse}};")
    aug = _rule(cx, row, row.augmented, "augmented forward", callee)
    rev = _rule(cx, row, row.reverse, "reverse", callee)
    params = expected_params(callee, "augmented")
    _check(row, "augmented forward", aug, callee, params)
    ret = callee.return_type
    layout = _augmented_layout(aug.return_type, ret)
    b = cx.fb
    args, shadows = [], []
    for a in inst.args:
        v = cx.fwd_value(a)
        args.append(v)
        if a.type.is_pointer:
            s = cx.shadows.get(a)
            s = v if s is None else s  # Enzyme: a constant pointer is its own shadow
            args.append(s)
            shadows.append(s)
    out = b.call(aug, args, name=naming.rule_value("primal") if layout else "")

    def part(key: str, name: str = ""):
        k = layout.get(key)
        if k is None:
            return None
        return out if k == -1 else b.extractvalue(out, k, name=name)

    tape = part("tape", naming.rule_value("tape"))
    rev_params = params + ([ret] if _floaty(ret) else [])
    if tape is not None:
        rev_params.append(tape.type)
    if list(rev.function_type.params) != rev_params:
        why = "" if tape is not None or len(rev.function_type.params) != len(rev_params) + 1 \
            else f" ({aug.ref} returns no tape for its last parameter)"
        raise _mismatch(row, "reverse", rev, callee, rev_params, why)
    _check_adjoints(row, rev, callee)
    cx.values[inst] = Undef(ret) if ret != T.void else out
    if ret != T.void:
        primal = part("primal", inst.name)
        if primal is not None:
            cx.values[inst] = primal
        elif inst.users and not ret.is_pointer and _leaves_memory_alone(callee):
            # Enzyme's convention: the augmented function returns the primal result only
            # when it is a pointer; otherwise the function itself computes it, and calling it
            # a second time is harmless when it writes nothing outside its own frame.
            cx.clone(inst)
        elif inst.users:
            raise UnsupportedError(
                f"{row.source}: the augmented forward function {aug.ref} returns "
                f"{aug.return_type}, which holds no primal result of {callee.ref}, and "
                f"{cx.where} uses it", hint=f"return {{ tape, {ret} }} or {ret}")
        if ret.is_pointer and inst in cx.activity.varied:
            shadow = part("shadow", naming.rule_value("shadow"))
            if shadow is None:
                raise UnsupportedError(
                    f"{row.source}: {callee.ref} returns a pointer with a shadow in "
                    f"{cx.where}, but {aug.ref} returns no shadow for it",
                    hint=f"return {{ {ret}, {ret} }} (primal, shadow) or "
                         f"{{ tape, {ret}, {ret} }}")
            cx.shadows[inst] = shadow
    cx.rule_calls[inst] = ("registered", rev, shadows, tape)


def _leaves_memory_alone(fn) -> bool:
    """Whether ``fn`` (defined) writes only to its own stack frame and calls only intrinsics
    that write nothing: a second call changes nothing but its result."""
    if fn.is_declaration:
        return False
    for inst in fn.instructions():
        if isinstance(inst, I.Store):
            if not isinstance(underlying_object(inst.pointer), I.Alloca):
                return False
        elif isinstance(inst, I.CallBase):
            callee = inst.called_function
            if callee is None or not callee.name.startswith(_HARMLESS_INTRINSICS):
                return False
        elif inst.opcode in READ_WRITE:
            return False
    return True


_HARMLESS_INTRINSICS = ("llvm.lifetime.", "llvm.dbg.", "llvm.assume", "llvm.experimental.noalias",
                        "llvm.fabs.", "llvm.sqrt.", "llvm.fma", "llvm.fmuladd", "llvm.minnum",
                        "llvm.maxnum", "llvm.copysign", "llvm.floor", "llvm.ceil")


def _check_adjoints(row, rev, callee) -> None:
    floats = [t for t in callee.function_type.params if _floaty(t)]
    rret = rev.return_type
    if rret == T.void:
        got = []
    elif isinstance(rret, T.StructType):
        got = list(rret.elements)
    else:
        got = [rret]
    if got != floats:
        want = "void" if not floats else str(floats[0]) if len(floats) == 1 else \
            str(T.StructType(floats))
        raise UnsupportedError(
            f"{row.source}: the reverse function {rev.ref} returns {rret}; for {callee.ref} "
            f"it must return {want}: the derivative of each float argument, in order")


def reverse(cx, inst: I.Call, row) -> None:
    """Reverse sweep: the registered reverse function, its adjoints accumulated (the callee's
    own reverse where no gradient is registered, nothing where the call was made as it is)."""
    if inst in cx.callee_tapes:
        reverse_call(cx, inst)
        return
    if inst not in cx.rule_calls:
        return
    _, rev, shadows, tape = cx.rule_calls[inst]
    callee = inst.called_function
    b = cx.rb
    args, kept = [], iter(shadows)
    for a in inst.args:
        args.append(cx.primal(a))
        if a.type.is_pointer:
            args.append(cx.avail(next(kept)))
    ret = callee.return_type
    if _floaty(ret):
        args.append(cx.consume(inst) if cx.active(inst) else const_null(ret))
    if tape is not None:
        args.append(cx.avail(tape))
    out = b.call(rev, args, name=naming.rule_value("adjoint") if rev.return_type != T.void
                 else "")
    floats = [a for a in inst.args if _floaty(a.type)]
    if not floats:
        return
    if isinstance(rev.return_type, T.StructType):
        adjoints = [b.extractvalue(out, k, name=naming.rule_value("adjoint"))
                    for k in range(len(floats))]
    else:
        adjoints = [out]
    for a, d in zip(floats, adjoints):
        cx.accumulate(a, d)
