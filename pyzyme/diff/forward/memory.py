"""Forward-mode handlers for memory: loads, stores, stack allocation, atomics.

A pointer that carries a derivative has a *shadow*: memory laid out like the primal's, holding
tangents where the primal holds floats, shadow pointers where it holds pointers, and copies of
its integers. A load through a shadowed pointer reads the tangent from the shadow; a store
writes the stored value's tangent (or zero) there. A varied value stored into memory that has no
shadow would be lost, so it raises :class:`~pyzyme.ActivityError` instead, unless that memory
is a global variable declared inactive (its derivative is dropped by request).
"""

from __future__ import annotations

from pyzyme.analysis.activity import can_carry_derivative, contains_type
from pyzyme.diff.memory_calls import zeroed_buffer
from pyzyme.diff.pointers import base_pointer, inactive_memory, no_shadow_error
from pyzyme.diff.runtime_checks import inactive_here
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ZeroInitializer, const_null
from pyzyme.transforms import float_moves

__all__ = ["load", "store", "alloca", "atomicrmw", "cmpxchg"]


def load(cx, inst: I.Load, new: I.Load) -> None:
    """The tangent of a load through a shadowed pointer: the same load from each lane's shadow
    (zero where the shadow may be the primal at run time)."""
    if inst not in cx.activity.varied:
        if _copies_bits(cx, inst):
            shadows = cx.derivs[inst.pointer]
            cx.bits[inst] = [cx.builder.insert(I.Load(inst.type, shadows[k], inst.align,
                                                      inst.volatile, inst.ordering,
                                                      inst.syncscope))
                             for k in range(cx.width)]
        return
    shadows = cx.derivs[inst.pointer]
    cx.lanes(inst, lambda k, name: cx.builder.insert(
        I.Load(inst.type, shadows[k], inst.align, inst.volatile, inst.ordering,
               inst.syncscope), name))
    if inst.pointer in cx.runtime and contains_type(inst.type, lambda t: t.is_float):
        if contains_type(inst.type, lambda t: t.is_pointer):
            raise UnsupportedError(f"{cx.where} loads floats and pointers at once from memory "
                                   f"whose activity is known only at run time; runtime "
                                   f"activity does not cover that yet: {inst}")
        # Memory without a shadow of its own holds no tangents: read zero from it.
        b = cx.builder
        cx.derivs[inst] = [b.select(inactive_here(b, shadows[k], new.pointer),
                                    cx.inactive_derivative(inst), d)
                           for k, d in enumerate(cx.derivs[inst])]


def _copies_bits(cx, inst: I.Load) -> bool:
    """Whether integer load ``inst`` reads shadowed memory that may hold a float's bits and is
    stored into shadowed memory: a copy (a ``char *`` loop, a small ``memcpy``) whose shadow
    copy moves the tangent's bits (:func:`~pyzyme.transforms.float_moves.reads_integers`)."""
    if can_carry_derivative(inst.type) or inst.pointer not in cx.derivs or \
            inst.pointer in cx.runtime:
        return False
    if not any(isinstance(u, I.Store) and u.value is inst and u.pointer in cx.activity.varied
               for u in inst.users):
        return False
    return not cx.generator.reads_integers(cx.old, inst)


def store(cx, inst: I.Store, new: I.Store) -> None:
    """The store of the stored value's derivative (or zero, or its integers) into each lane's
    shadow; a varied value stored where there is no shadow is an error."""
    value, pointer = inst.operands
    shadows = cx.derivs.get(pointer)
    varied = value in cx.activity.varied
    if shadows is None:
        if varied and not (value.type.is_pointer and cx.exception_arg is not None
                           and base_pointer(pointer) is cx.exception_arg) \
                and not inactive_memory(cx.rules, pointer):
            raise no_shadow_error(cx.where, inst, pointer)
        return
    if not varied and value not in cx.bits and isinstance(value, I.Load) and \
            not can_carry_derivative(value.type) and \
            not float_moves.stored_as_integers(inst) and \
            not cx.generator.reads_integers(cx.old, value):
        # Read where there is no shadow (or one that may be the primal at run time): the
        # shadow would get the primal's bits, where a float's tangent is zero.
        raise float_moves.refusal(cx.where, inst)
    for k in range(cx.width):
        d = cx.derivative(value, k) if varied else cx.bits[value][k] if value in cx.bits \
            else _stored_derivative(cx, value)
        if pointer in cx.runtime:
            # Where the shadow is the primal, store what the primal store just stored.
            b = cx.builder
            d = b.select(inactive_here(b, shadows[k], new.operands[1]), new.operands[0], d)
        cx.builder.insert(I.Store(d, shadows[k], inst.align, inst.volatile, inst.ordering,
                                  inst.syncscope))


def _stored_derivative(cx, value):
    """What a store of a value with no derivative writes into shadow memory: integers as they
    are (shadow structures keep their sizes and counts), zero or null for the rest."""
    if not can_carry_derivative(value.type):
        return cx.value(value)
    return cx.inactive_derivative(value)


def alloca(cx, inst: I.Alloca, new: I.Alloca) -> None:
    """A zeroed stack slot per lane (of the same count, for ``alloca(n)``): the shadow of a
    varied slot."""
    if inst not in cx.activity.varied:
        return
    count = inst.count
    if count is not None and getattr(count, "value", None) != 1:
        # alloca(n), a variable-length array: a zeroed shadow of the same count, freed with
        # the primal's by any stack restore (forward mode reads it no later than the primal).
        cx.lanes(inst, lambda k, name: zeroed_buffer(cx.module, cx.builder, inst, new.count,
                                                     name))
        return

    def make(k: int, name: str):
        shadow = cx.builder.insert(I.Alloca(inst.allocated_type, None, inst.align,
                                            inst.type.addrspace), name)
        cx.builder.insert(I.Store(ZeroInitializer(inst.allocated_type)
                                  if not _scalar(inst.allocated_type)
                                  else const_null(inst.allocated_type), shadow, inst.align))
        return shadow

    cx.lanes(inst, make)


def _scalar(ty: T.Type) -> bool:
    return ty.is_int or ty.is_float or ty.is_pointer


def atomicrmw(cx, inst: I.AtomicRMW, new: I.AtomicRMW) -> None:
    """The same update of each lane's shadow: floats add their tangents, integers (reference
    counts) are mirrored."""
    pointer, value = inst.operands
    _no_runtime_activity(cx, inst)
    shadows = cx.derivs.get(pointer)
    if shadows is None:
        if value in cx.activity.varied:
            raise ActivityError(f"{cx.where} updates memory that has no shadow with an "
                                f"active value: {inst}",
                                docs="sharp-bits.html#temporary-storage")
        return
    if value.type.is_float or inst.operation in ("fadd", "fsub", "fmax", "fmin"):
        if inst.operation not in ("fadd", "fsub", "xchg"):
            raise UnsupportedError(f"no derivative for atomicrmw {inst.operation} in "
                                   f"{cx.where}")
        for k in range(cx.width):
            cx.builder.insert(I.AtomicRMW(inst.operation, shadows[k],
                                          cx.derivative(value, k), inst.ordering,
                                          inst.syncscope, inst.volatile, inst.align))
        if inst in cx.activity.varied and inst.users:
            raise UnsupportedError(f"the old value of a floating atomicrmw is used in "
                                   f"{cx.where}; pyzyme does not differentiate that yet")
        return
    # Integer updates of shadowed memory (reference counts of shadow MemInfos) are mirrored,
    # so shadow structures count like their primals.
    for k in range(cx.width):
        cx.builder.insert(I.AtomicRMW(inst.operation, shadows[k], cx.value(value),
                                      inst.ordering, inst.syncscope, inst.volatile, inst.align))


def cmpxchg(cx, inst: I.CmpXchg, new: I.CmpXchg) -> None:
    """Nothing for integers; a floating compare-exchange of varied memory is refused."""
    pointer = inst.operands[0]
    _no_runtime_activity(cx, inst)
    if pointer in cx.activity.varied and inst.operands[1].type.is_float:
        raise UnsupportedError(f"no derivative for a floating cmpxchg in {cx.where}")


def _no_runtime_activity(cx, inst) -> None:
    if inst.operands[0] in cx.runtime:
        raise UnsupportedError(f"{cx.where} updates atomically memory whose activity is known "
                               f"only at run time; runtime activity does not cover that yet: "
                               f"{inst}")
