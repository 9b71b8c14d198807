"""Reverse-mode derivatives as functions: ``grad``, ``value_and_grad`` and ``jacrev`` objects,
callable from Python and from inside ``@njit`` code.

From Python, a call goes through :func:`~pyzyme.api.convenience.reverse_call` (arguments
annotated, containers flattened) or :func:`~pyzyme.api.convenience.reverse_jacobian`. Inside
``@njit`` code the object types as an ``@njit`` function: when Numba compiles a call of it for
some argument types, an overload builds pyzyme's reverse derivative of ``f`` for those types and
generates the code that allocates the shadows and calls the compiled derivative, so no Python
runs per call (the same machinery as :mod:`pyzyme.api.njit.jacobian` for ``jacfwd``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import numpy as np
from numba.core import types

from pyzyme.analysis.activity import Activity
from pyzyme.api import annotations as A
from pyzyme.api.args.argnums import check_argnums, normalize_argnums
from pyzyme.api.args.complex import has_complex
from pyzyme.api.args.structured import is_real
from pyzyme.api.convenience import plain_call, reverse_call, reverse_jacobian
from pyzyme.api.dispatchers import dispatcher_of, result_type
from pyzyme.api.njit.overlap import any_overlap, overlap
from pyzyme.api.njit.overload import NjitObject, overloaded_njit
from pyzyme.api.njit.zeros import copy_into, zeros_like, zeros_rows
from pyzyme.api.plans import reverse_plan
from pyzyme.api.wrappers import loss_wrapper, row_wrapper
from pyzyme.api.workspaces import build_with_workspaces, kept_lines, restored_lines
from pyzyme.frontends.numba.bridge import njit_target
from pyzyme.errors import ArgumentTypeError, PyzymeError, UnsupportedError, argument_name

__all__ = ["ReverseFunction"]


# -- objects callable from Python and @njit code ---------------------------------------------
class ReverseFunction(NjitObject):
    """What ``grad``, ``value_and_grad`` and ``jacrev`` return: a function of ``f``'s
    arguments, callable from Python and from ``@njit`` code (with float, int and ndarray
    arguments there)."""

    def __init__(self, kind: str, f, argnums, has_aux: bool = False) -> None:
        super().__init__()
        name = {"grad": "grad", "value_and_grad": "value_and_grad", "jacrev": "jacrev"}[kind]
        self._kind = kind
        self._argnums, self._single = normalize_argnums(argnums, name)
        if kind == "jacrev" and not self._single:
            raise ArgumentTypeError("jacrev differentiates with respect to one positional argument")
        if not isinstance(has_aux, bool):
            raise ArgumentTypeError(f"{name}: has_aux must be True or False, not {has_aux!r}")
        self._has_aux = has_aux
        # argnums checked, by number of arguments, for calls that may take the plain path
        self._plain: dict[int, tuple] = {}
        self._f = f
        self._dispatcher = dispatcher_of(f)
        self._signature = inspect.signature(self._dispatcher.py_func)
        # fewer arguments than this: f's defaults fill the rest (the derivative takes them all)
        self._positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                               for p in self._signature.parameters.values())
        self.__wrapped__ = f
        self.__name__ = f"{name}({getattr(f, '__name__', 'f')})"
        self.__qualname__ = self.__name__
        self.__doc__ = _DOCS[kind]

    def __repr__(self) -> str:
        return f"<pyzyme {self.__name__}>"

    def __call__(self, *args, **kwargs):
        got = None
        if not kwargs:   # the call from Python an optimizer loop makes: straight to the derivative
            argnums = self._plain.get(len(args))
            if argnums is not None:
                got = plain_call(self._dispatcher, args, argnums, self._kind,
                                 self._kind == "value_and_grad")
        if got is None:
            if kwargs or len(args) < self._positional:
                args = self._bind(args, kwargs)
            elif self._kind != "jacrev" and not self._has_aux:
                self._plain[len(args)] = check_argnums(self._argnums, len(args), self._kind)
            if self._kind == "jacrev":
                return reverse_jacobian(self._dispatcher, args, self._argnums[0])
            if self._has_aux:
                return self._call_with_aux(args)
            got = reverse_call(self._dispatcher, args, self._argnums, name=self._kind,
                               need_value=self._kind == "value_and_grad")
        value, derivs = got
        result = derivs[0] if self._single else derivs
        if self._kind == "value_and_grad":
            return value, result
        return result

    def _call_with_aux(self, args: tuple):
        """``f`` returns ``(loss, aux)``: one primal call gives both, one reverse sweep of the
        loss alone the gradient."""
        out = self._dispatcher(*args)
        if not (isinstance(out, tuple) and len(out) == 2 and is_real(out[0])):
            raise PyzymeError(f"{self._kind}(has_aux=True) needs a function returning "
                              f"(loss, aux) with a float loss; "
                              f"{self._dispatcher.py_func.__qualname__} returns "
                              f"{type(out).__name__}"
                              + (f" of {len(out)}" if isinstance(out, tuple) else ""))
        _, derivs = reverse_call(loss_wrapper(self._dispatcher, len(args)), args,
                                 self._argnums, name=self._kind, need_value=False)
        result = derivs[0] if self._single else derivs
        if self._kind == "value_and_grad":
            return out, result
        return result, out[1]

    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        """``args`` with ``kwargs`` put in their places in ``f``'s parameters (its defaults
        filling the rest), as Python would call ``f``; keyword arguments are constants."""
        params = list(self._signature.parameters)
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as err:
            raise ArgumentTypeError(f"{self.__name__}: {err}") from None
        bound.apply_defaults()
        if bound.kwargs:
            raise ArgumentTypeError(f"{self.__name__}: keyword arguments beyond f's "
                                    f"parameters ({', '.join(bound.kwargs)}) are not passed")
        n = len(bound.args)
        for i in check_argnums(self._argnums, n, self._kind):
            if i >= len(args):
                raise ArgumentTypeError(
                    f"{self.__name__}: {argument_name(params, i)} is differentiated "
                    f"(argnums), so pass it by position, not by keyword or default")
        return bound.args

    def _make_njit(self):
        return _njit_function(self)


_DOCS = {
    "grad": "The gradient of the function with respect to the arguments ``argnums``.",
    "value_and_grad": "``(f(*args), gradient)`` with respect to the arguments ``argnums``.",
    "jacrev": "The Jacobian of the function with respect to argument ``argnums``, by reverse "
              "mode.",
}


def _njit_function(obj: ReverseFunction):
    """The ``@njit`` function standing for ``obj`` in ``@njit`` code (positional
    arguments)."""
    dispatcher = obj._dispatcher
    params = list(inspect.signature(dispatcher.py_func).parameters.values())
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        raise UnsupportedError(f"{obj.__name__} inside @njit code needs a function with a fixed "
                               f"list of positional parameters")
    argnums = check_argnums(obj._argnums, len(params), obj._kind)
    names = [f"a{i}" for i in range(len(params))]

    def typer(*argtypes):
        if obj._kind == "jacrev":
            return _jacrev_implementation(dispatcher, argtypes, argnums[0], names)
        return _grad_implementation(dispatcher, argtypes, argnums, obj._single,
                                    obj._kind == "value_and_grad", names, obj._has_aux)

    return overloaded_njit(obj._kind, names, typer)


def _roles(argtypes, argnums, name: str):
    """Per argument: the primal type the derivative takes, its kind, and the expression that
    converts the argument to it."""
    kinds, primal_types = [], []
    for i, t in enumerate(argtypes):
        if i not in argnums:
            kinds.append(Activity.CONST)
            primal_types.append(t)
        elif isinstance(t, (types.Float, types.Complex)):
            kinds.append(Activity.ACTIVE)
            primal_types.append(t)
        elif isinstance(t, types.Integer):
            kinds.append(Activity.ACTIVE)
            primal_types.append(types.float64)
        elif isinstance(t, types.Array) and isinstance(t.dtype, (types.Float, types.Complex)):
            if t.layout != "C":
                raise UnsupportedError(f"{name} inside @njit code needs C-contiguous array "
                                       f"arguments; pass np.ascontiguousarray(x)")
            kinds.append(Activity.DUPLICATED)
            primal_types.append(t)
        elif isinstance(t, types.BaseTuple) and len(t) and all(
                isinstance(e, types.Float) for e in t):
            kinds.append(Activity.ACTIVE)
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


def _plans_with_workspaces(target, primal_types, kinds, need_primal: bool = False):
    """:func:`_plans`, and ``kinds`` with the C-contiguous constant float arrays the function
    writes made Duplicated where their build needs shadows (:mod:`pyzyme.api.workspaces`:
    the implementation gives them zeros)."""
    def duplicated(found) -> list:
        return [Activity.DUPLICATED if k in found else kind for k, kind in enumerate(kinds)]
    plans, found = build_with_workspaces(
        lambda found: _plans(target, primal_types, duplicated(found), need_primal),
        eligible=lambda k: primal_types[k].layout == "C")
    return (*plans, duplicated(found))


def _call_lines(args: str, arrays: Sequence[str], indent: str) -> list[str]:
    """Lines binding ``r`` to the derivative's result, checking overlap when needed."""
    if len(arrays) < 2:
        return [f"{indent}r = rev_d({args})"]
    checks = any_overlap(arrays, "_overlap")
    return [f"{indent}if {checks}:", f"{indent}    r = rev_n({args})",
            f"{indent}else:", f"{indent}    r = rev_d({args})"]


def _grad_implementation(dispatcher, argtypes, argnums, single: bool, with_value: bool,
                         names: list[str], has_aux: bool = False):
    name = "value_and_grad" if with_value else "grad"
    kinds, primal_types = _roles(argtypes, argnums, name)
    restype = result_type(dispatcher, primal_types)
    target = dispatcher
    if has_aux:
        if not (isinstance(restype, types.BaseTuple) and len(restype) == 2
                and isinstance(restype[0], types.Float)):
            raise UnsupportedError(f"{name}(has_aux=True) needs a function returning (loss, "
                                   f"aux) with a float loss; "
                                   f"{dispatcher.py_func.__qualname__} returns {restype}")
        target = loss_wrapper(dispatcher, len(argtypes))
    elif not isinstance(restype, types.Float):
        raise UnsupportedError(f"{name} needs a function returning a float; "
                               f"{dispatcher.py_func.__qualname__} returns {restype}")
    rev_d, rev_n, arrays, kinds = _plans_with_workspaces(target, primal_types, kinds,
                                                         with_value and not has_aux)
    lines = [f"def impl({', '.join(names)}):"]
    primals = []
    for i, (t, kind) in enumerate(zip(argtypes, kinds)):
        if kind is Activity.ACTIVE and isinstance(t, types.Integer):
            lines.append(f"    x{i} = np.float64({names[i]})")
            primals.append(f"x{i}")
        else:
            primals.append(names[i])
    shadows = []
    for i, kind in enumerate(kinds):
        if kind is Activity.DUPLICATED:
            lines.append(f"    s{i} = zeros_like({names[i]})")
            shadows.append(f"s{i}")
    call = ", ".join(primals + shadows + ["1.0"])
    lines += _call_lines(call, [names[i] for i in arrays], "    ")
    results, position = {}, 1
    for i, kind in enumerate(kinds):
        if kind is Activity.ACTIVE:
            results[i] = f"r[{position}]"
            position += 1
        elif kind is Activity.DUPLICATED:
            results[i] = f"s{i}"
    grads = results[argnums[0]] if single else \
        "(" + "".join(results[i] + ", " for i in argnums) + ")"
    if has_aux:     # the primal call gives the loss and aux; the sweep differentiates the loss
        lines.append(f"    out = f({', '.join(names)})")
        lines.append(f"    return (out, {grads})" if with_value else
                     f"    return ({grads}, out[1])")
    else:
        lines.append(f"    return (r[0], {grads})" if with_value else f"    return {grads}")
    scope = {"np": np, "zeros_like": zeros_like, "rev_d": njit_target(rev_d.function),
             "_overlap": overlap, "f": dispatcher,
             "rev_n": njit_target(rev_n.function) if rev_n is not None else None}
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
    array = kinds[argnum] is Activity.DUPLICATED

    def shadows(of_x: str | None) -> list[str]:
        # the derivative's shadows in argument order: x's, and fresh zeros for each array
        # the function writes (pyzyme.api.workspaces)
        return [of_x if i == argnum else f"zeros_like({names[i]})"
                for i, kind in enumerate(kinds) if kind is Activity.DUPLICATED]

    def written() -> list[int]:
        return [i for i, kind in enumerate(kinds[:len(names)])
                if kind is Activity.DUPLICATED and i != argnum]

    def keep() -> list[str]:
        # each sweep starts from the arrays the function writes as they were on entry
        return kept_lines(names, written())

    def restore(indent: str) -> list[str]:
        return restored_lines(names, written(), indent)
    # JAX's shape, out.shape + x.shape. An array argument's Jacobian rows are its shadows:
    # zeroed, each one sweep adds into in place (no copies, no reshape where out is 1-D:
    # Numba's first compile of a slice assignment or a reshape costs a process 0.1-0.2 s).
    if isinstance(restype, types.Float):
        rev_d, rev_n, arrays, kinds = _plans_with_workspaces(dispatcher, primal_types, kinds)
        if array:
            lines += [f"    s = zeros_like({x})"]
            lines += _call_lines(", ".join(primals + shadows("s") + ["1.0"]),
                                 [names[i] for i in arrays], "    ")
            lines += ["    return s"]
        else:
            lines += _call_lines(", ".join(primals + shadows(None) + ["1.0"]),
                                 [names[i] for i in arrays], "    ")
            lines += ["    J = np.empty((1, 1))", "    J[0, 0] = r[1]", "    return J.reshape(())"]
    elif isinstance(restype, types.Array) and isinstance(restype.dtype, types.Float):
        row = row_wrapper(dispatcher, len(argtypes), restype.ndim)
        row_types = list(primal_types) + [types.intp]
        rev_d, rev_n, arrays, kinds = _plans_with_workspaces(row, row_types,
                                                             kinds + [Activity.CONST])
        lines += keep()   # before f's call below writes them
        lines += [f"    y = f({', '.join(primals)})", "    n = y.size"]
        if array:
            lines += [f"    J = zeros_rows(n, {x})", "    for k in range(n):", *restore("        ")]
            lines += _call_lines(", ".join(primals + ["k"] + shadows("J[k]") + ["1.0"]),
                                 [names[i] for i in arrays], "        ")
            shape = "J" if restype.ndim == 1 else f"J.reshape(y.shape + {x}.shape)"
        else:
            lines += ["    J = np.empty((n, 1))", "    for k in range(n):", *restore("        ")]
            lines += _call_lines(", ".join(primals + ["k"] + shadows(None) + ["1.0"]),
                                 [names[i] for i in arrays], "        ")
            lines += ["        J[k, 0] = r[1]"]
            shape = "J.reshape(y.shape)"
        lines += [f"    return {shape}"]
    elif isinstance(restype, types.BaseTuple) and len(restype) and all(
            isinstance(t, types.Float) for t in restype):
        # one sweep per element of the tuple, seeded one-hot: the same compiled derivative
        m = len(restype)
        rev_d, rev_n, arrays, kinds = _plans_with_workspaces(dispatcher, primal_types, kinds)
        lines += [f"    J = zeros_rows({m}, {x})" if array else f"    J = np.empty(({m}, 1))"]
        lines += keep()
        for k in range(m):
            lines += restore("    ") if k else []
            seed = "(" + "".join("1.0, " if i == k else "0.0, " for i in range(m)) + ")"
            lines += _call_lines(", ".join(primals + shadows(f"J[{k}]" if array else None)
                                           + [seed]),
                                 [names[i] for i in arrays], "    ")
            if not array:
                lines += [f"    J[{k}, 0] = r[1]"]
        lines += ["    return J" if array else f"    return J.reshape(({m},))"]
    else:
        raise UnsupportedError(f"jacrev needs a function returning a float, a tuple of floats "
                               f"or a float array; {dispatcher.py_func.__qualname__} returns "
                               f"{restype}")
    scope = {"np": np, "zeros_like": zeros_like, "zeros_rows": zeros_rows, "f": dispatcher,
             "copy_into": copy_into,
             "rev_d": njit_target(rev_d.function), "_overlap": overlap,
             "rev_n": njit_target(rev_n.function) if rev_n is not None else None}
    exec("\n".join(lines) + "\n", scope)
    return scope["impl"]
