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
from pyzyme.diff.pointers import base_pointer, whose_memory
from pyzyme.diff.runtime_activity import inactive_here
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import GlobalVariable, ZeroInitializer, const_null
from pyzyme.rules import spec

__all__ = ["load", "store", "alloca", "atomicrmw", "cmpxchg", "inactive_memory",
           "no_shadow_error"]


def load(gen, st, inst: I.Load, new: I.Load) -> None:
    if inst not in st.activity.varied:
        return
    shadows = st.derivs[inst.pointer]
    gen._lanes(st, inst, lambda k, name: st.builder.insert(
        I.Load(inst.type, shadows[k], inst.align, inst.volatile, inst.ordering,
               inst.syncscope), name))
    if inst.pointer in st.runtime and contains_type(inst.type, lambda t: t.is_float):
        if contains_type(inst.type, lambda t: t.is_pointer):
            raise UnsupportedError(f"{st.where} loads floats and pointers at once from memory "
                                   f"whose activity is known only at run time; runtime "
                                   f"activity does not cover that yet: {inst}")
        # Memory without a shadow of its own holds no tangents: read zero from it.
        b = st.builder
        st.derivs[inst] = [b.select(inactive_here(b, shadows[k], new.pointer),
                                    gen.inactive_derivative(st, inst), d)
                           for k, d in enumerate(st.derivs[inst])]


def store(gen, st, inst: I.Store, new: I.Store) -> None:
    value, pointer = inst.operands
    shadows = st.derivs.get(pointer)
    varied = value in st.activity.varied
    if shadows is None:
        if varied and not (value.type.is_pointer and st.exception_arg is not None
                           and base_pointer(pointer) is st.exception_arg) \
                and not inactive_memory(gen.rules, pointer):
            raise no_shadow_error(st.where, inst, pointer)
        return
    for k in range(st.width):
        d = gen._deriv_or_zero(st, value, k) if varied else _stored_derivative(gen, st, value)
        if pointer in st.runtime:
            # Where the shadow is the primal, store what the primal store just stored.
            b = st.builder
            d = b.select(inactive_here(b, shadows[k], new.operands[1]), new.operands[0], d)
        st.builder.insert(I.Store(d, shadows[k], inst.align, inst.volatile, inst.ordering,
                                  inst.syncscope))


def inactive_memory(rules, pointer) -> bool:
    """Whether ``pointer`` points into a global variable the rules declare inactive (Enzyme's
    ``__attribute__((enzyme_inactive))``): what is stored there carries no derivative."""
    base = base_pointer(pointer)
    return isinstance(base, GlobalVariable) and isinstance(rules.lookup(base.name, "call"),
                                                           spec.Inactive)


def no_shadow_error(where: str, inst, pointer) -> ActivityError:
    """The error for an active value stored where its derivative has nowhere to go."""
    return ActivityError(
        f"{where} stores an active value into memory that has no shadow{whose_memory(pointer)}: "
        f"{inst}",
        hint="pass the array (or temporary buffer) it writes to as Duplicated, not Const, so "
             "its derivative has somewhere to go; if the write only records values (logging), "
             "mark the @njit function making it with pyzyme.rules.inactive")


def _stored_derivative(gen, st, value):
    """What a store of a value with no derivative writes into shadow memory: integers as they
    are (shadow structures keep their sizes and counts), zero or null for the rest."""
    if not can_carry_derivative(value.type):
        return gen._value(st, value)
    return gen.inactive_derivative(st, value)


def alloca(gen, st, inst: I.Alloca, new: I.Alloca) -> None:
    if inst not in st.activity.varied:
        return
    count = inst.count
    if count is not None and getattr(count, "value", None) != 1:
        raise UnsupportedError(
            f"{st.where} allocates a variable-size stack buffer whose shadow pyzyme "
            f"cannot zero yet: {inst}")

    def make(k: int, name: str):
        shadow = st.builder.insert(I.Alloca(inst.allocated_type, None, inst.align,
                                            inst.type.addrspace), name)
        st.builder.insert(I.Store(ZeroInitializer(inst.allocated_type)
                                  if not _scalar(inst.allocated_type)
                                  else const_null(inst.allocated_type), shadow, inst.align))
        return shadow

    gen._lanes(st, inst, make)


def _scalar(ty: T.Type) -> bool:
    return ty.is_int or ty.is_float or ty.is_pointer


def atomicrmw(gen, st, inst: I.AtomicRMW, new: I.AtomicRMW) -> None:
    pointer, value = inst.operands
    _no_runtime_activity(st, inst)
    shadows = st.derivs.get(pointer)
    if shadows is None:
        if value in st.activity.varied:
            raise ActivityError(f"{st.where} updates memory that has no shadow with an "
                                f"active value: {inst}")
        return
    if value.type.is_float or inst.operation in ("fadd", "fsub", "fmax", "fmin"):
        if inst.operation not in ("fadd", "fsub", "xchg"):
            raise UnsupportedError(f"no derivative for atomicrmw {inst.operation} in "
                                   f"{st.where}")
        for k in range(st.width):
            st.builder.insert(I.AtomicRMW(inst.operation, shadows[k],
                                          gen._deriv_or_zero(st, value, k), inst.ordering,
                                          inst.syncscope, inst.volatile, inst.align))
        if inst in st.activity.varied:
            raise UnsupportedError(f"the old value of a floating atomicrmw is used in "
                                   f"{st.where}; pyzyme does not differentiate that yet")
        return
    # Integer updates of shadowed memory (reference counts of shadow MemInfos) are mirrored,
    # so shadow structures count like their primals.
    for k in range(st.width):
        st.builder.insert(I.AtomicRMW(inst.operation, shadows[k], gen._value(st, value),
                                      inst.ordering, inst.syncscope, inst.volatile, inst.align))


def cmpxchg(gen, st, inst: I.CmpXchg, new: I.CmpXchg) -> None:
    pointer = inst.operands[0]
    _no_runtime_activity(st, inst)
    if pointer in st.activity.varied and inst.operands[1].type.is_float:
        raise UnsupportedError(f"no derivative for a floating cmpxchg in {st.where}")


def _no_runtime_activity(st, inst) -> None:
    if inst.operands[0] in st.runtime:
        raise UnsupportedError(f"{st.where} updates atomically memory whose activity is known "
                               f"only at run time; runtime activity does not cover that yet: "
                               f"{inst}")
