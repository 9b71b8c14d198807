"""np.dot and @ (Numba's BLAS helpers numba_xxdot/gemv/gemm): derivatives by BLAS calls,
checked against finite differences, against the same products written as loops, and between
modes; operands overwritten before the reverse sweep; products in loops; second order."""

import numba
import numpy as np
import pytest

from pyzyme import Active, Const, Duplicated, Forward, Reverse, autodiff, gradient, hvp
from pyzyme.testing import test_forward as check_forward
from pyzyme.testing import test_reverse as check_reverse

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float64):
    return RNG.normal(size=shape).astype(dtype)


@numba.njit
def matmat(a, b):
    c = a @ b
    return np.sum(c * c)


@numba.njit
def matmat_loops(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            c = 0.0
            for k in range(a.shape[1]):
                c += a[i, k] * b[k, j]
            s += c * c
    return s


@numba.njit
def matvec(a, x):
    y = a @ x
    return np.sum(y * y)


@numba.njit
def vecmat(x, a):
    y = x @ a
    return np.sum(np.sin(y))


@numba.njit
def dot(x, y):
    return np.dot(x, y) ** 2


def reverse_grads(f, *args):
    shadows = [np.zeros_like(a) for a in args]
    autodiff(Reverse, f, Active, *[Duplicated(a, s) for a, s in zip(args, shadows)])
    return shadows


SHAPES = [((3, 4), (4, 2)), ((1, 4), (4, 3)), ((3, 4), (4, 1)), ((3, 1), (1, 5)),
          ((5, 3), (3, 5))]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
@pytest.mark.parametrize("layout", ["CC", "FF", "CF", "TT"])
def test_gemm_matches_the_loop_version(sa, sb, layout):
    a, b = rand(*sa), rand(*sb)
    if layout[0] == "F":
        a = np.asfortranarray(a)
    if layout[1] == "F":
        b = np.asfortranarray(b)
    if layout == "TT":  # transposed views: Numba copies them (or passes them transposed)
        a, b = rand(*sa[::-1]).T, rand(*sb[::-1]).T
    da, db = reverse_grads(matmat, a, b)
    la, lb = reverse_grads(matmat_loops, np.ascontiguousarray(a), np.ascontiguousarray(b))
    np.testing.assert_allclose(da, la, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(db, lb, rtol=1e-12, atol=1e-12)
    va, vb = rand(*sa), rand(*sb)
    _, tangent = autodiff(Forward, matmat, Duplicated, Duplicated(a, va), Duplicated(b, vb))
    assert tangent == pytest.approx(np.sum(da * va) + np.sum(db * vb), rel=1e-12)


@pytest.mark.parametrize("f,shapes", [(matvec, ((4, 3), (3,))), (vecmat, ((4,), (4, 3))),
                                      (dot, ((5,), (5,)))], ids=["gemv_n", "gemv_t", "dot"])
def test_gemv_and_dot_against_finite_differences(f, shapes):
    args = [rand(*s) for s in shapes]
    check_reverse(f, Active, *args)
    check_forward(f, Duplicated, *args)


def test_float32():
    a, b = rand(3, 4, dtype=np.float32), rand(4, 2, dtype=np.float32)
    da, db = reverse_grads(matmat, a, b)
    la, lb = reverse_grads(matmat_loops, a, b)
    np.testing.assert_allclose(da, la, rtol=1e-4)
    np.testing.assert_allclose(db, lb, rtol=1e-4)


@numba.njit
def overwrite_after(a, b):
    c = a @ b
    s = np.sum(c * c)
    a[:] = 0.0            # the reverse sweep needs a as it was: the forward sweep copied it
    b[0, 0] = 5.0
    return s


@numba.njit
def chain_in_loop(a, x, n):
    for _ in range(n):    # x is overwritten every step: each product's operand is kept
        x = np.tanh(a @ x)
    return np.sum(x)


def test_operands_overwritten_before_the_reverse_sweep():
    a0, b0 = rand(3, 4), rand(4, 2)
    a, b = a0.copy(), b0.copy()
    da, db = reverse_grads(overwrite_after, a, b)
    la, lb = reverse_grads(matmat_loops, a0, b0)
    np.testing.assert_allclose(da, la, rtol=1e-12)
    np.testing.assert_allclose(db, lb, rtol=1e-12)


def test_products_in_a_loop():
    a, x = rand(4, 4) * 0.5, rand(4)
    check_reverse(chain_in_loop, Active, a, x, 5)
    check_forward(chain_in_loop, Duplicated, a, x, 5)


def test_gradient_and_hvp_through_gemm():
    a, b = rand(3, 4), rand(4, 2)
    g = gradient(Reverse, lambda m: matmat(m, b), a)
    np.testing.assert_allclose(g, 2 * (a @ b) @ b.T, rtol=1e-12)
    v = rand(3, 4)
    # f(a) = |a b|^2: the Hessian applied to v is 2 v b b^T.
    np.testing.assert_allclose(hvp(lambda m: matmat(m, b), a, v), 2 * v @ b @ b.T,
                               rtol=1e-12)


@numba.njit
def descent_gemv(w0, y, x, steps):
    """Logistic-regression steps updating w in place through np.dot (GEMVs with Numba's
    alpha = 1 and beta = 0 in stack slots), then |w|^2."""
    w = w0.copy()
    for _ in range(steps):
        w -= np.dot(((1.0 / (1.0 + np.exp(-y * np.dot(x, w))) - 1.0) * y), x)
    return np.sum(w * w)


@numba.njit
def descent_gemm(w0, y, x, steps):
    """Least-squares steps on a matrix of weights through np.dot of matrices (GEMMs)."""
    w = w0.copy()
    for _ in range(steps):
        w -= 0.1 * np.dot(x.T, np.dot(x, w) - y)
    return np.sum(w * w)


@pytest.mark.parametrize("f, wshape", [(descent_gemv, (3,)), (descent_gemm, (3, 2))],
                         ids=["gemv", "gemm"])
def test_hvp_through_products_updated_in_a_loop(f, wshape):
    # The reverse sweep's BLAS calls pass the primal's alpha and beta, constants in stack
    # slots: read as such, not cached on a tape that holds derivatives too (forward mode over
    # the reverse sweep then took beta for active and refused the product).
    rng = np.random.default_rng(4)
    x = rng.normal(0, 0.3, (12, 3))
    y = rng.choice([-1.0, 1.0], 12) if len(wshape) == 1 else rng.normal(0, 1, (12, 2))
    w0, v = rng.normal(0, 0.3, wshape), rng.normal(0, 1, wshape)
    grad_at = lambda w: gradient(Reverse, lambda u: f(u, y, x, 3), w)  # noqa: E731
    h = 1e-5
    central = (grad_at(w0 + h * v) - grad_at(w0 - h * v)) / (2 * h)
    np.testing.assert_allclose(hvp(f, w0, v, y, x, 3), central, rtol=1e-6, atol=1e-9)


def test_const_operand_gets_no_adjoint_work():
    a, b = rand(3, 4), rand(4, 2)
    da = np.zeros_like(a)
    autodiff(Reverse, matmat, Active, Duplicated(a, da), Const(b))
    np.testing.assert_allclose(da, 2 * (a @ b) @ b.T, rtol=1e-12)


# -- np.linalg.solve: numba_xgesv ----------------------------------------------------------------
@numba.njit
def solve_sq(a, b):
    x = np.linalg.solve(a, b)
    return np.sum(x * x)


@numba.njit
def solve_then_overwrite(a, b):
    x = np.linalg.solve(a, b)
    s = np.sum(np.sin(x))
    x[:] = 0.0            # the reverse sweep needs x as solved: the forward sweep copied it
    return s + np.sum(x)


def well_posed(n):
    return rand(n, n) + n * np.eye(n)


@pytest.mark.parametrize("b_shape", [(4,), (4, 3)], ids=["vector", "matrix"])
def test_solve_against_finite_differences(b_shape):
    a, b = well_posed(4), rand(*b_shape)
    check_reverse(solve_sq, Active, a, b)
    check_forward(solve_sq, Duplicated, a, b)
    check_reverse(solve_then_overwrite, Active, np.asfortranarray(a), b)


def test_solve_gradient_is_a_transposed_solve():
    a, b = well_posed(5), rand(5)
    x = np.linalg.solve(a, b)
    da, db = reverse_grads(solve_sq, a, b)
    np.testing.assert_allclose(db, np.linalg.solve(a.T, 2 * x), rtol=1e-12)
    np.testing.assert_allclose(da, -np.outer(np.linalg.solve(a.T, 2 * x), x), rtol=1e-11)
    np.testing.assert_allclose(gradient(Reverse, lambda v: solve_sq(a, v), b), db, rtol=1e-12)


def test_constant_right_hand_side_asks_for_runtime_activity():
    # Numba's solve copies b through a pointer merged with b's own: with b a constant (here
    # captured by a closure) that pointer's activity is known only at run time.
    from pyzyme import ActivityError

    a, b = well_posed(3), rand(3)
    with pytest.raises(ActivityError, match="set_runtime_activity"):
        gradient(Reverse, lambda m: solve_sq(m, b), a)


def test_hvp_through_solve():
    a, b, v = well_posed(3), rand(3), rand(3)
    ainv = np.linalg.inv(a)
    # f(b) = |A^-1 b|^2: Hessian 2 A^-T A^-1.
    np.testing.assert_allclose(hvp(lambda u: solve_sq(a, u), b, v), 2 * ainv.T @ ainv @ v,
                               rtol=1e-11)
