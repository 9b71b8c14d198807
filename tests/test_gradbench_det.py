"""GradBench's ``det`` eval (pyzyme.gradbench.evals.det): the determinant by a recursive
expansion by minors against NumPy, its gradient by reverse mode through the recursion against
central differences, forward mode and the adjugate, and the JSON the eval expects."""

import numpy as np
import pytest

import pyzyme
from pyzyme import Duplicated, Forward
from pyzyme.gradbench.evals import det


def _matrix(ell):
    return np.random.default_rng(ell).random((ell, ell))


@pytest.mark.parametrize("ell", [1, 2, 3, 5])
def test_primal_is_the_determinant(ell):
    A = _matrix(ell)
    assert det.det(A) == pytest.approx(np.linalg.det(A), rel=1e-12, abs=1e-15)
    swapped = A[[1, 0] + list(range(2, ell))] if ell > 1 else -A
    assert det.det(swapped) == pytest.approx(-det.det(A), rel=1e-12)


@pytest.mark.parametrize("ell", [1, 2, 4])
def test_gradient_against_differences_forward_mode_and_adjugate(ell):
    A = _matrix(ell)
    got = det.gradient(A)
    h = 1e-6
    central = np.zeros_like(A)
    forward = np.zeros_like(A)
    for i in range(ell):
        for j in range(ell):
            E = np.zeros_like(A)
            E[i, j] = 1.0
            central[i, j] = (det.det(A + h * E) - det.det(A - h * E)) / (2 * h)
            forward[i, j] = pyzyme.autodiff(Forward, det.det, Duplicated, Duplicated(A, E))[1]
    np.testing.assert_allclose(got, central, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got, forward, rtol=1e-12, atol=1e-14)
    # d det(A) / dA = det(A) A^{-T}
    np.testing.assert_allclose(got, np.linalg.det(A) * np.linalg.inv(A).T, rtol=1e-9)


def test_json_shapes_and_values():
    A = _matrix(3)
    input = {"A": A.ravel().tolist(), "ell": 3, "min_runs": 1, "min_seconds": 0}
    primal = det.FUNCTIONS["primal"].evaluate(input)
    gradient = det.FUNCTIONS["gradient"].evaluate(input)
    assert type(primal) is float and primal == pytest.approx(np.linalg.det(A), rel=1e-12)
    assert isinstance(gradient, list) and len(gradient) == 9
    assert all(type(v) is float for v in gradient)
    # row-major: entry 3 i + j is d det / dA[i, j]
    np.testing.assert_allclose(gradient, (np.linalg.det(A) * np.linalg.inv(A).T).ravel(),
                               rtol=1e-9)
    assert det.FUNCTIONS["gradient"].evaluate(input) == gradient
