"""Calls through function pointers in reverse mode: the pointer's shadow holds the callee's
derivative.

As in Enzyme, the shadow of a function pointer that differentiated code calls is the address
of two function pointers, ``{augmented, reverse}`` (what ``__enzyme_virtualreverse`` makes:
:mod:`pyzyme.frontends.c.virtual_shadows`), in the convention of Enzyme's custom gradients
(:mod:`pyzyme.diff.calls.registered`), every pointer argument duplicated and every float
argument active:

- ``augmented(each argument, followed by its shadow when it is a pointer)`` returns the tape
  (a pointer) when the function returns nothing, else ``{tape, result}``;
- ``reverse(the same arguments, then the result's seed when it is a float, then the tape)``
  returns the derivatives of the float arguments in order: nothing, the value, or a struct.

Only a function pointer read from memory the caller hands in (through its arguments, by
loads and getelementptrs: a struct's field, an object's vtable) is taken to have such a
shadow; memory the function makes itself has no pairs in its shadow, and a call through a
pointer read from there keeps the error for calls without a derivative. A null shadow stops
the program with a message. A call whose pointer arguments do not all have shadows, or that
passes or returns anything but pointers, integers and floats, is refused (the pair's
functions assume them).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme import naming
from pyzyme.diff.memory_calls import abort, message_text, write_stderr
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import ADDRESS_CASTS
from pyzyme.ir.values import Argument, const_int, const_null

__all__ = ["augmented_type", "reverse_type", "unsupported", "augmented", "reverse"]


def _scalar(ty: T.Type) -> bool:
    return ty.is_pointer or ty.is_int or ty.is_float


def unsupported(fnty: T.FunctionType) -> str | None:
    """Why a function of type ``fnty`` cannot be called through a shadow pair, or None."""
    for ty in fnty.params:
        if not _scalar(ty):
            return f"it takes a {ty} argument"
    if fnty.var_arg:
        return "it is variadic"
    if fnty.ret.is_pointer:
        return "it returns a pointer"
    if fnty.ret != T.void and not _scalar(fnty.ret):
        return f"it returns {fnty.ret}"
    return None


def _interleaved(fnty: T.FunctionType) -> list:
    out = []
    for ty in fnty.params:
        out += [ty, ty] if ty.is_pointer else [ty]
    return out


def augmented_type(fnty: T.FunctionType) -> T.FunctionType:
    """The type of the augmented function of a pair for functions of type ``fnty``."""
    ret = T.ptr if fnty.ret == T.void else T.StructType([T.ptr, fnty.ret])
    return T.FunctionType(ret, _interleaved(fnty))


def reverse_type(fnty: T.FunctionType) -> T.FunctionType:
    """The type of the reverse function of a pair for functions of type ``fnty``."""
    floats = [t for t in fnty.params if t.is_float]
    ret = T.void if not floats else floats[0] if len(floats) == 1 else T.StructType(floats)
    seed = [fnty.ret] if fnty.ret.is_float else []
    return T.FunctionType(ret, _interleaved(fnty) + seed + [T.ptr])


@dataclass(frozen=True)
class _Tape:
    reverse: object   # the reverse function (forward sweep)
    tape: object
    shadows: tuple    # the pointer arguments' shadows (forward sweep), in order


def augmented(cx, inst: I.Call) -> bool:
    """Reverse mode's forward sweep of the indirect call ``inst``: its augmented function,
    from the shadow of the function pointer. False when the pointer has no such shadow (the
    call is then not this module's)."""
    pair = cx.shadows.get(inst.callee)
    if pair is None or not _handed_in(inst.callee):
        return False
    fnty = inst.function_type
    why = unsupported(fnty)
    if why is not None:
        raise UnsupportedError(f"{cx.where} calls a function through a pointer whose shadow "
                               f"holds its derivative, but {why}: {inst}",
                               hint="call the function directly")
    b = cx.fb
    args, shadows = [], []
    for a in inst.args:
        v = cx.fwd_value(a)
        args.append(v)
        if a.type.is_pointer:
            s = cx.shadows.get(a)
            if s is None:
                raise UnsupportedError(
                    f"{cx.where} passes {a.ref if a.name else a} without a shadow to a function "
                    f"called through a pointer, whose derivative takes one: {inst}",
                    hint="pass that memory with a shadow (enzyme_dup)")
            args.append(s)
            shadows.append(s)
    pair = _checked(cx.module, b, pair, f"pyzyme: {cx.where} calls a function through a "
                    f"pointer whose shadow is null; make the shadow of a function pointer "
                    f"with __enzyme_virtualreverse\n")
    aug = b.load(T.ptr, pair, 8, name="indirect.aug")
    rev = b.load(T.ptr, b.gep(T.i8, pair, [const_int(T.i64, 8)]), 8, name="indirect.rev")
    out = b.call(aug, args, augmented_type(fnty), name="indirect.out")
    if fnty.ret == T.void:
        tape = out
    else:
        tape = b.extractvalue(out, 0, name="indirect.tape")
        cx.values[inst] = b.extractvalue(out, 1, name=inst.name)
    cx.indirect[inst] = _Tape(rev, tape, tuple(shadows))
    return True


def _handed_in(pointer) -> bool:
    """Whether ``pointer`` is read from memory the function's caller hands in."""
    loads = 0
    for _ in range(64):
        if isinstance(pointer, Argument):
            return loads > 0
        if isinstance(pointer, I.Load):
            loads += 1
            pointer = pointer.pointer
        elif isinstance(pointer, I.GetElementPtr) or (
                isinstance(pointer, I.Cast) and pointer.opcode in ADDRESS_CASTS):
            pointer = pointer.operands[0]
        else:
            return False
    return False


_CHECK = naming.INDIRECT_PAIR


def _checked(module, b, pair, message: str):
    """``pair``, after a check that it is not null (else ``message`` and abort)."""
    fn = module.get_function(_CHECK)
    if fn is None:
        fn = module.add_function(_CHECK, T.FunctionType(T.ptr, [T.ptr, T.ptr, T.i64]),
                                 prefix="internal")
        p, text, size = fn.args
        entry, stop, ok = (fn.append_block(n) for n in ("entry", "stop", "ok"))
        fb = IRBuilder(entry)
        fb.cbranch(fb.icmp("eq", p, const_null(T.ptr)), stop, ok)
        fb.position_at_end(stop)
        write_stderr(module, fb, text, size)
        abort(module, fb)
        fb.position_at_end(ok)
        fb.ret(p)
    return b.call(fn, [pair, *message_text(module, message, _CHECK)], name="indirect.pair")


def reverse(cx, inst: I.Call) -> None:
    """The reverse sweep of an indirect call: its reverse function, the derivatives of its
    active float arguments accumulated."""
    saved = cx.indirect[inst]
    fnty = inst.function_type
    b = cx.rb
    args, kept = [], iter(saved.shadows)
    for a in inst.args:
        args.append(cx.primal(a))
        if a.type.is_pointer:
            args.append(cx.avail(next(kept)))
    if fnty.ret.is_float:
        args.append(cx.consume(inst) if cx.active(inst) else const_null(fnty.ret))
    args.append(cx.avail(saved.tape))
    rtype = reverse_type(fnty)
    out = b.call(cx.avail(saved.reverse), args, rtype)
    floats = [a for a in inst.args if a.type.is_float]
    for k, a in enumerate(floats):
        d = out if len(floats) == 1 else b.extractvalue(out, k)
        cx.accumulate(a, d)
