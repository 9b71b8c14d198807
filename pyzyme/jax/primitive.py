"""One JAX primitive, ``pyzyme_kernel``, that runs a :class:`~pyzyme.jax.kernels.Kernel`
through its XLA FFI handler, with the rules that make JAX's transformations of it kernels
again.

- lowering: a custom call to the kernel's FFI target on CPU (:mod:`pyzyme.jax.ffi`);
- JVP: the kernel's forward derivative for the inputs whose tangents are not symbolic zeros;
- transpose: a forward derivative is transposed to the reverse derivative of the same kernel
  for the same inputs, and back (JAX's ``grad``/``vjp``/``jacrev`` linearize the primal,
  then transpose its forward derivative: what runs is pyzyme's reverse mode);
- batching: the kernel in a loop over the batch (``vmap``).

Every kernel these rules make is itself bound with this primitive, so the rules compose to
any order: ``jacfwd`` of ``jacrev`` (``hessian``) is the forward derivative of a reverse
kernel, compiled by pyzyme as forward over reverse.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from pyzyme.errors import PyzymeError, UnsupportedError
from pyzyme.jax.ffi import target_name
from pyzyme.jax.kernels import Kernel

__all__ = ["call_kernel"]

kernel_p = Primitive("pyzyme_kernel")
kernel_p.multiple_results = True

_JITTED: dict[int, object] = {}


def call_kernel(kernel: Kernel, *args) -> list:
    """``kernel``'s outputs for the JAX arrays ``args`` (as many as it has inputs)."""
    return kernel_p.bind(*args, kernel=kernel)


def _impl(*args, kernel: Kernel):
    # Outside jit the primitive runs as a one-operation computation of its own (compiled once
    # per kernel), which is how it reaches its FFI handler.
    run = _JITTED.get(id(kernel))
    if run is None:
        run = _JITTED[id(kernel)] = (jax.jit(lambda *a: kernel_p.bind(*a, kernel=kernel)),
                                     kernel)
    return run[0](*args)


def _abstract_eval(*avals, kernel: Kernel):
    for i, (aval, spec) in enumerate(zip(avals, kernel.ins)):
        if aval.shape != spec.shape or aval.dtype != spec.dtype:
            raise PyzymeError(f"{kernel}: argument {i} is {aval.dtype}{list(aval.shape)}, "
                              f"made for {spec.dtype}{list(spec.shape)}")
    return [jax.core.ShapedArray(s.shape, s.dtype) for s in kernel.outs]


def _lowering(ctx, *args, kernel: Kernel):
    return jax.ffi.ffi_lowering(target_name(kernel))(ctx, *args)


def _jvp(primals, tangents, *, kernel: Kernel):
    outs = kernel_p.bind(*primals, kernel=kernel)
    mask = tuple(type(t) is not ad.Zero and s.differentiable
                 for t, s in zip(tangents, kernel.ins))
    for i, (t, s) in enumerate(zip(tangents, kernel.ins)):
        if s.const and type(t) is not ad.Zero:
            raise UnsupportedError(
                f"{kernel}: JAX differentiates with respect to argument {i}, which is in "
                f"nondiff_argnums (its derivative would be taken as zero); remove it from "
                f"nondiff_argnums, or pass jax.lax.stop_gradient of it")
    if not any(mask):
        return outs, [ad.Zero.from_primal_value(o) for o in outs]
    for s in kernel.outs:
        if not s.differentiable:
            raise UnsupportedError(f"{kernel}: a {s.dtype} result has no derivative; return "
                                   f"integer results from another kernel")
    forward = kernel.forward(mask)
    tangents_in = [t for t, m in zip(tangents, mask) if m]
    return outs, kernel_p.bind(*primals, *tangents_in, kernel=forward)


def _transpose(cts, *args, kernel: Kernel):
    if kernel.linear is None:
        raise UnsupportedError(f"{kernel} is not linear in its arguments and cannot be "
                               f"transposed")
    kind, base, mask = kernel.linear
    n = len(base.ins)
    primals, linear = args[:n], args[n:]
    if any(ad.is_undefined_primal(p) for p in primals):
        raise UnsupportedError(f"{kernel}: JAX asked to transpose a derivative with respect to "
                               f"the point it is taken at (reverse mode over reverse mode); "
                               f"use jax.jacfwd over jax.grad/jacrev for second derivatives")
    cts = [jnp.zeros(s.shape, s.dtype) if type(ct) is ad.Zero else ct
           for ct, s in zip(cts, kernel.outs)]
    if kind == "forward":
        # The tangents of the inputs in mask, of which JAX wants the cotangents of those it
        # has not got (undefined): base's reverse derivative for them.
        positions = [i for i, m in enumerate(mask) if m]
        wanted = [ad.is_undefined_primal(x) for x in linear]
        inputs = {p for p, w in zip(positions, wanted) if w}
        if not inputs:
            return [None] * len(args)
        sub = tuple(i in inputs for i in range(n))
        grads = iter(kernel_p.bind(*primals, *cts, kernel=base.reverse(sub)))
        return [None] * n + [next(grads) if w else None for w in wanted]
    # reverse: linear in the cotangents of base's outputs, all of them arguments; transposed
    # to base's forward derivative for the inputs in mask, whose tangents are these cts.
    tangents = kernel_p.bind(*primals, *cts, kernel=base.forward(mask))
    return [None] * n + [t if ad.is_undefined_primal(x) else None
                         for t, x in zip(tangents, linear)]


def _batch(args, dims, *, kernel: Kernel):
    sizes = {a.shape[d] for a, d in zip(args, dims) if d is not None}
    (size,) = sizes
    if size == 1:
        # One row (jacrev of a scalar result): the kernel itself, no loop to compile.
        outs = kernel_p.bind(*[a if d is None else jnp.squeeze(a, d)
                               for a, d in zip(args, dims)], kernel=kernel)
        return [o[None] for o in outs], [0] * len(outs)
    moved = [a if d is None else jnp.moveaxis(a, d, 0)
             for a, d in zip(args, dims)]
    mask = tuple(d is not None for d in dims)
    outs = kernel_p.bind(*moved, kernel=kernel.batched(size, mask))
    return outs, [0] * len(outs)


kernel_p.def_impl(_impl)
kernel_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(kernel_p, _lowering, platform="cpu")
ad.primitive_jvps[kernel_p] = _jvp
ad.primitive_transposes[kernel_p] = _transpose
batching.primitive_batchers[kernel_p] = _batch
