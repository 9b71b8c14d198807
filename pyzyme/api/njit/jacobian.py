"""Jacobians callable from inside ``@njit`` code.

``jacfwd(f)`` returns a :class:`ForwardJacobian`, which stands for an ``@njit`` function (one per
set of options). When Numba compiles a call of it for some argument types (from Python or inside
other ``@njit`` code), an overload builds pyzyme's forward
derivative of ``f`` for those types, with ``CHUNK`` shadows of the differentiated argument, and
generates a loop that sweeps the seeds through it chunk by chunk: no Python runs per call.
"""

from __future__ import annotations

import inspect

import numpy as np
from numba.core import types

from pyzyme.api import annotations as A
from pyzyme.api.njit.overload import NjitObject, overloaded_njit
from pyzyme.api.njit.zeros import copy_into, zeros_like
from pyzyme.api.plans import forward_plan
from pyzyme.api.workspaces import build_with_workspaces, kept_lines, restored_lines
from pyzyme.frontends.numba.bridge import njit_target, signature_of
from pyzyme.errors import ArgumentValueError, UnsupportedError

__all__ = ["njit_jacobian", "ForwardJacobian", "CHUNK"]

CHUNK = 4


def njit_jacobian(dispatcher, argnum: int) -> ForwardJacobian:
    """A function of ``f``'s parameters returning d f / d args[argnum], callable from Python
    and from ``@njit`` code."""
    params = list(inspect.signature(dispatcher.py_func).parameters.values())
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        raise UnsupportedError("jacfwd needs a function with a fixed list of positional "
                               "parameters")
    if not 0 <= argnum < len(params):
        raise ArgumentValueError(f"argnums={argnum}, but the function has {len(params)} parameters")
    return ForwardJacobian(dispatcher, argnum, [f"a{i}" for i in range(len(params))])


class ForwardJacobian(NjitObject):
    """What ``jacfwd`` returns. A call from Python goes through the ``@njit`` function of the
    options in force (:class:`NjitObject`): one function for every call would keep the
    derivative of the options its first compilation saw."""

    def __init__(self, dispatcher, argnum: int, names: list[str]) -> None:
        super().__init__()
        self._dispatcher, self._argnum, self._names = dispatcher, argnum, names
        self.__wrapped__ = dispatcher
        self.__name__ = f"jacfwd({dispatcher.py_func.__name__})"

    def __repr__(self) -> str:
        return f"<pyzyme {self.__name__}>"

    def __call__(self, *args):
        return self.njit(*args)

    def _make_njit(self):
        def typer(*argtypes):
            return _implementation(self._dispatcher, argtypes, self._argnum, self._names)
        return overloaded_njit("jac", self._names, typer)


def _implementation(dispatcher, argtypes, argnum: int, names: list[str]):
    x = argtypes[argnum]
    if isinstance(x, types.Float):
        width, array = 1, False
    elif isinstance(x, types.Array) and isinstance(x.dtype, types.Float):
        if x.layout != "C":
            raise UnsupportedError("jacfwd inside @njit code needs a C-contiguous array "
                                   "argument; pass np.ascontiguousarray(x)")
        width, array = CHUNK, True
    else:
        raise UnsupportedError(f"jacfwd differentiates with respect to a float or a float "
                               f"array, not {x}")
    # arrays the function writes get shadows of their own (pyzyme.api.workspaces)
    plan, written = build_with_workspaces(
        lambda found: forward_plan(dispatcher, list(argtypes),
                                   [i == argnum or i in found for i in range(len(argtypes))],
                                   A.BatchDuplicatedNoNeed, width, need_primal=False),
        eligible=lambda k: argtypes[k].layout == "C")
    lanes = _Calls(names, argnum, width, sorted(written))
    if not plan.returns_tangent:
        raise UnsupportedError(f"{dispatcher.py_func.__qualname__} returns nothing to "
                               f"differentiate")
    restype = signature_of(plan.function).return_type
    vector = restype[0].ndim if isinstance(restype[0], types.Array) else 0
    outs = len(restype[0]) if isinstance(restype[0], types.BaseTuple) else 0
    if outs and not all(isinstance(t, types.Float) for t in restype[0]):
        raise UnsupportedError(f"jacfwd needs a function returning floats, a tuple of floats "
                               f"or a float array; {dispatcher.py_func.__qualname__} returns "
                               f"{restype[0]}")
    source = (_tuple_source(names, argnum, width, array, outs, lanes) if outs else
              _source(names, argnum, width, array, vector, lanes))
    scope = {"np": np, "zeros_like": zeros_like, "copy_into": copy_into,
             "fwd": njit_target(plan.function), "f": dispatcher}
    exec(source, scope)
    return scope["impl"]


class _Calls:
    """The shadows of a call of the forward derivative, in argument order: ``x``'s lanes, and
    ``width`` fresh zeros for each array the function writes (``written``:
    :mod:`pyzyme.api.workspaces`), which every call starts from as it was on entry (each
    call runs the function again)."""

    def __init__(self, names: list[str], argnum: int, width: int, written: list[int]) -> None:
        self.names, self.argnum, self.width, self.written = names, argnum, width, written

    def call(self, of_x: list[str]) -> str:
        args = ", ".join(self.names)
        shadows = []
        for i in sorted([self.argnum, *self.written]):
            shadows += of_x if i == self.argnum else \
                [f"zeros_like({self.names[i]})"] * self.width
        return f"fwd({args}, {', '.join(shadows)})"

    def keep(self) -> list[str]:
        return kept_lines(self.names, self.written)

    def restore(self, indent: str) -> list[str]:
        return restored_lines(self.names, self.written, indent)


def _source(names: list[str], argnum: int, width: int, array: bool, vector: int,
            calls: _Calls) -> str:
    """The ``@njit`` Jacobian of a function returning a float (``vector`` 0) or a float array
    of ``vector`` dimensions: an array of shape ``out.shape + x.shape``, built as the
    ``(n_out, n_in)`` matrix and reshaped."""
    args = ", ".join(names)
    x = names[argnum]
    lanes = range(width)
    lines = [f"def impl({args}):"]
    if not array:
        lines += [f"    r = {calls.call(['1.0'])}",
                  "    t = r[1]"]
        if vector:
            lines += ["    return t.copy()", ""]
        else:
            lines += ["    J = np.empty((1, 1))", "    J[0, 0] = t", "    return J.reshape(())", ""]
        return "\n".join(lines)
    shadows = [f"s{k}" for k in lanes]
    lines += [f"    n = {x}.size"]
    if vector:   # an empty input: no tangent to read the result's shape from
        lines += ["    if n == 0:", f"        return np.empty(f({args}).shape + {x}.shape)"]
    lines += [f"    s{k} = zeros_like({x})\n    v{k} = s{k}.reshape(-1)" for k in lanes]
    lines += calls.keep()
    lines += ["    J = np.empty((1, n))" if not vector else
              f"    J = np.empty((0, n))\n    shape = {(0,) * vector}",
              f"    for start in range(0, n, {width}):"]
    lines += [f"        if start + {k} < n:\n            v{k}[start + {k}] = 1.0" for k in lanes]
    lines += calls.restore("        ") + [f"        r = {calls.call(shadows)}"]
    if vector:
        lines += ["        if start == 0:", "            J = np.empty((r[1].size, n))",
                  "            shape = r[1].shape"]
    for k in lanes:
        # A column element by element: Numba compiles an array-to-slice assignment's shape
        # check for seconds (2.1 s of CPU more than this loop, in every process).
        column = (f"c = r[{k + 1}].reshape(-1)\n"
                  f"            for i in range(c.size):\n"
                  f"                J[i, start + {k}] = c[i]" if vector
                  else f"J[0, start + {k}] = r[{k + 1}]")
        lines += [f"        if start + {k} < n:", f"            {column}",
                  f"            v{k}[start + {k}] = 0.0"]
    lines += [f"    return J.reshape(shape + {x}.shape)" if vector else
              f"    return J.reshape({x}.shape)"]
    return "\n".join(lines + [""])


def _tuple_source(names: list[str], argnum: int, width: int, array: bool, outs: int,
                  calls: _Calls) -> str:
    """As :func:`_source`, for a function returning a tuple of ``outs`` floats: row ``i`` of
    the Jacobian is read from element ``i`` of each lane's tangent tuple; shape
    ``(outs,) + x.shape``."""
    args = ", ".join(names)
    x = names[argnum]
    lines = [f"def impl({args}):"]
    if not array:
        lines += [f"    r = {calls.call(['1.0'])}", f"    J = np.empty({outs})"]
        lines += [f"    J[{i}] = r[1][{i}]" for i in range(outs)]
        return "\n".join(lines + ["    return J", ""])
    lanes = range(width)
    shadows = [f"s{k}" for k in lanes]
    lines += [f"    n = {x}.size", f"    J = np.empty(({outs}, n))"]
    lines += [f"    s{k} = zeros_like({x})\n    v{k} = s{k}.reshape(-1)" for k in lanes]
    lines += calls.keep()
    lines += [f"    for start in range(0, n, {width}):"]
    lines += [f"        if start + {k} < n:\n            v{k}[start + {k}] = 1.0" for k in lanes]
    lines += calls.restore("        ") + [f"        r = {calls.call(shadows)}"]
    for k in lanes:
        lines += [f"        if start + {k} < n:"]
        lines += [f"            J[{i}, start + {k}] = r[{k + 1}][{i}]" for i in range(outs)]
        lines += [f"            v{k}[start + {k}] = 0.0"]
    return "\n".join(lines + [f"    return J.reshape(({outs},) + {x}.shape)", ""])
