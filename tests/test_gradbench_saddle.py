"""GradBench's saddle eval (pyzyme.gradbench.evals.saddle): f and the inner ascent against a
NumPy transcription of the spec, the nested derivatives (outer x inner mode) against central
differences and against each other, and the eval's output."""

import numpy as np
import pytest

from pyzyme.gradbench.evals import saddle


def _f(p1, p2):
    return float(p1 @ p1 - p2 @ p2)


def _argmax(p1, start):
    # GradBench's gradient descent (gd.hpp) on -f(p1, .), with d f / d p2 = -2 p2
    x, eta, i = start.copy(), 1e-5, 0
    fx, gx = -_f(p1, x), 2.0 * x
    while True:
        if np.linalg.norm(gx) <= 1e-5:
            return x
        if i == 10:
            eta, i = 2.0 * eta, 0
            continue
        x_new = x - eta * gx
        if np.linalg.norm(x - x_new) <= 1e-5:
            return x
        f_new = -_f(p1, x_new)
        if f_new < fx:
            x, fx, gx, i = x_new, f_new, 2.0 * x_new, i + 1
        else:
            eta, i = eta / 2.0, 0


def test_objective_matches_numpy():
    for p1, p2 in [([1.0, 2.0], [3.0, -1.0]), ([0.5, -0.25], [0.0, 0.0])]:
        p1, p2 = np.array(p1), np.array(p2)
        assert saddle.objective(p1, p2) == _f(p1, p2)


@pytest.mark.parametrize("inner", ["r", "f"])
def test_inner_maximum_matches_numpy(inner):
    start = np.array([1.0, 1.0])
    for p1 in [np.array([1.0, 1.0]), np.array([0.3, -0.7])]:
        expected = _f(p1, _argmax(p1, start))
        assert saddle.MAX[inner](p1, start) == pytest.approx(expected, rel=1e-12, abs=1e-15)
        gradient = saddle.ASCENT_GRADIENT[inner](np.array([0.5, -2.0]), p1)
        np.testing.assert_allclose(gradient, [-1.0, 4.0], rtol=1e-14)


@pytest.mark.parametrize("variant", ["rr", "rf", "fr", "ff"])
def test_max_gradient_matches_differences_and_other_modes(variant):
    start, h = np.array([1.0, 1.0]), 1e-6
    for p1 in [np.array([1.0, 1.0]), np.array([0.3, -0.7])]:
        g = saddle.MAX_GRADIENT[variant](p1, start)
        fd = [(_f(p1 + h * e, _argmax(p1 + h * e, start)) -
               _f(p1 - h * e, _argmax(p1 - h * e, start))) / (2 * h) for e in np.eye(2)]
        np.testing.assert_allclose(g, fd, rtol=1e-6)
        other = saddle.MAX_GRADIENT[("f" if variant[0] == "r" else "r") + variant[1]]
        np.testing.assert_allclose(g, other(p1, start), rtol=1e-12)


def test_output_is_the_saddle_point():
    out = saddle.FUNCTIONS["rr"].evaluate({"start": [1.0, 1.0], "min_runs": 1,
                                           "min_seconds": 0})
    assert type(out) is list and len(out) == 4 and all(type(v) is float for v in out)
    # GradBench's expected values, compared as GradBench does
    for v in out:
        assert abs(v - 8.246324826140356e-06) <= 1e-4 * max(abs(v) + 8.246e-06, 1.0)
    # p2 is the inner ascent's maximum at p1
    np.testing.assert_allclose(out[2:], _argmax(np.array(out[:2]), np.array([1.0, 1.0])),
                               rtol=1e-12)


def test_all_variants_registered():
    from pyzyme.gradbench.evals import EVALS
    assert EVALS["saddle"] == "pyzyme.gradbench.evals.saddle"
    assert sorted(saddle.FUNCTIONS) == ["ff", "fr", "rf", "rr"]
