"""Calls of functions without a rule row: differentiated through the callee's own body
(generated once per callee and activity, recursively: a function may call itself), or, where
it has none and an argument carries a derivative, refused with an error naming it.

- forward mode: the call goes to the callee's forward derivative, each non-constant argument
  followed by its tangents or shadows; it returns ``{primal, tangents}`` when its result
  carries a derivative;
- reverse mode: the forward sweep calls the callee's augmented primal (its tape kept like any
  other value of the forward sweep), the reverse sweep its reverse function at the same point,
  which returns the adjoints of the callee's float arguments. The callee's pair is *nested*:
  it defers its releases into the caller's list, so none is made before the outermost reverse
  sweep is done (:mod:`pyzyme.diff.tape.releases`). A callee returning a pointer into active
  memory returns its shadow from the augmented primal too (Enzyme's duplicated return).

An ``invoke`` (C++: a call that may throw where a destructor must run) invokes the derivative,
its results taken apart on the normal edge; the unwind edge goes to the copy of the landing pad,
which only cleans up and resumes (reverse mode refuses one that catches and goes on).
"""

from __future__ import annotations

from dataclasses import replace

from pyzyme import naming
from pyzyme.analysis.activity import Activity
from pyzyme.analysis.overwrite import underlying_object
from pyzyme.diff.calls import indirect
from pyzyme.diff.leaves import has_float, has_pointer
from pyzyme.diff.signature import ForwardSignature, ReverseSignature
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import ADDRESS_CASTS
from pyzyme.ir.values import const_int
from pyzyme.rules.constructs import unknown_call_message

__all__ = ["result_varied", "forward_mode", "augmented", "reverse", "call_derivative",
           "augmented_call", "reverse_call", "unknown_callee"]


def _has_body(callee) -> bool:
    return callee is not None and not callee.is_declaration


def _any_varied(cx, inst: I.CallBase) -> bool:
    return any(a in cx.activity.varied for a in inst.args)


def _wants_derivative(cx, inst: I.CallBase) -> bool:
    return _has_body(inst.called_function) and (inst in cx.activity.varied
                                                or _any_varied(cx, inst))


def result_varied(row, inst: I.CallBase, is_varied) -> bool:
    """Activity analysis: the result of a call of a function with a body, or through a
    function pointer (reverse mode calls the derivative the pointer's shadow holds:
    :mod:`pyzyme.diff.calls.indirect`), varies with its arguments; that of a declaration
    without a rule does not."""
    callee_ = inst.called_function
    return (callee_ is None or _has_body(callee_)) and any(is_varied(a) for a in inst.args)


def _inert_memory_only(cx, inst: I.CallBase) -> bool:
    """Whether the arguments of ``inst`` (a call without a derivative) that carry one are all
    pointers into memory the function makes (allocations, stack slots) that no derivative
    ever reaches: such memory gets a shadow whatever is stored in it, but memory the function
    only fills with constants and hands to calls given nothing else active (a C++ object made
    with new, used through its virtual functions; a buffer it lends it) holds no derivative
    the call could move, so the call is made as it is (Enzyme's activity by data flow)."""
    varied = [a for a in inst.args if a in cx.activity.varied]
    if not varied or not all(a.type.is_pointer for a in varied):
        return False
    todo, done = [underlying_object(a) for a in varied], set()
    while todo:
        obj = todo.pop()
        if obj in done:
            continue
        done.add(obj)
        # A plain allocation (malloc, new), not one whose data block is allocated apart and
        # reached by a pointer loaded from it (Numba's MemInfo).
        row = cx.allocation_row(obj)
        plain = row is not None and row.data_offset is None and not row.resizable
        if not (isinstance(obj, I.Alloca) or plain):
            return False
        reached = _reached_if_inert(cx, obj)
        if reached is None:
            return False
        todo += reached
    return True


def _reached_if_inert(cx, obj) -> list | None:
    """None if something active may be stored into ``obj``'s memory, or its address is stored
    or merged; else the memory of the other active arguments of the calls given it (which
    must be as inert)."""
    seen, work, reached = {obj}, [obj], []
    while work:
        v = work.pop()
        for user in v.users:
            if isinstance(user, I.GetElementPtr) and user.operands[0] is v or (
                    isinstance(user, I.Cast) and user.opcode in ADDRESS_CASTS):
                if user not in seen:
                    seen.add(user)
                    work.append(user)
            elif isinstance(user, I.Store):
                if user.value is v or user.value in cx.activity.varied:
                    return None
            elif isinstance(user, I.CallBase):
                for a in user.args:
                    if a in cx.activity.varied and a not in seen:
                        if not a.type.is_pointer:
                            return None
                        reached.append(underlying_object(a))
            elif not isinstance(user, (I.Load, I.Compare)):
                return None  # merged (phi, select), or anything else: not followed
    return reached


def unknown_callee(where: str, callee, call: I.CallBase | None = None) -> UnsupportedError:
    """The error for a call with active arguments to a function with no body and no rule,
    worded by :func:`pyzyme.rules.constructs.unknown_call_message`. ``.callee`` names the
    function, so the Numba layer can find the Python line of the call, and ``.unknown_call``
    holds ``(callee, where)``, so it can word the error again once it knows what the user
    wrote there. A ``call`` of inline assembly is named as such."""
    name = callee.name if callee is not None else None
    asm = getattr(call.callee, "text", None) if call is not None and name is None else None
    if asm is not None and asm.startswith("asm"):
        return UnsupportedError(
            f"inline assembly in {where} has no derivative (pyzyme reads only the fused "
            f"multiply-add vfmadd231pd/ps): {asm[:120]}",
            hint="build without the assembly (for Eigen: -DEIGEN_DONT_VECTORIZE), or give "
                 "the function that contains it a custom derivative")
    message, hint = unknown_call_message(name, where)
    err = UnsupportedError(message, hint=hint, docs="sharp-bits.html#unsupported-constructs")
    err.callee = name
    err.unknown_call = (name, where)
    return err


# -- forward mode ------------------------------------------------------------------------------
def forward_mode(cx, inst: I.CallBase, row=None) -> None:
    """Forward mode: the callee's derivative called in place of ``inst``; the call as it is
    where nothing about it varies."""
    if _wants_derivative(cx, inst):
        call_derivative(cx, inst, inst.called_function)
    elif _any_varied(cx, inst) and not _inert_memory_only(cx, inst):
        raise unknown_callee(cx.where, inst.called_function, inst)
    else:
        cx.clone(inst)


def call_derivative(cx, inst: I.Call, callee) -> None:
    """Forward mode: a call of the derivative of ``callee`` (which has a body) in place of
    ``inst``, each varied argument followed by its derivative in every lane."""
    acts = []
    for a in inst.args:
        if a not in cx.activity.varied:
            acts.append(Activity.CONST)
        else:
            acts.append(Activity.DUPLICATED if a.type.is_pointer else Activity.ACTIVE)
    sig = ForwardSignature.standard(callee, acts, cx.width)
    if cx.exception_arg is not None and len(callee.args) > 1:
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
    name = "" if returns_pair else inst.name
    if isinstance(inst, I.Invoke):
        # The results are taken apart on the normal edge, in a block of its own (the normal
        # destination's phis come from it); the unwind edge goes to the cleanup's copy.
        block = inst.parent
        cont = cx.new.append_block(f"{block.name or 'invoke'}.cont")
        res = b.insert(I.Invoke(dfn, args, dfn.function_type, cont,
                                cx.values[inst.unwind_dest], attrs), name)
        cx.edges[(block, inst.normal_dest)] = cont
        b.position_at_end(cont)
        b.position_before(b.br(cx.values[inst.normal_dest]))
    else:
        res = b.insert(I.Call(dfn, args, dfn.function_type, inst.flags,
                              "tail" if inst.tail == "tail" else "", attrs), name)
    if not returns_pair:
        cx.values[inst] = res
        return
    cx.values[inst] = b.extractvalue(res, 0, name=inst.name)
    cx.derivs[inst] = [b.extractvalue(res, k + 1, name=naming.tangent(inst.name, k, cx.width))
                       for k in range(cx.width)]


# -- reverse mode ------------------------------------------------------------------------------
def augmented(cx, inst: I.CallBase, row=None) -> None:
    """Reverse mode's forward sweep: the callee's augmented primal in place of ``inst``; the
    call as it is where nothing about it varies."""
    if _wants_derivative(cx, inst):
        augmented_call(cx, inst, inst.called_function)
    elif _any_varied(cx, inst) and not _inert_memory_only(cx, inst):
        if inst.called_function is None and indirect.augmented(cx, inst):
            return
        raise unknown_callee(cx.where, inst.called_function, inst)
    else:
        cx.clone(inst)


def augmented_call(cx, inst: I.Call, callee) -> None:
    """The forward sweep: a call of the augmented primal of ``callee`` (which has a body) in
    place of ``inst``, shadows after the arguments; its tape is kept for :func:`reverse`."""
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
    # A returned pointer into active memory comes with its shadow (Enzyme's duplicated
    # return): the caller's loads and stores through it reach the callee's shadow memory.
    ret_shadow = inst in cx.activity.varied and has_pointer(inst.type)
    if ret_shadow and has_float(inst.type):
        raise UnsupportedError(f"{callee.ref} returns {inst.type}, which mixes floats with "
                               f"pointers into active memory; reverse mode does not support "
                               f"that yet")
    ret_active = cx.active(inst) and has_float(inst.type)
    csig = ReverseSignature(tuple(acts), ret_active, cx.sig.status_return, False, True,
                            nested=True, return_shadow=ret_shadow,
                            shared_adjoints=cx.sig.shared_adjoints)
    cx.seed_callee_types(callee, [i for i, act in enumerate(acts)
                                  if act is Activity.DUPLICATED])
    pair = cx.callee_derivative(callee, csig)
    shadows = [cx.fwd_shadow(a) for a, act in zip(inst.args, acts)
               if act is Activity.DUPLICATED]
    args = [cx.fwd_value(a) for a in inst.args] + shadows + [cx.callee_releases(pair)]
    b = cx.fb
    name = f"{inst.name}.aug" if inst.name else ""
    if isinstance(inst, I.Invoke):
        normal, unwind = _invoke_edges(cx, inst)
        res = b.invoke(pair.augmented, args, normal, unwind, name=name)
        b.position_before(normal.terminator)  # the results are taken apart on the normal edge
    else:
        res = b.call(pair.augmented, args, name=name)
    if callee.function_type.ret == T.void:
        # An invoke's result is defined on its normal edge only: the tape is taken there.
        tape = b.freeze(res, name=name) if isinstance(inst, I.Invoke) else res
    else:
        cx.values[inst] = b.extractvalue(res, 0, name=inst.name)
        if ret_shadow:
            cx.shadows[inst] = b.extractvalue(res, 1, name=naming.shadow(inst.name))
        tape = b.extractvalue(res, 2 if ret_shadow else 1,
                              name=f"{inst.name}.tape" if inst.name else "tape")
    cx.callee_tapes[inst] = (pair, csig, tape, acts, shadows)


def _invoke_edges(cx, inst: I.Invoke):
    """Where the forward sweep's invoke of an augmented primal goes: on the normal edge, a
    block of its own where its results are taken apart (the edge's block into a loop, when
    the edge enters one; the normal destination's phis come from it), on the unwind edge, the
    copy of the cleanup (which only cleans up and resumes: no reverse sweep runs after it)."""
    block, normal = inst.parent, inst.normal_dest
    if inst.unwind_dest not in cx.doomed:
        raise UnsupportedError(
            f"{cx.where} catches an exception {inst.called_function.ref} may throw and goes "
            f"on: reverse mode differentiates code whose exceptions only clean up and "
            f"propagate", hint="catch the exception outside the differentiated function")
    edge = cx.entries.get((block, normal))
    if edge is None:
        edge = cx.fwd.append_block(f"{block.name or 'invoke'}.cont")
        IRBuilder(edge).br(cx.first[normal])
        cx.entries[(block, normal)] = edge
        cx.origin[edge] = block
    unwind = cx.entries.get((block, inst.unwind_dest), cx.first[inst.unwind_dest])
    return edge, unwind


def reverse(cx, inst: I.CallBase, row=None) -> None:
    """The reverse sweep: :func:`reverse_call` where the forward sweep called the augmented
    primal (or, through a function pointer, the pair its shadow holds); nothing where it
    made the call as it is."""
    if inst in cx.callee_tapes:
        reverse_call(cx, inst)
    elif inst in cx.indirect:
        indirect.reverse(cx, inst)


def _reverse_args(cx, inst: I.Call) -> list:
    """The primal arguments the reverse function gets: the call's, but for a Numba
    function's exception record a slot of the reverse sweep's own. The reverse sweep runs
    after the forward sweep returned without an exception, and its function returns no
    status to report one: the record is never read, and keeping the slot the forward sweep
    passed for it would put that slot's address on the tape (forward mode over the forward
    sweep, a Hessian-vector product, then saw it as memory written with varied values)."""
    callee = inst.called_function
    unread = callee is not None and len(inst.args) >= 2 and naming.takes_status_params(callee)
    return [cx.rb.entry_alloca(T.ptr, name="excinfo.unread") if unread and k == 1
            else cx.primal(a) for k, a in enumerate(inst.args)]


def reverse_call(cx, inst: I.Call) -> None:
    """The reverse sweep: a call of the callee's reverse function, with the tape
    :func:`augmented_call` kept, its adjoints accumulated."""
    pair, csig, tape, acts, shadows = cx.callee_tapes[inst]
    args = _reverse_args(cx, inst) + [cx.avail(s) for s in shadows]
    if csig.return_active:
        args.append(cx.consume(inst))
    args += [const_int(T.i1, 0), cx.avail(tape)]
    result = cx.rb.call(pair.reverse, args)
    k = 0
    for a, act in zip(inst.args, acts):
        if act is Activity.ACTIVE:
            cx.accumulate(a, cx.rb.extractvalue(result, k))
            k += 1
