"""A stencil overwriting its state in place, differentiated in its coefficient too: the reverse
sweep keeps, per cell and step, the one double the coefficient's adjoint reads (the sum
``left - 2 u[i] + u[i + 1]``), not the three it is computed from (the old ``u[i]`` and
``u[i + 1]`` and the carried ``left``, which nothing else of the reverse sweep reads). Where
the reverse sweep reads one of them for something else as well, that one stays cached and the
sum still replaces the other two; ``tanh`` of the update keeps its result and the sum. The
tape by the plan's printed layout and a split pair's ``Tape.nbytes``; gradients against
forward mode and central differences, the split pair against the combined derivative, a
Hessian-vector product against central differences of the gradient."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse, ReverseSplitWithPrimal
from pyzyme.api.plans import reverse_plan
from tests.kernels import njit_source

# The new value of cell i from the old ``u[i]``, ``u[i + 1]``, the carried old ``u[i - 1]``.
UPDATES = {
    "sum": "v[i] + c * (left - 2.0 * v[i] + v[i + 1])",
    # The product's adjoint reads u[i + 1] too: it stays cached, beside the sum.
    "product": "v[i] + c * (left - 2.0 * v[i] + v[i + 1]) * v[i + 1]",
    # tanh's adjoint reads its result: that one and the sum, not the three they come from.
    "tanh": "np.tanh(v[i] + c * (left - 2.0 * v[i] + v[i + 1]))",
}
# Doubles cached per cell and step (before: three each).
CACHED = {"sum": 1, "product": 2, "tanh": 2}


def _stencil(update: str):
    """``sum(u ** 2)`` after ``steps`` sweeps of ``update`` over ``p[1:]`` in place, with the
    coefficient ``c = p[0]`` (one array, so that a Hessian-vector product covers both)."""
    return njit_source(f"""
def f(p, steps):
    c = p[0]
    v = p[1:]
    n = v.shape[0]
    for _ in range(steps):
        left = v[0]
        for i in range(1, n - 1):
            new = {update}
            left = v[i]
            v[i] = new
    s = 0.0
    for i in range(n):
        s += v[i] * v[i]
    return s
""")


FUNCTIONS = {name: _stencil(update) for name, update in UPDATES.items()}
ARRAY = numba.types.Array(numba.float64, 1, "C")


def _point(cells: int = 9):
    p = np.random.default_rng(3).uniform(-1.0, 1.0, cells + 1)
    p[0] = 0.2
    return p


def _caches(f) -> list[str]:
    plan = reverse_plan(f, (ARRAY, numba.int64), ("duplicated", "const"), Active, True)
    return [c.strip() for line in plan.tape.splitlines() if "caches" in line
            for c in line.split("caches", 1)[1].split(",") if c.strip() != "none"]


@pytest.mark.parametrize("name", UPDATES)
def test_stencil_caches_the_sum_not_its_operands(name):
    caches = _caches(FUNCTIONS[name])
    assert len(caches) == CACHED[name] and all(c.endswith(": double") for c in caches), caches


def _gradient(f, p, steps: int):
    dp = np.zeros_like(p)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(p.copy(), dp), Const(steps))
    return dp


def _tape_bytes(f, p, steps: int) -> int:
    fwd, _ = pyzyme.autodiff_thunk(ReverseSplitWithPrimal, f, Active,
                                   Duplicated(p.copy(), np.zeros_like(p)), Const(steps))
    tape, _, _ = fwd(Duplicated(p.copy(), np.zeros_like(p)), Const(steps))
    return tape.nbytes


@pytest.mark.parametrize("name", ["sum", "tanh"])
def test_tape_grows_by_the_cached_doubles_per_cell_and_step(name):
    f, p = FUNCTIONS[name], _point(40)
    inner = p.size - 3                      # cells 1 .. n - 2 of the n = p.size - 1
    assert _tape_bytes(f, p, 20) - _tape_bytes(f, p, 10) == 8 * CACHED[name] * inner * 10


@pytest.mark.parametrize("name", UPDATES)
def test_gradient_split_pair_and_hessian_vector_product(name):
    f, p, steps = FUNCTIONS[name], _point(), 4
    dp = _gradient(f, p, steps)
    for k in range(p.size):
        t = np.zeros_like(p)
        t[k] = 1.0
        _, tangent = pyzyme.autodiff(pyzyme.Forward, f, Duplicated(p.copy(), t), Const(steps))
        assert dp[k] == pytest.approx(tangent, rel=1e-12, abs=1e-13)
        e = 1e-6
        up, down = p.copy(), p.copy()
        up[k] += e
        down[k] -= e
        assert dp[k] == pytest.approx((f(up, steps) - f(down, steps)) / (2 * e), rel=1e-6,
                                      abs=1e-8)
    fwd, rev = pyzyme.autodiff_thunk(ReverseSplitWithPrimal, f, Active,
                                     Duplicated(p.copy(), np.zeros_like(p)), Const(steps))
    split = np.zeros_like(p)
    state = p.copy()
    tape, value, _ = fwd(Duplicated(state, split), Const(steps))
    rev(Duplicated(state, split), Const(steps), 1.0, tape)
    assert value == pytest.approx(f(p.copy(), steps), rel=1e-14)
    np.testing.assert_allclose(split, dp, rtol=1e-13, atol=1e-15)
    v = np.random.default_rng(4).standard_normal(p.shape)
    hv, g = pyzyme.hvp_and_gradient(f, p.copy(), v.copy(), steps)
    np.testing.assert_allclose(g, dp, rtol=1e-13, atol=1e-15)
    h = 1e-6
    central = (_gradient(f, p + h * v, steps) - _gradient(f, p - h * v, steps)) / (2 * h)
    np.testing.assert_allclose(hv, central, rtol=1e-6, atol=1e-8)
