"""Fixed-point iterations (:class:`~pyzyme.rules.spec.FixedPoint`), both modes.

A fixed-point iteration is a call ``fp(step, reduction, max_iters, control, k, r, states...,
regions..., args...)`` that runs ``i = 0; while (step(i++, args...));``: the step maps the
state ``u`` (the ``k`` states, ``pointer, bytes, element bytes`` triples) to ``F(u, p)`` until
it stops changing. Its derivatives do not follow the iterations: they depend on the fixed point
``u* = F(u*, p)`` alone (the two-phase method of Christianson, 1994), so each mode runs the
loop as it is and then iterates the derivative of *one* step, taken at ``u*``, to convergence:

- forward mode (``fwd``): the tangent ``s <- F_u s + F_p pdot`` from ``s = 0``, by the step's
  forward derivative (the tangent of the initial guess has no effect);
- reverse mode: the forward sweep (``aug``) runs the loop and keeps a snapshot of the states
  and regions it ends in; the reverse sweep (``rev``) runs the step's combined derivative
  (its forward and reverse passes together) from that snapshot, again and again. The adjoint
  ``w = ubar + F_u^T w`` is summed as its Neumann series in place: the first round takes the
  state's adjoint ``ubar`` (and the adjoints of what the step writes besides), each round turns
  the state's adjoint ``a`` into ``F_u^T a`` and adds ``F_p^T a`` into the parameters'
  adjoints, so after the rounds those hold ``F_p^T w``, whatever their size, with no copy of
  them. The state's adjoint is then zero (the fixed point does not depend on the guess), and
  the memory the snapshot covers is put back as the reverse sweep found it.

The rounds stop as Enzyme's ``<enzyme/fixed_point.h>`` states: each round's measure is the
squared 2-norm of the state's update (the change of its tangent; the new adjoint term); without
a control function they stop once it falls below ``reduction`` times its value after the first
round, or grows after the fifth, or after ``max_iters`` rounds (0: no limit). A control
function ``int control(double *cumul, double *reduction)`` (Tapenade's protocol) is asked
before the first round with ``*cumul = -1`` and after each with the measure, and says whether
to go on; the limit still holds.
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.analysis.activity import Activity
from pyzyme.diff.calls.step_loops import Driver, i64, step_activities, step_function
from pyzyme.diff.memory_calls import free, malloc, memcpy, memset_zero
from pyzyme.diff.signature import ForwardSignature, ReverseSignature
from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import Function
from pyzyme.ir.values import Value, const_float, const_int, const_null
from pyzyme.rules import spec

__all__ = ["varied", "forward_mode", "augmented", "reverse", "primal_driver"]

_WHAT = "a fixed-point iteration"
_CONTROL = T.FunctionType(T.i32, [T.ptr, T.ptr])
_ELEMENT = {8: T.double, 4: T.float}


def varied(row, inst: I.CallBase, is_varied) -> bool:
    """A fixed-point iteration returns nothing; its steps write through its arguments."""
    return False


def _step(cx, inst: I.CallBase, row: spec.FixedPoint) -> Function:
    step = step_function(cx, inst, row.step, _WHAT)
    if not step.function_type.ret.is_int:
        raise UnsupportedError(f"{cx.where} runs {_WHAT} whose step {step.ref} returns "
                               f"{step.function_type.ret}",
                               hint="make the step return whether to iterate again (an int)")
    if getattr(cx, "width", 1) != 1:
        raise UnsupportedError(f"{cx.where} runs {_WHAT} in vector mode (width {cx.width}); "
                               f"pyzyme iterates one derivative at a time",
                               hint="differentiate one direction per call")
    return step


def primal_driver(module, step: Function, types: list) -> Function:
    """``i64 primal(args...)`` (``args`` of ``types``): the loop as it is, ``i = 0;
    while (step(i++, args...));``; it returns the number of steps run."""
    d = Driver(module, naming.fixed_point_driver(step.name, "primal"), T.i64,
               [(f"a{k}", t) for k, t in enumerate(types)])
    d.b.ret(_run(d, step, list(d.fn.args)))
    return d.fn


def _run(d: Driver, step: Function, args: list) -> Value:
    """The loop at ``d.b``: the number of steps it ran."""
    b, fn = d.b, d.fn
    head = b.block
    loop, done = fn.append_block("iterate"), fn.append_block("converged")
    b.br(loop)
    b.position_at_end(loop)
    i = b.phi(T.i64, name="i")
    i.add_incoming(i64(0), head)
    again = b.call(step, [i] + args)
    nxt = b.add(i, i64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp("ne", again, const_int(again.type, 0)), loop, done)
    b.position_at_end(done)
    return nxt


class _Operands:
    """A driver's parameters: the stopping rule's, the states', the regions', the step's."""

    def __init__(self, inst, row: spec.FixedPoint) -> None:
        self.elements = [int(e.value) for _, _, e in row.state_triples(inst)]
        self.nregions = len(row.region_pairs(inst))
        self.nargs = len(row.step_args(inst))
        self.arg_types = [a.type for a in row.step_args(inst)]

    def params(self) -> list:
        return ([("reduction", T.double), ("max_iters", T.i64), ("control", T.ptr)]
                + [p for k in range(len(self.elements))
                   for p in ((f"u{k}", T.ptr), (f"ub{k}", T.i64))]
                + [p for k in range(self.nregions) for p in ((f"r{k}", T.ptr), (f"rb{k}", T.i64))]
                + [(f"a{k}", t) for k, t in enumerate(self.arg_types)])

    @staticmethod
    def values(inst, row: spec.FixedPoint, at) -> list:
        """The call's operands for :meth:`params`, ``at`` mapping each where the call is."""
        return ([at(inst.args[row.reduction]), at(inst.args[row.max_iters]),
                 at(inst.args[row.control])]
                + [at(v) for p, n, _ in row.state_triples(inst) for v in (p, n)]
                + [at(v) for pair in row.region_pairs(inst) for v in pair]
                + [at(a) for a in row.step_args(inst)])

    def unpack(self, d: Driver):
        """``(reduction, max_iters, control, states, snapshot pairs, step args, rest)``:
        ``states`` are ``(pointer, bytes, element type)``, the snapshot covers the states and
        the regions, ``rest`` is what follows the step's arguments."""
        args = list(d.fn.args)
        red, maxit, ctrl = args[:3]
        k = len(self.elements)
        states = [(args[3 + 2 * s], args[4 + 2 * s], _ELEMENT[e])
                  for s, e in enumerate(self.elements)]
        first = 3 + 2 * k
        pairs = [(p, n) for p, n, _ in states] + [
            (args[first + 2 * r], args[first + 2 * r + 1]) for r in range(self.nregions)]
        first += 2 * self.nregions
        return (red, maxit, ctrl, states, pairs, args[first:first + self.nargs],
                args[first + self.nargs:])


def _total(b, pairs) -> Value:
    total = i64(0)
    for _, n in pairs:
        total = b.add(total, n)
    return total


def _copy(d: Driver, buffer: Value, pairs, into_memory: bool) -> None:
    """The memory of ``pairs`` from ``buffer`` (``into_memory``), or into it."""
    b, offset = d.b, i64(0)
    for p, n in pairs:
        at = b.gep(T.i8, buffer, [offset])
        memcpy(d.module, b, *((p, at) if into_memory else (at, p)), n)
        offset = b.add(offset, n)


def _norm(d: Driver, states, shadows, olds=None) -> Value:
    """The squared 2-norm of the states' ``shadows`` (less ``olds``, where given)."""
    b = d.b
    acc = b.alloca(T.double, name="norm")
    b.store(const_float(T.double, 0.0), acc, 8)
    for s, ((_, nbytes, elt), shadow) in enumerate(zip(states, shadows)):
        size = 8 if elt == T.double else 4
        count = b.sdiv(nbytes, i64(size))

        def body(b, j, shadow=shadow, elt=elt, s=s):
            x = b.load(elt, b.gep(elt, shadow, [j]), size)
            if olds is not None:
                x = b.fsub(x, b.load(elt, b.gep(elt, olds[s], [j]), size))
            if elt != T.double:
                x = b.fpext(x, T.double)
            b.store(b.fadd(b.load(T.double, acc, 8), b.fmul(x, x)), acc, 8)
        d.loop(i64(0), count, body)
    return d.b.load(T.double, acc, 8, name="measure")


def _rounds(d: Driver, red: Value, maxit: Value, ctrl: Value, round_body) -> None:
    """Rounds of ``round_body(b)`` (which returns the round's measure) until the stopping
    rule (the module docstring's) says enough."""
    b, fn = d.b, d.fn
    cumul, reduction = b.alloca(T.double, name="cumul"), b.alloca(T.double, name="reduction")
    ref, prev, count = (b.alloca(T.double, name="first"), b.alloca(T.double, name="previous"),
                        b.alloca(T.i64, name="rounds"))
    b.store(red, reduction, 8)
    b.store(i64(0), count, 8)
    controlled = b.icmp("ne", ctrl, const_null(T.ptr), name="controlled")
    ask_first, loop, done = (fn.append_block("ask.first"), fn.append_block("round"),
                             fn.append_block("rounds.done"))
    b.cbranch(controlled, ask_first, loop)
    b.position_at_end(ask_first)
    b.store(const_float(T.double, -1.0), cumul, 8)
    start = b.call(ctrl, [cumul, reduction], function_type=_CONTROL)
    b.cbranch(b.icmp("ne", start, const_int(T.i32, 0)), loop, done)

    b.position_at_end(loop)
    measure = round_body(b)
    b = d.b
    k = b.add(b.load(T.i64, count, 8), i64(1), name="k")
    b.store(k, count, 8)
    ask, builtin, latch = (fn.append_block("ask"), fn.append_block("builtin"),
                           fn.append_block("decide"))
    b.cbranch(controlled, ask, builtin)
    b.position_at_end(ask)
    b.store(measure, cumul, 8)
    asked = b.icmp("ne", b.call(ctrl, [cumul, reduction], function_type=_CONTROL),
                   const_int(T.i32, 0))
    b.br(latch)
    b.position_at_end(builtin)
    first = b.icmp("eq", k, i64(1))
    base = b.select(first, measure, b.load(T.double, ref, 8))
    b.store(base, ref, 8)
    grew = b.and_(b.icmp("sgt", k, i64(5)),
                  b.fcmp("ogt", measure, b.load(T.double, prev, 8)))
    later = b.and_(b.fcmp("oge", measure, b.fmul(red, base)), b.xor(grew, const_int(T.i1, 1)))
    own = b.select(first, b.fcmp("ogt", measure, const_float(T.double, 0.0)), later)
    b.br(latch)
    b.position_at_end(latch)
    go = b.phi(T.i1, name="go")
    go.add_incoming(asked, ask)
    go.add_incoming(own, builtin)
    b.store(measure, prev, 8)
    within = b.or_(b.icmp("sle", maxit, i64(0)), b.icmp("slt", k, maxit))
    b.cbranch(b.and_(go, within), loop, done)
    b.position_at_end(done)


# -- forward mode --------------------------------------------------------------------------
def forward_mode(cx, inst: I.CallBase, row: spec.FixedPoint) -> None:
    """The loop, then the tangent of one step iterated at the state it ended in."""
    step = _step(cx, inst, row)
    b = cx.builder
    args = row.step_args(inst)
    if not any(a in cx.activity.varied for a in args):
        b.call(primal_driver(cx.module, step, [a.type for a in args]),
               [cx.value(a) for a in args])
        return
    _check_states(cx, inst, row, step)
    acts = step_activities(cx, args, step, False, _WHAT)
    dfn = cx.callee_derivative(step, ForwardSignature.standard(step, acts, cx.width))
    tangents = [cx.derivs[a][0] for a, act in zip(args, acts[1:]) if act is not Activity.CONST]
    state_tangents = [cx.derivs[p][0] for p, _, _ in row.state_triples(inst)]
    ops = _Operands(inst, row)
    d = Driver(cx.module, naming.fixed_point_driver(step.name, "fwd"), T.void,
               ops.params() + [(f"d{k}", t.type) for k, t in enumerate(tangents)]
               + [(f"du{k}", t.type) for k, t in enumerate(state_tangents)])
    red, maxit, ctrl, states, pairs, primals, rest = ops.unpack(d)
    params, touts = rest[:len(tangents)], rest[len(tangents):]
    db = d.b
    last = db.sub(_run(d, step, primals), i64(1), name="last")
    snap = malloc(d.module, d.b, _total(d.b, pairs), name="converged")
    _copy(d, snap, pairs, into_memory=False)
    olds = [malloc(d.module, d.b, n, name="previous") for _, n, _ in states]
    for t, (_, n, _) in zip(touts, states):
        memset_zero(d.module, d.b, t, n)

    def round_body(b):
        _copy(d, snap, pairs, into_memory=True)
        for old, t, (_, n, _) in zip(olds, touts, states):
            memcpy(d.module, d.b, old, t, n)
        d.b.call(dfn, [last] + primals + params)
        return _norm(d, states, touts, olds)

    _rounds(d, red, maxit, ctrl, round_body)
    _copy(d, snap, pairs, into_memory=True)
    for buffer in [snap, *olds]:
        free(d.module, d.b, buffer)
    d.b.ret_void()
    b.call(d.fn, _Operands.values(inst, row, cx.value) + tangents + state_tangents)


def _check_states(cx, inst, row, step) -> None:
    for k, (p, _, _) in enumerate(row.state_triples(inst)):
        if p not in cx.activity.varied:
            raise UnsupportedError(
                f"{cx.where} runs {_WHAT} ({step.ref}) whose state {k + 1} carries no "
                f"derivative while the step's arguments do",
                hint="pass the state with a shadow (enzyme_dup), or mark it enzyme_const "
                     "with the arguments")


# -- reverse mode --------------------------------------------------------------------------
def augmented(cx, inst: I.CallBase, row: spec.FixedPoint) -> None:
    """The forward sweep: the loop, and a snapshot of the states and regions it ends in
    (after the index of its last step), kept for :func:`reverse`."""
    step = _step(cx, inst, row)
    args = row.step_args(inst)
    b = cx.fb
    if not any(a in cx.activity.varied for a in args):
        b.call(primal_driver(cx.module, step, [a.type for a in args]),
               [cx.fwd_value(a) for a in args])
        return
    _check_states(cx, inst, row, step)
    acts = step_activities(cx, args, step, True, _WHAT)
    ops = _Operands(inst, row)
    d = Driver(cx.module, naming.fixed_point_driver(step.name, "aug"), T.ptr, ops.params())
    _, _, _, _, pairs, primals, _ = ops.unpack(d)
    last = d.b.sub(_run(d, step, primals), i64(1), name="last")
    snap = malloc(d.module, d.b, d.b.add(_total(d.b, pairs), i64(8)), name="converged")
    d.b.store(last, snap, 8)
    _copy(d, d.b.gep(T.i8, snap, [i64(8)]), pairs, into_memory=False)
    d.b.ret(snap)
    kept = b.call(d.fn, _Operands.values(inst, row, cx.fwd_value), name="fixed.point")
    shadows = [cx.fwd_shadow(a) for a, act in zip(args, acts[1:])
               if act is Activity.DUPLICATED]
    state_shadows = [cx.fwd_shadow(p) for p, _, _ in row.state_triples(inst)]
    cx.rule_calls[inst] = (kept, acts, shadows, state_shadows)


def reverse(cx, inst: I.CallBase, row: spec.FixedPoint) -> None:
    """The reverse sweep: the step's combined derivative at the converged state, round after
    round (the module docstring); then the state's adjoint zeroed and the memory the snapshot
    covers put back."""
    if inst not in cx.rule_calls:
        return
    kept, acts, shadows, state_shadows = cx.rule_calls[inst]
    step = _step(cx, inst, row)
    cx.seed_callee_types(step, [i for i, act in enumerate(acts) if act is Activity.DUPLICATED])
    grad = cx.callee_derivative(step, ReverseSignature(
        tuple(acts), shared_adjoints=cx.sig.shared_adjoints))
    ops = _Operands(inst, row)
    d = Driver(cx.module, naming.fixed_point_driver(step.name, "rev"), T.void,
               ops.params() + [(f"s{k}", s.type) for k, s in enumerate(shadows)]
               + [(f"su{k}", s.type) for k, s in enumerate(state_shadows)]
               + [("converged", T.ptr)])
    red, maxit, ctrl, states, pairs, primals, rest = ops.unpack(d)
    shadow_params = rest[:len(shadows)]
    adjoints = rest[len(shadows):len(shadows) + len(state_shadows)]
    snap = rest[-1]
    found = malloc(d.module, d.b, _total(d.b, pairs), name="found")
    _copy(d, found, pairs, into_memory=False)
    last = d.b.load(T.i64, snap, 8, name="last")
    converged = d.b.gep(T.i8, snap, [i64(8)])

    def round_body(b):
        _copy(d, converged, pairs, into_memory=True)
        d.b.call(grad, [last] + primals + shadow_params)
        return _norm(d, states, adjoints)

    _rounds(d, red, maxit, ctrl, round_body)
    for a, (_, n, _) in zip(adjoints, states):
        memset_zero(d.module, d.b, a, n)
    _copy(d, found, pairs, into_memory=True)
    free(d.module, d.b, found)
    free(d.module, d.b, snap)
    d.b.ret_void()
    cx.rb.call(d.fn, _Operands.values(inst, row, cx.primal)
               + [cx.avail(s) for s in shadows] + [cx.avail(s) for s in state_shadows]
               + [cx.avail(kept)])
