"""The seed documents' reverse-mode examples (Enzyme.jl's docs), in their Numba form."""

import numba
import numpy as np
import pytest

from pyzyme import Active, Const, Duplicated, Reverse, ReverseWithPrimal, autodiff
from pyzyme.api.plans import reverse_plan
from tests.kernels import matmul, taylor


@pytest.mark.parametrize("n", [10**6, 10**8])
def test_taylor_series(n):
    # sum_{i<n} x**i / i -> -log(1 - x); its derivative sum x**(i-1) -> 1 / (1 - x) = 2.
    (dx, none), value = autodiff(ReverseWithPrimal, taylor, Active, Active(0.5), Const(n))
    assert none is None
    assert value == pytest.approx(np.log(2.0), rel=1e-14)
    assert dx == pytest.approx(2.0, rel=1e-14)


def test_taylor_tape_does_not_grow_with_n():
    # The loop keeps nothing per iteration: its induction variable and the branch of Numba's
    # integer power are recomputed, and the squaring loop inside x ** i is a call with a rule
    # (pyzyme.transforms.int_power), recomputed too.
    autodiff(Reverse, taylor, Active, Active(0.5), Const(10))
    plan = reverse_plan(taylor, (numba.float64, numba.int64), ("active", "const"), Active, True)
    loops = [line for line in plan.tape.splitlines() if line.strip().startswith("loop")]
    assert len(loops) == 1 and loops[0].endswith("caches none"), plan.tape


def test_triple_loop_matmul_vjp():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((7, 5)), rng.standard_normal((5, 4))
    R = np.zeros((7, 4))
    dR = rng.standard_normal((7, 4))
    dA, dB = np.zeros_like(A), np.zeros_like(B)
    seed = dR.copy()
    autodiff(Reverse, matmul, Const, Duplicated(A, dA), Duplicated(B, dB), Duplicated(R, dR))
    np.testing.assert_allclose(R, A @ B, rtol=1e-14)
    np.testing.assert_allclose(dA, seed @ B.T, rtol=1e-13)
    np.testing.assert_allclose(dB, A.T @ seed, rtol=1e-13)
    assert not dR.any()  # the output's adjoint is consumed


def test_matmul_vjp_when_arrays_overlap():
    # The same array as both inputs: no noalias specialization, the general derivative.
    rng = np.random.default_rng(2)
    A = rng.standard_normal((4, 4))
    R = np.zeros((4, 4))
    dR = rng.standard_normal((4, 4))
    dA = np.zeros_like(A)
    seed = dR.copy()
    autodiff(Reverse, matmul, Const, Duplicated(A, dA), Duplicated(A, dA), Duplicated(R, dR))
    np.testing.assert_allclose(dA, seed @ A.T + A.T @ seed, rtol=1e-13)
