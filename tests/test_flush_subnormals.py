"""``Options.flush_subnormals``: derivatives run with x86's FTZ and DAZ set, and only they."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Duplicated, Forward, Reverse
from pyzyme.diff import float_env

pytestmark = pytest.mark.skipif(not float_env.supported(),
                                reason="flushing subnormals is implemented for x86-64 only")

TINY = 1e-300


def scaled(x):
    # The adjoint of x[0] is TINY * 1e-10 = 1e-310, a subnormal.
    return x[0] * TINY * 1e-10 + x[1] * x[1]


def _reverse(x):
    dx = np.zeros_like(x)
    pyzyme.autodiff(Reverse, scaled, Active, Duplicated(x, dx))
    return dx


def _subnormal_arithmetic_works():
    # NumPy's own multiply, after the derivative returned: the caller's mode is IEEE again.
    return np.multiply(np.float64(TINY), np.float64(1e-10)) != 0.0


def test_reverse_flushes_subnormal_adjoints_and_restores_the_mode():
    x = np.array([1.0, 3.0])
    ieee = _reverse(x)
    assert 0.0 < ieee[0] < 2.3e-308 and ieee[1] == pytest.approx(6.0)
    with pyzyme.options(flush_subnormals=True):
        flushed = _reverse(x)
    assert flushed[0] == 0.0 and flushed[1] == pytest.approx(6.0)
    assert _subnormal_arithmetic_works()
    # Built under the default options again: the IEEE derivative, not the flushing one.
    assert _reverse(x)[0] == ieee[0]


def test_forward_flushes_subnormal_tangents():
    x, dx = np.array([1.0, 3.0]), np.array([1.0, 0.0])
    ieee = pyzyme.autodiff(Forward, scaled, Duplicated(x, dx))[-1]
    with pyzyme.options(flush_subnormals=True):
        flushed = pyzyme.autodiff(Forward, scaled, Duplicated(x, dx))[-1]
    assert 0.0 < ieee < 2.3e-308 and flushed == 0.0
    assert _subnormal_arithmetic_works()


def test_only_the_flushing_derivative_sets_the_mode():
    x, dx = np.array([1.0, 3.0]), np.zeros(2)
    plain = pyzyme.code_llvm(Reverse, scaled, Active, Duplicated(x, dx), optimized=True)
    with pyzyme.options(flush_subnormals=True):
        flushing = pyzyme.code_llvm(Reverse, scaled, Active, Duplicated(x, dx), optimized=True)
    assert "ldmxcsr" not in plain
    # Set once on entry, restored on the way out.
    assert flushing.count("call void @llvm.x86.sse.ldmxcsr") >= 2


@numba.njit
def _softmax_loss(w, x):
    # A log-sum-exp whose smaller weights underflow: their adjoints are subnormal or zero.
    total = 0.0
    for i in range(x.shape[0]):
        top = -np.inf
        for j in range(w.shape[0]):
            top = max(top, w[j] * x[i])
        s = 0.0
        for j in range(w.shape[0]):
            s += np.exp(w[j] * x[i] - top)
        total += np.log(s) + top
    return total


def test_grad_in_njit_code_agrees_with_ieee_where_values_are_normal():
    rng = np.random.default_rng(3)
    w = rng.standard_normal(6) * 400.0
    x = rng.standard_normal(20)
    ieee = pyzyme.grad(_softmax_loss)(w, x)
    with pyzyme.options(flush_subnormals=True):
        g = pyzyme.grad(_softmax_loss)

        @numba.njit
        def flushed(w, x):
            return g(w, x)

        result = flushed(w, x)
    assert _subnormal_arithmetic_works()
    np.testing.assert_allclose(result, ieee, rtol=1e-12, atol=1e-300)
    step = 1e-6 * np.abs(w).max()
    for j in range(w.shape[0]):
        e = np.zeros_like(w)
        e[j] = step
        fd = (_softmax_loss(w + e, x) - _softmax_loss(w - e, x)) / (2 * step)
        assert result[j] == pytest.approx(fd, rel=1e-5, abs=1e-6)


_scaled = numba.njit(scaled)
_g = pyzyme.grad(_scaled)


def _caller():
    return numba.njit(lambda x: _g(x))


def test_one_grad_object_in_njit_code_compiled_under_each_options():
    # One grad object, called from @njit functions compiled under different options: each
    # gets the derivative of its own options (Numba compiles a function once per types, so a
    # single @njit function behind the object kept the first one).
    x = np.array([1.0, 3.0])
    ieee = _caller()
    assert 0.0 < ieee(x)[0] < 2.3e-308
    with pyzyme.options(flush_subnormals=True):
        flushed = _caller()
        assert flushed(x)[0] == 0.0
    assert flushed(x)[0] == 0.0 and 0.0 < ieee(x)[0] < 2.3e-308
    assert 0.0 < _caller()(x)[0] < 2.3e-308
