"""Second derivatives: forward mode applied to the IR reverse mode generates.

The gradient of ``f`` is a function pyzyme wrote in LLVM IR
(:mod:`pyzyme.frontends.numba.derive.reverse`): loops, caches, adjoint slots and all
(:mod:`pyzyme.frontends.numba.derive.hvp` builds it).
Differentiating *that* in forward mode, in the direction ``v`` of ``x``, gives the directional
derivative of the gradient: the Hessian-vector product ``H v``, at a small multiple of the
gradient's cost and without forming ``H``. Working on IR is what makes this possible; no part
of it is special to second derivatives.

Examples
--------
>>> import numpy as np
>>> def f(x):
...     return x[0] ** 2 * x[1] + np.sin(x[1])
>>> hvp(f, np.array([1.0, 2.0]), np.array([1.0, 0.0]))
array([4., 2.])
"""

from __future__ import annotations

import numpy as np

from pyzyme.api.args.typeof import argument_type
from pyzyme.api.dispatchers import dispatcher_of
from pyzyme.api.plans import hvp_plan
from pyzyme.api.workspaces import build_with_workspaces
from pyzyme.errors import ArgumentTypeError, ArgumentValueError, UnsupportedError

__all__ = ["hvp", "hvp_and_gradient", "hessian"]


def _plan(f, x: np.ndarray, args=()):
    """The compiled ``H v`` of ``f`` for arrays like ``x`` and constant arguments like
    ``args`` (:mod:`pyzyme.frontends.numba.derive.hvp`). Types by :func:`argument_type`:
    ``numba.typeof`` of two arrays was most of a call's 40 us on small inputs (GradBench's
    kmeans calls :func:`hvp_and_gradient` each run)."""
    dispatcher, xtype = dispatcher_of(f), argument_type(x)
    consts = tuple(map(argument_type, args))
    # arrays among args that f writes get shadows and tangents (pyzyme.api.workspaces);
    # the build names them as positions among f's arguments, x first
    return build_with_workspaces(
        lambda found: hvp_plan(dispatcher, xtype, consts, [k - 1 for k in found]),
        ("hvp", dispatcher, xtype, consts))[0]


def _as_input(x) -> np.ndarray:
    _refuse_complex(x)
    # A copy, as of v: f may write its argument (x *= 2), and forward mode over it would then
    # write x's tangent v too; neither is the caller's to lose, and each of the Hessian's
    # columns must start from the same x. (The derivative is compiled for writeable C arrays:
    # x's type is also that of dx, v and hv.)
    x = np.array(x, np.float64, order="C", copy=True)
    if x.ndim == 0:
        raise ArgumentTypeError("hvp and hessian take an array x; wrap a scalar in np.array([x])")
    return x


def _refuse_complex(x) -> None:
    # Converting to float64 would drop the imaginary part: a wrong answer, not an error.
    if np.iscomplexobj(x):
        raise UnsupportedError("hvp and hessian take real arrays; for a function of complex "
                               "numbers pass the real and imaginary parts as one real array")


def hvp(f, x: np.ndarray, v: np.ndarray, *args) -> np.ndarray:
    """The Hessian of ``f`` at ``x`` times ``v``: forward mode over reverse mode.

    Parameters
    ----------
    f
        An ``@njit`` (or plain Python) function of a float array (then, optionally, other
        arguments) returning a float.
    x, v
        The point and the direction, arrays of the same shape.
    *args
        ``f``'s other arguments (data, sizes), held constant: the Hessian is with respect to
        ``x`` only.

    Returns
    -------
    numpy.ndarray
        ``H(x) @ v``, shaped like ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> hvp(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([ 6., 12.])
    >>> hvp(lambda x, c: c * np.sum(x ** 3), np.array([1.0, 2.0]), np.array([1.0, 1.0]), 0.5)
    array([3., 6.])
    """
    return hvp_and_gradient(f, x, v, *args)[0]


def hvp_and_gradient(f, x: np.ndarray, v: np.ndarray, *args) -> tuple[np.ndarray, np.ndarray]:
    """``(H(x) @ v, gradient of f at x)`` from one forward-over-reverse sweep: the gradient
    is the primal of the forward sweep over it, so it comes at no extra cost (Enzyme.jl's
    ``hvp_and_gradient!``). Arguments as :func:`hvp`.

    Examples
    --------
    >>> import numpy as np
    >>> hv, g = hvp_and_gradient(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]),
    ...                          np.array([1.0, 0.0]))
    >>> hv, g
    (array([6., 0.]), array([ 3., 12.]))
    """
    x = _as_input(x)
    _refuse_complex(v)
    v = np.array(v, np.float64, order="C", copy=True)
    if v.shape != x.shape:
        raise ArgumentValueError(f"v has shape {v.shape}; x has shape {x.shape}")
    plan = _plan(f, x, args)
    hv, dx = np.zeros_like(x), np.zeros_like(x)
    shadows = [np.zeros_like(args[k]) for k in plan.workspaces]
    tangents = [np.zeros_like(args[k]) for k in plan.workspaces for _ in range(2)]
    plan.function(x, *args, dx, *shadows, 1.0, v, hv, *tangents)
    return hv, dx


def hessian(f):
    """A function giving the Hessian of ``f`` (one array argument, float result), built from
    one Hessian-vector product per input element.

    Examples
    --------
    >>> import numpy as np
    >>> hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])
    """
    def hess(x: np.ndarray) -> np.ndarray:
        x = _as_input(x)
        plan = _plan(f, x)
        flat = x.reshape(-1)
        out = np.zeros((flat.size, flat.size))
        for i in range(flat.size):
            e = np.zeros_like(x)
            e.reshape(-1)[i] = 1.0
            hv = np.zeros_like(x)
            plan.function(x.copy(), np.zeros_like(x), 1.0, e, hv)
            out[:, i] = hv.reshape(-1)
        return out.reshape(x.shape + x.shape)

    hess.__name__ = f"hessian_{getattr(f, '__name__', 'f')}"
    return hess
