"""``check_grads``: JAX's check of a function's derivatives against finite differences.

Every float and float-array argument is differentiated (integers and other values are held
constant). For each mode asked for, the derivative along each input direction (one element of
one argument: a column of the Jacobian, shape ``out.shape``) is compared with central finite
differences of ``f`` along that direction; a mismatch raises :class:`AssertionError` listing
the directions, each with both values, so the wrong entry shows. ``order=2`` also checks the
second derivatives of a float-valued ``f``: the forward-mode Jacobian of its gradient taken by
each mode (forward over forward for ``"fwd"``, forward over reverse for ``"rev"``), against
finite differences of that gradient, as JAX checks order 2 against differences of first-order
AD. (Reverse mode over a derivative of array code is not available yet: pyzyme refuses it
with ``UnsupportedError``, so the outer mode is forward.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from pyzyme.api.convenience import jacobian_of, reverse_jacobian
from pyzyme.api.dispatchers import dispatcher_of, parameter_names
from pyzyme.api.njit.jacobian import njit_jacobian
from pyzyme.api.njit.reverse import ReverseFunction
from pyzyme.errors import ArgumentTypeError, ArgumentValueError, argument_name
from pyzyme.testing.fdm import central_fdm

__all__ = ["check_grads"]

_MODES = {"fwd": "forward mode", "rev": "reverse mode"}
_SHOWN = 12   # directions listed in a failure at most


def check_grads(f, args: Sequence, order: int = 1, modes: Sequence[str] = ("fwd", "rev"),
                atol: float | None = None, rtol: float | None = None, fdm=None) -> None:
    """Check the derivatives of ``f`` at ``args`` against central finite differences, as
    ``jax.test_util.check_grads`` does.

    Parameters
    ----------
    f : callable
        An ``@njit`` function, or a plain Python function (compiled with ``numba.njit``),
        returning a float, a float array or a tuple of floats (``order=2``: a float).
    args : tuple
        The positional arguments. Floats and float arrays are differentiated, every other
        argument is held constant.
    order : {1, 2}, optional
        1: the Jacobian with respect to each differentiated argument. 2: that, and the
        Hessian (the forward-mode Jacobian of the gradient).
    modes : sequence of {"fwd", "rev"}, optional
        The modes to check (order 2: the mode of the gradient that forward mode
        differentiates again).
    atol, rtol : float, optional
        Tolerances of the comparison (default 1e-8 and 1e-6; 1e-5 and 1e-3 when an argument
        is float32).
    fdm : CentralFDM, optional
        The finite-difference method (default :func:`~pyzyme.testing.central_fdm` (5)).

    Raises
    ------
    AssertionError
        A derivative differs from finite differences: the message lists each input direction
        (argument and element) with the derivative and the difference quotient along it.

    Examples
    --------
    >>> import numpy as np
    >>> check_grads(lambda x, y: np.sum(np.sin(x) * y), (np.array([0.5, 1.0]), 2.0), order=2)
    >>> import numba
    >>> from pyzyme import rules
    >>> @numba.njit
    ... def cube(x):
    ...     return x ** 3
    >>> @rules.forward(cube)             # a wrong rule: 3 x, not 3 x^2
    ... def cube_fwd(config, x, dx):
    ...     return x ** 3, 3.0 * x * dx
    >>> check_grads(lambda v: cube(v[0]) + v[1], (np.array([2.0, 1.0]),),
    ...             modes=("fwd",))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: check_grads(<lambda>): forward mode's derivative differs from ...
      d/d v[0] (argument 'v' (position 0)): fwd 6.0, FD 12.0...  <-- differs
      d/d v[1] (argument 'v' (position 0)): fwd 1.0, FD 1.0...
    """
    if not isinstance(args, (tuple, list)):
        raise ArgumentTypeError(f"check_grads takes args as a tuple of the positional "
                                f"arguments, not {type(args).__name__}")
    if order not in (1, 2):
        raise ArgumentValueError(f"check_grads: order must be 1 or 2, not {order!r}")
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    if not modes or any(m not in _MODES for m in modes):
        raise ArgumentValueError(f"check_grads: modes must be among 'fwd' and 'rev', got "
                                 f"{modes!r}")
    dispatcher = dispatcher_of(f)
    args = tuple(args)
    positions = [i for i, a in enumerate(args) if _differentiable(a)]
    if not positions:
        raise ArgumentValueError("check_grads: no float or float-array argument to "
                                 "differentiate")
    float32 = any(np.asarray(args[i]).dtype == np.float32 for i in positions)
    rtol = rtol if rtol is not None else (1e-3 if float32 else 1e-6)
    atol = atol if atol is not None else (1e-5 if float32 else 1e-8)
    fdm = fdm if fdm is not None else central_fdm(5)
    names = parameter_names(f)
    name = getattr(getattr(dispatcher, "py_func", f), "__qualname__", "f")
    inputs = [(i, _labels(names, i, args[i])) for i in positions]
    for mode in modes:
        _check(dispatcher, args, inputs, mode, mode, rtol, atol, fdm,
               f"check_grads({name}): {_MODES[mode]}'s derivative", None)
    if order == 2:
        if not isinstance(dispatcher(*args), (float, np.floating)):
            raise ArgumentTypeError(f"check_grads(order=2) needs a function returning a "
                                    f"float; {name} returns {type(dispatcher(*args)).__name__}")
        outputs = [label for _, labels in inputs for label in labels]
        for mode in modes:
            gradient = _flat_gradient(dispatcher, args, positions, mode)
            _check(gradient, args, inputs, "fwd", f"fwd over {mode}", rtol, atol, fdm,
                   f"check_grads({name}, order=2): forward mode over {_MODES[mode]}'s second "
                   f"derivative", outputs)


def _differentiable(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "f" and value.dtype.fields is None
    return isinstance(value, (float, np.floating))


def _labels(names, position: int, value) -> list[str]:
    """One label per element of argument ``position``: ``v[1, 2] (argument 'v' (position
    0))``."""
    arg = argument_name(names, position)
    short = names[position] if names and position < len(names) else f"args[{position}]"
    if not isinstance(value, np.ndarray):
        return [f"{short} ({arg})"]
    return [f"{short}[{', '.join(map(str, index))}] ({arg})"
            for index in np.ndindex(value.shape)]


def _columns(target, args: tuple, position: int, mode: str) -> np.ndarray:
    """The Jacobian of ``target`` with respect to ``args[position]`` by ``mode``, as one column
    per input element: shape ``(n_in, n_out)``."""
    if mode == "fwd":
        jac = jacobian_of(target, args, position, None)
    else:
        jac = reverse_jacobian(target, args, position)
    n_in = np.size(args[position])
    return np.asarray(jac, dtype=float).reshape(-1, n_in).T


def _differences(target, args: tuple, position: int, fdm) -> np.ndarray:
    """As :func:`_columns`, by finite differences of ``target`` along each input element."""
    value = args[position]
    rows = []
    for k in range(np.size(value)):
        def moved(t, k=k):
            if isinstance(value, np.ndarray):
                x = value.copy()
                x.reshape(-1)[k] = t
            else:
                x = t
            out = target(*args[:position], x, *args[position + 1:])
            return np.asarray(out, dtype=float).reshape(-1)
        start = value.reshape(-1)[k] if isinstance(value, np.ndarray) else value
        rows.append(np.asarray(fdm(moved, float(start)), dtype=float).reshape(-1))
    return np.array(rows)


def _check(target, args, inputs, mode: str, shown_as: str, rtol: float, atol: float, fdm,
           what: str, outputs) -> None:
    rows, bad = [], 0
    for position, labels in inputs:
        ad = _columns(target, args, position, mode)
        fd = _differences(target, args, position, fdm)
        for label, a, d in zip(labels, ad, fd):
            differs = not np.allclose(a, d, rtol=rtol, atol=atol)
            bad += differs
            rows.append((differs, label, a, d))
    if not bad:
        return
    shown = [r for r in rows if r[0]][:_SHOWN]
    shown += [r for r in rows if not r[0]][:max(0, min(_SHOWN - len(shown), 4))]
    shown.sort(key=rows.index)
    lines = [f"{what} differs from finite differences along {bad} of {len(rows)} input "
             f"directions (rtol={rtol:g}, atol={atol:g}):"]
    for differs, label, a, d in shown:
        lines.append(f"  d/d {label}: {shown_as} {_show(a, outputs)}, FD {_show(d, outputs)}"
                     + ("  <-- differs" if differs else ""))
    if len(shown) < len(rows):
        lines.append(f"  ({len(rows) - len(shown)} more directions not shown)")
    raise AssertionError("\n".join(lines))


def _show(column: np.ndarray, outputs) -> str:
    """A column of the Jacobian: a number for a float result, else the array (for the
    second order, the entries named by the gradient's elements)."""
    if column.size == 1 and outputs is None:
        return repr(float(column[0]))
    if outputs is not None and column.size <= 6:
        return "{" + ", ".join(f"d/d {o}: {float(v)!r}" for o, v in zip(outputs, column)) + "}"
    return np.array2string(column, precision=8, threshold=12)


def _flat_gradient(dispatcher, args: tuple, positions: list[int], mode: str):
    """An ``@njit`` function of ``f``'s arguments returning its gradient with respect to
    ``positions`` by ``mode`` (``grad``, or one ``jacfwd`` per argument), flattened into one
    vector (what order 2 differentiates)."""
    params = [f"a{i}" for i in range(len(args))]
    call = ", ".join(params)
    scope: dict = {"np": np}
    if mode == "rev":
        scope["G"] = ReverseFunction("grad", dispatcher, tuple(positions))
        lines = [f"    g = G({call})"]
        parts = [f"np.array([g[{k}]])" if not isinstance(args[i], np.ndarray)
                 else f"g[{k}].ravel()" for k, i in enumerate(positions)]
    else:
        lines = []
        for k, i in enumerate(positions):
            scope[f"J{k}"] = njit_jacobian(dispatcher, i)
        parts = [f"J{k}({call}).reshape(-1)" for k in range(len(positions))]
    source = (f"def flat_gradient({call}):\n" + "".join(line + "\n" for line in lines)
              + f"    return np.concatenate(({''.join(p + ', ' for p in parts)}))\n")
    exec(source, scope)  # noqa: S102  (our own source)
    return numba.njit(scope["flat_gradient"])
