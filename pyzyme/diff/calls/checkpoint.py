"""Checkpointed loops (:class:`~pyzyme.rules.spec.CheckpointLoop`), both modes.

A checkpointed loop is a call ``loop(step, start, n, scheme, data, k, regions..., args...)``
that runs ``step(start + j, args...)`` for ``j`` in ``[0, n)`` (a while loop, ``until_false``
in its row, runs ``i = 0; while (step(i++, args...));`` and has ``n`` -1); the memory the
steps carry from one to the next is the ``k`` regions (``pointer, bytes`` pairs). Each mode
gets a *driver*, a function of its own that the derivative calls in place of the loop:

- the loop as it is (``primal``), where nothing about it carries a derivative;
- forward mode (``fwd``): each step's forward derivative, in order;
- reverse mode: the forward sweep (``aug``) runs the scheme's actions up to its first turn,
  storing snapshots of the regions and running the steps untaped, and returns the scheme's
  state; the reverse sweep (``rev``) carries out the rest of the actions, differentiating one
  step at a time (the step's combined derivative: its forward and reverse passes together, so
  no tape outlives a step), and restores the state it started from.

The actions follow Revolve's protocol as Enzyme's ``<enzyme/checkpoint.h>`` states it: STORE
(``cpnum``, ``iteration``), FORWARD (``startiteration`` to ``iteration``), FIRSTUTURN and UTURN
(``iteration``: the step ``iteration - 1``), RESTORE, DONE. The driver's own slots are -2 (the
state before the last step, stored at the first turn) and -1 (the state the reverse sweep
starts from, restored when the schedule is done).

A while loop's forward sweep starts its scheme with ``n`` -1 and checks what each step it runs
returns until one returns false: then it tells the scheme the number of steps
(``set_nsteps``) and goes on to the first turn; it hands that number to the reverse sweep with
the scheme's state.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from pyzyme import naming
from pyzyme.analysis.activity import Activity
from pyzyme.diff.calls.step_loops import Driver, i64, step_activities, step_function, trap
from pyzyme.diff.signature import ForwardSignature, ReverseSignature
from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import Function
from pyzyme.ir.values import Value, const_int, const_null
from pyzyme.rules import spec

__all__ = ["varied", "forward_mode", "augmented", "reverse", "primal_driver", "Sweep",
           "SweepDriver", "sweep_of", "register", "forward_sweep", "reverse_sweep"]

# The scheme's functions: byte offsets in EnzymeCheckpointScheme, and their types.
_INIT, _NEXT, _STORE, _RESTORE, _SET_NSTEPS, _FINALIZE = 8, 16, 24, 32, 40, 48
_INIT_TYPE = T.FunctionType(T.ptr, [T.ptr, T.i64, T.i64])
_NEXT_TYPE = T.FunctionType(T.void, [T.ptr, T.ptr])
_SLOT_TYPE = T.FunctionType(T.void, [T.ptr, T.i64, T.i64, T.ptr, T.i64])
_FINALIZE_TYPE = T.FunctionType(T.void, [T.ptr])
_SET_NSTEPS_TYPE = T.FunctionType(T.void, [T.ptr, T.i64])
# EnzymeCkptAction {i32 flag; i64 iteration, startiteration, cpnum} and its flags;
# EnzymeCkptRegion {ptr; u64 bytes; u32 addrspace, flags}.
_ACTION = T.StructType([T.i32, T.i64, T.i64, T.i64])
_REGION = T.StructType([T.ptr, T.i64, T.i32, T.i32])
_STORE_A, _RESTORE_A, _FORWARD_A, _FIRSTUTURN_A, _UTURN_A, _DONE_A = 1, 2, 3, 4, 5, 7
_WHAT = "a checkpointed loop"
# The sweeps stay calls, so that forward mode over them (over a gradient: hvp) meets them by
# name (pyzyme.naming.is_checkpoint_sweep) and builds their tangent drivers
# (pyzyme.diff.calls.checkpoint_tangents), instead of differentiating the schemes.
_KEPT_A_CALL = "noinline"


def _step(cx, inst: I.CallBase, row: spec.CheckpointLoop) -> Function:
    return step_function(cx, inst, row.step, _WHAT)


def _activities(cx, inst: I.CallBase, row, step: Function, reverse: bool) -> list:
    return step_activities(cx, row.step_args(inst), step, reverse, _WHAT)


def varied(row, inst: I.CallBase, is_varied) -> bool:
    """A checkpointed loop returns nothing; its steps write through its arguments."""
    return False


class SweepDriver(Driver):
    """A driver of a checkpointed loop: :class:`Driver` and the scheme's calls."""

    def regions(self, pairs: list) -> Value:
        """An ``EnzymeCkptRegion`` array of ``pairs`` (pointer, bytes), on the stack."""
        b = self.b
        array = b.alloca(T.ArrayType(max(len(pairs), 1), _REGION), name="regions")
        for k, (ptr, size) in enumerate(pairs):
            slot = b.gep(_REGION, array, [i64(k)])
            b.store(ptr, slot, 8)
            b.store(size, b.gep(T.i8, slot, [i64(8)]), 8)
            b.store(const_int(T.i64, 0), b.gep(T.i8, slot, [i64(16)]), 8)
        return array

    def scheme_call(self, scheme: Value, offset: int, ftype, args: list, name: str = ""):
        b = self.b
        fn = b.load(T.ptr, b.gep(T.i8, scheme, [i64(offset)]), 8)
        return b.call(fn, args, function_type=ftype, name=name)

    def actions(self, state: Value, scheme: Value, cases: dict) -> None:
        """Ask for actions until one of ``cases`` (flag -> ``handler(b, action)`` returning
        True where it leaves the loop) leaves it; an unknown action traps."""
        b, fn = self.b, self.fn
        action = b.alloca(_ACTION, name="action")
        head, done, bad = fn.append_block("action"), fn.append_block("done"), \
            fn.append_block("bad.action")
        b.br(head)
        b.position_at_end(head)
        self.scheme_call(scheme, _NEXT, _NEXT_TYPE, [state, action])
        flag = b.load(T.i32, action, 8, name="flag")
        blocks = {f: fn.append_block(f"action.{f}") for f in cases}
        b.switch(flag, bad, [(const_int(T.i32, f), blk) for f, blk in blocks.items()])
        for f, blk in blocks.items():
            b.position_at_end(blk)
            fields = [b.load(T.i64, b.gep(T.i8, action, [i64(8 * k)]), 8, name=n)
                      for k, n in ((1, "iteration"), (2, "from"), (3, "slot"))]
            b.br(done if cases[f](b, *fields) else head)
        b.position_at_end(bad)
        b.call(trap(fn.module), [])
        b.unreachable()
        b.position_at_end(done)


def _loop_name(row) -> str:
    return naming.CHECKPOINT_WHILE if row.until_false else naming.CHECKPOINT_FOR


def _run(d: Driver, row, fn: Function, start: Value, n: Value, args: list) -> None:
    """The loop at ``d``: ``fn(start + j, args...)`` for ``j`` in ``[0, n)``, or (a while loop)
    until it returns false."""
    if row.until_false:
        d.repeat(i64(0), lambda b, j: b.call(fn, [b.add(start, j)] + args))
    else:
        d.loop(i64(0), n, lambda b, j: b.call(fn, [b.add(start, j)] + args))


def primal_driver(module, step: Function, types: list, row: spec.CheckpointLoop) -> Function:
    """``void primal(i64 start, i64 n, args...)`` (``args`` of ``types``): the loop of ``row``
    as it is, ``step(start + j, args...)`` for ``j`` in ``[0, n)`` (or until it returns
    false)."""
    d = Driver(module, naming.checkpoint_driver(step.name, "primal", _loop_name(row)), T.void,
                [("start", T.i64), ("n", T.i64)] + [(f"a{k}", t) for k, t in enumerate(types)])
    start, n, *rest = d.fn.args
    _run(d, row, step, start, n, rest)
    d.b.ret_void()
    return d.fn


def _trap_unless(d: Driver, ok: Value) -> None:
    """Continue at ``d.b`` where ``ok``; trap otherwise (a scheme breaking the protocol)."""
    b, fn = d.b, d.fn
    good, bad = fn.append_block("ok"), fn.append_block("protocol")
    b.cbranch(ok, good, bad)
    b.position_at_end(bad)
    b.call(trap(fn.module), [])
    b.unreachable()
    b.position_at_end(good)


def _forward_until(d: Driver, scheme, state, steps, run, first, it) -> None:
    """A while loop's FORWARD from ``first`` to ``it``: each step runs untaped (``run(b, j)``,
    which returns whether to go on); until the loop has ended (``steps`` < 0), the first step
    to return false ends it there, and the scheme learns the number of steps (its
    ``set_nsteps``, which must be set)."""
    b, fn = d.b, d.fn
    head = b.block
    loop, nxt_block = fn.append_block("fwd"), fn.append_block("fwd.next")
    ends, after = fn.append_block("ends"), fn.append_block("fwd.done")
    b.cbranch(b.icmp("slt", first, it), loop, after)
    b.position_at_end(loop)
    j = b.phi(T.i64, name="j")
    j.add_incoming(first, head)
    going = run(b, j)
    stop = b.and_(b.icmp("slt", b.load(T.i64, steps, 8), i64(0)),
                  b.icmp("eq", going, const_int(going.type, 0)))
    b.cbranch(stop, ends, nxt_block)
    b.position_at_end(nxt_block)
    nxt = b.add(j, i64(1))
    j.add_incoming(nxt, nxt_block)
    b.cbranch(b.icmp("slt", nxt, it), loop, after)
    b.position_at_end(ends)
    count = b.add(j, i64(1))
    b.store(count, steps, 8)
    set_nsteps = b.load(T.ptr, b.gep(T.i8, scheme, [i64(_SET_NSTEPS)]), 8)
    _trap_unless(d, b.icmp("ne", set_nsteps, const_null(T.ptr)))
    d.b.call(set_nsteps, [state, count], function_type=_SET_NSTEPS_TYPE)
    d.b.br(after)
    d.b.position_at_end(after)


def _index_and_count(b, inst, row, at) -> list:
    """The loop's ``start`` and ``n`` as i64 (``at``: the value where the call is)."""
    out = []
    for pos in (row.start, row.count):
        v = at(inst.args[pos])
        out.append(v if v.type == T.i64 else b.sext(v, T.i64))
    return out


# -- forward mode --------------------------------------------------------------------------
def forward_mode(cx, inst: I.CallBase, row: spec.CheckpointLoop) -> None:
    """Each step's forward derivative, in order: tangents need no snapshots."""
    step = _step(cx, inst, row)
    b = cx.builder
    start, n = _index_and_count(b, inst, row, cx.value)
    args = row.step_args(inst)
    if not any(a in cx.activity.varied for a in args):
        b.call(primal_driver(cx.module, step, [a.type for a in args], row),
               [start, n] + [cx.value(a) for a in args])
        return
    acts = _activities(cx, inst, row, step, reverse=False)
    dfn = cx.callee_derivative(step, ForwardSignature.standard(step, acts, cx.width))
    if row.until_false and dfn.function_type.ret != step.function_type.ret:
        raise UnsupportedError(f"{cx.where} runs a checkpointed while loop whose step's "
                               f"derivative does not return whether to go on ({step.ref})",
                               hint="return an int from the step")
    tangents = [cx.derivs[a][k] for a, act in zip(args, acts[1:]) if act is not Activity.CONST
                for k in range(cx.width)]
    d = Driver(cx.module, naming.checkpoint_driver(step.name, "fwd", _loop_name(row)), T.void,
                [("start", T.i64), ("n", T.i64)]
                + [(f"a{k}", a.type) for k, a in enumerate(args)]
                + [(f"d{k}", t.type) for k, t in enumerate(tangents)])
    start_p, n_p = d.fn.args[:2]
    _run(d, row, dfn, start_p, n_p, list(d.fn.args[2:]))
    d.b.ret_void()
    b.call(d.fn, [start, n] + [cx.value(a) for a in args] + tangents)


# -- reverse mode --------------------------------------------------------------------------
@dataclass(frozen=True)
class Sweep:
    """What a sweep driver (``aug`` or ``rev``) built here runs, for forward mode over it
    (:mod:`pyzyme.diff.calls.checkpoint_tangents`): its operands are ``scheme, data, start,
    n``, ``regions`` (pointer, bytes) pairs, the ``args`` operands of ``step``, then (``rev``)
    the shadows of its Duplicated ones and the forward sweep's state; ``grad`` is the step's
    combined derivative the reverse sweep runs."""

    kind: str  # "aug", "rev", or "tangent" (forward mode over either)
    row: spec.CheckpointLoop
    step: Function
    regions: int
    args: int
    grad: Function | None = None
    shadows: int = 0


# The sweep drivers of each module (by module, so that they go with it).
_SWEEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def sweep_of(fn: Function | None) -> Sweep | None:
    """What sweep driver ``fn`` runs; None if it is none built here."""
    if fn is None or fn.module is None:
        return None
    return _SWEEPS.get(fn.module, {}).get(fn.name)


def register(fn: Function, sweep: Sweep) -> None:
    """Record what sweep driver ``fn`` runs (``kind`` "tangent" for a driver of forward mode
    over one, which is not differentiated further)."""
    _SWEEPS.setdefault(fn.module, {})[fn.name] = sweep


def _sweep_params(inst, row, args) -> list:
    pairs = row.region_pairs(inst)
    return ([("scheme", T.ptr), ("data", T.ptr), ("start", T.i64), ("n", T.i64)]
            + [p for k in range(len(pairs)) for p in ((f"r{k}", T.ptr), (f"b{k}", T.i64))]
            + [(f"a{k}", a.type) for k, a in enumerate(args)])


def _sweep_operands(b, inst, row, at) -> list:
    start, n = _index_and_count(b, inst, row, at)
    pairs = [(at(p), at(s)) for p, s in row.region_pairs(inst)]
    pairs = [(p, s if s.type == T.i64 else b.sext(s, T.i64)) for p, s in pairs]
    return ([at(inst.args[row.scheme]), at(inst.args[row.data]), start, n]
            + [v for pair in pairs for v in pair] + [at(a) for a in row.step_args(inst)])


def _unpack(d: SweepDriver, k: int):
    scheme, data, start, n = d.fn.args[:4]
    pairs = [(d.fn.args[4 + 2 * r], d.fn.args[5 + 2 * r]) for r in range(k)]
    rest = list(d.fn.args[4 + 2 * k:])
    return scheme, data, start, n, pairs, rest


def forward_sweep(d: SweepDriver, row, scheme, data, n, pairs: list, run) -> Value:
    """The forward sweep's actions at ``d``, up to the scheme's first turn: snapshots of the
    regions ``pairs`` (pointer, bytes) stored, step ``j`` run untaped by ``run(b, j)`` (which
    returns a while loop's whether to go on). Returns what the reverse sweep gets: the
    scheme's state (a while loop's: a block of it and the number of steps)."""
    regions = d.regions(pairs)
    total = i64(0)
    for _, size in pairs:
        total = d.b.add(total, size)
    state = d.scheme_call(scheme, _INIT, _INIT_TYPE, [data, n, total], name="state")
    nreg = i64(len(pairs))

    def store(b, it, _from, slot):
        d.scheme_call(scheme, _STORE, _SLOT_TYPE, [state, slot, it, regions, nreg])

    steps = None
    if row.until_false:  # the number of steps, once a step has returned false
        steps = d.b.alloca(T.i64, name="steps")
        d.b.store(i64(-1), steps, 8)

    def forward(b, it, first, _slot):
        if row.until_false:
            _forward_until(d, scheme, state, steps, run, first, it)
        else:
            d.loop(first, it, run)

    def first_turn(b, it, _from, _slot):
        if row.until_false:
            _trap_unless(d, b.icmp("sge", b.load(T.i64, steps, 8), i64(0)))
        b = d.b
        last = b.sub(it, i64(1))
        d.scheme_call(scheme, _STORE, _SLOT_TYPE, [state, i64(-2), last, regions, nreg])
        run(b, last)
        return True

    def restore(b, it, _from, slot):  # a while loop's schedule goes back to its first turn
        d.scheme_call(scheme, _RESTORE, _SLOT_TYPE, [state, slot, it, regions, nreg])

    d.actions(state, scheme, {_STORE_A: store, _RESTORE_A: restore, _FORWARD_A: forward,
                              _FIRSTUTURN_A: first_turn, _DONE_A: lambda *a: True})
    if row.until_false:
        # The scheme's state and the number of steps, for the reverse sweep.
        fb = d.b
        pair = fb.call(d.module.declare("malloc", T.FunctionType(T.ptr, [T.i64])), [i64(16)],
                       name="kept")
        fb.store(state, pair, 8)
        fb.store(fb.load(T.i64, steps, 8), fb.gep(T.i8, pair, [i64(8)]), 8)
        state = pair
    return state


def reverse_sweep(d: SweepDriver, row, scheme, n, pairs: list, kept, run, differentiate) -> None:
    """The reverse sweep's actions at ``d``, from what :func:`forward_sweep` returned
    (``kept``): step ``j`` run untaped by ``run(b, j)``, differentiated by
    ``differentiate(b, j)``; then the state the sweep started from, restored."""
    state = kept
    if row.until_false:
        state = d.b.load(T.ptr, kept, 8, name="scheme.state")
        n = d.b.load(T.i64, d.b.gep(T.i8, kept, [i64(8)]), 8, name="n")
        d.b.call(d.module.declare("free", T.FunctionType(T.void, [T.ptr])), [kept])
    regions = d.regions(pairs)
    nreg = i64(len(pairs))
    b, fn = d.b, d.fn

    def slot_call(offset, slot, it):
        d.scheme_call(scheme, offset, _SLOT_TYPE, [state, slot, it, regions, nreg])

    turns, finish = fn.append_block("turns"), fn.append_block("finish")
    b.cbranch(b.icmp("sgt", n, i64(0)), turns, finish)
    b.position_at_end(turns)
    last = b.sub(n, i64(1))
    slot_call(_STORE, i64(-1), n)
    slot_call(_RESTORE, i64(-2), last)
    differentiate(b, last)

    def restore(b, it, _from, slot):
        slot_call(_RESTORE, slot, it)

    def store(b, it, _from, slot):
        slot_call(_STORE, slot, it)

    def forward(b, it, first, _slot):
        d.loop(first, it, run)

    def turn(b, it, _from, _slot):
        differentiate(b, b.sub(it, i64(1)))

    d.actions(state, scheme, {_RESTORE_A: restore, _STORE_A: store, _FORWARD_A: forward,
                              _UTURN_A: turn, _DONE_A: lambda *a: True})
    slot_call(_RESTORE, i64(-1), n)
    d.b.br(finish)
    d.b.position_at_end(finish)
    d.scheme_call(scheme, _FINALIZE, _FINALIZE_TYPE, [state])


def augmented(cx, inst: I.CallBase, row: spec.CheckpointLoop) -> None:
    """The forward sweep: the scheme's actions up to its first turn (snapshots stored, steps
    run untaped); the scheme's state is kept for :func:`reverse`."""
    step = _step(cx, inst, row)
    args = row.step_args(inst)
    b = cx.fb
    if not any(a in cx.activity.varied for a in args):
        start, n = _index_and_count(b, inst, row, cx.fwd_value)
        b.call(primal_driver(cx.module, step, [a.type for a in args], row),
               [start, n] + [cx.fwd_value(a) for a in args])
        return
    acts = _activities(cx, inst, row, step, reverse=True)
    k = len(row.region_pairs(inst))
    d = SweepDriver(cx.module, naming.checkpoint_driver(step.name, "aug", _loop_name(row)), T.ptr,
                _sweep_params(inst, row, args), suffix=_KEPT_A_CALL)
    scheme, data, start, n, pairs, rest = _unpack(d, k)
    d.b.ret(forward_sweep(d, row, scheme, data, n, pairs,
                          lambda b, j: b.call(step, [b.add(start, j)] + rest)))
    register(d.fn, Sweep("aug", row, step, k, len(args)))
    kept = b.call(d.fn, _sweep_operands(b, inst, row, cx.fwd_value), name="checkpoints")
    shadows = [cx.fwd_shadow(a) for a, act in zip(args, acts[1:])
               if act is Activity.DUPLICATED]
    cx.rule_calls[inst] = (kept, acts, shadows)


def reverse(cx, inst: I.CallBase, row: spec.CheckpointLoop) -> None:
    """The reverse sweep: the rest of the scheme's actions, each turn the combined
    derivative of one step; then the state the sweep started from, restored."""
    if inst not in cx.rule_calls:
        return
    kept, acts, shadows = cx.rule_calls[inst]
    step = _step(cx, inst, row)
    args = row.step_args(inst)
    cx.seed_callee_types(step, [i for i, act in enumerate(acts) if act is Activity.DUPLICATED])
    grad = cx.callee_derivative(step, ReverseSignature(
        tuple(acts), shared_adjoints=cx.sig.shared_adjoints))
    k = len(row.region_pairs(inst))
    d = SweepDriver(cx.module, naming.checkpoint_driver(step.name, "rev", _loop_name(row)), T.void,
                _sweep_params(inst, row, args)
                + [(f"s{k}", s.type) for k, s in enumerate(shadows)] + [("state", T.ptr)],
                suffix=_KEPT_A_CALL)
    scheme, _, start, n, pairs, rest = _unpack(d, k)
    primals, shadow_params = rest[:len(args)], rest[len(args):-1]
    reverse_sweep(d, row, scheme, n, pairs, d.fn.args[-1],
                  lambda b, j: b.call(step, [b.add(start, j)] + primals),
                  lambda b, j: b.call(grad, [b.add(start, j)] + primals + shadow_params))
    d.b.ret_void()
    register(d.fn, Sweep("rev", row, step, k, len(args), grad, len(shadows)))
    cx.rb.call(d.fn, _sweep_operands(cx.rb, inst, row, cx.primal)
               + [cx.avail(s) for s in shadows] + [cx.avail(kept)])
