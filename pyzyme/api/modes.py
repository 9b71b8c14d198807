"""Differentiation modes, as in Enzyme.jl.

``ReverseHolomorphic`` is reverse mode for a holomorphic function of complex arguments with a
complex result: it returns ``f'(z)`` (plain ``Reverse`` refuses complex results; for real
results of complex inputs it returns ``df/dRe + i df/dIm``, see
:mod:`pyzyme.api.args.complex`).

Examples
--------
>>> Forward, ForwardWithPrimal.with_primal
(Forward, True)
>>> Reverse.is_forward
False
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mode", "Forward", "ForwardWithPrimal", "Reverse", "ReverseWithPrimal",
           "ReverseSplitNoPrimal", "ReverseSplitWithPrimal", "ReverseHolomorphic"]


@dataclass(frozen=True)
class Mode:
    """A mode: forward or reverse, whether the primal result is returned, split or combined."""

    name: str
    is_forward: bool
    with_primal: bool = False
    split: bool = False
    holomorphic: bool = False

    def __repr__(self) -> str:
        return self.name


Forward = Mode("Forward", True)
ForwardWithPrimal = Mode("ForwardWithPrimal", True, with_primal=True)
Reverse = Mode("Reverse", False)
ReverseWithPrimal = Mode("ReverseWithPrimal", False, with_primal=True)
ReverseSplitNoPrimal = Mode("ReverseSplitNoPrimal", False, split=True)
ReverseSplitWithPrimal = Mode("ReverseSplitWithPrimal", False, with_primal=True, split=True)
ReverseHolomorphic = Mode("ReverseHolomorphic", False, holomorphic=True)
