"""Where a pointer points, for the code that decides what its memory holds and for the errors
that name it in the user's words (both modes, and run-time activity, ask the same question):
the base of an address, whose memory it is, whether the rules declare that memory inactive, and
the error for an active value stored where no shadow is."""

from __future__ import annotations

from pyzyme.analysis.exception_records import raised_only
from pyzyme.errors import ActivityError
from pyzyme.ir import instructions as I
from pyzyme.ir.values import Argument, GlobalVariable
from pyzyme.rules import spec

__all__ = ["base_pointer", "whose_memory", "inactive_memory", "no_shadow_error"]


def base_pointer(pointer):
    """``pointer`` with getelementptr and casts stripped."""
    seen = 0
    while isinstance(pointer, (I.GetElementPtr, I.Cast)) and seen < 64:
        pointer, seen = pointer.operands[0], seen + 1
    return pointer


def whose_memory(pointer) -> str:
    """`` (argument 'tmp')`` when ``pointer`` is an address into a parameter's memory."""
    pointer = base_pointer(pointer)
    if not isinstance(pointer, Argument) or not pointer.name:
        return ""
    name = pointer.name
    if name.startswith("arg."):  # Numba's native parameters: arg.<python name>.<field>
        name = name[4:].split(".", 1)[0]
    return f" (argument '{name}')"


def inactive_memory(rules, pointer) -> bool:
    """Whether ``pointer`` points into a global variable the rules declare inactive (Enzyme's
    ``__attribute__((enzyme_inactive))``) or into an exception being raised
    (:func:`~pyzyme.analysis.exception_records.raised_only`): what is stored there carries no
    derivative."""
    base = base_pointer(pointer)
    if isinstance(base, I.CallBase):
        callee = base.called_function
        return callee is not None and isinstance(rules.lookup(callee.name, "call"),
                                                 spec.Allocation) and raised_only(base)
    return isinstance(base, GlobalVariable) and isinstance(rules.lookup(base.name, "call"),
                                                           spec.Inactive)


def no_shadow_error(where: str, inst, pointer) -> ActivityError:
    """The error for an active value stored where its derivative has nowhere to go."""
    return ActivityError(
        f"{where} stores an active value into memory that has no shadow{whose_memory(pointer)}: "
        f"{inst}",
        hint="pass the array (or temporary buffer) it writes to as Duplicated, not Const, so "
             "its derivative has somewhere to go; if the write only records values (logging), "
             "mark the @njit function making it with pyzyme.rules.inactive",
        docs="sharp-bits.html#temporary-storage")
