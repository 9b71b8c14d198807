"""``zeros_like(x)`` for the ``@njit`` glue of :mod:`pyzyme.api.njit`: a zeroed C-order array
of ``x``'s shape and dtype, lowered directly (allocation and ``memset``); ``zeros_rows(n, x)``:
``n`` such arrays as the rows of one, of shape ``(n,) + x.shape``, each row a shadow a reverse
sweep adds into in place (a Jacobian built without copies or a reshape).

``np.zeros_like`` is a Numba overload whose implementation, with ``empty_like``, the array
allocator and the zero fill it calls, Numba compiles the first time a process uses it for an
array type: about 0.15 s of CPU, most of the first call of ``grad`` on a small kernel. The glue
only needs a zeroed shadow, which this intrinsic emits in the caller without compiling
anything. ``copy_into(dst, src)`` copies a C-contiguous array's data into another of the same
shape and dtype (one ``memcpy``), for glue that puts an array back as it was between sweeps.

Examples
--------
>>> import numba, numpy as np
>>> @numba.njit
... def shadow(x):
...     return zeros_like(x)
>>> shadow(np.ones((2, 3))[:, ::2])
array([[0., 0.],
       [0., 0.]])
>>> @numba.njit
... def rows(x):
...     return zeros_rows(3, x)
>>> rows(np.ones(2))
array([[0., 0.],
       [0., 0.],
       [0., 0.]])
>>> @numba.njit
... def copied(x):
...     y = zeros_like(x)
...     copy_into(y, x)
...     return y
>>> copied(np.arange(3.0))
array([0., 1., 2.])
"""

from __future__ import annotations

from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np import arrayobj

__all__ = ["zeros_like", "zeros_rows", "copy_into"]


@intrinsic
def zeros_like(typingctx, x):
    if not isinstance(x, types.Array):
        return None
    result = types.Array(x.dtype, x.ndim, "C")

    def codegen(context, builder, sig, args):
        given = context.make_array(sig.args[0])(context, builder, args[0])
        return _zeroed(context, builder, result, cgutils.unpack_tuple(builder, given.shape))
    return result(x), codegen


def _zeroed(context, builder, result, shape):
    out = arrayobj._empty_nd_impl(context, builder, result, shape)
    cgutils.memset(builder, out.data, builder.mul(out.nitems, out.itemsize), 0)
    return out._getvalue()


@intrinsic
def zeros_rows(typingctx, n, x):
    if not (isinstance(n, types.Integer) and isinstance(x, types.Array)):
        return None
    result = types.Array(x.dtype, x.ndim + 1, "C")

    def codegen(context, builder, sig, args):
        given = context.make_array(sig.args[1])(context, builder, args[1])
        count = context.cast(builder, args[0], sig.args[0], types.intp)
        return _zeroed(context, builder, result,
                       [count, *cgutils.unpack_tuple(builder, given.shape)])
    return result(n, x), codegen


@intrinsic
def copy_into(typingctx, dst, src):
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array)
            and dst.layout == src.layout == "C" and dst.dtype == src.dtype):
        return None

    def codegen(context, builder, sig, args):
        to = context.make_array(sig.args[0])(context, builder, args[0])
        given = context.make_array(sig.args[1])(context, builder, args[1])
        cgutils.raw_memcpy(builder, to.data, given.data, given.nitems, given.itemsize)
        return context.get_dummy_value()
    return types.none(dst, src), codegen
