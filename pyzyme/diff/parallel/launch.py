"""Parallel loops, both modes: the outlined loop body differentiated as a function of its own,
and launched by the primal's launcher (:class:`~pyzyme.rules.spec.ParallelFor`).

A parallel loop is a call ``launch(body, args, dims, steps, data, ndim, nargs, threads)``: worker
threads call ``body(args', dims', steps, data)`` on slices of ``dims[0]`` *rows* (Numba: one row
per chunk of the prange's iterations, ``args[k]`` advanced by ``steps[k]`` per row). The
derivative keeps that shape:

- forward mode launches the body's forward derivative row by row, each row's shadows advanced
  as its arguments are: tangents follow the primal's schedule;
- reverse mode's forward sweep launches the body's augmented primal row by row and keeps each
  row's tape, and the thread id the row ran on, in a *launch block*; the reverse sweep launches
  one task per thread id, each running the reverse functions of the rows that thread ran, last
  first. Memory a body indexes by its thread id (Numba's per-thread reduction slots) is then
  read and written in the reverse by one task only, whichever threading layer ran the rows and
  however its scheduler assigned them. Adjoints of memory several iterations read go into
  shadow memory atomically (:attr:`~pyzyme.diff.signature.ReverseSignature.shared_adjoints`),
  except where the memory is the body's own, or where every iteration reads it: then into a
  copy per task (:mod:`pyzyme.diff.parallel.private`).

The launch block (malloc'ed, one per launch, freed when the reverse sweep is done) holds, in
8-byte words: the number of rows, of thread ids, ``data``, the derivative launch's own
``args``/``dims``/``steps`` (one item each), the address of the body's reverse function and
the word where the tapes start (reverse mode), the primal's ``args``, their shadows (per lane),
``dims`` and ``steps``; then a tape and a thread id per row, and one byte per launched item
(the derivative launch's ``args[0]`` walks these bytes, so an item's index is its offset):
:mod:`pyzyme.diff.parallel.block`.
The reverse launch takes each row's tape (null once its reverse has freed it); a tape dropped
unused (split mode) has its rows' tapes discarded, by their reverse functions, before the
block is freed (:func:`_discard_function`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import wraps
from itertools import combinations

from pyzyme import naming
from pyzyme.analysis.activity import Activity
from pyzyme.analysis.cfg import dominators, reachable_from
from pyzyme.analysis.overwrite import (identified_object, may_alias, swapped_apart,
                                       underlying_object, underlying_objects)
from pyzyme.analysis.typetree import TypeTree
from pyzyme.analysis.unread_slots import unread_after_launch
from pyzyme.diff.memory_calls import free_function, malloc
from pyzyme.diff.parallel import block as B
from pyzyme.diff.parallel.private import (copy_stride, private_copies, privatized,
                                          sum_private_copies)
from pyzyme.diff.signature import ForwardSignature, ParallelBody, ReverseSignature
from pyzyme.errors import TypeAnalysisError, UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import Function
from pyzyme.ir.values import ConstantInt, Value, const_int, const_null
from pyzyme.rules import spec
from pyzyme.transforms.loop_rewrites import rewrite_loops
from pyzyme.transforms.parallel_body import (
    CARGS,
    SHARED,
    argument_slots,
    split_arguments,
)

__all__ = ["varied", "forward_mode", "augmented", "reverse"]

# -- the call and its parts ----------------------------------------------------------------
def _launch_handler(handler):
    """``handler`` where an argument of the launch carries a derivative (the launch as it is
    elsewhere); its errors name the launcher as their call (unless they name another) and
    the innermost loop body they come from (``parallel_body``), so the frontend finds that
    loop's Python line."""
    @wraps(handler)
    def handle(cx, inst: I.CallBase, row: spec.ParallelFor) -> None:
        if not any(a in cx.activity.varied for a in inst.args):
            cx.clone(inst)
            return
        try:
            handler(cx, inst, row)
        except UnsupportedError as err:
            if not getattr(err, "callee", None):
                err.callee = inst.called_function.name
            body = inst.args[row.body]
            if not getattr(err, "parallel_body", None) and isinstance(body, Function):
                err.parallel_body = body.name
            raise
    return handle


def varied(row, inst: I.CallBase, is_varied) -> bool:
    """A launch returns nothing; what its body writes is found through its arguments."""
    return False


def _body(cx, inst: I.CallBase, row: spec.ParallelFor) -> Function:
    body = inst.args[row.body]
    if not isinstance(body, Function) or body.is_declaration:
        raise UnsupportedError(
            f"{cx.where} launches a parallel loop (a prange / parallel=True loop) whose body "
            f"pyzyme cannot read ({body!r})",
            hint="write the loop with range instead of numba.prange, or compile the function "
                 "with parallel=False")
    return body


def _layout(cx, inst: I.CallBase, row: spec.ParallelFor, lanes: int,
            data_lanes: int = 0) -> B.Layout:
    count, ndim = inst.args[row.array_count], inst.args[row.inner_ndim]
    if not (isinstance(getattr(count, "value", None), int)
            and isinstance(getattr(ndim, "value", None), int)):
        raise UnsupportedError(
            f"{cx.where} launches a parallel loop with a number of arguments or dimensions "
            f"known only at run time: {inst}",
            hint="write the loop with range instead of numba.prange")
    # ``steps`` holds an outer step per argument, then a stride per core dimension of each
    # argument (a 2-D array has two, where ``dims`` may list a size once for several):
    # its length is that of the array the caller filled.
    if inst.args[row.body].name.startswith(naming.PARALLEL_BODY):
        return B.Layout(count.value, ndim.value, 1, lanes, data_lanes)  # see _launch
    steps = underlying_object(inst.args[row.steps])
    if isinstance(steps, I.Alloca) and isinstance(steps.allocated_type, T.ArrayType) \
            and steps.count is None and steps is inst.args[row.steps]:
        nsteps = steps.allocated_type.count
    else:  # passed on from the launching function's own caller: the words the body reads
        read = argument_slots(_body(cx, inst, row).args[2], word=True)
        if read is None or any(not isinstance(u, I.Load) for uses in read.values()
                               for u in uses):
            raise UnsupportedError(
                f"{cx.where} launches a parallel loop (a prange / parallel=True loop) whose "
                f"steps array pyzyme cannot follow: {inst}",
                hint="write the loop with range instead of numba.prange")
        nsteps = max(read, default=-1) + 1
    return B.Layout(count.value, ndim.value, nsteps, lanes, data_lanes)


#: The split body's parameters (see :func:`_split_body`): ``args`` (its slots that carry
#: derivatives), ``dims``, ``steps``, ``data``, ``cargs`` (the others), ``shared``.
_BODY_ACTIVITIES = (Activity.DUPLICATED, Activity.CONST, Activity.CONST, Activity.CONST,
                    Activity.CONST, Activity.CONST)


def _split_body(cx, inst: I.CallBase, row: spec.ParallelFor, layout: B.Layout,
                reverse: bool = True):
    """The body, reading the slots of ``args`` that carry no derivative from a parameter of
    their own (:func:`~pyzyme.transforms.parallel_body.split_arguments`); what the caller
    stores into each slot (``{k: [values]}``, those reaching the launch), and the slots that
    carry a derivative: those holding memory varied values are stored into."""
    body = _body(cx, inst, row)
    slots = argument_slots(inst.args[row.args], launch=inst)
    if not isinstance(inst.args[row.args], I.Alloca) and \
            not body.name.startswith(naming.PARALLEL_BODY):
        # Handed in by a caller: which arrays carry derivatives is not seen here. (A
        # derivative's own launch passes only its items there: no derivative.)
        slots = None
    if slots is None:
        raise UnsupportedError(
            f"{cx.where} launches a parallel loop (a prange / parallel=True loop) with an "
            f"argument array pyzyme cannot follow: {inst}",
            hint="write the loop with range instead of numba.prange")
    stored = {k: _reaching(inst, [u for u in uses if isinstance(u, I.Store)])
              for k, uses in slots.items()}
    # A slot the body never reads carries nothing into it (the views a rebased copy moves
    # from another's pointer: :mod:`pyzyme.transforms.view_bases`).
    read = {k for k, uses in (argument_slots(body.args[0]) or {}).items()
            if any(isinstance(u, I.Load) for u in uses)}
    active = frozenset(k for k, values in stored.items()
                       if k in read and any(_carries(cx, v) for v in values))
    # Under runtime activity the shadow of such an array is the array itself where it
    # turns out inactive: the body would add adjoints into the caller's array (and read
    # its values as tangents), where serial code tests each access.
    unknown = [v for k in sorted(active) for v in stored[k]
               if v in cx.runtime or any(o in cx.runtime for o in underlying_objects(v) or ())]
    if unknown:
        raise UnsupportedError(
            f"{cx.where} launches a parallel loop (a prange / parallel=True loop) over an "
            f"array whose activity is known only at run time (runtime activity: where it "
            f"turns out inactive its shadow is the array itself): {unknown[0]}",
            hint="pass the loop an array whose activity is known (choose between Duplicated "
                 "and Const arrays outside the function), or write the loop with range "
                 "instead of numba.prange")
    everything = frozenset(range(layout.count))
    split = split_arguments(cx.module, body, everything - active,
                            everything - {row.schedule})
    sizes = [u for uses in (argument_slots(split.args[1], word=True) or {}).values()
             for u in uses if isinstance(u, I.Load)]   # ``dims``: a row count, core sizes
    rewrite_loops(cx.module, split, cx.options, reverse=reverse, interchange_ok=False,
                  nonnegative=sizes)
    return split, stored, active


def _reverse_facts(cx, inst: I.CallBase, row: spec.ParallelFor, split, stored: dict,
                   active: frozenset):
    """What the body's reverse may rely on (a :class:`ParallelBody`), and the privatized
    slots (:func:`~pyzyme.diff.parallel.private.privatized`)."""
    stable = frozenset(k for k, values in stored.items()
                       if values and all(_kept(cx, inst, v) for v in values))
    known = ParallelBody(SHARED, _distinct([v for k in sorted(active) for v in stored[k]]),
                         row.schedule, _first_index(row, stored.get(row.schedule, ())),
                         stable, unread=_unread(cx, inst, row, stored, active),
                         apart=not cx.runtime)
    private = privatized(cx, split, known, {k: stored[k] for k in active})
    if private:
        known = replace(known, private=frozenset(k for k, _, _ in private))
    return known, private


def _unread(cx, inst: I.CallBase, row: spec.ParallelFor, stored: dict,
            active: frozenset) -> frozenset:
    """The active slots whose memory's primal contents no part of the derivative reads after
    the launch (:func:`~pyzyme.analysis.unread_slots.unread_after_launch`): a reduction's
    per-thread sums where the primal result is not returned."""
    sig = cx.sig
    result = cx.old.args[0] if sig.result_unread and sig.status_return and cx.old.args \
        else None
    args = inst.args[row.args]
    return frozenset(k for k in active if len(stored.get(k, ())) == 1
                     and unread_after_launch(cx.old, inst, stored[k][0], args,
                                             cx.activity.is_active, result))


def _kept(cx, launch: I.CallBase, pointer: Value) -> bool:
    """Whether memory at ``pointer``, passed to ``launch``, keeps its contents from the
    launch until the reverse sweep reaches it."""
    if not pointer.type.is_pointer:
        return False
    return cx.stable(pointer) and cx.overwrites.written_after(launch, pointer) is None


def _first_index(row: spec.ParallelFor, schedules) -> int | None:
    """A lower bound of the indices of the schedule the launch passes (``schedules``: the
    values stored into its slot): the least constant first index the scheduler was given,
    or 0 for an unsigned schedule; None where neither is known."""
    for schedule in schedules:
        for call in getattr(schedule, "users", ()):
            callee = call.called_function if isinstance(call, I.CallBase) else None
            if callee is None or callee.name not in row.schedulers \
                    or call.args[row.scheduler_schedule] is not schedule:
                continue
            starts = argument_slots(call.args[row.scheduler_starts], launch=call, word=True)
            # what reaches this call: two loops of a time step may share the slots
            values = [v for uses in (starts or {}).values()
                      for v in _reaching(call, [u for u in uses if isinstance(u, I.Store)])]
            unsigned = callee.name == row.unsigned_schedule
            if values and all(isinstance(v, ConstantInt) for v in values):
                least = min(v.signed for v in values)
                return max(least, 0) if unsigned else least
            return 0 if unsigned else None
    return None


def _seed_argument_types(cx, body, stored: dict) -> None:
    """The body's type analysis starts from what this function knows of the arrays it puts
    in the argument array (``stored``: see :func:`_split_body`; a body that only copies
    them, as LLVM turns ``v[i] = u[i]`` into, shows no type of its own)."""
    try:
        types = cx.types()
    except TypeAnalysisError:
        return
    pointee = TypeTree()
    for k, values in stored.items():
        if len(values) != 1:
            continue
        for path, ct in types.tree(values[0]):
            if path[0] in (-1, 0):
                pointee.insert((B.W * k, *path[1:]), ct)
    if pointee:
        tree = TypeTree.pointer_to(pointee)
        cx.seed_types(body, {0: tree, CARGS: tree})  # args and cargs


def _carries(cx, pointer: Value) -> bool:
    """Whether the memory at ``pointer`` (put in a launch's argument array) may hold values
    that carry derivatives. A stack slot through which Numba passes a scalar counts as varied
    once its address escapes into the array; it carries one only where a varied value is
    stored into it."""
    if pointer not in cx.activity.varied:
        return False
    if not isinstance(pointer, I.Alloca):
        return True
    for user in pointer.users:
        if isinstance(user, I.Store) and user.operands[1] is pointer:
            if user.operands[0] in cx.activity.varied:
                return True
        elif isinstance(user, I.Store) and user.operands[0] is pointer:
            continue  # its address put in an argument array
        elif isinstance(user, I.CallBase) and user.called_function is not None and \
                user.called_function.name.startswith("llvm.lifetime"):
            continue
        else:
            return True  # read or written some other way: as activity analysis says
    return False


def _reaching(launch: I.CallBase, stores: list) -> list:
    """The values of ``stores`` (into one slot of the argument array) that ``launch`` may
    read: the last one before it in its block, where there is one; else the one in a block
    that dominates the launch after which no other can run (the others before it in its
    block, or in blocks it cannot reach: a loop that sets the slot again before each launch,
    after the slot was zeroed once where it was made); else all of them (an array several
    launches share, filled elsewhere)."""
    block = launch.parent.instructions
    before = [s for s in stores if s.parent is launch.parent
              and block.index(s) < block.index(launch)]
    if before:
        return [max(before, key=block.index).operands[0]]
    fn = launch.parent.parent
    dom = dominators(fn)
    for last in stores:
        if last.parent is launch.parent or not dom.dominates(last.parent, launch.parent):
            continue
        after = reachable_from(last.parent)
        order = last.parent.instructions
        if all(other is last or (other.parent not in after and (
                other.parent is not last.parent or order.index(other) < order.index(last)))
               for other in stores):
            return [last.operands[0]]
    return [s.operands[0] for s in stores]


def _distinct(pointers) -> bool:
    """Whether ``pointers`` (the arrays of a launch that carry derivatives) point into
    different objects, each identified (an argument the caller marked ``noalias``, as the API
    does for arrays it found apart; a stack slot, as Numba passes a scalar; memory allocated
    here: :func:`~pyzyme.analysis.overwrite.identified_object`)."""
    def identified(p) -> bool:
        objects = underlying_objects(p)    # through phis: the grids a time loop swaps
        return bool(objects) and all(identified_object(o) for o in objects)

    # One launch gets both grids a time loop swaps (v, w = w, v): apart in that launch.
    return all(identified(p) for p in pointers) and \
        not any(may_alias(a, b) and not swapped_apart(a, b)
                for a, b in combinations(pointers, 2))


def _fill(cx, b: IRBuilder, inst, row, layout: B.Layout, value, shadows,
          data_shadows=()) -> Value:
    """In the derivative, before the launch: the launch block, filled. ``value`` maps the
    primal's operands; ``shadows`` are the shadows of its ``args`` array, one per lane, and
    ``data_shadows`` those of its ``data``, where it has any."""
    dims = value(inst.args[row.dims])
    nrows = b.load(T.i64, dims, 8, name="parfor.rows")
    threads = value(inst.args[row.threads])
    words = b.add(B.i64(layout.fixed), b.mul(nrows, B.i64(2)))
    size = b.add(b.mul(words, B.i64(B.W)), b.add(nrows, threads))
    block = malloc(cx.module, b, size, "parfor.block")
    B.store(b, nrows, block, B.NROWS)
    B.store(b, B.i64(0), block, B.REVERSE)
    B.store(b, B.i64(layout.fixed), block, B.TAPES)
    B.store(b, threads, block, B.NSLOTS)
    B.store(b, value(inst.args[row.data]), block, B.DATA)
    args = value(inst.args[row.args])
    for k in range(layout.count):
        B.store(b, b.load(T.ptr, b.gep(T.ptr, args, [B.i64(k)]), 8), block, B.ARGS + k)
    for lane, shadow in enumerate(shadows):
        for k in range(layout.count):
            # The split body reads no shadow of an argument without one (the schedule,
            # Const arrays): its slot may hold anything.
            s = b.load(T.ptr, b.gep(T.ptr, shadow, [B.i64(k)]), 8)
            B.store(b, s, block, layout.shadows + lane * layout.count + k)
    for k in range(layout.ndim + 1):
        B.store(b, b.load(T.i64, b.gep(T.i64, dims, [B.i64(k)]), 8), block, layout.dims + k)
    steps = value(inst.args[row.steps])
    for k in range(layout.nsteps):
        B.store(b, b.load(T.i64, b.gep(T.i64, steps, [B.i64(k)]), 8), block, layout.steps + k)
    for lane, shadow in enumerate(data_shadows):
        B.store(b, shadow, block, layout.data_shadows + lane)
    return block


def _launch(b: IRBuilder, inst: I.CallBase, row, layout: B.Layout, block: Value, tramp,
            items: Value, threads: Value) -> None:
    """``launch(tramp, ...)`` over ``items`` items, one byte each of the block's index
    region, with the primal's launcher and thread count."""
    nrows = B.load(b, T.i64, block, B.NROWS)
    index = b.gep(T.i8, block, [b.add(B.i64(layout.fixed * B.W),
                                      b.mul(nrows, B.i64(2 * B.W)))])
    B.store(b, index, block, B.TARGS)
    B.store(b, items, block, B.TDIMS)
    B.store(b, B.i64(1), block, B.TSTEPS)
    args = [None] * len(inst.args)
    args[row.body] = tramp
    args[row.args] = B.word(b, block, B.TARGS)
    args[row.dims] = B.word(b, block, B.TDIMS)
    args[row.steps] = B.word(b, block, B.TSTEPS)
    args[row.data] = block
    args[row.inner_ndim] = const_int(inst.args[row.inner_ndim].type, 0)
    args[row.array_count] = const_int(inst.args[row.array_count].type, 1)
    args[row.threads] = threads
    b.call(inst.called_function, args)


# -- trampolines: what each worker runs ------------------------------------------------------
class _Trampoline:
    """``void tramp(ptr args, ptr dims, ptr steps, ptr block)``: the derivative launch's body.
    Its items are the bytes of the block's index region from ``args[0]``, ``dims[0]`` of
    them; each is a row or a thread id, as the sweep says."""

    def __init__(self, module, name: str, layout: B.Layout) -> None:
        self.module, self.layout = module, layout
        self.fn = module.add_function(module.unique_global_name(name),
                                      T.FunctionType(T.void, [T.ptr] * 4), prefix="internal")
        targs, tdims, _, block = self.fn.args
        targs.name, tdims.name, block.name = "items", "count", "block"
        self.block = block
        entry = self.fn.append_block("entry")
        b = self.b = IRBuilder(entry)
        n = layout.count
        self.nrows = B.load(b, T.i64, block, B.NROWS, "rows")
        self.nslots = B.load(b, T.i64, block, B.NSLOTS, "slots")
        self.data = B.load(b, T.ptr, block, B.DATA, "data")
        self.steps = B.word(b, block, layout.steps, "steps")
        # The rows' words, from a base at a constant offset: type analysis then records what
        # they hold at that one offset of the block, where an index into the block itself
        # spread it over every word (the rows' tapes over ``steps`` and ``data``, and through
        # the body's tape into the next round: trees of thousands of entries, minutes of
        # analysis for the hvp of a parallel stencil).
        self.rows = B.word(b, block, layout.fixed, "rows.base")
        index = b.gep(T.i8, self.rows, [b.mul(self.nrows, B.i64(2 * B.W))])
        start = b.load(T.ptr, targs, 8)
        self.first = b.sub(b.ptrtoint(start, T.i64), b.ptrtoint(index, T.i64), name="first")
        self.count = b.load(T.i64, tdims, 8, name="n")
        self.args = b.alloca(T.ArrayType(n, T.ptr), name="row.args")
        self.shadows = [b.alloca(T.ArrayType(n, T.ptr), name=f"row.shadows{lane}")
                        for lane in range(layout.lanes)]
        # The same array, for the slots carrying no derivative: through an identity that
        # forward mode over this derivative (hvp) sees as inactive.
        self.constant = b.call(_constant_function(module), [self.args], name="row.cargs")
        # One thread id, one task: no other thread adds into the same adjoints.
        self.shared = b.icmp("ugt", self.nslots, B.i64(1), name="shared")
        self.dims = b.alloca(T.ArrayType(layout.ndim + 1, T.i64), name="row.dims")
        b.store(B.i64(1), self.dims, 8)
        for k in range(1, layout.ndim + 1):
            b.store(B.load(b, T.i64, block, layout.dims + k),
                    b.gep(T.i64, self.dims, [B.i64(k)]), 8)

    def tapes(self, b: IRBuilder, r: Value) -> Value:
        return B.word(b, self.rows, r)

    def thread_ids(self, b: IRBuilder, r: Value) -> Value:
        return B.word(b, self.rows, b.add(self.nrows, r))

    def row(self, b: IRBuilder, r: Value, task: Value | None = None) -> list[Value]:
        """Set the row buffers to row ``r`` of the primal launch (arguments and shadows
        advanced by ``steps[k] * r`` bytes; a privatized slot's shadow, in reverse ``task``,
        that task's copy where there are copies); the body's arguments."""
        layout = self.layout
        private = {k: p for p, (k, _) in enumerate(layout.private)} if task is not None \
            else {}
        for k in range(layout.count):
            offset = b.mul(r, B.load(b, T.i64, self.block, layout.steps + k))
            b.store(b.gep(T.i8, B.load(b, T.ptr, self.block, B.ARGS + k), [offset]),
                    b.gep(T.ptr, self.args, [B.i64(k)]), 8)
            for lane, buf in enumerate(self.shadows):
                base = B.load(b, T.ptr, self.block, layout.shadows + lane * layout.count + k)
                if k in private:
                    words = layout.privates + 2 * private[k]
                    copies = B.load(b, T.ptr, self.block, words)
                    stride = copy_stride(b, B.load(b, T.i64, self.block, words + 1))
                    mine = b.gep(T.i8, copies, [b.mul(task, stride)])
                    base = b.select(b.icmp("eq", copies, const_null(T.ptr)), base, mine)
                b.store(b.gep(T.i8, base, [offset]), b.gep(T.ptr, buf, [B.i64(k)]), 8)
        return [self.args, self.dims, self.steps, self.data, self.constant, self.shared]

    def loop(self, first: Value, count: Value, body, down: bool = False) -> None:
        """``for j in [first, first + count)`` (``down``: from the last), ``body(b, j)``
        emitted in the loop at ``self.b``, which ends after it."""
        b, fn = self.b, self.fn
        head = b.block
        loop, done = fn.append_block("item"), fn.append_block("done")
        b.cbranch(b.icmp("eq", count, B.i64(0)), done, loop)
        b.position_at_end(loop)
        i = b.phi(T.i64, name="i")
        i.add_incoming(B.i64(0), head)
        j = b.add(first, b.sub(b.sub(count, B.i64(1)), i) if down else i, name="j")
        body(b, j)
        nxt = b.add(i, B.i64(1))
        i.add_incoming(nxt, b.block)
        b.cbranch(b.icmp("ult", nxt, count), loop, done)
        b.position_at_end(done)

    def finish(self):
        self.b.ret_void()
        return self.fn


def _constant_function(module):
    """``ptr pyzyme.parfor.constant(ptr p)``: ``p`` (its rule row says it is inactive)."""
    fn = module.get_function(naming.PARALLEL_CONSTANT)
    if fn is None:
        fn = module.add_function(naming.PARALLEL_CONSTANT, T.FunctionType(T.ptr, [T.ptr]),
                                 prefix="internal")
        IRBuilder(fn.append_block("entry")).ret(fn.args[0])
    return fn


def _thread_id(module, row: spec.ParallelFor, b: IRBuilder) -> Value:
    if not row.thread_id:
        return B.i64(0)
    return b.call(module.declare(row.thread_id, T.FunctionType(T.i64, [])), [], name="tid")


# -- forward mode --------------------------------------------------------------------------
@_launch_handler
def forward_mode(cx, inst: I.CallBase, row: spec.ParallelFor) -> None:
    """The body's forward derivative launched row by row: tangents follow the primal's
    schedule."""
    # ``data`` varies where the launch is a derivative's own (forward over reverse: hvp):
    # its launch block holds pointers into active memory, and their shadows.
    data = inst.args[row.data]
    data_varied = data in cx.activity.varied
    layout = _layout(cx, inst, row, cx.width, cx.width if data_varied else 0)
    body, _, _ = _split_body(cx, inst, row, layout, reverse=False)
    acts = list(_BODY_ACTIVITIES)
    acts[3] = Activity.DUPLICATED if data_varied else Activity.CONST
    dfn = cx.callee_derivative(body, ForwardSignature.standard(body, acts, cx.width))
    t = _Trampoline(cx.module, naming.parallel_body(body.name, "fwd"), layout)

    def run(b, r):
        data_shadows = [B.load(b, T.ptr, t.block, layout.data_shadows + lane)
                        for lane in range(layout.data_lanes)]
        b.call(dfn, t.row(b, r) + t.shadows + data_shadows)
    t.loop(t.first, t.count, run)
    tramp = t.finish()
    b = cx.builder
    shadows = [cx.derivs[inst.args[row.args]][k] for k in range(cx.width)]
    block = _fill(cx, b, inst, row, layout, cx.value, shadows,
                  [cx.derivs[data][k] for k in range(layout.data_lanes)])
    _launch(b, inst, row, layout, block, tramp, B.load(b, T.i64, block, B.NROWS),
            cx.value(inst.args[row.threads]))
    b.call(free_function(cx.module), [block])


# -- reverse mode --------------------------------------------------------------------------
def _pair(cx, body: Function, known):
    sig = ReverseSignature(_BODY_ACTIVITIES, memory_stable=False, split=True,
                           shared_adjoints=True, parallel_body=known)
    return cx.callee_derivative(body, sig)


@_launch_handler
def augmented(cx, inst: I.CallBase, row: spec.ParallelFor) -> None:
    """The forward sweep: the body's augmented primal launched row by row, each row's tape
    and thread id kept in the launch block for :func:`reverse`."""
    layout = _layout(cx, inst, row, 1)
    body, stored, active = _split_body(cx, inst, row, layout)
    known, private = _reverse_facts(cx, inst, row, body, stored, active)
    layout = replace(layout, private=tuple((k, ty) for k, ty, _ in private))
    _seed_argument_types(cx, body, stored)
    pair = _pair(cx, body, known)
    t = _Trampoline(cx.module, naming.parallel_body(body.name, "aug"), layout)
    tid = _thread_id(cx.module, row, t.b)

    # A privatized slot's copy is the one of the task that will reverse this row: the
    # forward sweep's shadow pointers are what the body's reverse keeps and uses.
    task = t.b.urem(tid, t.nslots, name="task") if layout.private else None

    def run(b, r):
        b.store(tid, t.thread_ids(b, r), 8)
        tape = b.call(pair.augmented, t.row(b, r, task=task) + t.shadows, name="tape")
        b.store(tape, t.tapes(b, r), 8)
    t.loop(t.first, t.count, run)
    tramp = t.finish()
    b = cx.fb
    block = _fill(cx, b, inst, row, layout, cx.fwd_value,
                  [cx.fwd_shadow(inst.args[row.args])])
    for p, (_, _, extent) in enumerate(private):
        size = cx.fwd_value(extent[0])
        for factor in extent[1:]:
            size = b.mul(size, cx.fwd_value(factor))
        B.store(b, size, block, layout.privates + 2 * p + 1)
    private_copies(cx, layout, block)
    # Each row's tape, null until its forward sweep makes it and once its reverse frees it.
    nrows = B.load(b, T.i64, block, B.NROWS)
    zero = cx.module.declare("llvm.memset.p0.i64",
                             T.FunctionType(T.void, [T.ptr, T.i8, T.i64, T.i1]))
    b.call(zero, [B.word(b, block, layout.fixed), const_int(T.i8, 0), b.mul(nrows, B.i64(B.W)),
                  const_int(T.i1, 0)])
    B.store(b, b.ptrtoint(pair.reverse, T.i64), block, B.REVERSE)
    _launch(b, inst, row, layout, block, tramp, nrows, cx.fwd_value(inst.args[row.threads]))
    discard = _discard_function(cx.module)
    cx.release_later(I.Call(discard, [block], discard.function_type), block, const_null(T.ptr))
    cx.release_later(I.Call(free_function(cx.module), [block],
                            free_function(cx.module).function_type), block, const_null(T.ptr))
    cx.rule_calls[inst] = (pair, layout, block)


def reverse(cx, inst: I.CallBase, row: spec.ParallelFor) -> None:
    """The reverse sweep: one task per thread id of the forward launch, each running the
    reverse functions of that thread's rows, last first."""
    if inst not in cx.rule_calls:
        return
    pair, layout, block = cx.rule_calls[inst]
    body = inst.args[row.body]
    t = _Trampoline(cx.module, naming.parallel_body(body.name, "rev"), layout)

    def task(b, slot):
        def run(b, r):
            tid = b.load(T.i64, t.thread_ids(b, r), 8)
            mine, go, skip = (b.icmp("eq", b.urem(tid, t.nslots), slot),
                              t.fn.append_block("mine"), t.fn.append_block("next"))
            b.cbranch(mine, go, skip)
            b.position_at_end(go)
            tape = b.load(T.ptr, t.tapes(b, r), 8)
            args = t.row(b, r, task=slot)
            b.call(pair.reverse, args + t.shadows + [const_int(T.i1, 0), tape])
            b.store(const_null(T.ptr), t.tapes(b, r), 8)
            b.br(skip)
            b.position_at_end(skip)
        t.loop(B.i64(0), t.nrows, run, down=True)
    t.loop(t.first, t.count, task)
    tramp = t.finish()
    b = cx.rb
    block = cx.avail(block)
    state = _release_gil(cx.module, b)
    _launch(b, inst, row, layout, block, tramp, B.load(b, T.i64, block, B.NSLOTS),
            cx.primal(inst.args[row.threads]))
    _restore_gil(cx.module, b, state)
    sum_private_copies(cx, layout, block)


#: Numba's calls around a launch (numba/parfors/parfor_lowering.py): the GIL taken if the
#: caller lacks it, then released while the workers run, then both undone.
_GIL_ENSURE, _GIL_RELEASE = "numba_gil_ensure", "numba_gil_release"
_SAVE_THREAD, _RESTORE_THREAD = "PyEval_SaveThread", "PyEval_RestoreThread"


def _release_gil(module, b: IRBuilder) -> tuple:
    """Release the GIL before the reverse launch, as the primal's launch does (the forward
    sweep keeps the primal's calls around it; the reverse sweep has none of its own): a
    worker that takes the GIL (Numba's BLAS helpers look their routine up under it on first
    use) would otherwise wait for the thread that holds it, itself waiting for the workers.
    Returns what :func:`_restore_gil` needs."""
    state = b.entry_alloca(T.i32, name="gil.state")
    b.call(module.declare(_GIL_ENSURE, T.FunctionType(T.void, [T.ptr])), [state])
    thread = b.call(module.declare(_SAVE_THREAD, T.FunctionType(T.ptr, [])), [],
                    name="gil.thread")
    return state, thread


def _restore_gil(module, b: IRBuilder, saved: tuple) -> None:
    state, thread = saved
    b.call(module.declare(_RESTORE_THREAD, T.FunctionType(T.void, [T.ptr])), [thread])
    b.call(module.declare(_GIL_RELEASE, T.FunctionType(T.void, [T.ptr])), [state])


def _discard_function(module):
    """``void pyzyme.parfor.discard(ptr block)``: each row's tape still in a reverse launch
    block handed to the body's reverse function to be discarded (its ``discard`` argument
    true: deferred releases made, caches freed, no sweep; the other arguments are not read
    then). A tape dropped unused leaves them all; a reverse sweep, none. Its rule row says it
    is inactive (forward mode over a gradient calls it as it is)."""
    fn = module.get_function(naming.PARALLEL_DISCARD)
    if fn is not None:
        return fn
    fn = module.add_function(naming.PARALLEL_DISCARD, T.FunctionType(T.void, [T.ptr]),
                             prefix="internal")
    block = fn.args[0]
    block.name = "block"
    entry, loop, live, nxt, done = (fn.append_block(n) for n in (
        "entry", "row", "discard", "next", "done"))
    b = IRBuilder(entry)
    reverse = B.load(b, T.i64, block, B.REVERSE, "reverse")
    first = B.load(b, T.i64, block, B.TAPES, "tapes")
    rows = B.load(b, T.i64, block, B.NROWS, "rows")
    b.cbranch(b.or_(b.icmp("eq", reverse, B.i64(0)), b.icmp("eq", rows, B.i64(0))), done, loop)
    b.position_at_end(loop)
    r = b.phi(T.i64, name="r")
    r.add_incoming(B.i64(0), entry)
    tape = B.load(b, T.ptr, block, b.add(first, r), "tape")
    b.cbranch(b.icmp("eq", tape, const_null(T.ptr)), nxt, live)
    b.position_at_end(live)
    # the body's reverse: (args, dims, steps, data, cargs, shared, args' , discard, tape)
    fnty = T.FunctionType(T.void, [T.ptr] * 5 + [T.i1, T.ptr, T.i1, T.ptr])
    b.call(b.inttoptr(reverse, T.ptr), [const_null(T.ptr)] * 5 + [
        const_int(T.i1, 0), const_null(T.ptr), const_int(T.i1, 1), tape], function_type=fnty)
    b.br(nxt)
    b.position_at_end(nxt)
    after = b.add(r, B.i64(1))
    r.add_incoming(after, nxt)
    b.cbranch(b.icmp("ult", after, rows), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return fn
