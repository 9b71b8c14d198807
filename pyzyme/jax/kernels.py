"""Kernels as the JAX bridge runs them: ``@njit`` functions that write their results into
arrays they are given, and the derivatives, batches and derivatives of derivatives of them.

A :class:`Kernel` is ``store(in_0, ..., in_n, out_0, ..., out_m)``: each input is a scalar
(for a 0-d array of JAX) or a C-contiguous array, each output an array the kernel fills (a
0-d result gets a one-element array). That one shape serves everything the bridge calls:

- the user's function ``f``, wrapped so that its results (a scalar, an array or a tuple of
  them) are stored into the outputs (:func:`user_kernel`);
- ``forward(mask)``: the tangents of the outputs for tangents of the inputs in ``mask``,
  pyzyme's forward mode of ``store`` with each output ``Duplicated``;
- ``reverse(mask)``: the cotangents of the inputs in ``mask`` for cotangents of the outputs,
  pyzyme's (combined) reverse mode of ``store``, the outputs ``Duplicated`` with the
  cotangents as their shadows;
- ``batched(n, mask)``: ``store`` in a loop over a leading axis of ``n`` of the inputs in
  ``mask`` and of every output (``jax.vmap``).

Each of these is a kernel again, so the forward mode of a reverse kernel is forward over
reverse (a Hessian), the reverse of a batched kernel differentiates the loop, and so on, with
no case of its own. The derivative code is pyzyme's compiled plan called from generated
``@njit`` source, so nothing of Python runs when JAX calls a kernel. This module knows nothing
of JAX (:mod:`pyzyme.jax.primitive` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
from numba.core import types
from numba.core.compiler_lock import global_compiler_lock

from pyzyme.analysis.activity import Activity
from pyzyme.api import annotations as A
from pyzyme.api.dispatchers import dispatcher_of, remember_wrapper
from pyzyme.api.plans import forward_plan, reverse_plan
from pyzyme.frontends.numba.written import compiled_writes

__all__ = ["Spec", "Kernel", "user_kernel", "loop"]


@dataclass(frozen=True)
class Spec:
    """The shape and dtype of one input or output of a kernel (``shape == ()``: a scalar);
    ``const``: a float input the user has said is not differentiated (``nondiff_argnums``)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    const: bool = False

    @property
    def differentiable(self) -> bool:
        return not self.const and np.issubdtype(self.dtype, np.floating)

    def numba_type(self, output: bool = False) -> types.Type:
        """The Numba type the kernel takes: a scalar for a 0-d input, else a C array (an
        output is an array always, of one element for a 0-d result)."""
        scalar = numba.from_dtype(self.dtype)
        if not self.shape and not output:
            return scalar
        return types.Array(scalar, max(len(self.shape), 1), "C")

    def empty(self) -> str:
        """Source of a new array with room for this spec as an output."""
        return f"np.empty({self.shape or (1,)!r}, np.{self.dtype.name})"


class Kernel:
    """A store-style ``@njit`` kernel (see the module docstring) with its input and output
    specs; its derivatives and batches are made once and kept here.

    ``py`` is the user's function behind it (errors name it); ``name`` says what the kernel
    is, for the names of the compiled handlers. ``linear`` is None for a kernel that is not a
    derivative, else ``(kind, base, mask)``: the kernel is ``base``'s ``kind``
    (``"forward"`` or ``"reverse"``) derivative for the inputs in ``mask``, linear in the
    arguments after ``base``'s inputs; JAX transposes it to the other kind.
    """

    def __init__(self, make_store, ins: Sequence[Spec], outs: Sequence[Spec], py, name: str,
                 linear=None, batch=None) -> None:
        self._make_store = make_store
        self._store = None
        self.ins, self.outs = tuple(ins), tuple(outs)
        self.py, self.name, self.linear = py, name, linear
        self.batch = batch        # (inner kernel, n, mask) of a batched kernel
        #: how many derivatives deep: 0 for the user's kernel, 2 for a Hessian's
        self.order = 0 if linear is None and batch is None else \
            (linear[1].order + 1 if linear is not None else batch[0].order)
        self._derived: dict[tuple, Kernel] = {}

    def __repr__(self) -> str:
        return f"<pyzyme kernel {self.name}>"

    @property
    def store(self):
        """The ``@njit`` store function, made (and for a derivative, pyzyme's plan built) on
        first use: at the lowering of the first call, where its errors are raised."""
        if self._store is None:
            with global_compiler_lock:
                if self._store is None:
                    store = self._make_store()
                    # Compiled here for its types, so that a typing error of the user's
                    # kernel surfaces now, with its line, not in the middle of XLA's call.
                    store.compile(self.signature())
                    self._store = store
        return self._store

    def signature(self) -> tuple:
        return (*[s.numba_type() for s in self.ins], *[s.numba_type(True) for s in self.outs])

    def _derive(self, key: tuple, make) -> Kernel:
        kernel = self._derived.get(key)
        if kernel is None:
            with global_compiler_lock:
                kernel = self._derived.get(key)
                if kernel is None:
                    kernel = self._derived[key] = make()
        return kernel

    def forward(self, mask: Sequence[bool]) -> Kernel:
        """``(ins..., tangents of the ins in mask...) -> tangents of the outputs``."""
        mask = tuple(mask)
        _check_mask(self, mask)
        tangents = [s for s, m in zip(self.ins, mask) if m]
        if self.batch is not None:
            return self._derive(("forward", mask), lambda: self._batched_forward(mask))
        return self._derive(("forward", mask), lambda: Kernel(
            lambda: _forward_store(self, mask), (*self.ins, *tangents), self.outs, self.py,
            f"{self.name}.fwd", ("forward", self, mask)))

    def _batched_forward(self, mask: tuple) -> Kernel:
        """The forward derivative of a batched kernel: the inner kernel's, batched (a
        tangent is batched where its input is), rather than a derivative of the loop."""
        inner, n, bmask = self.batch
        tangents = [b for b, m in zip(bmask, mask) if m]
        forward = inner.forward(mask)
        batched = forward.batched(n, (*bmask, *tangents))
        return Kernel(batched._make_store, batched.ins, batched.outs, self.py,
                      f"{self.name}.fwd", ("forward", self, mask), batched.batch)

    def reverse(self, mask: Sequence[bool]) -> Kernel:
        """``(ins..., cotangents of the outputs...) -> cotangents of the ins in mask``."""
        mask = tuple(mask)
        _check_mask(self, mask)
        grads = [s for s, m in zip(self.ins, mask) if m]
        return self._derive(("reverse", mask), lambda: Kernel(
            lambda: _reverse_store(self, mask), (*self.ins, *self.outs), grads, self.py,
            f"{self.name}.rev", ("reverse", self, mask)))

    def batched(self, n: int, mask: Sequence[bool]) -> Kernel:
        """This kernel in a loop over a leading axis of ``n`` of the inputs in ``mask`` and of
        every output."""
        mask = tuple(mask)

        def spec(s: Spec) -> Spec:
            return Spec((n, *s.shape), s.dtype, s.const)
        ins = [spec(s) if m else s for s, m in zip(self.ins, mask)]
        return self._derive(("batched", n, mask), lambda: Kernel(
            lambda: _batched_store(self, n, mask), ins, [spec(s) for s in self.outs], self.py,
            f"{self.name}.vmap{n}", batch=(self, n, mask)))


def _check_mask(kernel: Kernel, mask: tuple) -> None:
    if len(mask) != len(kernel.ins) or any(m and not s.differentiable
                                           for s, m in zip(kernel.ins, mask)):
        raise ValueError(f"{kernel}: a derivative is taken for float inputs only, got {mask}")


def _njit(source: str, name: str, scope: dict, py, what: str):
    """The ``@njit`` function ``name`` of ``source``, named as the user's ``py`` (so that
    the symbols compiled and pyzyme's errors name it) and registered as standing for it."""
    scope = {"np": np, **scope, "__name__": getattr(py, "__module__", __name__)}
    qual = getattr(py, "__qualname__", name)
    exec(compile(source, f"<pyzyme.jax: {what} of {qual}>", "exec"), scope)  # noqa: S102
    fn = scope[name]
    fn.__name__, fn.__qualname__ = getattr(py, "__name__", name), qual
    dispatcher = numba.njit(fn)
    remember_wrapper(dispatcher, py)
    return dispatcher


def user_kernel(f, ins: Sequence[Spec], outs: Sequence[Spec], tuple_result: bool) -> Kernel:
    """The kernel storing the results of the user's ``f`` (an ``@njit`` dispatcher or a plain
    Python function): one output, or a tuple of them with ``tuple_result``."""
    dispatcher = dispatcher_of(f)
    py = getattr(dispatcher, "py_func", f)

    def make():
        args = [f"a{i}" for i in range(len(ins))]
        outs_ = [f"o{j}" for j in range(len(outs))]
        lines = [f"def store({', '.join(args + outs_)}):"]
        # JAX's buffers never change: an argument f may write (LLVM could not show it only
        # reads it) is a copy, made here, so its derivatives see the copy too
        writes = compiled_writes(dispatcher, tuple(s.numba_type() for s in ins))
        lines += [f"    a{i} = a{i}.copy()" for i, (s, w) in enumerate(zip(ins, writes))
                  if w and s.shape]
        lines.append(f"    r = f({', '.join(args)})")
        for j, spec in enumerate(outs):
            value = f"r[{j}]" if tuple_result else "r"
            if not spec.shape:
                lines.append(f"    o{j}[0] = {value}")
                continue
            # Numba's own copy, which checks the shape (an element loop here made pyzyme's
            # forward mode over the reverse derivative meet a tape reallocation it refuses);
            # as a slice, which Numba compiles in a tenth of the time of o[...] = r.
            lines.append(f"    o{j}[:] = {value}")
        return _njit("\n".join(lines) + "\n", "store", {"f": dispatcher}, py, "results stored")
    return Kernel(make, ins, outs, py, getattr(py, "__qualname__", "kernel"))


def loop(shape: tuple, body: str, indent: str = "    ") -> list[str]:
    """Source lines running ``body`` for every index of ``shape`` (``{i}`` in it: the index).

    Element by element, with the shape written in: Numba compiles this in a fraction of the
    time it takes for ``a[...] = b`` (whose broadcasting it types and lowers in general), and
    ``b`` may have any layout."""
    lines = [f"{indent}{'    ' * d}for i{d} in range({n}):" for d, n in enumerate(shape)]
    index = ", ".join(f"i{d}" for d in range(len(shape)))
    return lines + [f"{indent}{'    ' * len(shape)}{body.format(i=index)}"]


def _names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _shadowed(k: Kernel, mask: tuple) -> list[bool]:
    """Which inputs get a shadow: those in ``mask``, and every other float array, with a
    zero shadow of its own (a kernel may merge pointers to an input it does not
    differentiate and to memory it does, e.g. Numba's copy through a temporary when two
    arrays may overlap; with a shadow on each, activity is known without run-time checks)."""
    return [m or bool(s.shape) and np.issubdtype(s.dtype, np.floating)
            for s, m in zip(k.ins, mask)]


def _forward_store(k: Kernel, mask: tuple):
    """``fwd(a..., t..., u...)``: ``u`` = the tangents of ``k``'s outputs for tangents ``t``
    of the inputs in ``mask``, by pyzyme's forward mode of ``k.store``."""
    shadowed = _shadowed(k, mask)
    plan = forward_plan(k.store, k.signature(), (*shadowed, *[True] * len(k.outs)), A.Const,
                        1, False, False)
    a, o, u = _names("a", len(k.ins)), _names("o", len(k.outs)), _names("u", len(k.outs))
    t = [f"t{i}" for i, m in enumerate(mask) if m]
    lines = [f"def fwd({', '.join(a + t + u)}):"]
    lines += [f"    o{j} = {s.empty()}" for j, s in enumerate(k.outs)]
    lines += [f"    t{i} = np.zeros_like(a{i})" for i, (m, z) in enumerate(zip(mask, shadowed))
              if z and not m]
    tangents = [f"t{i}" for i, z in enumerate(shadowed) if z]
    lines.append(f"    derivative({', '.join(a + o + tangents + u)})")
    return _njit("\n".join(lines) + "\n", "fwd", {"derivative": plan.function}, k.py,
                 "forward mode")


def _reverse_store(k: Kernel, mask: tuple):
    """``rev(a..., c..., g...)``: ``g`` = the cotangents of the inputs in ``mask`` for
    cotangents ``c`` of ``k``'s outputs, by pyzyme's reverse mode of ``k.store``. The
    shadows of array inputs are zeroed here, the cotangents copied (the sweep consumes
    them, and JAX's buffers are read-only)."""
    shadowed = _shadowed(k, mask)
    kinds = [(Activity.ACTIVE if not s.shape else Activity.DUPLICATED) if m else
             Activity.DUPLICATED if z else Activity.CONST
             for s, m, z in zip(k.ins, mask, shadowed)]
    # Built for arrays apart: the outputs, their cotangents and the shadows are made here,
    # and the inputs that stay JAX's are only read (store copies any f may write), so no
    # two arrays the derivative writes share memory; a parallel loop's reverse sweep then
    # gives each task a copy of a shared adjoint instead of adding atomically.
    plan = reverse_plan(k.store, k.signature(), [*kinds, *[Activity.DUPLICATED] * len(k.outs)],
                        A.Const, True, need_primal=False)
    a, o, c = _names("a", len(k.ins)), _names("o", len(k.outs)), _names("c", len(k.outs))
    g = [f"g{i}" for i, m in enumerate(mask) if m]
    lines = [f"def rev({', '.join(a + c + g)}):"]
    lines += [f"    g{i} = np.zeros_like(a{i})" for i, (m, z) in enumerate(zip(mask, shadowed))
              if z and not m]
    for j, s in enumerate(k.outs):
        lines += [f"    o{j} = {s.empty()}", f"    d{j} = {s.empty()}"]
        lines += loop(s.shape, f"d{j}[{{i}}] = c{j}[{{i}}]") if s.shape else \
            [f"    d{j}[0] = c{j}"]
    duplicated = [i for i, kind in enumerate(kinds) if kind is Activity.DUPLICATED]
    shadows = [f"g{i}" for i in duplicated]
    for x, i in zip(shadows, duplicated):
        if mask[i]:
            lines += loop(k.ins[i].shape, f"{x}[{{i}}] = 0.0")
    call = f"derivative({', '.join(a + o + shadows + _names('d', len(k.outs)))})"
    actives = [i for i, kind in enumerate(kinds) if kind is Activity.ACTIVE]
    lines.append(f"    r = {call}" if actives else f"    {call}")
    lines += [f"    g{i}[0] = r[{n}]" for n, i in enumerate(actives)]
    return _njit("\n".join(lines) + "\n", "rev", {"derivative": plan.function}, k.py,
                 "reverse mode")


def _batched_store(k: Kernel, n: int, mask: tuple):
    """``batch(a..., o...)``: ``k.store`` for each index of the leading axis of the inputs in
    ``mask`` and of the outputs."""
    a, o = _names("a", len(k.ins)), _names("o", len(k.outs))
    args = [f"a{i}[b]" if m else f"a{i}" for i, m in enumerate(mask)]
    args += [f"o{j}[b]" if s.shape else f"o{j}[b:b + 1]" for j, s in enumerate(k.outs)]
    source = (f"def batch({', '.join(a + o)}):\n    for b in range({n}):\n"
              f"        inner({', '.join(args)})\n")
    return _njit(source, "batch", {"inner": k.store}, k.py, "a loop over the batch")
