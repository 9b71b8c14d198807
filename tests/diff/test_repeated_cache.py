"""Values that repeat on every iteration of an outer loop (parameters read inside a loop over
data points) are kept for one iteration of it, not for each (``TapeCache.repeated``): which values
are, by the printed tape of split mode (where argument reads travel on the tape); split
gradients against the combined derivative, forward mode and finite differences, where the
cache is used and where it is refused; the tape not growing with the points; the arguments
changed between the two halves."""

import math

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse
from pyzyme.analysis.activity import Activity
from pyzyme.api.plans import current_rules
from pyzyme.frontends.numba.derive.reverse import CONST, DUPLICATED, reverse_module
from pyzyme.frontends.numba.derive.split import build_split
from tests.kernels import check_gradient, in_sweep_order, njit_source


@numba.njit
def per_point(w, x):
    """A weight matrix read for every point (the repeated cache's case): the reverse sweep
    needs each weight and each point's ``x[p]``, which alone grow with the points."""
    s = 0.0
    for p in range(x.shape[0]):
        c = x[p]
        for k in range(w.shape[0]):
            for j in range(w.shape[1]):
                s += math.sin(w[k, j] * c)
    return s


@numba.njit
def triangle_per_point(w, x):
    """ADBench's GMM in small: a packed triangle of each row of ``w`` read for every point."""
    d = 5
    s = 0.0
    for p in range(x.shape[0]):
        c = x[p]
        for k in range(w.shape[0]):
            idx = 0
            for i in range(d):
                for j in range(i + 1, d):
                    s += math.cos(w[k, idx] * c * (i - j))
                    idx += 1
    return s


def _body(loops: str) -> str:
    return f"""
import math
def f(w, x):
    n, d = x.shape
    s = 0.0
{loops}
    return s
"""


# (name, loop nest, whether the weight read is kept once per point). In each, w[k, j] is read
# inside ``for p`` (the points); only where every point runs the inner loops alike is it kept
# for one point's iterations.
NESTS = [
    ("rectangle", """
    for p in range(n):
        for k in range(w.shape[0]):
            for j in range(d):
                s += math.sin(w[k, j] * x[p, j])""", True),
    ("triangle", """
    for p in range(n):
        for k in range(w.shape[0]):
            for j in range(k, d):
                s += math.sin(w[k, j] * x[p, j])""", True),
    ("point loop cut short", """
    for p in range(n):
        if x[p, 0] > 1.5:
            break
        for k in range(w.shape[0]):
            for j in range(d):
                s += math.sin(w[k, j] * x[p, j])""", True),
    ("inside epochs", """
    for e in range(2):
        for p in range(n):
            for k in range(w.shape[0]):
                for j in range(d):
                    s += math.sin((e + 1.0) * w[k, j] * x[p, j])""", True),
    ("rows depending on the point", """
    for p in range(n):
        for k in range(p % 2, w.shape[0]):
            for j in range(d):
                s += math.sin(w[k, j] * x[p, j])""", False),
    ("rows skipped on the data", """
    for p in range(n):
        for k in range(w.shape[0]):
            if x[p, k % d] > 0.0:
                for j in range(d):
                    s += math.sin(w[k, j] * x[p, j])""", False),
    ("row cut short on the data", """
    for p in range(n):
        for k in range(w.shape[0]):
            for j in range(d):
                if x[p, j] > 1.2:
                    break
                s += math.sin(w[k, j] * x[p, j])""", False),
    ("weights written per point", """
    for p in range(n):
        for k in range(w.shape[0]):
            for j in range(d):
                s += math.sin(w[k, j] * x[p, j])
                w[k, j] = w[k, j] * 0.5 + 0.25""", False),
]


_NEST_FUNCTIONS = {}


def _nest(name: str):
    if name not in _NEST_FUNCTIONS:
        loops = next(body for n, body, _ in NESTS if n == name)
        _NEST_FUNCTIONS[name] = njit_source(_body(loops))
    return _NEST_FUNCTIONS[name]


def _data(n=7, d=4, k=3, seed=0, points=2):
    """Weights (k, d) and ``n`` points: rows of ``d`` (``points=2``) or numbers."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((k, d)), rng.standard_normal((n, d) if points == 2 else n)


def _layout(f, w, x) -> str:
    plan = build_split(f, [numba.typeof(w), numba.typeof(x)], ["duplicated", "const"],
                       Activity.ACTIVE, current_rules())
    return plan.tape_layout


def _split(f, w, x, change=None):
    """The split gradient in ``w`` (and the tape's bytes), with ``change(w)`` applied to the
    arguments between the two halves."""
    dw = np.zeros_like(w)
    fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, f, Active,
                                     Duplicated(w, dw), Const(x))
    tape, value, _ = fwd(Duplicated(w, dw), Const(x))
    nbytes = tape.nbytes
    if change is not None:
        change(w)
    rev(Duplicated(w, dw), Const(x), 1.0, tape)
    return value, dw, nbytes


def _combined(f, w, x):
    dw = np.zeros_like(w)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(w, dw), Const(x))
    return dw


@pytest.mark.parametrize("name, loops, repeated", NESTS, ids=[n[0] for n in NESTS])
def test_nests(name, loops, repeated):
    f = _nest(name)
    w, x = _data()
    x[5, 0] = 2.0        # where the point loop is cut short, it is cut at the sixth point
    layout = _layout(f, w, x)
    assert ("within each iteration of" in layout) is repeated, layout
    with in_sweep_order():
        value, dw, _ = _split(f, w.copy(), x)
        assert value == f(w.copy(), x)
        np.testing.assert_array_equal(dw, _combined(f, w.copy(), x))
    check_gradient(f, w, x, dw)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from([n for n, _, _ in NESTS]), n=st.integers(0, 6),
       k=st.integers(0, 4), d=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_split_equals_combined_at_any_size(name, n, k, d, seed):
    """Calls of one compiled pair at sizes drawn at random, one after another: the caches
    grow (or start from the largest size so far) per call, and the split gradient stays the
    combined one, bitwise, with no points, no weights, or a point loop cut short."""
    f = _nest(name)
    w, x = _data(n=n, d=d, k=k, seed=seed)
    with in_sweep_order():
        value, dw, _ = _split(f, w.copy(), x)
        assert value == f(w.copy(), x)
        np.testing.assert_array_equal(dw, _combined(f, w.copy(), x))


@pytest.mark.parametrize("f", [per_point, triangle_per_point])
def test_tape_holds_one_point_of_weights(f):
    """Per extra point the tape grows by that point's own values and the base of the
    repeated cache (a few words), not by the weights read for it."""
    w, x = _data(n=40, d=10 if f is triangle_per_point else 5, k=4, points=1)
    layout = _layout(f, w, x)
    repeated = [ln for ln in layout.splitlines() if "within each iteration of" in ln]
    assert len(repeated) == 1 and ".count.each." in repeated[0], layout
    sizes = [_split(f, w.copy(), x[:n])[2] for n in (10, 20, 40)]
    assert sizes[2] - sizes[1] == 2 * (sizes[1] - sizes[0])
    assert (sizes[1] - sizes[0]) // 10 <= 32, (sizes, layout)
    _, dw, _ = _split(f, w.copy(), x)
    check_gradient(f, w, x, dw)


def test_arguments_changed_between_the_halves():
    """The reverse half uses the weights the forward half read, kept on the tape."""
    w, x = _data(n=9, points=1)

    def scribble(w):
        w[:] = 7.0

    with in_sweep_order():
        expected = _combined(per_point, w.copy(), x)
        _, dw, _ = _split(per_point, w.copy(), x, change=scribble)
    np.testing.assert_array_equal(dw, expected)


def test_cache_grows_across_calls_of_other_sizes():
    """One point's worth grows with the weights; the next call starts from the largest so
    far (the hint), whether it needs less or more."""
    for k, d in ((2, 3), (30, 9), (3, 2), (70, 12)):
        w, x = _data(n=5, d=d, k=k, seed=k, points=1)
        with in_sweep_order():
            _, dw, _ = _split(per_point, w.copy(), x)
            np.testing.assert_array_equal(dw, _combined(per_point, w.copy(), x))
        if k < 10:
            check_gradient(per_point, w, x, dw)


@numba.njit
def scratch_read_per_point(w, x):
    """Combined mode caches a read of memory overwritten later (``t``, cleared after the
    loop): the read repeats for every point, so it is kept for one point."""
    t = w * 1.5
    s = 0.0
    for p in range(x.shape[0]):
        c = x[p]
        for k in range(t.shape[0]):
            s += math.sin(t[k] * c) * c
    t[:] = 0.0
    return s + t[0]


def test_combined_mode_and_second_order():
    rng = np.random.default_rng(4)
    w, x = rng.standard_normal(6), rng.standard_normal(9)
    tape = str(reverse_module(scratch_read_per_point, [numba.typeof(w), numba.typeof(x)],
                              [DUPLICATED, CONST], Activity.ACTIVE, True,
                              current_rules()).tape)
    assert "within each iteration of" in tape, tape
    dw = _combined(scratch_read_per_point, w, x)
    check_gradient(scratch_read_per_point, w, x, dw)

    @numba.njit
    def g(w):
        return scratch_read_per_point(w, x)

    hess = pyzyme.hessian(g)(w)
    fd = np.array([(_combined(scratch_read_per_point, w + e, x)
                    - _combined(scratch_read_per_point, w - e, x)) / 2e-5
                   for e in np.eye(w.size) * 1e-5])
    np.testing.assert_allclose(hess, fd, rtol=1e-6, atol=1e-7)
    v = np.linspace(-1.0, 1.0, w.size)
    np.testing.assert_allclose(pyzyme.hvp(g, w, v), hess @ v, rtol=1e-12, atol=1e-13)
