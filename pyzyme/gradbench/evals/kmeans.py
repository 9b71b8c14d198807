"""GradBench's ``kmeans`` eval: the k-means cost and its Newton direction.

``cost`` is ``sum_i min_j |C_j - P_i|^2`` over the points ``P`` (n x d) and centroids ``C``
(k x d), GradBench's ``kmeans.hpp`` as ``@njit`` loops (the centroids, the differentiated
argument, come first). ``dir`` is the gradient ``J`` divided elementwise by the Hessian's
diagonal: the Hessian in ``C`` is diagonal (each point's term depends on its closest centroid
only, quadratically), so its diagonal is ``H 1``, the Hessian-vector product in the direction
of ones. :func:`pyzyme.hvp_and_gradient` gives ``H 1`` and ``J`` from one forward-over-reverse
sweep (forward mode over pyzyme's reverse-mode gradient, the points constant).

Examples
--------
>>> FUNCTIONS["cost"].evaluate({"points": [[0.0, 0.0], [1.0, 2.0]], "centroids": [[1.0, 1.0]]})
3.0
>>> FUNCTIONS["dir"].evaluate({"points": [[0.0, 0.0], [1.0, 2.0]], "centroids": [[1.0, 1.0]]})
[[0.5, 0.0]]
"""

import numba
import numpy as np

import pyzyme
from pyzyme.gradbench.protocol import Function, to_json

__all__ = ["FUNCTIONS", "cost", "direction"]


@numba.njit
def cost(centroids, points):
    """The sum over the points of the squared distance to their closest centroid."""
    n, d = points.shape
    total = 0.0
    for i in range(n):
        closest = np.inf
        for j in range(centroids.shape[0]):
            distance = 0.0
            for a in range(d):
                diff = points[i, a] - centroids[j, a]
                distance += diff * diff
            closest = min(closest, distance)
        total += closest
    return total


def direction(centroids, points, ones):
    """The Newton direction ``J / diag(H)`` of :func:`cost` in the centroids; ``ones`` is
    the direction whose Hessian-vector product is the diagonal (an array of ones shaped like
    ``centroids``)."""
    diagonal, gradient = pyzyme.hvp_and_gradient(cost, centroids, ones, points)
    return gradient / diagonal


def _prepare(input):
    points = np.asarray(input["points"], dtype=np.float64)
    centroids = np.asarray(input["centroids"], dtype=np.float64).reshape(-1, points.shape[1])
    return centroids, points


def _prepare_direction(input):
    centroids, points = _prepare(input)
    return centroids, points, np.ones_like(centroids)


FUNCTIONS = {
    "cost": Function(_prepare, cost, float, spread=True),
    "dir": Function(_prepare_direction, direction, to_json, spread=True),
}
