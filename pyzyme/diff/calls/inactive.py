"""Calls of functions a row declares inactive (:class:`~pyzyme.rules.spec.Inactive`:
``llvm.assume``, ``llvm.lifetime.start``, functions the user marks with
``pyzyme.rules.inactive``): the call as it is, no derivative, in both modes, once it is checked
that the call leaves no derivative unset (:func:`check_inactive_call`).
"""

from __future__ import annotations

from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir.names import readable
from pyzyme.rules import spec

__all__ = ["forward_mode", "augmented", "reverse", "check_inactive_call"]

_LIFETIME = "llvm.lifetime."


def forward_mode(cx, inst: I.CallBase, row: spec.Inactive) -> None:
    """Forward mode: the call, checked, without a derivative."""
    check_inactive_call(cx, inst, row)
    cx.clone(inst)


def augmented(cx, inst: I.CallBase, row: spec.Inactive) -> None:
    """Reverse mode's forward sweep: the call, checked; no ``llvm.lifetime`` marker: the
    reverse sweep reads the stack slots the primal reads, after the forward sweep has passed
    the end of their lifetime (LLVM may reuse a dead slot or fold its loads to poison), and
    a lifetime start on a live slot would fill it with poison."""
    check_inactive_call(cx, inst, row)
    if inst.called_function is not None and \
            inst.called_function.name.startswith(_LIFETIME):
        return
    cx.clone(inst)


def reverse(cx, inst: I.CallBase, row: spec.Inactive) -> None:
    """The reverse sweep: nothing."""


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
            callee = inst.called_function
            row = cx.rules.lookup(callee.name, "call") if callee is not None else None
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
