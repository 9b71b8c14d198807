"""``gradient``, ``jacobian`` and ``make_zero``: common derivatives in one call.

Forward mode seeds one input direction per batch lane; inputs with more elements than a chunk
are swept chunk by chunk, the last chunk padded with zero seeds so one compiled derivative
serves every chunk.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from pyzyme.api import annotations as A
from pyzyme.api.autodiff import autodiff
from pyzyme.api.modes import Forward, Mode
from pyzyme.errors import PyzymeError, UnsupportedError

__all__ = ["gradient", "jacobian", "jacobian_of", "forward_columns", "make_zero",
           "DEFAULT_CHUNK"]

DEFAULT_CHUNK = 8


def _as_input(x: Any) -> tuple[np.ndarray | float, bool]:
    if isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise PyzymeError(f"differentiate with respect to a floating array, not {x.dtype}")
        return x, True
    if isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool):
        return float(x), False
    raise UnsupportedError(f"gradient and jacobian take a float or a NumPy array, not "
                           f"{type(x).__name__}")


def forward_columns(f, args, argnum: int, chunk: int | None):
    """Yield (input index, tangent of the output) for every element of ``args[argnum]``; the
    other arguments are constants."""
    x, is_array = _as_input(args[argnum])
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
                    seed.reshape(-1)[i] = 1.0
            else:
                seed = 1.0 if i < n else 0.0
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


def gradient(mode: Mode, f, x, *, chunk: int | None = None, out=None):
    """The derivative of a scalar function ``f`` with respect to ``x``.

    Forward mode returns a tuple with one partial derivative per element of ``x`` (in C order).

    Examples
    --------
    >>> from pyzyme import Forward
    >>> gradient(Forward, lambda x: x[0] * x[1], np.array([2.0, 3.0]))
    (3.0, 2.0)
    """
    if not mode.is_forward:
        raise UnsupportedError("gradient(Reverse, ...) arrives with reverse mode")
    if out is not None:
        raise PyzymeError("out= is for reverse mode; forward mode returns a tuple")
    out = []
    for _, t in forward_columns(f, (x,), 0, chunk):
        if not _is_real(t):
            raise PyzymeError(f"gradient needs a function returning a float; this one returns "
                              f"{type(t).__name__}: use jacobian for vector results")
        out.append(float(t))
    return tuple(out)


def _is_real(t) -> bool:
    return isinstance(t, (float, int, np.floating, np.integer)) and not isinstance(t, bool)


def jacobian(mode: Mode, f, x, *, chunk: int | None = None, n_outs: int | None = None):
    """The Jacobian of ``f`` at ``x``: a 2-D array of shape ``(n_out, n_in)``.

    Examples
    --------
    >>> from pyzyme import Forward
    >>> jacobian(Forward, lambda x: np.array([x[0] * x[1], x[1]]), np.array([2.0, 3.0]))
    array([[3., 2.],
           [0., 1.]])
    """
    if not mode.is_forward:
        raise UnsupportedError("jacobian(Reverse, ...) arrives with reverse mode")
    return jacobian_of(f, (x,), 0, chunk)


def jacobian_of(f, args, argnum: int, chunk: int | None) -> np.ndarray:
    """The Jacobian of ``f(*args)`` with respect to ``args[argnum]``, by forward mode."""
    columns = list(forward_columns(f, args, argnum, chunk))
    flat = [np.asarray(t, dtype=float).reshape(-1) for _, t in columns]
    n_out = flat[0].size if flat else 0
    jac = np.empty((n_out, len(flat)))
    for i, col in enumerate(flat):
        jac[:, i] = col
    return jac


def make_zero(x: Any) -> Any:
    """A recursive zeroed copy of ``x``: arrays, floats, tuples, lists, dicts, namedtuples.

    Examples
    --------
    >>> make_zero({"w": np.ones(2), "b": (1.5, 2)})
    {'w': array([0., 0.]), 'b': (0.0, 0)}
    """
    if isinstance(x, np.ndarray):
        return np.zeros_like(x)
    if isinstance(x, bool):
        return x
    if isinstance(x, (float, np.floating)):
        return type(x)(0.0)
    if isinstance(x, (int, np.integer)):
        return type(x)(0)
    if isinstance(x, complex):
        return 0j
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(make_zero(v) for v in x))
    if isinstance(x, (tuple, list)):
        return type(x)(make_zero(v) for v in x)
    if isinstance(x, dict):
        return {k: make_zero(v) for k, v in x.items()}
    if hasattr(x, "__dict__") and not hasattr(x, "_numba_type_"):
        zero = copy.copy(x)
        for name, value in vars(x).items():
            setattr(zero, name, make_zero(value))
        return zero
    raise UnsupportedError(f"make_zero does not know how to zero a {type(x).__name__}")

