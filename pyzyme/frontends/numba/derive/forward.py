"""Forward-mode derivatives of ``@njit`` functions, compiled and callable like them.

For ``f(a, x)`` with ``a`` Duplicated and width N, the derivative is a native function in Numba's
own calling convention for the signature ``UniTuple(R, N + 1)(A, X, A, ..., A)``: the primal
arguments, then N shadows of each Duplicated one, returning the primal result followed by its N
tangents. It is made from ``f``'s captured native function by
:mod:`pyzyme.diff.forward.generator` and compiled by :mod:`pyzyme.pipeline`: the result slot
Numba passes (``retptr``) holds the primal result and then each tangent, so the shadow of
``retptr`` in lane k is ``retptr + (k + 1) * sizeof(R)``. Numba then boxes tangent
arrays as it boxes any array it returns, and the derivative can be called from other ``@njit``
code, where it is inlined.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from numba.core import types

from pyzyme import ir, pipeline, settings
from pyzyme.analysis.activity import Activity
from pyzyme.diff.forward.generator import ExtraParam, ForwardGenerator, ForwardSignature
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.frontends.numba import capture, njit_callable, pre_ad
from pyzyme.frontends.numba.abi import AbiMap, ArgAbi
from pyzyme.frontends.numba.source_lines import add_source_line, where_defined
from pyzyme.frontends.numba.written import arrays_needing_shadows, written_arguments
from pyzyme.ir import IRBuilder, types as T
from pyzyme.ir.values import const_int
from pyzyme.naming import symbol_name

__all__ = ["ForwardPlan", "build_forward", "differentiable", "forward_signature"]


@dataclass(frozen=True)
class ForwardPlan:
    """What a compiled forward derivative takes and gives back."""

    function: object            # the njit dispatcher of the derivative
    width: int
    returns_tangent: bool       # the result is (primal, t1, ..., tN) rather than the primal
    symbol: str
    ir_text: str                # the derivative's module before optimization
    written: tuple[bool, ...] | None = None   # per argument, from written_arguments

    def may_write(self, position: int) -> bool:
        """Whether the derivative may write the shadows of argument ``position`` (as the
        function may write the argument); a plan that does not say is taken to write all."""
        return self.written is None or self.written[position]


def differentiable(arg: ArgAbi) -> list[int]:
    """Native parameters of ``arg`` that carry derivatives: floats, and the pointers to an
    array's data, a record or a jitclass instance's fields (and their MemInfos, so shadows are
    reference-counted like primals). A string's pointers carry none."""
    return [p.index for p in arg.params if _carries_derivative(p)]


def _carries_derivative(p) -> bool:
    if p.llvm_type in ("double", "float", "half"):
        return True
    if p.llvm_type != "ptr":
        return False
    nt = p.numba_type
    if isinstance(nt, types.MemInfoPointer):
        return not isinstance(nt.dtype, types.RawPointer)  # a string's MemInfo holds void*
    return isinstance(nt, (types.CPointer, types.Record))


def _result_carries(abi: AbiMap) -> bool:
    return any(f.llvm_type in ("double", "float", "half", "ptr") for f in abi.result.fields)


def forward_signature(abi: AbiMap, shadowed: Sequence[bool], width: int,
                      ret_differentiated: bool) -> ForwardSignature:
    """The derivative's parameters, from the ABI map and which arguments have shadows."""
    n = 2 + sum(len(a.params) for a in abi.args)
    acts = [Activity.CONST] * n
    extra: list[ExtraParam] = []
    for arg, has_shadows in zip(abi.args, shadowed):
        if not has_shadows:
            continue
        diff = set(differentiable(arg))
        if not diff:
            raise UnsupportedError(
                f"argument {arg.name!r} of {abi.function} is {arg.numba_type}, which carries no "
                f"derivative; pass it as Const")
        for index in diff:
            ty = ir.parse_type(next(p.llvm_type for p in arg.params if p.index == index))
            acts[index] = Activity.DUPLICATED if ty.is_pointer else Activity.ACTIVE
        for lane in range(width):
            for p in arg.params:
                extra.append(ExtraParam(ir.parse_type(p.llvm_type),
                                        p.index if p.index in diff else None, lane))
    derived, scratch = (), ()
    acts[0] = Activity.DUPLICATED
    size = abi.result.size
    if ret_differentiated:
        derived = ((0, tuple(size * (k + 1) for k in range(width))),)
    else:
        # The result's derivative is not wanted: it goes to a scratch buffer, so storing an
        # active result is no error.
        scratch = ((0, size),)
    return ForwardSignature(tuple(acts), tuple(extra), width, derived, False, scratch,
                            exception_param=1)


def build_forward(f, primal_types: Sequence[types.Type], shadowed: Sequence[bool],
                  ret_activity: Activity, width: int, rules, need_primal: bool = True,
                  distinct: bool = False, where: str | None = None) -> ForwardPlan:
    """Capture ``f`` for ``primal_types`` and compile its forward derivative, in which the
    arguments marked in ``shadowed`` have ``width`` shadows each; the result is
    differentiated unless ``ret_activity`` is ``Activity.CONST``. Without ``need_primal`` a
    float result is returned as zero beside its tangents, so that LLVM can delete what only
    the primal result needed. ``distinct``: no two arrays of the call share memory.
    ``where`` names the user's function in errors (default: ``f``'s name and line)."""
    primal_types = tuple(primal_types)
    cap = capture(f, primal_types, keep_calls=getattr(rules, "keeps_call", None))
    abi = cap.abi
    differentiated = ret_activity is not Activity.CONST
    ret_differentiated = differentiated and _result_carries(abi)
    if differentiated and not ret_differentiated and abi.result.kind not in ("none",):
        raise UnsupportedError(
            f"{abi.function} returns {abi.result.numba_type}, which carries no derivative; "
            f"use Const as the return activity")
    sig = forward_signature(abi, shadowed, width, ret_differentiated)
    module = ir.parse_module(cap.text)
    native = module.get_function(cap.symbol)
    written = written_arguments(abi, lambda i: native.args[i].attrs)
    opts = settings.current()
    pre_ad.ready(module, native, abi, distinct, opts, reverse=False)
    restype = abi.signature.return_type
    drop_primal = not need_primal and ret_differentiated and isinstance(restype, types.Float)
    symbol = symbol_name("fwd", cap.text, repr(sig) + opts.tag + ("-" if drop_primal else "")
                         + ("" if not distinct else "-distinct"))

    def generate():
        gen = ForwardGenerator(module, rules, opts)
        dfn = gen.derivative(native, sig, name=symbol + ".with.primal" if drop_primal
                             else symbol)
        if drop_primal:
            _tangents_only(module, dfn, symbol, abi.result.size, width)
        return [symbol]

    if ret_differentiated:
        restype = types.UniTuple(restype, width + 1)
    shadow_types = [t for t, has in zip(primal_types, shadowed) if has for _ in range(width)]
    nsig = restype(*primal_types, *shadow_types)
    names = [f"a{i}" for i in range(len(primal_types) + len(shadow_types))]
    try:
        built = pipeline.build(
            module, generate, what=f"{where or where_defined(f)} in forward mode",
            rules=rules, name=f"pyzyme_fwd_{abi.function}",
            wrap=lambda compiled: njit_callable(compiled, symbol, nsig, arg_names=names),
            on_error=lambda err: add_source_line(err, cap.dispatcher, primal_types))
    except ActivityError as err:
        # What the JAX-style layer may retry with zero shadows (pyzyme.api.workspaces)
        err.workspaces = arrays_needing_shadows(
            abi, native, written, [not has for has in shadowed], getattr(err, "merged", None))
        raise
    return ForwardPlan(built.wrapped, width, ret_differentiated, symbol, built.text, written)


def _tangents_only(module, full, symbol: str, size: int, width: int):
    """``symbol``: ``full`` called with a local result slot, the tangents copied out and zero
    where the primal result was. The primal result is then a dead store, and LLVM deletes the
    work only it needed (the ``x ** i`` of a Taylor term whose tangent uses ``x ** (i - 1)``)."""
    fn = module.add_function(symbol, full.function_type)
    for outer, inner in zip(fn.args, full.args):
        outer.name = inner.name
    b = IRBuilder(fn.append_block("entry"))
    slot = b.alloca(T.ArrayType(size * (width + 1), T.i8), align=16, name="with.primal")
    status = b.call(full, [slot, *fn.args[1:]], name="status")
    retptr, nbytes, no = fn.args[0], const_int(T.i64, size), const_int(T.i1, 0)
    memcpy = module.declare("llvm.memcpy.p0.p0.i64",
                            T.FunctionType(T.void, [T.ptr, T.ptr, T.i64, T.i1]))
    memset = module.declare("llvm.memset.p0.i64",
                            T.FunctionType(T.void, [T.ptr, T.i8, T.i64, T.i1]))
    b.call(memcpy, [b.gep(T.i8, retptr, [nbytes]), b.gep(T.i8, slot, [nbytes]),
                    const_int(T.i64, size * width), no])
    b.call(memset, [retptr, const_int(T.i8, 0), nbytes, no])
    b.ret(status)
    return fn
