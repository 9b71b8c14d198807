"""``stop_gradient``: a value with no derivative through it, as JAX's ``lax.stop_gradient``.

It is an ``@njit`` identity whose derivative rules (:mod:`pyzyme.rules`) say its result is a
constant: forward mode gives it a zero tangent, reverse mode a fresh zero shadow (an array)
and sends nothing back into its argument. Rules rather than ``rules.inactive``: an inactive
function may not return an array (its result's shadow would be left unset), and an array is
what users most often hold fixed. An array comes back as a copy (fresh memory, so nothing
written to it later reaches the argument), a float as itself. (A complex scalar is refused:
pyzyme's rules do not take one in reverse mode yet; a complex array is fine.)
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import types
from numba.extending import overload

from pyzyme.rules.custom import augmented_primal, forward, reverse

__all__ = ["stop_gradient"]


def _detached(x):
    raise NotImplementedError   # only called inside @njit code, where the overload stands in


def _zero_tangent(x, dx):
    raise NotImplementedError


def _zero_shadow(y):
    raise NotImplementedError


def _zero_adjoint(x):
    raise NotImplementedError


def _check(x) -> None:
    if isinstance(x, types.Complex):
        # pyzyme's rules do not pass complex scalars to a reverse rule yet
        raise numba.core.errors.TypingError(
            "pyzyme.stop_gradient of a complex number is not supported yet: stop its real and "
            "imaginary parts (stop_gradient(z.real) + 1j * stop_gradient(z.imag))")
    if not isinstance(x, (types.Array, types.Float, types.Integer)):
        raise numba.core.errors.TypingError(
            f"pyzyme.stop_gradient takes a float or an array, not {x}")


@overload(_detached)
def _detached_impl(x):
    _check(x)
    if isinstance(x, types.Array):
        return lambda x: x.copy()
    return lambda x: x


@overload(_zero_tangent)
def _zero_tangent_impl(x, dx):
    """A zero tangent of the result: one for each of ``dx``'s lanes when it is a tuple."""
    if isinstance(x, types.Array):
        one = "np.zeros(x.shape, x.dtype)"
    elif isinstance(x, types.Integer):
        one = "0.0"
    else:
        one = "x * 0"      # 0.0, or 0j, of x's own type
    lanes = dx.count if isinstance(dx, types.UniTuple) else 0
    body = "(" + f"{one}, " * lanes + ")" if lanes else one
    scope = {"np": np}
    exec(f"def impl(x, dx):\n    return {body}\n", scope)   # noqa: S102  (our own source)
    return scope["impl"]


@overload(_zero_shadow)
def _zero_shadow_impl(y):
    """The shadow of the result in reverse mode: zeros for an array, None for a number."""
    if isinstance(y, types.Array):
        return lambda y: np.zeros(y.shape, y.dtype)
    return lambda y: None


@overload(_zero_adjoint)
def _zero_adjoint_impl(x):
    """What flows back into the argument: 0 for a number, nothing (None) for an array."""
    if isinstance(x, types.Array):
        return lambda x: None
    if isinstance(x, types.Integer):
        return lambda x: 0.0
    return lambda x: x * 0


@numba.njit
def stop_gradient(x):
    """``x``, with no derivative through it: derivative code treats the result as a constant.

    Call it inside the function being differentiated (``@njit`` code, or a plain function
    pyzyme compiles), in forward and reverse mode, from Python entry points or from a
    derivative called inside ``@njit`` code; from Python it returns ``x``. Floats and arrays
    (real or complex) are taken; a complex scalar is not yet (stop ``z.real`` and ``z.imag``).

    Parameters
    ----------
    x : float or ndarray
        The value.

    Returns
    -------
    float or ndarray
        The same value (a copy for an array), a constant to derivatives.

    Examples
    --------
    >>> import numpy as np
    >>> from pyzyme import Forward, Reverse, grad, gradient
    >>> grad(lambda x: x * stop_gradient(x))(3.0)       # d/dx of x * c at c = x = 3
    3.0
    >>> def normalized(w):          # the scale held fixed while w moves
    ...     return np.sum(w * w) / stop_gradient(np.sum(np.abs(w)))
    >>> gradient(Reverse, normalized, np.array([1.0, -3.0]))
    array([ 0.5, -1.5])
    >>> gradient(Forward, lambda w: np.sum(w * stop_gradient(w)), np.array([1.0, -3.0]))
    (1.0, -3.0)
    """
    return _detached(x)


@forward(stop_gradient)
@numba.njit
def _stop_gradient_forward(config, x, dx):
    return _detached(x), _zero_tangent(x, dx)


@augmented_primal(stop_gradient)
@numba.njit
def _stop_gradient_augmented(config, x, dx):
    y = _detached(x)
    return y, _zero_shadow(y), None


@reverse(stop_gradient)
@numba.njit
def _stop_gradient_reverse(config, dret, tape, x, dx):
    return _zero_adjoint(x)
