"""Indirect calls through a pointer to a library function that a global variable holds from
the start.

``struct { void *(*alloc)(size_t); } cfg = {malloc};`` then ``cfg.alloc(n)``: the call is
indirect, so pyzyme cannot tell that it allocates (the block gets no shadow, and an active store
into it is refused) nor apply the callee's rule. The global is writable, and another
translation unit may change it, so its initial value cannot simply be folded in. In the AD copy
(:mod:`~pyzyme.frontends.ad_copy`), before the globals lose their initial values, each such call
becomes a test and a direct call: where the pointer is still the function the initializer
holds, that function is called; elsewhere the derivative stops with ``__assert_fail``, naming
the global and the function assumed, rather than differentiate a call it knows nothing of.

Examples
--------
>>> from pyzyme import ir
>>> m = ir.parse_module('''@cfg = global { i32, ptr } { i32 0, ptr @malloc }
... declare ptr @malloc(i64)
... define ptr @get(i64 %n) {
...   %f = load ptr, ptr getelementptr (i8, ptr @cfg, i64 8)
...   %p = call ptr %f(i64 %n)
...   ret ptr %p
... }''')
>>> guard_global_callees(m)
1
>>> "call ptr @malloc(i64 %n)" in str(m)
True
"""

from __future__ import annotations

from pyzyme import ir, naming
from pyzyme.analysis.layout import sizeof, struct_layout
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import (ConstantAggregate, ConstantExpr, ConstantInt, ConstantString,
                              GlobalVariable, const_int)

__all__ = ["guard_global_callees"]

_TEXT, _EXPECT = naming.CALLEE_TEXT, naming.EXPECT_CALLEE


def guard_global_callees(module: ir.Module) -> int:
    """Turn each indirect call of ``module`` whose callee is loaded from a writable global
    variable at a place its initializer holds a function the module declares (a library
    function: one it defines is another symbol in the AD copy) into a direct call of it,
    behind a test that the pointer still is it (see the module docstring). Returns how many
    calls were turned."""
    turned = 0
    for fn in list(module.functions):
        for call in [i for i in fn.instructions() if isinstance(i, I.Call)]:
            target = _initial_callee(call.callee)
            if target is None:
                continue
            global_, offset, callee = target
            _guard(module, call, callee, f"the function pointer at byte {offset} of "
                   f"@{global_.name} is no longer @{callee.name}, its initial value, which "
                   f"pyzyme differentiated in @{fn.name}")
            turned += 1
    return turned


def _initial_callee(value):
    """(global, byte offset, function) when ``value`` is a pointer loaded from a writable
    global at a constant offset where its initializer holds a function; else None."""
    if not isinstance(value, I.Load) or not value.type.is_pointer:
        return None
    base, offset = _constant_address(value.pointer)
    if not isinstance(base, GlobalVariable) or base.is_constant or base.initializer is None:
        return None
    callee = _constant_at(base.initializer, base.value_type, offset)
    # A function the module defines is another symbol in the AD copy (an internal copy of
    # it) than the one the global holds, so only a declared function can be compared.
    if not isinstance(callee, ir.Function) or not callee.is_declaration:
        return None
    return base, offset, callee


def _constant_address(pointer) -> tuple[object, int]:
    """``pointer`` as a base and a constant byte offset (offset -1: not constant)."""
    offset = 0
    while isinstance(pointer, (I.GetElementPtr, ConstantExpr)):
        if isinstance(pointer, ConstantExpr):
            if pointer.opcode != "getelementptr":
                return pointer, -1
            source, base, indices = pointer.source_type, pointer.operands[0], pointer.operands[1:]
        else:
            source, base, indices = pointer.source_type, pointer.pointer, pointer.indices
        step = _gep_bytes(source, indices)
        if step is None:
            return base, -1
        offset += step
        pointer = base
    return pointer, offset


def _gep_bytes(ty, indices) -> int | None:
    """The byte offset of constant GEP ``indices`` over ``ty``; None if one is not constant."""
    if not all(isinstance(i, ConstantInt) for i in indices):
        return None
    offset = 0
    for n, idx in enumerate(indices):
        if n == 0:
            offset += idx.value * sizeof(ty)
        elif isinstance(ty, (T.ArrayType, T.VectorType)):
            ty = ty.element
            offset += idx.value * sizeof(ty)
        else:
            offset += struct_layout(ty)[0][idx.value]
            ty = ty.elements[idx.value]
    return offset


def _constant_at(const, ty, offset: int):
    """The constant that ``const`` (of type ``ty``) holds at byte ``offset``, descending into
    structs and arrays; None where it cannot be told."""
    if offset < 0:
        return None
    if offset == 0 and isinstance(const, ir.Function):
        return const
    if not isinstance(const, ConstantAggregate) or isinstance(const, ConstantString):
        return None
    if isinstance(ty, (T.ArrayType, T.VectorType)):
        size = sizeof(ty.element)
        k = offset // size
        if k >= len(const.elements):
            return None
        return _constant_at(const.elements[k], ty.element, offset - k * size)
    starts, _ = struct_layout(ty)
    for k in reversed(range(len(starts))):
        if starts[k] <= offset:
            return _constant_at(const.elements[k], ty.elements[k], offset - starts[k])
    return None


def _guard(module, call: I.Call, callee, message: str) -> None:
    """Make ``call`` directly on ``callee``, after a check that its callee pointer is
    ``callee`` (``__assert_fail(message)`` where it is not)."""
    b = ir.IRBuilder()
    b.position_before(call)
    same = b.icmp("eq", call.callee, callee)
    b.call(_expect(module), [same, _text(module, message), _text(module, call.function.name)])
    call.set_operand(0, callee)


def _expect(module):
    """``void pyzyme.expect_callee(i1 same, ptr message, ptr function)``: nothing when
    ``same``, else ``__assert_fail(message, "pyzyme", 0, function)``."""
    fn = module.get_function(_EXPECT)
    if fn is not None:
        return fn
    fn = module.add_function(_EXPECT, T.FunctionType(T.void, [T.i1, T.ptr, T.ptr]),
                             prefix="internal")
    same, message, function = fn.args
    same.name, message.name, function.name = "same", "message", "function"
    entry, changed, done = (fn.append_block(n) for n in ("entry", "changed", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(same, done, changed)
    b.position_at_end(changed)
    fail = module.declare("__assert_fail", T.FunctionType(T.void, [T.ptr, T.ptr, T.i32, T.ptr]))
    b.call(fail, [message, _text(module, "pyzyme"), const_int(T.i32, 0), function])
    b.unreachable()
    b.position_at_end(done)
    b.ret_void()
    return fn


def _text(module, text: str):
    """A private constant holding ``text`` (ASCII, NUL-terminated)."""
    body = "".join(c if c.isprintable() and c not in '"\\' else f"\\{ord(c):02X}"
                   for c in text) + "\\00"
    ty = T.ArrayType(len(text) + 1, T.i8)
    return module.add_global(module.unique_global_name(_TEXT), ty, ConstantString(ty, body),
                             is_constant=True, prefix="private unnamed_addr")
