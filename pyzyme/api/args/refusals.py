"""What the entry points refuse about the arguments of a call, worded once.

``autodiff``, the thunks (from Python and inside ``@njit`` code) and ``gradient`` meet the same
mistakes; each function here makes the error for one of them, naming the argument and the one
thing to do, and the entry points raise it where they see the case, before any derivative is
built where the case can be seen from the arguments alone.

Shadows the derivative writes must be writeable. Reverse mode adds every derivative into the
shadows of ``Duplicated`` arguments, so a read-only shadow there is always refused. Forward mode
reads the tangent from a shadow and writes the output tangent only into the shadows of the
arguments the function writes: a read-only tangent of an argument the function only reads is
fine (``np.broadcast_to(1.0, x.shape)``), one of an argument it writes is refused.

Examples
--------
>>> print(read_only_shadow("argument 1", "reverse"))   # doctest: +NORMALIZE_WHITESPACE
the shadow of argument 1 is a read-only array, and reverse mode adds the derivative into
it: it would be lost
  hint: pass a writeable array, e.g. np.zeros_like(x)
  see https://pyzyme.readthedocs.io/en/latest/sharp-bits.html#read-only-arrays
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyzyme.api.args.typeof import argument_type
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.frontends.numba.abi import argument_refusal

__all__ = ["read_only_shadow", "has_read_only_part", "active_not_immutable",
           "check_passable"]

_PLAIN = (float, int, complex, np.number, np.bool_, np.ndarray, str, tuple, type(None))

_WHY = {
    "reverse": "reverse mode adds the derivative into it: it would be lost",
    "forward": "the function writes the argument, so forward mode writes its output tangent "
               "into the shadow: it would be lost",
    "njit": "inside @njit code the derivative takes shadows of its primal's writeable type",
    "out": "gradient writes the derivative into it",
}


def read_only_shadow(where: str, mode: str) -> ActivityError:
    """The error for a read-only shadow of ``where`` (``"argument 1"``) that the derivative of
    ``mode`` (``"reverse"``, ``"forward"``, ``"njit"``) would write into, or (``"out"``) a
    read-only ``out=`` array of ``gradient``."""
    subject = "gradient's out= array" if mode == "out" else f"the shadow of {where}"
    return ActivityError(f"{subject} is a read-only array, and {_WHY[mode]}",
                         hint="pass a writeable array, e.g. np.zeros_like(x)",
                         docs="sharp-bits.html#read-only-arrays")


def has_read_only_part(shadow: Any) -> bool:
    """Whether ``shadow`` is, or holds in its tuples, a read-only array or record.

    >>> ro = np.zeros(2); ro.flags.writeable = False
    >>> has_read_only_part((np.zeros(2), (1.0, ro))), has_read_only_part(np.zeros(2))
    (True, False)
    """
    if isinstance(shadow, tuple):
        return any(has_read_only_part(s) for s in shadow)
    if isinstance(shadow, (np.ndarray, np.void)):
        return not shadow.flags.writeable
    return False


def active_not_immutable(where: str, type_name: str, array: bool) -> UnsupportedError:
    """The error for ``Active`` of a value (of type ``type_name``; an ``array``?) that is not
    an immutable float (or tuple of them): an array is mutable, so its derivative goes into a
    shadow of its own."""
    if array:
        return UnsupportedError(
            f"{where} is Active({type_name}): Active is for immutable values (floats, complex, "
            f"tuples of floats); an array is mutable, so reverse mode adds its derivative into "
            f"a shadow array",
            hint="pass Duplicated(x, dx) with dx = np.zeros_like(x) (dx receives df/dx), or "
                 "call gradient(Reverse, f, x)",
            docs="mental-model.html#annotations")
    return UnsupportedError(
        f"{where} is Active({type_name}): Active is for immutable values (floats, complex, "
        f"tuples of floats)",
        hint="pass arrays, records and jitclass instances as Duplicated(x, make_zero(x))",
        docs="mental-model.html#annotations")


def check_passable(value: Any, where: str) -> None:
    """Raise :class:`~pyzyme.UnsupportedError` if no annotation can pass ``value`` (a
    ``numba.typed.List``, say), in the words of the frontend that decides it, so that every
    annotation of it gets the same answer. Numbers, arrays, strings and tuples (checked when
    the function is captured) pass at once."""
    if isinstance(value, _PLAIN):
        return
    try:
        numba_type = argument_type(value)
    except Exception:  # noqa: BLE001 - Numba cannot type it; the annotation's checks say so
        return
    refused = argument_refusal(numba_type, where)
    if refused is not None:
        message, hint = refused
        raise UnsupportedError(message, hint=hint)
