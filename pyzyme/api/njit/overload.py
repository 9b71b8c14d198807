"""Objects callable from Python and from ``@njit`` code, with code generated per argument types.

pyzyme hands out derivatives as objects (``grad(f)``, ``jacfwd(f)``, the thunks of
``autodiff_thunk``). Inside ``@njit`` code each types as an ``@njit`` function made by
:func:`overloaded_njit`: when Numba compiles a call of it for some argument types, a *typer*
builds pyzyme's derivative for those types and returns the ``@njit``-compilable implementation
(usually generated source calling the compiled derivative), so no Python runs per call.
:class:`NjitObject` is the base of such objects: its ``njit`` function is made on first use
and is what Numba sees when the object is a global or an argument of ``@njit`` code.

Examples
--------
>>> import numba
>>> def typer(x):
...     if isinstance(x, numba.types.Float):
...         return lambda a0: a0 * 2.0
...     return lambda a0: a0 + 1
>>> twice = overloaded_njit("twice", ["a0"], typer)
>>> twice(1.5), twice(3)
(3.0, 4)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba
from numba.core import types
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import overload, typeof_impl

from pyzyme import settings

__all__ = ["NjitObject", "overloaded_njit"]


def overloaded_njit(name: str, params: Sequence[str], typer: Callable):
    """An ``@njit`` function ``name(*params)`` whose implementation for argument types ``ts``
    is the function ``typer(*ts)`` returns (with the same parameter names).

    ``typer`` runs when Numba compiles a call; an exception it raises (e.g. an
    ``UnsupportedError`` for arguments it cannot take) becomes Numba's typing error, with the
    message kept.
    """
    if not all(n.isidentifier() for n in [name, *params]):
        raise ValueError(f"overloaded_njit needs identifiers as names; got {name!r}, "
                         f"{list(params)!r}")
    arglist = ", ".join(params)
    scope: dict = {}
    # Numba reads the parameters from the code object, so the arity is spelled out.
    exec(f"def kernel({arglist}):\n    raise NotImplementedError\n", scope)
    kernel = scope["kernel"]
    exec(f"def ol({arglist}):\n    return typer({arglist})\n", {"typer": typer}, scope)
    overload(kernel)(scope["ol"])
    exec(f"def {name}({arglist}):\n    return kernel({arglist})\n", {"kernel": kernel}, scope)
    return numba.njit(scope[name])


class NjitObject:
    """Base of the objects that are callable from ``@njit`` code: subclasses define
    :meth:`_make_njit`, which returns the ``@njit`` function Numba calls in their place.

    One such function is made per :class:`~pyzyme.settings.Options` in force when Numba types
    code that uses the object: Numba compiles a function once per argument types, so a single
    one would keep the derivative its first compilation built, under whatever options were
    in force then, for code compiled later under others.
    """

    def __init__(self) -> None:
        self._njit: dict = {}
        # The options last asked for and their function: typing an argument from Python
        # then hashes no options.
        self._last: tuple = (None, None)

    def _make_njit(self):
        raise NotImplementedError

    @property
    def njit(self):
        """The ``@njit`` function that Numba calls when this object is used in ``@njit``
        code compiled under the current options."""
        opts = settings.current()
        last = self._last
        if last[0] is opts:
            return last[1]
        made = self._njit.get(opts)
        if made is None:
            # Numba's compiler lock, as for every build (pyzyme.api.plans.DerivativeCache):
            # Numba's typing of code using this object asks for it holding that lock, so a
            # lock of our own would deadlock against it if _make_njit ever compiled.
            with global_compiler_lock:
                made = self._njit.get(opts)
                if made is None:
                    made = self._njit[opts] = self._make_njit()
        self._last = (opts, made)
        return made


@typeof_impl.register(NjitObject)
def _typeof_njit_object(val: NjitObject, c):
    return types.Dispatcher(val.njit)
