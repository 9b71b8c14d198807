"""Arrays the JAX-style layer holds constant that the function writes, or whose memory it
merges with memory that has a shadow (pyzyme.api.workspaces): grad, value_and_grad, jacrev,
jacfwd and hvp give them zero shadows of their own, from Python and from @njit code; autodiff
still refuses them as Const (API.md)."""

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Reverse
from pyzyme.api.second_order import _plan
from tests.kernels import central_gradient


@numba.njit
def cubes(x, out):
    """sum(x**3) through an output array: out = x**2, then sum(out * x)."""
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += out[i] * x[i]
    return s


@numba.njit
def weighted(x, w, out):
    """sum(w * exp(x)) with out as scratch; w is read only."""
    for i in range(x.shape[0]):
        out[i] = w[i] * np.exp(x[i])
    return out.sum()


@numba.njit
def pair(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]
    return out[0] * x[1], out[1] + out[2]


@numba.njit
def scaled(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]
    return out * x[0]


@numba.njit(parallel=True)
def smoothed_energy(x, out):
    """A prange loop writing a smoothed copy of x into out, then a reduction over it."""
    n = x.shape[0]
    for i in prange(n):
        out[i] = 0.25 * x[max(i - 1, 0)] + 0.5 * x[i] + 0.25 * x[min(i + 1, n - 1)]
    s = 0.0
    for i in prange(n):
        s += out[i] ** 3
    return s


@numba.njit
def relaxed(x, init, steps):
    """c starts as init, which nothing writes, then each step makes a new array of c and x:
    c is init's memory or a new array's, known only at run time."""
    c = init
    for _ in range(steps):
        c = 0.5 * (c + x * x)
    return np.sum(c * c)


X = np.array([0.5, -1.2, 2.0, 0.3])


def test_autodiff_still_refuses_a_written_const_array():
    with pytest.raises(pyzyme.ActivityError, match="argument 'out'"):
        pyzyme.autodiff(Reverse, cubes, Active, pyzyme.Duplicated(X.copy(), np.zeros(4)),
                        Const(np.zeros(4)))


def test_grad_and_value_and_grad_from_python():
    out = np.zeros(4)
    g = pyzyme.grad(cubes)
    for _ in range(3):   # the first call builds; later ones take the signature's own call
        np.testing.assert_allclose(g(X, out), 3 * X ** 2, rtol=1e-14)
    value, grad = pyzyme.value_and_grad(cubes)(X, out)
    assert value == pytest.approx(np.sum(X ** 3), rel=1e-14)
    np.testing.assert_allclose(grad, 3 * X ** 2, rtol=1e-14)
    np.testing.assert_allclose(out, X ** 2)          # the primal's writes happen as in f


def test_read_only_arrays_stay_constant_and_written_ones_get_shadows():
    w, out = np.array([1.0, 2.0, 0.5, 3.0]), np.zeros(4)
    np.testing.assert_allclose(pyzyme.grad(weighted)(X, w, out), w * np.exp(X), rtol=1e-14)
    np.testing.assert_allclose(central_gradient(weighted, X, w, out),
                               pyzyme.grad(weighted)(X, w, out), rtol=1e-8)
    # w's gradient is not computed: hvp's plan shadows out (position 1 of the constants) only
    assert _plan(weighted, X, (w, out)).workspaces == (1,)
    assert _plan(lambda x, w: np.sum(w * np.exp(x)), X, (w,)).workspaces == ()


def test_grad_through_a_container_argument():
    def f(xs, out):
        return cubes(xs[0], out) + 2.0 * cubes(xs[1], out)
    a, b = X.copy(), X[::-1].copy()
    ga, gb = pyzyme.grad(f)((a, b), np.zeros(4))
    np.testing.assert_allclose(ga, 3 * a ** 2, rtol=1e-14)
    np.testing.assert_allclose(gb, 6 * b ** 2, rtol=1e-14)


def test_jacrev_from_python():
    out = np.zeros(3)
    x = X[:3].copy()
    expect_pair = np.array([[2 * x[0] * x[1], x[0] ** 2, 0.0], [0.0, 2 * x[1], 2 * x[2]]])
    np.testing.assert_allclose(pyzyme.jacrev(pair)(x, out), expect_pair, rtol=1e-14)
    expect = np.diag(2 * x * x[0])
    expect[:, 0] += x ** 2
    np.testing.assert_allclose(pyzyme.jacrev(scaled)(x, out), expect, rtol=1e-14)


def test_inside_njit_code():
    g, vg = pyzyme.grad(cubes), pyzyme.value_and_grad(cubes)
    jp, js = pyzyme.jacrev(pair), pyzyme.jacrev(scaled)

    @numba.njit
    def caller(x, out):
        return g(x, out), vg(x, out)[0], jp(x[:3].copy(), out[:3].copy()), \
            js(x[:3].copy(), out[:3].copy())

    grad, value, jpair, jscaled = caller(X, np.zeros(4))
    np.testing.assert_allclose(grad, 3 * X ** 2, rtol=1e-14)
    assert value == pytest.approx(np.sum(X ** 3), rel=1e-14)
    x = X[:3]
    np.testing.assert_allclose(jpair, pyzyme.jacrev(pair)(x.copy(), np.zeros(3)), rtol=1e-14)
    np.testing.assert_allclose(jscaled, pyzyme.jacrev(scaled)(x.copy(), np.zeros(3)),
                               rtol=1e-14)


def test_hvp_against_the_exact_hessian():
    v = np.array([1.0, -2.0, 0.5, 3.0])
    out = np.zeros(4)
    for _ in range(2):
        np.testing.assert_allclose(pyzyme.hvp(cubes, X, v, out), 6 * X * v, rtol=1e-14)
    hv, g = pyzyme.hvp_and_gradient(cubes, X, v, out)
    np.testing.assert_allclose(hv, 6 * X * v, rtol=1e-14)
    np.testing.assert_allclose(g, 3 * X ** 2, rtol=1e-14)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_hvp_of_a_prange_loop_writing_its_output(threads):
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal(50), rng.standard_normal(50)
    serial = numba.njit(smoothed_energy.py_func)
    expect = pyzyme.hvp(serial, x, v, np.zeros(50))
    grad = pyzyme.grad(serial)
    h = 1e-5
    fd = (grad(x + h * v, np.zeros(50)) - grad(x - h * v, np.zeros(50))) / (2 * h)
    np.testing.assert_allclose(expect, fd, rtol=1e-6, atol=1e-8)
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        for _ in range(5 if threads > 1 else 1):
            got = pyzyme.hvp(smoothed_energy, x, v, np.zeros(50))
            np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-12)
    finally:
        numba.set_num_threads(before)


@numba.njit
def accumulate(x, acc):
    """Reads what acc held on entry: each of jacrev's sweeps must start from it."""
    for i in range(x.shape[0]):
        acc[i] += x[i] * x[i]
    return acc[0] * x[1], acc[1] * x[2]


@numba.njit
def accumulate_rows(x, acc):
    for i in range(x.shape[0]):
        acc[i] += x[i] * x[i]
    return acc * x[0]


def _expected_accumulated(x, acc0):
    acc = acc0 + x ** 2
    pair = np.zeros((2, x.size))
    pair[0, :2] = 2 * x[0] * x[1], acc[0]
    pair[1, 1:3] = 2 * x[1] * x[2], acc[1]
    rows = np.diag(2 * x * x[0])
    rows[:, 0] += acc
    return pair, rows


def test_jacrev_sweeps_start_from_the_written_arrays_on_entry():
    x, acc0 = X[:3].copy(), np.array([1.0, 2.0, 3.0])
    pair, rows = _expected_accumulated(x, acc0)
    acc = acc0.copy()
    np.testing.assert_allclose(pyzyme.jacrev(accumulate)(x, acc), pair, rtol=1e-14)
    np.testing.assert_allclose(acc, acc0 + x ** 2)       # as one call of the function leaves it
    acc = acc0.copy()
    np.testing.assert_allclose(pyzyme.jacrev(accumulate_rows)(x, acc), rows, rtol=1e-14)
    np.testing.assert_allclose(acc, acc0 + x ** 2)
    jp, jr = pyzyme.jacrev(accumulate), pyzyme.jacrev(accumulate_rows)

    @numba.njit
    def caller(x, a, b):
        return jp(x, a), jr(x, b)

    a, b = acc0.copy(), acc0.copy()
    got_pair, got_rows = caller(x, a, b)
    np.testing.assert_allclose(got_pair, pair, rtol=1e-14)
    np.testing.assert_allclose(got_rows, rows, rtol=1e-14)
    np.testing.assert_allclose(a, acc0 + x ** 2)
    np.testing.assert_allclose(b, acc0 + x ** 2)


def test_jacfwd_gives_written_arrays_tangents_and_starts_each_chunk_from_their_entry():
    # 6 inputs: two chunks of forward lanes (pyzyme.api.njit.jacobian.CHUNK = 4), each a
    # call of the function that must see acc as it was on entry
    x, acc0 = np.linspace(-1.0, 1.5, 6), np.linspace(1.0, 3.0, 6)
    expect_pair, rows = _expected_accumulated(x, acc0)
    acc = acc0.copy()
    np.testing.assert_allclose(pyzyme.jacfwd(accumulate)(x, acc), expect_pair, rtol=1e-14)
    np.testing.assert_allclose(acc, acc0 + x ** 2)
    acc = acc0.copy()
    np.testing.assert_allclose(pyzyme.jacfwd(accumulate_rows)(x, acc), rows, rtol=1e-14)
    np.testing.assert_allclose(acc, acc0 + x ** 2)
    np.testing.assert_allclose(pyzyme.jacfwd(pair)(X[:3].copy(), np.zeros(3)),
                               pyzyme.jacrev(pair)(X[:3].copy(), np.zeros(3)), rtol=1e-14)
    with pytest.raises(pyzyme.ActivityError, match="argument 'out'"):
        pyzyme.autodiff(pyzyme.Forward, cubes, pyzyme.Duplicated(X.copy(), np.ones(4)),
                        Const(np.zeros(4)))


def test_value_and_grad_with_aux_and_a_written_array():
    def f(x, out):
        return cubes(x, out), out[0]
    (value, aux), grad = pyzyme.value_and_grad(f, has_aux=True)(X, np.zeros(4))
    assert value == pytest.approx(np.sum(X ** 3), rel=1e-14)
    assert aux == pytest.approx(X[0] ** 2, rel=1e-14)
    np.testing.assert_allclose(grad, 3 * X ** 2, rtol=1e-14)


def test_an_array_merged_with_new_ones_gets_a_shadow_too():
    # autodiff refuses init as Const (its memory meets memory with a shadow); grad, jacfwd and
    # hvp give it a zero shadow. c_k = a init + (1 - a) x^2 with a = 2^-k, f = |c_k|^2.
    init, k, v = np.array([1.0, 2.0, -1.0, 0.5]), 3, np.array([1.0, -2.0, 0.5, 3.0])
    with pytest.raises(pyzyme.ActivityError, match="init"):
        pyzyme.autodiff(Reverse, relaxed, Active, pyzyme.Duplicated(X, np.zeros(4)),
                        Const(init), Const(k))
    a = 0.5 ** k
    c = a * init + (1 - a) * X * X
    np.testing.assert_allclose(pyzyme.grad(relaxed)(X, init, k), 4 * (1 - a) * c * X,
                               rtol=1e-14)
    np.testing.assert_allclose(pyzyme.jacfwd(relaxed)(X, init, k), 4 * (1 - a) * c * X,
                               rtol=1e-14)
    np.testing.assert_allclose(pyzyme.hvp(relaxed, X, v, init, k),
                               4 * (1 - a) * (c + 2 * (1 - a) * X * X) * v, rtol=1e-13)
