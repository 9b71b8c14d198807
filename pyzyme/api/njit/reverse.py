"""Reverse-mode derivatives as functions: ``grad``, ``value_and_grad`` and ``jacrev`` objects,
callable from Python and from inside ``@njit`` code.

From Python, a call annotates its arguments (floats ``Active``, arrays ``Duplicated`` with zero
shadows, the rest ``Const``; tuples, namedtuples and lists are flattened into their leaves) and
goes through :func:`~pyzyme.autodiff`. Inside ``@njit`` code the object types as an ``@njit``
function: when Numba compiles a call of it for some argument types, an overload builds
pyzyme's reverse derivative of ``f`` for those types and generates the code that allocates the
shadows and calls the compiled derivative, so no Python runs per call (the same machinery as
:mod:`pyzyme.api.njit.jacobian` for ``jacfwd``).

Reverse mode seeds a float result. Functions returning arrays are differentiated through small
``@njit`` wrappers made once per function: ``row`` returns one element of the result (a row of
the Jacobian per reverse sweep), ``dotted`` returns the result's dot product with a cotangent
(a vector-Jacobian product in one sweep).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba.core import types
from numba.core.compiler_lock import global_compiler_lock

from pyzyme.api import annotations as A
from pyzyme.api.autodiff import _dispatcher, _reverse, autodiff, reverse_plan
from pyzyme.api.args.complex import check_complex_result, has_complex, is_complex
from pyzyme.api.modes import Reverse, ReverseWithPrimal
from pyzyme.api.njit.overload import NjitObject, overloaded_njit
from pyzyme.api.args.pytree import to_numba
from pyzyme.api.args.refusals import check_passable
from pyzyme.errors import PyzymeError, UnsupportedError

__all__ = ["ReverseFunction", "row_wrapper", "dotted_wrapper", "result_type",
           "check_float_result", "reverse_call", "normalize_argnums"]

_WRAPPERS: dict[tuple, Any] = {}


# -- wrappers ------------------------------------------------------------------------------
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
                wrapper.__pyzyme_wraps__ = py
                fn = _WRAPPERS[key] = numba.njit(wrapper)
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


def dotted_wrapper(dispatcher, nargs: int, ndim: int):
    """``dotted(a0, ..., w)``: the dot product of ``f(a0, ...)`` (an ``ndim``-d array) with
    ``w``, whose gradient is the vector-Jacobian product with ``w``."""
    args = ", ".join(f"a{i}" for i in range(nargs))
    lines = [f"def dotted({args + ', ' if args else ''}w):", f"    y = f({args})",
             "    if y.shape != w.shape:",
             "        raise ValueError('vjp: the cotangent does not have the shape of the result')",
             "    s = 0.0"]
    indent = "    "
    for d in range(ndim):
        lines.append(f"{indent}for i{d} in range(y.shape[{d}]):")
        indent += "    "
    index = ", ".join(f"i{d}" for d in range(ndim)) or "()"
    lines.append(f"{indent}s += y[{index}] * w[{index}]")
    lines.append("    return s")
    source = "\n".join(lines) + "\n"
    return _cached_wrapper(("dotted", dispatcher, nargs, ndim), source, {"f": dispatcher},
                           "dotted", "the vector-Jacobian product")


def _flat_wrapper(dispatcher, trees: Sequence[Any]):
    """``flat(leaves...)``: ``f`` called with its containers rebuilt from their leaves.

    ``trees`` has one entry per argument of ``f``: None (passed through as one parameter) or a
    tree of :class:`_Node` whose leaves are parameters.
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
    key = ("flat", dispatcher, tuple(_tree_key(t) for t in trees))
    return _cached_wrapper(key, source, scope, "flat", "flattened arguments")


# -- argument trees (Python calls) -----------------------------------------------------------
class _Node:
    """A differentiated argument: a leaf, or a tuple / namedtuple / list of nodes."""

    def __init__(self, kind: str, value=None, children=(), cls=None) -> None:
        self.kind, self.value, self.children, self.cls = kind, value, tuple(children), cls

    def leaves(self) -> list[_Node]:
        if self.kind == "leaf":
            return [self]
        return [leaf for c in self.children for leaf in c.leaves()]


def _tree_key(tree):
    if tree is None:
        return None
    if tree.kind == "leaf":
        return "leaf"
    return (tree.kind, tree.cls, tuple(_tree_key(c) for c in tree.children))


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)


def _tree(value, where: str) -> _Node:
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return _Node("namedtuple", children=[_tree(v, where) for v in value], cls=type(value))
    if isinstance(value, (tuple, list)):
        return _Node("tuple" if isinstance(value, tuple) else "list",
                     children=[_tree(v, where) for v in value])
    if isinstance(value, dict):
        from pyzyme.api.args.pytree import dict_class, keys_of

        keys = keys_of(value, where)
        return _Node("dict", children=[_tree(value[k], f"{where}[{k!r}]") for k in keys],
                     cls=dict_class(keys))
    return _Node("leaf", value)


def _leaf_annotation(value, top: bool):
    """The annotation of a differentiated leaf and how its derivative is read back."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc":   # floating or complex
        shadow = np.zeros_like(value)
        return A.Duplicated(value, shadow), ("shadow", shadow)
    if _shadowed_in_place(value):
        from pyzyme.api.args.make_zero import make_zero
        from pyzyme.api.args.structured import keep_non_float

        shadow = make_zero(value)
        return A.Duplicated(value, shadow), ("after", lambda: keep_non_float(shadow, value))
    if isinstance(value, (float, np.floating)) or (top and _is_real(value)) or is_complex(value):
        return A.Active(value), ("active", None)
    return A.Const(value), ("const", value)


def _shadowed_in_place(value) -> bool:
    """Records, arrays of records and jitclass instances: their derivative is a zeroed copy
    (``make_zero``) that the reverse sweep accumulates into, float fields differentiated and
    the others kept."""
    from pyzyme.api.args.structured import is_jitclass

    return (isinstance(value, np.void) or is_jitclass(value)
            or (isinstance(value, np.ndarray) and value.dtype.fields is not None))


def _rebuild(node: _Node, values) -> Any:
    if node.kind == "leaf":
        return next(values)
    items = [_rebuild(c, values) for c in node.children]
    if node.kind == "namedtuple":
        return node.cls(*items)
    if node.kind == "dict":
        return dict(zip(node.cls._pyzyme_keys, items))
    return tuple(items) if node.kind == "tuple" else items


def normalize_argnums(argnums, name: str) -> tuple[tuple[int, ...], bool]:
    """``(argnums as a tuple, whether one was given as a bare int)``."""
    if isinstance(argnums, (int, np.integer)) and not isinstance(argnums, bool):
        return (int(argnums),), True
    if isinstance(argnums, (tuple, list)) and argnums and all(
            isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in argnums):
        if len(set(argnums)) != len(argnums):
            raise PyzymeError(f"{name}: argnums={tuple(argnums)} names an argument twice")
        return tuple(int(a) for a in argnums), False
    raise PyzymeError(f"{name}: argnums must be an int or a non-empty tuple of ints, got "
                      f"{argnums!r}")


def _check_argnums(argnums: tuple[int, ...], nargs: int, name: str) -> tuple[int, ...]:
    out = []
    for a in argnums:
        if not -nargs <= a < nargs:
            raise PyzymeError(f"{name}: argnums={a}, but the call has {nargs} arguments")
        out.append(a % nargs)
    return tuple(out)


def reverse_call(f, args: Sequence, argnums: Sequence[int], *, seed=None, name="grad",
                 need_value: bool = True):
    """Differentiate the float ``f(*args)`` with respect to ``args[i]`` for ``i`` in
    ``argnums`` by reverse mode (Python calls).

    Returns ``(value, derivatives)``, one derivative per argnum in the structure of its
    argument: a new array for an array, a float for a float, a tuple / namedtuple / list for
    those (their non-float leaves keep their value). ``seed`` (default 1.0) scales the result's
    adjoint, for vector-Jacobian products. Without ``need_value`` the value is None, and the
    derivative skips what only the value needed.
    """
    dispatcher = _dispatcher(f)
    args = list(args)
    argnums = _check_argnums(tuple(argnums), len(args), name)
    trees: list[_Node | None] = [None] * len(args)
    for i in argnums:
        value = args[i]
        if isinstance(value, np.ndarray) and value.dtype.kind not in "fc" \
                and value.dtype.fields is None:
            raise PyzymeError(f"{name}: argument {i} is an array of {value.dtype}; "
                              f"differentiate with respect to a floating array")
        trees[i] = _tree(value, f"argument {i}")
        if trees[i].kind == "leaf" and not (_is_real(value) or is_complex(value)
                                            or isinstance(value, np.ndarray)
                                            or _shadowed_in_place(value)):
            check_passable(value, f"argument {i}")
            raise UnsupportedError(
                f"{name}: argument {i} is a {type(value).__name__}; reverse mode "
                f"differentiates with respect to floats, float arrays, records, jitclass "
                f"instances, and tuples, namedtuples and lists of them")
    containers = any(t is not None and t.kind != "leaf" for t in trees)
    anns: list = []
    readers: dict[int, list] = {}
    for i, (value, tree) in enumerate(zip(args, trees)):
        if tree is None:
            anns.append(A.Const(to_numba(value, f"argument {i}")))
            continue
        readers[i] = []
        leaves = tree.leaves() if containers else [tree]
        for leaf in leaves:
            ann, reader = _leaf_annotation(leaf.value, top=tree.kind == "leaf")
            anns.append(ann)
            readers[i].append((len(anns) - 1, reader))
    target = _flat_wrapper(dispatcher, trees) if containers else dispatcher
    mode = ReverseWithPrimal if need_value else Reverse
    try:
        if seed is None:   # autodiff: a call of plain arguments goes straight to its derivative
            swept = autodiff(mode, target, A.Active, *anns)
        else:
            swept = _reverse(mode, target, A.Active, anns, seed=float(seed))
    except UnsupportedError as err:
        check_float_result(target, [_numba_type(a) for a in anns], name, err)
        raise
    derivs, value = swept[0], (swept[1] if need_value else None)
    out = []
    for i in argnums:
        got = []
        for position, (kind, payload) in readers[i]:
            if kind == "active":
                got.append(derivs[position])
            elif kind == "after":
                got.append(payload())
            else:
                got.append(payload)
        out.append(_rebuild(trees[i], iter(got)) if containers else got[0])
    return value, tuple(out)


def _numba_type(ann):
    value = ann.val
    if isinstance(ann, A.Active):
        if isinstance(value, tuple):
            from pyzyme.api.args.structured import active_tuple
            return numba.typeof(active_tuple(value))
        if is_complex(value):
            return numba.typeof(value)
        return numba.typeof(value if isinstance(value, np.float32) else float(value))
    return numba.typeof(value)


def check_float_result(dispatcher, argtypes, name: str, err: Exception | None = None) -> None:
    """Raise a clear error if ``dispatcher`` does not return a float for ``argtypes``."""
    restype = result_type(dispatcher, argtypes)
    if isinstance(restype, types.Float):
        return
    fname = getattr(dispatcher, "py_func", dispatcher).__qualname__
    if has_complex(restype):
        check_complex_result(restype, fname)
    hint = ("" if restype == types.none else
            ": use jacobian or jacrev for array results, vjp for a cotangent")
    raise UnsupportedError(f"{name} needs a function returning a float; {fname} returns "
                           f"{restype}{hint}") from err


def result_type(dispatcher, argtypes: Sequence[types.Type]) -> types.Type:
    """The Numba type ``dispatcher`` returns for arguments of types ``argtypes``."""
    sig = tuple(argtypes)
    dispatcher.compile(sig)
    cres = dispatcher.overloads[sig]
    return cres.signature.return_type


# -- objects callable from Python and @njit code ---------------------------------------------
class ReverseFunction(NjitObject):
    """What ``grad``, ``value_and_grad`` and ``jacrev`` return: a function of ``f``'s
    arguments, callable from Python and from ``@njit`` code (with float, int and ndarray
    arguments there)."""

    def __init__(self, kind: str, f, argnums) -> None:
        super().__init__()
        name = {"grad": "grad", "value_and_grad": "value_and_grad", "jacrev": "jacrev"}[kind]
        self._kind = kind
        self._argnums, self._single = normalize_argnums(argnums, name)
        if kind == "jacrev" and not self._single:
            raise PyzymeError("jacrev differentiates with respect to one positional argument")
        self._f = f
        self._dispatcher = _dispatcher(f)
        self.__wrapped__ = f
        self.__name__ = f"{name}({getattr(f, '__name__', 'f')})"
        self.__qualname__ = self.__name__
        self.__doc__ = _DOCS[kind]

    def __repr__(self) -> str:
        return f"<pyzyme {self.__name__}>"

    def __call__(self, *args):
        if self._kind == "jacrev":
            from pyzyme.api.convenience import reverse_jacobian
            return reverse_jacobian(self._dispatcher, args, self._argnums[0])
        value, derivs = reverse_call(self._dispatcher, args, self._argnums, name=self._kind,
                                     need_value=self._kind == "value_and_grad")
        result = derivs[0] if self._single else derivs
        if self._kind == "value_and_grad":
            return value, result
        return result

    def _make_njit(self):
        return _njit_function(self)


_DOCS = {
    "grad": "The gradient of the function with respect to the arguments ``argnums``.",
    "value_and_grad": "``(f(*args), gradient)`` with respect to the arguments ``argnums``.",
    "jacrev": "The Jacobian of the function with respect to argument ``argnums``, by reverse "
              "mode.",
}


def _njit_function(obj: ReverseFunction):
    dispatcher = obj._dispatcher
    params = list(inspect.signature(dispatcher.py_func).parameters.values())
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        raise UnsupportedError(f"{obj.__name__} inside @njit code needs a function with a fixed "
                               f"list of positional parameters")
    argnums = _check_argnums(obj._argnums, len(params), obj._kind)
    names = [f"a{i}" for i in range(len(params))]

    def typer(*argtypes):
        if obj._kind == "jacrev":
            return _jacrev_implementation(dispatcher, argtypes, argnums[0], names)
        return _grad_implementation(dispatcher, argtypes, argnums, obj._single,
                                    obj._kind == "value_and_grad", names)

    return overloaded_njit(obj._kind, names, typer)


@numba.njit
def _span(a):
    lo = a.ctypes.data
    hi = lo
    for d in range(a.ndim):
        extent = (a.shape[d] - 1) * a.strides[d]
        if extent < 0:
            lo += extent
        else:
            hi += extent
    return lo, hi + a.itemsize


@numba.njit
def _overlap(a, b):
    if a.size == 0 or b.size == 0:
        return False
    alo, ahi = _span(a)
    blo, bhi = _span(b)
    return alo < bhi and blo < ahi


def _roles(argtypes, argnums, name: str):
    """Per argument: the primal type the derivative takes, its kind, and the expression that
    converts the argument to it."""
    kinds, primal_types = [], []
    for i, t in enumerate(argtypes):
        if i not in argnums:
            kinds.append("const")
            primal_types.append(t)
        elif isinstance(t, (types.Float, types.Complex)):
            kinds.append("active")
            primal_types.append(t)
        elif isinstance(t, types.Integer):
            kinds.append("active")
            primal_types.append(types.float64)
        elif isinstance(t, types.Array) and isinstance(t.dtype, (types.Float, types.Complex)):
            if t.layout != "C":
                raise UnsupportedError(f"{name} inside @njit code needs C-contiguous array "
                                       f"arguments; pass np.ascontiguousarray(x)")
            kinds.append("duplicated")
            primal_types.append(t)
        elif isinstance(t, types.BaseTuple) and len(t) and all(
                isinstance(e, types.Float) for e in t):
            kinds.append("active")
            primal_types.append(t)
        else:
            raise UnsupportedError(f"{name} inside @njit code differentiates floats, complex "
                                   f"numbers, tuples of floats and float or complex arrays, "
                                   f"not {t}")
    return kinds, primal_types


def _plans(target, primal_types, kinds, need_primal: bool = False):
    """The derivative with noalias array data and, when two arrays could overlap, the one
    without; and the names of the array arguments to check at run time."""
    arrays = [i for i, t in enumerate(primal_types) if isinstance(t, types.Array)]
    distinct = reverse_plan(target, list(primal_types), list(kinds), A.Active, True,
                            need_primal)
    if not distinct.writes_arrays:
        # Arrays only read may overlap under noalias (LLVM's noalias is about memory written
        # through one pointer and read through another), and the shadows are fresh zeros.
        return distinct, None, []
    general = (reverse_plan(target, list(primal_types), list(kinds), A.Active, False,
                            need_primal) if len(arrays) > 1 else None)
    return distinct, general, arrays


def _call_lines(args: str, arrays: Sequence[str], indent: str) -> list[str]:
    """Lines binding ``r`` to the derivative's result, checking overlap when needed."""
    if len(arrays) < 2:
        return [f"{indent}r = rev_d({args})"]
    checks = " or ".join(f"_overlap({a}, {b})" for k, a in enumerate(arrays)
                         for b in arrays[k + 1:])
    return [f"{indent}if {checks}:", f"{indent}    r = rev_n({args})",
            f"{indent}else:", f"{indent}    r = rev_d({args})"]


def _grad_implementation(dispatcher, argtypes, argnums, single: bool, with_value: bool,
                         names: list[str]):
    name = "value_and_grad" if with_value else "grad"
    kinds, primal_types = _roles(argtypes, argnums, name)
    restype = result_type(dispatcher, primal_types)
    if not isinstance(restype, types.Float):
        raise UnsupportedError(f"{name} needs a function returning a float; "
                               f"{dispatcher.py_func.__qualname__} returns {restype}")
    rev_d, rev_n, arrays = _plans(dispatcher, primal_types, kinds, need_primal=with_value)
    lines = [f"def impl({', '.join(names)}):"]
    primals = []
    for i, (t, kind) in enumerate(zip(argtypes, kinds)):
        if kind == "active" and isinstance(t, types.Integer):
            lines.append(f"    x{i} = np.float64({names[i]})")
            primals.append(f"x{i}")
        else:
            primals.append(names[i])
    shadows = []
    for i, kind in enumerate(kinds):
        if kind == "duplicated":
            lines.append(f"    s{i} = np.zeros_like({names[i]})")
            shadows.append(f"s{i}")
    call = ", ".join(primals + shadows + ["1.0"])
    lines += _call_lines(call, [names[i] for i in arrays], "    ")
    results, position = {}, 1
    for i, kind in enumerate(kinds):
        if kind == "active":
            results[i] = f"r[{position}]"
            position += 1
        elif kind == "duplicated":
            results[i] = f"s{i}"
    grads = results[argnums[0]] if single else \
        "(" + "".join(results[i] + ", " for i in argnums) + ")"
    lines.append(f"    return (r[0], {grads})" if with_value else f"    return {grads}")
    scope = {"np": np, "rev_d": rev_d.function, "_overlap": _overlap,
             "rev_n": rev_n.function if rev_n is not None else None}
    exec("\n".join(lines) + "\n", scope)
    return scope["impl"]


def _jacrev_implementation(dispatcher, argtypes, argnum: int, names: list[str]):
    if has_complex(argtypes[argnum]) or (isinstance(argtypes[argnum], types.Array)
                                         and isinstance(argtypes[argnum].dtype, types.Complex)):
        raise UnsupportedError("jacrev of a complex argument is not supported: use grad for "
                               "a real-valued function, or jacfwd")
    kinds, primal_types = _roles(argtypes, (argnum,), "jacrev")
    if isinstance(argtypes[argnum], types.BaseTuple):
        raise UnsupportedError("jacrev inside @njit code differentiates a float or a float "
                               "array argument")
    restype = result_type(dispatcher, primal_types)
    x = names[argnum]
    lines = [f"def impl({', '.join(names)}):"]
    primals = list(names)
    if isinstance(argtypes[argnum], types.Integer):
        lines.append(f"    {x}f = np.float64({x})")
        primals[argnum] = f"{x}f"
    array = kinds[argnum] == "duplicated"
    n_in = f"{x}.size" if array else "1"
    if isinstance(restype, types.Float):
        rev_d, rev_n, arrays = _plans(dispatcher, primal_types, kinds)
        shadows = []
        if array:
            lines += [f"    s = np.zeros_like({x})"]
            shadows = ["s"]
        lines += _call_lines(", ".join(primals + shadows + ["1.0"]),
                             [names[i] for i in arrays], "    ")
        lines += [f"    J = np.empty((1, {n_in}))"]
        lines += ["    J[0, :] = s.reshape(-1)"] if array else ["    J[0, 0] = r[1]"]
        lines += ["    return J"]
    elif isinstance(restype, types.Array) and isinstance(restype.dtype, types.Float):
        row = row_wrapper(dispatcher, len(argtypes), restype.ndim)
        row_types = list(primal_types) + [types.intp]
        rev_d, rev_n, arrays = _plans(row, row_types, kinds + ["const"])
        lines += [f"    y = f({', '.join(primals)})", "    n = y.size",
                  f"    J = np.empty((n, {n_in}))"]
        shadows = []
        if array:
            lines += [f"    s = np.zeros_like({x})", "    v = s.reshape(-1)"]
            shadows = ["s"]
        lines += ["    for k in range(n):"]
        if array:
            lines += ["        v[:] = 0.0"]
        lines += _call_lines(", ".join(primals + ["k"] + shadows + ["1.0"]),
                             [names[i] for i in arrays], "        ")
        lines += ["        J[k, :] = v"] if array else ["        J[k, 0] = r[1]"]
        lines += ["    return J"]
    elif isinstance(restype, types.BaseTuple) and len(restype) and all(
            isinstance(t, types.Float) for t in restype):
        # one sweep per element of the tuple, seeded one-hot: the same compiled derivative
        m = len(restype)
        rev_d, rev_n, arrays = _plans(dispatcher, primal_types, kinds)
        lines += [f"    J = np.empty(({m}, {n_in}))"]
        shadows = []
        if array:
            lines += [f"    s = np.zeros_like({x})", "    v = s.reshape(-1)"]
            shadows = ["s"]
        for k in range(m):
            seed = "(" + "".join("1.0, " if i == k else "0.0, " for i in range(m)) + ")"
            if array:
                lines += ["    v[:] = 0.0"]
            lines += _call_lines(", ".join(primals + shadows + [seed]),
                                 [names[i] for i in arrays], "    ")
            lines += [f"    J[{k}, :] = v"] if array else [f"    J[{k}, 0] = r[1]"]
        lines += ["    return J"]
    else:
        raise UnsupportedError(f"jacrev needs a function returning a float, a tuple of floats "
                               f"or a float array; {dispatcher.py_func.__qualname__} returns "
                               f"{restype}")
    scope = {"np": np, "f": dispatcher, "rev_d": rev_d.function, "_overlap": _overlap,
             "rev_n": rev_n.function if rev_n is not None else None}
    exec("\n".join(lines) + "\n", scope)
    return scope["impl"]
