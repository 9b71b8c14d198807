"""np.linalg.det, slogdet, inv and cholesky (Numba's LAPACK helpers numba_xxgetrf,
numba_ez_xxgetri, numba_xxpotrf): derivatives by GEMMs and triangular inverses, checked against
finite differences, closed forms, a Cholesky written as loops, and between modes; matrices
overwritten after the call, factorizations in a loop, composed functions, second order."""

import numba
import numpy as np
import pytest

from pyzyme import (Active, BatchDuplicated, Const, Duplicated, Forward, Reverse,
                    ReverseSplitWithPrimal, UnsupportedError, autodiff, autodiff_thunk, gradient,
                    hvp, jacobian)
from pyzyme.testing import test_forward as check_forward
from pyzyme.testing import test_reverse as check_reverse

RNG = np.random.default_rng(11)
SIZES = [1, 3, 6]


def rand(*shape):
    return RNG.normal(size=shape)


def pivoting(n):
    """Well conditioned, with rows permuted so that partial pivoting does interchange rows
    (a diagonally dominant matrix would never pivot and leave P untested)."""
    a = rand(n, n) / np.sqrt(n) + 2.0 * np.eye(n)
    return a[RNG.permutation(n)]


def spd(n):
    m = rand(n, n) / np.sqrt(n)
    return m @ m.T + np.eye(n)


@numba.njit
def det(a):
    return np.linalg.det(a)


@numba.njit
def logabsdet(a):
    sign, logdet = np.linalg.slogdet(a)
    return logdet + 0.0 * sign


@numba.njit
def inv_weighted(a, w):
    return np.sum(np.linalg.inv(a) * w)


@numba.njit
def cholesky_weighted(a, w):
    return np.sum(np.linalg.cholesky(a) * w)


@numba.njit
def cholesky_loops(a, w):
    """Cholesky-Banachiewicz, reading the lower triangle as Numba's cholesky does."""
    n = a.shape[0]
    low = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            s = a[i, j]
            for k in range(j):
                s -= low[i, k] * low[j, k]
            low[i, j] = np.sqrt(s) if i == j else s / low[j, j]
    return np.sum(low * w)


def _annotate(args, shadows):
    return [Duplicated(a, s) if isinstance(a, np.ndarray) else Const(a)
            for a, s in zip(args, shadows)]


def reverse_grads(f, *args):
    """The gradient of each array argument (others are Const) by the split thunks
    test_reverse compiles for the same call, so without a second compilation; the arrays
    are not modified."""
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    shadows = [np.zeros_like(a) if isinstance(a, np.ndarray) else None for a in args]
    annotated = _annotate(args, shadows)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, *annotated)
    tape, _, _ = fwd(*annotated)
    rev(*annotated, 1.0, tape)
    return [s for s in shadows if s is not None]


def modes_agree(f, *args):
    """Forward mode along random tangents == the reverse gradient dotted with them."""
    grads = reverse_grads(f, *args)
    tangents = [rand(*a.shape) if isinstance(a, np.ndarray) else None for a in args]
    expected = sum(np.sum(g * t) for g, t in zip(grads, [t for t in tangents if t is not None]))
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    _, tangent = autodiff(Forward, f, Duplicated, *_annotate(copies, tangents))
    assert tangent == pytest.approx(expected, rel=1e-10, abs=1e-12)
    return grads


def test_the_matrices_pivot():
    from scipy.linalg import lu_factor

    _, piv = lu_factor(pivoting(6))
    assert (piv != np.arange(6)).any()


@pytest.mark.parametrize("n", SIZES)
def test_det(n):
    a = pivoting(n)
    check_reverse(det, Active, a)
    check_forward(det, Duplicated, a)
    (g,) = modes_agree(det, a)
    np.testing.assert_allclose(g, np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-11)


@pytest.mark.parametrize("n", SIZES)
def test_slogdet(n):
    a = pivoting(n)
    a[0] *= -1.0  # a negative determinant: the sign flips, log|det| is still smooth
    check_reverse(logabsdet, Active, a)
    check_forward(logabsdet, Duplicated, a)
    (g,) = modes_agree(logabsdet, a)
    np.testing.assert_allclose(g, np.linalg.inv(a).T, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("n", SIZES)
def test_inv(n):
    a, w = pivoting(n), rand(n, n)
    check_reverse(inv_weighted, Active, a, w)
    check_forward(inv_weighted, Duplicated, a, w)
    ga, gw = modes_agree(inv_weighted, a, w)
    x = np.linalg.inv(a)
    np.testing.assert_allclose(ga, -x.T @ w @ x.T, rtol=1e-10, atol=1e-13)   # dX = -X dA X
    np.testing.assert_allclose(gw, x, rtol=1e-12)


@pytest.mark.parametrize("n", SIZES)
def test_cholesky(n):
    a, w = spd(n), rand(n, n)
    check_reverse(cholesky_weighted, Active, a, w)
    check_forward(cholesky_weighted, Duplicated, a, w)
    ga, gw = modes_agree(cholesky_weighted, a, w)
    la, lw = reverse_grads(cholesky_loops, a, w)
    np.testing.assert_allclose(ga, la, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(gw, lw, rtol=1e-12)
    # Numba's cholesky reads only the lower triangle (C order): nothing flows from the rest.
    assert not ga[np.triu_indices(n, 1)].any()


@numba.njit
def inverse(a):
    return np.linalg.inv(a)


@pytest.mark.parametrize("mode", [Forward, Reverse], ids=["forward", "reverse"])
def test_jacobian_of_the_inverse(mode):
    a = pivoting(3)
    x = np.linalg.inv(a)
    expected = -np.einsum("ik,lj->ijkl", x, x).reshape(9, 9)   # dX = -X dA X
    np.testing.assert_allclose(np.asarray(jacobian(mode, inverse, a)).reshape(9, 9), expected,
                               rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("layout", ["F", "transposed view"])
def test_det_of_other_layouts(layout):
    # Numba copies the matrix into Fortran order before getrf, by other code per layout.
    a = pivoting(4)
    a = np.asfortranarray(a) if layout == "F" else pivoting(4).T
    np.testing.assert_allclose(gradient(Reverse, det, a),
                               np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-11)


def test_float32_det():
    a = pivoting(3).astype(np.float32)
    check_reverse(det, Active, a)
    (g,) = reverse_grads(det, a)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(g, np.linalg.det(a64) * np.linalg.inv(a64).T, rtol=1e-4)


# -- composed functions --------------------------------------------------------------------------
@numba.njit
def gaussian_logpdf(x, mu, cov):
    low = np.linalg.cholesky(cov)
    z = np.linalg.solve(low, x - mu)
    n = x.shape[0]
    return (-0.5 * np.dot(z, z) - np.sum(np.log(np.diag(low)))
            - 0.5 * n * np.log(2.0 * np.pi))


def test_gaussian_log_density():
    from scipy.stats import multivariate_normal

    n = 4
    x, mu, cov = rand(n), rand(n), spd(n)
    assert gaussian_logpdf(x, mu, cov) == pytest.approx(multivariate_normal(mu, cov).logpdf(x),
                                                        rel=1e-12)
    check_reverse(gaussian_logpdf, Active, x, mu, cov)
    check_forward(gaussian_logpdf, Duplicated, x, mu, cov)
    gx, gmu, gcov = modes_agree(gaussian_logpdf, x, mu, cov)
    prec = np.linalg.inv(cov)
    r = prec @ (x - mu)
    np.testing.assert_allclose(gmu, r, rtol=1e-10)
    np.testing.assert_allclose(gx, -r, rtol=1e-10)
    # d/dSigma = (P r r^T P - P) / 2 for a symmetric Sigma; only the lower triangle is read,
    # so each off-diagonal element there stands for two.
    sym = 0.5 * (np.outer(r, r) - prec)
    expected = np.tril(2.0 * sym, -1) + np.diag(np.diag(sym))
    np.testing.assert_allclose(gcov, expected, rtol=1e-9, atol=1e-12)


@numba.njit
def inv_in_a_loop(a, steps):
    m = np.zeros_like(a)
    s = 0.0
    for _ in range(steps):      # m is replaced every step: each inverse's operands are kept
        m = np.linalg.inv(a + 0.1 * m)
        s += m[0, 0] + np.sum(m * m)
    return s


def test_inv_in_a_loop():
    a = pivoting(3)
    check_reverse(inv_in_a_loop, Active, a, 4)
    check_forward(inv_in_a_loop, Duplicated, a, 4)
    modes_agree(inv_in_a_loop, a, 4)


@numba.njit
def det_inv_overwritten(a, w):
    d = np.linalg.det(a)
    x = np.linalg.inv(a)
    s = d * np.sum(np.sin(x) * w)
    x[:] = 1.0            # the inverse, and then a itself, overwritten before the reverse
    a[0, 0] = 3.0         # sweep: the forward sweep kept what it needs
    a[1, :] = 0.0
    return s + np.sum(x)


def test_overwritten_after_the_call():
    a, w = pivoting(3), rand(3, 3)
    check_reverse(det_inv_overwritten, Active, a, w)
    check_forward(det_inv_overwritten, Duplicated, a, w)
    ga, gw = modes_agree(det_inv_overwritten, a, w)
    # As if nothing were overwritten: d(det(A) S)/dA with S = sum(sin(X) w), X = A^-1.
    d, x = np.linalg.det(a), np.linalg.inv(a)
    s = np.sum(np.sin(x) * w)
    expected = d * s * x.T - d * x.T @ (np.cos(x) * w) @ x.T
    np.testing.assert_allclose(ga, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, d * np.sin(x), rtol=1e-12)


def test_gradient_api_and_hvp_through_det():
    a, v = pivoting(3), rand(3, 3)
    np.testing.assert_allclose(gradient(Reverse, det, a),
                               np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-11)
    eps = 1e-5
    fd = (gradient(Reverse, det, a + eps * v) - gradient(Reverse, det, a - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hvp(det, a, v), fd, rtol=1e-6, atol=1e-8)


@numba.njit
def cholesky_squares(a):
    return np.sum(np.linalg.cholesky(a) ** 2)


def test_batch_forward_and_hvp_through_cholesky():
    a, v1, v2 = spd(4), rand(4, 4), rand(4, 4)
    _, (t1, t2) = autodiff(Forward, cholesky_squares, BatchDuplicated,
                           BatchDuplicated(a, (v1, v2)))
    (g,) = reverse_grads(cholesky_squares, a)
    assert (t1, t2) == pytest.approx((np.sum(g * v1), np.sum(g * v2)), rel=1e-11)
    eps = 1e-5
    fd = (reverse_grads(cholesky_squares, a + eps * v1)[0]
          - reverse_grads(cholesky_squares, a - eps * v1)[0]) / (2 * eps)
    np.testing.assert_allclose(hvp(cholesky_squares, a, v1), fd, rtol=1e-6, atol=1e-8)


def test_const_matrix_needs_no_rule():
    a, w = pivoting(3), rand(3, 3)
    dw = np.zeros_like(w)
    autodiff(Reverse, inv_weighted, Active, Const(a), Duplicated(w, dw))
    np.testing.assert_allclose(dw, np.linalg.inv(a), rtol=1e-12)


def test_singular_matrix_gives_nan_not_a_wrong_number():
    a = np.ones((3, 3))           # rank one: U has zeros on its diagonal
    (g,) = reverse_grads(det, a)
    assert np.isnan(g).all()


@numba.njit
def complex_det(a):
    return np.linalg.det(a).real


@pytest.mark.parametrize("mode", [Forward, Reverse], ids=["forward", "reverse"])
def test_complex_matrices_are_refused(mode):
    a = pivoting(3) + 1j * rand(3, 3)
    ret = Duplicated if mode is Forward else Active
    with pytest.raises(UnsupportedError, match=r"numba_xxgetrf.*np\.linalg\.det.*kind 'z'"):
        autodiff(mode, complex_det, ret, Duplicated(a, np.ones_like(a)))


# -- np.linalg.norm: numba_xxnrm2 (BLAS) ---------------------------------------------------------
@numba.njit
def norms(x, a):
    # a vector, a matrix (Frobenius) and strided views (BLAS's incx)
    return np.linalg.norm(x) + 2.0 * np.linalg.norm(a) + np.linalg.norm(a[:, 1]) \
        + np.linalg.norm(a[1, ::2])


@numba.njit
def normalized(x):
    x /= np.linalg.norm(x)   # x overwritten after the call: the forward sweep kept it
    return np.sum(x * np.arange(x.shape[0]))


def test_norm():
    x, a = rand(5), rand(3, 4)
    check_reverse(norms, Active, x, a)
    check_forward(norms, Duplicated, x, a)
    gx, ga = modes_agree(norms, x, a)
    np.testing.assert_allclose(gx, x / np.linalg.norm(x), rtol=1e-12)
    expected = 2.0 * a / np.linalg.norm(a)
    expected[:, 1] += a[:, 1] / np.linalg.norm(a[:, 1])
    expected[1, ::2] += a[1, ::2] / np.linalg.norm(a[1, ::2])
    np.testing.assert_allclose(ga, expected, rtol=1e-12)


def test_norm_of_an_array_normalized_in_place():
    x = rand(6)
    check_reverse(normalized, Active, x)
    check_forward(normalized, Duplicated, x)
    (g,) = modes_agree(normalized, x)
    r, w = np.linalg.norm(x), np.arange(6.0)
    np.testing.assert_allclose(g, w / r - x * np.dot(w, x) / r ** 3, rtol=1e-12)


def test_norm_at_zero_is_nan():
    (gx, ga) = reverse_grads(norms, np.zeros(5), rand(3, 4))
    assert np.isnan(gx).all() and np.isfinite(ga).all()


# -- np.linalg.eigh and eigvalsh: numba_ez_xxxevd ------------------------------------------------
@numba.njit
def eigenvalues(a, u):
    return np.sum(np.linalg.eigvalsh(a) * u)


@numba.njit
def eigenpairs(a, u, w):
    vals, vecs = np.linalg.eigh(a)
    # vecs * vecs[0] multiplies two entries of one column: the same for either sign of it
    return np.sum(vals * u) + np.sum(vecs * vecs[0] * w)


@numba.njit
def eigh_values_only(a, u):
    vals, _ = np.linalg.eigh(a)
    return np.sum(vals * u)


def symmetric(n):
    m = rand(n, n)
    return m + m.T


def fold_lower(g):
    """A gradient as a function that reads only the lower triangle sees it."""
    return np.tril(g + g.T, -1) + np.diag(np.diag(g))


@pytest.mark.parametrize("n", SIZES)
def test_eigvalsh(n):
    a, u = symmetric(n), rand(n)
    check_reverse(eigenvalues, Active, a, u)
    check_forward(eigenvalues, Duplicated, a, u)
    ga, gu = modes_agree(eigenvalues, a, u)
    vals, vecs = np.linalg.eigh(a)
    np.testing.assert_allclose(gu, vals, rtol=1e-12, atol=1e-14)
    # d(lambda_i)/dS = v_i v_i^T; Numba's eigvalsh reads the lower triangle (of a Fortran
    # ordered copy, with uplo 'L').
    np.testing.assert_allclose(ga, fold_lower(vecs @ np.diag(u) @ vecs.T), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("n", [2, 5])
def test_eigh(n):
    a, u, w = symmetric(n), rand(n), rand(n, n)
    check_reverse(eigenpairs, Active, a, u, w)
    check_forward(eigenpairs, Duplicated, a, u, w)
    modes_agree(eigenpairs, a, u, w)


def test_eigenvalue_derivatives_at_repeated_eigenvalues_are_finite():
    a, u = np.eye(3), rand(3)
    (g, _) = reverse_grads(eigh_values_only, a, u)
    np.testing.assert_allclose(g, np.diag(u), atol=1e-14)


# -- the helpers called directly: the flags Numba's own functions never pass ---------------------
def _direct_potrf(uplo: str):
    from numba import types
    from numba.np.linalg import _LAPACK

    potrf, flag = _LAPACK().numba_xxpotrf(types.float64), ord(uplo)

    @numba.njit
    def f(a, w):
        out = a.copy()
        n = out.shape[0]
        potrf(ord("d"), flag, n, out.ctypes, n)
        return np.sum(out * w)   # the factor and the triangle potrf leaves alone
    return f


def _direct_evd(jobz: str, uplo: str):
    from numba import types
    from numba.np.linalg import _LAPACK

    evd, job, tri = _LAPACK().numba_ez_xxxevd(types.float64), ord(jobz), ord(uplo)

    @numba.njit
    def f(a, u):
        out = np.asfortranarray(a)
        n = out.shape[0]
        vals = np.empty(n)
        evd(ord("d"), job, tri, n, out.ctypes, n, vals.ctypes)
        s = np.sum(vals * u)
        if job == ord("V"):
            s += np.sum(out * out[0] * u[0])
        else:   # the triangle not read is left alone
            for j in range(n):
                for i in range(n):
                    if (tri == ord("L") and i < j) or (tri == ord("U") and i > j):
                        s += out[i, j] * u[i]
        return s
    return f


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_potrf_either_triangle(uplo):
    f, a, w = _direct_potrf(uplo), spd(4), rand(4, 4)
    check_reverse(f, Active, a, w)
    check_forward(f, Duplicated, a, w)


@pytest.mark.parametrize("jobz,uplo", [("N", "L"), ("N", "U"), ("V", "U")])
def test_evd_flags(jobz, uplo):
    f, a, u = _direct_evd(jobz, uplo), symmetric(4), rand(4)
    check_reverse(f, Active, a, u)
    check_forward(f, Duplicated, a, u)
