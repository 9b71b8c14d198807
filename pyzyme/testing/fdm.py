"""Central finite differences, the reference :mod:`pyzyme.testing` checks derivatives against.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["CentralFDM", "central_fdm"]


# -- finite differences ------------------------------------------------------------------------
class CentralFDM:
    """A central finite-difference method for first derivatives: ``fdm(g, x) -> g'(x)``.

    Made by :func:`central_fdm`; see there. ``g`` maps a float to a float or to a 1-D float64
    array; the result has the same form.
    """

    def __init__(self, points: int, step: float | None, eps: float) -> None:
        if points < 3 or points % 2 == 0:
            raise ValueError(f"a central method needs an odd number of points >= 3, got "
                             f"{points}")
        self.points = points
        self.step = step
        self.eps = eps
        m = points // 2
        offsets = np.arange(-m, m + 1, dtype=np.float64)
        # Weights w with sum_k w_k k^j = [j == 1] for j < points: exact for polynomials of
        # degree points - 1, so the error is O(h^(points - 1)).
        vander = np.vander(offsets, points, increasing=True).T
        rhs = np.zeros(points)
        rhs[1] = 1.0
        weights = np.linalg.solve(vander, rhs)
        keep = np.abs(weights) > 1e-14  # the centre weight is zero
        self._offsets, self._weights = offsets[keep], weights[keep]

    def step_at(self, x: float) -> float:
        """The step used at ``x``: ``step``, or ``eps ** (1 / points)`` (balancing truncation
        against rounding), times ``max(1, sqrt(|x|))`` so large values move too."""
        base = self.step if self.step is not None else self.eps ** (1.0 / self.points)
        return base * max(1.0, math.sqrt(abs(x)))

    def __call__(self, g: Callable[[float], Any], x: float):
        h = self.step_at(x)
        total = None
        for k, w in zip(self._offsets, self._weights):
            term = w * np.asarray(g(x + k * h), dtype=np.float64)
            total = term if total is None else total + term
        out = total / h
        return float(out) if out.ndim == 0 else out

    def __repr__(self) -> str:
        step = "" if self.step is None else f", step={self.step!r}"
        return f"central_fdm({self.points}{step})"


def central_fdm(points: int = 5, step: float | None = None, *,
                eps: float = float(np.finfo(np.float64).eps)) -> CentralFDM:
    """A central finite-difference method with ``points`` points, for ``fdm=``.

    Parameters
    ----------
    points
        Odd number of evaluation points (5: error O(h^4), as FiniteDifferences.jl's
        ``central_fdm(5, 1)``).
    step
        Base step; by default ``eps ** (1 / points)``. The step at ``x`` is the base step
        times ``max(1, sqrt(|x|))``.
    eps
        The precision of the function's values (float64 machine epsilon by default); it sets
        the default step. Use ``np.finfo(np.float32).eps`` for float32 functions.

    Returns
    -------
    CentralFDM
        A callable ``fdm(g, x)`` giving ``g'(x)`` for ``g`` mapping a float to a float or an
        array.

    Examples
    --------
    >>> fdm = central_fdm(5)
    >>> abs(fdm(math.sin, 1.0) - math.cos(1.0)) < 1e-11
    True
    >>> fdm(lambda t: np.array([t, t ** 3]), 2.0).round(9)
    array([ 1., 12.])
    """
    return CentralFDM(points, step, eps)
