"""Property test: reverse mode of the forward issue's random programs agrees with forward mode.

The programs (expression trees over ``x, y, z`` and an array ``a``, loops with accumulators,
branches) come from :mod:`tests.forward.test_forward_hypothesis`; forward mode is checked there
against finite differences. Here one reverse sweep must give the same directional derivative
as forward mode, for every input at once: ``<grad, t> == jvp(t)``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from pyzyme import Active, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff
from tests.forward.test_forward_hypothesis import _compile, bounded, programs, unit


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(), point=st.tuples(bounded, bounded, bounded),
       tangent=st.tuples(unit, unit, unit),
       n=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_random_programs_reverse_matches_forward(prog, point, tangent, n, seed):
    src, margin_src = prog
    note(src)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.5, 1.5, n)
    da = rng.uniform(-1.0, 1.0, n)
    if margin_src:
        margin = _compile(margin_src)["margin"]
        assume(margin(*point, a.copy()) > 1e-4)
    f = numba.njit(_compile(src)["f"])

    _, jvp = autodiff(Forward, f, Duplicated, Duplicated(point[0], tangent[0]),
                      Duplicated(point[1], tangent[1]), Duplicated(point[2], tangent[2]),
                      Duplicated(a, da.copy()))
    grad_a = np.zeros(n)
    (dx, dy, dz, none), primal = autodiff(ReverseWithPrimal, f, Active, Active(point[0]),
                                          Active(point[1]), Active(point[2]),
                                          Duplicated(a, grad_a))
    assert none is None
    assert primal == f(*point, a)
    projected = dx * tangent[0] + dy * tangent[1] + dz * tangent[2] + grad_a @ da
    assert math.isfinite(projected)
    scale = max(1.0, abs(jvp), float(np.abs(grad_a).sum()) + abs(dx) + abs(dy) + abs(dz))
    np.testing.assert_allclose(projected, jvp, rtol=1e-10, atol=1e-12 * scale)
    # The gradient alone (no primal) is the same, to rounding: another derivative, whose
    # adjoint sums LLVM may order differently (Options.reassociate_adjoints).
    again = np.zeros(n)
    (ex, ey, ez, _), = autodiff(Reverse, f, Active, Active(point[0]), Active(point[1]),
                                Active(point[2]), Duplicated(a, again))
    np.testing.assert_allclose([ex, ey, ez, *again], [dx, dy, dz, *grad_a], rtol=1e-13,
                               atol=1e-13 * scale)
