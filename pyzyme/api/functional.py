"""JAX-style functional wrappers over :func:`~pyzyme.autodiff`: ``jvp`` and ``jacfwd``.

(``grad``, ``value_and_grad``, ``vjp``, ``jacrev`` and ``hessian`` arrive with reverse mode.)
"""

from __future__ import annotations

from collections.abc import Sequence

from pyzyme.api import annotations as A
from pyzyme.api.autodiff import autodiff
from pyzyme.api.modes import Forward
from pyzyme.errors import PyzymeError

__all__ = ["jvp", "jacfwd"]


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
        raise PyzymeError(f"jvp needs one tangent per primal; got {len(primals)} primals and "
                          f"{len(tangents)} tangents")
    args = [A.Duplicated(p, t) for p, t in zip(primals, tangents)]
    return autodiff(Forward, f, A.Duplicated, *args)


def jacfwd(f, argnums: int = 0):
    """A function computing the Jacobian of ``f`` with respect to argument ``argnums``.

    The function is ``@njit``-compiled: call it from Python or from other ``@njit`` code.

    Examples
    --------
    >>> import numpy as np
    >>> jacfwd(lambda x: x * 2.0)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 2.]])
    """
    if not isinstance(argnums, int):
        raise PyzymeError("jacfwd differentiates with respect to one positional argument")
    from pyzyme.api.autodiff import _dispatcher
    from pyzyme.api.njit_jacobian import njit_jacobian

    return njit_jacobian(_dispatcher(f), argnums)
