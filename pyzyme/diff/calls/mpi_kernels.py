"""What the derivatives of MPI calls are made of: MPI functions declared, the shadow tag, byte
counts, and internal functions of the module built once (adding a received adjoint into a
shadow; the records of nonblocking requests).

A nonblocking send or receive is known by its request, which the program may copy before it
waits (numba-mpi's ``waitall`` of a tuple stacks the requests into a new array); the request's
*value* stays the same, so the forward sweep keeps a record per pending request in a list keyed
by that value (Enzyme's shadow request, SC22): ``isend``/``irecv`` add one, ``wait``/``waitall``
(and a ``test`` that completes) take theirs out and keep it for the reverse sweep. In the
reverse sweep the wait starts the adjoint communication (a receive of the adjoint where the
program sent, a send of the shadow where it received), and the ``isend``/``irecv`` completes
it, where the program's request began.

A record is a heap block of :data:`RECORD_BYTES`, its fields 8-byte slots at the offsets below
(integer handles widened to 64 bits, so one layout serves every MPI library).
"""

from __future__ import annotations

from pyzyme.diff.memory_calls import (abort, free, malloc, memset_zero, message_text,
                                      write_stderr)
from pyzyme.ir import IRBuilder
from pyzyme.ir import types as T
from pyzyme.ir.values import const_float, const_int, const_null
from pyzyme.rules.mpi import HANDLES, SHADOW_TAG_BIT

__all__ = ["declare", "shadow_tag", "nbytes", "accumulate", "status", "RECORD_BYTES", "NO_KEY",
           "new_record", "take", "take_all", "start", "start_all", "finish", "MARKER",
           "check_dropped", "mark_missing", "check_marker", "site_check"]

_KEY, _NEXT, _SHADOW, _TMP, _COUNT, _DTYPE, _PEER, _TAG, _COMM, _KIND, _ELSIZE = \
    (8 * i for i in range(11))
_CHECK = 88           # a checker of what arrives (see site_check), or null
_REQUEST = 96         # the adjoint's own request (MPI_Request: at most 8 bytes)
_STATUS = 104         # its status
STATUS_BYTES = 64     # room for any library's MPI_Status (MPICH: 20 bytes, Open MPI: 24)
RECORD_BYTES = _STATUS + STATUS_BYTES
SENT, RECEIVED = 1, 2
#: A key no request has (handles are 32-bit integers or user-space addresses): looked up
#: where a test did not complete its request, so that nothing is taken.
NO_KEY = const_int(T.i64, -(1 << 62))
_PENDING = "pyzyme.mpi.pending"


def declare(module, name: str, params: list):
    """MPI function ``name``, returning its status (an ``i32``), declared in ``module``."""
    return module.declare(name, T.FunctionType(T.i32, params))


def shadow_tag(b: IRBuilder, tag):
    """The tag of the derivative's message mirroring one sent with ``tag``."""
    return b.or_(tag, const_int(tag.type, SHADOW_TAG_BIT))


def _i64(b: IRBuilder, v):
    if v.type == T.i64:
        return v
    if v.type.is_pointer:
        return b.ptrtoint(v, T.i64)
    return b.sext(v, T.i64)


def _as(b: IRBuilder, v, ty: T.Type):
    if ty == T.i64:
        return v
    if ty.is_pointer:
        return b.inttoptr(v, ty)
    return b.trunc(v, ty)


def nbytes(b: IRBuilder, count, ty: T.Type):
    """The bytes of ``count`` elements of float type ``ty``, as an ``i64``."""
    return b.mul(_i64(b, count), const_int(T.i64, ty.bits // 8))


def status(b: IRBuilder):
    """A stack slot a status can be written to."""
    return b.entry_alloca(T.ArrayType(STATUS_BYTES, T.i8), name="mpi.status")


def _function(module, name: str, ret: T.Type, params: list):
    fn = module.get_function(name)
    if fn is not None:
        return fn, None
    fn = module.add_function(name, T.FunctionType(ret, params), prefix="internal")
    return fn, IRBuilder(fn.append_block("entry"))


def _loop(b: IRBuilder, count, body) -> None:
    """``for i in range(count): body(b, i)`` at ``b`` (``count`` an ``i64``)."""
    fn = b.block.parent
    head = b.block
    loop, done = fn.append_block("loop"), fn.append_block("done")
    zero = const_int(T.i64, 0)
    b.cbranch(b.icmp("sgt", count, zero), loop, done)
    b.position_at_end(loop)
    i = b.phi(T.i64, name="i")
    i.add_incoming(zero, head)
    body(b, i)
    following = b.add(i, const_int(T.i64, 1))
    i.add_incoming(following, b.block)
    b.cbranch(b.icmp("slt", following, count), loop, done)
    b.position_at_end(done)


def _add_function(module, ty: T.Type):
    """``pyzyme.mpi.add.<d|s>(dst, src, n)``: ``dst[i] += src[i]`` for ``i < n``."""
    fn, b = _function(module, f"pyzyme.mpi.add.{'d' if ty == T.double else 's'}", T.void,
                      [T.ptr, T.ptr, T.i64])
    if b is None:
        return fn
    dst, src, n = fn.args

    def body(b, i):
        at = b.gep(ty, dst, [i])
        b.store(b.fadd(b.load(ty, at), b.load(ty, b.gep(ty, src, [i]))), at)
    _loop(b, n, body)
    b.ret_void()
    return fn


def accumulate(module, b: IRBuilder, ty: T.Type, dst, src, count) -> None:
    """``dst[i] += src[i]`` for the ``count`` elements of float type ``ty``."""
    b.call(_add_function(module, ty), [dst, src, _i64(b, count)])


# -- the records of nonblocking requests -----------------------------------------------------
def _field(b: IRBuilder, rec, offset: int):
    return b.gep(T.i8, rec, [const_int(T.i64, offset)])


def _get(b: IRBuilder, rec, offset: int, ty: T.Type = T.i64):
    return b.load(ty, _field(b, rec, offset))


def _pending(module):
    found = module.get_global(_PENDING)
    if found is not None:
        return found
    return module.add_global(_PENDING, T.ptr, const_null(T.ptr), prefix="internal")


def _request_type() -> T.Type:
    return T.IntType(8 * (HANDLES.request_bytes or 4))


def request_key(b: IRBuilder, request):
    """The value of the request at pointer ``request``, as an ``i64``."""
    return b.zext(b.load(_request_type(), request), T.i64) \
        if _request_type() != T.i64 else b.load(T.i64, request)


def new_record(module, b: IRBuilder, call, row, kind: int, shadow, ty: T.Type, check=None):
    """After the program's ``isend``/``irecv`` ``call`` (its copy in the forward sweep): a
    record of it, added to the pending list under its request's value; returned. ``check``:
    a :func:`site_check` run on the adjoint that arrives for a send (a pointer, maybe null)."""
    rec = malloc(module, b, const_int(T.i64, RECORD_BYTES), "mpi.record")
    args = call.args
    fields = {_KEY: request_key(b, args[row.request]), _SHADOW: _i64(b, shadow),
              _TMP: const_int(T.i64, 0), _COUNT: _i64(b, args[row.count]),
              _DTYPE: _i64(b, args[row.datatype]), _PEER: _i64(b, args[row.peer]),
              _TAG: _i64(b, shadow_tag(b, args[row.tag])), _COMM: _i64(b, args[row.comm]),
              _KIND: const_int(T.i64, kind), _ELSIZE: const_int(T.i64, ty.bits // 8),
              _REQUEST: const_int(T.i64, HANDLES.request_null or 0),
              _CHECK: _i64(b, check) if check is not None else const_int(T.i64, 0)}
    for offset, value in fields.items():
        b.store(value, _field(b, rec, offset))
    head = _pending(module)
    b.store(b.load(T.ptr, head), _field(b, rec, _NEXT))
    b.store(rec, head)
    return rec


def take(module, b: IRBuilder, key):
    """The record of the pending request of value ``key`` (an ``i64``), out of the list;
    null where there is none (a request of integers, or one already taken)."""
    fn, fb = _function(module, "pyzyme.mpi.take", T.ptr, [T.i64])
    if fb is not None:
        (k,) = fn.args
        head = _pending(module)
        loop, check, found, none = (fn.append_block(n) for n in ("loop", "check", "found",
                                                                  "none"))
        entry = fb.block
        fb.br(loop)
        fb.position_at_end(loop)
        link = fb.phi(T.ptr, name="link")   # the slot pointing at the record looked at
        link.add_incoming(head, entry)
        rec = fb.load(T.ptr, link)
        fb.cbranch(fb.icmp("eq", rec, const_null(T.ptr)), none, check)
        fb.position_at_end(check)
        nxt = _field(fb, rec, _NEXT)
        link.add_incoming(nxt, check)
        fb.cbranch(fb.icmp("eq", _get(fb, rec, _KEY), k), found, loop)
        fb.position_at_end(found)
        fb.store(fb.load(T.ptr, nxt), link)
        fb.ret(rec)
        fb.position_at_end(none)
        fb.ret(const_null(T.ptr))
    return b.call(fn, [key], name="mpi.record")


def take_all(module, b: IRBuilder, requests, count):
    """An array of the records of the ``count`` requests at ``requests`` (each taken, or
    null), on the heap."""
    fn, fb = _function(module, "pyzyme.mpi.take_all", T.ptr, [T.ptr, T.i64])
    if fb is not None:
        reqs, n = fn.args
        out = malloc(module, fb, fb.mul(n, const_int(T.i64, 8)), "mpi.records")

        def body(fb, i):
            key = request_key(fb, fb.gep(_request_type(), reqs, [i]))
            fb.store(take(module, fb, key), fb.gep(T.ptr, out, [i]))
        _loop(fb, n, body)
        fb.ret(out)
    return b.call(fn, [requests, _i64(b, count)], name="mpi.records")


def start(module, b: IRBuilder, rec, types: tuple) -> None:
    """Reverse sweep, where the program waited: the adjoint communication of the request of
    record ``rec`` (nothing for null) begins. ``types``: those of the count, datatype, peer,
    tag and communicator in the program's calls."""
    b.call(_start_function(module, types), [rec])


def _start_function(module, types: tuple):
    suffix = ".".join(str(t) for t in types)
    fn, b = _function(module, f"pyzyme.mpi.start.{suffix}", T.void, [T.ptr])
    if b is None:
        return fn
    (rec,) = fn.args
    go, send, receive, done = (fn.append_block(n) for n in ("go", "send", "receive", "done"))
    b.cbranch(b.icmp("eq", rec, const_null(T.ptr)), done, go)
    b.position_at_end(go)
    ct, dt, pt, tt, mt = types
    args = [_as(b, _get(b, rec, off), t) for off, t in
            ((_COUNT, ct), (_DTYPE, dt), (_PEER, pt), (_TAG, tt), (_COMM, mt))]
    params = [T.ptr, ct, dt, pt, tt, mt, T.ptr]
    b.cbranch(b.icmp("eq", _get(b, rec, _KIND), const_int(T.i64, SENT)), send, receive)
    b.position_at_end(send)     # the program sent: the adjoint comes back
    size = b.mul(_get(b, rec, _COUNT), _get(b, rec, _ELSIZE))
    tmp = malloc(module, b, size, "mpi.adjoint")
    b.store(b.ptrtoint(tmp, T.i64), _field(b, rec, _TMP))
    b.call(declare(module, "MPI_Irecv", params), [tmp, *args, _field(b, rec, _REQUEST)])
    b.br(done)
    b.position_at_end(receive)  # the program received: its shadow goes back
    shadow = b.inttoptr(_get(b, rec, _SHADOW), T.ptr)
    b.call(declare(module, "MPI_Isend", params), [shadow, *args, _field(b, rec, _REQUEST)])
    b.br(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def start_all(module, b: IRBuilder, records, count, types: tuple) -> None:
    """:func:`start` for each of the ``count`` records of array ``records``, which is freed."""
    one = _start_function(module, types)
    fn, fb = _function(module, f"pyzyme.mpi.start_all.{one.name}", T.void, [T.ptr, T.i64])
    if fb is not None:
        recs, n = fn.args
        _loop(fb, n, lambda fb, i: fb.call(one, [fb.load(T.ptr, fb.gep(T.ptr, recs, [i]))]))
        free(module, fb, recs)
        fb.ret_void()
    b.call(fn, [records, _i64(b, count)])


def finish(module, b: IRBuilder, rec, ty: T.Type) -> None:
    """Reverse sweep, where the program's ``isend``/``irecv`` began: the adjoint
    communication of record ``rec`` completes; a received adjoint is added into the send
    buffer's shadow, a sent shadow is zeroed (the program's receive overwrote its buffer).
    The record is freed."""
    name = f"pyzyme.mpi.finish.{'d' if ty == T.double else 's'}"
    fn, fb = _function(module, name, T.void, [T.ptr])
    if fb is not None:
        (r,) = fn.args
        sent, add, received, done = (fn.append_block(n) for n in ("sent", "add", "received",
                                                                  "done"))
        wait = declare(module, "MPI_Wait", [T.ptr, T.ptr])
        fb.call(wait, [_field(fb, r, _REQUEST), _field(fb, r, _STATUS)])
        shadow = fb.inttoptr(_get(fb, r, _SHADOW), T.ptr)
        count = _get(fb, r, _COUNT)
        fb.cbranch(fb.icmp("eq", _get(fb, r, _KIND), const_int(T.i64, SENT)), sent, received)
        fb.position_at_end(sent)
        tmp = fb.inttoptr(_get(fb, r, _TMP), T.ptr)
        # no adjoint started (the program never completed its request): nothing to add
        fb.cbranch(fb.icmp("eq", tmp, const_null(T.ptr)), done, add)
        fb.position_at_end(add)
        _run_check(module, fb, r, tmp)
        accumulate(module, fb, ty, shadow, tmp, count)
        free(module, fb, tmp)
        fb.br(done)
        fb.position_at_end(received)
        memset_zero(module, fb, shadow, nbytes(fb, count, ty))
        fb.br(done)
        fb.position_at_end(done)
        free(module, fb, r)
        fb.ret_void()
    b.call(fn, [rec])


# -- forward mode: the tangents' requests -----------------------------------------------------
def as_i64(b: IRBuilder, v):
    """``v`` (an integer or a pointer) as an ``i64``."""
    return _i64(b, v)


def null():
    return const_null(T.ptr)


def tangent_request_slot(module, b: IRBuilder, key, scratch=None, check=None):
    """Forward mode, after the program's ``isend``/``irecv`` of request value ``key``: a
    record in the pending list under ``key``, whose request slot (returned) the tangent's
    call fills; ``scratch``, a buffer standing for a missing tangent, is freed with it, after
    ``check`` (``(site_check, count, comm)``, for a receive) looked at what arrived in it."""
    rec = malloc(module, b, const_int(T.i64, RECORD_BYTES), "mpi.tangent")
    b.store(key, _field(b, rec, _KEY))
    checker, count, comm = check if check is not None else (None, None, None)
    b.store(_i64(b, checker) if checker is not None else const_int(T.i64, 0),
            _field(b, rec, _CHECK))
    if checker is not None:
        b.store(_i64(b, count), _field(b, rec, _COUNT))
        b.store(_i64(b, comm), _field(b, rec, _COMM))
    b.store(_i64(b, scratch) if scratch is not None else const_int(T.i64, 0),
            _field(b, rec, _TMP))
    head = _pending(module)
    b.store(b.load(T.ptr, head), _field(b, rec, _NEXT))
    b.store(rec, head)
    return _field(b, rec, _REQUEST)


def _complete_function(module):
    """``pyzyme.mpi.complete(key)``: the tangents' requests of the program's request ``key``
    (one per lane of vector forward mode) waited for, their records freed."""
    fn, fb = _function(module, "pyzyme.mpi.complete", T.void, [T.i64])
    if fb is None:
        return fn
    (key,) = fn.args
    loop, go, done = (fn.append_block(n) for n in ("loop", "go", "done"))
    fb.br(loop)
    fb.position_at_end(loop)
    rec = take(module, fb, key)
    fb.cbranch(fb.icmp("eq", rec, const_null(T.ptr)), done, go)
    fb.position_at_end(go)
    fb.call(declare(module, "MPI_Wait", [T.ptr, T.ptr]),
            [_field(fb, rec, _REQUEST), _field(fb, rec, _STATUS)])
    _run_check(module, fb, rec, fb.inttoptr(_get(fb, rec, _TMP), T.ptr))
    fb.call(module.declare("free", T.FunctionType(T.void, [T.ptr])),
            [fb.inttoptr(_get(fb, rec, _TMP), T.ptr)])   # free(NULL) does nothing
    free(module, fb, rec)
    fb.br(loop)
    fb.position_at_end(done)
    fb.ret_void()
    return fn


def complete_tangents(module, b: IRBuilder, requests, count) -> None:
    """Before the program waits for the ``count`` requests at ``requests``: their tangents'
    requests completed."""
    one = _complete_function(module)
    fn, fb = _function(module, "pyzyme.mpi.complete_all", T.void, [T.ptr, T.i64])
    if fb is not None:
        reqs, n = fn.args
        _loop(fb, n, lambda fb, i: fb.call(
            one, [request_key(fb, fb.gep(_request_type(), reqs, [i]))]))
        fb.ret_void()
    b.call(fn, [requests, count])


def complete_tangent_if(module, b: IRBuilder, key, done) -> None:
    """After the program tested its request of value ``key``: its tangent's request
    completed where the test says the program's did (``done``, an ``i1``)."""
    b.call(_complete_function(module), [b.select(done, key, NO_KEY)])


# -- max and min: the rank holding the extremum ---------------------------------------------
def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def handle(name: str, ty: T.Type):
    """The predefined handle ``MPI_<name>`` as a constant of type ``ty``."""
    value = HANDLES.named[name]
    if ty.is_pointer:
        return const_int(T.i64, value)   # converted by the caller (Open MPI's handles)
    return const_int(ty, _signed32(value) if ty.width == 32 else value)


def owners(module, b: IRBuilder, ty: T.Type, x, r, count, rank, datatype_ty, op_ty, comm):
    """For each of the ``count`` elements of ``r = allreduce(x, max or min)``: the lowest
    rank whose ``x`` equals it (ties go to one rank, so the derivative is counted once), in
    a heap array of ``i32`` (the caller frees it)."""
    fn, fb = _function(module, f"pyzyme.mpi.candidates.{'d' if ty == T.double else 's'}",
                       T.void, [T.ptr, T.ptr, T.ptr, T.i64, T.i32])
    if fb is not None:
        xs, rs, out, n, me = fn.args

        def body(fb, i):
            same = fb.fcmp("oeq", fb.load(ty, fb.gep(ty, xs, [i])),
                           fb.load(ty, fb.gep(ty, rs, [i])))
            fb.store(fb.select(same, me, const_int(T.i32, 2 ** 31 - 1)),
                     fb.gep(T.i32, out, [i]))
        _loop(fb, n, body)
        fb.ret_void()
    n = _i64(b, count)
    size = b.mul(n, const_int(T.i64, 4))
    candidates = malloc(module, b, size, "mpi.candidates")
    winners = malloc(module, b, size, "mpi.owners")
    b.call(fn, [x, r, candidates, n, rank])
    int32, minimum = handle("INT32_T", datatype_ty), handle("MIN", op_ty)
    if datatype_ty.is_pointer:
        int32, minimum = b.inttoptr(int32, datatype_ty), b.inttoptr(minimum, op_ty)
    allreduce = declare(module, "MPI_Allreduce", [T.ptr, T.ptr, count.type, datatype_ty,
                                                  op_ty, comm.type])
    b.call(allreduce, [candidates, winners, count, int32, minimum, comm])
    free(module, b, candidates)
    return winners


def add_owned(module, b: IRBuilder, ty: T.Type, dst, src, winners, count, rank) -> None:
    """``dst[i] += src[i]`` where this rank holds element ``i``'s extremum."""
    fn, fb = _function(module, f"pyzyme.mpi.add_owned.{'d' if ty == T.double else 's'}",
                       T.void, [T.ptr, T.ptr, T.ptr, T.i64, T.i32])
    if fb is not None:
        ds, ss, ws, n, me = fn.args

        def body(fb, i):
            at = fb.gep(ty, ds, [i])
            mine = fb.icmp("eq", fb.load(T.i32, fb.gep(T.i32, ws, [i])), me)
            add = fb.fadd(fb.load(ty, at), fb.load(ty, fb.gep(ty, ss, [i])))
            fb.store(fb.select(mine, add, fb.load(ty, at)), at)
        _loop(fb, n, body)
        fb.ret_void()
    b.call(fn, [dst, src, winners, _i64(b, count), rank])


# -- derivatives that would be lost: a receive buffer without one --------------------------
#: The first element of the adjoint a rank sends back for a receive buffer it keeps no
#: derivative of (a signaling NaN with a payload no arithmetic makes): the sender, whose data
#: has a derivative, finds it and stops the program instead of adding nothing. A reduction's
#: sum keeps the payload and sets the quiet bit (:data:`QUIET`), which the check ignores.
MARKER = {64: 0x7FF0_7A79_6D65_0001, 32: 0x7F87_A791}
QUIET = {64: 1 << 51, 32: 1 << 22}


def _stop_function(module, name: str, params: list, find):
    """``name(*params, comm, text, length)``: where ``find(b, *params)`` (an ``i1``) holds, the
    message ``text`` on stderr and ``MPI_Abort(comm, 1)``: the other ranks would wait forever
    on a rank raising alone."""
    fn, fb = _function(module, name, T.void, params)
    if fb is None:
        return fn
    *values, comm, text, length = fn.args
    stop, done = fn.append_block("stop"), fn.append_block("done")
    found = find(fb, *values)
    fb.cbranch(found, stop, done)
    fb.position_at_end(stop)
    write_stderr(module, fb, text, length)
    fb.call(declare(module, "MPI_Abort", [comm.type, T.i32]), [comm, const_int(T.i32, 1)])
    abort(module, fb)
    fb.position_at_end(done)
    fb.ret_void()
    return fn


def _flag(b: IRBuilder):
    """A stack slot holding an ``i1``, false."""
    slot = b.entry_alloca(T.i1, name="found")
    b.store(const_int(T.i1, 0), slot)
    return slot


def _suffix(ty: T.Type, comm) -> str:
    return f"{'d' if ty == T.double else 's'}.{comm.type}"


def check_dropped(module, b: IRBuilder, ty: T.Type, buf, count, comm, text: str) -> None:
    """Forward mode, where a tangent arrived in ``buf`` (``count`` elements) for a buffer that
    has none: stop with ``text`` unless every element is zero (dropping zeros loses nothing)."""
    def find(fb, p, n):
        def look(fb, i):
            here = fb.fcmp("une", fb.load(ty, fb.gep(ty, p, [i])), const_float(ty, 0.0))
            fb.store(fb.or_(fb.load(T.i1, seen), here), seen)
        seen = _flag(fb)
        _loop(fb, n, look)
        return fb.load(T.i1, seen)
    fn = _stop_function(module, f"pyzyme.mpi.dropped.{_suffix(ty, comm)}",
                        [T.ptr, T.i64, comm.type, T.ptr, T.i64], find)
    b.call(fn, [buf, _i64(b, count), comm, *message_text(module, text, "pyzyme.mpi.lost")])


def _parts(b: IRBuilder, parts, count):
    """``parts`` (an ``i64``; 1 when None) where ``count`` (the elements of a part) is
    positive, else 0: an empty message has no first element."""
    parts = const_int(T.i64, 1) if parts is None else _i64(b, parts)
    count = _i64(b, count)
    return b.select(b.icmp("sgt", count, const_int(T.i64, 0)), parts, const_int(T.i64, 0)), \
        count


def mark_missing(module, b: IRBuilder, ty: T.Type, buf, count, parts=None) -> None:
    """``buf`` (zeroed) stands for a receive buffer's missing adjoint: the first element of
    each of its ``parts`` parts of ``count`` elements (one part when None) becomes
    :data:`MARKER`, which :func:`check_marker` finds at the sender."""
    bits = T.IntType(ty.bits)
    fn, fb = _function(module, f"pyzyme.mpi.mark.{'d' if ty == T.double else 's'}", T.void,
                       [T.ptr, T.i64, T.i64])
    if fb is not None:
        p, k, n = fn.args
        _loop(fb, k, lambda fb, i: fb.store(const_int(bits, MARKER[ty.bits]),
                                            fb.gep(ty, p, [fb.mul(i, n)])))
        fb.ret_void()
    b.call(fn, [buf, *_parts(b, parts, count)])


def check_marker(module, b: IRBuilder, ty: T.Type, buf, count, comm, text: str,
                 parts=None) -> None:
    """Reverse sweep, where the adjoint of data this rank sent arrived in ``buf`` (``parts``
    parts of ``count`` elements; one when None): stop with ``text`` if a receiver kept no
    derivative of it (:func:`mark_missing`; summed with other ranks' adjoints, quieted)."""
    bits = T.IntType(ty.bits)

    def find(fb, p, k, n):
        def look(fb, i):   # the first element of each part
            at = fb.and_(fb.load(bits, fb.gep(ty, p, [fb.mul(i, n)])),
                         const_int(bits, ~QUIET[ty.bits] & ((1 << ty.bits) - 1)))
            here = fb.icmp("eq", at, const_int(bits, MARKER[ty.bits]))
            fb.store(fb.or_(fb.load(T.i1, marked), here), marked)
        marked = _flag(fb)
        _loop(fb, k, look)
        return fb.load(T.i1, marked)
    fn = _stop_function(module, f"pyzyme.mpi.unmatched.{_suffix(ty, comm)}",
                        [T.ptr, T.i64, T.i64, comm.type, T.ptr, T.i64], find)
    b.call(fn, [buf, *_parts(b, parts, count), comm,
                *message_text(module, text, "pyzyme.mpi.lost")])


def site_check(module, kind: str, ty: T.Type, comm_type: T.Type, text: str):
    """A function ``void(ptr record, ptr buffer)`` running :func:`check_dropped`
    (``kind="dropped"``) or :func:`check_marker` (``"marker"``) on ``buffer`` with the count and
    communicator of ``record``: what a nonblocking request's completion calls, where the
    request's datatype and call site are no longer known."""
    fn = module.add_function(module.unique_global_name(f"pyzyme.mpi.check.{kind}"),
                             T.FunctionType(T.void, [T.ptr, T.ptr]), prefix="internal")
    rec, buf = fn.args
    fb = IRBuilder(fn.append_block("entry"))
    count, comm = _get(fb, rec, _COUNT), _as(fb, _get(fb, rec, _COMM), comm_type)
    (check_dropped if kind == "dropped" else check_marker)(module, fb, ty, buf, count, comm,
                                                           text)
    fb.ret_void()
    return fn


def _run_check(module, b: IRBuilder, rec, buf) -> None:
    """The :func:`site_check` of record ``rec`` on ``buf``, where it has one."""
    fn = b.block.parent
    run, done = fn.append_block("check"), fn.append_block("checked")
    checker = b.inttoptr(_get(b, rec, _CHECK), T.ptr)
    b.cbranch(b.icmp("eq", checker, const_null(T.ptr)), done, run)
    b.position_at_end(run)
    b.call(checker, [rec, buf], function_type=T.FunctionType(T.void, [T.ptr, T.ptr]))
    b.br(done)
    b.position_at_end(done)
