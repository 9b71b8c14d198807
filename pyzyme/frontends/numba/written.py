"""Which arguments a compiled ``@njit`` function may write: the data of its arrays, its records.

LLVM marks a pointer parameter ``readonly`` (or ``readnone``) where its function-attribute
inference proves that nothing is written through it; everything else *may* be written. The
users of this take the conservative side: forward mode gives the shadows of such arguments
output tangents (:mod:`pyzyme.frontends.numba.derive.forward`), the JAX bridge copies such
arguments before the kernel runs, as JAX's buffers must never change
(:mod:`pyzyme.jax.kernels`), and a derivative whose build finds an active value stored where
no shadow is names the float arrays held constant that may be written
(:func:`written_constant_arrays`), to which the JAX-style layer gives shadows
(:mod:`pyzyme.api.workspaces`).

Examples
--------
>>> import numba, numpy as np
>>> @numba.njit
... def scale(x, out):
...     for i in range(x.size):
...         out[i] = 2.0 * x[i]
>>> t = numba.typeof(np.ones(3))
>>> compiled_writes(scale, (t, t))
(False, True)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from numba.core import types

from pyzyme.frontends.numba.abi import AbiMap, ArgAbi
from pyzyme.ir.values import Argument

__all__ = ["written_arguments", "written_constant_arrays", "arrays_needing_shadows",
           "compiled_writes"]


def written_arguments(abi: AbiMap, attrs: Callable[[int], str]) -> tuple[bool, ...]:
    """Per argument of the native function ``abi`` describes: whether it may write the values
    the argument holds. ``attrs(i)``: the attributes of native parameter ``i``, as LLVM prints
    them. Reference counts written through MemInfo pointers are no values. A jitclass instance
    reaches arrays through pointers loaded from its fields, which no parameter attribute
    covers, so it counts as written."""
    def written(arg: ArgAbi) -> bool:
        if _holds_instance(arg.numba_type):
            return True
        return any(not {"readonly", "readnone"} & set(attrs(p.index).split())
                   for p in arg.params
                   if p.llvm_type == "ptr" and isinstance(p.numba_type,
                                                          (types.CPointer, types.Record)))
    return tuple(written(arg) for arg in abi.args)


def written_constant_arrays(abi: AbiMap, written: Sequence[bool],
                            held: Sequence[bool]) -> tuple[int, ...]:
    """The positions of the float (or complex) arrays among the arguments ``held`` constant
    that the function may write (``written``: :func:`written_arguments`)."""
    return tuple(k for k, (arg, constant, wrote) in enumerate(zip(abi.args, held, written))
                 if constant and wrote and _float_array(arg))


def arrays_needing_shadows(abi: AbiMap, native, written: Sequence[bool],
                           held: Sequence[bool], merged) -> tuple[int, ...]:
    """The float arrays among the arguments ``held`` constant that a build refused with
    :class:`~pyzyme.ActivityError` needs shadows of: those it may write
    (:func:`written_constant_arrays`), and the one whose memory it merged with memory that
    has a shadow (``merged``, the error's parameter of the native function ``native``: ``c =
    init`` before a loop that makes ``c`` new arrays), which a zero shadow settles as passing
    it ``Duplicated`` does."""
    found = set(written_constant_arrays(abi, written, held))
    if isinstance(merged, Argument) and merged.function is native:
        found.update(k for k, (arg, constant) in enumerate(zip(abi.args, held))
                     if constant and _float_array(arg)
                     and any(p.index == merged.index for p in arg.params))
    return tuple(sorted(found))


def _float_array(arg) -> bool:
    return isinstance(arg.numba_type, types.Array) and isinstance(
        arg.numba_type.dtype, (types.Float, types.Complex))


def compiled_writes(dispatcher, argtypes: tuple) -> tuple[bool, ...]:
    """:func:`written_arguments` of ``dispatcher`` compiled for ``argtypes`` (compiling it if
    needed), read from the attributes of its native function in Numba's optimized module."""
    cres = dispatcher.overloads.get(tuple(argtypes))
    if cres is None:
        dispatcher.compile(tuple(argtypes))
        cres = dispatcher.overloads[tuple(argtypes)]
    abi = AbiMap.from_signature(cres.target_context, dispatcher.py_func.__qualname__,
                                tuple(cres.fndesc.args), cres.signature)
    params = _parameters(cres.library.get_llvm_str(), cres.fndesc.llvm_func_name)
    return written_arguments(abi, lambda i: params[i] if params is not None else "")


def _parameters(text: str, symbol: str) -> list[str] | None:
    """The parameters of the definition of ``symbol`` in module ``text``, each as printed
    (its type, attributes and name); None where it is not defined there."""
    found = re.search(r'^define [^\n]*@"?' + re.escape(symbol) + r'"?\((.*)\)[^)\n]*\{$', text,
                      re.M)
    if found is None:
        return None
    params, depth, current = [], 0, []
    for c in found.group(1):
        depth += c in "([{<"
        depth -= c in ")]}>"
        if c == "," and depth == 0:
            params.append("".join(current))
            current = []
        else:
            current.append(c)
    params.append("".join(current))
    return params


def _holds_instance(ty) -> bool:
    if isinstance(ty, types.BaseTuple):
        return any(_holds_instance(t) for t in ty)
    if isinstance(ty, types.Optional):
        return _holds_instance(ty.type)
    return isinstance(ty, types.ClassInstanceType)
