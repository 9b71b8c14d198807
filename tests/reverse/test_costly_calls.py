"""Library calls in loops (``exp``, ``log``, ``sin``): the reverse sweep keeps their results on
its tape instead of calling them again (rows marked ``costly`` in ``pyzyme.rules.libm``) where
that does not change how the tape grows: a loop over an array's axis, or one that keeps values
per iteration anyway. A loop in constant memory (over a plain count, or over pairs) stays so and
calls again, and one instruction (``sqrt``) is computed again. Values against closed forms and
central differences; what is kept against the derivative's own IR (one ``exp`` call where there
were two)."""

import math
import re

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Duplicated, Reverse
from pyzyme.gradbench.evals.lse import logsumexp
from pyzyme.testing import check_grads


@numba.njit
def waves(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * math.cos(2.0 * x[i]) + math.tanh(x[i]) * math.log1p(x[i] * x[i])
    return s


@numba.njit
def series(x, n):
    s = 0.0
    for i in range(n):
        s += math.exp(x * i / n)
    return s


@numba.njit
def pairs(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            d = x[i] - x[j]
            s += math.exp(-d * d)
    return s


@numba.njit
def radii(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += math.sqrt(x[i] * x[i] + x[i + 1] * x[i + 1])
    return s


def _calls(f, x, name, *rest):
    """Calls of ``name`` in the reverse derivative of ``f`` as pyzyme generates it (before
    LLVM's passes): the forward sweep's, and the reverse sweep's where it computes again."""
    first = Active(x) if isinstance(x, float) else Duplicated(x, np.zeros_like(x))
    text = pyzyme.code_llvm(Reverse, f, Active, first, *rest)
    body = next(part for part in text.split("\ndefine ") if re.match(r"[^\n]*@\"?diffe", part))
    return len(re.findall(rf"call [^\n]*@{re.escape(name)}\(", body))


@pytest.fixture
def x():
    return np.random.default_rng(7).uniform(0.2, 1.5, 9)


def test_logsumexp_keeps_each_exp(x):
    g = pyzyme.grad(logsumexp)(x)
    softmax = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    np.testing.assert_allclose(g, softmax, rtol=1e-13, atol=1e-15)
    check_grads(logsumexp, (x,), modes=("rev",))
    assert _calls(logsumexp, x, "llvm.exp.f64") == 1   # the forward sweep's only


def test_several_library_calls(x):
    g = pyzyme.grad(waves)(x)
    closed = (np.cos(x) * np.cos(2 * x) - 2 * np.sin(x) * np.sin(2 * x)
              + (1 - np.tanh(x) ** 2) * np.log1p(x * x) + np.tanh(x) * 2 * x / (1 + x * x))
    np.testing.assert_allclose(g, closed, rtol=1e-12, atol=1e-14)
    check_grads(waves, (x,), modes=("rev",))


def test_second_order_through_kept_results(x):
    """Forward mode over the reverse sweep differentiates the tape stores and loads of the
    kept results: the Hessian-vector product against differences of the gradient."""
    v = np.random.default_rng(3).standard_normal(x.size)
    hv = pyzyme.hvp(waves, x, v)
    grad = pyzyme.grad(waves)
    h = 1e-6
    np.testing.assert_allclose(hv, (grad(x + h * v) - grad(x - h * v)) / (2 * h),
                               rtol=1e-6, atol=1e-8)
    hv = pyzyme.hvp(logsumexp, x, v)
    grad = pyzyme.grad(logsumexp)
    np.testing.assert_allclose(hv, (grad(x + h * v) - grad(x - h * v)) / (2 * h),
                               rtol=1e-6, atol=1e-8)


def test_constant_memory_loops_call_again(x):
    """A loop over a plain count and a loop over pairs keep nothing per iteration: the reverse
    sweep calls exp again rather than grow a tape with the number of terms."""
    n = 50
    g = pyzyme.grad(series)(0.3, n)
    np.testing.assert_allclose(g, sum(i / n * math.exp(0.3 * i / n) for i in range(n)),
                               rtol=1e-13)
    assert _calls(series, 0.3, "llvm.exp.f64", pyzyme.Const(n)) == 2
    assert "tape_realloc" not in pyzyme.code_llvm(Reverse, series, Active, Active(0.3),
                                                  pyzyme.Const(n), optimized=True)
    g = pyzyme.grad(pairs)(x)
    d = x[:, None] - x[None, :]
    np.testing.assert_allclose(g, (-4 * d * np.exp(-d * d)).sum(axis=1), rtol=1e-12,
                               atol=1e-14)
    check_grads(pairs, (x,), modes=("rev",))
    assert _calls(pairs, x, "llvm.exp.f64") == 2


def test_one_instruction_is_computed_again(x):
    """sqrt is one instruction: the reverse sweep computes it again rather than taping it."""
    g = pyzyme.grad(radii)(x)
    check_grads(radii, (x,), modes=("rev",))
    assert _calls(radii, x, "llvm.sqrt.f64") == 2
