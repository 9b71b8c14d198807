"""GradBench's kmeans eval (pyzyme.gradbench.evals.kmeans): the cost against NumPy, the
gradient and Hessian diagonal pyzyme's forward-over-reverse sweep gives against central
differences, forward mode and the closed form (2 x the cluster's size), the JSON of dir."""

import numpy as np
import pytest

from pyzyme import Reverse, gradient, hvp_and_gradient, jacfwd
from pyzyme.gradbench.evals.kmeans import FUNCTIONS, cost, direction


@pytest.fixture
def problem():
    rng = np.random.default_rng(17)
    points = rng.random((40, 3))
    return points[-5:].copy(), points      # GradBench's centroids: the last k points


def _nearest(centroids, points):
    distances = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
    return distances.min(axis=1), distances.argmin(axis=1)


def test_cost_matches_numpy(problem):
    centroids, points = problem
    assert cost(centroids, points) == pytest.approx(_nearest(centroids, points)[0].sum(),
                                                    rel=1e-13)


def test_gradient_and_hessian_diagonal(problem):
    centroids, points = problem
    hv, g = hvp_and_gradient(cost, centroids, np.ones_like(centroids), points)
    h = 1e-6
    central = np.empty_like(centroids)
    diagonal = np.empty_like(centroids)
    for i in np.ndindex(centroids.shape):
        e = np.zeros_like(centroids)
        e[i] = h
        central[i] = (cost(centroids + e, points) - cost(centroids - e, points)) / (2 * h)
        diagonal[i] = (gradient(Reverse, cost, centroids + e, points)[0][i]
                       - gradient(Reverse, cost, centroids - e, points)[0][i]) / (2 * h)
    np.testing.assert_allclose(g, central, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(g, np.reshape(jacfwd(cost)(centroids, points), g.shape),
                               rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(hv, diagonal, rtol=1e-7)
    _, nearest = _nearest(centroids, points)
    counts = np.bincount(nearest, minlength=len(centroids))
    np.testing.assert_allclose(hv, 2.0 * counts[:, None] * np.ones_like(centroids), rtol=1e-15)


def test_direction_is_the_newton_step_to_the_means(problem):
    centroids, points = problem
    step = direction(centroids, points, np.ones_like(centroids))
    _, nearest = _nearest(centroids, points)
    means = np.array([points[nearest == j].mean(axis=0) for j in range(len(centroids))])
    # A Newton step on this piecewise quadratic lands on each cluster's mean.
    np.testing.assert_allclose(centroids - step, means, rtol=1e-12, atol=1e-14)


def test_json_output(problem):
    centroids, points = problem
    input = {"points": points.tolist(), "centroids": centroids.tolist(), "min_runs": 1,
             "min_seconds": 0}
    assert isinstance(FUNCTIONS["cost"].evaluate(input), float)
    out = FUNCTIONS["dir"].evaluate(input)
    assert np.shape(out) == centroids.shape and isinstance(out[0][0], float)
    assert FUNCTIONS["dir"].evaluate(input) == out      # nothing carried between runs
