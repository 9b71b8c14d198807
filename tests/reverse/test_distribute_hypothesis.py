"""Random stencils through reverse mode with loop distribution on and off: the gradients must
be bitwise equal (the rewrite keeps every cell's additions in order) and agree with forward
mode. The stencils vary in their offsets, coefficients, direction, arrays read, whether the
output is one of the inputs, and the length of the loop (short loops take the original)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pyzyme
from pyzyme import Const, Duplicated, Forward, Reverse
from tests.kernels import njit_source, on_and_off

terms = st.lists(st.tuples(st.sampled_from("xy"), st.integers(-3, 3),
                           st.sampled_from(["1.5", "-0.5", "2.0", "0.25"]),
                           st.sampled_from(["", "sq", "sin"])),
                 min_size=1, max_size=4)


@st.composite
def stencils(draw):
    body = draw(terms)
    descending = draw(st.booleans())
    in_place = draw(st.booleans())
    n = draw(st.sampled_from([7, 9, 40]))
    parts = []
    for arr, off, coef, fn in body:
        read = f"{arr}[i + {off}]" if off >= 0 else f"{arr}[i - {-off}]"
        read = {"": read, "sq": f"{read} * {read}", "sin": f"np.sin({read})"}[fn]
        parts.append(f"{coef} * {read}")
    loop = "range(n - 4, 3, -1)" if descending else "range(3, n - 3)"
    target = "x" if in_place else "out"
    source = (f"def f(out, x, y):\n    n = x.shape[0]\n    for i in {loop}:\n"
              f"        {target}[i] = {' + '.join(parts)}\n")
    return source, in_place, n


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stencils(), st.integers(0, 2**31 - 1))
def test_random_stencils(stencil, seed):
    source, in_place, n = stencil
    f = njit_source(source)
    rng = np.random.default_rng(seed)
    x, y, out = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)
    seed_out = rng.standard_normal(n)

    def reverse():
        dx, dy = np.zeros(n), np.zeros(n)
        dout = seed_out.copy()
        xc = x.copy()
        if in_place:   # x is also written: its shadow carries the seed
            dx = seed_out.copy()
        pyzyme.autodiff(Reverse, f, Const, Duplicated(out.copy(), dout), Duplicated(xc, dx),
                        Duplicated(y.copy(), dy))
        return dx, dy, dout

    on, off = on_and_off(reverse, "distribute_loops")
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)
    # <seed, J v> == <J^T seed, v> (not where an in-place x*x overflowed)
    vx, vy = rng.standard_normal(n), rng.standard_normal(n)
    out_t = np.zeros(n)
    xt = x.copy()
    vx_t = vx.copy()
    tangent = vx_t if in_place else out_t   # in place, x's tangent becomes the output's
    pyzyme.autodiff(Forward, f, Const, Duplicated(out.copy(), out_t),
                    Duplicated(xt, vx_t), Duplicated(y.copy(), vy.copy()))
    with np.errstate(over="ignore", invalid="ignore"):
        lhs = float(seed_out @ tangent)
        rhs = float(on[0] @ vx + on[1] @ vy)
    assume(np.isfinite(lhs) and np.isfinite(rhs))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10)
