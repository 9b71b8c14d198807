"""Numba kernels as differentiable JAX operations: :func:`wrap`.

``import pyzyme.jax`` imports JAX (``pip install pyzyme[jax]``); ``import pyzyme`` never does.

The wrapped kernel is a JAX primitive (:mod:`pyzyme.jax.primitive`) that XLA runs on CPU
through an FFI custom call whose handler is native code compiled from the kernel
(:mod:`pyzyme.jax.ffi`): no Python runs when a jitted computation calls it. JAX's ``jvp``
runs pyzyme's forward mode, its ``vjp``/``grad`` (the transpose of the forward derivative)
pyzyme's reverse mode, ``hessian`` (``jacfwd`` of ``jacrev``) pyzyme's forward mode over its
reverse mode, ``vmap`` the kernel (or derivative) in a loop over the batch; each is compiled
once per shapes and dtypes (:mod:`pyzyme.jax.kernels`), when JAX first lowers a call of it.

What it does not do (yet): devices other than the CPU (the FFI target is registered for
``cpu``); reverse mode over reverse mode (``jacrev(jacrev(g))``, refused with
``UnsupportedError``: ``jax.hessian`` is forward over reverse); a tape kept between JAX's
forward and backward passes (the backward pass runs pyzyme's combined reverse derivative,
which recomputes the primal); ``vmap`` by pyzyme's vector forward mode (it is a loop, also for
``jacfwd``'s batch of tangents).

Examples
--------
>>> import jax, jax.numpy as jnp, numba
>>> @numba.njit
... def energy(x, k):
...     e = 0.0
...     for i in range(x.shape[0] - 1):
...         e += k * (x[i + 1] - x[i]) ** 2
...     return e
>>> f = wrap(energy, jax.ShapeDtypeStruct((), jnp.float32))
>>> x = jnp.array([0.0, 1.0, 3.0], jnp.float32)
>>> float(jax.jit(f)(x, 0.5))
2.5
>>> jax.grad(f)(x, 0.5)
Array([-1., -1.,  2.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pyzyme.api.dispatchers import dispatcher_of
from pyzyme.jax.kernels import Kernel, Spec, user_kernel
from pyzyme.jax.primitive import call_kernel

__all__ = ["wrap"]


def wrap(f, result_shape_dtypes, *, nondiff_argnums: Sequence[int] = ()) -> Callable:
    """``f``, a Numba kernel, as a function on JAX arrays that JAX can transform.

    Parameters
    ----------
    f
        An ``@njit`` function (or a plain Python function, compiled with ``numba.njit``)
        taking scalars and arrays and returning a scalar, an array or a tuple of them. A 0-d
        JAX array is passed to ``f`` as a scalar, any other as a C-contiguous NumPy array
        over JAX's buffer, or a copy of it where ``f`` may write that argument (JAX arrays
        never change).
    result_shape_dtypes
        As for ``jax.pure_callback``: a ``jax.ShapeDtypeStruct`` (``f`` returns one value), a
        tuple or list of them (``f`` returns a tuple), or a callable taking the arguments'
        ``ShapeDtypeStruct`` s and returning one of these.
    nondiff_argnums
        Float arguments that are not differentiated (data, step sizes); a derivative JAX asks
        for with respect to one raises :class:`~pyzyme.UnsupportedError`. Integer and boolean
        arguments never are.

    Returns
    -------
    callable
        ``g(*args)`` on arrays and scalars, usable under ``jax.jit``, ``grad``, ``vjp``,
        ``jvp``, ``jacfwd``, ``jacrev``, ``hessian`` (forward over reverse) and ``vmap``.
        pyzyme's errors (``UnsupportedError``, ``ActivityError``) are raised when JAX traces
        and compiles the call, naming ``f`` and its line. Reverse mode over reverse mode
        (``jacrev(jacrev(g))``) is refused: use ``jax.hessian`` or ``jacfwd(jacrev(g))``.
    """
    dispatcher = dispatcher_of(f)
    nondiff = frozenset(int(i) for i in nondiff_argnums)
    kernels: dict[tuple, tuple[Kernel, bool]] = {}

    def wrapped(*args):
        arrays = [a if isinstance(a, jax.Array) else jnp.asarray(a) for a in args]
        specs = tuple(Spec(tuple(a.shape), np.dtype(a.dtype), i in nondiff)
                      for i, a in enumerate(arrays))
        made = kernels.get(specs)
        if made is None:
            outs, single = _result_specs(f, result_shape_dtypes, specs)
            made = kernels[specs] = (user_kernel(dispatcher, specs, outs, not single), single)
        kernel, single = made
        results = call_kernel(kernel, *arrays)
        return results[0] if single else tuple(results)

    wrapped.__name__ = getattr(f, "__name__", "wrapped")
    wrapped.__qualname__ = getattr(f, "__qualname__", wrapped.__name__)
    wrapped.__doc__ = getattr(f, "__doc__", None)
    return wrapped


def _result_specs(f, result_shape_dtypes, specs: tuple) -> tuple[list[Spec], bool]:
    """The kernel's output specs and whether ``f`` returns one value (not a tuple)."""
    result = result_shape_dtypes
    if callable(result) and not hasattr(result, "shape"):
        result = result(*[jax.ShapeDtypeStruct(s.shape, s.dtype) for s in specs])
    single = hasattr(result, "shape") and hasattr(result, "dtype")
    items = [result] if single else result
    if not isinstance(items, (list, tuple)) or not all(
            hasattr(r, "shape") and hasattr(r, "dtype") for r in items):
        raise TypeError(f"pyzyme.jax.wrap({getattr(f, '__qualname__', f)!r}): "
                        f"result_shape_dtypes must be a jax.ShapeDtypeStruct or a tuple of "
                        f"them, got {result!r}")
    return [Spec(tuple(r.shape), np.dtype(r.dtype)) for r in items], single
