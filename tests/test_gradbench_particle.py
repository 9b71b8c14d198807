"""GradBench's particle eval (pyzyme.gradbench.evals.particle): the Numba trajectory against a
NumPy transcription of the spec, the nested derivatives (outer x inner mode) against central
differences and against each other, and the eval's output."""

import numpy as np
import pytest

from pyzyme.gradbench.evals import particle


def _charges(w):
    return np.array([[10.0, 10.0 - w], [10.0, 0.0]])


def _potential(charges, x):
    return float(np.sum(1.0 / np.linalg.norm(x - charges, axis=1)))


def _landing(w):
    # The spec in NumPy: force -grad p, grad of 1/|x - c| being -(x - c)/|x - c|^3.
    charges, x, xdot = _charges(w), np.array([0.0, 8.0]), np.array([0.75, 0.0])
    while True:
        d = x - charges
        xddot = np.sum(d / np.linalg.norm(d, axis=1)[:, None] ** 3, axis=0)
        x = x + 0.1 * xdot
        if x[1] <= 0.0:
            x_f = x - x[1] / xdot[1] * xdot
            return x_f[0] ** 2
        xdot = xdot + 0.1 * xddot


def test_potential_matches_numpy():
    for w, x in [(0.0, (0.0, 8.0)), (0.3, (4.5, -1.0)), (-2.0, (12.0, 3.0))]:
        charges = _charges(w)
        expected = _potential(charges, np.array(x))
        assert particle.potential(tuple(map(tuple, charges)), x) == pytest.approx(expected,
                                                                                 rel=1e-14)


@pytest.mark.parametrize("inner", ["r", "f"])
def test_landing_matches_numpy(inner):
    for w in [0.0, 0.2, 0.3]:      # (some w never land: w = -0.4 flies off to x = -inf)
        assert particle.LANDING[inner](np.array([w])) == pytest.approx(_landing(w), rel=1e-10)


@pytest.mark.parametrize("variant", ["rr", "rf", "fr", "ff"])
def test_landing_gradient_matches_differences_and_other_modes(variant):
    h = 1e-6
    for w in [0.0, 0.15]:
        g = particle.LANDING_GRADIENT[variant](np.array([w]))
        assert g.shape == (1,)
        assert g[0] == pytest.approx((_landing(w + h) - _landing(w - h)) / (2 * h), rel=1e-5)
        other = particle.LANDING_GRADIENT[("f" if variant[0] == "r" else "r") + variant[1]]
        assert g[0] == pytest.approx(other(np.array([w]))[0], rel=1e-10)


def test_output_is_gradbench_expected_w():
    out = particle.FUNCTIONS["rr"].evaluate({"w": 0.0, "min_runs": 1, "min_seconds": 0})
    assert type(out) is float
    # GradBench's expected value, compared as GradBench does (1e-4 relative)
    assert abs(out - 0.2071918746486116) <= 1e-4 * max(abs(out) + 0.2071918746486116, 1.0)
    # the particle lands next to the origin (3.2 away from it for the start w = 0)
    assert _landing(out) < 1e-6


def test_all_variants_registered():
    from pyzyme.gradbench.evals import EVALS
    assert EVALS["particle"] == "pyzyme.gradbench.evals.particle"
    assert sorted(particle.FUNCTIONS) == ["ff", "fr", "rf", "rr"]
