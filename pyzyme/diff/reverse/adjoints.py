"""Adjoints: the slots that accumulate them, and each instruction's adjoint code, from the
same rule rows forward mode uses (``x_bar += partial * y_bar``).

A mixin of :class:`~pyzyme.diff.reverse.generator.ReverseGenerator`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyzyme import naming
from pyzyme.diff.emit import Emitter, guarded, math_callees
from pyzyme.diff.calls import dispatch as calls
from pyzyme.diff.context import ReverseContext
from pyzyme.diff.leaves import has_float
from pyzyme.diff.memory_calls import add_leaves
from pyzyme.diff.reverse.increments import increments
from pyzyme.diff.runtime_checks import inactive_here
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import (Argument, ConstantAggregate, Value, const_c_string, const_int,
                              const_null)
from pyzyme.rules import default_rules, spec
from pyzyme.rules.expr import Arg
from pyzyme.rules.expr import Const as ConstExpr
from pyzyme.rules.expr import Op

__all__ = ["ReverseAdjoints"]


class ReverseAdjoints:
    """Emits adjoint code (see the module docstring)."""

    def _slot(self, st: ReverseContext, value: Value) -> I.Alloca:
        slot = st.adjoints.get(value)
        if slot is None:
            entry = st.tape.rev_entry
            slot = I.Alloca(value.type, None, None)
            slot.name = st.rev.unique_name(naming.adjoint(value.name or "v"))
            entry.insert(0, slot)
            b = IRBuilder()
            b.position_before(entry.terminator) if entry.terminator is not None \
                else b.position_at_end(entry)
            b.store(const_null(value.type), slot)
            st.adjoints[value] = slot
        return slot

    def accumulate(self, st: ReverseContext, value: Value, delta: Value) -> None:
        """``value_bar += delta``, for an active primal value."""
        if not st.active(value) or not isinstance(value, (I.Instruction, Argument)):
            return
        slot = self._slot(st, value)
        b = st.rb
        b.store(add_leaves(b, value.type, b.load(value.type, slot), delta, self.sum_flags), slot)

    def consume(self, st: ReverseContext, value: Value) -> Value:
        """``value_bar``, read and reset to zero (the value's uses are all done)."""
        slot = self._slot(st, value)
        d = st.rb.load(value.type, slot, name=naming.adjoint(value.name))
        st.rb.store(const_null(value.type), slot)
        return d

    # -- reverse sweep: instructions ---------------------------------------------------
    def reverse_instruction(self, st: ReverseContext, inst: I.Instruction) -> None:
        """The adjoint code of ``inst`` at the reverse sweep's builder (calls through
        :mod:`pyzyme.diff.calls.dispatch`)."""
        if isinstance(inst, I.CallBase):
            calls.reverse_sweep(st, inst)
            return
        op = inst.opcode
        if op == "store":
            self._reverse_store(st, inst)
            return
        if not st.active(inst) or inst in st.increment_parts:
            return
        handler = _ADJOINTS.get(op)
        if handler is None:
            raise UnsupportedError(f"no reverse-mode derivative for {op} in {st.where}",
                                   hint="this instruction has an active operand; please "
                                        "report it")
        handler(self, st, inst)

    def _reverse_load(self, st: ReverseContext, inst: I.Load) -> None:
        d = self.consume(st, inst)
        pointer = st.shadow(inst.pointer)
        b = st.rb
        if st.sig.shared_adjoints and not st.private(inst.pointer):
            # Other threads run other iterations of the same parallel loop and may add into
            # the same shadow memory (a stencil's neighbours, a scatter).
            if inst.pointer in st.runtime:
                d = b.select(self._inactive_here(st, inst.pointer), const_null(inst.type), d)
            st.shared_add(inst.pointer, pointer, inst.type, d, inst.align)
            return
        pointer = self.carried_pointer(st, inst) or pointer
        old = b.load(inst.type, pointer, inst.align)
        new = add_leaves(b, inst.type, old, d, self.sum_flags)
        if inst.pointer in st.runtime:  # no adjoint goes into memory without a shadow
            new = b.select(self._inactive_here(st, inst.pointer), old, new)
        b.store(new, pointer, inst.align)

    def _reverse_store(self, st: ReverseContext, inst: I.Store) -> None:
        value, pointer = inst.operands
        if pointer not in st.shadows or not has_float(value.type):
            return
        if self._reverse_increment(st, inst):
            return
        b = st.rb
        shadow = self.carried_pointer(st, inst) or st.shadow(pointer)
        if pointer in st.runtime:
            self._reverse_runtime_store(st, inst, shadow)
        elif st.active(value):
            d = b.load(value.type, shadow, inst.align, name=naming.adjoint(value.name))
            b.store(const_null(value.type), shadow, inst.align)
            self.accumulate(st, value, d)
        else:
            b.store(const_null(value.type), shadow, inst.align)

    def _reverse_increment(self, st: ReverseContext, inst: I.Store) -> bool:
        """``a[k] += w`` (:mod:`pyzyme.diff.reverse.increments`): ``w_bar += a_bar[k]``,
        which leaves ``a_bar[k]`` as it was; its load and add get no adjoint code. False
        where the cell's shadow may be its primal, or a loop carries the cell in a register
        (:mod:`pyzyme.diff.reverse.carried`): the three instructions' adjoints then."""
        if st.increments is None:
            st.increments = increments(st.old)
        inc = st.increments.get(inst)
        pointer = inst.pointer
        if inc is None or pointer in st.runtime or self._carrying(st, inst) or \
                self._carrying(st, inc.load):
            return False
        st.increment_parts.update((inc.load, inc.add))
        if st.active(inc.addend):
            b = st.rb
            d = b.load(inst.value.type, st.shadow(pointer), inst.align,
                       name=naming.adjoint(inc.add.name))
            self.accumulate(st, inc.addend, d if inc.sign > 0 else b.fneg(d))
        return True

    def _inactive_here(self, st: ReverseContext, pointer: Value) -> Value:
        """In the reverse sweep: whether ``pointer``'s shadow is its primal."""
        return inactive_here(st.rb, st.shadow(pointer), st.primal(pointer))

    def _reverse_runtime_store(self, st: ReverseContext, inst: I.Store, shadow: Value) -> None:
        """A store through a pointer whose shadow may be its primal: where it is, the memory
        holds primal values, not adjoints; they are neither taken nor cleared."""
        value, pointer = inst.operands
        b = st.rb
        inactive = self._inactive_here(st, pointer)
        zero = const_null(value.type)
        d = b.load(value.type, shadow, inst.align, name=naming.adjoint(value.name))
        b.store(b.select(inactive, d, zero), shadow, inst.align)
        if st.active(value):
            self.accumulate(st, value, b.select(inactive, zero, d))

    def partials(self, st: ReverseContext, inst: I.Instruction, row: spec.Partials,
                 operands: Sequence[Value], flags: Sequence[str] = ()) -> None:
        """``operand_i_bar += partial_i * inst_bar`` over the active operands."""
        b = st.rb
        d = self.consume(st, inst)
        ty = inst.type
        if row.result_field is not None:
            ty = ty.elements[row.result_field]
            d = b.extractvalue(d, row.result_field)
        if ty in (T.double, T.float):
            self._log_gradient(st, inst, d)
        em = Emitter(b, self.module, ty, flags,
                     computed=_Computed(st, inst, operands, ty) if row.result_field is None
                     else None)
        args = _Lazy(lambda i: st.primal(operands[i]))
        twice = _squared(row.partials, operands)
        for i, (p, operand) in enumerate(zip(row.partials, operands)):
            if p is None or not st.active(operand) or i in twice[1:]:
                continue
            result = None
            if "ret" in p.placeholders():
                result = st.primal(inst)
                if row.result_field is not None:
                    result = b.extractvalue(result, row.result_field)
            partial = None
            if _is_reciprocal(p):
                term = b.fdiv(d, em.expr(p.operands[1], args, result), em.flags)
            elif isinstance(p, ConstExpr):
                term = d if p.value == 1.0 else (
                    b.fneg(d, em.flags) if p.value == -1.0
                    else b.fmul(em.constant(p.value), d, em.flags))
            else:
                partial = em.expr(p, args, result, naming.partial(inst.name, i))
                # x * x: one product with the doubled seed, not two products summed
                # (LLVM makes those (x * seed) * 2): a sum of squares (a distance, a norm)
                # doubles its one seed once and pays one multiply per square.
                seed = b.fadd(d, d, em.flags) if twice else d
                term = b.fmul(partial, seed, em.flags)
            if guarded(p, operands, inst, st.nonfinite):
                term = em.unless_zero(d, term, partial=partial)
                if st.finite_watch is not None:
                    st.finite_watch.guard(term, p, inst, operands)
            self.accumulate(st, operand, term)

    def _log_gradient(self, st: ReverseContext, inst: I.Instruction, d: Value) -> None:
        """Call the module's gradient log (a :class:`~pyzyme.rules.spec.GradientLog` row:
        Enzyme's ``enzymeLogGrad``) with adjoint ``d`` of ``inst``, if it has one."""
        if self.gradient_log is None:
            return
        hook = self.module.get_function(self.gradient_log)
        if hook is None:
            return
        b, fn = st.rb, st.old
        block = inst.parent
        callee = inst.called_function if isinstance(inst, I.CallBase) else None
        strings = [self._log_text(text) for text in (
            inst.opcode, callee.name if callee is not None else "",
            self.module.source_filename or "", fn.name)]
        value = d if d.type == T.double else b.fpext(d, T.double)
        b.call(hook, [value, *strings, const_int(T.i32, fn.blocks.index(block)),
                      const_int(T.i32, block.instructions.index(inst))],
               function_type=T.FunctionType(T.void, [T.double, T.ptr, T.ptr, T.ptr, T.ptr,
                                                     T.i32, T.i32]))

    def _log_text(self, text: str):
        """A constant C string of the module holding ``text``, made once."""
        if text not in self.log_texts:
            c = const_c_string(text)
            self.log_texts[text] = self.module.add_global(
                self.module.unique_global_name("pyzyme.log.text"), c.type, c,
                is_constant=True, prefix="private unnamed_addr")
        return self.log_texts[text]

    def _arith(self, st: ReverseContext, inst: I.Instruction) -> None:
        row = self.rules.lookup(inst.opcode, "opcode")
        if isinstance(row, spec.Partials):
            self.partials(st, inst, row, inst.operands, inst.flags)
        elif isinstance(row, spec.Linear):
            x = inst.operands[0]
            d = self.consume(st, inst)
            if not st.active(x):
                return
            if inst.opcode == "bitcast" and x.type.scalar != inst.type.scalar:
                raise UnsupportedError(f"{st.where} reinterprets {x.type} as {inst.type}; "
                                       f"reverse mode cannot split the adjoint: {inst}")
            self.accumulate(st, x, st.rb.cast(row.transpose, d, x.type))
        else:
            raise UnsupportedError(f"no derivative rule for {inst.opcode} in {st.where}")

    def _select(self, st: ReverseContext, inst: I.Instruction) -> None:
        cond, a, c = inst.operands
        d = self.consume(st, inst)
        b = st.rb
        test = st.primal(cond)
        zero = const_null(inst.type)
        if st.active(a):
            self.accumulate(st, a, b.select(test, d, zero))
        if st.active(c):
            self.accumulate(st, c, b.select(test, zero, d))

    def _freeze(self, st: ReverseContext, inst: I.Instruction) -> None:
        self.accumulate(st, inst.operands[0], self.consume(st, inst))

    def _extractvalue(self, st: ReverseContext, inst: I.ExtractValue) -> None:
        agg = inst.operands[0]
        d = self.consume(st, inst)
        if st.active(agg):
            b = st.rb
            slot = self._slot(st, agg)
            whole = b.load(agg.type, slot)
            part = b.extractvalue(whole, inst.indices)
            b.store(b.insertvalue(whole, add_leaves(b, inst.type, part, d, self.sum_flags),
                                   inst.indices), slot)

    def _insertvalue(self, st: ReverseContext, inst: I.InsertValue) -> None:
        agg, element = inst.operands
        d = self.consume(st, inst)
        b = st.rb
        if st.active(element):
            self.accumulate(st, element, b.extractvalue(d, inst.indices))
        if st.active(agg):
            self.accumulate(st, agg, b.insertvalue(d, const_null(element.type), inst.indices))

    def _extractelement(self, st: ReverseContext, inst: I.Instruction) -> None:
        vec, index = inst.operands
        d = self.consume(st, inst)
        if st.active(vec):
            b = st.rb
            self.accumulate(st, vec, b.insertelement(const_null(vec.type), d,
                                                     st.primal(index)))

    def _insertelement(self, st: ReverseContext, inst: I.Instruction) -> None:
        vec, element, index = inst.operands
        d = self.consume(st, inst)
        b = st.rb
        i = st.primal(index)
        if st.active(element):
            self.accumulate(st, element, b.extractelement(d, i))
        if st.active(vec):
            self.accumulate(st, vec, b.insertelement(d, const_null(element.type), i))

    def _shufflevector(self, st: ReverseContext, inst: I.ShuffleVector) -> None:
        """Each operand lane gets the adjoints of the result lanes taken from it, summed where
        it was taken more than once (a splat); poison lanes send nothing back. Each sum is
        made of shuffles of the adjoint and zero: the k-th shuffle brings each operand lane
        its k-th result lane."""
        a, c = inst.operands[:2]
        d = self.consume(st, inst)
        lanes = inst.mask_lanes
        n = a.type.count
        b = st.rb
        zero = const_null(d.type)
        for k, operand in enumerate((a, c)):
            if not st.active(operand):
                continue
            taken: list[list[int]] = [[] for _ in range(n)]
            for j, lane in enumerate(lanes):
                if lane is not None and lane // n == k:
                    taken[lane % n].append(j)
            total = None
            for t in range(max(map(len, taken))):
                # Lanes with no t-th taker read lane 0 of the zero operand.
                mask = ConstantAggregate(T.VectorType(n, T.i32), [
                    const_int(T.i32, js[t] if t < len(js) else len(lanes)) for js in taken])
                part = b.shufflevector(d, zero, mask)
                total = part if total is None else b.fadd(total, part, self.sum_flags)
            if total is not None:
                self.accumulate(st, operand, total)



def sum_flags(options) -> tuple[str, ...]:
    """The fast-math flags of the sums that accumulate adjoints.

    Adjoints start at +0.0, and an adjoint's sign of zero carries no information: ``nsz``
    lets LLVM fold ``0.0 + d`` to ``d``. With ``options.reassociate_adjoints``, ``reassoc``
    lets it sum the contributions to one adjoint in any order, as XLA does: the reverse of a
    loop that scatters one value into many (``y[j] += a[j] * x``, vectorized) gathers many
    into one (``x_bar += a[j] * y_bar[j]``), a reduction that only vectorizes reassociated.
    The primal's own arithmetic keeps its order and flags.

    >>> from pyzyme.settings import Options
    >>> sum_flags(Options()), sum_flags(Options(reassociate_adjoints=False))
    (('reassoc', 'nsz'), ('nsz',))
    """
    return ("reassoc", "nsz") if options.reassociate_adjoints else ("nsz",)


class _Computed:
    """The forward values of math calls a partial needs that the primal made already, on the
    same operands, in the block of the instruction differentiated: ``cos(x)``'s partial is
    ``-sin(x)``, and code that takes a cosine takes the sine beside it (a rotation). Read
    from the forward sweep, where the partial would otherwise call the function again in the
    reverse sweep (on a cached operand, apart from the primal's call: nothing merges them).
    In a loop :meth:`ReverseValues.avail` may still compute it again rather than tape it, as
    it would have been; outside loops it is a value kept, not a libm call (GradBench's ba: a
    second ``sincos`` per reverse sweep)."""

    def __init__(self, st: ReverseContext, inst: I.Instruction, operands: Sequence[Value],
                 ty: T.Type) -> None:
        self._st, self._inst, self._operands, self._ty = st, inst, operands, ty

    def __call__(self, function: str, indices: list[int]) -> Value | None:
        names = math_callees(function, self._ty)
        args = [self._operands[i] for i in indices]
        block = self._inst.parent
        # The operand's users, not the block's instructions: a block of n such calls would
        # otherwise be scanned n times (constants keep no users: the block it is then).
        users = getattr(args[0], "users", None) if args else None
        for other in (users if users is not None else block.instructions):
            if isinstance(other, I.Call) and other is not self._inst \
                    and other.parent is block \
                    and other.type == self._ty and other.called_function is not None \
                    and other.called_function.name in names and list(other.args) == args:
                return self._st.primal(other)
        return None


class _Lazy:
    """A sequence whose items are computed on first use (operands a partial reads)."""

    def __init__(self, make) -> None:
        self._make = make
        self._done: dict = {}

    def __getitem__(self, i: int) -> Value:
        if i not in self._done:
            self._done[i] = self._make(i)
        return self._done[i]


def _squared(partials, operands) -> tuple[int, ...]:
    """The two positions of an operand that a product multiplies by itself (``x * x``,
    ``fma(x, x, c)``), where each one's partial is the other (so both are ``x``); else ().
    Their adjoint is ``x * (seed + seed)``: exactly ``2 * (x * seed)`` short of overflow and
    underflow (doubling is exact), where a seed of 2**1023 or more overflows first."""
    at = [i for i, p in enumerate(partials) if isinstance(p, Arg) and p.index != i
          and p.index < len(operands) and operands[p.index] is operands[i]]
    return tuple(at) if len(at) == 2 and partials[at[0]].index == at[1] else ()


def _is_reciprocal(p) -> bool:
    return (isinstance(p, Op) and p.name == "fdiv" and isinstance(p.operands[0], ConstExpr)
            and p.operands[0].value == 1.0)


# Opcodes whose rule rows give partials or a linear map (read by _arith).
_ADJOINTS = {name: ReverseAdjoints._arith for row in default_rules().rows()
             if row.kind == "opcode" and isinstance(row, (spec.Partials, spec.Linear))
             for name in row.names}
_ADJOINTS.update({
    "select": ReverseAdjoints._select,
    "freeze": ReverseAdjoints._freeze,
    "extractvalue": ReverseAdjoints._extractvalue,
    "insertvalue": ReverseAdjoints._insertvalue,
    "extractelement": ReverseAdjoints._extractelement,
    "insertelement": ReverseAdjoints._insertelement,
    "shufflevector": ReverseAdjoints._shufflevector,
    "load": ReverseAdjoints._reverse_load,
    "phi": lambda self, st, inst: None,  # on the edges, see _reverse_branch
    "getelementptr": lambda self, st, inst: None,  # pointers have shadows, not adjoints
    "alloca": lambda self, st, inst: None,
})

