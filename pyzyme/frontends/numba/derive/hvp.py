"""Hessian-vector products of ``@njit`` functions: forward mode over the IR of reverse mode.

The gradient of ``f`` is a function pyzyme wrote in LLVM IR
(:func:`~pyzyme.frontends.numba.derive.reverse.reverse_module`): loops, caches, adjoint slots
and all. Differentiating *that* in forward mode, in the direction ``v`` of ``x``, gives the
directional derivative of the gradient: ``H v``, at a small multiple of the gradient's cost and
without forming ``H``. Nothing here is special to second derivatives but the signature.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyzyme import ir, pipeline, settings
from pyzyme.analysis.activity import Activity
from pyzyme.analysis.layout import sizeof
from pyzyme.diff.forward.generator import ExtraParam, ForwardGenerator, ForwardSignature
from pyzyme.frontends.numba import njit_callable
from pyzyme.frontends.numba.derive.forward import differentiable
from pyzyme.frontends.numba.derive.reverse import reverse_module, value_type
from pyzyme.frontends.numba.source_lines import where_defined
from pyzyme.naming import symbol_name

__all__ = ["HvpPlan", "build_hvp"]


@dataclass(frozen=True)
class HvpPlan:
    """``function(x, *consts, dx, *ws_shadows, seed, v, hv, *ws_tangents)``: accumulates
    ``H v`` into ``hv`` (and the gradient into ``dx``); ``consts`` are the function's other
    arguments, not differentiated. Those at ``workspaces`` (positions among them) are arrays
    the function writes: each takes a zero shadow in ``ws_shadows`` and two zero arrays in
    ``ws_tangents`` (the tangents of the array and of its shadow), all like it."""

    function: object
    ir_text: str
    workspaces: tuple[int, ...] = ()


def build_hvp(f, xtype, rules, where: str | None = None, const_types=(),
              workspaces=()) -> HvpPlan:
    """Compile the Hessian-vector product of ``f`` (an array argument of type ``xtype``, then
    arguments of ``const_types`` held constant; a float result) with respect to its first
    argument; ``where`` names the user's function in errors. The constant arrays at
    ``workspaces`` (positions among ``const_types``), which ``f`` writes, carry shadows and
    tangents of their own (:class:`HvpPlan`)."""
    where = where or where_defined(f)
    const_types = tuple(const_types)
    written = [1 + k for k in sorted(workspaces)]  # positions among f's arguments: x is 0
    kinds = [Activity.DUPLICATED] + [Activity.DUPLICATED if 1 + k in written
                                     else Activity.CONST for k in range(len(const_types))]
    rm = reverse_module(f, (xtype, *const_types), kinds,
                        Activity.ACTIVE, True, rules, where=where, tangents=1)
    module, abi = rm.module, rm.abi
    if hasattr(rules, "with_rule_bodies"):  # user rules: differentiate through their bodies
        module = rules.with_rule_bodies(module)
    grad_fn = module.get_function(rm.symbol)
    # The gradient's entry takes f's parameters (x's, then the constants'), then the
    # shadows' (dx's, then each workspace's), each shadow n parameters after its array's.
    n = sum(len(arg.params) for arg in abi.args)
    acts = [Activity.CONST] * len(grad_fn.args)
    extra = []
    first, taken = abi.args[0].params[0].index, 0  # f's first parameter; shadows placed
    for position in [0, *written]:  # x and dx, each workspace and its shadow: along v
        params = abi.args[position].params
        diff = set(differentiable(abi.args[position]))
        for offset in (0, first + n + taken - params[0].index):
            for p in params:
                index = p.index + offset
                if p.index in diff:
                    acts[index] = Activity.DUPLICATED
                extra.append(ExtraParam(ir.parse_type(p.llvm_type),
                                        index if p.index in diff else None))
        taken += len(params)
    acts[0] = Activity.DUPLICATED  # the result slot: its tangent goes to a scratch buffer
    scratch = ((0, max(8, sizeof(value_type(rm.restype)))),)
    # The gradient is a Numba-convention function: parameter 1 is where errors are reported.
    sig = ForwardSignature(tuple(acts), tuple(extra), 1, (), False, scratch, exception_param=1)
    symbol = symbol_name("hvp", rm.symbol, repr(sig))

    def generate():
        ForwardGenerator(module, rules, settings.current(), over_reverse=True).derivative(
            grad_fn, sig, name=symbol)
        return [symbol]

    # each workspace's tangent and its shadow's tangent
    nsig = rm.restype(*rm.args, xtype, xtype,
                      *[const_types[k - 1] for k in written for _ in range(2)])
    consts = [f"c{i}" for i in range(len(const_types))]
    shadows = [f"dc{k - 1}" for k in written]
    tangents = [f"{t}c{k - 1}" for k in written for t in ("t", "dt")]
    built = pipeline.build(
        module, generate, what=f"{where} in forward mode over reverse mode (hvp)",
        rules=rules, name=f"pyzyme_hvp_{abi.function}",
        wrap=lambda compiled: njit_callable(compiled, symbol, nsig,
                                            arg_names=["x", *consts, "dx", *shadows, "seed",
                                                       "v", "hv", *tangents]))
    return HvpPlan(built.wrapped, built.text, tuple(sorted(workspaces)))
