"""Forward mode over the sweeps of a checkpointed loop: ``hvp`` (forward over reverse) of a
derivative built under a tape budget.

A reverse-mode derivative runs a checkpointed loop through two drivers
(:mod:`pyzyme.diff.calls.checkpoint`): the forward sweep (``aug``), which stores snapshots and
runs steps untaped up to the schedule's first turn, and the reverse sweep (``rev``), which
restores snapshots, runs steps forward again and differentiates one step a turn. Neither is
differentiated through its body here (the scheme's calls go through a table of function
pointers, and its snapshots are bytes): each gets a *tangent driver* that carries out the same
actions on states that hold tangents too.

- A region of the snapshot (the loop's carried block, the memory its steps write) varies with
  the direction where its pointer has a shadow in forward mode: that shadow, of the same bytes,
  is a region too, after all the primal ones (one a lane). A region that does not vary gets a
  region of 0 bytes in its place, so that both sweeps lay the same regions out alike. The
  scheme sizes its snapshots from the regions' bytes, tangents included: under the same
  budget it keeps fewer snapshots and recomputes more.
- A step run untaped is the step's forward derivative (its values and their tangents).
- A step differentiated is the forward derivative of the step's combined reverse derivative
  (its gradient and the gradient's tangent).

The forward sweep's state (the scheme's, a pointer) carries no derivative.
"""

from __future__ import annotations

from dataclasses import replace

from pyzyme import naming
from pyzyme.analysis.activity import Activity
from pyzyme.diff.calls.checkpoint import (Sweep, SweepDriver, forward_sweep, register,
                                         reverse_sweep, sweep_of)
from pyzyme.diff.calls.step_loops import i64
from pyzyme.diff.signature import ForwardSignature
from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.names import readable
from pyzyme.ir.values import const_null

__all__ = ["forward_mode"]


def forward_mode(cx, inst: I.CallBase) -> None:
    """Forward mode of a call of a sweep driver of a checkpointed loop: its tangent driver."""
    callee = inst.called_function
    sweep = sweep_of(callee)
    if sweep is None:  # a driver this process did not build (read from IR text)
        raise UnsupportedError(
            f"{cx.where} takes forward mode through the reverse-mode derivative of a "
            f"checkpointed loop (forward over reverse: @{readable(callee.name)}) that pyzyme "
            f"did not generate in this module; it cannot tell its snapshots and steps apart",
            hint="take the forward-over-reverse derivative (hvp) of the function itself: "
                 "pyzyme builds its checkpointed gradient and the tangents of that together")
    if sweep.kind not in ("aug", "rev"):
        raise UnsupportedError(
            f"{cx.where} takes forward mode through the tangent of a checkpointed loop's "
            f"sweep (@{readable(callee.name)}: a third derivative); pyzyme differentiates "
            f"checkpointed loops to second order", hint="build without tape_budget")
    k, m = sweep.regions, sweep.args
    ops = list(inst.args)
    pairs = [(ops[4 + 2 * r], ops[5 + 2 * r]) for r in range(k)]
    args = ops[4 + 2 * k:4 + 2 * k + m]
    step_acts = [Activity.CONST] + [_activity(cx, a) for a in args]
    fstep = cx.callee_derivative(sweep.step, ForwardSignature.standard(
        sweep.step, step_acts, cx.width))
    if sweep.row.until_false and fstep.function_type.ret != sweep.step.function_type.ret:
        raise UnsupportedError(f"{cx.where} runs a checkpointed while loop whose step's "
                               f"derivative does not return whether to go on "
                               f"({sweep.step.ref})", hint="return an int from the step")
    # Each region's tangent in every lane (a varying region's shadow; else 0 bytes).
    varies = [p in cx.activity.varied for p, _ in pairs]
    tangent_regions = [(cx.derivative(p, lane), cx.value(size)) if vary
                       else (const_null(T.ptr), i64(0))
                       for (p, size), vary in zip(pairs, varies) for lane in range(cx.width)]
    if sweep.kind == "aug":
        _forward_sweep(cx, inst, sweep, pairs, args, step_acts, fstep, tangent_regions)
    else:
        _reverse_sweep(cx, inst, sweep, pairs, args, step_acts, fstep, tangent_regions)


def _check_layout(cx, inst, state, pairs) -> None:
    """The reverse sweep lays its regions out as the forward sweep that made ``state`` did
    (where ``state`` is that call's result: else, kept in a tape, the same pointers at both
    are taken to vary alike)."""
    aug = state.called_function if isinstance(state, I.CallBase) else None
    made = sweep_of(aug)
    if made is None or made.kind != "aug":
        return
    before = [state.args[4 + 2 * r] in cx.activity.varied for r in range(made.regions)]
    if before != [p in cx.activity.varied for p, _ in pairs]:
        raise UnsupportedError(
            f"{cx.where} runs the reverse sweep of a checkpointed loop whose snapshot "
            f"regions vary with the direction differently from its forward sweep's "
            f"(@{readable(inst.called_function.name)}); their tangents would not line up",
            hint="build without tape_budget")


def _activity(cx, a) -> Activity:
    if a not in cx.activity.varied:
        return Activity.CONST
    return Activity.DUPLICATED if a.type.is_pointer else Activity.ACTIVE


def _tangents(cx, values: list, acts: list) -> list:
    """The tangents of ``values`` (those not Const in ``acts``), each lane after lane."""
    return [cx.derivative(v, lane) for v, act in zip(values, acts) if act is not Activity.CONST
            for lane in range(cx.width)]


def _driver(cx, sweep: Sweep, name: str, ret, operands: list):
    """A tangent driver of ``sweep`` (``name``: its kind) taking ``operands``."""
    loop = naming.checkpoint_driver(sweep.step.name, name,
                                     naming.CHECKPOINT_WHILE if sweep.row.until_false
                                     else naming.CHECKPOINT_FOR)
    return SweepDriver(cx.module, loop, ret, [(f"o{j}", v.type) for j, v in enumerate(operands)])


def _split_params(d, counts: list) -> list:
    """``d``'s parameters cut into consecutive groups of ``counts``."""
    out, at = [], 0
    for c in counts:
        out.append(list(d.fn.args[at:at + c]))
        at += c
    return out


def _forward_sweep(cx, inst, sweep: Sweep, pairs, args, step_acts, fstep, tangent_regions):
    head = [cx.value(v) for v in inst.args[:4]]
    primal_pairs = [cx.value(v) for pair in pairs for v in pair]
    prim = [cx.value(a) for a in args]
    targs = _tangents(cx, args, step_acts[1:])
    tregions = [v for pair in tangent_regions for v in pair]
    operands = head + primal_pairs + prim + tregions + targs
    d = _driver(cx, sweep, "aug.fwd", T.ptr, operands)
    (scheme, data, start, n), flat, p_args, flat_t, t_args = _split_params(
        d, [4, len(primal_pairs), len(prim), len(tregions), len(targs)])
    regions = _pairs(flat) + _pairs(flat_t)
    d.b.ret(forward_sweep(d, sweep.row, scheme, data, n, regions,
                          lambda b, j: b.call(fstep, [b.add(start, j)] + p_args + t_args)))
    register(d.fn, replace(sweep, kind="tangent"))
    state = cx.builder.call(d.fn, operands, name=inst.name)
    cx.values[inst] = state
    if inst in cx.activity.varied:
        cx.derivs[inst] = [const_null(T.ptr)] * cx.width  # the scheme's state: no tangent


def _reverse_sweep(cx, inst, sweep: Sweep, pairs, args, step_acts, fstep, tangent_regions):
    k, m, s = sweep.regions, sweep.args, sweep.shadows
    shadows = list(inst.args[4 + 2 * k + m:4 + 2 * k + m + s])
    state = inst.args[-1]
    _check_layout(cx, inst, state, pairs)
    grad_acts = step_acts + [_activity(cx, a) for a in shadows]
    fgrad = cx.callee_derivative(sweep.grad, ForwardSignature.standard(
        sweep.grad, grad_acts, cx.width))
    head = [cx.value(v) for v in inst.args[:4]]
    primal_pairs = [cx.value(v) for pair in pairs for v in pair]
    prim = [cx.value(a) for a in args]
    shad = [cx.value(a) for a in shadows]
    targs = _tangents(cx, args, step_acts[1:])
    tshad = _tangents(cx, shadows, grad_acts[1 + m:])
    tregions = [v for pair in tangent_regions for v in pair]
    operands = head + primal_pairs + prim + shad + tregions + targs + tshad + [cx.value(state)]
    d = _driver(cx, sweep, "rev.fwd", T.void, operands)
    (scheme, _data, start, n), flat, p_args, p_shad, flat_t, t_args, t_shad, (kept,) = \
        _split_params(d, [4, len(primal_pairs), len(prim), len(shad), len(tregions),
                                 len(targs), len(tshad), 1])
    reverse_sweep(d, sweep.row, scheme, n, _pairs(flat) + _pairs(flat_t), kept,
                  lambda b, j: b.call(fstep, [b.add(start, j)] + p_args + t_args),
                  lambda b, j: b.call(fgrad, [b.add(start, j)] + p_args + p_shad
                                     + t_args + t_shad))
    d.b.ret_void()
    register(d.fn, replace(sweep, kind="tangent"))
    cx.values[inst] = cx.builder.call(d.fn, operands)


def _pairs(flat: list) -> list:
    return [(flat[j], flat[j + 1]) for j in range(0, len(flat), 2)]
