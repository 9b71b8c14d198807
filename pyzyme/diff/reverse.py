"""Reverse mode: a forward sweep that runs the function, then a reverse sweep of adjoints.

One generator emits both forms Enzyme has:

- the *combined* function (``diffe_f``): the forward sweep, then, where the primal returns, the
  reverse sweep in the same function. What the reverse sweep needs lives in stack slots (which
  LLVM turns back into registers) and, inside loops, in arrays indexed by loop counters
  (:mod:`pyzyme.diff.tape`). This is the fast path.
- the *split pair* (``augmented_f`` and ``reverse_f``): the same code cut where the primal
  returns, the slots carried from one to the other in a heap tape. Calls to functions that
  have bodies use it (the callee's tape is a value of the caller, cached like any other), and
  so will ``autodiff_thunk``.

The forward sweep is a copy of the primal (same blocks, same names) that also computes
*shadows* of pointers into active memory (adjoints of floats stored in memory accumulate in the
shadow, as in Enzyme), counts loop iterations, records which predecessor entered blocks that
have several, caches what the reverse sweep cannot recompute, and defers frees until the reverse
sweep is done. The reverse sweep has one block per primal block, visited along the reversed
edges of the path the forward sweep took; each instruction's adjoint code comes from the same
rule rows forward mode uses (:mod:`pyzyme.rules`): ``x_bar += partial * y_bar``.

A value the reverse sweep needs is recomputed when that is legal and cheap (pure arithmetic,
induction variables from the loop counter, loads of memory nothing overwrites), and cached
otherwise. What no handler understands raises :class:`~pyzyme.UnsupportedError`; an active
value stored where it has no shadow raises :class:`~pyzyme.ActivityError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyzyme.analysis.activity import (
    Activity,
    analyze_activity,
    can_carry_derivative,
    contains_type,
)
from pyzyme.analysis.cfg import dominators, reverse_post_order
from pyzyme.analysis.loops import analyze_loops
from pyzyme.analysis.overwrite import analyze_overwrites, underlying_object
from pyzyme.diff import naming
from pyzyme.diff.emit import Emitter, derivative_flags
from pyzyme.diff.alias_scopes import ScopeTable, annotate
from pyzyme.diff.tape import Tape
from pyzyme.errors import UnsupportedError, error_context
from pyzyme.ir import IRBuilder, instructions as I, types as T
from pyzyme.ir.names import readable
from pyzyme.ir.values import (
    Argument,
    GlobalValue,
    NamedValue,
    Undef,
    Value,
    const_int,
    const_null,
)
from pyzyme.rules import spec
from pyzyme.rules.expr import Const as ConstExpr
from pyzyme.rules.expr import Op
from pyzyme.rules.table import RuleTable

__all__ = ["ReverseSignature", "ReverseGenerator", "SplitPair"]


@dataclass(frozen=True)
class ReverseSignature:
    """The interface of a reverse-mode derivative.

    ``activities`` has one entry per primal parameter: a ``DUPLICATED`` pointer gets a shadow
    parameter (after all primal parameters, in order) whose memory accumulates adjoints; an
    ``ACTIVE`` float's adjoint is returned. With ``return_active`` the primal's returned float
    is an output: its seed (``dret``) comes after the shadows. With ``status_return`` the
    primal returns an integer status (Numba's convention): a nonzero status skips the reverse
    sweep and is passed on. ``memory_stable`` says nothing writes the memory the parameters
    point to between the sweeps (true of a whole call from Python; not of a callee, whose
    caller runs on before the reverse sweep). ``split`` asks for the augmented primal and
    reverse function instead of the combined one.
    """

    activities: tuple[Activity, ...]
    return_active: bool = False
    status_return: bool = False
    memory_stable: bool = True
    split: bool = False


@dataclass(frozen=True)
class SplitPair:
    """``augmented(params, shadows) -> {primal result?, tape}`` and
    ``reverse(params, shadows, dret?, discard, tape) -> {adjoints}``: with ``discard`` set,
    the reverse function only frees the tape (and what it keeps alive)."""

    augmented: object
    reverse: object
    nbytes: object = None      # i64 (ptr tape): the bytes a tape holds (see Tape)


# Opcodes whose result depends only on operand values: recomputable in the reverse sweep.
_PURE = frozenset({
    "fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "add", "sub", "mul", "udiv", "sdiv",
    "urem", "srem", "shl", "lshr", "ashr", "and", "or", "xor", "icmp", "fcmp", "trunc", "zext",
    "sext", "fptoui", "fptosi", "uitofp", "sitofp", "fpext", "fptrunc", "bitcast",
    "addrspacecast", "ptrtoint", "inttoptr", "select", "getelementptr", "extractvalue",
    "insertvalue", "extractelement", "insertelement", "shufflevector", "freeze"})
# Calls that release memory: deferred until the reverse sweep is done with it.
_RELEASES = frozenset({"NRT_decref", "NRT_MemInfo_call_dtor", "NRT_Free", "free"})
# Structural opcodes whose shadow (of a pointer-carrying result) is the same operation applied
# to the shadows of the operands.
_STRUCTURAL = frozenset({"getelementptr", "bitcast", "addrspacecast", "select", "freeze",
                         "extractvalue", "insertvalue", "extractelement", "insertelement",
                         "shufflevector"})


def _has_pointer(ty: T.Type) -> bool:
    return contains_type(ty, lambda t: t.is_pointer)


def _has_float(ty: T.Type) -> bool:
    return contains_type(ty, lambda t: t.is_float)


def _elements(ty: T.Type) -> list:
    return [ty.element] * ty.count if isinstance(ty, T.ArrayType) else list(ty.elements)


@dataclass(eq=False)
class _State:
    """One derivative being generated."""

    old: object
    sig: ReverseSignature
    fwd: object
    rev: object
    activity: object
    loops: object
    overwrites: object
    tape: Tape
    fb: IRBuilder = field(default_factory=IRBuilder)   # forward sweep
    rb: IRBuilder = field(default_factory=IRBuilder)   # reverse sweep
    values: dict = field(default_factory=dict)         # primal -> forward value
    shadows: dict = field(default_factory=dict)        # primal -> forward shadow
    first: dict = field(default_factory=dict)          # primal block -> its first fwd block
    last: dict = field(default_factory=dict)           # primal block -> fwd block with its exit
    origin: dict = field(default_factory=dict)         # fwd block -> primal block
    origin_load: dict = field(default_factory=dict)    # fwd load -> primal load it repeats
    inductions: dict = field(default_factory=dict)     # fwd phi -> (loop, InductionVariable)
    fidx: dict = field(default_factory=dict)           # loop -> forward iteration number
    rblocks: dict = field(default_factory=dict)        # primal block -> reverse block
    rev_args: dict = field(default_factory=dict)       # fwd argument -> rev argument
    adjoints: dict = field(default_factory=dict)       # primal value -> adjoint slot
    caches: dict = field(default_factory=dict)         # fwd value -> Cache
    memo: dict = field(default_factory=dict)           # fwd value -> its reverse value here
    recomputable: dict = field(default_factory=dict)
    starts: dict = field(default_factory=dict)         # loop -> Cache of its start count
    recorded: dict = field(default_factory=dict)       # primal block -> Cache of pred index
    callee_tapes: dict = field(default_factory=dict)   # primal call -> (pair, sig, fwd tape)
    releases: list = field(default_factory=list)       # release callees, by tag
    release_list: object = None                        # Slot of {ptr, i64, i64}
    ret_slot: object = None
    which_exit: object = None                          # split: Slot of the exit taken
    exits: list = field(default_factory=list)          # split: (fwd block, primal value)
    headers: list = field(default_factory=list)        # (loop, index, first, rest)
    phis: list = field(default_factory=list)
    shadow_args: dict = field(default_factory=dict)    # primal param -> fwd shadow param
    entries: dict = field(default_factory=dict)        # (pred, header) -> fwd edge block
    copies: dict = field(default_factory=dict)         # memcpy -> float type copied, or None
    types: object = None                               # type analysis, when a copy needs it
    float_pointers: list | None = None                 # pointers of float loads and stores
    rev_origin: dict = field(default_factory=dict)     # reverse value -> fwd value it stands for
    error_exits: list = field(default_factory=list)    # fwd blocks returning an error status
    releaser: object = None                            # the function making deferred releases
    doms: object = None
    dret: object = None

    @property
    def where(self) -> str:
        return readable(self.old.name)

    def active(self, value: Value) -> bool:
        return self.activity.is_active(value) and _has_float(value.type)


class ReverseGenerator:
    """Builds reverse-mode derivatives of the functions of one module, memoized.

    Parameters
    ----------
    module
        The module holding the functions; derivatives are added to it.
    rules
        The rule table (:func:`pyzyme.rules.default_rules`).
    """

    def __init__(self, module, rules: RuleTable) -> None:
        self.module = module
        self.rules = rules
        self._done: dict[tuple, object] = {}
        self.tapes: dict = {}   # generated function -> its Tape (for printing and sizes)
        # What is known of each function's arguments, for type analysis (Numba: from the ABI).
        self.type_seeds: dict = {}
        self.scopes = ScopeTable(module)

    # -- entry point -------------------------------------------------------------------
    def derivative(self, fn, sig: ReverseSignature, name: str | None = None):
        """The combined derivative of ``fn`` (a Function), or its :class:`SplitPair` when
        ``sig.split``; built once per pair of function and signature."""
        key = (fn, sig)
        done = self._done.get(key)
        if done is not None:
            return done
        with error_context("reverse mode of function", readable(fn.name)):
            if fn.is_declaration:
                raise UnsupportedError(f"{fn.ref} has no body to differentiate")
            fwd, rev = self._declare(fn, sig, name)
            result = SplitPair(fwd, rev) if sig.split else rev
            self._done[key] = result  # before the body: recursive calls find it
            st = self._body(fn, sig, fwd, rev)
            if sig.split:
                lists = [(st.release_list, 24)] if st.release_list is not None else []
                result = SplitPair(fwd, rev, st.tape.bytes_function(
                    self.module.unique_global_name(f"tape_bytes_{fn.name}"), lists))
                self._done[key] = result
        return result

    # -- declarations ------------------------------------------------------------------
    def adjoint_types(self, fn, sig: ReverseSignature) -> list[T.Type]:
        return [a.type for a, act in zip(fn.args, sig.activities) if act is Activity.ACTIVE]

    def combined_return(self, fn, sig: ReverseSignature) -> T.Type:
        """``{primal result, adjoints of ACTIVE parameters}``; the bare result without any."""
        adj = self.adjoint_types(fn, sig)
        ret = fn.function_type.ret
        if not adj:
            return ret
        return T.StructType(([] if ret == T.void else [ret]) + adj)

    def _shadow_params(self, fn, sig: ReverseSignature) -> list[tuple[int, T.Type]]:
        return [(i, a.type) for i, (a, act) in enumerate(zip(fn.args, sig.activities))
                if act is Activity.DUPLICATED]

    def _declare(self, fn, sig: ReverseSignature, name: str | None):
        params = list(fn.function_type.params)
        shadows = self._shadow_params(fn, sig)
        params += [ty for _, ty in shadows]
        ret = fn.function_type.ret
        if sig.return_active:
            if not _has_float(ret):
                raise UnsupportedError(f"{fn.ref} returns {ret}, which carries no derivative")
        base = name or naming.reverse_function(fn.name, sig.split)
        if not sig.split:
            rev_params = params + ([ret] if sig.return_active else [])
            rev = self._add(base, self.combined_return(fn, sig), rev_params, fn, shadows, sig)
            return rev, rev
        aug_ret = T.ptr if ret == T.void else T.StructType([ret, T.ptr])
        aug = self._add(naming.augmented_function(fn.name), aug_ret, params, fn, shadows, sig,
                        with_dret=False)
        adj = self.adjoint_types(fn, sig)
        rev_ret = T.StructType(adj) if adj else T.void
        rev_params = params + ([ret] if sig.return_active else []) + [T.i1, T.ptr]
        rev = self._add(base, rev_ret, rev_params, fn, shadows, sig, tape=True)
        return aug, rev

    def _add(self, name, ret, params, fn, shadows, sig, with_dret=True, tape=False):
        new = self.module.add_function(self.module.unique_global_name(name),
                                       T.FunctionType(ret, params), prefix="internal")
        for old_arg, new_arg in zip(fn.args, new.args):
            new_arg.name = old_arg.name
            if "noalias" in old_arg.attrs.split():
                new_arg.attrs = "noalias"
        rest = new.args[len(fn.args):]
        for (i, _), arg in zip(shadows, rest):
            arg.name = naming.shadow_param(fn.args[i].name, 0, 1)
            if "noalias" in fn.args[i].attrs.split():
                arg.attrs = "noalias"
        rest = rest[len(shadows):]
        if with_dret and sig.return_active:
            rest[0].name = naming.seed()
            rest = rest[1:]
        if tape:
            rest[0].name, rest[1].name = "discard", "tape"
        return new

    # -- the body ----------------------------------------------------------------------
    def _body(self, fn, sig: ReverseSignature, fwd, rev) -> _State:
        from pyzyme.diff.forward_calls import may_allocate
        activity = analyze_activity(fn, sig.activities, self._call_policy,
                                    return_active=sig.return_active,
                                    may_allocate=lambda call: may_allocate(self, call))
        loops = analyze_loops(fn)
        if loops.irreducible:
            src, dst = loops.irreducible[0]
            raise UnsupportedError(
                f"{fn.ref} has a cycle with two entries ({src.ref} -> {dst.ref}); reverse mode "
                f"needs natural loops")
        fwd_entry = fwd.append_block("allocas")
        rev_entry = rev.append_block("allocas") if sig.split else fwd_entry
        tape = Tape(fwd_entry, rev_entry, self.module, self.scopes)
        st = _State(fn, sig, fwd, rev, activity, loops, analyze_overwrites(fn), tape)
        st.doms = dominators(fn)
        self.tapes[rev] = tape
        nshadow = len(self._shadow_params(fn, sig))
        for old_arg, new_arg, rev_arg in zip(fn.args, fwd.args, rev.args):
            st.values[old_arg] = new_arg
            st.rev_args[new_arg] = rev_arg
            if rev_arg is not new_arg:
                st.rev_origin[rev_arg] = new_arg
        extra = zip(self._shadow_params(fn, sig), fwd.args[len(fn.args):],
                    rev.args[len(fn.args):])
        for (i, _), shadow, rev_shadow in extra:
            st.shadow_args[fn.args[i]] = shadow
            st.rev_args[shadow] = rev_shadow
            if rev_shadow is not shadow:
                st.rev_origin[rev_shadow] = shadow
            if fn.args[i] in activity.varied:
                st.shadows[fn.args[i]] = shadow
        if sig.return_active:
            st.dret = rev.args[len(fn.args) + nshadow]
        # Terminators of the alloca blocks first, so slots can be set up before them.
        fwd_term = IRBuilder(fwd_entry)
        order = reverse_post_order(fn)
        self._make_blocks(st, order)
        fwd_term.br(st.first[fn.blocks[0]])
        if sig.split:
            st.which_exit = tape.slot(T.i32, "exit")
        elif fn.function_type.ret != T.void:
            st.ret_slot = tape.slot(fn.function_type.ret, "result")
        for block in order:
            self._forward_block(st, block)
        self._forward_phis(st)
        for block in reversed(order):
            self._reverse_block(st, block)
        self._finalize(st)
        return st

    def _make_blocks(self, st: _State, order: list) -> None:
        headers = {loop.header: loop for loop in st.loops.loops}
        for block in order:
            first = st.fwd.append_block(block.name)
            st.first[block] = st.last[block] = first
            st.origin[first] = block
            st.values[block] = first
            if block in headers:
                rest = st.fwd.append_block(f"{block.name or 'loop'}.body")
                st.last[block] = rest
                st.origin[rest] = block
        for loop in st.loops.loops:
            for pred in dict.fromkeys(loop.header.predecessors):
                if pred in st.first and not loop.contains(pred):
                    edge = st.fwd.append_block(naming.loop_entry(loop.header.name))
                    IRBuilder(edge).br(st.first[loop.header])
                    st.entries[(pred, loop.header)] = edge
                    st.origin[edge] = pred
        for block in reversed(order):
            st.rblocks[block] = st.rev.append_block(naming.reverse_block(block.name))

    # -- forward sweep -----------------------------------------------------------------
    def _forward_block(self, st: _State, block) -> None:
        b = st.fb
        b.position_at_end(st.first[block])
        for phi in block.phis:
            new = b.phi(phi.type, phi.flags, name=phi.name)
            st.values[phi] = new
            shadow = None
            if phi in st.activity.varied and _has_pointer(phi.type):
                shadow = b.phi(phi.type, (), name=naming.shadow(phi.name))
                st.shadows[phi] = shadow
            st.phis.append((phi, new, shadow))
        loop = st.loops.loop_of(block)
        if loop is not None and loop.header is block:
            count = st.tape.counter(loop).fwd
            index = b.load(T.i64, count, name=naming.iteration(block.name))
            b.store(b.add(index, const_int(T.i64, 1)), count)
            st.fidx[loop] = index
            st.headers.append((loop, index, st.first[block], st.last[block]))
            for phi in block.phis:
                iv = next((v for v in loop.inductions if v.phi is phi), None)
                if iv is not None:
                    st.inductions[st.values[phi]] = (loop, iv)
                elif (shift := _shift_induction(loop, phi)) is not None:
                    st.inductions[st.values[phi]] = (loop, shift)
            b.position_at_end(st.last[block])
        for inst in block.instructions[len(block.phis):]:
            with error_context("instruction", f"{inst}"):
                self._forward(st, inst)

    def _forward_phis(self, st: _State) -> None:
        for old, new, shadow in st.phis:
            for value, block in old.incoming:
                if block not in st.last:
                    continue
                came = self._fwd_pred(st, block, old.parent)
                new.add_incoming(self._fwd_value(st, value), came)
                if shadow is not None:
                    shadow.add_incoming(self._fwd_shadow(st, value), came)

    @staticmethod
    def _fwd_pred(st: _State, pred, block):
        """The forward block that branches to ``block`` for the primal edge from ``pred``."""
        return st.entries.get((pred, block), st.last[pred])

    def _fwd_value(self, st: _State, value: Value) -> Value:
        mapped = st.values.get(value)
        if mapped is not None:
            return mapped
        if isinstance(value, NamedValue) and not isinstance(value, GlobalValue):
            raise UnsupportedError(f"{st.where} uses {value!r} before it is defined")
        return value

    def _fwd_shadow(self, st: _State, value: Value) -> Value:
        """The shadow of ``value`` in the forward sweep: null pointers and zero floats where
        it has none, its integers as they are."""
        s = st.shadows.get(value)
        if s is not None:
            return s
        return self._no_shadow(st, self._fwd_value(st, value), value.type)

    def _no_shadow(self, st: _State, value: Value, ty: T.Type) -> Value:
        if not can_carry_derivative(ty):
            return value
        if ty.is_float or ty.is_pointer:
            return const_null(ty)
        if not _has_pointer(ty):
            return const_null(ty)
        agg = value
        for i, ety in enumerate(_elements(ty)):
            if can_carry_derivative(ety):
                part = st.fb.extractvalue(agg, i)
                agg = st.fb.insertvalue(agg, self._no_shadow(st, part, ety), i)
        return agg

    def _clone(self, st: _State, inst: I.Instruction) -> I.Instruction:
        new = inst.copy_with([self._fwd_value(st, op) for op in inst.operands],
                             keep_metadata=True)
        st.fb.insert(new, inst.name)
        st.values[inst] = new
        return new

    def _forward(self, st: _State, inst: I.Instruction) -> None:
        if isinstance(inst, I.Ret):
            self._forward_ret(st, inst)
            return
        if isinstance(inst, I.CallBase):
            from pyzyme.diff import reverse_calls
            reverse_calls.forward(self, st, inst)
            return
        new = self._clone(st, inst)
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
            if varied and _has_pointer(inst.type):
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
        elif op in ("atomicrmw", "cmpxchg"):
            if inst.operands[0] in st.activity.varied:
                raise UnsupportedError(f"reverse mode of {op} on active memory in {st.where} "
                                       f"is not supported")
        elif op in _STRUCTURAL and varied and _has_pointer(inst.type):
            shadow = new.copy_with([self._fwd_shadow(st, o) if can_carry_derivative(o.type)
                                    else n for o, n in zip(inst.operands, new.operands)])
            shadow.flags = derivative_flags(new.flags)
            st.shadows[inst] = st.fb.insert(shadow, naming.shadow(inst.name))

    def _forward_store(self, st: _State, inst: I.Store) -> None:
        value, pointer = inst.operands
        shadow = st.shadows.get(pointer)
        if shadow is None:
            if st.sig.status_return and value.type.is_pointer and len(st.old.args) > 1 and \
                    underlying_object(pointer) is st.old.args[1]:
                return  # Numba's exception record: read by the caller only when raising
            if value in st.activity.varied and can_carry_derivative(value.type):
                from pyzyme.diff.forward_memory import no_shadow_error
                raise no_shadow_error(st.where, inst, pointer)
            return
        ty = value.type
        if ty.is_int and isinstance(value, I.Load) and value.pointer in st.activity.varied \
                and not self._integer_move(st, value):
            raise UnsupportedError(
                f"{st.where} copies memory that may hold floats through an integer of type "
                f"{ty}: {inst}", hint="please report this function")
        if _has_float(ty) and not _has_pointer(ty) and not any(
                e.is_int for e in _leaves(ty)):
            return  # adjoints, not values, live at float locations of a shadow
        if _has_float(ty):
            raise UnsupportedError(f"{st.where} stores an aggregate mixing floats with pointers "
                                   f"or integers into active memory: {inst}")
        # Pointers and integers: the shadow structure mirrors the primal one.
        st.fb.insert(I.Store(self._fwd_shadow(st, value), shadow, inst.align, inst.volatile,
                             inst.ordering, inst.syncscope))

    def _integer_move(self, st: _State, load: I.Load) -> bool:
        """Whether integer ``load`` reads an integer (so storing it into a shadow mirrors the
        primal), not the bits of a float: type analysis says so, or its address is typed as
        integer data, or no float access of the function may touch the same memory."""
        from pyzyme.analysis.types import analyze_types
        from pyzyme.errors import TypeAnalysisError

        if st.types is None:
            try:
                st.types = analyze_types(st.old, self.type_seeds.get(st.old, {}))
            except TypeAnalysisError:
                st.types = False
        if st.types:
            kind = str(st.types.tree(load).lookup(0))
            if kind in ("Integer", "Pointer"):
                return True
            if kind.startswith("Float"):
                return False
        pointer = load.pointer
        step = pointer
        while isinstance(step, I.GetElementPtr):  # the addressing names the element type
            if step.source_type != T.i8:
                if not _has_float(step.source_type):
                    return True
                break
            step = step.pointer
        return not self._may_hold_floats(st, pointer)

    def _may_hold_floats(self, st: _State, pointer: Value) -> bool:
        """Whether the function reads or writes floats anywhere ``pointer`` may point."""
        from pyzyme.analysis.overwrite import may_alias

        if st.float_pointers is None:
            st.float_pointers = [
                i.pointer for i in st.old.instructions()
                if isinstance(i, (I.Load, I.Store)) and _has_float(
                    i.type if isinstance(i, I.Load) else i.operands[0].type)]
        return any(may_alias(pointer, p) for p in st.float_pointers)

    def _forward_alloca(self, st: _State, inst: I.Alloca) -> None:
        count = inst.count
        if count is not None and getattr(count, "value", None) != 1:
            raise UnsupportedError(f"{st.where} allocates a variable-size stack buffer that "
                                   f"holds active values: {inst}")
        if st.sig.split:
            from pyzyme.diff.reverse_calls import shadow_stack_slot
            shadow_stack_slot(self, st, inst)
            return
        b = st.fb
        shadow = b.insert(I.Alloca(inst.allocated_type, None, inst.align, inst.type.addrspace),
                          naming.shadow(inst.name))
        b.store(const_null(inst.allocated_type), shadow, inst.align)
        st.shadows[inst] = shadow

    def _forward_ret(self, st: _State, inst: I.Ret) -> None:
        b = st.fb
        value = inst.value
        new_value = self._fwd_value(st, value) if value is not None else None
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
            st.exits.append((b.block, new_value, inst.parent))
            return  # the tape is packed and returned once every slot is known
        if new_value is not None:
            b.store(new_value, st.ret_slot.fwd)
        b.br(st.rblocks[inst.parent])

    def _error_exit(self, st: _State, status: Value) -> None:
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

    # -- reverse sweep: control ----------------------------------------------------------
    def _reverse_block(self, st: _State, block) -> None:
        st.rb.position_at_end(st.rblocks[block])
        st.memo = {}
        term = block.terminator
        if isinstance(term, I.Ret) and st.sig.return_active and term.value is not None:
            self.accumulate(st, term.value, st.dret)
        for inst in reversed(block.instructions[len(block.phis):]):
            if inst is term:
                continue
            with error_context("adjoint of", f"{inst}"):
                self._reverse(st, inst)
        self._reverse_branch(st, block)

    def _reverse_branch(self, st: _State, block) -> None:
        b = st.rb
        if block is st.old.blocks[0]:
            self._finish(st)
            return
        preds = list(dict.fromkeys(p for p in block.predecessors if p in st.last))
        # Adjoints of phis: read (and cleared) before the edge decides where they go.
        dphis = [(phi, self.consume(st, phi)) for phi in block.phis if st.active(phi)]
        loop = next((lp for lp in st.loops.loops if lp.header is block), None)
        which = None
        if len(preds) > 1 and not (loop is not None and self._simple_header(loop, preds)):
            which = self._which_pred(st, block, preds)
        if loop is not None:
            count = st.tape.counter(loop).rev
            c = b.sub(b.load(T.i64, count), const_int(T.i64, 1))
            b.store(c, count)
            if which is None and len(preds) > 1:
                outside = next(p for p in preds if not loop.contains(p))
                inside = next(p for p in preds if loop.contains(p))
                first = b.icmp("eq", c, self._loop_start(st, loop))
                b.cbranch(first, self._leave(st, loop, self._edge(st, block, outside, dphis)),
                          self._edge(st, block, inside, dphis))
                return
        edges = [self._edge(st, block, p, dphis) for p in preds]
        if loop is not None:
            edges = [self._leave(st, loop, e) if not loop.contains(p) else e
                     for p, e in zip(preds, edges)]
        if which is None:
            b.br(edges[0])
            return
        if which.type == T.i1:
            b.cbranch(which, edges[1], edges[0])
            return
        b.switch(which, edges[0], [(const_int(T.i32, k), e) for k, e in enumerate(edges)][1:])

    def _leave(self, st: _State, loop, target):
        """``target``, through a block that pops the loop's start when it has one."""
        stack = st.starts.get(loop)
        if stack is None or loop.parent is None:
            return target
        block = st.rev.append_block(f"{st.rblocks[loop.header].name}.leave")
        b = IRBuilder(block)
        st.tape.pop(b, stack)
        b.br(target)
        return block

    def _which_pred(self, st: _State, block, preds) -> Value:
        """The index (in ``preds``) of the predecessor that entered ``block``: from the branch
        that decided it when that branch's condition can be had, else recorded."""
        decided = self._deciding_branch(st, block, preds)
        if decided is None:
            return self._recorded_pred(st, block, preds)
        cond, true_index, _ = decided
        test = self.primal(st, cond)
        return test if true_index == 1 else st.rb.xor(test, const_int(T.i1, 1))

    def _deciding_branch(self, st: _State, block, preds):
        """``(cond, index if true, index if false)`` when ``block``'s immediate dominator ends
        in a conditional branch whose two sides lead to different predecessors of ``block``
        (an if/else diamond, possibly with loops inside its arms)."""
        if len(preds) != 2:
            return None
        key = ("decided", block)
        if key in st.recomputable:
            return st.recomputable[key]
        found = None
        d = st.doms.idom.get(block)
        term = d.terminator if d is not None else None
        if isinstance(term, I.Branch) and term.is_conditional and \
                st.loops.loop_of(d) is st.loops.loop_of(block) and \
                not any(lp.header is block for lp in st.loops.loops):
            sides = []
            for succ in term.successors[:2]:
                sides.append(self._side(st, d, succ, block, preds))
            if None not in sides and sides[0] != sides[1]:
                found = (term.operands[0], sides[0], sides[1])
        st.recomputable[key] = found
        return found

    def _side(self, st: _State, d, succ, block, preds):
        """Which predecessor of ``block`` the edge ``d -> succ`` leads to, or None."""
        if succ is block:
            return preds.index(d) if d in preds else None
        if any(p is not d and not st.doms.dominates(succ, p) for p in succ.predecessors
               if p in st.last):
            return None  # the arm can be entered other than from d
        reached = [i for i, p in enumerate(preds) if st.doms.dominates(succ, p)]
        return reached[0] if len(reached) == 1 else None

    @staticmethod
    def _simple_header(loop, preds) -> bool:
        inside = [p for p in preds if loop.contains(p)]
        return len(inside) == 1 and len(preds) == 2

    def _edge(self, st: _State, block, pred, dphis) -> object:
        """Where the reverse sweep goes for the edge ``pred -> block``: the reverse of
        ``pred``, through a block that hands the phis' adjoints to their incoming values."""
        target = st.rblocks[pred]
        moves = [(phi, d) for phi, d in dphis
                 if st.active(v := _incoming(phi, pred)) and not isinstance(v, Undef)]
        if not moves:
            return target
        edge = st.rev.append_block(f"{st.rblocks[block].name}.from.{pred.name or 'pred'}")
        saved = (st.rb.block, st.rb.index)
        st.rb.position_at_end(edge)
        for phi, d in moves:
            self.accumulate(st, _incoming(phi, pred), d)
        st.rb.br(target)
        st.rb.block, st.rb.index = saved
        return edge

    def _recorded_pred(self, st: _State, block, preds) -> Value:
        """Which predecessor entered ``block``, recorded by the forward sweep (an i32 phi)."""
        cache = st.recorded.get(block)
        if cache is None:
            first = st.first[block]
            phi = I.Phi(T.i32)
            phi.name = st.fwd.unique_name(naming.came_from(block.name))
            first.insert(len(first.phis), phi)
            for p in block.predecessors:
                if p in st.last:
                    phi.add_incoming(const_int(T.i32, preds.index(p)),
                                     self._fwd_pred(st, p, block))
            loop = st.loops.loop_of(block)
            cache = st.recorded[block] = st.tape.cache(T.i32, loop, phi.name)
            b = IRBuilder()
            if loop is not None and loop.header is block:
                b.position_at_start(st.last[block])
            else:
                b.position_at_start(first)
            st.tape.store(b, cache, phi, st.fidx.get(loop))
        return st.tape.load(st.rb, cache, self._index(st, cache.loop))

    def _index(self, st: _State, loop) -> Value | None:
        """The number of the iteration of ``loop`` the reverse sweep is in."""
        if loop is None:
            return None
        key = ("index", loop)
        v = st.memo.get(key)
        if v is None:
            count = st.tape.counter(loop).rev
            v = st.memo[key] = st.rb.sub(st.rb.load(T.i64, count), const_int(T.i64, 1))
        return v

    def _loop_start(self, st: _State, loop) -> Value:
        """The counter of ``loop`` when its current run began (0 for outermost loops: they run
        at most once per call)."""
        if loop.parent is None:
            return const_int(T.i64, 0)
        key = ("start", loop)
        v = st.memo.get(key)
        if v is not None:
            return v
        stack = st.starts.get(loop)
        if stack is None:
            # Pushed on entry, popped when the reverse sweep leaves the loop: one entry per
            # run, however many iterations of the enclosing loops do not enter it.
            stack = st.starts[loop] = st.tape.stack(f"{loop.header.name}.starts")
            for (pred, header), edge in st.entries.items():
                if header is loop.header:
                    b = IRBuilder()
                    b.position_before(edge.terminator)
                    st.tape.push(b, stack, b.load(T.i64, st.tape.counter(loop).fwd))
        v = st.memo[key] = st.tape.peek(st.rb, stack, naming.loop_start(loop.header.name))
        return v

    def _finish(self, st: _State) -> None:
        b = st.rb
        if st.release_list is not None:
            from pyzyme.diff import reverse_calls
            reverse_calls.run_releases(self, st, b, st.release_list.rev)
        st.tape.free(b)
        adj = [self.adjoint_of_param(st, a) for a, act in zip(st.old.args, st.sig.activities)
               if act is Activity.ACTIVE]
        ty = st.rev.function_type.ret
        if st.sig.split:
            if not adj:
                b.ret_void()
                return
            agg = Undef(ty)
            for i, v in enumerate(adj):
                agg = b.insertvalue(agg, v, i)
            b.ret(agg)
            return
        result = b.load(st.ret_slot.type, st.ret_slot.rev) if st.ret_slot is not None else None
        if not adj:
            b.ret(result)
            return
        agg = Undef(ty)
        parts = ([result] if result is not None else []) + adj
        for i, v in enumerate(parts):
            agg = b.insertvalue(agg, v, i)
        b.ret(agg)

    def _reserve_caches(self, st: _State) -> None:
        """Size loop caches and loop-start stacks before the outermost loop starts, where the
        trip counts of the whole nest are known there: no growing (copying) while it runs."""
        wanted = [(loop, [loop], lambda b, total, lp=loop: st.tape.reserve(b, lp, total))
                  for loop, state in st.tape.loops.items() if state.caches]
        # A loop's start stack takes one entry per run: per iteration of its parent.
        wanted += [(loop.parent, [loop.parent],
                    lambda b, total, s=stack: st.tape.reserve_stack(b, s, total))
                   for loop, stack in st.starts.items() if loop.parent is not None]
        for loop, chain, reserve in wanted:
            while chain[-1].parent is not None:
                chain.append(chain[-1].parent)
            top = chain[-1]
            if not all(self._countable(lp, top) for lp in chain):
                continue
            for (pred, header), edge in st.entries.items():
                if header is not top.header:
                    continue
                b = IRBuilder()
                b.position_before(edge.terminator)
                total = None
                for lp in chain:
                    runs = self._runs(st, b, lp.trip_count)
                    total = runs if total is None else b.mul(total, runs)
                reserve(b, total)

    @staticmethod
    def _countable(loop, top) -> bool:
        """Whether ``loop``'s run count is a formula of values fixed before ``top`` starts."""
        tc = loop.trip_count
        if tc is None or not tc.exact or abs(tc.step) != 1:
            return False
        if tc.predicate not in ("ne", "slt", "ult", "sle", "ule", "sgt", "ugt", "sge", "uge"):
            return False
        return top.is_invariant(tc.start) and top.is_invariant(tc.bound)

    def _runs(self, st: _State, b: IRBuilder, tc) -> Value:
        """How many times the header runs, at least 1: ``sign * (bound - start) + extra``."""
        start, bound = self._fwd_value(st, tc.start), self._fwd_value(st, tc.bound)
        if start.type != T.i64:
            start, bound = b.sext(start, T.i64), b.sext(bound, T.i64)
        extra = 1 - int(tc.uses_next) + (1 if tc.predicate in ("sle", "ule", "sge", "uge")
                                         else 0)
        distance = b.sub(bound, start) if tc.step > 0 else b.sub(start, bound)
        runs = b.add(distance, const_int(T.i64, extra))
        one = const_int(T.i64, 1)
        return b.select(b.icmp("slt", runs, one), one, runs)

    def adjoint_of_param(self, st: _State, arg) -> Value:
        slot = st.adjoints.get(arg)
        if slot is None:
            return const_null(arg.type)
        return st.rb.load(arg.type, slot)

    def _finalize(self, st: _State) -> None:
        self._reserve_caches(st)
        for block in st.error_exits:
            # No reverse sweep follows an error: release what was deferred, free the tape.
            b = IRBuilder()
            b.position_before(block.terminator)
            if st.release_list is not None:
                from pyzyme.diff import reverse_calls
                reverse_calls.run_releases(self, st, b, st.release_list.fwd)
            st.tape.free(b, forward=True)
        for loop, index, first, rest in st.headers:
            b = IRBuilder(first)
            st.tape.grow(b, loop, index, rest)
        annotate(dict.fromkeys((st.fwd, st.rev)), self.scopes, st.tape.scope_node,
                 lambda pointer: self._object_of(st, pointer))
        if not st.sig.split:
            return
        b = st.fb
        for block, value, _ in st.exits:
            b.position_at_end(block)
            tape = st.tape.pack(b)
            if value is None:
                b.ret(tape)
            else:
                agg = b.insertvalue(Undef(st.fwd.function_type.ret), value, 0)
                b.ret(b.insertvalue(agg, tape, 1))
        rb = IRBuilder(st.tape.rev_entry)
        st.tape.unpack(rb, st.rev.args[-1])
        # ``discard``: the tape is dropped unused (its owner was collected): release what the
        # forward sweep deferred, free the caches, skip the reverse sweep.
        sweep = st.rev.append_block("sweep")
        cleanup = st.rev.append_block("discard")
        rb.cbranch(st.rev.args[-2], cleanup, sweep)
        cb = IRBuilder(cleanup)
        if st.release_list is not None:
            from pyzyme.diff import reverse_calls
            reverse_calls.run_releases(self, st, cb, st.release_list.rev)
        st.tape.free(cb)
        ret = st.rev.function_type.ret
        cb.ret(None if ret == T.void else const_null(ret))
        rb.position_at_end(sweep)
        which = rb.load(T.i32, st.which_exit.rev)
        targets = [st.rblocks[primal] for _, _, primal in st.exits]
        rb.switch(which, targets[0], [(const_int(T.i32, k), t)
                                      for k, t in enumerate(targets)][1:])

    # -- reverse sweep: values -------------------------------------------------------------
    def avail(self, st: _State, fv: Value) -> Value:
        """Forward value ``fv`` where the reverse sweep now is: recomputed or cached."""
        if isinstance(fv, Argument):
            return st.rev_args[fv]
        if not isinstance(fv, I.Instruction):
            return fv
        v = st.memo.get(fv)
        if v is None:
            v = st.memo[fv] = self._materialize(st, fv)
            st.rev_origin.setdefault(v, fv)
        return v

    def primal(self, st: _State, value: Value) -> Value:
        """Primal ``value`` (forward copy) in the reverse sweep."""
        return self.avail(st, self._fwd_value(st, value))

    def shadow(self, st: _State, value: Value) -> Value:
        """The shadow of primal pointer ``value`` in the reverse sweep."""
        return self.avail(st, st.shadows[value])

    def _materialize(self, st: _State, fv: I.Instruction) -> Value:
        block = st.origin[fv.parent]
        loop = st.loops.loop_of(block)
        iv = st.inductions.get(fv)
        b = st.rb
        if iv is not None:
            iv_loop, induction = iv
            k = b.sub(self._index(st, iv_loop), self._loop_start(st, iv_loop))
            start = self.primal(st, induction.start)
            if k.type != start.type:
                k = b.trunc(k, start.type)
            if isinstance(induction, ShiftInduction):
                return induction.value_at(b, start, k, fv.name)
            return b.add(start, b.mul(k, const_int(start.type, induction.step)),
                         name=fv.name)
        if isinstance(fv, I.Phi) and loop is not None:
            merged = self._merged_phi(st, fv, block)
            if merged is not None:
                return merged
        # Outside loops a stack slot costs nothing in the combined function; in a split pair
        # the reverse function gets its own arguments (and shadows: its result slot's seed),
        # so what is computed from them is computed again there rather than carried over.
        if (loop is not None or st.sig.split) and self._can_recompute(st, fv):
            clone = fv.copy_with([self.avail(st, op) for op in fv.operands])
            return b.insert(clone, fv.name)
        cache = st.caches.get(fv)
        if cache is None:
            # A value the same on every iteration of its loops is kept once per iteration of
            # the innermost loop it does vary in (stored redundantly, indexed there).
            loop = self._varies_in(st, fv, loop)
            cache = st.caches[fv] = st.tape.cache(fv.type, loop, fv.name or "value")
            fb = IRBuilder()
            if isinstance(fv, I.Phi):
                header = loop is not None and loop.header is block
                fb.position_at_start(st.last[block] if header else fv.parent)
            else:
                fb.position_after(fv)
            st.tape.store(fb, cache, fv, st.fidx.get(loop))
        return st.tape.load(b, cache, self._index(st, cache.loop), name=fv.name)

    def _varies_in(self, st: _State, fv: I.Instruction, loop):
        """The innermost of ``loop`` and its parents in which forward value ``fv`` may differ
        between iterations (None: it is the same throughout the call)."""
        while loop is not None and self._invariant_in(st, fv, loop, 8):
            loop = loop.parent
        return loop

    def _invariant_in(self, st: _State, fv: Value, loop, depth: int) -> bool:
        """Whether ``fv`` has one value across the iterations of ``loop`` (a pure function of
        values defined outside it, or a load of memory nothing in it writes)."""
        if not isinstance(fv, I.Instruction):
            return True
        origin = st.origin.get(fv.parent)
        if origin is None or not loop.contains(origin):
            return True
        if depth == 0 or isinstance(fv, I.Phi) or fv in st.inductions:
            return False
        if fv.opcode == "load":
            primal = st.origin_load.get(fv)
            if primal is None or fv.volatile or self._written_in(st, primal.pointer, loop):
                return False
            return self._invariant_in(st, fv.operands[0], loop, depth - 1)
        if fv.opcode not in _PURE:
            return False
        return all(self._invariant_in(st, op, loop, depth - 1) for op in fv.operands)

    def _written_in(self, st: _State, pointer: Value, loop) -> bool:
        """Whether anything in ``loop`` may write where ``pointer`` points."""
        from pyzyme.analysis.overwrite import _written_pointers, may_alias

        return any(may_alias(pointer, w) for block in loop.blocks
                   for inst in block.instructions for w in _written_pointers(inst))

    def _object_of(self, st: _State, pointer: Value):
        """The distinct object (allocation, stack slot, ``noalias`` parameter, or the shadow of
        one) that ``pointer`` points into, seen through reverse-sweep copies; else None."""
        from pyzyme.analysis.overwrite import _identified

        for _ in range(64):
            pointer = underlying_object(pointer)
            origin = st.rev_origin.get(pointer)
            if origin is None:
                break
            pointer = origin
        if isinstance(pointer, I.Alloca) and pointer.parent in (st.tape.fwd_entry,
                                                                 st.tape.rev_entry):
            return None  # pyzyme's own slots: promoted to registers anyway
        return pointer if _identified(pointer) else None

    def _merged_phi(self, st: _State, fv: I.Phi, block) -> Value | None:
        """A phi of an if/else merge whose arms' values are safe to compute either way:
        ``select`` on the deciding branch's condition, nothing cached."""
        primal = next((p for p in block.phis if st.values.get(p) is fv), None)
        if primal is None:
            return None
        preds = list(dict.fromkeys(p for p in block.predecessors if p in st.last))
        decided = self._deciding_branch(st, block, preds)
        if decided is None:
            return None
        incoming = [self._fwd_value(st, _incoming(primal, p)) for p in preds]
        if not all(self._speculatable(st, v, 4) for v in incoming):
            return None
        cond, true_index, false_index = decided
        return st.rb.select(self.primal(st, cond), self.avail(st, incoming[true_index]),
                            self.avail(st, incoming[false_index]), name=fv.name)

    def _speculatable(self, st: _State, fv: Value, depth: int) -> bool:
        """Whether computing ``fv`` where its block did not run is harmless (no loads, no
        division by a garbage zero): it is a constant, an argument, cached, or pure."""
        if not isinstance(fv, I.Instruction) or fv in st.caches or fv in st.inductions:
            return True
        if depth == 0 or isinstance(fv, I.Phi):
            return False
        if fv.opcode in ("udiv", "sdiv", "urem", "srem") or not self._can_recompute(st, fv) \
                or fv.opcode == "load":
            return False
        return all(self._speculatable(st, op, depth - 1) for op in fv.operands)

    def _can_recompute(self, st: _State, fv: I.Instruction) -> bool:
        known = st.recomputable.get(fv)
        if known is not None:
            return known
        op = fv.opcode
        if op in _PURE:
            ok = True
        elif op == "load":
            origin = st.origin_load.get(fv)
            ok = (origin is not None and not fv.volatile and fv.ordering in (None, "")
                  and not st.overwrites.is_overwritten(origin)
                  and self._stable(st, origin.pointer))
        elif isinstance(fv, I.Call):
            callee = fv.called_function
            row = self.rules.lookup(callee.name, "call") if callee is not None else None
            ok = isinstance(row, spec.Partials)
        else:
            ok = False
        st.recomputable[fv] = ok
        return ok

    def _stable(self, st: _State, pointer: Value) -> bool:
        """Whether memory at ``pointer`` keeps its contents until the reverse sweep (given
        that nothing in the function overwrites it)."""
        obj = underlying_object(pointer)
        if isinstance(obj, I.Alloca):
            return not st.sig.split  # a callee's stack is gone when its reverse runs
        if isinstance(obj, I.CallBase):
            return True  # allocated here, freed only after the reverse sweep
        if isinstance(obj, I.Load):
            return self._stable(st, obj.pointer) if st.sig.split else st.sig.memory_stable
        return st.sig.memory_stable

    # -- reverse sweep: adjoints -------------------------------------------------------
    def _slot(self, st: _State, value: Value) -> I.Alloca:
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

    def accumulate(self, st: _State, value: Value, delta: Value) -> None:
        """``value_bar += delta``, for an active primal value."""
        if not st.active(value) or not isinstance(value, (I.Instruction, Argument)):
            return
        slot = self._slot(st, value)
        b = st.rb
        b.store(_add(b, value.type, b.load(value.type, slot), delta), slot)

    def consume(self, st: _State, value: Value) -> Value:
        """``value_bar``, read and reset to zero (the value's uses are all done)."""
        slot = self._slot(st, value)
        d = st.rb.load(value.type, slot, name=naming.adjoint(value.name))
        st.rb.store(const_null(value.type), slot)
        return d

    # -- reverse sweep: instructions ---------------------------------------------------
    def _reverse(self, st: _State, inst: I.Instruction) -> None:
        if isinstance(inst, I.CallBase):
            from pyzyme.diff import reverse_calls
            reverse_calls.reverse(self, st, inst)
            return
        op = inst.opcode
        if op == "store":
            self._reverse_store(st, inst)
            return
        if not st.active(inst):
            return
        handler = _ADJOINTS.get(op)
        if handler is None:
            raise UnsupportedError(f"no reverse-mode derivative for {op} in {st.where}",
                                   hint="this instruction has an active operand; please "
                                        "report it")
        handler(self, st, inst)

    def _reverse_load(self, st: _State, inst: I.Load) -> None:
        d = self.consume(st, inst)
        pointer = self.shadow(st, inst.pointer)
        b = st.rb
        old = b.load(inst.type, pointer, inst.align)
        b.store(_add(b, inst.type, old, d), pointer, inst.align)

    def _reverse_store(self, st: _State, inst: I.Store) -> None:
        value, pointer = inst.operands
        if pointer not in st.shadows or not _has_float(value.type):
            return
        b = st.rb
        shadow = self.shadow(st, pointer)
        if st.active(value):
            d = b.load(value.type, shadow, inst.align, name=naming.adjoint(value.name))
            b.store(const_null(value.type), shadow, inst.align)
            self.accumulate(st, value, d)
        else:
            b.store(const_null(value.type), shadow, inst.align)

    def partials(self, st: _State, inst: I.Instruction, row: spec.Partials,
                 operands: Sequence[Value], flags: Sequence[str] = ()) -> None:
        """``operand_i_bar += partial_i * inst_bar`` over the active operands."""
        b = st.rb
        d = self.consume(st, inst)
        ty = inst.type
        if row.result_field is not None:
            ty = ty.elements[row.result_field]
            d = b.extractvalue(d, row.result_field)
        em = Emitter(b, self.module, ty, flags)
        args = _Lazy(lambda i: self.primal(st, operands[i]))
        for i, (p, operand) in enumerate(zip(row.partials, operands)):
            if p is None or not st.active(operand):
                continue
            result = None
            if "ret" in p.placeholders():
                result = self.primal(st, inst)
                if row.result_field is not None:
                    result = b.extractvalue(result, row.result_field)
            if _is_reciprocal(p):
                term = b.fdiv(d, em.expr(p.operands[1], args, result), em.flags)
            elif isinstance(p, ConstExpr):
                term = d if p.value == 1.0 else (
                    b.fneg(d, em.flags) if p.value == -1.0
                    else b.fmul(em.constant(p.value), d, em.flags))
            else:
                term = b.fmul(em.expr(p, args, result, naming.partial(inst.name, i)), d,
                              em.flags)
            self.accumulate(st, operand, term)

    def _arith(self, st: _State, inst: I.Instruction) -> None:
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

    def _select(self, st: _State, inst: I.Instruction) -> None:
        cond, a, c = inst.operands
        d = self.consume(st, inst)
        b = st.rb
        test = self.primal(st, cond)
        zero = const_null(inst.type)
        if st.active(a):
            self.accumulate(st, a, b.select(test, d, zero))
        if st.active(c):
            self.accumulate(st, c, b.select(test, zero, d))

    def _freeze(self, st: _State, inst: I.Instruction) -> None:
        self.accumulate(st, inst.operands[0], self.consume(st, inst))

    def _extractvalue(self, st: _State, inst: I.ExtractValue) -> None:
        agg = inst.operands[0]
        d = self.consume(st, inst)
        if st.active(agg):
            b = st.rb
            slot = self._slot(st, agg)
            whole = b.load(agg.type, slot)
            part = b.extractvalue(whole, inst.indices)
            b.store(b.insertvalue(whole, _add(b, inst.type, part, d), inst.indices), slot)

    def _insertvalue(self, st: _State, inst: I.InsertValue) -> None:
        agg, element = inst.operands
        d = self.consume(st, inst)
        b = st.rb
        if st.active(element):
            self.accumulate(st, element, b.extractvalue(d, inst.indices))
        if st.active(agg):
            self.accumulate(st, agg, b.insertvalue(d, const_null(element.type), inst.indices))

    def _extractelement(self, st: _State, inst: I.Instruction) -> None:
        vec, index = inst.operands
        d = self.consume(st, inst)
        if st.active(vec):
            b = st.rb
            self.accumulate(st, vec, b.insertelement(const_null(vec.type), d,
                                                     self.primal(st, index)))

    def _insertelement(self, st: _State, inst: I.Instruction) -> None:
        vec, element, index = inst.operands
        d = self.consume(st, inst)
        b = st.rb
        i = self.primal(st, index)
        if st.active(element):
            self.accumulate(st, element, b.extractelement(d, i))
        if st.active(vec):
            self.accumulate(st, vec, b.insertelement(d, const_null(element.type), i))

    # -- calls: activity of results ----------------------------------------------------
    def _call_policy(self, call: I.CallBase, is_varied) -> bool:
        from pyzyme.diff.forward_calls import call_result_varied
        return call_result_varied(self, call, is_varied)


@dataclass(frozen=True)
class ShiftInduction:
    """A header phi shifted by a constant each iteration (``exp >>= 1`` in integer powers):
    on iteration k it is ``start`` shifted by ``k * amount``, recomputable like an induction
    variable instead of cached."""

    start: Value
    opcode: str
    amount: int

    def value_at(self, b: IRBuilder, start: Value, k: Value, name: str) -> Value:
        ty = start.type
        total = b.mul(k, const_int(ty, self.amount))
        width = const_int(ty, ty.width)
        inside = b.icmp("ult", total, width)
        shifted = b.binop(self.opcode, start, b.select(inside, total, const_int(ty, 0)))
        if self.opcode == "ashr":
            out = b.ashr(start, const_int(ty, ty.width - 1))
        else:
            out = const_int(ty, 0)
        return b.select(inside, shifted, out, name=name)


def _shift_induction(loop, phi: I.Phi) -> ShiftInduction | None:
    """``phi = [start, outside], [phi shifted by a constant, latch]``, else None."""
    if not phi.type.is_int or phi.type.is_vector:
        return None
    outside = {v for v, blk in phi.incoming if not loop.contains(blk)}
    inside = {v for v, blk in phi.incoming if loop.contains(blk)}
    if len(outside) != 1 or len(inside) != 1:
        return None
    (start,), (update,) = outside, inside
    if not loop.is_invariant(start) or not isinstance(update, I.BinaryOp):
        return None
    a, amount = update.operands
    if update.opcode not in ("lshr", "ashr", "shl") or a is not phi or \
            not hasattr(amount, "value") or amount.value <= 0:
        return None
    return ShiftInduction(start, update.opcode, amount.value)


def _incoming(phi: I.Phi, pred) -> Value:
    for value, block in phi.incoming:
        if block is pred:
            return value
    raise UnsupportedError(f"phi {phi.ref} has no value for predecessor {pred.ref}")


def _leaves(ty: T.Type) -> list:
    if isinstance(ty, (T.ArrayType, T.StructType, T.IdentifiedStructType)) and \
            not ty.is_vector:
        return [leaf for e in _elements(ty) for leaf in _leaves(e)]
    return [ty]


def _add(b: IRBuilder, ty: T.Type, a: Value, c: Value) -> Value:
    """``a + c`` over the float leaves of ``ty`` (others kept from ``a``).

    The sums accumulate adjoints, whose slots start at +0.0: ``nsz`` lets LLVM fold
    ``0.0 + d`` to ``d`` (an adjoint's sign of zero carries no information)."""
    if ty.is_float:
        return b.fadd(a, c, ("nsz",))
    if not _has_float(ty):
        return a
    out = a
    for i, ety in enumerate(_elements(ty)):
        if _has_float(ety):
            part = _add(b, ety, b.extractvalue(a, i), b.extractvalue(c, i))
            out = b.insertvalue(out, part, i)
    return out


class _Lazy:
    """A sequence whose items are computed on first use (operands a partial reads)."""

    def __init__(self, make) -> None:
        self._make = make
        self._done: dict = {}

    def __getitem__(self, i: int) -> Value:
        if i not in self._done:
            self._done[i] = self._make(i)
        return self._done[i]


def _is_reciprocal(p) -> bool:
    return (isinstance(p, Op) and p.name == "fdiv" and isinstance(p.operands[0], ConstExpr)
            and p.operands[0].value == 1.0)


_ADJOINTS = {op: ReverseGenerator._arith for op in
             ("fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "fpext", "fptrunc", "bitcast",
              "addrspacecast")}
_ADJOINTS.update({
    "select": ReverseGenerator._select,
    "freeze": ReverseGenerator._freeze,
    "extractvalue": ReverseGenerator._extractvalue,
    "insertvalue": ReverseGenerator._insertvalue,
    "extractelement": ReverseGenerator._extractelement,
    "insertelement": ReverseGenerator._insertelement,
    "load": ReverseGenerator._reverse_load,
    "phi": lambda self, st, inst: None,  # on the edges, see _reverse_branch
    "getelementptr": lambda self, st, inst: None,  # pointers have shadows, not adjoints
    "alloca": lambda self, st, inst: None,
})
