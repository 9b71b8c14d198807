"""Reverse mode's forward sweep: the primal's copy, with the shadows of pointers into active
memory, loop counters, and what the reverse sweep will read back.

A mixin of :class:`~pyzyme.diff.reverse.generator.ReverseGenerator`.
"""

from __future__ import annotations

from functools import partial

from pyzyme.analysis.activity import can_carry_derivative
from pyzyme.analysis.int_address import address_source, replay_address
from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.overwrite import underlying_object
from pyzyme.analysis.type_analysis import analyze_types
from pyzyme import naming
from pyzyme.diff.emit import derivative_flags
from pyzyme.diff.calls import dispatch as calls
from pyzyme.diff.context import ReverseContext
from pyzyme.diff.leaves import has_float, has_pointer, leaves
from pyzyme.diff.memory_calls import free_function, malloc, memset_zero, zeroed_buffer
from pyzyme.diff.pointers import inactive_memory, no_shadow_error
from pyzyme.diff.reverse.inductions import counted_sum_of, shift_induction_of
from pyzyme.diff.runtime_checks import guarded_call_shadows, inactive_here, primal_as_shadow
from pyzyme.errors import TypeAnalysisError, UnsupportedError, error_context
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.debug_info import located
from pyzyme.ir.opcodes import READ_MODIFY_WRITE, STRUCTURAL
from pyzyme.ir.values import Undef, Value, const_int, const_null
from pyzyme.transforms import float_moves

__all__ = ["ForwardSweep"]

class ForwardSweep:
    """Emits the forward sweep (see the module docstring)."""

    def forward_block(self, st: ReverseContext, block) -> None:
        """The forward sweep of primal ``block``: its phis (shadows too), the iteration count
        where it heads a loop, then each instruction."""
        b = st.fb
        b.position_at_end(st.first[block])
        for phi in block.phis:
            new = b.phi(phi.type, phi.flags, name=phi.name)
            st.values[phi] = new
            shadow = None
            if phi in st.activity.varied and has_pointer(phi.type):
                shadow = b.phi(phi.type, (), name=naming.shadow(phi.name))
                st.shadows[phi] = shadow
            st.phis.append((phi, new, shadow))
        if st.finite_watch is not None and block not in st.doomed:
            for phi in block.phis:
                st.finite_watch.test(st, b, phi)
        loop = st.loops.loop_of(block)
        if loop is not None and loop.header is block:
            count = st.tape.counter(loop).fwd
            index = b.load(T.i64, count, name=naming.iteration(block.name))
            b.store(b.add(index, const_int(T.i64, 1)), count)
            st.fidx[loop] = index
            st.headers.append((loop, index, st.first[block], st.last[block]))
            for phi in block.phis:
                iv = loop.induction_of(phi)
                if iv is not None:
                    st.inductions[st.values[phi]] = (loop, iv)
                elif (shift := shift_induction_of(loop, phi)) is not None:
                    st.inductions[st.values[phi]] = (loop, shift)
                elif (summed := counted_sum_of(loop, phi)) is not None:
                    st.inductions[st.values[phi]] = (loop, summed)
            b.position_at_end(st.last[block])
        for inst in block.instructions[len(block.phis):]:
            with error_context("instruction", partial(located, inst)):
                self._forward(st, inst)
            if st.finite_watch is not None and block not in st.doomed:
                st.finite_watch.test(st, st.fb, inst)

    def forward_phis(self, st: ReverseContext) -> None:
        """The incoming values of the forward sweep's phis (and their shadows), once every
        block is made."""
        for old, new, shadow in st.phis:
            for value, block in old.incoming:
                if block not in st.last:
                    continue
                came = st.fwd_edge(block, old.parent)
                new.add_incoming(st.fwd_value(value), came)
                if shadow is not None:
                    shadow.add_incoming(self._fwd_merged(st, old, value), came)

    def _fwd_merged(self, st: ReverseContext, inst: I.Instruction, value: Value) -> Value:
        """The shadow of operand ``value`` of ``inst``: with runtime activity, a pointer
        without a shadow merged into ``inst`` is its own shadow (see
        :mod:`pyzyme.diff.runtime_checks`)."""
        if inst in st.runtime and value not in st.shadows and has_pointer(value.type):
            return primal_as_shadow(st.where, st.fwd_value(value), value.type)
        return st.fwd_shadow(value)

    def _forward(self, st: ReverseContext, inst: I.Instruction) -> None:
        if isinstance(inst, I.Ret):
            self._forward_ret(st, inst)
            return
        if inst.parent in st.doomed and not isinstance(inst, I.Terminator):
            st.clone(inst)  # on the way to an error: the primal, nothing more
            return
        if isinstance(inst, I.CallBase):
            if st.runtime and any(a in st.runtime for a in inst.args):
                self._guarded_call(st, inst)
                return
            calls.forward_sweep(st, inst)
            return
        if st.unread_store(inst):
            # No one reads what it stores (a reduction's sum: see ParallelBody.unread); its
            # shadow side is a float store's, which emits nothing.
            self._forward_store(st, inst)
            return
        new = st.clone(inst)
        op = inst.opcode
        if isinstance(inst, I.Terminator):
            for i, target in enumerate(new.operands):
                edge = st.entries.get((inst.parent, st.origin.get(target)))
                if edge is not None and target is st.first[st.origin[target]]:
                    new.set_operand(i, edge)
            return
        varied = inst in st.activity.varied
        if op == "load":
            st.origin_load[new] = inst
            if varied and has_pointer(inst.type):
                shadow = st.fb.insert(I.Load(inst.type, st.shadows[inst.pointer], inst.align,
                                             inst.volatile, inst.ordering, inst.syncscope),
                                      naming.shadow(inst.name))
                st.origin_load[shadow] = inst
                st.shadows[inst] = shadow
        elif op == "store":
            self._forward_store(st, inst)
        elif op == "alloca":
            if varied:
                self._forward_alloca(st, inst)
        elif op == "inttoptr":
            if varied:  # the same arithmetic on the shadow of the address it comes from
                source = address_source(inst.operands[0])
                address = replay_address(st.fb, inst.operands[0], st.fwd_shadow(source),
                                         st.fwd_value)
                st.shadows[inst] = st.fb.inttoptr(address, inst.type, naming.shadow(inst.name))
        elif op in READ_MODIFY_WRITE:
            if inst.operands[0] in st.activity.varied:
                raise UnsupportedError(f"reverse mode of {op} on active memory in {st.where} "
                                       f"is not supported")
        elif op in STRUCTURAL and varied and has_pointer(inst.type):
            shadow = new.copy_with([self._fwd_merged(st, inst, o)
                                    if can_carry_derivative(o.type) else n
                                    for o, n in zip(inst.operands, new.operands)])
            shadow.flags = derivative_flags(new.flags)
            st.shadows[inst] = st.fb.insert(shadow, naming.shadow(inst.name))

    def _forward_store(self, st: ReverseContext, inst: I.Store) -> None:
        value, pointer = inst.operands
        shadow = st.shadows.get(pointer)
        if shadow is None:
            if st.sig.status_return and value.type.is_pointer and len(st.old.args) > 1 and \
                    underlying_object(pointer) is st.old.args[1]:
                return  # Numba's exception record: read by the caller only when raising
            if value in st.activity.varied and can_carry_derivative(value.type):
                if not inactive_memory(self.rules, pointer):
                    raise no_shadow_error(st.where, inst, pointer)
            return
        ty = value.type
        if ty.is_int and isinstance(value, I.Load) \
                and not float_moves.stored_as_integers(inst) and not self._integer_move(st, value):
            # The bits of a float, for all we know: an integer cannot carry its adjoint, and
            # bits read where there is no shadow, mirrored into this one, would be taken for
            # an adjoint.
            raise float_moves.refusal(st.where, inst)
        if has_float(ty) and not has_pointer(ty) and not any(
                e.is_int for e in leaves(ty)):
            return  # adjoints, not values, live at float locations of a shadow
        if has_float(ty):
            raise UnsupportedError(f"{st.where} stores an aggregate mixing floats with pointers "
                                   f"or integers into active memory: {inst}")
        # Pointers and integers: the shadow structure mirrors the primal one.
        stored = st.fwd_shadow(value)
        if pointer in st.runtime:
            # Where the shadow is the primal, store what the primal store just stored.
            new = st.values[pointer]
            stored = st.fb.select(inactive_here(st.fb, shadow, new),
                                  st.fwd_value(value), stored)
        st.fb.insert(I.Store(stored, shadow, inst.align, inst.volatile,
                             inst.ordering, inst.syncscope))

    def _guarded_call(self, st: ReverseContext, inst: I.CallBase) -> None:
        """A call handed pointers whose shadow may be their primal: its forward sweep sees
        null shadows where they are (see
        :func:`~pyzyme.diff.runtime_checks.guarded_call_shadows`)."""
        guarded = guarded_call_shadows(st.where, inst, st.runtime, st.shadows.__getitem__,
                                       lambda a: st.fwd_value(a), st.fb)
        saved = {arg: st.shadows[arg] for arg in guarded}
        st.shadows.update(guarded)
        try:
            calls.forward_sweep(st, inst)
        finally:
            st.shadows.update(saved)

    def function_types(self, fn):
        """Type analysis of ``fn`` (seeded with what is known of its arguments), run once,
        when something first needs it; a TypeAnalysisError is raised each time."""
        found = self.types.get(fn)
        if found is None:
            try:
                found = analyze_types(fn, self.type_seeds.get(fn, {}), rules=self.rules)
            except TypeAnalysisError as err:
                found = err
            self.types[fn] = found
        if isinstance(found, TypeAnalysisError):
            raise found
        return found

    def holds_no_floats(self, allocation: I.CallBase) -> bool:
        """Whether type analysis says the memory ``allocation`` returns holds no floats, nor
        pointers to any (a list of integers): it needs no shadow (False when it cannot tell)."""
        try:
            types = self.function_types(allocation.parent.parent)
        except TypeAnalysisError:
            return False
        return types.tree(allocation).holds_no_floats()

    def _integer_move(self, st: ReverseContext, load: I.Load) -> bool:
        """Whether integer ``load`` reads an integer, so storing it into a shadow mirrors the
        primal (:func:`~pyzyme.transforms.float_moves.reads_integers`)."""
        try:
            types = st.types()
        except TypeAnalysisError:
            types = None
        if st.float_pointers is None:
            st.float_pointers = float_moves.float_pointers(st.old)
        return float_moves.reads_integers(load, types, lambda: st.float_pointers)

    def _forward_alloca(self, st: ReverseContext, inst: I.Alloca) -> None:
        count = inst.count
        if count is not None and getattr(count, "value", None) != 1:
            self._variable_size_shadow(st, inst)
            return
        if st.sig.split:
            _heap_shadow(st, inst)
            return
        b = st.fb
        shadow = b.insert(I.Alloca(inst.allocated_type, None, inst.align, inst.type.addrspace),
                          naming.shadow(inst.name))
        b.store(const_null(inst.allocated_type), shadow, inst.align)
        st.shadows[inst] = shadow

    def _variable_size_shadow(self, st: ReverseContext, inst: I.Alloca) -> None:
        """``alloca T, n`` (``alloca(n)``, a C99 variable-length array): a zeroed shadow of
        the same count, beside it (the function's frame holds the reverse sweep too) or, in a
        split pair, on the heap. A stack restore (a buffer per loop iteration) would hand the
        primal's memory to the next buffer before the reverse sweep reads it."""
        restore = next((c for c in st.old.instructions() if isinstance(c, I.CallBase)
                        and c.called_function is not None
                        and c.called_function.name.startswith("llvm.stackrestore")), None)
        if restore is not None:
            raise UnsupportedError(
                f"{st.where} allocates a variable-size stack buffer that holds active values "
                f"and gives the stack back before returning (its shadow would be gone before "
                f"the reverse sweep reads it): {inst}; {restore}",
                hint="allocate the buffer once, outside the loop, or with malloc")
        count = st.fwd_value(inst.count)
        if st.sig.split:
            _heap_shadow(st, inst, count)
            return
        st.shadows[inst] = zeroed_buffer(st.module, st.fb, inst, count,
                                         naming.shadow(inst.name))

    def _forward_ret(self, st: ReverseContext, inst: I.Ret) -> None:
        b = st.fb
        value = inst.value
        new_value = st.fwd_value(value) if value is not None else None
        normal = st.fb.block
        if st.sig.status_return and value is not None and value.type.is_int:
            if getattr(value, "value", None) not in (None, 0):
                self._error_exit(st, new_value)  # a constant error status
                return
            if not hasattr(value, "value"):
                ok = b.icmp("eq", new_value, const_int(value.type, 0))
                normal = st.fwd.append_block(f"{inst.parent.name}.ok")
                failed = st.fwd.append_block(f"{inst.parent.name}.error")
                b.cbranch(ok, normal, failed)
                st.origin[normal] = st.origin[failed] = inst.parent
                b.position_at_end(failed)
                self._error_exit(st, new_value)
                b.position_at_end(normal)
        if st.sig.split:
            index = len(st.exits)
            b.store(const_int(T.i32, index), st.which_exit.fwd)
            # A returned pointer without a shadow (not derived from active memory) returns a
            # null shadow, as forward mode returns a null tangent.
            shadow = st.fwd_shadow(value) if st.sig.return_shadow else None
            st.exits.append((b.block, new_value, shadow, inst.parent))
            return  # the tape is packed and returned once every slot is known
        if new_value is not None:
            b.store(new_value, st.ret_slot.fwd)
        b.br(st.rblocks[inst.parent])

    def _error_exit(self, st: ReverseContext, status: Value) -> None:
        b = st.fb
        st.error_exits.append(b.block)  # cleaned up once the tape is complete: _finalize
        ty = st.fwd.function_type.ret
        if ty == status.type:
            b.ret(status)
            return
        agg = b.insertvalue(Undef(ty), status, 0)
        if st.sig.split:
            agg = b.insertvalue(agg, const_null(T.ptr), 1)
        b.ret(agg)


def _heap_shadow(st: ReverseContext, inst: I.Alloca, count: Value | None = None) -> None:
    """In a split pair the augmented primal's stack is gone before its reverse runs: a stack
    slot's shadow lives on the heap, released when the reverse sweep is done. ``count``: the
    forward sweep's element count of a variable-size slot (``alloca(n)``)."""
    b = st.fb
    if count is None:
        room = st.tape.shadow_room(b, sizeof(inst.allocated_type), inst.align)
        if room is not None:  # in the tape's block, freed with it by the reverse function
            fwd, rev = room
            memset_zero(st.module, b, fwd, const_int(T.i64, max(1, sizeof(
                inst.allocated_type))))
            st.shadows[inst] = fwd
            st.rev_fixed[fwd] = rev
            return
    size = const_int(T.i64, max(1, sizeof(inst.allocated_type)))
    if count is not None:
        n = count if count.type == T.i64 else b.zext(count, T.i64)
        size = b.mul(n, const_int(T.i64, sizeof(inst.allocated_type)))
    shadow = malloc(st.module, b, size, naming.shadow(inst.name))
    memset_zero(st.module, b, shadow, size)
    st.shadows[inst] = shadow
    free = free_function(st.module)
    st.release_later(I.Call(free, [shadow], free.function_type), shadow, const_null(T.ptr))
