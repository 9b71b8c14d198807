"""Rows for a C program's CBLAS routines in forward mode (:mod:`pyzyme.diff.linalg.cblas`).

Enzyme differentiates ``cblas_ddot``, ``cblas_dgemv`` and ``cblas_dgemm`` (and their single
precision twins) by name, as the operations BLAS defines, whatever their bodies; a program
written for it may define them with bodies that only stand in for a BLAS (Enzyme's BLAS tests
record the calls). Forward mode (``__enzyme_fwddiff``, ``__enzyme_batch``) follows Enzyme here
for the routines whose parameters have CBLAS's types; reverse mode still differentiates the
body (refusing one it cannot). A routine the program only declares gets the rows too (its
body is then the BLAS the program links).
"""

from __future__ import annotations

from pyzyme.ir import types as T
from pyzyme.rules.spec import Blas

__all__ = ["FORWARD_MODES", "cblas_rows"]

#: The modes of Enzyme's entry points (:data:`~pyzyme.frontends.c.enzyme_calls.ENTRY_POINTS`)
#: that are forward mode.
FORWARD_MODES = ("forward", "batch")

_I, _F, _P = "int", "float", "ptr"
# op, then the kinds of the parameters (``int``: any integer, CBLAS's enums included;
# ``float``: the routine's precision), operands and output (:mod:`~pyzyme.diff.linalg.cblas`).
_ROUTINES = {
    "dot": ("cblas_dot", (_I, _P, _I, _P, _I), (1, 3), ()),
    "gemv": ("cblas_gemv", (_I, _I, _I, _I, _F, _P, _I, _P, _I, _F, _P, _I), (5, 7), (10,)),
    "gemm": ("cblas_gemm", (_I, _I, _I, _I, _I, _I, _F, _P, _I, _P, _I, _F, _P, _I), (7, 9),
             (12,)),
}
_PRECISION = {"d": T.double, "s": T.float}


def _matches(fn, kinds, ty, returns_float: bool) -> bool:
    ftype = fn.function_type
    if ftype.var_arg or len(ftype.params) != len(kinds):
        return False
    if ftype.ret != (ty if returns_float else T.void):
        return False
    for kind, param in zip(kinds, ftype.params):
        if kind == _I and not param.is_int:
            return False
        if kind == _F and param != ty:
            return False
        if kind == _P and not param.is_pointer:
            return False
    return True


def cblas_rows(module) -> list[Blas]:
    """A :class:`~pyzyme.rules.spec.Blas` row for each CBLAS dot, GEMV or GEMM of ``module``
    whose parameters are CBLAS's (a function of that name with other parameters is the
    program's own, and keeps its body)."""
    rows = []
    for fn in module.functions:
        name = fn.name
        if not name.startswith("cblas_") or len(name) < 10:
            continue
        letter, op = name[6], name[7:]
        entry = _ROUTINES.get(op)
        if entry is None or letter not in _PRECISION:
            continue
        row_op, kinds, operands, writes = entry
        if _matches(fn, kinds, _PRECISION[letter], op == "dot"):
            rows.append(Blas((name,), "libm", op=row_op, operands=operands, writes=writes))
    return rows
