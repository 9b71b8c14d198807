"""Shared adjoints a parallel loop's reverse sweep adds into a private copy per task.

Where every iteration of a parallel loop reads the same array densely and none writes it (a
Lennard-Jones kernel's positions, a model's parameters), each reverse task adds its adjoints
into a zeroed copy of its own (:func:`privatized` says which slots; :func:`private_copies`
makes the copies in the forward sweep), summed into the shadow after the reverse launch, in
task order (:func:`sum_private_copies`), instead of an atomic add per element. Each copy
starts on a page of its own (:func:`copy_stride`), so no two tasks write the same page, and no
task writes a page that holds other data.
"""

from __future__ import annotations

from functools import partial

from pyzyme.analysis.parallel_access import dense_reads, owned_arrays
from pyzyme.diff.memory_calls import free_function
from pyzyme.diff.parallel import block as B
from pyzyme.diff.signature import ParallelBody
from pyzyme.errors import TypeAnalysisError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Value, const_null
from pyzyme.rules import spec
from pyzyme.transforms.parallel_body import slot_loads

__all__ = ["privatized", "private_copies", "copy_stride", "sum_private_copies"]

# Tasks' copies a cache line apart still slowed each other: GMM's gradient at 2 threads sped
# up 84-89% as much as its primal with 64-byte spacing, 93-95% with 128 and 99-100% with
# pages (the hardware prefetchers fetch neighbouring lines, within a page, into the core that
# streams through its copy, taking them from the core that writes them).
_PAGE = 4096
_PRODUCTS = ("dot", "gemv", "gemm")


def privatized(cx, split, known: ParallelBody, stored: dict) -> tuple:
    """The slots (with their element type and extent) whose adjoints each reverse task adds
    into a private copy, summed into the shadow after the launch, instead of an atomic add
    per element: arrays the body reads densely and never writes (a Lennard-Jones kernel's
    positions, a model's parameters), other iterations read too (not owned by one), whose
    bytes are known (contiguous arguments, allocations of this function) and hold floats,
    where the launch's arrays are distinct."""
    if not known.distinct:
        # A slot read here may be another slot's memory written here (a fused parfor passes
        # one array twice): the copy's adds, made after the launch, would come after that
        # write's reverse has taken the adjoint.
        return ()
    reads = slot_loads(split)
    schedule = [load for load, k in reads.items() if k == known.schedule]
    owned = owned_arrays(split, schedule, known.first_index)
    try:
        types = cx.types()
    except TypeAnalysisError:
        return ()
    found = []
    products = partial(_product_reads, cx)
    for k, values in sorted(stored.items()):
        roots = [load for load, slot in reads.items() if slot == k]
        if len(values) != 1 or not roots or not all(dense_reads(r, products) for r in roots):
            continue
        if any(r in owned.roots and (owned.roots[r][2] == 0 or owned.roots[r][0] in owned.bounds)
               for r in roots):
            # Each iteration owns its elements (plain adds already), or shares them with its
            # neighbours only (atomic near its row's ends): cheaper than a copy per task.
            continue
        extent = cx.array_extent(values[0])
        element = types.tree(values[0]).data0()[(-1,)]
        if extent is None or not element.is_float or element.size not in (4, 8):
            continue
        found.append((k, T.double if element.size == 8 else T.float, extent))
    return tuple(found)


def _product_reads(cx, call: I.CallBase, pointer: Value) -> bool:
    """Whether ``call`` is one of Numba's BLAS helpers for a matrix product (``np.dot``,
    ``@``) that takes ``pointer`` as an operand it only reads: its reverse adds the
    operand's adjoint by a BLAS call of its own, into the private copy as into the shadow."""
    callee = call.called_function
    row = cx.rules.lookup(callee.name, "call") if callee is not None else None
    if not isinstance(row, spec.Blas) or row.op not in _PRODUCTS:
        return False
    places = [i for i, a in enumerate(call.args) if a is pointer]
    return bool(places) and all(i in row.operands and i not in row.writes for i in places)


def private_copies(cx, layout: B.Layout, block: Value) -> None:
    """In the forward sweep, before the launch: zeroed copies of each privatized slot's
    shadow, one per reverse task (the forward sweep hands each row the copy of the task that
    will reverse it: the body's reverse uses the shadow pointers its forward sweep kept),
    freed when the reverse sweep is done. With one task there are none: it adds into the
    shadow itself."""
    b = cx.fb
    slots = B.load(b, T.i64, block, B.NSLOTS)
    calloc = cx.module.declare("calloc", T.FunctionType(T.ptr, [T.i64, T.i64]))
    free = free_function(cx.module)
    for p in range(len(layout.private)):
        size = B.load(b, T.i64, block, layout.privates + 2 * p + 1)
        several = b.icmp("ugt", slots, B.i64(1))
        bytes_ = b.add(b.mul(slots, copy_stride(b, size)), B.i64(_PAGE))
        raw = b.call(calloc, [b.select(several, bytes_, B.i64(0)), B.i64(1)],
                     name="private.raw")
        used = b.select(several, _page_aligned(b, raw), const_null(T.ptr))
        B.store(b, used, block, layout.privates + 2 * p)
        cx.release_later(I.Call(free, [raw], free.function_type), raw, const_null(T.ptr))


def _page_aligned(b: IRBuilder, raw: Value) -> Value:
    """The first page boundary at or past ``raw``: the first task's copy starts on a page of
    its own, not on one that holds the end of the block before it in the launching thread's
    heap (a temporary of the function that every task reads, or the launching thread's own
    scratch)."""
    address = b.ptrtoint(raw, T.i64)
    skip = b.and_(b.sub(B.i64(0), address), B.i64(_PAGE - 1))
    return b.gep(T.i8, raw, [skip], name="private")


def copy_stride(b: IRBuilder, size: Value) -> Value:
    """Bytes from one task's private copy of ``size`` bytes to the next: ``size`` rounded up
    to whole pages, so no two tasks write the same page (the GMM's parameter adjoints are a
    few hundred bytes a task: one line, or one pair of lines, shared went back and forth
    between the cores at every point's reverse)."""
    return b.and_(b.add(size, B.i64(_PAGE - 1)), B.i64(-_PAGE))


def sum_private_copies(cx, layout: B.Layout, block: Value) -> None:
    """After the reverse launch: each privatized slot's copies summed into its shadow (in
    task order: the same sum at every run)."""
    if not layout.private:
        return
    b, fn = cx.rb, cx.rev
    slots = B.load(b, T.i64, block, B.NSLOTS)
    for p, (k, ty) in enumerate(layout.private):
        copies = B.load(b, T.ptr, block, layout.privates + 2 * p)
        size = B.load(b, T.i64, block, layout.privates + 2 * p + 1)
        shadow = B.load(b, T.ptr, block, layout.shadows + k)
        count = b.udiv(size, B.i64(4 if ty == T.float else 8))
        stride = b.udiv(copy_stride(b, size), B.i64(4 if ty == T.float else 8))
        check, loop, inner, stored, done = (fn.append_block(n) for n in (
            "private.check", "private.sum", "private.sum.task", "private.sum.next",
            "private.done"))
        b.cbranch(b.icmp("eq", copies, const_null(T.ptr)), done, check)
        b.position_at_end(check)
        b.cbranch(b.icmp("eq", count, B.i64(0)), done, loop)
        # for e in [0, count): shadow[e] += the sum over tasks t of copies[t * count + e]
        b.position_at_end(loop)
        e = b.phi(T.i64, name="e")
        out = b.gep(ty, shadow, [e])
        first = b.load(ty, out)
        b.br(inner)
        b.position_at_end(inner)
        task = b.phi(T.i64, name="task")
        acc = b.phi(ty, name="acc")
        part = b.load(ty, b.gep(ty, copies, [b.add(b.mul(task, stride), e)]))
        total = b.fadd(acc, part)
        nxt_task = b.add(task, B.i64(1))
        task.add_incoming(B.i64(0), loop)
        task.add_incoming(nxt_task, inner)
        acc.add_incoming(first, loop)
        acc.add_incoming(total, inner)
        b.cbranch(b.icmp("ult", nxt_task, slots), inner, stored)
        b.position_at_end(stored)
        b.store(total, out)
        nxt = b.add(e, B.i64(1))
        e.add_incoming(B.i64(0), check)
        e.add_incoming(nxt, stored)
        b.cbranch(b.icmp("ult", nxt, count), loop, done)
        b.position_at_end(done)
