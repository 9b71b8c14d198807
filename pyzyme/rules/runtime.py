"""Rows for the memory functions of Numba's runtime (NRT) and of the C library.

Numba allocates arrays with ``NRT_MemInfo_alloc_aligned(size, align)``, which returns a
``MemInfo`` whose data pointer is stored at byte 24 (numba/core/runtime/nrt.cpp: ``refct``,
``dtor``, ``dtor_info``, ``data``); reference counting and frees act on the MemInfo. Shadows get
MemInfos of their own, so a tangent array Numba returns is an ordinary array Python can box.
"""

from __future__ import annotations

from dataclasses import replace

from pyzyme.rules import libm
from pyzyme.rules.spec import Allocation, Blas, Inactive, Mirror

_MEMINFO_DATA = 24
_MEMINFO_SIZE = 32   # the data block's size in bytes, for MemInfos of variable size

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
    *_numba_helper("tgamma"),
    *_numba_helper("frexp"),
    *_numba_helper("ldexp"),
    Inactive(("numba_attempt_nocopy_reshape",), "runtime",
             reason="computes the strides of a reshaped view: integers only"),
    Allocation(("NRT_MemInfo_alloc_aligned", "NRT_MemInfo_alloc_safe_aligned",
                "NRT_MemInfo_alloc", "NRT_MemInfo_alloc_safe",
                "NRT_MemInfo_alloc_dtor", "NRT_MemInfo_alloc_dtor_safe"), "runtime",
               size_args=(0,), data_offset=_MEMINFO_DATA),
    # Lists and other variable-size containers: a MemInfo whose data is allocated apart.
    Allocation(("NRT_MemInfo_new_varsize", "NRT_MemInfo_new_varsize_dtor"), "runtime",
               size_args=(0,), data_offset=_MEMINFO_DATA),
    Allocation(("NRT_Allocate",), "runtime", size_args=(0,)),
    Allocation(("malloc",), "libm", size_args=(0,)),
    Allocation(("calloc",), "libm", size_args=(0, 1)),
    Mirror(("NRT_incref", "NRT_decref", "NRT_MemInfo_call_dtor", "NRT_Free"), "runtime"),
    # Resizing a container's storage: done to the shadow container too; the returned data
    # pointer of the shadow call is the shadow of the returned one.
    Mirror(("NRT_MemInfo_varsize_alloc",), "runtime"),
    # A list growing or shrinking: its data block moves, contents kept (numba/core/runtime/
    # nrt.cpp: ``mi->data = NRT_Reallocate(mi->data, size); mi->size = size``).
    Mirror(("NRT_MemInfo_varsize_realloc",), "runtime", data_offset=_MEMINFO_DATA,
           size_offset=_MEMINFO_SIZE),
    Mirror(("free",), "libm"),
    # The shadow block is resized alongside the primal one (allocated, from null, when the
    # primal block had none: reverse mode grows its caches this way).
    Mirror(("realloc",), "libm", allocates=True),
    # Reverse mode's tape arrays (pyzyme.diff.tape.pool): when forward mode differentiates a
    # gradient (hvp), tangent caches are allocated, grown and kept alongside.
    Mirror(("pyzyme.tape_realloc",), "runtime", allocates=True),
    Mirror(("pyzyme.tape_free",), "runtime"),
    Inactive(("pyzyme.tape_capacity",), "runtime",
             reason="the next capacity of a loop's caches: an integer (the tangent caches "
                    "grow to the same one)"),
    # np.dot and @ (numba/_lapack.c): derivatives by the same BLAS calls, transposed.
    Blas(("numba_xxdot",), "runtime", op="dot"),
    Blas(("numba_xxgemv",), "runtime", op="gemv"),
    Blas(("numba_xxgemm",), "runtime", op="gemm"),
    # np.linalg.norm (vectors, and matrices' Frobenius norm): x / ||x||, by GEMMs on 1 x n views.
    Blas(("numba_xxnrm2",), "runtime", op="nrm2"),
    # np.linalg.solve: a solve with A (and A^T), and a GEMM.
    Blas(("numba_xgesv",), "runtime", op="gesv"),
    # np.linalg.det, slogdet and inv (LU, then the inverse from it) and cholesky: derivatives
    # by GEMMs and triangular inverses (numba_ez_xxgetri with identity pivots).
    Blas(("numba_xxgetrf",), "runtime", op="getrf"),
    Blas(("numba_ez_xxgetri",), "runtime", op="getri"),
    Blas(("numba_xxpotrf",), "runtime", op="potrf"),
    # np.linalg.eigh and eigvalsh: the symmetric eigendecomposition (eigenvectors recomputed
    # for eigvalsh), by GEMMs.
    Blas(("numba_ez_xxxevd",), "runtime", op="evd"),
)
