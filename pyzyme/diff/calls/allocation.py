"""Calls that allocate, release or reference-count memory (:class:`~pyzyme.rules.spec.Allocation`,
:class:`~pyzyme.rules.spec.Mirror`: ``malloc``, ``NRT_MemInfo_alloc``, ``free``,
``NRT_incref``, ``NRT_decref``, list resizes), in both modes.

Memory a varied call allocates gets a shadow of its own, zeroed; reference counts and resizes
of shadowed memory happen to the shadow too. In reverse mode, releases are not made in the
forward sweep (the reverse sweep may still read the memory, or accumulate into its shadow): they
are deferred (:meth:`~pyzyme.diff.context.ReverseContext.release_later`) and made on primal and
shadow when the reverse sweep is done. So are the old blocks of a shadow list that grew or
shrank (:mod:`pyzyme.diff.calls.resize`). A loop's temporary (a MemInfo released in the
iteration that allocated it: :func:`~pyzyme.analysis.overwrite.released_in_loops`) is released
where the primal releases it, only its shadow deferred: otherwise every iteration's temporary
stays alive until the reverse sweep is done.
"""

from __future__ import annotations

from functools import reduce

from pyzyme import naming
from pyzyme.analysis.exception_records import raised_only
from pyzyme.diff.calls import resize
from pyzyme.diff.memory_calls import memset_zero, with_args
from pyzyme.diff.tape.pool import REALLOC_NAME
from pyzyme.diff.tape.pooled_shadows import shadow_alloc
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Argument, Constant, GlobalValue, const_int, const_null
from pyzyme.rules import spec

__all__ = ["allocation_varied", "allocation_forward", "allocation_augmented", "mirror_varied",
           "mirror_forward", "mirror_augmented", "mirror_reverse"]


def allocation_varied(row: spec.Allocation, inst: I.CallBase, is_varied) -> bool:
    """Activity analysis: memory a call allocates gets a shadow once anything is varied,
    unless it only ever holds an exception being raised
    (:mod:`~pyzyme.analysis.exception_records`)."""
    return not raised_only(inst)


def mirror_varied(row: spec.Mirror, inst: I.CallBase, is_varied) -> bool:
    """Activity analysis: a pointer a call returns varies when the call allocates it, or when
    it moves or counts memory that varies."""
    return inst.type.is_pointer and (row.allocates or any(is_varied(inst.args[i])
                                                          for i in row.pointer_args))


# -- forward mode ------------------------------------------------------------------------------
def allocation_forward(cx, inst: I.Call, row: spec.Allocation) -> None:
    """Forward mode: the call, then a shadow allocation of the same size per lane, its memory
    zeroed."""
    new = cx.clone(inst)
    if inst not in cx.activity.varied:
        return
    b = cx.builder

    def make(k: int, name: str):
        shadow = b.insert(with_args(new, list(new.args)), name)
        if row.zeroed:
            return shadow
        size = reduce(lambda acc, v: b.mul(acc, v), [new.args[i] for i in row.size_args])
        data = shadow
        if row.data_offset is not None:
            slot = b.gep(T.i8, shadow, [const_int(T.i64, row.data_offset)], ("inbounds",))
            data = b.load(T.ptr, slot, align=8)
        memset_zero(cx.module, b, data, size)
        return shadow

    cx.lanes(inst, make)


def mirror_forward(cx, inst: I.Call, row: spec.Mirror) -> None:
    """Forward mode: the call, then the same call (free, reference count, resize) on the
    shadows of its pointer arguments; a pointer it returns from the shadow call is the shadow
    of the primal's result."""
    new = cx.clone(inst)
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
            results.append(cx.builder.insert(with_args(new, args),
                                             naming.tangent(inst.name, k, cx.width)))
    if inst.type.is_pointer and inst in cx.activity.varied:
        if len(results) != cx.width:
            raise UnsupportedError(f"{cx.where} resizes memory that has no shadow, and uses the "
                                   f"result as if it had one: {inst}")
        cx.derivs[inst] = results


# -- reverse mode ------------------------------------------------------------------------------
def allocation_augmented(cx, inst: I.Call, row: spec.Allocation) -> None:
    """Reverse mode's forward sweep: the call, then a shadow allocation of the same size, its
    memory zeroed."""
    new = cx.clone(inst)
    if inst not in cx.activity.varied:
        return
    b = cx.fb
    pooled = _POOLED_ALIGN.get(naming.linked_original(getattr(inst.called_function, "name",
                                                              "")), False)
    if pooled is not False:
        # An array's shadow, released by this derivative when its reverse sweep is done:
        # large ones from the tape pool, so that the next call does not fault them in again.
        align = new.args[1] if pooled is None else const_int(T.i32, pooled)
        shadow = b.call(shadow_alloc(cx.module), [new.args[0], align],
                        name=naming.shadow(inst.name))
    else:
        shadow = b.insert(new.copy_with(list(new.operands)), naming.shadow(inst.name))
    if not row.zeroed:
        size = reduce(lambda acc, v: b.mul(acc, v), [new.args[i] for i in row.size_args])
        data = shadow
        if row.data_offset is not None:
            slot = b.gep(T.i8, shadow, [const_int(T.i64, row.data_offset)], ("inbounds",))
            data = b.load(T.ptr, slot, align=8)
        memset_zero(cx.module, b, data, size)
    cx.shadows[inst] = shadow


#: NRT's allocators of a MemInfo without destructor, whose shadow may come from the tape pool
#: (:mod:`pyzyme.diff.tape.pooled_shadows`), and the alignment they give (None: their second
#: operand). The others (a destructor to call, a list's separate data) keep NRT's own.
_POOLED_ALIGN = {"NRT_MemInfo_alloc_aligned": None, "NRT_MemInfo_alloc_safe_aligned": None,
                 naming.SHADOW_ALLOC: None, "NRT_MemInfo_alloc": 16,
                 "NRT_MemInfo_alloc_safe": 16}


def mirror_augmented(cx, inst: I.Call, row: spec.Mirror) -> None:
    """Reverse mode's forward sweep: a release is deferred until the reverse sweep is done
    (on the primal and its shadow), but for a loop's temporaries, whose primal is released
    where the primal releases it (:func:`~pyzyme.analysis.overwrite.released_in_loops`);
    reference counts and resizes of shadowed memory happen to the shadow too, a resize
    keeping the shadow's old block (:mod:`pyzyme.diff.calls.resize`)."""
    if inst in cx.released_now:
        # A loop's temporary, released in the iteration that allocated it: where the primal
        # releases it (the reverse sweep reads none of it: analysis.overwrite.released_in_loops);
        # its shadow, which the reverse sweep adds into, when the reverse sweep is done.
        shadow = cx.shadows.get(inst.args[row.pointer_args[0]])
        cx.clone(inst)
        if shadow is not None:
            cx.release_later(_one_pointer_release(cx, inst, row.pointer_args[0]), shadow,
                             const_null(T.ptr))
        return
    if row.releases and not (row.refcount and (not cx.sig.split or cx.sig.nested)
                             and _passed_handle(inst.args[row.pointer_args[0]])):
        # Deferred until the reverse sweep is done with the memory. Not a count of a handle
        # the function is passed, in a combined derivative or a callee's split pair: the
        # caller holds its reference (and the shadow's) for the whole call, and a callee's
        # caller holds it on until the outermost reverse sweep (its own decref is deferred,
        # or it is a handle its caller holds), so the count cannot fall to zero; made now,
        # as its incref is, Numba's reference-count pruning cancels the pair, where a
        # deferred one costs a release-list entry per call (a small function called in a
        # loop ran 10x its primal; a recursive one deferred 4 a call, GradBench's det).
        at = row.pointer_args[0]
        shadow = cx.shadows.get(inst.args[at])
        call = _one_pointer_release(cx, inst, at)
        cx.release_later(call, cx.fwd_value(inst.args[at]),
                         shadow if shadow is not None else const_null(T.ptr))
        return
    new = cx.clone(inst)
    varied = [i for i, a in enumerate(inst.args) if a in cx.shadows]
    if not varied:
        if row.allocates and inst in cx.activity.varied and _tape_pool_call(inst):
            # A tape of a reverse-mode derivative the function calls, holding active values:
            # their adjoints would need the derivative's own reverse sweep differentiated.
            raise UnsupportedError(
                f"{cx.where} calls a reverse-mode derivative (grad, value_and_grad, jacrev or "
                f"vjp inside @njit code) whose tape holds active values: reverse mode over it is "
                f"not supported yet; differentiate it in forward mode (jacfwd of the gradient, "
                f"or pyzyme.hvp)")
        return
    if inst.type.is_pointer:
        if row.size_offset is not None and varied == [0]:
            # A list's block moving: the shadow's old block is kept for the reverse sweep.
            old = resize.forward(cx, inst, new, row)
            release = resize.release_function(cx.module)
            cx.release_later(I.Call(release, [old], release.function_type), old,
                             const_null(T.ptr))
            return
        raise UnsupportedError(f"{cx.where} resizes memory that holds active values; reverse "
                               f"mode does not support that yet: {inst}")
    for i in varied:
        args = list(new.args)
        args[i] = cx.shadows[inst.args[i]]
        cx.fb.insert(with_args(new, args))


def _tape_pool_call(inst: I.CallBase) -> bool:
    """Whether ``inst`` calls the tape pool's allocator (or a linker's copy of it)."""
    fn = inst.called_function
    return fn is not None and naming.linked_original(fn.name) == REALLOC_NAME


def mirror_reverse(cx, inst: I.Call, row: spec.Mirror) -> None:
    """The reverse sweep: a resize's adjoints go back to the shadow's old block; nothing for
    the others."""
    if inst in cx.resizes:
        resize.reverse(cx, inst)


def _passed_handle(value) -> bool:
    """Whether ``value`` is one of the function's parameters, whichever way phis and selects
    merge them (Numba decrefs ``r if m == 1 else A`` at a shared return)."""
    seen, work = set(), [value]
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, I.Phi):
            work.extend(inc for inc, _ in v.incoming)
        elif isinstance(v, I.Select):
            work.extend(v.operands[1:])
        elif not isinstance(v, Argument):
            return False
    return True


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
