"""Fixed-point loops marked from inside (``__enzyme_set_fixed_point``), as fixed-point calls.

A loop of a C or C++ program may say, in its body, that it iterates to a fixed point::

    while (err > tol) {
      __enzyme_set_fixed_point(reduction, max_iters, control, state, bytes, ...);
      err = iterate();
    }

(a negative ``reduction`` or ``max_iters``, or a null ``control``, for the defaults of
``<enzyme/fixed_point.h>``; Fortran's ``!DIR$ ENZYME FIXED_POINT`` lowers to it). :func:`outline`
reads the loop from the module clang makes before optimising it (so that -O2 has not yet
unrolled or rotated it, and what one iteration leaves for the next is in stack slots), and
turns it into ``__enzyme_fixed_point`` of a step of its own
(:class:`~pyzyme.frontends.c.loop_outline.LoopOutliner`), which
:mod:`~pyzyme.frontends.c.fixed_point_calls` then reads as any other.

The step runs one iteration and returns whether the loop goes on: the loop is entered where its
test sends it into the body, and the step ends with the test. A loop tested at its end
(``do ... while``) is the step's body as it is; one tested first (``while``, ``for``) keeps its
first test in the caller, which calls the fixed-point iteration when the test passes, so the
test runs as often as before. The stack slots the loop uses and other code uses too (the error,
a counter, a tolerance) are passed by address and listed as regions, so the derivative's
rounds start from the values they had when the loop ended; the slots only the loop uses are
the step's own.

A loop pyzyme cannot outline so (one left by ``break``, ``return`` or ``goto``, tested in the
middle of its body, marked twice, or with arguments the loop computes) is refused at the
marker's line.
"""

from __future__ import annotations

from pyzyme import ir, naming
from pyzyme.analysis.loops import analyze_loops
from pyzyme.analysis.overwrite import underlying_object
from pyzyme.frontends.c.fixed_point_calls import DEFAULT_MAX_ITERS, DEFAULT_REDUCTION, ENTRY
from pyzyme.frontends.c.loop_outline import LoopOutliner, calls_of, slot_bytes
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantExpr, ConstantFP, ConstantInt, Null, const_float, \
    const_int

__all__ = ["MARKER", "outline"]

#: Enzyme's marker call, in the body of the loop it marks.
MARKER = "__enzyme_set_fixed_point"
_HINT = ("mark a while, do-while or for loop that leaves only by its test, with "
         "__enzyme_set_fixed_point(reduction, max_iters, control, state, bytes, ...) in its "
         "body, its arguments computed before the loop")


def outline(text: str) -> str:
    """``text`` (clang's module before optimisation) with each loop marked by :data:`MARKER`
    run by ``__enzyme_fixed_point`` of a step outlined from it; unchanged when it has none.

    Raises
    ------
    UnsupportedError
        A marked loop pyzyme cannot outline (the marker's line named, with what to do).
    """
    if MARKER not in text:
        return text
    module = ir.parse_module(text)
    if not calls_of(module, MARKER):
        return text
    while True:  # innermost loops first: an outer step then holds the inner loop's call
        calls = calls_of(module, MARKER)
        if not calls:
            break
        _MarkedLoop(module, max(calls, key=_depth)).run()
    module.remove(module.get_function(MARKER))
    return str(module)


def _depth(call) -> int:
    loop = analyze_loops(call.function).loop_of(call.parent)
    return 0 if loop is None else loop.depth


class _MarkedLoop(LoopOutliner):
    """The loop holding one marker call, outlined."""

    def __init__(self, module, call: I.Call) -> None:
        super().__init__(module, call, "fixed-point loop")
        self.where = f"{self.where}: {MARKER}"

    def run(self) -> None:
        self.use(self.loop_around_call(hint="call it in the body of the loop it marks"))
        test, into, exit_, guard = self._shape()
        before = IRBuilder()
        before.position_before(self.loop.preheader.terminator)
        options, states = self._arguments(before)
        self.call.erase()
        self.check_live_outs()
        slots = self.slots()
        by_address = slots["written"] + slots["pointers"] + [
            v for v in slots["values"] if isinstance(v, I.Alloca)]
        values = [v for v in slots["values"] if not isinstance(v, I.Alloca)]
        step = self._step(test, into, slots["own"], by_address, values)
        stated = {underlying_object(p) for p, _ in states}
        args = [step]
        for pointer, size in states:
            args += [self.marker_global("enzyme_fp_state"), pointer, size]
        args += options
        for slot in by_address:
            if slot not in stated:
                args += [self.marker_global("enzyme_checkpoint_region"), slot,
                         const_int(T.i64, slot_bytes(slot))]
        args += by_address + values
        entry = self.module.declare(ENTRY, T.FunctionType(T.void, [T.ptr], var_arg=True))
        if guard:  # the first test stays in the caller, and sends the loop to the call
            block = self.fn.append_block("fixed_point")
            b = IRBuilder(block)
            call = b.call(entry, args, function_type=entry.function_type)
            b.br(exit_)
            test.terminator.replace_uses_of(into, block)
        else:
            b = IRBuilder()
            b.position_before(self.loop.preheader.terminator)
            call = b.call(entry, args, function_type=entry.function_type)
            self.loop.preheader.terminator.replace_uses_of(self.loop.header, exit_)
        call.metadata = [(kind, t) for kind, t in self.call.metadata if kind == "dbg"]
        self.remove_loop(keep=guard)

    # -- reading the loop ------------------------------------------------------------------
    def _shape(self):
        """(the block whose test leaves the loop, where the test enters the body, where it
        leaves to, the blocks of the test run before the body, which stay in the caller)."""
        loop = self.loop
        marked = [c for c in calls_of(self.module, MARKER) if c.parent in self.blocks]
        if len(marked) > 1:
            raise self.refuse("is marked more than once", hint="mark it once")
        edges = {(b, s) for b in loop.blocks for s in b.successors if s not in self.blocks}
        if len(edges) != 1 or len(loop.latches) != 1 or loop.preheader is None:
            raise self.refuse("leaves other than by its test (break, return, goto) or has no "
                              "single back edge", hint=_HINT)
        (test, exit_), = edges
        term = test.terminator
        if not (isinstance(term, I.Branch) and term.is_conditional):
            raise self.refuse("leaves other than by its test (break, return, goto)",
                              hint=_HINT)
        into = term.operands[1] if term.operands[2] is exit_ else term.operands[2]
        if exit_.phis or loop.header.phis:
            raise self.refuse("passes values in registers", hint="compile without "
                              "optimisation of the loop (this is clang's own module)")
        guard: set = set()
        if into is not loop.header:  # tested first: the blocks of the test, up to its exit
            work = [loop.header]
            while work:
                block = work.pop()
                if block in guard:
                    continue
                guard.add(block)
                work += [s for s in block.successors if s in self.blocks and s is not into
                         and s is not loop.header]
            leaks = [(g, s) for g in guard for s in g.successors
                     if s not in guard and s is not exit_ and not (g is test and s is into)]
            if leaks or loop.latches[0] in guard or test not in guard:
                raise self.refuse("is tested in the middle of its body",
                                  hint="test it in its while condition or at its end")
            if self.call.parent in guard:
                raise self.refuse("is tested after its marker (in the middle of its body, or "
                                  "the marker is in its test)",
                                  hint="test the loop in its while condition or at its end, "
                                       "and call the marker in its body")
            if any(isinstance(u, I.Instruction) and u.parent in self.blocks - guard
                   for g in guard for inst in g.instructions for u in inst.users):
                raise self.refuse("passes values from its test to its body in registers",
                                  hint="compile without optimisation of the loop")
        return test, into, exit_, guard

    def _arguments(self, b: IRBuilder):
        """The options for ``__enzyme_fixed_point`` and the (pointer, bytes) states, computed
        before the loop where ``b`` is."""
        args = list(self.call.args)
        if len(args) < 5 or (len(args) - 3) % 2:
            raise self.refuse("is marked without its state", hint="pass the state it "
                              "iterates after the control function: state, bytes, ...")
        reduction, max_iters, control = (self._before(b, a) for a in args[:3])
        options = []
        if reduction.type.is_pointer:  # Fortran passes its arguments by reference
            reduction = b.load(T.double, reduction)
        if reduction.type == T.float:
            reduction = b.fpext(reduction, T.double)
        if reduction.type != T.double:
            raise self.refuse(f"has a reduction of type {reduction.type}, not double",
                              hint=_HINT)
        if not (isinstance(reduction, ConstantFP) and reduction.value < 0):
            if not isinstance(reduction, ConstantFP):  # negative: the default
                reduction = b.select(b.fcmp("olt", reduction, const_float(T.double, 0)),
                                     const_float(T.double, DEFAULT_REDUCTION), reduction)
            options += [self.marker_global("enzyme_fp_reduction"), reduction]
        max_iters = self._integer(b, max_iters, "the most iterations")
        if not (isinstance(max_iters, ConstantInt) and max_iters.signed < 0):
            if not isinstance(max_iters, ConstantInt):
                max_iters = b.select(b.icmp("slt", max_iters, const_int(T.i64, 0)),
                                     const_int(T.i64, DEFAULT_MAX_ITERS), max_iters)
            options += [self.marker_global("enzyme_fp_max_iters"), max_iters]
        function = control.operands[0] if isinstance(control, ConstantExpr) \
            and control.operands else control
        if isinstance(function, ir.Function):
            options += [self.marker_global("enzyme_fp_control"), function]
        elif not isinstance(control, Null):
            raise self.refuse("has a control function pyzyme cannot tell before the loop",
                              hint="pass the function itself, or a null pointer")
        states = []
        for k in range(3, len(args), 2):
            pointer = self._before(b, args[k])
            if not pointer.type.is_pointer:
                raise self.refuse("is marked with a state that is not a pointer", hint=_HINT)
            states.append((pointer, self._integer(b, self._before(b, args[k + 1]),
                                                  "the bytes of its state")))
        return options, states

    def _before(self, b: IRBuilder, value):
        found = self.materialize(b, value)
        if found is None:
            raise self.refuse("is marked with arguments the loop computes", hint=_HINT)
        return found

    def _integer(self, b: IRBuilder, value, what: str):
        if value.type.is_pointer:
            value = b.load(T.i64, value)
        if not value.type.is_int:
            raise self.refuse(f"is marked with {what} of type {value.type}, not an integer",
                              hint=_HINT)
        if isinstance(value, ConstantInt):
            return const_int(T.i64, value.signed)
        return value if value.type == T.i64 else b.sext(value, T.i64)

    # -- the step ------------------------------------------------------------------------------
    def _step(self, test, into, own, by_address, values):
        """``i32 step(i64 i, slots..., values...)``: the body from where the test enters
        it, then the test, whose result it returns."""
        params = [("i", T.i64)] + [(v.name or "slot", T.ptr) for v in by_address] \
            + [(v.name or "value", v.type) for v in values]
        step = self.new_step(naming.fixed_point_step(self.fn.name), T.i32, params)
        mapping: dict = dict(zip(by_address + values, step.args[1:]))
        self.own_slots(IRBuilder(step.append_block("entry")), own, mapping)
        goes_on = test.terminator.operands[1] is into

        def end(bb: IRBuilder, term) -> None:
            cond = mapping.get(term.operands[0], term.operands[0])
            if not goes_on:
                cond = bb.xor(cond, const_int(T.i1, 1))
            bb.ret(bb.zext(cond, T.i32))
        self.copy_blocks(step, mapping, into, {test: end})
        return step
