"""``zeros_like(x)`` for the ``@njit`` glue of :mod:`pyzyme.api.njit`: a zeroed C-order array
of ``x``'s shape and dtype, lowered directly (allocation and ``memset``).

``np.zeros_like`` is a Numba overload whose implementation, with ``empty_like``, the array
allocator and the zero fill it calls, Numba compiles the first time a process uses it for an
array type: about 0.15 s of CPU, most of the first call of ``grad`` on a small kernel. The glue
only needs a zeroed shadow, which this intrinsic emits in the caller without compiling
anything.

Examples
--------
>>> import numba, numpy as np
>>> @numba.njit
... def shadow(x):
...     return zeros_like(x)
>>> shadow(np.ones((2, 3))[:, ::2])
array([[0., 0.],
       [0., 0.]])
"""

from __future__ import annotations

from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np import arrayobj

__all__ = ["zeros_like"]


@intrinsic
def zeros_like(typingctx, x):
    if not isinstance(x, types.Array):
        return None
    result = types.Array(x.dtype, x.ndim, "C")

    def codegen(context, builder, sig, args):
        given = context.make_array(sig.args[0])(context, builder, args[0])
        out = arrayobj._empty_nd_impl(context, builder, result,
                                      cgutils.unpack_tuple(builder, given.shape))
        cgutils.memset(builder, out.data, builder.mul(out.nitems, out.itemsize), 0)
        return out._getvalue()
    return result(x), codegen
