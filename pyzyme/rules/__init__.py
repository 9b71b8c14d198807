"""Derivative rules as data; see :mod:`pyzyme.rules.expr` and :mod:`pyzyme.rules.table`.

Users add their own with :func:`forward`, :func:`augmented_primal`, :func:`reverse`,
:func:`inactive` and :func:`inactive_noinline` (EnzymeRules; :mod:`pyzyme.rules.custom`).

The rows live in :mod:`pyzyme.rules.arith` (opcodes), :mod:`pyzyme.rules.intrinsics` (LLVM
intrinsics), :mod:`pyzyme.rules.libm` (C math functions), :mod:`pyzyme.rules.runtime`
(allocation and reference counting) and :mod:`pyzyme.rules.mpi` (the MPI library);
:func:`default_rules` puts them in one table.
``python -m pyzyme.rules`` prints its size.

>>> rules = default_rules()
>>> rules.lookup("llvm.sin.v4f64").partials
(Op(name='cos', operands=(Arg(index=0),)),)
>>> rules.lookup("sinf") is rules.lookup("sin")
True
"""

from __future__ import annotations

from functools import lru_cache

from pyzyme.errors import RuleError
from pyzyme.rules import arith, intrinsics, libm, mpi, runtime
from pyzyme.rules.custom import (
    REGISTRY,
    Config,
    augmented_primal,
    forward,
    inactive,
    inactive_noinline,
    reverse,
)
from pyzyme.rules.table import RuleTable

__all__ = ["default_rules", "RuleTable", "Config", "forward", "augmented_primal", "reverse",
           "inactive", "inactive_noinline", "REGISTRY", "RuleError"]


@lru_cache(maxsize=1)
def default_rules() -> RuleTable:
    """The rule table of every row pyzyme ships, frozen.

    Returns
    -------
    RuleTable
        Built once per process and shared; it rejects :meth:`~RuleTable.add` (make an
        extended copy with ``RuleTable(default_rules().rows())``).

    Raises
    ------
    ValueError
        If two row modules claim the same name (a bug in pyzyme).
    """
    return RuleTable(arith.ROWS + intrinsics.ROWS + libm.ROWS + runtime.ROWS
                     + mpi.ROWS).freeze()
