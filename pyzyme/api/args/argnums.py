"""``argnums``: which arguments ``grad``, ``value_and_grad`` and ``jacrev`` differentiate.

Examples
--------
>>> normalize_argnums(1, "grad"), normalize_argnums([0, 2], "grad")
(((1,), True), ((0, 2), False))
>>> check_argnums((0, -1), 3, "grad")
(0, 2)
"""

from __future__ import annotations

import numpy as np

from pyzyme.errors import ArgumentTypeError, ArgumentValueError

__all__ = ["normalize_argnums", "check_argnums"]


def normalize_argnums(argnums, name: str) -> tuple[tuple[int, ...], bool]:
    """``(argnums as a tuple, whether one was given as a bare int)``."""
    if isinstance(argnums, (int, np.integer)) and not isinstance(argnums, bool):
        return (int(argnums),), True
    if isinstance(argnums, (tuple, list)) and argnums and all(
            isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in argnums):
        if len(set(argnums)) != len(argnums):
            raise ArgumentValueError(f"{name}: argnums={tuple(argnums)} names an argument "
                                     f"twice")
        return tuple(int(a) for a in argnums), False
    raise ArgumentTypeError(f"{name}: argnums must be an int or a non-empty tuple of ints, "
                            f"got {argnums!r}")


def check_argnums(argnums: tuple[int, ...], nargs: int, name: str) -> tuple[int, ...]:
    """``argnums`` for a call of ``nargs`` arguments, negative ones counted from the end."""
    out = []
    for a in argnums:
        if not -nargs <= a < nargs:
            raise ArgumentValueError(f"{name}: argnums={a}, but the call has {nargs} "
                                     f"arguments")
        out.append(a % nargs)
    return tuple(out)
