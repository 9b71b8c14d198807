"""Derivatives of MPI calls (:class:`~pyzyme.rules.spec.Mpi` rows): communication of shadows.

Each rank runs its own derivative; the derivative's communication mirrors the program's
(Moses et al., SC22). Forward mode sends each tangent alongside its value: the same call on the
shadow buffers, with the same datatype. Reverse mode runs the calls' adjoints in the reverse
order of the calls:

- ``send(x -> r)``: receive the adjoint from ``r`` and add it into ``x_bar``;
- ``recv(y <- r)``: send ``y_bar`` to ``r``, then zero it (``y`` was overwritten);
- ``allreduce(x, y, sum)``: ``x_bar += allreduce(y_bar, sum)``; ``y_bar = 0``;
- ``reduce(x, y, sum, root)``: ``x_bar += bcast(y_bar from root)``; the root's ``y_bar = 0``;
- ``bcast(x, root)``: ``reduce(x_bar, sum, root)`` replaces the root's ``x_bar``; the others'
  are zeroed;
- ``gather(x, y, root)``: ``x_bar += scatter(y_bar from root)``; ``scatter``: the converse;
- ``allgather(x, y)``: ``x_bar += (allreduce(y_bar, sum))[rank's part]``;
- ``allreduce(x, y, max or min)``: ``x_bar += allreduce(y_bar, sum)`` on the lowest rank
  holding each extremum (found in the forward sweep by an allreduce of candidate ranks);
- ``isend``/``irecv`` ... ``wait``: the wait starts the adjoint's ``irecv``/``isend``, the
  ``isend``/``irecv`` completes it (:mod:`~pyzyme.diff.calls.mpi_kernels` keeps the requests'
  records); ``waitall`` and a ``test`` that completes likewise.

Sends and receives of floats communicate derivatives at both ends whatever the activity of
their buffers (zeros sent from a buffer without a derivative, what arrives for one dropped):
the two ends are different variables, so only this keeps every derivative message matched.

Collectives take part whatever the activity too (zeros in place of a missing shadow); a rank
whose receive buffer has none marks those zeros where its part of the adjoint goes, and a rank
whose sent data has a derivative looks for the mark in the adjoint it gets back, and stops the
program (:data:`~pyzyme.rules.mpi.LOST`): its data reached a rank that keeps no derivative of
it. A receive into a buffer without one marks the adjoint it sends back the same way.

Derivative messages carry the program's tag with :data:`~pyzyme.rules.mpi.SHADOW_TAG_BIT`
set, so they never match a message of the program. The datatypes and reductions are the
constants :mod:`pyzyme.rules.mpi` interprets; a call whose buffers hold integers carries no
derivative and is copied as it is.
"""

from __future__ import annotations

from pyzyme.diff.calls import mpi_kernels as kernels
from pyzyme.diff.memory_calls import free, free_function, malloc, memcpy, memset_zero
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantInt, Null, const_int, const_null
from pyzyme.rules.mpi import HANDLES, LOST, SHADOW_TAG_BIT

__all__ = ["varied", "forward_mode", "augmented", "reverse"]

_TYPES = {"f64": T.double, "f32": T.float}


# -- what the call is -------------------------------------------------------------------------
def _error(cx_or_where, inst: I.CallBase, why: str, hint: str) -> UnsupportedError:
    where = cx_or_where if isinstance(cx_or_where, str) else cx_or_where.where
    name = inst.called_function.name
    err = UnsupportedError(f"{where} calls {name} (MPI), {why}: {inst}", hint=hint)
    err.callee = name  # the Numba layer finds the Python line
    err.mpi_call = (name, where)  # the C frontend words it for C programs
    return err


def _handle(value) -> int | None:
    return value.value & 0xFFFFFFFF if isinstance(value, ConstantInt) else None


def _element(cx, inst: I.CallBase, index: int | None) -> T.Type | None:
    """The float type of the elements the datatype at argument ``index`` describes; None for
    integers (no derivative)."""
    key = _handle(inst.args[index])
    kind = HANDLES.datatypes.get(key) if key is not None else None
    if kind is None or kind.startswith("c"):
        what = "a datatype that is not a constant" if key is None else \
            f"datatype {key:#x}" + (" (complex)" if kind else " (not a predefined one)")
        raise _error(cx, inst, f"with {what}: its derivative is not written",
                     "communicate float64 or float32 arrays (complex numbers as two floats)")
    return _TYPES.get(kind)


def _reduction(cx, inst: I.CallBase, row) -> str:
    key = _handle(inst.args[row.reduction])
    op = HANDLES.reductions.get(key) if key is not None else None
    if op == "sum" or op in ("max", "min") and row.op == "allreduce":
        return op
    raise _error(cx, inst, f"reducing with {op or 'an unknown operation'}: sums are "
                 "differentiated, and the max and min of allreduce",
                 "reduce with numba_mpi.Operator.SUM")


def _check_peer_and_tag(cx, inst: I.CallBase, row) -> None:
    peer = inst.args[row.peer]
    if isinstance(peer, ConstantInt) and HANDLES.any_source is not None and \
            peer.value == HANDLES.any_source:
        raise _error(cx, inst, "from any source (MPI_ANY_SOURCE): its adjoint must know "
                     "which rank to answer", "pass the source rank to numba_mpi.recv")
    if row.tag is None:
        return
    tag = inst.args[row.tag]
    if isinstance(tag, ConstantInt) and HANDLES.any_tag is not None and \
            tag.value == HANDLES.any_tag:
        raise _error(cx, inst, "with any tag (MPI_ANY_TAG)", "pass the tag to numba_mpi.recv")
    if isinstance(tag, ConstantInt) and not 0 <= tag.value < SHADOW_TAG_BIT:
        raise _error(cx, inst, f"with tag {tag.value}: the derivative's messages use the tags "
                     f"from {SHADOW_TAG_BIT} up", f"use tags below {SHADOW_TAG_BIT}")


def _float_type(cx, inst: I.CallBase, row) -> T.Type | None:
    """The call's float element type, or None where it moves integers; the forms pyzyme has
    no derivative for raise here, in every mode."""
    if row.op == "unsupported":
        raise _error(cx, inst, "whose derivative pyzyme does not have",
                     "use send/recv, isend/irecv with wait, or the collectives allreduce, "
                     "reduce, bcast, scatter, gather and allgather")
    ty = _element(cx, inst, row.datatype)
    if ty is None:
        return None
    if row.out_datatype is not None and _element(cx, inst, row.out_datatype) != ty:
        raise _error(cx, inst, "with different send and receive datatypes", "send floats")
    if row.op in _POINT_TO_POINT:
        _check_peer_and_tag(cx, inst, row)
    if row.reduction is not None:
        _reduction(cx, inst, row)
    return ty


#: Calls whose two ends are different variables, maybe of different activity: both ends
#: communicate derivatives whenever the data are floats (zeros from a buffer without one, and
#: a derivative received for a buffer without one dropped), so that every derivative message
#: has its receiver.
_POINT_TO_POINT = ("send", "recv", "isend", "irecv")
_REQUESTS = ("wait", "waitall", "test")
_TYPES_KEY = ("mpi", "request types")   # in cx.rule_calls: those of the isend/irecv calls
#: In cx.rule_calls while one call's reverse is built (in one block, in order): the rank and
#: size already asked for, by function and communicator, so that each is asked once.
_RANKS_KEY = ("mpi", "ranks")


def varied(row, inst: I.CallBase, is_varied) -> bool:
    """MPI calls return a status: never a derivative (their effects are on memory)."""
    return False


# -- helpers ------------------------------------------------------------------------------------
def _decl(cx, name: str, params: list):
    return kernels.declare(cx.module, name, params)


def _shadow_tag(b: IRBuilder, tag):
    return kernels.shadow_tag(b, tag)


def _nbytes(b: IRBuilder, count, ty: T.Type):
    return kernels.nbytes(b, count, ty)


def _accumulate(cx, b: IRBuilder, ty, dst, src, count) -> None:
    kernels.accumulate(cx.module, b, ty, dst, src, count)


def _status(b: IRBuilder):
    return kernels.status(b)


def _rank(cx, b: IRBuilder, comm, which: str = "MPI_Comm_rank"):
    memo = getattr(cx, "rule_calls", {}).get(_RANKS_KEY)   # reverse mode only
    if memo is not None and (which, comm) in memo:
        return memo[which, comm]
    slot = b.entry_alloca(T.i32, name="mpi.rank")
    b.call(_decl(cx, which, [comm.type, T.ptr]), [comm, slot])
    value = b.load(T.i32, slot)
    if memo is not None:
        memo[which, comm] = value
    return value


def _only_root(b: IRBuilder, is_root, nbytes):
    """``nbytes`` on the root, 0 elsewhere: a copy or fill that only the root makes, without
    a branch in the reverse sweep."""
    return b.select(is_root, nbytes, const_int(nbytes.type, 0))


# -- forward mode -------------------------------------------------------------------------------
def forward_mode(cx, inst: I.CallBase, row) -> None:
    """The call, then the same call on the tangents of its buffers, lane by lane."""
    if row.op in _REQUESTS:   # the tangents' requests: kept beside the program's
        _forward_requests(cx, inst, row)
        return
    new = cx.clone(inst)
    ty = _float_type(cx, inst, row)
    if ty is None:
        return
    b = cx.builder
    args = list(new.args)
    src = inst.args[row.buffer] if row.buffer is not None else None
    out = inst.args[row.output] if row.output is not None else None
    has_src = src is not None and src in cx.derivs
    has_out = out is not None and out in cx.derivs
    if row.op in _POINT_TO_POINT:
        _forward_point_to_point(cx, b, inst, row, ty, args, src if has_src else None,
                                out if has_out else None)
        return
    # A collective: every rank takes part in its tangent's, as in the program's (zeros from a
    # buffer without a tangent, what arrives for one dropped), whatever each rank's activity.
    extremum = row.reduction is not None and _reduction(cx, inst, row) != "sum"
    winners = _owners(cx, b, inst, row, ty, args) if extremum else None
    for lane in range(cx.width):
        buffers, scratch = _buffers(cx, b, row, ty, args,
                                    cx.derivs[src][lane] if has_src else None,
                                    cx.derivs[out][lane] if has_out else None)
        if extremum:
            _forward_extremum(cx, b, inst, row, ty, args, buffers, winners)
        else:
            call = list(args)
            for index, value in buffers.items():
                call[index] = value
            b.call(inst.called_function, call)
        into = row.buffer if row.op == "bcast" else row.output
        if into is not None and any(buffers.get(into) is t for t in scratch):   # dropped
            kernels.check_dropped(cx.module, b, ty, buffers[into],
                                  _extent(cx, b, row, args, into), args[row.comm],
                                  _lost_text(cx, inst, "dropped"))
        for tmp in scratch:
            free(cx.module, b, tmp)
    if winners is not None:
        free(cx.module, b, winners)


def _extent(cx, b, row, args, index: int):
    """How many elements buffer argument ``index`` of a collective holds."""
    per_rank = {"gather": row.output, "allgather": row.output, "scatter": row.buffer}
    if index == row.output and row.out_count is not None:
        count = args[row.out_count]
    else:
        count = args[row.count]
    if per_rank.get(row.op) == index:
        count = b.mul(count, _rank(cx, b, args[row.comm], "MPI_Comm_size"))
    return count


def _buffers(cx, b, row, ty, args, dsrc, dout, fwd=None) -> tuple[dict, list]:
    """The derivative buffers of a collective by argument position, zeroed scratch standing
    for the missing ones (returned too, to free). ``fwd``: the forward sweep's shadows by
    position, where the buffers given are the reverse sweep's."""
    fwd = fwd or {}
    scratch = []
    if row.op == "bcast":   # one buffer, sent and received
        if dsrc is None:
            dsrc = _scratch(cx, b, _extent(cx, b, row, args, row.buffer), ty)
            scratch.append(dsrc)
        else:
            dsrc = _or_scratch(cx, b, dsrc, fwd.get(row.buffer, dsrc),
                               _extent(cx, b, row, args, row.buffer), ty, scratch)
        return {row.buffer: dsrc}, scratch
    found = {}
    for index, given in ((row.buffer, dsrc), (row.output, dout)):
        if given is None:
            given = _scratch(cx, b, _extent(cx, b, row, args, index), ty)
            scratch.append(given)
        else:
            given = _or_scratch(cx, b, given, fwd.get(index, given),
                                _extent(cx, b, row, args, index), ty, scratch)
        found[index] = given
    return found, scratch


def _owners(cx, b, inst, row, ty, args):
    """Forward values ``args`` of an allreduce of max or min: who holds each extremum."""
    comm = args[row.comm]
    return kernels.owners(cx.module, b, ty, args[row.buffer], args[row.output],
                          args[row.count], _rank(cx, b, comm), args[row.datatype].type,
                          args[row.reduction].type, comm)


def _sum_op(b: IRBuilder, ty: T.Type):
    sum_op = kernels.handle("SUM", ty)
    return b.inttoptr(sum_op, ty) if ty.is_pointer else sum_op


def _forward_extremum(cx, b, inst, row, ty, args, buffers, winners) -> None:
    """``r = allreduce(x, max)``: ``dr = allreduce(dx where this rank holds the max, sum)``."""
    count, comm = args[row.count], args[row.comm]
    mine = _scratch(cx, b, count, ty)
    kernels.add_owned(cx.module, b, ty, mine, buffers[row.buffer], winners, count,
                      _rank(cx, b, comm))
    b.call(inst.called_function, [mine, buffers[row.output], count, args[row.datatype],
                                  _sum_op(b, args[row.reduction].type), comm])
    free(cx.module, b, mine)


def _lost_text(cx, inst: I.CallBase, kind: str) -> str:
    """What a rank prints before it stops the program, where a derivative would be lost
    between two ranks whose buffers differ in activity."""
    name = inst.called_function.name
    if kind == "dropped":
        what = ("received data whose tangent is not zero into a receive buffer without a "
                "derivative (an argument passed Const, or memory pyzyme found inactive): the "
                "tangent would be lost")
    elif kind == "collective":
        what = ("took part with data that has a derivative, and a rank received what the call "
                "made of it into a buffer without one (an argument passed Const there, or "
                "memory pyzyme found inactive): that rank's part of the gradient would be lost")
    else:
        what = ("sent data that has a derivative to a rank that received it into a buffer "
                "without one (an argument passed Const there, or memory pyzyme found "
                "inactive): that rank's part of the gradient would be lost")
    return (f"pyzyme: {cx.where} ({name}) {what}. Pass the receive buffer Duplicated (or "
            f"let it be a temporary of the function) on every rank.\n")


def _site_check(cx, inst: I.CallBase, row, ty, args, kind: str):
    """:func:`~pyzyme.diff.calls.mpi_kernels.site_check` for this call site."""
    return kernels.site_check(cx.module, kind, ty, args[row.comm].type,
                              _lost_text(cx, inst, kind))


def _maybe_null(fwd_shadow) -> bool:
    """Whether a shadow may be null at run time: one merged (phi, select) from the shadows of
    pointers some of which have none, as when LLVM merges two call sites of one MPI function
    whose buffers differ in activity (a Const array on one rank, an active one on another)."""
    v = fwd_shadow
    while isinstance(v, I.Instruction) and v.opcode == "getelementptr":
        v = v.operands[0]
    return isinstance(v, Null) or (isinstance(v, I.Instruction) and
                                   v.opcode in ("phi", "select"))


def _or_scratch(cx, b: IRBuilder, shadow, fwd_shadow, count, ty, scratch: list):
    """``shadow``, or where it may be null (:func:`_maybe_null`) a zeroed scratch buffer of
    ``count`` elements in its place when it is (appended to ``scratch``, to free)."""
    if not _maybe_null(fwd_shadow):
        return shadow
    zeros = _scratch(cx, b, count, ty)
    scratch.append(zeros)
    return b.select(b.icmp("eq", shadow, const_null(T.ptr)), zeros, shadow)


def _scratch(cx, b: IRBuilder, count, ty):
    """A zeroed heap buffer of ``count`` elements standing for a missing derivative."""
    size = _nbytes(b, count, ty)
    tmp = malloc(cx.module, b, size, "mpi.zeros")
    memset_zero(cx.module, b, tmp, size)
    return tmp


def _forward_point_to_point(cx, b, inst, row, ty, args, src, out) -> None:
    index = row.buffer if row.buffer is not None else row.output
    buffer = src if row.buffer is not None else out
    for lane in range(cx.width):
        call = list(args)
        call[row.tag] = _shadow_tag(b, args[row.tag])
        scratch = None
        if buffer is None:
            scratch = call[index] = _scratch(cx, b, args[row.count], ty)
        else:
            held = []
            call[index] = _or_scratch(cx, b, cx.derivs[buffer][lane], cx.derivs[buffer][lane],
                                      args[row.count], ty, held)
            scratch = held[0] if held else None
        if row.op == "recv":   # the tangent's status apart: the program's says what it got
            call[-1] = _status(b)
        receives = row.op in ("recv", "irecv") and scratch is not None
        if row.request is not None:   # the tangent's own request, waited for with the primal's
            key = kernels.request_key(b, args[row.request])
            check = (_site_check(cx, inst, row, ty, args, "dropped"), args[row.count],
                     args[row.comm]) if receives else None
            call[row.request] = kernels.tangent_request_slot(cx.module, b, key, scratch,
                                                             check)
        b.call(inst.called_function, call)
        if receives and row.request is None:
            kernels.check_dropped(cx.module, b, ty, scratch, args[row.count], args[row.comm],
                                  _lost_text(cx, inst, "dropped"))
        if scratch is not None and row.request is None:
            free(cx.module, b, scratch)


def _forward_requests(cx, inst: I.CallBase, row) -> None:
    """Before the program waits (or tests), the tangents' requests of the requests it waits
    for are completed (a test completes them only where it completes the program's)."""
    b = cx.builder
    args = [cx.value(a) for a in inst.args]
    if row.op == "wait":
        kernels.complete_tangents(cx.module, b, args[row.request], const_int(T.i64, 1))
        cx.clone(inst)
    elif row.op == "waitall":
        kernels.complete_tangents(cx.module, b, args[row.request],
                                  kernels.as_i64(b, args[row.count]))
        cx.clone(inst)
    else:
        key = kernels.request_key(b, args[row.request])
        cx.clone(inst)
        done = b.icmp("ne", b.load(T.i32, args[1]), const_int(T.i32, 0))
        kernels.complete_tangent_if(cx.module, b, key, done)


# -- reverse mode -------------------------------------------------------------------------------
def augmented(cx, inst: I.CallBase, row) -> None:
    """Forward sweep: the call, and for a call of floats what its reverse needs (the record
    of a nonblocking request, the ranks holding a max or min); every such call has a
    reverse, whatever the activity of its buffers (see :func:`forward_mode`)."""
    if row.op in _REQUESTS:
        _augmented_requests(cx, inst, row)
        return
    new = cx.clone(inst)
    ty = _float_type(cx, inst, row)
    if ty is None:
        return
    shadowed = [inst.args[i] for i in (row.buffer, row.output) if i is not None
                and inst.args[i] in cx.shadows]
    if row.op in ("isend", "irecv"):
        b = cx.fb
        buffer = inst.args[row.buffer if row.op == "isend" else row.output]
        check = None
        if shadowed:
            held = []
            shadow = _or_scratch(cx, b, cx.shadows[buffer], cx.shadows[buffer],
                                 new.args[row.count], ty, held)
            for tmp in held:
                _free_later(cx, tmp)
            if row.op == "isend":   # the adjoint that comes back is checked where it is kept
                check = _site_check(cx, inst, row, ty, new.args, "marker")
                if held:
                    check = b.select(b.icmp("eq", cx.shadows[buffer], const_null(T.ptr)),
                                     const_null(T.ptr), check)
            missing = held
        else:   # no derivative here: zeros sent, what comes back dropped
            shadow = _scratch(cx, b, new.args[row.count], ty)
            _free_later(cx, shadow)
            missing = [shadow]
        if row.op == "irecv":   # what this rank sends back for a buffer without a derivative
            for tmp in missing:
                kernels.mark_missing(cx.module, b, ty, tmp, new.args[row.count])
        # the wait's reverse starts the adjoint's requests with the types these calls use
        cx.rule_calls[_TYPES_KEY] = _types(inst, row)
        kind = kernels.SENT if row.op == "isend" else kernels.RECEIVED
        cx.rule_calls[inst] = (ty, kernels.new_record(cx.module, b, new, row, kind, shadow, ty,
                                                      check))
    elif row.reduction is not None and _reduction(cx, inst, row) != "sum":
        winners = _owners(cx, cx.fb, inst, row, ty, list(new.args))
        _free_later(cx, winners)
        cx.rule_calls[inst] = (ty, winners)
    else:   # every rank takes part in the adjoint, whatever its activity (see forward_mode)
        cx.rule_calls[inst] = (ty, None)


def _free_later(cx, pointer) -> None:
    free_fn = free_function(cx.module)
    cx.release_later(I.Call(free_fn, [pointer], free_fn.function_type), pointer,
                     const_null(T.ptr))


def _types(inst: I.CallBase, row) -> tuple:
    return tuple(inst.args[i].type for i in (row.count, row.datatype, row.peer, row.tag,
                                             row.comm))


def _augmented_requests(cx, inst: I.CallBase, row) -> None:
    """The program's wait (or test): the records of the requests it completes are taken out
    of the pending list and kept for the reverse sweep (read before the call, which resets
    the requests)."""
    b = cx.fb
    args = [cx.fwd_value(a) for a in inst.args]
    if row.op == "wait":
        record = kernels.take(cx.module, b, kernels.request_key(b, args[row.request]))
        cx.clone(inst)
    elif row.op == "waitall":
        record = kernels.take_all(cx.module, b, args[row.request], args[row.count])
        cx.clone(inst)
    else:
        key = kernels.request_key(b, args[row.request])
        cx.clone(inst)
        done = b.icmp("ne", b.load(T.i32, args[1]), const_int(T.i32, 0))
        # taken only where the test completed the request (no request has the other key)
        record = kernels.take(cx.module, b, b.select(done, key, kernels.NO_KEY))
    cx.rule_calls[inst] = (None, record)


def reverse(cx, inst: I.CallBase, row) -> None:
    """The adjoint communication of the call (see the module's docstring)."""
    cx.rule_calls[_RANKS_KEY] = {}
    try:
        _reverse(cx, inst, row)
    finally:
        del cx.rule_calls[_RANKS_KEY]


def _reverse(cx, inst: I.CallBase, row) -> None:
    ty, record = cx.rule_calls[inst]
    b = cx.rb
    if row.op in _REQUESTS:
        types = cx.rule_calls.get(_TYPES_KEY)
        if types is None:   # no isend/irecv of floats in the function: nothing to start
            return
        if row.op == "waitall":
            kernels.start_all(cx.module, b, cx.avail(record), cx.primal(inst.args[row.count]),
                              types)
        else:
            kernels.start(cx.module, b, cx.avail(record), types)
        return
    if row.op in ("isend", "irecv"):
        kernels.finish(cx.module, b, cx.avail(record), ty)
        return
    args = [cx.primal(a) if not isinstance(a, ConstantInt) else a for a in inst.args]
    src = inst.args[row.buffer] if row.buffer is not None else None
    out = inst.args[row.output] if row.output is not None else None
    dsrc = cx.shadow(src) if src is not None and src in cx.shadows else None
    dout = cx.shadow(out) if out is not None and out in cx.shadows else None
    scratch = []
    fwd = {i: cx.shadows[inst.args[i]] for i in (row.buffer, row.output)
           if i is not None and inst.args[i] in cx.shadows}
    check = None
    if row.op not in _POINT_TO_POINT:   # a collective: every rank takes part
        buffers, scratch = _buffers(cx, b, row, ty, args, dsrc, dout, fwd)
        check = _mark_lost(cx, b, inst, row, ty, args, buffers,
                           {row.buffer: dsrc, row.output: dout}, fwd)
        dsrc, dout = buffers[row.buffer], buffers[row.output]
    elif dsrc is not None:
        real = dsrc
        dsrc = _or_scratch(cx, b, dsrc, fwd[row.buffer], args[row.count], ty, scratch)
        # the count checked for the receiver's marker: none where this shadow is a stand-in
        checked = args[row.count] if not scratch else b.select(
            b.icmp("eq", real, const_null(T.ptr)), const_int(args[row.count].type, 0),
            args[row.count])
    elif dout is not None:
        dout = _or_scratch(cx, b, dout, fwd[row.output], args[row.count], ty, scratch)
        for tmp in scratch:   # sent back in place of a missing shadow
            kernels.mark_missing(cx.module, b, ty, tmp, args[row.count])
    fn = _REVERSE.get(row.op)
    if record is not None:   # allreduce of max or min: who held each extremum
        _reverse_extremum(cx, b, row, ty, args, dsrc, dout, cx.avail(record), check)
    elif fn is None:
        raise _error(cx, inst, f"whose reverse ({row.op}) is not written", "report this")
    elif row.op == "send" and dsrc is not None:
        _reverse_send(cx, b, inst, row, ty, args, dsrc, dout, checked)
    elif row.op in _POINT_TO_POINT:
        fn(cx, b, inst, row, ty, args, dsrc, dout)
    else:
        fn(cx, b, inst, row, ty, args, dsrc, dout, check)
    for tmp in scratch:
        free(cx.module, b, tmp)


def _among(b, which: str, is_root, condition):
    """``condition`` (True, False or an ``i1``) where this rank is one of ``which``
    (:class:`~pyzyme.rules.mpi.Lost`), else False; ``is_root()`` makes the ``i1`` that says
    whether this rank is the root (an MPI call: made only where needed)."""
    if condition is False or which == "all":
        return condition
    here = is_root() if which == "root" else b.xor(is_root(), const_int(T.i1, 1))
    return here if condition is True else b.and_(condition, here)


def _missing(b, given, fwd_shadow):
    """Whether a collective's buffer has no derivative on this rank: True, False or (a
    shadow that may be null, :func:`_maybe_null`) an ``i1``."""
    if given is None:
        return True
    if not _maybe_null(fwd_shadow):
        return False
    return b.icmp("eq", given, const_null(T.ptr))


def _mark_lost(cx, b, inst, row, ty, args, buffers, given, fwd):
    """Reverse sweep of collective ``inst`` before its adjoint communication: where this
    rank's receive buffer has no derivative, its stand-in (``buffers``; ``given``: the
    shadows, None where missing; ``fwd``: the forward sweep's, by argument position) carries
    :data:`~pyzyme.diff.calls.mpi_kernels.MARKER` (:data:`~pyzyme.rules.mpi.LOST`). Returns
    ``check(b, adjoint)``, which a rank whose sent buffer has a derivative runs on the adjoint
    that comes back, or None where it has none: no message is added, only the first element
    of each part is written or read."""
    lost = LOST[row.op]
    into, out_count = (row.output, row.out_count if row.out_count is not None else row.count)
    root = []

    def is_root():
        if not root:
            peer = args[row.peer]
            root.append(b.icmp("eq", _rank(cx, b, args[row.comm]),
                               b.sext(peer, T.i32) if peer.type != T.i32 else peer))
        return root[0]
    marks = _among(b, lost.marks, is_root, _missing(b, given[into], fwd.get(into)))
    if marks is not False:
        parts = _rank(cx, b, args[row.comm], "MPI_Comm_size") if lost.marked_per_rank \
            else const_int(T.i64, 1)
        if marks is not True:
            parts = b.select(marks, parts, const_int(parts.type, 0))
        kernels.mark_missing(cx.module, b, ty, buffers[into], args[out_count], parts)
    has = _missing(b, given[row.buffer], fwd.get(row.buffer))
    has = not has if isinstance(has, bool) else b.xor(has, const_int(T.i1, 1))
    checks = _among(b, lost.checks, is_root, has)
    if checks is False:
        return None
    text = _lost_text(cx, inst, "collective")

    def check(b, adjoint):
        parts = _rank(cx, b, args[row.comm], "MPI_Comm_size") if lost.checked_per_rank \
            else const_int(T.i64, 1)
        if checks is not True:
            parts = b.select(checks, parts, const_int(parts.type, 0))
        kernels.check_marker(cx.module, b, ty, adjoint, args[row.count], args[row.comm],
                             text, parts)
    return check


def _reverse_extremum(cx, b, row, ty, args, dsrc, dout, winners, check=None) -> None:
    """``r = allreduce(x, max)``: ``x_bar += allreduce(r_bar, sum)`` where this rank held
    the max; ``r_bar = 0``."""
    count, comm = args[row.count], args[row.comm]
    nbytes = _nbytes(b, count, ty)
    if dsrc is not None:
        tmp = malloc(cx.module, b, nbytes, "mpi.adjoint")
        fn = _decl(cx, "MPI_Allreduce", [T.ptr, T.ptr, count.type, args[row.datatype].type,
                                         args[row.reduction].type, comm.type])
        b.call(fn, [dout, tmp, count, args[row.datatype],
                    _sum_op(b, args[row.reduction].type), comm])
        if check is not None:
            check(b, tmp)
        kernels.add_owned(cx.module, b, ty, dsrc, tmp, winners, count, _rank(cx, b, comm))
        free(cx.module, b, tmp)
    memset_zero(cx.module, b, dout, nbytes)


def _comm(args, row):
    return args[row.comm]


def _reverse_send(cx, b, inst, row, ty, args, dsrc, dout, checked=None) -> None:
    count, dt = args[row.count], args[row.datatype]
    tmp = malloc(cx.module, b, _nbytes(b, count, ty), "mpi.adjoint")
    recv = _decl(cx, "MPI_Recv", [T.ptr, count.type, dt.type, args[row.peer].type,
                                 args[row.tag].type, _comm(args, row).type, T.ptr])
    b.call(recv, [tmp, count, dt, args[row.peer], _shadow_tag(b, args[row.tag]),
                  _comm(args, row), _status(b)])
    if dsrc is not None:   # else received only so that the message has its receiver
        kernels.check_marker(cx.module, b, ty, tmp, count if checked is None else checked,
                             _comm(args, row), _lost_text(cx, inst, "marker"))
        _accumulate(cx, b, ty, dsrc, tmp, count)
    free(cx.module, b, tmp)


def _reverse_recv(cx, b, inst, row, ty, args, dsrc, dout) -> None:
    count, dt = args[row.count], args[row.datatype]
    send = _decl(cx, "MPI_Send", [T.ptr, count.type, dt.type, args[row.peer].type,
                                 args[row.tag].type, _comm(args, row).type])
    zeros = _scratch(cx, b, count, ty) if dout is None else None
    if zeros is not None:   # the sender finds that no derivative comes back for its data
        kernels.mark_missing(cx.module, b, ty, zeros, count)
    b.call(send, [dout if zeros is None else zeros, count, dt, args[row.peer],
                  _shadow_tag(b, args[row.tag]), _comm(args, row)])
    if zeros is not None:
        free(cx.module, b, zeros)
    else:
        memset_zero(cx.module, b, dout, _nbytes(b, count, ty))


def _reverse_allreduce(cx, b, inst, row, ty, args, dsrc, dout, check=None) -> None:
    count, dt, op = args[row.count], args[row.datatype], args[row.reduction]
    if dout is None:
        return
    nbytes = _nbytes(b, count, ty)
    if dsrc is not None:
        tmp = malloc(cx.module, b, nbytes, "mpi.adjoint")
        fn = _decl(cx, "MPI_Allreduce", [T.ptr, T.ptr, count.type, dt.type, op.type,
                                        _comm(args, row).type])
        b.call(fn, [dout, tmp, count, dt, op, _comm(args, row)])
        if check is not None:
            check(b, tmp)
        _accumulate(cx, b, ty, dsrc, tmp, count)
        free(cx.module, b, tmp)
    memset_zero(cx.module, b, dout, nbytes)


def _reverse_reduce(cx, b, inst, row, ty, args, dsrc, dout, check=None) -> None:
    count, dt, root, comm = args[row.count], args[row.datatype], args[row.peer], \
        _comm(args, row)
    nbytes = _nbytes(b, count, ty)
    is_root = b.icmp("eq", _rank(cx, b, comm), b.sext(root, T.i32)
                     if root.type != T.i32 else root)
    if dsrc is not None:
        tmp = malloc(cx.module, b, nbytes, "mpi.adjoint")
        if dout is not None:
            memset_zero(cx.module, b, tmp, nbytes)
            memcpy(cx.module, b, tmp, dout, _only_root(b, is_root, nbytes))
        else:
            memset_zero(cx.module, b, tmp, nbytes)
        bcast = _decl(cx, "MPI_Bcast", [T.ptr, count.type, dt.type, root.type, comm.type])
        b.call(bcast, [tmp, count, dt, root, comm])
        if check is not None:
            check(b, tmp)
        _accumulate(cx, b, ty, dsrc, tmp, count)
        free(cx.module, b, tmp)
    if dout is not None:
        memset_zero(cx.module, b, dout, _only_root(b, is_root, nbytes))


def _reverse_bcast(cx, b, inst, row, ty, args, dsrc, dout, check=None) -> None:
    count, dt, root, comm = args[row.count], args[row.datatype], args[row.peer], \
        _comm(args, row)
    nbytes = _nbytes(b, count, ty)
    tmp = malloc(cx.module, b, nbytes, "mpi.adjoint")
    op = args[row.comm]   # a handle's type
    reduce = _decl(cx, "MPI_Reduce", [T.ptr, T.ptr, count.type, dt.type, op.type, root.type,
                                     comm.type])
    b.call(reduce, [dsrc, tmp, count, dt, _sum_op(b, op.type), root, comm])
    if check is not None:   # the root's only: the others receive nothing
        check(b, tmp)
    is_root = b.icmp("eq", _rank(cx, b, comm), root)
    memset_zero(cx.module, b, dsrc, nbytes)
    memcpy(cx.module, b, dsrc, tmp, _only_root(b, is_root, nbytes))
    free(cx.module, b, tmp)


def _reverse_gather(cx, b, inst, row, ty, args, dsrc, dout, check=None) -> None:
    """``gather(x (n), y (n * size at root), root)``: ``x_bar += scatter(y_bar)``."""
    n, dt, m, rt = args[row.count], args[row.datatype], args[row.out_count], \
        args[row.out_datatype]
    root, comm = args[row.peer], _comm(args, row)
    is_root = b.icmp("eq", _rank(cx, b, comm), root)
    size = _rank(cx, b, comm, "MPI_Comm_size")
    if dsrc is not None:
        tmp = malloc(cx.module, b, _nbytes(b, n, ty), "mpi.adjoint")
        zeros = None
        if dout is None:
            zeros = malloc(cx.module, b, _nbytes(b, b.mul(m, size), ty), "mpi.zeros")
            memset_zero(cx.module, b, zeros, _nbytes(b, b.mul(m, size), ty))
        scatter = _decl(cx, "MPI_Scatter", [T.ptr, m.type, rt.type, T.ptr, n.type, dt.type,
                                           root.type, comm.type])
        b.call(scatter, [dout if dout is not None else zeros, m, rt, tmp, n, dt, root, comm])
        if check is not None:
            check(b, tmp)
        _accumulate(cx, b, ty, dsrc, tmp, n)
        free(cx.module, b, tmp)
        if zeros is not None:
            free(cx.module, b, zeros)
    if dout is not None:
        memset_zero(cx.module, b, dout, _only_root(b, is_root, _nbytes(b, b.mul(m, size), ty)))


def _reverse_scatter(cx, b, inst, row, ty, args, dsrc, dout, check=None) -> None:
    """``scatter(x (n * size at root), y (n), root)``: ``x_bar += gather(y_bar)`` at root."""
    n, dt, m, rt = args[row.count], args[row.datatype], args[row.out_count], \
        args[row.out_datatype]
    root, comm = args[row.peer], _comm(args, row)
    if dout is None:
        return
    size = _rank(cx, b, comm, "MPI_Comm_size")
    total = _nbytes(b, b.mul(n, size), ty)
    tmp = malloc(cx.module, b, total, "mpi.adjoint")
    gather = _decl(cx, "MPI_Gather", [T.ptr, m.type, rt.type, T.ptr, n.type, dt.type,
                                     root.type, comm.type])
    b.call(gather, [dout, m, rt, tmp, n, dt, root, comm])
    if check is not None:   # the root's only: the others receive nothing
        check(b, tmp)
    if dsrc is not None:
        is_root = b.icmp("eq", _rank(cx, b, comm), root)
        _accumulate(cx, b, ty, dsrc, tmp, b.select(is_root, b.mul(n, size),
                                                   const_int(n.type, 0)))
    free(cx.module, b, tmp)
    memset_zero(cx.module, b, dout, _nbytes(b, m, ty))


def _reverse_allgather(cx, b, inst, row, ty, args, dsrc, dout, check=None) -> None:
    """``allgather(x (n), y (n * size))``: ``x_bar += allreduce(y_bar)[rank * n:]``."""
    n, dt, m = args[row.count], args[row.datatype], args[row.out_count]
    comm = _comm(args, row)
    if dout is None:
        return
    size = _rank(cx, b, comm, "MPI_Comm_size")
    total = b.mul(m, size)
    nbytes = _nbytes(b, total, ty)
    if dsrc is not None:
        tmp = malloc(cx.module, b, nbytes, "mpi.adjoint")
        fn = _decl(cx, "MPI_Allreduce", [T.ptr, T.ptr, total.type, dt.type, comm.type,
                                         comm.type])
        b.call(fn, [dout, tmp, total, dt, _sum_op(b, comm.type), comm])
        mine = b.gep(ty, tmp, [b.sext(b.mul(_rank(cx, b, comm), n), T.i64)])
        if check is not None:
            check(b, mine)
        _accumulate(cx, b, ty, dsrc, mine, n)
        free(cx.module, b, tmp)
    memset_zero(cx.module, b, dout, nbytes)


_REVERSE = {"send": _reverse_send, "recv": _reverse_recv, "allreduce": _reverse_allreduce,
            "reduce": _reverse_reduce, "bcast": _reverse_bcast, "gather": _reverse_gather,
            "scatter": _reverse_scatter, "allgather": _reverse_allgather}

