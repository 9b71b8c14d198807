"""Derivative rules as data; see :mod:`pyzyme.rules.expr` and :mod:`pyzyme.rules.table`.

The rows live in :mod:`pyzyme.rules.arith` (opcodes), :mod:`pyzyme.rules.intrinsics` (LLVM
intrinsics), :mod:`pyzyme.rules.libm` (C math functions) and :mod:`pyzyme.rules.runtime`
(allocation and reference counting); :func:`default_rules` puts them in one table.
``python -m pyzyme.rules`` prints its size.

>>> rules = default_rules()
>>> rules.lookup("llvm.sin.v4f64").partials
(Op(name='cos', operands=(Arg(index=0),)),)
>>> rules.lookup("sinf") is rules.lookup("sin")
True
"""

from __future__ import annotations

from functools import lru_cache

from pyzyme.rules import arith, intrinsics, libm, runtime
from pyzyme.rules.table import RuleTable

__all__ = ["default_rules", "RuleTable"]


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
    return RuleTable(arith.ROWS + intrinsics.ROWS + libm.ROWS + runtime.ROWS).freeze()
