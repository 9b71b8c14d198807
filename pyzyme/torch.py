"""A Numba kernel as a differentiable PyTorch operation: :func:`wrap`.

``wrap(f)`` registers ``f`` with ``torch.library`` as custom operations (one set per pattern
of argument kinds: tensor, int, float, bool), each with its autograd formula and a fake
implementation for shapes, so ``f`` composes with ``backward()``, ``torch.autograd.grad``,
``gradcheck`` / ``gradgradcheck`` and ``torch.compile`` (no graph break) like a built-in op:

- ``primal``: ``f`` itself, on the tensors' memory seen as NumPy arrays (no copy for CPU
  tensors in C order; others are made contiguous first);
- ``vjp``: the vector-Jacobian product, one combined reverse sweep of pyzyme's
  :func:`~pyzyme.autodiff` (of ``f`` for a float result, of the sum of each result's dot
  product with its cotangent otherwise: :func:`pyzyme.api.wrappers.weighted_wrapper`). The
  combined sweep runs the primal again (0.06 ms of its 0.63 ms on benchmarks/torch_wrap.py's
  solver); split mode would keep a tape from the forward call instead, which every forward
  call would pay for, backward or not, and which would have to travel through torch.compile's
  graph as a tensor;
- ``hvp``: the second derivative, for double backward, through :func:`pyzyme.hvp_and_gradient`
  (forward over reverse): kernels returning a float, one float array differentiated.

Arguments: float64/float32 tensors are differentiable (a 0-d tensor is passed to the kernel as
a Python float, its gradient comes back as a 0-d tensor); integer and bool tensors, Python
ints, floats and bools are passed as they are and carry no derivative. Results: floats, ints,
arrays and tuples of them, as tensors (a float as a 0-d tensor). The kernel must not write into
its arguments (checked on the first call of each kind of arguments). Forward-mode AD
(``torch.func.jvp``) raises UnsupportedError: torch.library takes no forward formula for a
Python operation.

Importing :mod:`pyzyme` never imports torch; this module does, and is imported by its user.

Examples
--------
>>> import numpy as np, torch
>>> import pyzyme.torch
>>> def energy(x, k):
...     s = 0.0
...     for i in range(x.shape[0] - 1):
...         s += k * (x[i + 1] - x[i]) ** 2
...     return s
>>> op = pyzyme.torch.wrap(energy)
>>> x = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64, requires_grad=True)
>>> y = op(x, 0.5)
>>> y.backward()
>>> y.item(), x.grad.tolist()
(2.5, [-1.0, -1.0, 2.0])
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numba
import numpy as np
import torch
from numba.core import types
from torch.autograd import forward_ad

import pyzyme.frontends.numba.hook  # noqa: F401  the capture hook, before Numba compiles f
from pyzyme.api import annotations as A
from pyzyme.api.args.call_shape import call_shape
from pyzyme.api.autodiff import autodiff, compiled_reverse
from pyzyme.api.dispatchers import dispatcher_of, result_type, where
from pyzyme.api.modes import Reverse
from pyzyme.api.second_order import hvp_and_gradient
from pyzyme.api.wrappers import moved_wrapper, weighted_wrapper
from pyzyme.errors import PyzymeError, UnsupportedError
from pyzyme.naming import framework_op

__all__ = ["wrap", "Wrapped"]

_NAMESPACE = "pyzyme"
_FLOATS = (torch.float64, torch.float32)
_OTHER = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
_SCALARS = {bool: "bool", int: "int", float: "float"}   # Python scalar -> schema type
_NUMBER = itertools.count()   # one per wrap(): torch refuses an operation's name twice


def wrap(f, fake: Callable | None = None) -> Wrapped:
    """``f`` (an ``@njit`` kernel or a plain Python function) as a function of torch tensors
    with autograd, usable under ``torch.compile``.

    Parameters
    ----------
    f
        The kernel. It reads its array arguments and returns new values: floats, ints,
        arrays, or a tuple of them. It must not write into its arguments, which are the
        tensors' own memory (the first call of each kind of arguments checks it).
    fake
        Optional: ``fake(*args)`` returns empty tensors shaped like ``f``'s results (as
        ``torch.library.register_fake`` functions do), for ``torch.compile``, which traces
        with tensors that hold no data. Without it, the shapes are those of the last call with
        inputs of the same shapes, or, before any, those ``f`` gives on inputs of ones (the
        first real call checks that they agree; pass ``fake`` where a result's shape depends
        on the inputs' values, or where ``f`` cannot run on ones).

    Returns
    -------
    Wrapped
        ``wrapped(*args)``: ``f``'s result as tensors. Float tensors among ``args`` carry
        derivatives (reverse mode, and double backward through :func:`pyzyme.hvp` where the
        kernel returns a float and one float array is differentiated).

    Examples
    --------
    >>> import torch
    >>> square = wrap(lambda x: x * x)
    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> torch.autograd.grad(square(x).sum(), x)[0]
    tensor([2., 4.], dtype=torch.float64)
    """
    return Wrapped(f, fake)


@dataclass(frozen=True)
class _Layout:
    """What ``f`` returns for arguments of some types: ``parts``, one per result (the result
    itself when ``single``, else each item of its tuple), each ``"s"`` (a float), an int ``d``
    (a ``d``-d float array) or ``"-"`` (an int, a bool, an integer array: no derivative)."""

    single: bool
    parts: tuple

    @property
    def scalar(self) -> bool:
        """Whether the result is one float (reverse mode then seeds it directly)."""
        return self.single and self.parts == ("s",)


class Wrapped:
    """What :func:`wrap` returns: ``f`` on tensors, registered as torch operations on first
    use for each pattern of argument kinds."""

    def __init__(self, f, fake: Callable | None) -> None:
        self.dispatcher = dispatcher_of(f)
        self.fake = fake
        self.__name__ = getattr(f, "__name__", "wrapped")
        self.__doc__ = getattr(f, "__doc__", None)
        self._number = next(_NUMBER)
        self._ops: dict[tuple, _Ops] = {}
        self._resolved: dict[tuple, tuple] = {}
        self._layouts: dict[tuple, _Layout] = {}
        self._shapes: dict[tuple, list] = {}    # input shapes and scalars -> result (shape, dtype)
        self._guessed: set[tuple] = set()       # the keys of _shapes found by running on ones
        self._lock = threading.Lock()
        _WRAPPED[self._number] = self

    def __repr__(self) -> str:
        return f"<pyzyme.torch.wrap of {where(self.dispatcher)}>"

    def __call__(self, *args):
        # Plain enough for torch.compile to trace: what needs Numba or registers operations
        # is in _resolve, whose answer it takes as a constant.
        single, pattern = _resolve(self._number, _key(args))
        outs = self._ops[pattern].primal(*args)
        if single:
            return outs[0]
        return tuple(outs)

    def resolve(self, key: tuple) -> tuple[bool, tuple]:
        """For arguments of :func:`_key` ``key``: whether ``f`` returns one value (not a
        tuple), and the pattern of argument kinds whose operations (registered here, once)
        take them."""
        got = self._resolved.get(key)
        if got is None:
            pattern = tuple(_kind(k, i, self) for i, k in enumerate(key))
            with self._lock:
                if pattern not in self._ops:
                    self._ops[pattern] = _Ops(self, pattern)
            got = self._resolved[key] = (self.layout_of(key).single, pattern)
        return got

    # What f returns -------------------------------------------------------------------------

    def layout(self, args: Sequence) -> _Layout:
        """The parts of ``f``'s result for arguments like ``args``."""
        return self.layout_of(_key(args))

    def layout_of(self, key: tuple) -> _Layout:
        """The parts of ``f``'s result for arguments of :func:`_key` ``key`` (from the type
        Numba infers for it)."""
        got = self._layouts.get(key)
        if got is None:
            argtypes = tuple(_numba_type(k) for k in key)
            got = self._layouts[key] = self._layout_of(result_type(self.dispatcher, argtypes))
        return got

    def _layout_of(self, restype) -> _Layout:
        if isinstance(restype, types.BaseTuple):
            return _Layout(False, tuple(self._part(t) for t in restype.types))
        return _Layout(True, (self._part(restype),))

    def _part(self, t) -> str | int:
        if isinstance(t, types.Float):
            return "s"
        if isinstance(t, types.Array) and isinstance(t.dtype, types.Float):
            return t.ndim
        if isinstance(t, (types.Integer, types.Boolean)) or (
                isinstance(t, types.Array) and isinstance(t.dtype, (types.Integer,
                                                                    types.Boolean))):
            return "-"
        raise UnsupportedError(f"pyzyme.torch.wrap: {where(self.dispatcher)} returns {t}; a "
                               f"wrapped kernel returns floats, ints, arrays or a flat tuple "
                               f"of them")

    # Result shapes for fake tensors ---------------------------------------------------------

    def _shape_key(self, args) -> tuple:
        return tuple((tuple(int(s) for s in a.shape), a.dtype) if isinstance(a, torch.Tensor)
                     else a for a in args)

    def fake_results(self, args) -> list:
        """Empty tensors shaped like ``f``'s results on ``args`` (fake tensors, no data)."""
        if self.fake is not None:
            out = self.fake(*args)
            return list(out) if isinstance(out, (tuple, list)) else [out]
        key = self._shape_key(args)
        shapes = self._shapes.get(key)
        if shapes is None:
            shapes = self._guess_shapes(args, key)
        return [torch.empty(shape, dtype=dtype) for shape, dtype in shapes]

    def _guess_shapes(self, args, key) -> list:
        values = [_ones(a) if isinstance(a, torch.Tensor) else a for a in args]
        try:
            out = self.dispatcher(*values)
        except Exception as e:
            raise PyzymeError(
                f"pyzyme.torch.wrap: torch.compile traces {where(self.dispatcher)} without "
                f"data, and the shapes of its results were not known: running it on inputs "
                f"of ones to find them raised {type(e).__name__}: {e}",
                hint="pass wrap(f, fake=...) returning empty tensors of the results' shapes, "
                     "or call the wrapped function once outside torch.compile") from e
        items = out if not self.layout(args).single else (out,)
        shapes = [_result_meta(v) for v in items]
        self._shapes[key] = shapes
        self._guessed.add(key)
        return shapes

    def remember_shapes(self, args, tensors: list) -> None:
        """Keep the shapes of a real call's results; refuse those a guess got wrong (the
        graph torch.compile made was laid out for the guess)."""
        key = self._shape_key(args)
        shapes = [(tuple(t.shape), t.dtype) for t in tensors]
        if key in self._guessed and self._shapes.get(key) != shapes:
            raise PyzymeError(
                f"pyzyme.torch.wrap: {where(self.dispatcher)} returned results of shapes "
                f"{[s for s, _ in shapes]}, not the {[s for s, _ in self._shapes[key]]} it "
                f"gave on inputs of ones, for which torch.compile laid out its graph",
                hint="pass wrap(f, fake=...) returning empty tensors of the results' shapes")
        self._shapes[key] = shapes


def _said_in_full(method):
    """``method``, its pyzyme errors raised again with their context and hint in the message:
    torch.compile reports an error raised while it traces by the error's repr (no cause
    chained), which for a pyzyme error is its message alone, without the kernel's Python
    line. The error keeps its class."""
    @functools.wraps(method)
    def run(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except PyzymeError as e:
            if not e.context and not e.hint:
                raise
            try:
                again = type(e)(str(e))
            except TypeError:   # a class whose constructor takes more (ParseError)
                again = PyzymeError(str(e))
            raise again from e
    return run


class _Ops:
    """The torch operations of one wrapped kernel for one pattern of argument kinds."""

    def __init__(self, wrapped: Wrapped, pattern: tuple) -> None:
        self.wrapped, self.pattern = wrapped, pattern
        self.tensors = [i for i, k in enumerate(pattern) if k == "Tensor"]
        self._prepared: set[tuple] = set()   # (argument key, mask) whose vjp is built
        self._checked: set[tuple] = set()    # argument keys whose first call wrote nothing
        py = wrapped.dispatcher.py_func
        inputs = (str(py.__module__), py.__qualname__, str(wrapped._number),
                  ",".join(pattern))
        name = py.__qualname__
        params = ", ".join(f"{k} a{i}" for i, k in enumerate(pattern))
        extra = ", " if params else ""
        self.primal = _define(framework_op(name, "primal", *inputs),
                              f"({params}) -> Tensor[]", self._primal, self._primal_fake)
        self.vjp = _define(framework_op(name, "vjp", *inputs),
                           f"({params}{extra}Tensor[] cotangents, bool[] mask) -> Tensor[]",
                           self._vjp, self._vjp_fake)
        self.hvp = _define(framework_op(name, "hvp", *inputs),
                           f"({params}{extra}Tensor w, Tensor v, int x) -> Tensor[]",
                           self._hvp, self._hvp_fake)
        self.primal.register_autograd(self._primal_backward, setup_context=self._primal_setup)
        self.vjp.register_autograd(self._vjp_backward, setup_context=self._vjp_setup)

    # primal ---------------------------------------------------------------------------------

    def _primal(self, *args) -> list:
        wrapped = self.wrapped
        _refuse_forward_ad(wrapped, "result")
        values = [_numpy(a, i, wrapped) if isinstance(a, torch.Tensor) else a
                  for i, a in enumerate(args)]
        key = _key(args)
        if key in self._checked:
            out = wrapped.dispatcher(*values)
        else:
            out = self._first_call(values)
            self._checked.add(key)
        items = (out,) if wrapped.layout(args).single else out
        arrays = [v for v in values if isinstance(v, np.ndarray)]
        tensors = [_tensor(v, arrays) for v in items]
        wrapped.remember_shapes(args, tensors)
        return tensors

    def _first_call(self, values: list):
        """The kernel's result on ``values``, refusing a kernel that wrote into an argument:
        autograd keeps the arguments for backward(), whose derivative would then start from
        what the kernel left there (checked on the first call of each argument key)."""
        before = [v.copy() if isinstance(v, np.ndarray) else None for v in values]
        out = self.wrapped.dispatcher(*values)
        for i, (v, b) in enumerate(zip(values, before)):
            if b is not None and not np.array_equal(v, b, equal_nan=v.dtype.kind == "f"):
                raise UnsupportedError(
                    f"pyzyme.torch.wrap: {where(self.wrapped.dispatcher)} wrote into its "
                    f"argument {i}, a tensor's memory; a wrapped kernel must leave its "
                    f"arguments as they were (autograd keeps them for backward())",
                    hint="write into a copy made in the kernel (u = u.copy())")
        return out

    @_said_in_full
    def _primal_fake(self, *args) -> list:
        self.wrapped.layout(args)   # Numba's errors (typing f) at trace time
        return self.wrapped.fake_results(args)

    @_said_in_full
    def _primal_setup(self, ctx, inputs, output) -> None:
        ctx.save_for_backward(*[inputs[i] for i in self.tensors])
        ctx.scalars = [None if isinstance(a, torch.Tensor) else a for a in inputs]
        ctx.results = [(o.shape, o.dtype) for o in output]
        # The derivative is built here, so that what pyzyme cannot differentiate is said at
        # the forward call (and by torch.compile, when it traces), not at backward().
        mask = [i in self.tensors and inputs[i].requires_grad and inputs[i].is_floating_point()
                for i in range(len(inputs))]
        if any(mask):
            self._prepare(inputs, mask)

    def _primal_backward(self, ctx, grads):
        args = _inputs(ctx, self.tensors)
        mask = [bool(n) and i in self.tensors and args[i].is_floating_point()
                for i, n in enumerate(ctx.needs_input_grad)]
        cotangents = [g if g is not None else torch.zeros(shape, dtype=dtype)
                      for g, (shape, dtype) in zip(grads, ctx.results)]
        grads = dict(zip(self.tensors, self.vjp(*args, cotangents, mask)))
        return tuple(grads[i] if mask[i] else None for i in range(len(args)))

    # vjp ------------------------------------------------------------------------------------

    def _annotations(self, layout: _Layout, values: list, mask, weights: list):
        """``autodiff``'s target and arguments for the vector-Jacobian product of the kernel
        at ``values`` (what it receives) with the cotangents ``weights`` (floats and arrays),
        and the shadows (None for an Active float) the gradients are read from."""
        anns, shadows = [], {}
        for i, value in enumerate(values):
            if not mask[i]:
                anns.append(A.Const(value))
            elif isinstance(value, np.ndarray):
                shadows[i] = np.zeros_like(value)   # pyzyme zeroes the shadows, not the user
                anns.append(A.Duplicated(value, shadows[i]))
            else:
                anns.append(A.Active(value))
                shadows[i] = None
        if layout.scalar:
            return self.wrapped.dispatcher, anns, shadows
        target = weighted_wrapper(self.wrapped.dispatcher, len(values), layout.parts,
                                  layout.single)
        anns += [A.Const(w) for part, w in zip(layout.parts, weights) if part != "-"]
        return target, anns, shadows

    def _prepare(self, args, mask) -> None:
        """Build the derivative that :meth:`_vjp` calls for arguments like ``args`` (tensors
        that may be fake: only their types are read)."""
        key = (_key(args), tuple(mask))
        if key in self._prepared:
            return
        layout = self.wrapped.layout(args)
        values = [_ones(a) if isinstance(a, torch.Tensor) else a for a in args]
        weights = [1.0 if part == "s" else np.ones((1,) * part) if isinstance(part, int)
                   else None for part in layout.parts]
        target, anns, _ = self._annotations(layout, values, mask, weights)
        shape = call_shape(anns)
        if shape is not None:
            compiled_reverse(Reverse, target, A.Active, shape.classes, shape.types,
                             shape.distinct)
        self._prepared.add(key)

    def _vjp(self, *args) -> list:
        *args, cotangents, mask = args
        wrapped = self.wrapped
        _refuse_forward_ad(wrapped, "gradient")
        layout = wrapped.layout(args)
        values = [_numpy(a, i, wrapped) if isinstance(a, torch.Tensor) else a
                  for i, a in enumerate(args)]
        weights = [w.item() if part == "s" else None if part == "-" else
                   _numpy(w.to(torch.float64), -1, wrapped)
                   for part, w in zip(layout.parts, cotangents)]
        target, anns, shadows = self._annotations(layout, values, mask, weights)
        derivs = autodiff(Reverse, target, A.Active, *anns)[0]
        scale = weights[0] if layout.scalar else 1.0
        grads = {}
        for i, shadow in shadows.items():
            if shadow is None:
                grads[i] = torch.tensor(derivs[i] * scale, dtype=args[i].dtype)
            else:
                grads[i] = torch.from_numpy(shadow if scale == 1.0 else shadow * scale)
        return [grads[i] if i in grads else args[i].new_empty(0) for i in self.tensors]

    @_said_in_full
    def _vjp_fake(self, *args) -> list:
        *args, cotangents, mask = args
        self._prepare(args, mask)
        return [torch.empty_like(args[i]) if mask[i] else args[i].new_empty(0)
                for i in self.tensors]

    def _vjp_setup(self, ctx, inputs, output) -> None:
        *args, cotangents, mask = inputs
        ctx.save_for_backward(*[args[i] for i in self.tensors], *cotangents)
        ctx.scalars = [None if isinstance(a, torch.Tensor) else a for a in args]
        ctx.mask = mask

    def _vjp_backward(self, ctx, grads):
        saved = ctx.saved_tensors
        args = _inputs(ctx, self.tensors, saved[:len(self.tensors)])
        cotangents = saved[len(self.tensors):]
        x = self._second_order_argument(args, ctx.mask)
        v = grads[self.tensors.index(x)]
        if v is None:
            return (None,) * (len(args) + 2)
        dx, dw = self.hvp(*args, cotangents[0], v, x)
        return tuple(dx if i == x else None for i in range(len(args))) + ([dw], None)

    def _second_order_argument(self, args, mask) -> int:
        """The argument double backward differentiates again (the first, the only one the
        first derivative was taken of), or a clear error where pyzyme.hvp does not apply."""
        wrapped = self.wrapped
        taken = [i for i, m in enumerate(mask) if m]
        if wrapped.layout(args).scalar and len(taken) == 1 and args[taken[0]].ndim >= 1:
            return taken[0]
        raise UnsupportedError(
            f"pyzyme.torch.wrap: double backward through {where(wrapped.dispatcher)} is taken "
            f"by pyzyme.hvp, which needs a kernel returning a float and one float array "
            f"differentiated (here the derivative was taken of arguments {taken})",
            hint="differentiate once, or pass the other arguments without requires_grad")

    # hvp ------------------------------------------------------------------------------------

    def _hvp(self, *args) -> list:
        """``[w H v, <gradient, v>]`` for argument ``x``, the one differentiated: the
        derivatives of ``w * gradient`` (the vjp's result) along ``v``."""
        *args, w, v, x = args
        wrapped = self.wrapped
        _refuse_forward_ad(wrapped, "second derivative")
        values = [_numpy(a, i, wrapped) if isinstance(a, torch.Tensor) else a
                  for i, a in enumerate(args)]
        target = wrapped.dispatcher if x == 0 else \
            moved_wrapper(wrapped.dispatcher, len(values), x)
        hv, g = hvp_and_gradient(target, values[x], _numpy(v.contiguous(), -1, wrapped),
                                 *values[:x], *values[x + 1:])
        dx = torch.from_numpy(hv).mul_(w.item()).to(args[x].dtype)
        dw = torch.tensor(float(np.vdot(g, v.detach().numpy())), dtype=w.dtype)
        return [dx, dw]

    def _hvp_fake(self, *args) -> list:
        *args, w, v, x = args
        return [torch.empty_like(args[x]), torch.empty_like(w)]


_WRAPPED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()   # number -> Wrapped


@torch.compiler.assume_constant_result
@_said_in_full
def _resolve(number: int, key: tuple) -> tuple[bool, tuple]:
    """:meth:`Wrapped.resolve` of wrapped kernel ``number``: asks Numba and registers
    operations, which torch.compile must not trace (it takes the answer as a constant)."""
    return _WRAPPED[number].resolve(key)


def _refuse_forward_ad(wrapped: Wrapped, part: str) -> None:
    """Raise where a forward-mode derivative is being taken (``torch.func.jvp``, ``jacfwd``,
    ``hessian``, ``torch.autograd.forward_ad``): torch.library has no forward-mode formula to
    register for a Python operation, and gives its results a zero tangent (or none) instead of
    an error, a silently wrong derivative. Inside the operation only this says so: under
    ``torch.func.jvp`` the tensors it receives are no longer dual."""
    if forward_ad._current_level >= 0:
        raise UnsupportedError(
            f"pyzyme.torch.wrap: forward-mode AD (torch.func.jvp, jacfwd, hessian, "
            f"torch.autograd.forward_ad) reached the {part} of {where(wrapped.dispatcher)}; "
            f"PyTorch takes no forward-mode formula for a Python custom operation, and would "
            f"give it a zero tangent",
            hint="differentiate with backward() or torch.autograd.grad (torch.func's "
                 "transforms do not reach a Python custom operation either), or call "
                 "pyzyme.autodiff(Forward, ...) on NumPy arrays")


def _define(name: str, schema: str, impl, fake):
    """A torch custom operation ``pyzyme::name`` with its implementation and fake. The
    implementation is registered for every device, so that a tensor on a GPU meets pyzyme's
    error (the kernels run on the CPU), not torch's "no kernel"."""
    op = torch.library.custom_op(f"{_NAMESPACE}::{name}", impl, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op


def _inputs(ctx, tensors: list, saved=None) -> list:
    """The arguments of a call, from what setup_context kept."""
    args = list(ctx.scalars)
    for i, t in zip(tensors, ctx.saved_tensors if saved is None else saved):
        args[i] = t
    return args


def _kind(k, i: int, wrapped: Wrapped) -> str:
    """The schema type of argument ``i``, whose (dtype, dimensions) or type is ``k``."""
    if isinstance(k, tuple):
        if k[0] not in _FLOATS and k[0] not in _OTHER:
            raise UnsupportedError(f"pyzyme.torch.wrap: argument {i} of "
                                   f"{where(wrapped.dispatcher)} is a tensor of {k[0]}; "
                                   f"kernels take float64, float32, integer and bool tensors")
        return "Tensor"
    kind = _SCALARS.get(k)
    if kind is None:
        raise UnsupportedError(f"pyzyme.torch.wrap: argument {i} of {where(wrapped.dispatcher)}"
                               f" is a {k.__name__}; a wrapped kernel takes tensors, ints, "
                               f"floats and bools")
    return kind


def _key(args) -> tuple:
    """What decides the kernel's Numba types for ``args``: (dtype, dimensions) of a tensor,
    the type of anything else."""
    return tuple((a.dtype, a.dim()) if isinstance(a, torch.Tensor) else type(a) for a in args)


def _numba_type(k):
    """The Numba type of what the kernel receives for an argument of :func:`_key` ``k``."""
    if isinstance(k, tuple):
        dtype, ndim = k
        if ndim == 0:   # passed as a Python scalar
            return types.float64 if dtype in _FLOATS else \
                types.boolean if dtype == torch.bool else types.int64
        return types.Array(numba.from_dtype(_NUMPY[dtype]), ndim, "C")
    return numba.typeof(k())


_NUMPY = {torch.float64: np.float64, torch.float32: np.float32, torch.int64: np.int64,
          torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8,
          torch.uint8: np.uint8, torch.bool: np.bool_}


def _numpy(t: torch.Tensor, i: int, wrapped: Wrapped):
    """What the kernel receives for tensor ``t``: its memory as a NumPy array (copied only
    where it is not in C order), or a Python scalar for a 0-d tensor."""
    if t.device.type != "cpu":
        raise UnsupportedError(f"pyzyme.torch.wrap: argument {i} of {where(wrapped.dispatcher)} "
                               f"is on {t.device}; the kernels run on the CPU",
                               hint="move the tensor with .cpu() before the call")
    t = t.detach()
    if t.ndim == 0:
        return t.item()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.resolve_neg().resolve_conj().numpy()


def _ones(t: torch.Tensor):
    """An input of ones shaped like (fake) tensor ``t``, to run the kernel on."""
    if t.ndim == 0:
        return 1.0 if t.is_floating_point() else True if t.dtype == torch.bool else 1
    return np.ones(tuple(int(s) for s in t.shape), dtype=_NUMPY[t.dtype])


def _result_meta(v) -> tuple:
    """``(shape, dtype)`` of the tensor a kernel's result ``v`` becomes."""
    if isinstance(v, np.ndarray):
        return v.shape, torch.from_numpy(np.empty(0, v.dtype)).dtype
    return (), _scalar_dtype(v)


def _scalar_dtype(v):
    if isinstance(v, (bool, np.bool_)):
        return torch.bool
    if isinstance(v, (np.float32,)):
        return torch.float32
    if isinstance(v, (float, np.floating)):
        return torch.float64
    return torch.int64


def _tensor(v, inputs: list) -> torch.Tensor:
    """A kernel's result ``v`` as a tensor: an array's memory as it is, unless it is an
    argument's (torch's operations return new tensors, never views of their inputs)."""
    if isinstance(v, np.ndarray):
        if any(np.may_share_memory(v, a) for a in inputs):
            v = v.copy()
        return torch.from_numpy(v)
    return torch.tensor(v, dtype=_scalar_dtype(v))
