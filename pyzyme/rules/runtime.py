"""Rows for the memory functions of Numba's runtime (NRT) and of the C library.

Numba allocates arrays with ``NRT_MemInfo_alloc_aligned(size, align)``, which returns a
``MemInfo`` whose data pointer is stored at byte 24 (numba/core/runtime/nrt.cpp: ``refct``,
``dtor``, ``dtor_info``, ``data``); reference counting and frees act on the MemInfo. Shadows get
MemInfos of their own, so a tangent array Numba returns is an ordinary array Python can box.
"""

from __future__ import annotations

from pyzyme.rules.spec import Allocation, Mirror

_MEMINFO_DATA = 24

ROWS = (
    Allocation(("NRT_MemInfo_alloc_aligned", "NRT_MemInfo_alloc_safe_aligned",
                "NRT_MemInfo_alloc", "NRT_MemInfo_alloc_safe"), "runtime",
               size_args=(0,), data_offset=_MEMINFO_DATA),
    Allocation(("NRT_Allocate",), "runtime", size_args=(0,)),
    Allocation(("malloc",), "libm", size_args=(0,)),
    Allocation(("calloc",), "libm", size_args=(0, 1)),
    Mirror(("NRT_incref", "NRT_decref", "NRT_MemInfo_call_dtor", "NRT_Free"), "runtime"),
    Mirror(("free",), "libm"),
)
