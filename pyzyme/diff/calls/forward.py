"""Forward-mode handling of calls.

Lookup order: the rule table (user rules first, then intrinsics, C math, memory and runtime
functions), then the callee's own body (differentiated recursively, once per callee and
activity), then an :class:`~pyzyme.UnsupportedError` naming the function when an argument
carries a derivative. User rules are called by :mod:`pyzyme.diff.calls.custom`, derivatives a
C/C++ module registers by :mod:`pyzyme.diff.calls.registered`.
"""

from __future__ import annotations

from functools import reduce

from pyzyme.analysis.activity import Activity
from pyzyme.diff.calls import vector as vector_calls
from pyzyme.diff.signature import ForwardSignature
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.names import readable
from pyzyme.diff.memory_calls import memset_zero, with_args
from pyzyme.ir.values import const_int, const_null
from pyzyme.rules import spec
from pyzyme.rules.constructs import unknown_call_message

__all__ = ["call", "call_result_varied", "check_inactive_call", "unknown_callee", "may_allocate",
           "call_derivative"]


def _row(cx, inst: I.CallBase):
    callee = inst.called_function
    return cx.rules.lookup(callee.name, "call") if callee is not None else None


def call_result_varied(cx, inst: I.CallBase, is_varied) -> bool:
    """Whether the result of call ``inst`` carries a derivative (for activity analysis)."""
    row = _row(cx, inst)
    args = inst.args
    if isinstance(row, spec.Partials):
        return any(p is not None and is_varied(a) for p, a in zip(row.partials, args))
    if isinstance(row, spec.Linear):
        return is_varied(args[0])
    if isinstance(row, spec.Allocation):
        return True  # every allocation gets a shadow once anything is varied
    if isinstance(row, spec.Mirror):
        return inst.type.is_pointer and (row.allocates or any(is_varied(args[i])
                                                              for i in row.pointer_args))
    if isinstance(row, (spec.Custom, spec.Registered, spec.Reduction)):
        return any(is_varied(a) for a in args)
    if isinstance(row, spec.Masked):  # a load varies with its memory or its pass-through
        return row.value is None and (is_varied(args[row.pointer])
                                      or is_varied(args[row.passthru]))
    if row is not None:
        return False
    callee = inst.called_function
    if callee is not None and not callee.is_declaration:
        return any(is_varied(a) for a in args)
    return False


def may_allocate(cx, inst: I.CallBase) -> bool:
    """Whether a call may store a fresh allocation through a pointer it is handed: not the
    rows that only compute, copy, or count references (activity analysis asks)."""
    if inst.called_function is None:
        return False
    row = _row(cx, inst)
    return not isinstance(row, (spec.Partials, spec.Linear, spec.Memory, spec.Inactive,
                                spec.Mirror, spec.Blas, spec.Reduction, spec.Masked))


def call(cx, inst: I.CallBase) -> None:
    """Emit the primal call and the code of its derivative."""
    if isinstance(inst, (I.Invoke, I.CallBr)):
        if any(a in cx.activity.varied for a in inst.args):
            raise UnsupportedError(f"no derivative for {inst.opcode} with active arguments in "
                                   f"{cx.where}")
        cx.clone(inst)
        return
    row = _row(cx, inst)
    callee = inst.called_function
    if row is None and callee is not None and not callee.is_declaration and (
            inst in cx.activity.varied or _any_varied(cx, inst)):
        call_derivative(cx, inst, callee)
        return
    if isinstance(row, spec.Custom) and _any_varied(cx, inst):
        from pyzyme.diff.calls.custom import forward_mode
        forward_mode(cx, inst, row)
        return
    if isinstance(row, spec.Registered) and _any_varied(cx, inst):
        from pyzyme.diff.calls import registered as registered_calls
        registered_calls.forward_mode(cx, inst, row)
        return
    if isinstance(row, spec.Blas):
        from pyzyme.diff.linalg import blas as blas_calls
        blas_calls.handler(row).forward_mode(cx, inst, row)
        return
    if isinstance(row, spec.Inactive):
        check_inactive_call(cx, inst, row)
    new = cx.clone(inst)
    if isinstance(row, spec.Partials):
        cx.partials(inst, new, row, inst.args, new.args, inst.flags)
    elif isinstance(row, spec.Linear):
        _linear_call(cx, inst, new)
    elif isinstance(row, spec.Memory):
        _memory(cx, inst, new, row)
    elif isinstance(row, spec.Allocation):
        _allocation(cx, inst, new, row)
    elif isinstance(row, spec.Mirror):
        _mirror(cx, inst, new, row)
    elif isinstance(row, (spec.Reduction, spec.Masked)):
        vector_calls.forward_mode(cx, inst, new, row)
    elif row is None and _any_varied(cx, inst):
        raise unknown_callee(cx.where, callee)


def check_inactive_call(cx, inst: I.CallBase, row: spec.Inactive) -> None:
    """Refuse a call of a function the user marked inactive (``pyzyme.rules.inactive``) that
    writes memory whose shadow its (empty) derivative would leave wrong: an argument's memory
    (the shadow keeps its old tangent, and its adjoint is never taken), or pointers into a
    local slot (Numba returns an array through one: the shadow slot keeps no shadow array, and
    the derivative would read or write through an unset pointer). Numbers written into a
    local slot (a float result) are fine: the slot's shadow holds zero. Enzyme asks the same
    of inactive functions (they must not write active memory); pyzyme checks it."""
    callee = inst.called_function
    if row.kind != "custom" or callee is None or callee.is_declaration:
        return
    for index, arg in enumerate(inst.args):
        if not (arg.type.is_pointer and arg in cx.activity.varied):
            continue
        written = _writes_through(cx, callee, index, set())
        if (written and not isinstance(arg, I.Alloca)) or (
                written == "pointers" and _loads_active_pointer(cx, arg)):
            raise UnsupportedError(
                f"{cx.where} calls {readable(callee.name)}, which is marked inactive "
                f"(pyzyme.rules.inactive) but returns or fills an array, record or other "
                f"memory that carries derivatives: its derivative would leave that memory's "
                f"derivative unset", hint="return only numbers (or arrays of integers) from "
                "an inactive function; compute the array before the differentiated call and "
                "pass it in as Const")


def _reached(root, follows) -> set:
    """``root`` and the values reached from it through users for which ``follows`` holds."""
    seen, work = {root}, [root]
    while work:
        for user in work.pop().users:
            if user not in seen and follows(user):
                seen.add(user)
                work.append(user)
    return seen


def _addressing(user) -> bool:
    return isinstance(user, (I.GetElementPtr, I.Cast))


def _loads_active_pointer(cx, slot) -> bool:
    """Whether the function loads from local ``slot`` (or a field of it) a pointer that it
    then reads or writes floats through, carrying derivatives (an array's data, as Numba
    returns it); Numba's exception slot gets a pointer too, but only to pass it on."""
    for field in _reached(slot, _addressing):
        for load in field.users:
            if not (isinstance(load, I.Load) and load.type.is_pointer):
                continue
            for address in _reached(load, _addressing):
                for use in address.users:
                    if isinstance(use, I.Load) and use.type.scalar.is_float and \
                            use in cx.activity.varied:
                        return True
                    if isinstance(use, I.Store) and use.operands[0].type.scalar.is_float and \
                            use.operands[0] in cx.activity.varied:
                        return True
    return False


def _writes_through(cx, fn, index: int, seen: set) -> str:
    """What ``fn`` may write through its parameter ``index``: ``"pointers"`` (a pointer
    stored, bytes copied or written by a call that is not known), ``"numbers"`` (stores of
    other values only) or ``""`` (nothing; reference counts, Numba's ``Mirror`` rows, are not
    data)."""
    if (fn, index) in seen:
        return ""
    seen.add((fn, index))
    derived = _reached(fn.args[index], lambda user: user.type.is_pointer and not isinstance(
        user, (I.Load, I.CallBase)))
    found = ""
    for inst in fn.instructions():
        if isinstance(inst, I.Store) and inst.operands[1] in derived:
            if inst.operands[0].type.is_pointer:
                return "pointers"
            found = "numbers"
        elif isinstance(inst, (I.AtomicRMW, I.CmpXchg)) and inst.operands[0] in derived:
            found = "numbers"
        elif isinstance(inst, I.CallBase):
            handed = [k for k, a in enumerate(inst.args) if a in derived]
            if not handed:
                continue
            callee, row = inst.called_function, _row(cx, inst)
            if isinstance(row, spec.Memory):
                if 0 in handed:
                    return "pointers"
            elif isinstance(row, (spec.Mirror, spec.Inactive, spec.Partials, spec.Linear)):
                continue
            elif callee is None or callee.is_declaration:
                return "pointers"
            else:
                for k in handed:
                    deeper = _writes_through(cx, callee, k, seen)
                    if deeper == "pointers":
                        return deeper
                    found = found or deeper
    return found


def unknown_callee(where: str, callee) -> UnsupportedError:
    """The error for a call with active arguments to a function with no body and no rule,
    worded by :func:`pyzyme.rules.constructs.unknown_call_message`. ``.callee`` names the
    function, so the Numba layer can find the Python line of the call, and ``.unknown_call``
    holds ``(callee, where)``, so it can word the error again once it knows what the user
    wrote there."""
    name = callee.name if callee is not None else None
    message, hint = unknown_call_message(name, where)
    err = UnsupportedError(message, hint=hint)
    err.callee = name
    err.unknown_call = (name, where)
    return err


def _any_varied(cx, inst: I.CallBase) -> bool:
    return any(a in cx.activity.varied for a in inst.args)


def call_derivative(cx, inst: I.Call, callee) -> None:
    acts = []
    for a in inst.args:
        if a not in cx.activity.varied:
            acts.append(Activity.CONST)
        else:
            acts.append(Activity.DUPLICATED if a.type.is_pointer else Activity.ACTIVE)
    sig = ForwardSignature.standard(callee, acts, cx.width)
    if cx.exception_arg is not None and len(callee.args) > 1:
        from dataclasses import replace
        sig = replace(sig, exception_param=1)  # a Numba function calls Numba functions
    dfn = cx.callee_derivative(callee, sig)
    args = [cx.value(a) for a in inst.args]
    attrs = list(inst.arg_attrs)
    for i, act in enumerate(acts):
        if act is not Activity.CONST:
            for k in range(cx.width):
                args.append(cx.derivs[inst.args[i]][k])
                attrs.append("")
    b = cx.builder
    returns_pair = dfn.function_type.ret != callee.function_type.ret
    res = b.insert(I.Call(dfn, args, dfn.function_type, inst.flags,
                          "tail" if inst.tail == "tail" else "", attrs),
                   "" if returns_pair else inst.name)
    if not returns_pair:
        cx.values[inst] = res
        return
    cx.values[inst] = b.extractvalue(res, 0, name=inst.name)
    cx.derivs[inst] = [b.extractvalue(res, k + 1, name=_tangent_name(inst, k, cx.width))
                       for k in range(cx.width)]


def _same_call(cx, new: I.Call, args, name: str = "") -> I.Call:
    """Another call like ``new`` on ``args``, at the builder."""
    return cx.builder.insert(with_args(new, args), name)


def _tangent_name(inst, lane: int, width: int) -> str:
    from pyzyme import naming
    return naming.tangent(inst.name, lane, width)


def _linear_call(cx, inst: I.Call, new: I.Call) -> None:
    if inst not in cx.activity.varied:
        return
    cx.lanes(inst, lambda k, name: _same_call(
        cx, new, [cx.derivs[inst.args[0]][k]] + list(new.args[1:]), name))


def _memory(cx, inst: I.Call, new: I.Call, row: spec.Memory) -> None:
    """memcpy/memmove/memset: the same on the shadows (zeros where the source has none)."""
    b = cx.builder
    dest = inst.args[row.pointer_args[0]]
    dshadow = cx.derivs.get(dest)
    src = inst.args[row.pointer_args[1]] if len(row.pointer_args) > 1 else None
    sshadow = cx.derivs.get(src) if src is not None else None
    if dshadow is None:
        if sshadow is not None:
            raise ActivityError(f"{cx.where} copies active memory into memory that has no "
                                f"shadow: {inst}",
                                hint="pass the destination buffer as Duplicated")
        return
    length, volatile = new.args[2], new.args[3]
    for k in range(cx.width):
        if sshadow is not None:
            _same_call(cx, new, [dshadow[k], sshadow[k], length, volatile])
        else:
            memset_zero(cx.module, b, dshadow[k], length, volatile)


def _allocation(cx, inst: I.Call, new: I.Call, row: spec.Allocation) -> None:
    """A shadow allocation of the same size, its memory zeroed."""
    if inst not in cx.activity.varied:
        return
    b = cx.builder
    size = reduce(lambda acc, v: b.mul(acc, v), [new.args[i] for i in row.size_args])
    zeroed = inst.called_function.name == "calloc"

    def make(k: int, name: str):
        shadow = _same_call(cx, new, list(new.args), name)
        if zeroed:
            return shadow
        data = shadow
        if row.data_offset is not None:
            slot = b.gep(T.i8, shadow, [const_int(T.i64, row.data_offset)], ("inbounds",))
            data = b.load(T.ptr, slot, align=8)
        memset_zero(cx.module, b, data, size)
        return shadow

    cx.lanes(inst, make)


def _mirror(cx, inst: I.Call, new: I.Call, row: spec.Mirror) -> None:
    """The same call (free, reference count, resize) on the shadows of its pointer arguments;
    a pointer it returns from the shadow call is the shadow of the primal's result."""
    results = []
    for i in row.pointer_args:
        shadows = cx.derivs.get(inst.args[i])
        if shadows is None and row.allocates and inst in cx.activity.varied:
            shadows = [const_null(T.ptr)] * cx.width  # a fresh block for a fresh block
        if shadows is None:
            continue
        for k in range(cx.width):
            args = list(new.args)
            args[i] = shadows[k]
            results.append(_same_call(cx, new, args, _tangent_name(inst, k, cx.width)))
    if inst.type.is_pointer and inst in cx.activity.varied:
        if len(results) != cx.width:
            raise UnsupportedError(f"{cx.where} resizes memory that has no shadow, and uses the "
                                   f"result as if it had one: {inst}")
        cx.derivs[inst] = results
