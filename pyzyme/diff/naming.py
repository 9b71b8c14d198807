"""Every name pyzyme gives to generated functions and values, in one place.

Function names follow Enzyme's (``fwddiffe_f``), so generated IR reads like Enzyme's output.
Value names derive from the primal value's name, so a tangent is easy to find next to its primal.

Examples
--------
>>> forward_function("f", 1), forward_function("f", 4)
('fwddiffe_f', 'fwddiffe4_f')
>>> tangent("acc", 0, 1), tangent("acc", 2, 4), tangent("", 0, 1)
("acc'", "acc'2", '')
"""

from __future__ import annotations

__all__ = ["forward_function", "tangent", "shadow_param", "partial"]


def forward_function(primal: str, width: int) -> str:
    """The forward-mode derivative of function ``primal`` at batch ``width``."""
    return f"fwddiffe{'' if width == 1 else width}_{primal}"


def tangent(primal: str, lane: int, width: int) -> str:
    """The tangent (or shadow) of value ``primal`` in batch lane ``lane``; unnamed stays so."""
    if not primal:
        return ""
    return f"{primal}'" if width == 1 else f"{primal}'{lane}"


def shadow_param(primal: str, lane: int, width: int) -> str:
    """The parameter carrying the shadow or tangent of parameter ``primal``."""
    return tangent(primal or "arg", lane, width)


def partial(primal: str, operand: int) -> str:
    """The partial derivative of value ``primal`` with respect to operand ``operand``."""
    return f"{primal}.d{operand}" if primal else ""
