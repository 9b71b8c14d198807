"""Rows for the memory functions of Numba's runtime (NRT) and of the C library.

Numba allocates arrays with ``NRT_MemInfo_alloc_aligned(size, align)``, which returns a
``MemInfo`` whose data pointer is stored at byte 24 (:data:`MEMINFO_LAYOUT`); reference counting
and frees act on the MemInfo. Shadows get MemInfos of their own, so a tangent array Numba
returns is an ordinary array Python can box.

These rows are the one statement of what the runtime's functions do to memory: which allocate
(:class:`~pyzyme.rules.spec.Allocation`), release, count references, accept null or move a
list's data (:class:`~pyzyme.rules.spec.Mirror`), which arguments a BLAS or LAPACK helper writes
(:class:`~pyzyme.rules.spec.Blas`). The analyses (:mod:`pyzyme.analysis.overwrite`, type
analysis) and the generators read them here.
"""

from __future__ import annotations

from dataclasses import replace

from pyzyme import naming
from pyzyme.rules import libm
from pyzyme.rules.spec import (Allocation, Blas, CheckpointLoop, FixedPoint, Inactive, Mirror,
                               ParallelFor)

#: NRT's ``MemInfo`` (numba/core/runtime/nrt.cpp): each field's byte offset and whether it
#: holds a pointer (else an integer). ``size`` is the data block's size in bytes.
MEMINFO_LAYOUT = (("refct", 0, False), ("dtor", 8, True), ("dtor_info", 16, True),
                  ("data", 24, True), ("size", 32, False), ("external_allocator", 40, True))
MEMINFO_DATA = 24
MEMINFO_SIZE = 32
#: How Numba allocates an array (``size`` bytes aligned to ``align``: a MemInfo).
NRT_ARRAY_ALLOC = "NRT_MemInfo_alloc_aligned"
#: Reverse mode's allocator of large shadows (pyzyme.diff.tape.pooled_shadows): a MemInfo as
#: ``NRT_ARRAY_ALLOC``'s, its block from the tape pool.
SHADOW_ALLOC = naming.SHADOW_ALLOC

#: Prefixes of the C helpers behind Numba's typed containers (numba/cext/listobject.c,
#: dictobject.c), and the container each serves. They have no rows: their items are copied in
#: and out by C code whose memory pyzyme cannot see, so errors name the container instead.
def _numba_helper(libm_name: str) -> tuple:
    """Numba's helperlib wrapper of C's ``libm_name`` (``numba_gamma`` for ``tgamma``): the
    same partial derivatives, under the helper's double and float spellings."""
    row = next(r for r in libm.ROWS if libm_name in r.names)
    helper = "numba_" + {"tgamma": "gamma"}.get(libm_name, libm_name)
    return (replace(row, names=(helper, helper + "f"), kind="runtime"),)


ROWS = (
    # A prange / parallel=True loop (numba/parfors/parfor_lowering.py): the outlined body is a
    # gufunc launched by the threading layer's parallel_for (numba/np/ufunc/workqueue.c,
    # omppool.cpp, tbbpool.cpp), whose reductions index per-thread slots by get_thread_id().
    # The bookkeeping around a parallel loop (numba/parfors/parfor_lowering.py): the thread
    # pool's size and chunking, the schedule, the GIL released while the workers run. None
    # writes memory the function's values live in, but for the GIL state and the schedule.
    Inactive(("get_num_threads", "get_thread_id", "get_parallel_chunksize",
              "set_parallel_chunksize", "get_sched_size", "allocate_sched",
              "deallocate_sched", "PyEval_SaveThread", "PyEval_RestoreThread",
              "numba_gil_release"), "runtime",
             reason="Numba's thread pool and GIL around a parallel loop: integers and "
                    "handles", writes=()),
    Inactive(("numba_gil_ensure",), "runtime", reason="takes the GIL, its state kept at its "
             "argument", writes=(0,)),
    # The path by which a parallel loop's body raises (Numba's gufunc wrapper): the exception
    # built from Numba's constant exception info and set as the Python error; what it makes
    # and frees are the interpreter's objects, no memory the function's values live in.
    Inactive(("numba_runtime_build_excinfo_struct", "numba_do_raise"), "runtime",
             reason="raises a parallel loop body's exception: interpreter objects", writes=()),
    Inactive(("do_scheduling_signed", "do_scheduling_unsigned"), "runtime",
             reason="splits a parallel loop's iterations into rows: integers", writes=(4,)),
    # What a parallel loop's derivative passes as the arrays carrying no derivative
    # (pyzyme.diff.parallel.launch): the identity, seen as inactive by forward mode over
    # that derivative (hvp), where the pointers come out of memory that carries shadows.
    Inactive(("pyzyme.parfor.constant",), "runtime",
             reason="the arrays of a parallel loop's body that carry no derivative: their "
                    "pointers are passed apart and never differentiated"),
    # A parallel loop's reverse launch block, its rows' tapes discarded where a split tape
    # is dropped unused (pyzyme.diff.parallel.launch): bookkeeping, no derivative.
    Inactive(("pyzyme.parfor.discard",), "runtime",
             reason="discards the tapes of a parallel loop's rows: memory management"),
    ParallelFor(("numba_parallel_for",), "runtime", thread_id="get_thread_id", schedule=0,
                schedulers=("do_scheduling_signed", "do_scheduling_unsigned"),
                unsigned_schedule="do_scheduling_unsigned"),
    # A checkpointed time loop (C: __enzyme_checkpoint_for of <enzyme/checkpoint.h>).
    CheckpointLoop((naming.CHECKPOINT_FOR,), "runtime"),
    Inactive((naming.CHECKPOINT_BUDGET_ERROR,), "runtime",
             reason="sets the Python error of a checkpointed loop over its tape budget"),
    # ... and a checkpointed while loop (__enzyme_checkpoint_while).
    CheckpointLoop((naming.CHECKPOINT_WHILE,), "runtime", until_false=True),
    # A fixed-point iteration (C: __enzyme_fixed_point of <enzyme/fixed_point.h>).
    FixedPoint((naming.FIXED_POINT,), "runtime"),
    *_numba_helper("tgamma"),
    *_numba_helper("frexp"),
    *_numba_helper("ldexp"),
    Inactive(("numba_attempt_nocopy_reshape",), "runtime",
             reason="computes the strides of a reshaped view: integers only"),
    Allocation((NRT_ARRAY_ALLOC, "NRT_MemInfo_alloc_safe_aligned", SHADOW_ALLOC,
                "NRT_MemInfo_alloc", "NRT_MemInfo_alloc_safe",
                "NRT_MemInfo_alloc_dtor", "NRT_MemInfo_alloc_dtor_safe"), "runtime",
               size_args=(0,), data_offset=MEMINFO_DATA),
    # Lists and other variable-size containers: a MemInfo whose data is allocated apart.
    Allocation(("NRT_MemInfo_new_varsize", "NRT_MemInfo_new_varsize_dtor"), "runtime",
               size_args=(0,), data_offset=MEMINFO_DATA, resizable=True),
    Allocation(("NRT_Allocate",), "runtime", size_args=(0,)),
    Allocation(("malloc",), "libm", size_args=(0,)),
    Allocation(("calloc",), "libm", size_args=(0, 1), zeroed=True),
    # Reference counts take null (and do nothing); the last decref frees.
    Mirror(("NRT_incref",), "runtime", refcount=True, null_ok=True),
    Mirror(("NRT_decref",), "runtime", refcount=True, null_ok=True, releases=True),
    Mirror(("NRT_MemInfo_call_dtor", "NRT_Free"), "runtime", releases=True),
    # Resizing a container's storage: done to the shadow container too; the returned data
    # pointer of the shadow call is the shadow of the returned one.
    Mirror(("NRT_MemInfo_varsize_alloc",), "runtime", resizes=True),
    # A list growing or shrinking: its data block moves, contents kept (numba/core/runtime/
    # nrt.cpp: ``mi->data = NRT_Reallocate(mi->data, size); mi->size = size``).
    Mirror(("NRT_MemInfo_varsize_realloc",), "runtime", data_offset=MEMINFO_DATA,
           size_offset=MEMINFO_SIZE, resizes=True),
    Mirror(("free",), "libm", releases=True, null_ok=True),
    # The shadow block is resized alongside the primal one (allocated, from null, when the
    # primal block had none: reverse mode grows its caches this way).
    Mirror(("realloc",), "libm", allocates=True),
    # Reverse mode's tape arrays (pyzyme.diff.tape.pool): when forward mode differentiates a
    # gradient (hvp), tangent caches are allocated, grown and kept alongside.
    Mirror((naming.TAPE_REALLOC,), "runtime", allocates=True),
    Mirror((naming.TAPE_FREE,), "runtime"),
    Inactive((naming.TAPE_CAPACITY,), "runtime",
             reason="the next capacity of a loop's caches: an integer (the tangent caches "
                    "grow to the same one)"),
    # np.dot and @ (numba/_lapack.c): derivatives by the same BLAS calls, transposed.
    # numba_xxdot(kind, conj, n, x, y, *r): r = x . y
    Blas(("numba_xxdot",), "runtime", op="dot", operands=(3, 4), writes=(5,)),
    # numba_xxgemv(kind, trans, m, n, *alpha, A, lda, x, *beta, y): y = alpha op(A) x + beta y
    Blas(("numba_xxgemv",), "runtime", op="gemv", operands=(5, 7), writes=(9,)),
    # numba_xxgemm(kind, ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc)
    Blas(("numba_xxgemm",), "runtime", op="gemm", operands=(7, 9), writes=(12,)),
    # np.linalg.norm (vectors, and matrices' Frobenius norm): x / ||x||, by GEMMs on 1 x n views.
    # numba_xxnrm2(kind, n, x, incx, *r)
    Blas(("numba_xxnrm2",), "runtime", op="nrm2", writes=(4,)),
    # np.linalg.solve: a solve with A (and A^T), and a GEMM.
    # numba_xgesv(kind, n, nrhs, A, lda, ipiv, B, ldb): LU factors in A, pivots, X in B
    Blas(("numba_xgesv",), "runtime", op="gesv", writes=(3, 5, 6)),
    # np.linalg.det, slogdet and inv (LU, then the inverse from it) and cholesky: derivatives
    # by GEMMs and triangular inverses (numba_ez_xxgetri with identity pivots).
    # numba_xxgetrf(kind, m, n, A, lda, ipiv); numba_ez_xxgetri(kind, n, A, lda, ipiv)
    Blas(("numba_xxgetrf",), "runtime", op="getrf", writes=(3, 5)),
    Blas(("numba_ez_xxgetri",), "runtime", op="getri", writes=(2,)),
    # numba_xxpotrf(kind, uplo, n, A, lda)
    Blas(("numba_xxpotrf",), "runtime", op="potrf", writes=(3,)),
    # np.linalg.eigh and eigvalsh: the symmetric eigendecomposition (eigenvectors recomputed
    # for eigvalsh), by GEMMs. numba_ez_xxxevd(kind, jobz, uplo, n, A, lda, w)
    Blas(("numba_ez_xxxevd",), "runtime", op="evd", writes=(4, 6)),
)
