"""Calls derivative code makes of its own: memory it allocates, copies, zeroes and frees
(``malloc``, ``llvm.memcpy``, ``llvm.memset``, ``free``), adds into atomically (shadow memory
other threads add into too), a primal call made again on other arguments (its shadows, a
tangent), both modes; and the message a run-time check writes to stderr before it aborts."""

from __future__ import annotations

from pyzyme.analysis.layout import sizeof
from pyzyme.diff.leaves import elements, has_float
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Value, const_c_string, const_int

__all__ = ["malloc", "free", "free_function", "memcpy", "memset_zero", "zeroed_buffer",
           "with_args", "atomic_add", "add_leaves", "message_text", "write_stderr", "abort"]


def malloc(module, b: IRBuilder, size: Value, name: str = "") -> Value:
    """``malloc(size)`` (an ``i64``) at ``b``."""
    fn = module.declare("malloc", T.FunctionType(T.ptr, [T.i64]))
    return b.call(fn, [size], name=name)


def free(module, b: IRBuilder, pointer: Value) -> None:
    """``free(pointer)`` at ``b``."""
    b.call(free_function(module), [pointer])


def free_function(module):
    """``void free(ptr)``, declared in ``module``."""
    return module.declare("free", T.FunctionType(T.void, [T.ptr]))


def memcpy(module, b: IRBuilder, dest: Value, src: Value, size: Value) -> None:
    """``llvm.memcpy(dest, src, size)`` (an ``i64``, not volatile) at ``b``."""
    fn = module.declare("llvm.memcpy.p0.p0.i64",
                        T.FunctionType(T.void, [T.ptr, T.ptr, T.i64, T.i1]))
    b.call(fn, [dest, src, size, const_int(T.i1, 0)])


def memset_zero(module, b: IRBuilder, pointer: Value, length: Value,
                volatile: Value | None = None) -> None:
    """``llvm.memset(pointer, 0, length)`` at ``b``."""
    name = f"llvm.memset.p0.i{length.type.width}"
    fn = module.declare(name, T.FunctionType(T.void, [T.ptr, T.i8, length.type, T.i1]))
    vol = volatile if volatile is not None else const_int(T.i1, 0)
    b.call(fn, [pointer, const_int(T.i8, 0), length, vol])


def zeroed_buffer(module, b: IRBuilder, inst: I.Alloca, count: Value, name: str) -> Value:
    """A stack buffer like variable-size ``inst`` (``count`` elements, as the copy computes
    it), zeroed at ``b``: its shadow, in either mode."""
    shadow = b.insert(I.Alloca(inst.allocated_type, count, inst.align, inst.type.addrspace),
                      name)
    memset_zero(module, b, shadow,
                b.mul(count, const_int(count.type, sizeof(inst.allocated_type))))
    return shadow


def with_args(call: I.CallBase, args) -> I.CallBase:
    """A new call like ``call`` (callee, calling convention, attributes, flags, bundles) on
    ``args``, not yet inserted."""
    return call.copy_with([call.callee, *args] + call.operands[1 + call.nargs:])


def atomic_add(b: IRBuilder, ty: T.Type, pointer: Value, delta: Value) -> None:
    """``*pointer += delta`` over the float leaves of ``ty``, each an ``atomicrmw fadd``
    (relaxed: the sum is all that is shared, and the launcher's join orders it before any
    read). Vectors and aggregates go element by element: x86 has no wider atomic add."""
    if ty.is_vector:
        for i in range(ty.count):
            lane = b.gep(ty.element, pointer, [const_int(T.i64, i)])
            atomic_add(b, ty.element, lane, b.extractelement(delta, const_int(T.i32, i)))
        return
    if ty.is_float:
        b.atomicrmw("fadd", pointer, delta, "monotonic")
        return
    if not has_float(ty):
        return
    for i, ety in enumerate(elements(ty)):
        if has_float(ety):
            part = b.gep(ty, pointer, [const_int(T.i32, 0), const_int(T.i32, i)])
            atomic_add(b, ety, part, b.extractvalue(delta, i))


def add_leaves(b: IRBuilder, ty: T.Type, a: Value, c: Value, flags: tuple[str, ...]) -> Value:
    """``a + c`` over the float leaves of ``ty`` (others kept from ``a``), with ``flags``
    (:func:`~pyzyme.diff.reverse.adjoints.sum_flags`)."""
    if ty.is_float:
        return b.fadd(a, c, flags)
    if not has_float(ty):
        return a
    out = a
    for i, ety in enumerate(elements(ty)):
        if has_float(ety):
            part = add_leaves(b, ety, b.extractvalue(a, i), b.extractvalue(c, i), flags)
            out = b.insertvalue(out, part, i)
    return out


def message_text(module, text: str, name: str) -> list[Value]:
    """``[string, length]``: ``text`` as a private constant of ``module`` (named after
    ``name``) and its length in bytes, for :func:`write_stderr`."""
    string = const_c_string(text)
    glob = module.add_global(module.unique_global_name(f"{name}.text"), string.type, string,
                             is_constant=True, prefix="private unnamed_addr")
    return [glob, const_int(T.i64, len(text.encode()))]


def write_stderr(module, b: IRBuilder, text: Value, length: Value) -> None:
    """``write(2, text, length)`` at ``b``: what a failed run-time check says."""
    b.call(module.declare("write", T.FunctionType(T.i64, [T.i32, T.ptr, T.i64])),
           [const_int(T.i32, 2), text, length])


def abort(module, b: IRBuilder) -> None:
    """``abort()`` at ``b``, ending its block."""
    b.call(module.declare("abort", T.FunctionType(T.void, [])), [])
    b.unreachable()
