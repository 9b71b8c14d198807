"""Small ``@njit`` wrappers around a user's function, made once per function and shape.

Reverse mode seeds a float result, and takes its arguments flat. Functions returning arrays,
or taking containers, are differentiated through wrappers written here: ``row`` returns one
element of the result (a row of the Jacobian per reverse sweep), ``loss`` the first of a
``(loss, aux)`` pair, ``dotted`` the result's dot product with a cotangent (a
vector-Jacobian product in one sweep), ``flat`` takes a container's leaves as parameters
(:mod:`pyzyme.api.args.trees`). Each wrapper is registered as standing for the user's
function (:func:`pyzyme.api.dispatchers.remember_wrapper`), so errors name that function and
its line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
from numba.core.compiler_lock import global_compiler_lock

from pyzyme.api.args.trees import tree_key
from pyzyme.api.dispatchers import remember_wrapper

__all__ = ["row_wrapper", "dotted_wrapper", "weighted_wrapper", "moved_wrapper", "flat_wrapper",
           "loss_wrapper"]

_WRAPPERS: dict[tuple, Any] = {}


def _cached_wrapper(key: tuple, source: str, scope: dict, name: str, what: str):
    """The ``@njit`` function ``name`` defined by ``source``, made once per ``key``.

    It wraps ``scope["f"]`` and takes its name, module and qualified name, so that what names
    the function compiled (mangled symbols, error messages) names the user's function, not the
    wrapper; ``what`` says in its file name what the wrapper does.
    """
    fn = _WRAPPERS.get(key)
    if fn is None:
        with global_compiler_lock:  # the lock builds take (DerivativeCache.get), and why
            fn = _WRAPPERS.get(key)
            if fn is None:
                py = scope["f"].py_func
                scope["__name__"] = py.__module__
                code = compile(source, f"<pyzyme: {what} of {py.__qualname__}>", "exec")
                exec(code, scope)  # noqa: S102  (our own source)
                wrapper = scope[name]
                wrapper.__name__, wrapper.__qualname__ = py.__name__, py.__qualname__
                fn = numba.njit(wrapper)
                remember_wrapper(fn, py)
                _WRAPPERS[key] = fn
    return fn


def row_wrapper(dispatcher, nargs: int, ndim: int):
    """``row(a0, ..., k)``: element ``k`` (in C order) of ``f(a0, ...)``, an ``ndim``-d array."""
    args = ", ".join(f"a{i}" for i in range(nargs))
    lines = ["def row(" + (args + ", " if args else "") + "k):", f"    y = f({args})"]
    lines += ["    if k < 0 or k >= y.size:",
              "        raise IndexError('jacobian: output row out of range (n_outs is larger "
              "than the result)')"]
    if ndim == 0:
        lines.append("    return y[()]")
    elif ndim == 1:
        lines.append("    return y[k]")
    else:
        lines.append("    r = k")
        for d in range(ndim - 1, 0, -1):
            lines += [f"    i{d} = r % y.shape[{d}]", f"    r = r // y.shape[{d}]"]
        index = ", ".join(["r"] + [f"i{d}" for d in range(1, ndim)])
        lines.append(f"    return y[{index}]")
    source = "\n".join(lines) + "\n"
    return _cached_wrapper(("row", dispatcher, nargs, ndim), source, {"f": dispatcher}, "row",
                           "a row of the result")


def loss_wrapper(dispatcher, nargs: int):
    """``loss(a0, ...)``: the first element of ``f(a0, ...)``, which returns ``(loss, aux)``
    (what ``grad(f, has_aux=True)`` differentiates)."""
    args = ", ".join(f"a{i}" for i in range(nargs))
    source = f"def loss({args}):\n    return f({args})[0]\n"
    return _cached_wrapper(("loss", dispatcher, nargs), source, {"f": dispatcher}, "loss",
                           "the loss without its auxiliary data")


def dotted_wrapper(dispatcher, nargs: int, ndim: int):
    """``dotted(a0, ..., w)``: the dot product of ``f(a0, ...)`` (an ``ndim``-d array) with
    ``w``, whose gradient is the vector-Jacobian product with ``w``."""
    args = ", ".join(f"a{i}" for i in range(nargs))
    lines = [f"def dotted({args + ', ' if args else ''}w):", f"    y = f({args})",
             "    if y.shape != w.shape:",
             "        raise ValueError('vjp: the cotangent does not have the shape of the result')",
             "    s = 0.0", *_dot_lines("y", "w", ndim), "    return s"]
    source = "\n".join(lines) + "\n"
    return _cached_wrapper(("dotted", dispatcher, nargs, ndim), source, {"f": dispatcher},
                           "dotted", "the vector-Jacobian product")


def _dot_lines(y: str, w: str, ndim: int) -> list[str]:
    """Source lines adding the dot product of the ``ndim``-d arrays ``y`` and ``w`` (same
    shape) to ``s``: one loop per dimension."""
    lines, indent = [], "    "
    for d in range(ndim):
        lines.append(f"{indent}for i{d} in range({y}.shape[{d}]):")
        indent += "    "
    index = ", ".join(f"i{d}" for d in range(ndim)) or "()"
    return [*lines, f"{indent}s += {y}[{index}] * {w}[{index}]"]


def weighted_wrapper(dispatcher, nargs: int, parts: tuple, single: bool):
    """``weighted(a0, ..., w0, w1, ...)``: the sum over the float parts of ``f(a0, ...)`` of
    each part's dot product with its weight: the gradient is the vector-Jacobian product with
    the weights, for a result of several parts in one sweep.

    ``parts`` says for each part of the result (the result itself when ``single``, else each
    item of the tuple it returns) what it is: ``"s"`` a float, an int ``d`` a ``d``-d float
    array, ``"-"`` anything without a derivative (no weight is passed for it).

    Examples
    --------
    >>> import numba, numpy as np
    >>> f = numba.njit(lambda x: (x.sum(), 2 * x, 3))
    >>> w = weighted_wrapper(f, 1, ("s", 1, "-"), False)
    >>> float(w(np.array([1.0, 2.0]), 10.0, np.array([1.0, -1.0])))
    28.0
    """
    args = ", ".join(f"a{i}" for i in range(nargs))
    weights = [f"w{k}" for k, part in enumerate(parts) if part != "-"]
    lines = [f"def weighted({', '.join([*([args] if args else []), *weights])}):",
             f"    y = f({args})", "    s = 0.0"]
    for k, part in enumerate(parts):
        y = "y" if single else f"y[{k}]"
        if part == "-":
            continue
        if part == "s":
            lines.append(f"    s += {y} * w{k}")
            continue
        lines += [f"    y{k} = {y}",
                  f"    if y{k}.shape != w{k}.shape:",
                  f"        raise ValueError('the cotangent of result {k} does not have its "
                  f"shape')"]
        lines += _dot_lines(f"y{k}", f"w{k}", part)
    lines.append("    return s")
    source = "\n".join(lines) + "\n"
    return _cached_wrapper(("weighted", dispatcher, nargs, tuple(parts), single), source,
                           {"f": dispatcher}, "weighted", "the vector-Jacobian product")


def moved_wrapper(dispatcher, nargs: int, position: int):
    """``moved(a_position, a0, ...)``: ``f`` with its argument ``position`` taken first, for
    what differentiates with respect to a first argument (:func:`pyzyme.hvp`).

    Examples
    --------
    >>> import numba
    >>> f = numba.njit(lambda a, b, c: a - 10 * b + 100 * c)
    >>> moved_wrapper(f, 3, 2)(1.0, 2.0, 3.0)   # f(2.0, 3.0, 1.0)
    72.0
    """
    rest = [f"a{i}" for i in range(nargs) if i != position]
    args = ", ".join(f"a{i}" for i in range(nargs))
    source = f"def moved({', '.join([f'a{position}', *rest])}):\n    return f({args})\n"
    return _cached_wrapper(("moved", dispatcher, nargs, position), source, {"f": dispatcher},
                           "moved", f"argument {position} first")


def flat_wrapper(dispatcher, trees: Sequence[Any]):
    """``flat(leaves...)``: ``f`` called with its containers rebuilt from their leaves.

    ``trees`` has one entry per argument of ``f``: None (passed through as one parameter) or a
    :class:`~pyzyme.api.args.trees.Node` whose leaves are parameters.
    """
    scope: dict = {"f": dispatcher}
    params: list[str] = []

    def expr(node) -> str:
        if node.kind == "leaf":
            name = f"l{len(params)}"
            params.append(name)
            return name
        items = [expr(c) for c in node.children]
        if node.kind in ("namedtuple", "dict"):
            cls = f"C{len(scope)}"
            scope[cls] = node.cls
            return f"{cls}({', '.join(items)})"
        return "(" + "".join(i + ", " for i in items) + ")"

    call = []
    for tree in trees:
        if tree is None:
            name = f"l{len(params)}"
            params.append(name)
            call.append(name)
        else:
            call.append(expr(tree))
    source = f"def flat({', '.join(params)}):\n    return f({', '.join(call)})\n"
    key = ("flat", dispatcher, tuple(tree_key(t) for t in trees))
    return _cached_wrapper(key, source, scope, "flat", "flattened arguments")
