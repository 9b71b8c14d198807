"""JAX-style functional wrappers over :func:`~pyzyme.autodiff`: ``grad``, ``value_and_grad``,
``jvp``, ``vjp``, ``jacfwd`` and ``jacrev``.

The functions ``grad``, ``value_and_grad``, ``jacfwd`` and ``jacrev`` return are callable from
Python and from inside other ``@njit`` code (with float and ndarray arguments there).
(``hessian`` arrives with forward-over-reverse.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pyzyme.api import annotations as A
from pyzyme.api.args.pytree import to_numba
from pyzyme.api.autodiff import autodiff
from pyzyme.api.convenience import reverse_call
from pyzyme.api.dispatchers import dispatcher_of
from pyzyme.api.modes import Forward
from pyzyme.api.njit.jacobian import njit_jacobian
from pyzyme.api.njit.reverse import ReverseFunction
from pyzyme.api.wrappers import dotted_wrapper
from pyzyme.errors import ArgumentTypeError, ArgumentValueError, UnsupportedError

__all__ = ["grad", "value_and_grad", "jvp", "vjp", "jacfwd", "jacrev"]


def grad(f, argnums=0, has_aux: bool = False):
    """A function computing the gradient of the float function ``f`` by reverse mode, as
    JAX's ``grad``.

    Parameters
    ----------
    f : callable
        An ``@njit`` function, or a plain Python function (compiled with ``numba.njit``),
        returning a float (with ``has_aux``: a pair ``(loss, aux)``, ``loss`` a float).
    argnums : int or tuple of int, optional
        The positional arguments to differentiate with respect to (default 0). With a tuple,
        the gradient is a tuple with one entry per argnum.
    has_aux : bool, optional
        ``f`` returns ``(loss, aux)``: the gradient is the loss's, and ``g`` returns
        ``(gradient, aux)``; ``aux`` (any value Numba returns) carries no derivative.

    Returns
    -------
    callable
        ``g(*args, **kwargs)``: df/dx in the structure of each differentiated argument ``x``
        (a new array for an array, a float for a float or an int, a tuple / namedtuple / list
        for those, whose non-float leaves keep their value); the other arguments, and every
        keyword argument (passed through to ``f``), are constants. ``g`` can be called from
        inside other ``@njit`` code, with positional float, int, tuple-of-float and
        C-contiguous float array arguments.

    Examples
    --------
    >>> import numpy as np
    >>> def loss(p, data):
    ...     s = 0.0
    ...     for d in data:
    ...         s += (p[0] * d + p[1]) ** 2
    ...     return s
    >>> grad(loss)(np.array([1.0, 2.0]), np.array([0.0, 1.0]))
    array([ 6., 10.])
    >>> grad(lambda x, y: x * y * y, argnums=(0, 1))(2.0, 3.0)
    (9.0, 12.0)
    >>> grad(lambda x, scale=1.0: scale * x * x)(3.0, scale=0.5)
    3.0
    >>> def loss_and_residual(p):
    ...     r = p * p - 1.0
    ...     return np.sum(r * r), r
    >>> grad(loss_and_residual, has_aux=True)(np.array([2.0, 0.5]))
    (array([24. , -1.5]), array([ 3.  , -0.75]))
    """
    return ReverseFunction("grad", f, argnums, has_aux)


def value_and_grad(f, argnums=0, has_aux: bool = False):
    """A function computing ``(f(*args), gradient)`` by one reverse-mode sweep, as JAX's
    ``value_and_grad``.

    Its results fit ``scipy.optimize.minimize(fun, x0, jac=True)``. See :func:`grad` for
    ``argnums``, ``has_aux``, keyword arguments and the structure of the gradient; with
    ``has_aux`` the result is ``((loss, aux), gradient)``. The returned function can be called
    from inside other ``@njit`` code.

    Examples
    --------
    >>> import numpy as np
    >>> value_and_grad(lambda x: x[0] ** 2 + 3.0 * x[1])(np.array([1.0, -2.0]))
    (-5.0, array([2., 3.]))
    >>> value_and_grad(lambda x: (x * x, x + 1.0), has_aux=True)(3.0)
    ((9.0, 4.0), 6.0)
    """
    return ReverseFunction("value_and_grad", f, argnums, has_aux)


def vjp(f, *primals):
    """``(f(*primals), vjp_fn)``: the vector-Jacobian product, as in JAX.

    ``vjp_fn(cotangent)`` returns a tuple with one entry per primal: the cotangent of that
    input (an array for a float array, a float for a float, the structure of a tuple /
    namedtuple / list), ``None`` for inputs that carry no derivative (integers, integer
    arrays, other objects). For a float-valued ``f`` the cotangent is a float, for an
    array-valued ``f`` an array of the result's shape.

    Examples
    --------
    >>> import numpy as np
    >>> y, vjp_fn = vjp(lambda x, y: x * y, 2.0, 3.0)
    >>> y, vjp_fn(1.5)
    (6.0, (4.5, 3.0))
    >>> y, vjp_fn = vjp(lambda x: x * x, np.array([1.0, 2.0]))
    >>> vjp_fn(np.array([1.0, 10.0]))
    (array([ 2., 40.]),)
    """
    dispatcher = dispatcher_of(f)
    value = dispatcher(*[to_numba(p, f"argument {i}", lists=True) for i, p in enumerate(primals)])
    argnums = tuple(i for i, p in enumerate(primals) if _carries(p))
    n = len(primals)

    def vjp_fn(cotangent):
        if not argnums:
            return (None,) * n
        if isinstance(value, np.ndarray):
            if not np.issubdtype(value.dtype, np.floating):
                raise UnsupportedError(f"f returns an array of {value.dtype}, which carries no "
                                       f"derivative")
            w = np.asarray(cotangent, dtype=value.dtype)
            if w.shape != value.shape:
                raise ArgumentValueError(f"the cotangent has shape {w.shape}; f's result has shape "
                                         f"{value.shape}")
            _, derivs = reverse_call(dotted_wrapper(dispatcher, n, w.ndim), (*primals, w), argnums,
                                     name="vjp", need_value=False)
        elif isinstance(value, (float, np.floating)):
            if not isinstance(cotangent, (int, float, np.integer, np.floating)) or \
                    isinstance(cotangent, bool):
                raise ArgumentTypeError(f"f returns a float, so the cotangent is a float, not "
                                        f"{type(cotangent).__name__}")
            _, derivs = reverse_call(dispatcher, primals, argnums, seed=float(cotangent),
                                     name="vjp", need_value=False)
        else:
            raise UnsupportedError(f"vjp needs a function returning a float or a float array; "
                                   f"this one returns {type(value).__name__}")
        given = dict(zip(argnums, derivs))
        return tuple(given.get(i) for i in range(n))

    return value, vjp_fn


def _carries(value) -> bool:
    """Whether ``value`` holds floats (what vjp gives a cotangent for)."""
    if isinstance(value, np.ndarray):
        return bool(np.issubdtype(value.dtype, np.inexact))
    if isinstance(value, (float, np.floating, complex, np.complexfloating)):
        return True
    if isinstance(value, (tuple, list)):
        return any(_carries(v) for v in value)
    if isinstance(value, dict):
        return any(_carries(v) for v in value.values())
    return False


def jacrev(f, argnums: int = 0):
    """A function computing the Jacobian of ``f`` with respect to argument ``argnums``, by
    reverse mode (one sweep per element of ``f``'s result).

    The Jacobian has shape ``out.shape + x.shape`` as in JAX (``out.shape`` is ``()`` for a
    float result, ``(m,)`` for a tuple of ``m`` floats; ``x.shape`` is ``()`` for a float), as
    :func:`jacfwd` gives; the function can be called from Python and from other ``@njit``
    code.

    Examples
    --------
    >>> import numpy as np
    >>> jacrev(lambda x: x * 2.0)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 2.]])
    >>> jacrev(lambda x: np.sum(x * x))(np.array([[1.0, 2.0], [3.0, 4.0]]))
    array([[2., 4.],
           [6., 8.]])
    >>> jacrev(lambda x: x * x)(np.ones((2, 3))).shape
    (2, 3, 2, 3)
    """
    if not isinstance(argnums, int) or isinstance(argnums, bool):
        raise ArgumentTypeError("jacrev differentiates with respect to one positional argument")
    return ReverseFunction("jacrev", f, argnums)


def jvp(f, primals: Sequence, tangents: Sequence):
    """``(f(*primals), J @ tangents)``: the Jacobian-vector product, as in JAX.

    Examples
    --------
    >>> import numpy as np
    >>> jvp(lambda x, y: x * y, (2.0, 3.0), (1.0, 0.0))
    (6.0, 3.0)
    """
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ArgumentValueError(f"jvp needs one tangent per primal; got {len(primals)} primals "
                                 f"and {len(tangents)} tangents")
    args = [A.Duplicated(to_numba(p, f"primal {i}", lists=True),
                         to_numba(t, f"tangent {i}", lists=True))
            for i, (p, t) in enumerate(zip(primals, tangents))]
    return autodiff(Forward, f, A.Duplicated, *args)


def jacfwd(f, argnums: int = 0):
    """A function computing the Jacobian of ``f`` with respect to argument ``argnums``, by
    forward mode (one derivative call per few input elements).

    The Jacobian has shape ``out.shape + x.shape`` as in JAX: see :func:`jacrev`. The
    function is ``@njit``-compiled, once per set of :func:`~pyzyme.options`: call it from
    Python or from other ``@njit`` code.

    Examples
    --------
    >>> import numpy as np
    >>> jacfwd(lambda x: x * 2.0)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 2.]])
    >>> jacfwd(lambda t: (t, t * t))(3.0)
    array([1., 6.])
    >>> jacfwd(lambda x: x * x)(np.ones((2, 3))).shape
    (2, 3, 2, 3)
    """
    if not isinstance(argnums, int):
        raise ArgumentTypeError("jacfwd differentiates with respect to one positional argument")
    return njit_jacobian(dispatcher_of(f), argnums)
