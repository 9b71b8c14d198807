"""Reverse mode of calls.

Lookup order, as in forward mode: user rules (:mod:`pyzyme.diff.calls.custom`), the rule
table (math functions through their partials,
allocation and reference counting through their rows), then the callee's own body, whose split
pair is called (the augmented primal in the forward sweep, its tape kept like any value, the
reverse function at the same point of the reverse sweep), then
:class:`~pyzyme.UnsupportedError` naming the function.

Calls that release memory (``NRT_decref``, ``free``) are not made in the forward sweep: the
reverse sweep may still read the memory, or accumulate into its shadow. They are recorded in
a list, in order, and made (on primals and shadows) when the reverse sweep is done. So are
the old blocks of a shadow list that grew or shrank (:mod:`pyzyme.diff.calls.resize`).
"""

from __future__ import annotations

from functools import reduce

from pyzyme.analysis.activity import Activity
from pyzyme.analysis.overwrite import list_block_of
from pyzyme.diff.linalg import blas as blas_calls
from pyzyme.diff.calls import (
    custom as custom_calls,
    registered as registered_calls,
    vector as vector_calls,
)
from pyzyme.diff.calls import resize as reverse_resize
from pyzyme.diff.calls.forward import check_inactive_call
from pyzyme.diff.leaves import has_float, has_pointer
from pyzyme.diff.memory_calls import memset_zero, with_args
from pyzyme.diff.signature import ReverseSignature
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Constant, GlobalValue, const_int, const_null
from pyzyme.rules import spec

__all__ = ["forward", "reverse"]

# Calls that release memory: deferred until the reverse sweep is done with it.
_RELEASES = frozenset({"NRT_decref", "NRT_MemInfo_call_dtor", "NRT_Free", "free"})


def _row(cx, inst: I.CallBase):
    callee = inst.called_function
    return cx.rules.lookup(callee.name, "call") if callee is not None else None


def _any_varied(cx, inst: I.CallBase) -> bool:
    return any(a in cx.activity.varied for a in inst.args)


def forward(cx, inst: I.CallBase) -> None:
    """The forward sweep of a call."""
    if isinstance(inst, (I.Invoke, I.CallBr)):
        if _any_varied(cx, inst):
            raise UnsupportedError(f"no reverse-mode derivative for {inst.opcode} with active "
                                   f"arguments in {cx.where}")
        cx.clone(inst)
        return
    row = _row(cx, inst)
    callee = inst.called_function
    if row is None and callee is not None and not callee.is_declaration and (
            inst in cx.activity.varied or _any_varied(cx, inst)):
        forward_callee(cx, inst, callee)
        return
    if isinstance(row, spec.Custom) and _any_varied(cx, inst):
        custom_calls.augmented(cx, inst, row)
        return
    if isinstance(row, spec.Registered) and _any_varied(cx, inst):
        registered_calls.augmented(cx, inst, row)
        return
    if isinstance(row, spec.Blas):
        blas_calls.handler(row).augmented(cx, inst, row)
        return
    if isinstance(row, spec.Mirror) and (callee.name in _RELEASES or row.releases):
        at = 0 if callee.name in _RELEASES else row.pointer_args[0]
        shadow = cx.shadows.get(inst.args[at])
        call = inst if callee.name in _RELEASES else _one_pointer_release(cx, inst, at)
        cx.release_later(call, cx.fwd_value(inst.args[at]),
                         shadow if shadow is not None else const_null(T.ptr))
        return
    if isinstance(row, (spec.Reduction, spec.Masked)):
        vector_calls.forward_sweep(cx, inst, row)
        return
    if isinstance(row, spec.Inactive):
        check_inactive_call(cx, inst, row)
    new = cx.clone(inst)
    if isinstance(row, spec.Memory):
        # memset writes constants: its reverse clears the shadow (see reverse()).
        if "memset" not in callee.name and any(
                a in cx.activity.varied for a in inst.args if a.type.is_pointer):
            _forward_copy(cx, inst, new)
        elif "memset" in callee.name and inst.args[0] in cx.shadows:
            _forward_fill(cx, inst, new)
    elif isinstance(row, spec.Allocation):
        if inst in cx.activity.varied:
            _shadow_allocation(cx, inst, new, row)
    elif isinstance(row, spec.Mirror):
        _mirror(cx, inst, new, row)
    elif row is None and _any_varied(cx, inst):
        from pyzyme.diff.calls.forward import unknown_callee
        raise unknown_callee(cx.where, callee)


def reverse(cx, inst: I.CallBase) -> None:
    """The reverse sweep of a call."""
    if inst in cx.callee_tapes:
        _reverse_callee(cx, inst)
        return
    if inst in cx.resizes:
        reverse_resize.reverse(cx, inst)
        return
    row = _row(cx, inst)
    if inst in cx.rule_calls:
        handler = blas_calls.handler(row) if isinstance(row, spec.Blas) else \
            registered_calls if isinstance(row, spec.Registered) else custom_calls
        handler.reverse(cx, inst, row)
        return
    if isinstance(row, spec.Partials) and cx.active(inst):
        cx.partials(inst, row, inst.args, inst.flags)
    elif isinstance(row, (spec.Reduction, spec.Masked)):
        vector_calls.reverse(cx, inst, row)
    elif isinstance(row, spec.Memory) and inst.args[0] in cx.shadows:
        length = cx.primal(inst.args[2])
        if cx.copies.get(inst) == "unused slots":
            pass  # no adjoint there (see _forward_fill)
        elif "memset" in inst.called_function.name or cx.copies.get(inst) == "constant":
            # The bytes written are constants: whatever adjoint was there is dropped.
            memset_zero(cx.module, cx.rb, cx.shadow(inst.args[0]), length)
        elif cx.copies.get(inst) is not None:
            _reverse_copy(cx, inst, cx.copies[inst], length)


# -- memcpy / memmove -----------------------------------------------------------------------
def _copied_type(cx, inst: I.Call):
    """What a copy moves, from type analysis: a float type (adjoints move back), None for
    integers and pointers (the shadow is copied like the primal), else an error."""
    types = cx.types()
    found = set()
    for pointer in inst.args[:2]:
        tree = types.tree(pointer).data0()
        # The bytes copied themselves; deeper entries describe memory they point to, which
        # the copy does not move (a struct holding a float* copies a pointer, not floats).
        found.update(str(ct) for path, ct in tree if len(path) == 1)
    floats = {t for t in found if t.startswith("Float@")}
    if floats and len(found) == 1:
        kind = floats.pop()[len("Float@"):]
        return {"double": T.double, "float": T.float}.get(kind) or _unknown_copy(cx, inst, found)
    if not floats and found and found <= {"Integer", "Pointer", "Anything"}:
        return None
    return _unknown_copy(cx, inst, found)


def _unknown_copy(cx, inst, found):
    raise UnsupportedError(
        f"{cx.where} copies memory whose contents type analysis finds to be "
        f"{sorted(found) or 'unknown'}; reverse mode needs to know which bytes are floats: "
        f"{inst}", hint="copy the array element by element, or report this function")


def _constant_bytes(pointer) -> bool:
    """Whether ``pointer`` points into a constant global holding only numbers (Numba's
    constant arrays, ``c"..."``): what is copied from it carries no derivative, whatever its
    type."""
    from pyzyme.analysis.overwrite import underlying_object
    from pyzyme.ir.values import ConstantString, GlobalVariable

    obj = underlying_object(pointer)
    return isinstance(obj, GlobalVariable) and obj.is_constant and \
        isinstance(obj.initializer, ConstantString)


def _forward_copy(cx, inst: I.Call, new: I.Call) -> None:
    dst, src = inst.args[0], inst.args[1]
    if _constant_bytes(src):
        cx.copies[inst] = "constant"  # its reverse clears the destination's adjoint
        return
    elty = _copied_type(cx, inst)
    cx.copies[inst] = elty
    if dst not in cx.shadows:
        if src in cx.shadows and elty is not None:
            raise ActivityError(f"{cx.where} copies active memory into memory that has no "
                                f"shadow: {inst}", hint="pass the destination as Duplicated")
        return
    if elty is None:  # pointers and integers: the shadow structure follows the primal
        args = list(new.args)
        args[0], args[1] = cx.shadows[dst], cx.fwd_shadow(src)
        cx.fb.insert(with_args(new, args))


def _forward_fill(cx, inst: I.Call, new: I.Call) -> None:
    """Zeros written into a list's block: Numba clears the slots past the list's end that
    way (when it allocates or grows the block, and where an item was removed), so that its
    destructor finds no stale references there. The same on the shadow, whose destructor
    (run once the reverse sweep is done) reads the shadow's references; the reverse then has
    nothing to clear, as no item is read from those slots before one is stored there again.
    Clearing them in the reverse sweep would drop the shadow references stored there later."""
    value = inst.args[1]
    if getattr(value, "value", None) != 0 or list_block_of(inst.args[0]) is None:
        return
    args = list(new.args)
    args[0] = cx.shadows[inst.args[0]]
    cx.fb.insert(with_args(new, args))
    cx.copies[inst] = "unused slots"


def _reverse_copy(cx, inst: I.Call, elty, length) -> None:
    """``src_bar[i] += dst_bar[i]; dst_bar[i] = 0`` over the copied elements. Where the two
    overlap (``memmove``: a list's items shifted by ``del`` or ``insert``), the elements go
    in the order that reads each ``dst_bar[i]`` before it receives a source's adjoint: down
    from the last when the destination is below the source."""
    from pyzyme.analysis.layout import sizeof

    b = cx.rb
    dst = cx.shadow(inst.args[0])
    src = cx.shadow(inst.args[1]) if inst.args[1] in cx.shadows else None
    size = sizeof(elty)
    count = b.udiv(length, const_int(length.type, size))
    down = None
    if src is not None and "memmove" in inst.called_function.name:
        down = b.icmp("ult", dst, src)
    fn = cx.rev
    head = b.block
    loop, done = fn.append_block("copy.adjoint"), fn.append_block("copy.adjoint.done")
    b.cbranch(b.icmp("eq", count, const_int(count.type, 0)), done, loop)
    b.position_at_end(loop)
    i = b.phi(count.type, name="k")
    i.add_incoming(const_int(count.type, 0), head)
    k = i
    if down is not None:
        last = b.sub(count, const_int(count.type, 1))
        k = b.select(down, b.sub(last, i), i)
    pd = b.gep(elty, dst, [k])
    d = b.load(elty, pd)
    b.store(const_null(elty), pd)
    if src is not None:
        ps = b.gep(elty, src, [k])
        b.store(b.fadd(b.load(elty, ps), d), ps)
    nxt = b.add(i, const_int(count.type, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp("ult", nxt, count), loop, done)
    b.position_at_end(done)


# -- memory ----------------------------------------------------------------------------------
def _shadow_allocation(cx, inst: I.Call, new: I.Call, row: spec.Allocation) -> None:
    b = cx.fb
    shadow = b.insert(new.copy_with(list(new.operands)), f"{inst.name}'" if inst.name else "")
    if inst.called_function.name != "calloc":
        size = reduce(lambda acc, v: b.mul(acc, v), [new.args[i] for i in row.size_args])
        data = shadow
        if row.data_offset is not None:
            slot = b.gep(T.i8, shadow, [const_int(T.i64, row.data_offset)], ("inbounds",))
            data = b.load(T.ptr, slot, align=8)
        memset_zero(cx.module, b, data, size)
    cx.shadows[inst] = shadow


def _mirror(cx, inst: I.Call, new: I.Call, row: spec.Mirror) -> None:
    """Reference counts and resizes of shadowed memory happen to the shadow too."""
    varied = [i for i, a in enumerate(inst.args) if a in cx.shadows]
    if not varied:
        return
    if inst.type.is_pointer:
        if row.size_offset is not None and varied == [0]:
            # A list's block moving: the shadow's old block is kept for the reverse sweep.
            old = reverse_resize.forward(cx, inst, new, row)
            release = reverse_resize.release_function(cx.module)
            cx.release_later(I.Call(release, [old], release.function_type), old,
                             const_null(T.ptr))
            return
        raise UnsupportedError(f"{cx.where} resizes memory that holds active values; reverse "
                               f"mode does not support that yet: {inst}")
    for i in varied:
        args = list(new.args)
        args[i] = cx.shadows[inst.args[i]]
        cx.fb.insert(with_args(new, args))


def _one_pointer_release(cx, inst: I.CallBase, at: int) -> I.Call:
    """A call of a function of the memory alone that makes the release ``inst`` makes on its
    argument ``at``: ``inst`` itself when that is its only argument, else a call of a helper
    passing the other (constant) arguments as ``inst`` does."""
    callee, args = inst.called_function, inst.args
    if len(args) == 1:
        return inst
    others = [a for i, a in enumerate(args) if i != at]
    if not all(isinstance(a, (Constant, GlobalValue)) for a in others):
        raise UnsupportedError(
            f"{cx.where} frees memory with {callee.ref}, which reverse mode makes after its "
            f"reverse sweep; it can do so only when the other arguments are constants: {inst}",
            hint="pass the deallocator constant arguments (a global, not a local's address)")
    module = cx.module
    fn = module.add_function(module.unique_global_name(f"{callee.name}.pzrelease"),
                             T.FunctionType(T.void, [T.ptr]), prefix="internal")
    b = IRBuilder(fn.append_block("entry"))
    b.call(callee, [fn.args[0] if i == at else a for i, a in enumerate(args)])
    b.ret_void()
    return I.Call(fn, [fn.args[0]], fn.function_type)


# -- calls of functions with bodies ------------------------------------------------------------
def forward_callee(cx, inst: I.Call, callee) -> None:
    acts = []
    for a in inst.args:
        if a not in cx.activity.varied:
            acts.append(Activity.CONST)
        elif a.type.is_pointer:
            acts.append(Activity.DUPLICATED)
        elif a.type.is_float or (a.type.is_vector and a.type.scalar.is_float):
            acts.append(Activity.ACTIVE)
        else:
            raise UnsupportedError(f"{cx.where} passes an active {a.type} by value to "
                                   f"{callee.ref}; reverse mode does not support that yet")
    if inst in cx.activity.varied and has_pointer(inst.type):
        raise UnsupportedError(f"{callee.ref} returns a pointer into active memory; reverse "
                               f"mode does not support that yet")
    ret_active = cx.active(inst) and has_float(inst.type)
    csig = ReverseSignature(tuple(acts), ret_active, cx.sig.status_return, False, True)
    pair = cx.callee_derivative(callee, csig)
    shadows = [cx.fwd_shadow(a) for a, act in zip(inst.args, acts)
               if act is Activity.DUPLICATED]
    args = [cx.fwd_value(a) for a in inst.args] + shadows
    b = cx.fb
    res = b.call(pair.augmented, args, name=f"{inst.name}.aug" if inst.name else "")
    if callee.function_type.ret == T.void:
        tape = res
    else:
        cx.values[inst] = b.extractvalue(res, 0, name=inst.name)
        tape = b.extractvalue(res, 1, name=f"{inst.name}.tape" if inst.name else "tape")
    cx.callee_tapes[inst] = (pair, csig, tape, acts, shadows)


def _reverse_callee(cx, inst: I.Call) -> None:
    pair, csig, tape, acts, shadows = cx.callee_tapes[inst]
    args = [cx.primal(a) for a in inst.args] + [cx.avail(s) for s in shadows]
    if csig.return_active:
        args.append(cx.consume(inst))
    args += [const_int(T.i1, 0), cx.avail(tape)]
    result = cx.rb.call(pair.reverse, args)
    k = 0
    for a, act in zip(inst.args, acts):
        if act is Activity.ACTIVE:
            cx.accumulate(a, cx.rb.extractvalue(result, k))
            k += 1
