"""Forward mode: a function that computes the primal and its tangents in one pass.

The derivative of ``f`` is a copy of ``f`` (same blocks, same instructions, same names) in which
every varied value ``v`` (see :mod:`pyzyme.analysis.activity`) is followed by the code of its
derivative ``v'``: a tangent for a float, a shadow for a pointer (the same address computed from
the shadow base, so loads and stores through it read and write tangents). With batch width N,
each value has N derivatives, one per lane.

Instruction families have their handlers here (arithmetic through the rule table,
phi/select/aggregates structurally), in :mod:`pyzyme.diff.forward.memory` (loads, stores, stack
allocation, atomics) and, for calls, in :mod:`pyzyme.diff.calls` (by the kind of the callee's
rule row). They work on the function's :class:`~pyzyme.diff.context.ForwardContext`. What no
handler understands raises :class:`~pyzyme.UnsupportedError` naming the instruction and the
function: a derivative is never silently zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from pyzyme.analysis.activity import analyze_activity, can_carry_derivative, contains_type
from pyzyme.analysis.cfg import reverse_post_order
from pyzyme.analysis.finite import nonfinite_values
from pyzyme.analysis.int_address import address_source, replay_address
from pyzyme.analysis.type_analysis import analyze_types
from pyzyme import naming
from pyzyme.diff.calls import dispatch as calls
from pyzyme.diff.context import ForwardContext
from pyzyme.diff.emit import Emitter, derivative_flags, guarded
from pyzyme.diff.forward import fission, memory
from pyzyme.diff.runtime_checks import guarded_call_shadows, primal_as_shadow, runtime_values
from pyzyme.diff.signature import ExtraParam, ForwardSignature
from pyzyme.errors import TypeAnalysisError, UnsupportedError, error_context
from pyzyme.ir import instructions as I, types as T
from pyzyme.ir.debug_info import located
from pyzyme.ir.names import readable
from pyzyme.ir.opcodes import OPCODES
from pyzyme.settings import Options
from pyzyme.ir.values import Undef, Value, const_int, const_null
from pyzyme.rules import default_rules, spec
from pyzyme.rules.expr import Const as ConstExpr
from pyzyme.rules.expr import Op
from pyzyme.rules.table import RuleTable
from pyzyme.transforms import float_moves

__all__ = ["ForwardSignature", "ForwardGenerator", "ExtraParam"]


class ForwardGenerator:
    """Builds forward-mode derivatives of the functions of one module, memoized.

    Parameters
    ----------
    module
        The module holding the functions; derivatives are added to it.
    rules
        The rule table (:func:`pyzyme.rules.default_rules`).
    options
        What the derivatives are generated under (:class:`~pyzyme.settings.Options`).
    over_reverse
        The functions differentiated are reverse-mode derivatives in ``module`` whose
        arguments held constant are held constant here too (a Hessian-vector product): their
        reads of kept values marked :data:`~pyzyme.naming.CONSTANT_RELOAD` carry no tangent.
        Not so where this forward mode varies what the reverse mode held constant (a mixed
        second derivative: C's nested ``__enzyme_fwddiff`` of a gradient).
    """

    def __init__(self, module, rules: RuleTable, options: Options | None = None, *,
                 over_reverse: bool = False) -> None:
        self.module = module
        self.rules = rules
        self.options = options if options is not None else Options()
        self.over_reverse = over_reverse
        self._done: dict[tuple, object] = {}
        self._types: dict = {}            # function -> its type analysis, None where it failed
        self._type_memo: dict = {}        # what those analyses found, shared among them
        self._float_pointers: dict = {}   # function -> float_moves.float_pointers(function)

    # -- entry point -------------------------------------------------------------------
    def derivative(self, fn, sig: ForwardSignature, name: str | None = None):
        """The derivative of ``fn`` with interface ``sig`` (built once per pair)."""
        key = (fn, sig)
        done = self._done.get(key)
        if done is not None:
            return done
        with error_context("forward mode of function", readable(fn.name)):
            new = self._declare(fn, sig, name)
            self._done[key] = new  # before the body: recursive calls find it
            self._body(fn, new, sig)
        return new

    def _declare(self, fn, sig: ForwardSignature, name: str | None):
        width = sig.width
        ret = fn.function_type.ret
        if sig.return_derivative and can_carry_derivative(ret):
            ret = T.StructType([ret] * (width + 1))
        params = list(fn.function_type.params) + [p.type for p in sig.extra]
        new_name = self.module.unique_global_name(name or naming.forward_function(fn.name, width))
        new = self.module.add_function(new_name, T.FunctionType(ret, params), prefix="internal",
                                       suffix=fn.personality)
        for old_arg, new_arg in zip(fn.args, new.args):
            new_arg.name = old_arg.name
            new_arg.attrs = old_arg.attrs
        for p, new_arg in zip(sig.extra, new.args[len(fn.args):]):
            if p.of is not None:
                new_arg.name = new.unique_name(
                    naming.shadow_param(fn.args[p.of].name, p.lane, width))
                if new_arg.type.is_pointer and "noalias" in fn.args[p.of].attrs.split():
                    # A shadow aliases neither its primal nor other shadows when the primal
                    # aliases nothing (Enzyme makes the same assumption of shadow arguments).
                    new_arg.attrs = "noalias"
        return new

    # -- the body ----------------------------------------------------------------------
    def _body(self, fn, new, sig: ForwardSignature) -> None:
        if fn.is_declaration:
            raise UnsupportedError(f"{fn.ref} has no body to differentiate")
        loads = float_moves.candidates(fn)
        types = self._types_of(fn) if loads else None
        if types is not None:
            # Floats copied through integers become float copies, whose tangents are copied.
            float_moves.floats_as_floats(fn, types, loads)
        activity = analyze_activity(fn, sig.activities, self._call_policy, None,
                                    may_allocate=lambda call: calls.may_allocate(self.rules, call),
                                    constant_reloads=self.over_reverse)
        float_moves.refuse_punned_reads(fn, activity.varied)
        st = ForwardContext(self, fn, new, activity, sig.width)
        if self.options.strong_zero:
            st.nonfinite = nonfinite_values(fn, self.rules)
        st.runtime = runtime_values(fn, activity, st.where, self.options)
        if sig.exception_param is not None:
            st.exception_arg = fn.args[sig.exception_param]
        for old_arg, new_arg in zip(fn.args, new.args):
            st.values[old_arg] = new_arg
        extra_args = new.args[len(fn.args):]
        for p, new_arg in zip(sig.extra, extra_args):
            if p.of is not None and fn.args[p.of] in activity.varied:
                st.derivs.setdefault(fn.args[p.of], [None] * sig.width)[p.lane] = new_arg
        order = reverse_post_order(fn)
        reachable = set(order)
        for block in fn.blocks:
            if block in reachable:
                st.values[block] = new.append_block(block.name)
        b = st.builder
        b.position_at_end(st.values[fn.blocks[0]])
        for index, size in sig.scratch:
            arg = fn.args[index]
            if arg in activity.varied:
                slot = T.ArrayType(size, T.i8)
                st.derivs[arg] = [b.alloca(slot, align=16,
                                           name=naming.tangent(arg.name + ".discard", k,
                                                               sig.width))
                                  for k in range(sig.width)]
        for index, offsets in sig.derived:
            arg = fn.args[index]
            if arg in activity.varied:
                st.derivs[arg] = [b.gep(T.i8, new.args[index], [const_int(T.i64, off)],
                                        flags=("inbounds",),
                                        name=naming.tangent(arg.name, k, sig.width))
                                  for k, off in enumerate(offsets)]
        for block in order:
            b.position_at_end(st.values[block])
            for inst in block.instructions:
                with error_context("instruction", partial(located, inst)):
                    self._instruction(st, inst, sig)
        for old_phi, new_phi, dphis in st.phis:
            for value, block in zip(old_phi.operands, old_phi.blocks):
                if block not in reachable:
                    continue
                came = st.edges.get((block, old_phi.parent), st.values[block])
                new_phi.add_incoming(st.value(value), came)
                if dphis:
                    # The zero tangent of an inactive aggregate is made by insertvalues:
                    # they belong at the end of the incoming edge, not after the last block
                    # generated.
                    b.position_before(came.instructions[-1])
                    for lane, dphi in enumerate(dphis):
                        dphi.add_incoming(self._merged(st, old_phi, value, lane), came)
        if self.options.distribute_loops and not st.runtime:
            fission.split_tangents(new, {v for v in st.values.values()
                                         if isinstance(v, I.Instruction)})

    def reads_integers(self, fn, load: I.Load) -> bool:
        """Whether integer ``load`` of ``fn`` reads integers (a shadow mirrors them), not a
        float's bits (:func:`~pyzyme.transforms.float_moves.reads_integers`)."""
        def floats():
            if fn not in self._float_pointers:
                self._float_pointers[fn] = float_moves.float_pointers(fn)
            return self._float_pointers[fn]

        return float_moves.reads_integers(load, self._types_of(fn), floats)

    def _types_of(self, fn):
        if fn not in self._types:
            self._types[fn] = None  # a call back into fn (recursion) finds no analysis yet
            # Callees first, each from nothing, as their own derivatives will ask: fn's run
            # then meets them with trees that say more, and starts from those runs
            # (pyzyme.analysis.type_runs) instead of from nothing.
            for inst in fn.instructions():
                callee = inst.called_function if isinstance(inst, I.CallBase) else None
                if callee is not None and not callee.is_declaration:
                    self._types_of(callee)
            try:
                self._types[fn] = analyze_types(fn, {}, rules=self.rules,
                                                memo=self._type_memo)
            except TypeAnalysisError:
                self._types[fn] = None
        return self._types[fn]

    def _instruction(self, st: ForwardContext, inst: I.Instruction, sig: ForwardSignature) -> None:
        if isinstance(inst, I.Phi):
            self._phi(st, inst)
            return
        if isinstance(inst, I.Ret) and sig.return_derivative:
            self._ret(st, inst)
            return
        if isinstance(inst, I.CallBase):
            if st.runtime and any(a in st.runtime for a in inst.args):
                self._guarded_call(st, inst)
                return
            calls.forward_mode(st, inst)
            return
        new = st.clone(inst)
        handler = _HANDLERS.get(inst.opcode)
        if handler is not None:
            handler(self, st, inst, new)
        elif inst in st.activity.varied or self._has_varied_operand(st, inst):
            raise UnsupportedError(f"no derivative for {inst.opcode} in {st.where}",
                                   hint="this instruction has an active operand; please report it")

    # -- helpers shared by the handlers ------------------------------------------------
    def _has_varied_operand(self, st: ForwardContext, inst: I.Instruction) -> bool:
        return any(op in st.activity.varied for op in inst.operands)

    def _merged(self, st: ForwardContext, inst: I.Instruction, value: Value, lane: int) -> Value:
        """The derivative of operand ``value`` of ``inst``: with runtime activity, a pointer
        without a shadow merged into ``inst`` is its own shadow (see
        :mod:`pyzyme.diff.runtime_checks`)."""
        if inst in st.runtime and value not in st.derivs and \
                contains_type(value.type, lambda t: t.is_pointer):
            return primal_as_shadow(st.where, st.value(value), value.type)
        return st.derivative(value, lane)

    def _guarded_call(self, st: ForwardContext, inst: I.CallBase) -> None:
        """A call handed pointers whose shadow may be their primal: its derivative code sees
        null shadows where they are (see
        :func:`~pyzyme.diff.runtime_checks.guarded_call_shadows`)."""
        saved = {}
        for k in range(st.width):
            guarded = guarded_call_shadows(st.where, inst, st.runtime,
                                           lambda a: st.derivs[a][k],
                                           lambda a: st.value(a), st.builder)
            for arg, shadow in guarded.items():
                saved.setdefault(arg, st.derivs[arg])
                st.derivs[arg] = list(st.derivs[arg])
                st.derivs[arg][k] = shadow
        try:
            calls.forward_mode(st, inst)
        finally:
            st.derivs.update(saved)

    # -- structural handlers -----------------------------------------------------------
    def _phi(self, st: ForwardContext, inst: I.Phi) -> None:
        b = st.builder
        new = b.phi(inst.type, inst.flags, name=inst.name)
        st.values[inst] = new
        dphis = None
        if inst in st.activity.varied:
            dphis = [b.phi(inst.type, derivative_flags(inst.flags),
                           name=naming.tangent(inst.name, k, st.width))
                     for k in range(st.width)]
            st.derivs[inst] = dphis
        st.phis.append((inst, new, dphis))

    def _ret(self, st: ForwardContext, inst: I.Ret) -> None:
        b = st.builder
        value = inst.value
        if value is None or not can_carry_derivative(value.type):
            st.clone(inst)
            return
        ty = st.new.function_type.ret
        agg = b.insertvalue(Undef(ty), st.value(value), 0)
        for k in range(st.width):
            agg = b.insertvalue(agg, st.derivative(value, k), k + 1)
        b.ret(agg)

    def _select(self, st: ForwardContext, inst: I.Instruction, new: I.Instruction) -> None:
        if inst not in st.activity.varied:
            return
        cond = new.operands[0]
        _, a, c = inst.operands
        st.lanes(inst, lambda k, name: st.builder.select(
            cond, self._merged(st, inst, a, k), self._merged(st, inst, c, k),
            derivative_flags(inst.flags), name=name))

    def _zero_test(self, st: ForwardContext, inst: I.Instruction, new: I.Instruction) -> None:
        """A comparison carries no derivative, but a reverse sweep's test that an adjoint is
        zero, whereupon it skips a loop's run (:mod:`pyzyme.diff.reverse.quiet`), holds here
        only where the adjoint's tangent is zero too: the run adds the tangent times its
        partials (forward mode over reverse, hvp)."""
        value = inst.operands[0]
        if value not in st.activity.varied or \
                not any(kind == naming.ZERO_ADJOINT_TEST for kind, _ in inst.metadata):
            return
        b, test = st.builder, new
        for k in range(st.width):
            test = b.and_(test, b.fcmp("oeq", st.derivative(value, k), const_null(value.type)))
        st.values[inst] = test

    def _same_op(self, st: ForwardContext, inst: I.Instruction, new: I.Instruction) -> None:
        """Derivative = the same instruction on the derivatives of its carrying operands
        (freeze, getelementptr, aggregates and vectors: all linear, or addressing)."""
        if inst not in st.activity.varied:
            return

        def make(lane: int, name: str) -> Value:
            clone = new.copy_with([self._merged(st, inst, old_op, lane)
                                   if can_carry_derivative(old_op.type) else new_op
                                   for old_op, new_op in zip(inst.operands, new.operands)])
            clone.flags = derivative_flags(new.flags)
            return st.builder.insert(clone, name)

        st.lanes(inst, make)

    def _inttoptr(self, st: ForwardContext, inst: I.Instruction, new: I.Instruction) -> None:
        """An address rounded through an integer: the same arithmetic on the shadow of the
        pointer it comes from (:mod:`pyzyme.analysis.int_address`)."""
        if inst not in st.activity.varied:
            return
        source = address_source(inst.operands[0])

        def make(lane: int, name: str) -> Value:
            b = st.builder
            address = replay_address(b, inst.operands[0], st.derivs[source][lane], st.value)
            return b.inttoptr(address, inst.type, name)

        st.lanes(inst, make)

    def partials(self, st: ForwardContext, inst: I.Instruction, new: I.Instruction,
                 row: spec.Partials, operands: Sequence[Value], new_operands: Sequence[Value],
                 flags: Sequence[str] = ()) -> None:
        """dy = sum_i partial_i * dx_i over the operands that carry derivatives (the handler
        API's :meth:`~pyzyme.diff.context.ForwardContext.partials`)."""
        if inst not in st.activity.varied:
            return
        result = new
        ty = inst.type
        if row.result_field is not None:
            ty = ty.elements[row.result_field]
            result = st.builder.extractvalue(new, row.result_field)
        em = Emitter(st.builder, self.module, ty, flags)
        terms = []
        for i, (p, old) in enumerate(zip(row.partials, operands)):
            if p is None or old not in st.activity.varied:
                continue
            if _is_reciprocal(p):
                # partial = 1 / d: the term is dx / d, one division instead of two operations
                # (LLVM may not rewrite (1 / d) * dx itself without the arcp flag).
                terms.append((p, em.expr(p.operands[1], new_operands, result), old))
                continue
            scale = None if isinstance(p, ConstExpr) else em.expr(
                p, new_operands, result, naming.partial(inst.name, i))
            twin = next((k for k, (q, s, o) in enumerate(terms)
                         if s is scale and o is old and scale is not None
                         and not _is_reciprocal(q)), None)
            if twin is not None:
                # x * x: (x + x) * dx, not x * dx + x * dx. The same value (doubling is
                # exact), but the doubling is off the tangent's dependence chain, which in a
                # loop (repeated squaring) is then one multiply long instead of two operations.
                terms[twin] = (p, st.builder.fadd(scale, scale, em.flags), old)
                continue
            terms.append((p, scale, old))

        # A term whose tangent comes round a loop to this instruction (r in r = r * a) goes
        # last, into a multiply-add's chained operand: then the recurrence is one operation.
        terms.sort(key=lambda term: _feeds_back(inst, term[2]))

        def make(lane: int, name: str) -> Value:
            total = None
            for p, scale, old in terms:
                dx = st.derivs[old][lane]
                guard = guarded(p, operands, inst, st.nonfinite)
                if _is_reciprocal(p):
                    term = st.builder.fdiv(dx, scale, em.flags)
                elif scale is None:
                    term = dx if p.value == 1.0 else (
                        st.builder.fneg(dx, em.flags) if p.value == -1.0
                        else st.builder.fmul(em.constant(p.value), dx, em.flags))
                elif total is not None:
                    # product rule sums as fused multiply-adds (LLVM fuses where the CPU
                    # has FMA): one rounding fewer, and one operation on a loop's tangent chain
                    summed = em.fmuladd(scale, dx, total)
                    total = em.unless_zero(dx, summed, total, partial=scale) if guard \
                        else summed
                    continue
                else:
                    term = st.builder.fmul(scale, dx, em.flags)
                if guard:
                    term = em.unless_zero(dx, term,
                                          partial=None if _is_reciprocal(p) or scale is None
                                          else scale)
                total = term if total is None else st.builder.fadd(total, term, em.flags)
            if total is None:
                total = em.constant(0.0)
            if row.result_field is not None:
                return st.builder.insertvalue(new, total, row.result_field, name=name)
            if name and total.name == "" and isinstance(total, I.Instruction):
                total.name = st.new.unique_name(name)
            return total

        st.lanes(inst, make)

    def _arith(self, st: ForwardContext, inst: I.Instruction, new: I.Instruction) -> None:
        row = self.rules.lookup(inst.opcode, "opcode")
        if isinstance(row, spec.Partials):
            self.partials(st, inst, new, row, inst.operands, new.operands, inst.flags)
        elif isinstance(row, spec.Linear):
            x = inst.operands[0]
            if inst.opcode == "bitcast" and inst in st.activity.varied and \
                    x.type.scalar.is_float and inst.type.scalar.is_float and \
                    x.type.scalar != inst.type.scalar:
                # <2 x double> read as <4 x float>: other numbers, not a linear map of them
                raise UnsupportedError(f"{st.where} reinterprets {x.type} as {inst.type}; its "
                                       f"tangent is not the same bits: {inst}")
            self._same_op(st, inst, new)
        elif inst in st.activity.varied:
            raise UnsupportedError(f"no derivative rule for {inst.opcode} in {st.where}")

    # -- calls: activity of results ----------------------------------------------------
    def _call_policy(self, call: I.CallBase, is_varied) -> bool:
        return calls.call_result_varied(self.rules, call, is_varied)


def _feeds_back(inst: I.Instruction, operand: Value, depth: int = 4) -> bool:
    """Whether ``operand`` is a phi that ``inst``'s result reaches within ``depth`` uses
    (through selects, phis and casts): a loop-carried recurrence through ``inst``."""
    if not isinstance(operand, I.Phi):
        return False
    frontier, seen = [inst], set()
    for _ in range(depth):
        nxt = []
        for v in frontier:
            for user in v.users:
                if user is operand:
                    return True
                if user not in seen and (isinstance(user, I.Phi) or user.opcode in (
                        "select", "fneg", "fpext", "fptrunc", "bitcast")):
                    seen.add(user)
                    nxt.append(user)
        frontier = nxt
    return False


def _is_reciprocal(p) -> bool:
    """Whether partial ``p`` is ``1 / something``."""
    return (isinstance(p, Op) and p.name == "fdiv" and isinstance(p.operands[0], ConstExpr)
            and p.operands[0].value == 1.0)


# Opcodes whose rule rows give partials or a linear map (read by _arith); addrspacecast, which
# has one, is the same cast on the tangent pointer (_same_op, below).
_HANDLERS = {name: ForwardGenerator._arith for row in default_rules().rows()
             if row.kind == "opcode" and isinstance(row, (spec.Partials, spec.Linear))
             for name in row.names}
_HANDLERS.update({
    "select": ForwardGenerator._select,
    "freeze": ForwardGenerator._same_op,
    "getelementptr": ForwardGenerator._same_op,
    "addrspacecast": ForwardGenerator._same_op,
    "extractvalue": ForwardGenerator._same_op,
    "insertvalue": ForwardGenerator._same_op,
    "extractelement": ForwardGenerator._same_op,
    "insertelement": ForwardGenerator._same_op,
    "shufflevector": ForwardGenerator._same_op,
    "inttoptr": ForwardGenerator._inttoptr,
    "fcmp": ForwardGenerator._zero_test,
})
# Instructions that never carry derivatives and need nothing but their primal copy: those their
# rule rows declare inactive (integer arithmetic and casts, comparisons), control flow and
# exception handling, fences, and va_arg (whose result activity analysis never varies).
for _op in [name for row in default_rules().rows() if row.kind == "opcode"
            and isinstance(row, spec.Inactive) for name in row.names] + [
        op for op, facts in OPCODES.items() if facts.group in ("control", "eh")] + [
        "fence", "va_arg"]:
    _HANDLERS.setdefault(_op, lambda self, st, inst, new: None)


def _memory(handler):
    """A handler of :mod:`pyzyme.diff.forward.memory` (which takes the context alone) as an
    entry of ``_HANDLERS``."""
    return lambda self, st, inst, new: handler(st, inst, new)


_HANDLERS.update({op: _memory(getattr(memory, op))
                  for op in ("load", "store", "alloca", "atomicrmw", "cmpxchg")})
