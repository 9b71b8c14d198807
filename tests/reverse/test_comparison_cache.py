"""A minimum or maximum over a loop (k-means' closest centroid): the reverse sweep keeps the
comparison's result, one byte per iteration, not the two doubles compared (which nothing else of
the reverse sweep reads), so neither does forward mode over it (a Hessian-vector product) keep
their tangents. The tape by the plan's printed layout; gradients against forward mode and
central differences, the split pair against them, Hessian-vector products against central
differences of the gradient."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse, ReverseSplitWithPrimal
from pyzyme.api.plans import reverse_plan
from tests.kernels import check_gradient, njit_source

# How each form picks the smaller (or larger) of the running ``m`` and this centroid's ``s``.
FORMS = {
    "min": ("np.inf", "m = min(m, s)"),
    "max": ("-np.inf", "m = max(m, s)"),
    "np.minimum": ("np.inf", "m = np.minimum(m, s)"),
    "np.maximum": ("-np.inf", "m = np.maximum(m, s)"),
    "conditional": ("np.inf", "m = s if s < m else m"),
}


def _closest(start: str, pick: str, use: str = "m"):
    """``sum_i pick_j sum_a (x[i, a] - c[j, a]) ** 4``, the picked value added as ``use``."""
    return njit_source(f"""
def f(c, x):
    t = 0.0
    for i in range(x.shape[0]):
        m = {start}
        for j in range(c.shape[0]):
            s = 0.0
            for a in range(x.shape[1]):
                diff = x[i, a] - c[j, a]
                s += diff * diff * diff * diff
            {pick}
        t += {use}
    return t
""")


FUNCTIONS = {name: _closest(*form) for name, form in FORMS.items()}
ARRAY = numba.types.Array(numba.float64, 2, "C")


@pytest.fixture
def problem():
    rng = np.random.default_rng(5)
    return rng.random((4, 3)), rng.random((30, 3))


def _caches(f) -> list[str]:
    plan = reverse_plan(f, (ARRAY, ARRAY), ("duplicated", "const"), Active, True)
    return [c.strip() for line in plan.tape.splitlines() if "caches" in line
            for c in line.split("caches", 1)[1].split(",") if c.strip() != "none"]


@pytest.mark.parametrize("name", FORMS)
def test_comparison_cached_not_its_operands(name):
    caches = _caches(FUNCTIONS[name])
    # One byte per comparison (np.minimum also tests for NaN), no double per centroid.
    assert caches and all(c.endswith(": i1") for c in caches), caches


@pytest.mark.parametrize("name", FORMS)
def test_gradient_and_hessian_vector_product(name, problem):
    f = FUNCTIONS[name]
    c, x = problem
    dc = pyzyme.gradient(Reverse, f, c, x)[0]
    check_gradient(f, c, x, dc)
    fwd, rev = pyzyme.autodiff_thunk(ReverseSplitWithPrimal, f, Active,
                                     Duplicated(c, np.zeros_like(c)), Const(x))
    split = np.zeros_like(c)
    tape, value, _ = fwd(Duplicated(c, split), Const(x))
    rev(Duplicated(c, split), Const(x), 1.0, tape)
    assert value == pytest.approx(f(c, x), rel=1e-14)
    np.testing.assert_allclose(split, dc, rtol=1e-13, atol=1e-15)
    v = np.random.default_rng(6).standard_normal(c.shape)
    hv, g = pyzyme.hvp_and_gradient(f, c, v, x)
    np.testing.assert_allclose(g, dc, rtol=1e-13, atol=1e-15)
    h = 1e-6
    central = (pyzyme.gradient(Reverse, f, c + h * v, x)[0]
               - pyzyme.gradient(Reverse, f, c - h * v, x)[0]) / (2 * h)
    np.testing.assert_allclose(hv, central, rtol=1e-6, atol=1e-8)


def test_picked_value_read_by_the_reverse_sweep(problem):
    # The product reads the minimum itself, the one the loop over centroids left: that is
    # kept as a double once per point (the comparisons still one byte each), and the
    # gradient is right.
    f = _closest("np.inf", "m = min(m, s)", "m * m")
    c, x = problem
    caches = _caches(f)
    assert any(cache.endswith(".exit.cache: double") for cache in caches), caches
    assert all(cache.endswith(": i1") for cache in caches if ".exit." not in cache), caches
    check_gradient(f, c, x, pyzyme.gradient(Reverse, f, c, x)[0])


@numba.njit
def _logsumexp(x):
    top = x[0]
    for i in range(1, x.shape[0]):
        top = max(top, x[i])
    total = 0.0
    for i in range(x.shape[0]):
        total += np.exp(x[i] - top)
    return np.log(total) + top


def test_running_maximum_read_after_its_loop():
    # The sum of exponentials reads only the maximum the loop left (kept once): the running
    # maximum is needed by nothing else of the reverse sweep, so its loop keeps one byte per
    # comparison, not the double compared (GradBench's lse). The one double kept per element
    # is the exponential's result (a library call: kept, not called again).
    plan = reverse_plan(_logsumexp, (numba.types.Array(numba.float64, 1, "C"),),
                        ("duplicated",), Active, True)
    caches = [c.strip() for line in plan.tape.splitlines() if "caches" in line
              for c in line.split("caches", 1)[1].split(",") if c.strip() != "none"]
    doubles = [c for c in caches if not c.endswith(": i1")]
    assert len(caches) == 2 and len(doubles) == 1 and doubles[0].endswith(": double"), caches
    for n in (1, 2, 7, 40):
        x = np.random.default_rng(n).standard_normal(n)
        x[n // 2] = 3.0                      # one clear maximum: its adjoint is 1 - softmax
        dx = pyzyme.gradient(Reverse, _logsumexp, x)
        softmax = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
        np.testing.assert_allclose(dx, softmax, rtol=1e-13, atol=1e-15)
        forward = np.array(pyzyme.gradient(pyzyme.Forward, _logsumexp, x)).reshape(n)
        np.testing.assert_allclose(dx, forward, rtol=1e-13, atol=1e-15)
