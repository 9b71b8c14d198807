"""The ``@njit`` dispatcher pyzyme differentiates for a user's function, and what it returns.

pyzyme keeps what it made of a user's object in registries owned here, never on the object:

- a plain Python function is compiled with ``numba.njit`` once (:func:`njit_of`), so every
  derivative of it shares one dispatcher and one compilation;
- a function with user rules is differentiated through a one-line ``@njit`` caller, made once
  (:func:`dispatcher_of`), so that its rules apply to it as wherever else it is called;
- a wrapper pyzyme writes around the user's function (``vjp``'s dot product, ``jacrev``'s rows:
  :mod:`pyzyme.api.wrappers`) remembers that function, so errors name it (:func:`where`).

What is made of a function lives as long as the process. It must stay the same object for as
long as the function may be differentiated again: derivatives are cached by dispatcher
(:mod:`pyzyme.api.plans`, whose keys hold every dispatcher with a derivative for the life of the
process anyway), and a rule function compiled by a second dispatcher gets new symbols, so the
derivative calling it would be generated and compiled again under a name already taken. Weak
references would not free more: what is made refers to its key (a dispatcher keeps its
``py_func``, a caller its callee), so a weakly keyed entry would keep its key alive all the
same, and a weakly held value was collected while the function was still in use (a rule's
dispatcher, which only the rule table of one build refers to). Wrappers are remembered weakly
(the function they stand for does not refer to them).

Examples
--------
>>> def f(x):
...     return x * x
>>> njit_of(f) is njit_of(f), vars(f)
(True, {})
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence

import numba
from numba.core import types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher

from pyzyme.api.args.complex import check_complex_result, has_complex
from pyzyme.errors import UnsupportedError
from pyzyme.rules.custom import REGISTRY

__all__ = ["njit_of", "dispatcher_of", "remember_wrapper", "where", "qualname", "result_type",
           "check_float_result", "parameter_names"]


class _Made:
    """For each key, the one object made of it (see the module for why it is kept)."""

    def __init__(self) -> None:
        self._made: dict = {}

    def get_or_make(self, key, make: Callable):
        made = self._made.get(key)
        if made is None:
            # Under the lock builds take (pyzyme.api.plans.DerivativeCache.get), so that
            # threads calling first at once share one object, and so one derivative.
            with global_compiler_lock:
                made = self._made.get(key)
                if made is None:
                    made = self._made[key] = make()
        return made


_NJIT = _Made()        # plain Python function -> numba.njit of it
_CALLER = _Made()      # dispatcher with user rules -> the @njit caller differentiated for it
_WRAPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # wrapper -> user function


def njit_of(f) -> Dispatcher:
    """``f`` if it is an ``@njit`` dispatcher, else one made of it (once per function).

    Examples
    --------
    >>> isinstance(njit_of(lambda x: x + 1.0), Dispatcher)
    True
    """
    if isinstance(f, Dispatcher):
        return f
    if callable(f) and hasattr(f, "__code__"):
        try:
            return _NJIT.get_or_make(f, lambda: numba.njit(f))
        except TypeError:  # an unhashable callable: compiled each time
            return numba.njit(f)
    raise TypeError(f"cannot differentiate {f!r}: expected an @njit function or a plain Python "
                    f"function")


def dispatcher_of(f) -> Dispatcher:
    """The ``@njit`` dispatcher to differentiate for ``f`` (compiled here if ``f`` is plain
    Python). A function with user rules is differentiated through a one-line caller, so its
    rules apply to it as they do wherever it is called."""
    dispatcher = njit_of(f)
    if REGISTRY.rules_of(dispatcher) is None:
        return dispatcher
    return _CALLER.get_or_make(dispatcher, lambda: _caller(dispatcher))


def _caller(dispatcher) -> Dispatcher:
    """A new ``@njit`` function of ``dispatcher``'s parameters calling it, or ``dispatcher``
    itself when it takes ``*args``."""
    py = dispatcher.py_func
    params = inspect.signature(py).parameters.values()
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        return dispatcher  # *args: no fixed-arity caller to write; differentiated as is
    names = ", ".join(f"a{i}" for i in range(len(params)))
    scope = {"ruled": dispatcher, "__name__": py.__module__}
    source = f"def {py.__name__}({names}):\n    return ruled({names})\n"
    exec(compile(source, f"<pyzyme: caller of {py.__qualname__}>", "exec"), scope)  # noqa: S102
    return numba.njit(scope[py.__name__])


def remember_wrapper(wrapper: Dispatcher, wrapped) -> None:
    """Say that ``wrapper``, an ``@njit`` function pyzyme wrote, stands for the user's Python
    function ``wrapped`` (errors about it then name ``wrapped``)."""
    _WRAPPED[wrapper] = wrapped


def where(dispatcher) -> str:
    """``name (file:line)`` of the user's function behind ``dispatcher`` (the one it wraps,
    for a wrapper pyzyme made)."""
    py = _WRAPPED.get(dispatcher) or getattr(dispatcher, "py_func", dispatcher)
    code = getattr(py, "__code__", None)
    name = getattr(py, "__qualname__", repr(dispatcher))
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name


def parameter_names(f) -> list[str] | None:
    """The names of the positional parameters of the user's function ``f`` (a dispatcher or
    a plain function), for messages naming an argument; None for a wrapper pyzyme wrote (its
    parameters are not the user's) or a function without a signature."""
    if f in _WRAPPED:
        return None
    py = getattr(f, "py_func", f)
    try:
        params = inspect.signature(py).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def qualname(dispatcher) -> str:
    """The qualified name of the Python function behind ``dispatcher``."""
    return getattr(getattr(dispatcher, "py_func", dispatcher), "__qualname__", repr(dispatcher))


def result_type(dispatcher, argtypes: Sequence[types.Type]) -> types.Type:
    """The Numba type ``dispatcher`` returns for arguments of types ``argtypes``."""
    sig = tuple(argtypes)
    dispatcher.compile(sig)
    cres = dispatcher.overloads[sig]
    return cres.signature.return_type


def check_float_result(dispatcher, argtypes, name: str, err: Exception | None = None) -> None:
    """Raise a clear error if ``dispatcher`` does not return a float for ``argtypes``."""
    restype = result_type(dispatcher, argtypes)
    if isinstance(restype, types.Float):
        return
    fname = qualname(dispatcher)
    if has_complex(restype):
        check_complex_result(restype, fname)
    hint = ("" if restype == types.none else
            ": use jacobian or jacrev for array results, vjp for a cotangent")
    docs = ("sharp-bits.html#integer-results"
            if isinstance(restype, (types.Integer, types.Boolean)) else None)
    raise UnsupportedError(f"{name} needs a function returning a float; {fname} returns "
                           f"{restype}{hint}", docs=docs) from err
