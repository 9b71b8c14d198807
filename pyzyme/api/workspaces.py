"""Arrays the JAX-style layer holds constant that the function writes: zero shadows of their own.

``grad``, ``value_and_grad``, ``jacrev``, ``jacfwd`` and ``hvp`` differentiate with respect
to some arguments and hold the others constant. A float array among the others that the function writes
with values computed from the differentiated ones (an output or scratch array: ``f(x, out)``
filling ``out`` and returning a sum of it) needs a shadow for their derivatives to pass
through; without one the derivative's build raises :class:`~pyzyme.ActivityError`. So does
one it only reads but whose memory it merges with memory that has a shadow (``c = init``
before a loop that makes ``c`` new arrays): whether ``c``'s reads carry derivatives is then
known only at run time. Through
:func:`~pyzyme.autodiff` the caller passes ``Duplicated`` (API.md's temporary storage); these
layers have no annotation for it, so on that error they build once more with a zero shadow for
each constant float array the function may write, or the one it merged (the build names
them: :func:`pyzyme.frontends.numba.written.arrays_needing_shadows`) and drop those shadows
after the call. The derivatives asked for are then those of one call of ``f`` with the
arrays' contents on entry held constant, as JAX users expect of a scratch argument: where a
Jacobian calls the derivative several times (a reverse sweep per row, a forward call per chunk
of columns), each call starts from those contents again. Functions that build without the
error are built exactly as before.

Examples
--------
>>> import numpy as np
>>> from pyzyme import grad
>>> def f(x, out):
...     for i in range(x.shape[0]):
...         out[i] = x[i] * x[i]
...     return out.sum()
>>> grad(f)(np.array([1.0, 2.0]), np.zeros(2))
array([2., 4.])
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from pyzyme.api import annotations as A
from pyzyme.errors import ActivityError

__all__ = ["workspaces_of", "with_zero_shadows", "build_with_workspaces", "with_workspaces",
           "kept_lines", "restored_lines"]

#: Per call signature of the general paths (a key the caller makes: function, annotation
#: kinds and types), the positions a first build found needing shadows, so that later calls
#: build straight with them instead of failing first.
_KNOWN: dict[Hashable, tuple[int, ...]] = {}


def workspaces_of(err: ActivityError) -> tuple[int, ...]:
    """The constant float arrays ``err``'s build says the function may write (positions)."""
    return tuple(getattr(err, "workspaces", ()))


def with_zero_shadows(anns: Sequence, positions: Sequence[int]) -> list:
    """``anns`` with each ``Const`` array at ``positions`` made ``Duplicated`` with zeros."""
    return [A.Duplicated(a.val, np.zeros_like(a.val))
            if k in positions and isinstance(a, A.Const) else a for k, a in enumerate(anns)]


def build_with_workspaces(attempt: Callable, key: Hashable | None = None,
                          eligible: Callable[[int], bool] | None = None):
    """``(attempt(()), ())``, or, where its build raises ActivityError naming constant float
    arrays the function writes, ``(attempt(positions), positions)`` with their positions
    (those ``eligible`` allows: the rest keep the error). ``key`` remembers the positions, so
    that later calls build with them at once."""
    known = _KNOWN.get(key, ()) if key is not None else ()
    try:
        return attempt(known), known
    except ActivityError as err:
        found = tuple(k for k in workspaces_of(err) if eligible is None or eligible(k))
        if known or not found:
            raise
    result = attempt(found)
    if key is not None:
        _KNOWN[key] = found
    return result, found


def with_workspaces(anns: Sequence, attempt: Callable, key: Hashable | None = None):
    """:func:`build_with_workspaces` for ``attempt(annotations)``: ``(result, positions)``,
    the annotations at ``positions`` given zero shadows."""
    return build_with_workspaces(lambda found: attempt(with_zero_shadows(anns, found)), key)


def kept_lines(names: Sequence[str], written: Sequence[int]) -> list[str]:
    """Lines of generated ``@njit`` glue (names ``zeros_like`` and ``copy_into`` from
    :mod:`pyzyme.api.njit.zeros`) keeping a copy ``e<i>`` of each argument ``names[i]`` at
    ``written`` as it is on entry: a Jacobian calls the derivative once per sweep, and each
    call must start from them (:func:`restored_lines`)."""
    return [f"    e{i} = zeros_like({names[i]})\n    copy_into(e{i}, {names[i]})"
            for i in written]


def restored_lines(names: Sequence[str], written: Sequence[int], indent: str) -> list[str]:
    """Lines putting back each argument at ``written`` from its copy (:func:`kept_lines`)."""
    return [f"{indent}copy_into({names[i]}, e{i})" for i in written]
