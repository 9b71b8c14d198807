"""``gradient`` and ``jacobian``: common derivatives in one call (``make_zero``, kept
importable from here, lives in :mod:`pyzyme.api.args.make_zero`); :func:`reverse_call`, the
reverse-mode gradient with respect to chosen arguments that ``grad`` and ``vjp`` call.

Forward mode seeds one input direction per batch lane; inputs with more elements than a chunk
are swept chunk by chunk, the last chunk padded with zero seeds so one compiled derivative
serves every chunk.

Reverse mode gets a whole gradient from one sweep. A Jacobian takes one sweep per output
element: each differentiates an ``@njit`` wrapper returning that element of ``f``'s result
(reverse mode seeds float results, not arrays).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba.core import types

from pyzyme.api import annotations as A
from pyzyme.api.args import refusals as R
from pyzyme.api.args.argnums import check_argnums
from pyzyme.api.args.call_shape import share_memory
from pyzyme.api.args.complex import is_complex, is_complex_array
from pyzyme.api.args.make_zero import make_zero
from pyzyme.api.args.marshal import zeros_laid_out_like
from pyzyme.api.args.pytree import to_numba
from pyzyme.api.args.structured import active_tuple, is_real
from pyzyme.api.args.trees import Node, leaf_annotation, rebuild, shadowed_in_place, tree
from pyzyme.api.args.typeof import argument_type
from pyzyme.api.autodiff import autodiff, reverse_entry, reverse_sweep
from pyzyme.api.dispatchers import (
    check_float_result,
    dispatcher_of,
    parameter_names,
    result_type,
)
from pyzyme.api.modes import Forward, Mode, Reverse, ReverseWithPrimal
from pyzyme.api.plans import CACHE
from pyzyme.api.wrappers import flat_wrapper, row_wrapper
from pyzyme.api.workspaces import build_with_workspaces, with_workspaces, with_zero_shadows
from pyzyme.errors import (
    ArgumentName,
    ArgumentTypeError,
    ArgumentValueError,
    PyzymeError,
    UnsupportedError,
)

__all__ = ["gradient", "jacobian", "jacobian_of", "forward_columns", "reverse_jacobian",
           "reverse_call", "plain_call", "make_zero", "DEFAULT_CHUNK"]

DEFAULT_CHUNK = 8


def _as_input(x: Any, complex_ok: bool = False) -> tuple[np.ndarray | float, bool]:
    if isinstance(x, np.ndarray):
        if complex_ok and np.issubdtype(x.dtype, np.complexfloating):
            return x, True
        if np.issubdtype(x.dtype, np.complexfloating):
            raise UnsupportedError(
                "a Jacobian with respect to a complex array is not supported: use gradient for a "
                "real-valued function, or pass the real and imaginary parts as real arrays")
        if not np.issubdtype(x.dtype, np.floating):
            raise ArgumentTypeError(f"differentiate with respect to a floating array, not "
                                    f"{x.dtype}")
        return x, True
    if complex_ok and is_complex(x):
        return x, False
    if isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool):
        return float(x), False
    raise ArgumentTypeError(f"gradient and jacobian take a float or a NumPy array, not "
                            f"{type(x).__name__}")


def forward_columns(f, args, argnum: int, chunk: int | None, unit=1.0,
                    complex_ok: bool = False):
    """Yield (input index, tangent of the output) for every element of ``args[argnum]``; the
    other arguments are constants. ``unit`` is the seed of each element (``1j``: the
    direction of the imaginary part of a complex input)."""
    x, is_array = _as_input(args[argnum], complex_ok=complex_ok)
    before = [A.Const(a) for a in args[:argnum]]
    after = [A.Const(a) for a in args[argnum + 1:]]
    n = x.size if is_array else 1
    width = max(1, min(chunk or DEFAULT_CHUNK, n))
    for start in range(0, n, width):
        seeds = []
        for lane in range(width):
            i = start + lane
            if is_array:
                seed = np.zeros_like(x)
                if i < n:
                    seed.reshape(-1)[i] = unit
            else:
                seed = unit if i < n else 0 * unit
            seeds.append(seed)
        if width == 1:
            (t,) = autodiff(Forward, f, A.DuplicatedNoNeed, *before,
                            A.Duplicated(x, seeds[0]), *after)
            tangents = (t,)
        else:
            (tangents,) = autodiff(Forward, f, A.BatchDuplicatedNoNeed, *before,
                                   A.BatchDuplicated(x, seeds), *after)
        for lane, t in enumerate(tangents):
            if start + lane < n:
                yield start + lane, t


def gradient(mode: Mode, f, x, *more, chunk: int | None = None, out=None):
    """The derivative of a scalar function ``f`` with respect to ``x`` (and to ``more``
    arguments: ``gradient(Reverse, f, x, y)`` gives ``(df/dx, df/dy)``, as Enzyme.jl's
    ``gradient`` of several arguments).

    Forward mode returns a tuple with one partial derivative per element of ``x`` (in C order).

    Reverse mode returns df/dx in the structure of ``x``: a new array for an array, a float for
    a float, a tuple / namedtuple / list for those (non-float fields keep their value). With
    ``out=dx`` (``x`` an array), ``dx`` is zeroed, receives df/dx and is returned.

    For complex ``x`` (a real-valued ``f``), both modes give ``df/dRe(x) + i df/dIm(x)`` per
    element: the conjugate of what JAX's ``grad`` gives (see :mod:`pyzyme.api.args.complex`).
    ``ReverseWithPrimal`` returns ``(df/dx, f(x))``.

    Parameters
    ----------
    mode : Mode
        ``Forward`` or ``Reverse`` (or ``ReverseWithPrimal``).
    f : callable
        An ``@njit`` function, or a plain Python function (compiled with ``numba.njit``),
        of ``x`` (and ``more``), returning a float.
    x : float, ndarray, or tuple of them
        The point.
    *more : float, ndarray, or tuple of them
        Further arguments: the result is then a tuple with one derivative per argument, each
        as for ``x`` alone; ``Const(v)`` passes ``v`` held constant (its entry is ``None``).
    chunk : int, optional
        Forward mode: how many directions one derivative call carries.
    out : ndarray, optional
        Reverse mode: the array that receives the gradient (same shape and dtype as ``x``).

    Examples
    --------
    >>> from pyzyme import Forward, Reverse
    >>> gradient(Forward, lambda x: x[0] * x[1], np.array([2.0, 3.0]))
    (3.0, 2.0)
    >>> gradient(Reverse, lambda x: x[0] * x[1], np.array([2.0, 3.0]))
    array([3., 2.])
    >>> dx = np.full(2, 7.0)
    >>> gradient(Reverse, lambda x: x[0] * x[1], np.array([2.0, 3.0]), out=dx) is dx
    True
    >>> dx
    array([3., 2.])
    >>> gradient(Reverse, lambda t: t[0] * t[1] ** 2, (2.0, 3.0))
    (9.0, 12.0)
    >>> gradient(Reverse, lambda z: (z[0] * z[0]).real, np.array([1.0 + 2.0j]))
    array([2.-4.j])
    >>> gradient(Reverse, lambda a, b: a[0] * b ** 2, np.array([2.0]), 3.0)
    (array([9.]), 12.0)
    >>> gradient(Forward, lambda a, b: a[0] * b ** 2, np.array([2.0]), 3.0)
    ((9.0,), (12.0,))
    >>> from pyzyme import Const
    >>> gradient(Reverse, lambda a, b: a[0] * b ** 2, np.array([2.0]), Const(3.0))
    (array([9.]), None)
    """
    if more:
        return _gradients(mode, f, (x, *more), chunk, out)
    if not mode.is_forward:
        return _reverse_gradient(mode, f, x, chunk, out)
    if out is not None:
        raise ArgumentTypeError("out= is for reverse mode; forward mode returns a tuple")
    # A complex input is swept along its real and then its imaginary parts (seeds 1 and 1j);
    # the partials combine as reverse mode's do: df/dRe + i df/dIm.
    units = (1.0, 1j) if (is_complex(x) or is_complex_array(x)) else (1.0,)
    parts = [_partials(f, (x,), 0, chunk, unit) for unit in units]
    if len(parts) == 2:
        return tuple(complex(re, im) for re, im in zip(*parts))
    return tuple(parts[0])


def _partials(f, args: tuple, argnum: int, chunk, unit=1.0) -> list:
    """Forward mode: the partial derivatives of float ``f(*args)`` with respect to each
    element of ``args[argnum]`` (seeded with ``unit``: ``1j`` for a complex one's imaginary
    parts)."""
    part = []
    for _, t in forward_columns(f, args, argnum, chunk, unit=unit, complex_ok=True):
        if not is_real(t):
            raise PyzymeError(f"gradient needs a function returning a float; this one "
                              f"returns {type(t).__name__}: use jacobian for vector results")
        part.append(float(t))
    return part


def _check_reverse(mode: Mode, chunk) -> None:
    if mode.split or mode.holomorphic:
        raise UnsupportedError(f"gradient takes Reverse or ReverseWithPrimal, not {mode}")
    if chunk is not None:
        raise ArgumentTypeError("chunk= is for forward mode; reverse mode gets the whole "
                                "gradient from one sweep")


def _gradients(mode: Mode, f, args: tuple, chunk, out):
    """``gradient`` of several arguments: one derivative per argument, ``None`` for one
    passed ``Const(v)`` (held constant, as in Enzyme.jl)."""
    if out is not None:
        raise ArgumentTypeError("out= is for the gradient of one argument")
    held = [isinstance(a, A.Const) for a in args]
    args = tuple(a.val if h else a for a, h in zip(args, held))
    wanted = tuple(k for k, h in enumerate(held) if not h)
    if not wanted:
        raise ArgumentValueError("gradient: every argument is Const; leave at least one "
                                 "bare to differentiate it")

    def spread(grads) -> tuple:
        found = iter(grads)
        return tuple(None if h else next(found) for h in held)
    if not mode.is_forward:
        _check_reverse(mode, chunk)
        value, grads = reverse_call(f, args, wanted, name="gradient",
                                    need_value=mode.with_primal)
        return (spread(grads), value) if mode.with_primal else spread(grads)
    if any(is_complex(args[k]) or is_complex_array(args[k]) for k in wanted):
        raise UnsupportedError("gradient(Forward, ...) of several arguments takes real ones; "
                               "differentiate a complex one alone")
    return spread(tuple(_partials(f, args, k, chunk)) for k in wanted)


def _reverse_gradient(mode: Mode, f, x, chunk, out):
    _check_reverse(mode, chunk)
    if out is None:
        value, (grad,) = reverse_call(f, (x,), (0,), name="gradient",
                                      need_value=mode.with_primal)
    else:
        x, is_array = _as_input(x, complex_ok=True)
        if not is_array:
            raise ArgumentTypeError("out= needs an array x (a float's derivative is "
                                    "returned)")
        if not isinstance(out, np.ndarray) or out.shape != x.shape or out.dtype != x.dtype:
            raise ArgumentValueError(f"out must be an array of shape {x.shape} and dtype "
                                     f"{x.dtype}, like x")
        if not out.flags.writeable:
            raise R.read_only_shadow("out", "out")
        dispatcher = dispatcher_of(f)
        out[...] = 0.0
        try:
            swept = autodiff(mode, dispatcher, A.Active, A.Duplicated(x, out))
        except UnsupportedError as err:
            check_float_result(dispatcher, [numba.typeof(x)], "gradient", err)
            raise
        grad, value = out, (swept[1] if mode.with_primal else None)
    return (grad, value) if mode.with_primal else grad


def jacobian(mode: Mode, f, x, *, chunk: int | None = None, n_outs: int | None = None):
    """The Jacobian of ``f`` at ``x``: an array of shape ``out.shape + x.shape`` (JAX's
    convention).

    ``out.shape`` is the shape of ``f(x)``: ``()`` for a float, ``(m,)`` for a tuple of ``m``
    floats; ``x.shape`` is ``()`` for a float. So a vector map gives the ``(n_out, n_in)``
    matrix, a float function of an array its gradient's shape, and a map from ``(2, 3)`` to
    ``(2, 3)`` an array of shape ``(2, 3, 2, 3)`` with ``J[i, j, k, l] = d f[i, j] / d x[k, l]``.

    Forward mode takes one derivative call per ``chunk`` input elements; reverse mode one
    sweep per output element (``chunk`` does not change it). ``n_outs`` (reverse mode, 1-D
    results) is the length of ``f(x)``; when left out, ``f`` is called once to find it.

    Examples
    --------
    >>> from pyzyme import Forward, Reverse
    >>> jacobian(Forward, lambda x: np.array([x[0] * x[1], x[1]]), np.array([2.0, 3.0]))
    array([[3., 2.],
           [0., 1.]])
    >>> jacobian(Reverse, lambda x: np.array([x[0] * x[1], x[1]]), np.array([2.0, 3.0]))
    array([[3., 2.],
           [0., 1.]])
    >>> jacobian(Reverse, lambda x: x[0] * x[1], np.array([2.0, 3.0]))
    array([3., 2.])
    >>> jacobian(Forward, lambda x: x * x, np.ones((2, 3))).shape
    (2, 3, 2, 3)
    """
    if not mode.is_forward:
        if mode.split or mode.holomorphic:
            raise UnsupportedError(f"jacobian takes Forward or Reverse, not {mode}")
        return reverse_jacobian(f, (x,), 0, n_outs)
    return jacobian_of(f, (x,), 0, chunk)


def reverse_jacobian(f, args, argnum: int, n_outs: int | None = None) -> np.ndarray:
    """The Jacobian of ``f(*args)`` with respect to ``args[argnum]``, by reverse mode: one
    sweep per element of the result; shape ``out.shape + x.shape``."""
    dispatcher = dispatcher_of(f)
    args = list(args)
    if not -len(args) <= argnum < len(args):
        raise ArgumentValueError(f"argnums={argnum}, but the call has {len(args)} arguments")
    argnum %= len(args)
    x, is_array = _as_input(args[argnum])
    args[argnum] = x
    in_shape = x.shape if is_array else ()
    restype = result_type(dispatcher, [numba.typeof(a) for a in args])
    if isinstance(restype, types.Float):
        _, (grad,) = reverse_call(dispatcher, args, (argnum,), name="jacobian",
                                  need_value=False)
        return np.asarray(grad, dtype=float).reshape(in_shape)
    if isinstance(restype, types.BaseTuple) and len(restype) and all(
            isinstance(t, types.Float) for t in restype):
        return _tuple_jacobian(dispatcher, args, argnum, len(restype), x,
                               is_array).reshape((len(restype),) + in_shape)
    if not (isinstance(restype, types.Array) and isinstance(restype.dtype, types.Float)):
        raise UnsupportedError(f"jacobian needs a function returning a float, a tuple of "
                               f"floats or a float array; {dispatcher.py_func.__qualname__} "
                               f"returns {restype}")
    entry = _entry_state(args, argnum)   # before the call below may write an array
    if n_outs is None or restype.ndim != 1:
        out_shape = np.shape(dispatcher(*args))
        n = int(np.prod(out_shape))
        if n_outs is not None and n_outs != n:
            raise ArgumentValueError(f"n_outs={n_outs}, but f returns {n} values")
    else:
        n = int(n_outs)
        out_shape = (n,)
    row = row_wrapper(dispatcher, len(args), restype.ndim)
    return _sweep_rows(args, argnum, x, is_array, n, lambda anns, k: autodiff(
        Reverse, row, A.Active, *anns, A.Const(k))[0], entry).reshape(out_shape + in_shape)
def _tuple_jacobian(dispatcher, args, argnum: int, n: int, x, is_array: bool) -> np.ndarray:
    """The Jacobian of a function returning ``n`` floats: one reverse sweep of the same
    compiled derivative per output, seeded with a one-hot tuple."""
    def sweep(anns, k):
        seed = tuple(1.0 if i == k else 0.0 for i in range(n))
        return reverse_sweep(Reverse, dispatcher, A.Active, anns, seed=seed)[0]
    return _sweep_rows(args, argnum, x, is_array, n, sweep)


def _entry_state(args, argnum: int) -> dict:
    """Copies of the float arrays among ``args`` held constant: the state each of a Jacobian's
    sweeps starts from, where the function writes one (:mod:`pyzyme.api.workspaces`)."""
    return {i: a.copy() for i, a in enumerate(args) if i != argnum and type(a) is _NDARRAY
            and a.dtype.kind in "fc" and a.flags.writeable}


def _sweep_rows(args, argnum: int, x, is_array: bool, n: int, sweep,
                entry: dict | None = None) -> np.ndarray:
    """An ``n``-row Jacobian in ``args[argnum]``: row k from ``sweep(annotations, k)``, one
    reverse sweep whose derivatives land in a zeroed shadow (arrays) or come back (floats).
    Arrays the function writes get zero shadows of their own, fresh for each row, and each
    sweep starts from their contents in ``entry`` (by default, as now): every row is the
    derivative of one call of the function (:mod:`pyzyme.api.workspaces`)."""
    entry = _entry_state(args, argnum) if entry is None else entry
    jac = np.empty((n, x.size if is_array else 1))
    shadow = np.zeros_like(x) if is_array else None
    scratch = None
    for k in range(n):
        anns = [A.Const(a) for a in args]
        if is_array:
            shadow[...] = 0.0
            anns[argnum] = A.Duplicated(x, shadow)
        else:
            anns[argnum] = A.Active(x)

        def row(found, anns=anns, k=k):
            for i in found:
                args[i][...] = entry[i]
            return sweep(with_zero_shadows(anns, found), k)
        if scratch is None:
            derivs, scratch = build_with_workspaces(row)
        else:
            derivs = row(scratch)
        jac[k] = shadow.reshape(-1) if is_array else derivs[argnum]
    return jac


def jacobian_of(f, args, argnum: int, chunk: int | None) -> np.ndarray:
    """The Jacobian of ``f(*args)`` with respect to ``args[argnum]``, by forward mode; shape
    ``out.shape + x.shape``."""
    columns = list(forward_columns(f, args, argnum, chunk))
    in_shape = np.shape(args[argnum])
    if not columns:    # an empty input: no tangent to read the result's shape from
        out_shape = np.shape(dispatcher_of(f)(*args))
        return np.empty(out_shape + in_shape)
    out_shape = np.shape(columns[0][1])
    jac = np.empty((int(np.prod(out_shape)), len(columns)))
    for i, (_, t) in enumerate(columns):
        jac[:, i] = np.asarray(t, dtype=float).reshape(-1)
    return jac.reshape(out_shape + in_shape)


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
    dispatcher = dispatcher_of(f)
    args = list(args)
    argnums = check_argnums(tuple(argnums), len(args), name)
    if seed is None:
        plain = plain_call(dispatcher, args, argnums, name, need_value)
        if plain is not None:
            return plain
    trees: list[Node | None] = [None] * len(args)
    names = [None]

    def parameters():     # looked up only when a message names an argument
        if names[0] is None:
            names[0] = parameter_names(f) or []
        return names[0]

    for i in argnums:
        value = args[i]
        where = ArgumentName(parameters, i)
        if isinstance(value, np.ndarray) and value.dtype.kind not in "fc" \
                and value.dtype.fields is None:
            raise ArgumentTypeError(f"{name}: {where} is an array of {value.dtype}; "
                                    f"differentiate with respect to a floating array")
        trees[i] = tree(value, where)
        if trees[i].kind == "leaf" and not (is_real(value) or is_complex(value)
                                            or isinstance(value, np.ndarray)
                                            or shadowed_in_place(value)):
            R.check_passable(value, where)
            raise UnsupportedError(
                f"{name}: {where} is a {type(value).__name__}; reverse mode "
                f"differentiates with respect to floats, float arrays, records, jitclass "
                f"instances, and tuples, namedtuples and lists of them")
    containers = any(t is not None and t.kind != "leaf" for t in trees)
    anns: list = []
    readers: dict[int, list] = {}
    for i, (value, node) in enumerate(zip(args, trees)):
        if node is None:
            anns.append(A.Const(to_numba(value, ArgumentName(parameters, i))))
            continue
        readers[i] = []
        leaves = node.leaves() if containers else [node]
        for leaf in leaves:
            ann, reader = leaf_annotation(leaf.value, top=node.kind == "leaf")
            anns.append(ann)
            readers[i].append((len(anns) - 1, reader))
    target = flat_wrapper(dispatcher, trees) if containers else dispatcher
    mode = ReverseWithPrimal if need_value else Reverse

    def attempt(anns):
        if seed is None:   # autodiff: a call of plain arguments goes straight to its derivative
            return autodiff(mode, target, A.Active, *anns)
        return reverse_sweep(mode, target, A.Active, anns, seed=float(seed))
    try:
        swept, _ = with_workspaces(anns, attempt, (target, mode, tuple(
            (type(a), _numba_type(a)) for a in anns)))
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
        out.append(rebuild(trees[i], iter(got)) if containers else got[0])
    return value, tuple(out)


_NDARRAY = np.ndarray   # read once: plain_call runs on every call from Python
# The bits of ``ndarray.flags.num`` that Numba's type of an array depends on besides its
# dtype and dimensions (C and F contiguity, alignment, writeability: what array_key reads),
# read as one int: one attribute instead of four (0.08 us against 0.3 us an array).
_TYPE_FLAGS = 0x1 | 0x2 | 0x100 | 0x400


def plain_call(dispatcher, args, argnums: tuple, name: str, need_value: bool):
    """:func:`reverse_call` for plain arguments (``argnums`` checked against them) (float
    arrays and floats differentiated, arrays, floats and int64 ints held), without the trees
    containers need; from the second call of a signature on, straight to the compiled
    derivative through a call generated for the signature (``grad(f)(x)`` from Python paid
    15 us a call in annotations, call shapes and cache lookups). None for any other call
    (then the general path runs)."""
    key = [dispatcher, argnums, need_value]
    for value in args:
        kind = type(value)
        if kind is _NDARRAY:
            key += (value.dtype, value.ndim, value.flags.num & _TYPE_FLAGS)
        elif kind is float or (kind is int and -2 ** 63 <= value < 2 ** 63):
            key.append(kind)
        else:
            return None
    key = tuple(key)
    call = CACHE.call(key)
    if call is not None:
        got = call(args)
        if got is not None:   # None: a derivative for how these arrays overlap is not built
            return got
    # What a signature decides (the same on every later call with it) is checked once, here.
    for i in argnums:
        value = args[i]
        if type(value) is int or (type(value) is _NDARRAY and (
                value.dtype.kind not in "fc" or value.dtype.fields is not None)):
            return None
    mode = ReverseWithPrimal if need_value else Reverse
    anns = [(A.Duplicated(v, np.zeros_like(v)) if type(v) is _NDARRAY else A.Active(v))
            if i in argnums else A.Const(v) for i, v in enumerate(args)]
    try:
        swept, found = with_workspaces(anns, lambda anns: autodiff(mode, dispatcher, A.Active,
                                                                    *anns))
    except UnsupportedError as err:
        check_float_result(dispatcher, [_numba_type(a) for a in anns], name, err)
        raise
    anns = with_zero_shadows(anns, found)  # the marshal allocates their shadows each call
    _remember_plain(key, mode, dispatcher, anns, argnums)
    derivs = swept[0]
    return (swept[1] if need_value else None,
            tuple(anns[i].dval if type(args[i]) is _NDARRAY else derivs[i] for i in argnums))


def _distinct(args) -> bool:
    """Whether no two of the (non-empty) arrays among ``args`` share memory."""
    return not share_memory([a for a in args if type(a) is _NDARRAY and a.size])


class _ByOverlap:
    """The calls of one signature whose derivative may write array data, one per answer of
    :func:`_distinct` (its arrays are ``noalias`` only where none share memory)."""

    def __init__(self) -> None:
        self.calls: dict[bool, object] = {}

    def __call__(self, args):
        call = self.calls.get(_distinct(args))
        return None if call is None else call(args)


def _remember_plain(key: tuple, mode, dispatcher, anns: list, argnums: tuple) -> None:
    """Keep, under ``key``, the call :func:`plain_call` makes from then on for arguments like
    ``anns``'. A derivative that writes no array data serves every later call, whatever its
    arrays share: LLVM's ``noalias`` is about memory written through one pointer and read
    through another, and the shadows are fresh zeros (as for grad in ``@njit`` code). Otherwise
    the call first asks whether the arrays overlap (``np.may_share_memory``)."""
    distinct = _distinct([a.val for a in anns])
    plan, seeds = reverse_entry(mode, dispatcher, A.Active, [type(a) for a in anns],
                                [argument_type(a.val) for a in anns], distinct)
    call = _plain_marshal(plan, seeds, anns, argnums, mode.with_primal)
    if distinct and not plan.writes_arrays:
        CACHE.remember_call(key, call)
        return
    by_overlap = CACHE.call(key)
    if not isinstance(by_overlap, _ByOverlap):
        by_overlap = _ByOverlap()
        CACHE.remember_call(key, by_overlap)
    by_overlap.calls[distinct] = call


def _plain_marshal(plan, seeds: tuple, anns: list, argnums: tuple, with_value: bool):
    """``call(args) -> (value, derivatives)`` for arguments like ``anns``', generated for them
    (as Numba's dispatcher has a compiled path per signature): unpack, allocate the zero
    shadows, call ``plan``'s derivative, pick out what was asked for, with no loop, closure or
    question left for the call to run."""
    scope = {"function": plan.function, "zeros": np.zeros, "zeros_like": np.zeros_like,
             "laid_out": zeros_laid_out_like}
    names = [f"a{i}" for i in range(len(anns))]
    lines = ["def call(args):", f"    {''.join(n + ', ' for n in names)}= args"]
    shadows, results = [], {}
    place = 1 if plan.returns_primal else 0
    for i, ann in enumerate(anns):
        if isinstance(ann, A.Duplicated):
            flags = ann.val.flags
            results[i] = f"s{i}"
            # The shadow has the primal's strides (a contiguous array's, those of np.zeros
            # of its shape, a microsecond cheaper than np.zeros_like, in either order; a
            # size-one dimension's stride multiplies index 0 only). A strided array's
            # gradient comes back compact, as from the general path.
            if flags.c_contiguous or flags.f_contiguous:
                scope[f"d{i}"] = ann.val.dtype
                order = "" if flags.c_contiguous else ", order='F'"
                lines.append(f"    s{i} = zeros(a{i}.shape, d{i}{order})")
            else:
                lines.append(f"    s{i} = laid_out(a{i})")
                results[i] = f"s{i}.copy(order='K')"
            shadows.append(f"s{i}")
        elif isinstance(ann, A.Active):
            results[i] = f"r[{place}]"
            place += 1
    for k, seed in enumerate(seeds):
        scope[f"seed{k}"] = seed
    call = f"function({', '.join(names + shadows + [f'seed{k}' for k in range(len(seeds))])})"
    value = "r[0]" if with_value and plan.returns_primal else "None"
    picked = [results[i] for i in argnums]
    uses_result = value != "None" or any(r.startswith("r[") for r in picked)
    lines.append(f"    r = {call}" if uses_result else f"    {call}")
    lines.append(f"    return {value}, ({''.join(r + ', ' for r in picked)})")
    exec("\n".join(lines) + "\n", scope)
    return scope["call"]


def _numba_type(ann):
    """The Numba type the derivative takes for the argument annotated ``ann``."""
    value = ann.val
    if isinstance(ann, A.Active):
        if isinstance(value, tuple):
            return numba.typeof(active_tuple(value))
        if is_complex(value):
            return numba.typeof(value)
        return numba.typeof(value if isinstance(value, np.float32) else float(value))
    return numba.typeof(value)
