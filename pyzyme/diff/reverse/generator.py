"""Reverse mode: a forward sweep that runs the function, then a reverse sweep of adjoints.

One generator emits both forms Enzyme has:

- the *combined* function (``diffe_f``): the forward sweep, then, where the primal returns, the
  reverse sweep in the same function. What the reverse sweep needs lives in stack slots (which
  LLVM turns back into registers) and, inside loops, in arrays indexed by loop counters
  (:mod:`pyzyme.diff.tape.cache`). This is the fast path.
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

The generator is assembled from one module per part: :mod:`~pyzyme.diff.reverse.augmented` (the
forward sweep), :mod:`~pyzyme.diff.reverse.control` (the reverse sweep's blocks and branches),
:mod:`~pyzyme.diff.reverse.values` (recompute or cache), :mod:`~pyzyme.diff.reverse.adjoints`
(adjoint code), :mod:`~pyzyme.diff.calls.dispatch` (calls) and :mod:`~pyzyme.diff.tape.cache`,
on the shared state of a :class:`~pyzyme.diff.context.ReverseContext`, whose methods are the API
the call handlers use.
"""

from __future__ import annotations

from pyzyme.analysis.activity import Activity, analyze_activity, receives_varied
from pyzyme.analysis.call_graph import call_graph, on_cycles
from pyzyme.analysis.cfg import dominators, error_only_blocks, reverse_post_order
from pyzyme.analysis.finite import nonfinite_values
from pyzyme.analysis.loops import analyze_loops
from pyzyme.analysis.overwrite import analyze_overwrites, released_in_loops
from pyzyme.transforms import distribute, float_moves
from pyzyme import naming
from pyzyme.transforms.alias_scopes import ScopeTable
from pyzyme.diff.reverse.adjoints import ReverseAdjoints, sum_flags
from pyzyme.diff.reverse.carried import ReverseCarried
from pyzyme.diff.reverse.control import ReverseControl
from pyzyme.diff.reverse.augmented import ForwardSweep
from pyzyme.diff.calls import dispatch as calls
from pyzyme.diff.context import ReverseContext
from pyzyme.diff.leaves import has_float
from pyzyme.diff.signature import ReverseSignature, SplitPair
from pyzyme.diff.tape.releases import Releases
from pyzyme.diff.reverse.values import ReverseValues
from pyzyme.diff.reverse.interior import interior_versions
from pyzyme.diff.reverse.versions import FiniteWatch, one_thread_version
from pyzyme.diff.runtime_checks import runtime_values
from pyzyme.diff.tape.cache import TapeCache
from pyzyme.errors import TypeAnalysisError, UnsupportedError, error_context
from pyzyme.transforms.parallel_body import apart_slots
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.names import readable
from pyzyme.settings import Options
from pyzyme.rules import spec
from pyzyme.rules.table import RuleTable

__all__ = ["ReverseSignature", "ReverseGenerator", "SplitPair"]


class ReverseGenerator(ForwardSweep, ReverseControl, ReverseValues, ReverseAdjoints,
                       ReverseCarried):
    """Builds reverse-mode derivatives of the functions of one module, memoized.

    Parameters
    ----------
    module
        The module holding the functions; derivatives are added to it.
    rules
        The rule table (:func:`pyzyme.rules.default_rules`).
    options
        What the derivatives are generated under (:class:`~pyzyme.settings.Options`).
    later_round
        Whether a later round differentiates the generated code (C's nested derivatives):
        the caches of a loop then keep a block each, whose type that round can tell.
    """

    def __init__(self, module, rules: RuleTable, options: Options | None = None,
                 later_round: bool = False) -> None:
        self.module = module
        self.later_round = later_round
        self.rules = rules
        self.options = options if options is not None else Options()
        self.sum_flags = sum_flags(self.options)
        self._done: dict[tuple, object] = {}
        self.tapes: dict = {}   # generated function -> its TapeCache (for printing and sizes)
        # What is known of each function's arguments, for type analysis (Numba: from the ABI).
        self.type_seeds: dict = {}
        # fn -> {pointer param: (count param, size param)}: the bytes the memory a pointer
        # parameter points to spans, their product (a frontend's facts: Numba's arrays).
        self.array_extents: dict = {}
        # fn -> the parameters holding an array's length along an axis (or its element
        # count): a loop counting up to one runs at most that many times (Numba's shapes).
        self.axis_extents: dict = {}
        # The functions nested callees defer releases to by address (Releases.by_address).
        self.released_by_address: set = set()
        self.types: dict = {}   # function -> its type analysis (or the error it raised)
        self.scopes = ScopeTable(module)
        # The function the reverse sweep calls with each arithmetic result's adjoint (a
        # GradientLog row: a C program's enzymeLogGrad), and the strings it is passed.
        self.gradient_log = next((r.names[0] for r in rules.rows()
                                  if isinstance(r, spec.GradientLog)), None)
        self.log_texts: dict = {}
        self._recursive: set | None = None  # the module's functions on call cycles, once

    def recursive(self, fn) -> bool:
        """Whether ``fn`` is on a call cycle of the module (as it was when first asked: the
        primal's cycles; the derivatives added since only repeat them)."""
        if self._recursive is None:
            self._recursive = on_cycles(call_graph(self.module))
        return fn in self._recursive

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
                owned = st.releases.owned
                lists = [(owned, 24)] if owned is not None else []
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
            if not has_float(ret):
                raise UnsupportedError(f"{fn.ref} returns {ret}, which carries no derivative")
        base = name or naming.reverse_function(fn.name, sig.split)
        if not sig.split:
            rev_params = params + ([ret] if sig.return_active else [])
            rev = self._add(base, self.combined_return(fn, sig), rev_params, fn, shadows, sig)
            return rev, rev
        aug_ret = T.ptr if ret == T.void else T.StructType(
            [ret, ret, T.ptr] if sig.return_shadow else [ret, T.ptr])
        aug_params = params + ([T.ptr] if sig.nested else [])
        aug = self._add(naming.augmented_function(fn.name), aug_ret, aug_params, fn, shadows,
                        sig, with_dret=False)
        if sig.nested:
            aug.args[-1].name = "releases"
        adj = self.adjoint_types(fn, sig)
        rev_ret = T.StructType(adj) if adj else T.void
        rev_params = params + ([ret] if sig.return_active else []) + [T.i1, T.ptr]
        rev = self._add(base, rev_ret, rev_params, fn, shadows, sig, tape=True)
        return aug, rev

    def _add(self, name, ret, params, fn, shadows, sig, with_dret=True, tape=False):
        new = self.module.add_function(self.module.unique_global_name(name),
                                       T.FunctionType(ret, params), prefix="internal",
                                       suffix=fn.personality)
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
    def _body(self, fn, sig: ReverseSignature, fwd, rev) -> ReverseContext:
        self._float_copies(fn)
        # No reverse sweep runs after an error: blocks that can only end in one get none.
        doomed = frozenset(error_only_blocks(fn, sig.status_return))
        activity = self._activity(fn, sig, doomed)
        float_moves.refuse_punned_reads(fn, activity.varied)
        loops = analyze_loops(fn)
        if loops.irreducible:
            src, dst = loops.irreducible[0]
            raise UnsupportedError(
                f"{fn.ref} has a cycle with two entries ({src.ref} -> {dst.ref}); reverse mode "
                f"needs natural loops")
        fwd_entry = fwd.append_block("allocas")
        rev_entry = rev.append_block("allocas") if sig.split else fwd_entry
        tape = TapeCache(fwd_entry, rev_entry, self.module, self.scopes,
                         shared_blocks=not self.later_round, recursive=self.recursive(fn))
        # A nested pair defers into its caller's list, the augmented primal's last parameter.
        releases = Releases(tape, self.module, rev.name, fwd.args[-1] if sig.nested else None,
                            self.released_by_address)
        body = sig.parallel_body
        apart = apart_slots(fn, body.distinct) if body is not None else None
        released = released_in_loops(fn, loops)
        st = ReverseContext(self, fn, sig, fwd, rev, activity, loops,
                            analyze_overwrites(fn, apart, released), tape, releases)
        st.released_now = released
        st.doms = dominators(fn)
        st.doomed = doomed
        if self.options.strong_zero:
            st.nonfinite = nonfinite_values(fn, self.rules, st.doms, apart)
            if sig.split and sig.parallel_body is not None:
                st.finite_watch = FiniteWatch(st.nonfinite)
        st.runtime = runtime_values(fn, activity, st.where, self.options)
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
            self.forward_block(st, block)
        self.forward_phis(st)
        for block in reversed(order):
            self.reverse_block(st, block)
        self.finalize(st)
        if self.options.distribute_loops:
            self._distribute(st)
        if st.finite_watch is not None:
            st.finite_watch.finish(st)
        alone = one_thread_version(st)
        if alone is not None and self.options.distribute_loops:
            # the one-task copy's loops are single blocks again: its adds are plain
            self._distribute(st, alone)
        interior_versions(st, self.scopes, self.options.distribute_loops)
        return st

    def _distribute(self, st: ReverseContext, copies: dict | None = None) -> None:
        """Split the reverse loops whose accumulations chain from one iteration to the next
        (a stencil's adjoint) into loops LLVM can vectorize (:mod:`pyzyme.transforms.distribute`);
        with ``copies``, those of a copy of the sweep (a reverse block -> its copy)."""
        for loop in st.loops.loops:
            state = st.tape.loops.get(loop)
            if len(loop.blocks) != 1 or state is None:
                continue
            block = st.rblocks[loop.header]
            if copies is not None:
                block = copies.get(block)
                if block is None:
                    continue
            p = distribute.plan(block, state.counter.rev, st.tape.scope)
            distribute.distribute(p, self.scopes)

    def _make_blocks(self, st: ReverseContext, order: list) -> None:
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

    def _float_copies(self, fn) -> None:
        """Floats that ``fn`` copies through integers become float copies
        (:mod:`pyzyme.transforms.float_moves`), so their adjoints flow back."""
        loads = float_moves.candidates(fn)
        if not loads:
            return
        try:
            types = self.function_types(fn)
        except TypeAnalysisError:
            return  # the copies stay integers; the forward sweep refuses them by name
        float_moves.floats_as_floats(fn, types, loads)

    # -- activity ----------------------------------------------------------------------
    def _activity(self, fn, sig: ReverseSignature, doomed: frozenset):
        """Activity analysis of ``fn``. Memory it allocates gets a shadow, except where
        nothing varied is written into it and type analysis finds no floats in it (a list of
        integers: its growth then needs no shadow either). Those are found after a first
        pass that gives every allocation a shadow, so that type analysis runs only for them."""
        def allocates(call) -> bool:
            return calls.may_allocate(self.rules, call)

        integers: set = set()

        def policy(call: I.CallBase, is_varied) -> bool:
            if call in integers and not receives_varied(call, is_varied, allocates, doomed):
                return False
            return calls.call_result_varied(self.rules, call, is_varied)

        def analyze():
            return analyze_activity(fn, sig.activities, policy,
                                    return_active=sig.return_active, may_allocate=allocates,
                                    skip_blocks=doomed)

        activity = analyze()
        is_varied = activity.varied.__contains__
        for inst in fn.instructions():
            callee = inst.called_function if isinstance(inst, I.CallBase) else None
            if callee is not None and inst in activity.varied and isinstance(
                    self.rules.lookup(callee.name, "call"), spec.Allocation) and not \
                    receives_varied(inst, is_varied, allocates, doomed) and \
                    self.holds_no_floats(inst):
                integers.add(inst)
        return analyze() if integers else activity
