"""Where a pointer points, for the code that decides what its memory holds and for the errors
that name it in the user's words (both modes, and run-time activity, ask the same question)."""

from __future__ import annotations

from pyzyme.ir import instructions as I
from pyzyme.ir.values import Argument

__all__ = ["base_pointer", "whose_memory"]


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
