"""``grad(f)(...)`` from Python with plain arguments (float arrays and floats differentiated,
arrays, floats and ints held) goes, from its second call with a signature on, straight to
the derivative compiled for it (``convenience._plain_call``): each call must still get fresh
gradients, see arrays passed twice, and follow the options and rules of the moment."""

import math

import numba
import numpy as np

import pyzyme


@numba.njit
def weighted(x, w, n):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * w[i]
    return s * n


def _expected(x, w, n):
    return np.cos(x) * w * n, np.sin(x) * n


def test_repeated_calls_give_fresh_gradients():
    x, w = np.linspace(0.1, 1.0, 5), np.linspace(2.0, 3.0, 5)
    g = pyzyme.grad(weighted, argnums=(0, 1))
    first = g(x, w, 3)
    second = g(x, w, 3)
    for got in (first, second):
        np.testing.assert_allclose(got[0], _expected(x, w, 3)[0], rtol=1e-14)
        np.testing.assert_allclose(got[1], _expected(x, w, 3)[1], rtol=1e-14)
    assert first[0] is not second[0] and first[1] is not second[1]
    value, dx = pyzyme.value_and_grad(weighted)(x, w, 2)
    value2, dx2 = pyzyme.value_and_grad(weighted)(x, w, 2)
    assert value == value2 == 2 * np.sum(np.sin(x) * w)
    np.testing.assert_allclose(dx2, _expected(x, w, 2)[0], rtol=1e-14)


def test_argnums_out_of_order():
    """argnums=(1, 0): each gradient where its argument number says, every call (the second
    call, made straight to the derivative, gave them swapped)."""
    x, w = np.linspace(0.1, 1.0, 5), np.linspace(2.0, 3.0, 5)
    g = pyzyme.grad(weighted, argnums=(1, 0))
    for _ in range(3):
        dw, dx = g(x, w, 3)
        np.testing.assert_allclose(dx, _expected(x, w, 3)[0], rtol=1e-14)
        np.testing.assert_allclose(dw, _expected(x, w, 3)[1], rtol=1e-14)
    h = pyzyme.grad(lambda a, y: a * np.sum(y * y), argnums=(1, 0))
    for _ in range(3):
        dy, da = h(2.0, np.array([1.0, 3.0]))
        assert da == 10.0
        np.testing.assert_allclose(dy, [4.0, 12.0])


def test_an_array_passed_twice():
    x = np.linspace(0.1, 1.0, 5)
    g = pyzyme.grad(weighted)
    apart = g(x, x.copy(), 1)          # the signature's distinct derivative first
    for _ in range(2):
        same = g(x, x, 1)              # then x as both arguments: not distinct
        np.testing.assert_allclose(same, np.cos(x) * x, rtol=1e-14)
    np.testing.assert_allclose(apart, np.cos(x) * x, rtol=1e-14)


def test_floats_and_options_of_the_moment():
    h = pyzyme.grad(lambda a, b: a * b * b, argnums=(0, 1))
    for _ in range(2):
        assert h(2.0, 3.0) == (9.0, 12.0)
    # log's branch not taken at 0: strong zero gives 0, IEEE arithmetic 0 * inf = NaN; the
    # call made straight to a derivative must follow the option as it is at each call
    guarded = pyzyme.grad(lambda a: math.log(a) if a > 0.0 else 0.0)
    assert guarded(0.0) == guarded(0.0) == 0.0
    pyzyme.set_options(strong_zero=False)
    try:
        assert math.isnan(guarded(0.0)) and math.isnan(guarded(0.0))
    finally:
        pyzyme.set_options(strong_zero=True)
    assert guarded(0.0) == 0.0


def test_read_only_arrays_and_other_arguments_take_their_own_path():
    x = np.linspace(0.1, 1.0, 5)
    w = np.linspace(2.0, 3.0, 5)
    frozen = x.copy()
    frozen.flags.writeable = False
    g = pyzyme.grad(weighted)
    for _ in range(2):
        np.testing.assert_allclose(g(frozen, w, 3), _expected(x, w, 3)[0], rtol=1e-14)
        np.testing.assert_allclose(g(x, w, np.int32(3)), _expected(x, w, 3)[0], rtol=1e-14)


@numba.njit
def weighted_2d(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += x[i, j] * x[i, j] * w[i, j]
    return s


@numba.njit
def weighted_1d(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * w[i]
    return s


def test_each_signature_gets_its_own_derivative():
    """The key of the call made straight to a derivative tells dtypes, layouts, dimensions and
    read-only arrays apart: each call, first or later, gets its own arguments' gradient."""
    base = np.linspace(0.5, 2.0, 6).reshape(2, 3)
    weights = np.linspace(1.0, 3.0, 6).reshape(2, 3)
    frozen = base.copy()
    frozen.flags.writeable = False
    calls = [(base, weights), (base.astype(np.float32), weights.astype(np.float32)),
             (np.asfortranarray(base), weights), (base, np.asfortranarray(weights)),
             (base.T, weights.T), (frozen, weights), (base[:, ::2], weights[:, ::2])]
    g2 = pyzyme.grad(weighted_2d, argnums=(0, 1))
    for _ in range(2):
        for x, w in calls:
            dx, dw = g2(x, w)
            assert dx.dtype == x.dtype and dx.shape == x.shape and dw.shape == w.shape
            tol = 1e-6 if x.dtype == np.float32 else 1e-14
            np.testing.assert_allclose(dx, 2 * x * w, rtol=tol)
            np.testing.assert_allclose(dw, x * x, rtol=tol)
            # each gradient its own array, as the caller's to keep and change
            assert dx.flags.owndata and dw.flags.owndata and dx.flags.writeable
    g1 = pyzyme.grad(weighted_1d, argnums=(0, 1))
    for _ in range(2):
        for x, w in [(base[0], weights[0]), (base.ravel(), weights.ravel()),
                     (base[0].astype(np.float32), weights[0].astype(np.float32))]:
            dx, dw = g1(x, w)
            np.testing.assert_allclose(dx, 2 * x * w, rtol=1e-6)
            np.testing.assert_allclose(dw, x * x, rtol=1e-6)


@numba.njit
def shifted(x, w, v):
    for i in range(w.shape[0]):
        w[i] = 0.5 * v[i] + 1.0
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * w[i]
    return s


def test_a_derivative_writing_arrays_asks_whether_they_overlap_every_call():
    """f writes ``w``, read through ``v``: a call whose ``w`` and ``v`` overlap (a recurrence)
    after calls whose arrays do not, and the other way round, each get the gradient of what
    f computes for its own arguments."""
    n = 64     # long enough for LLVM to vectorize the copy loop where it may (noalias)
    x = np.linspace(1.0, 2.0, n)

    def arrays(overlap):
        buf = np.arange(n + 1.0)
        return (buf[1:], buf[:-1]) if overlap else (np.zeros(n), np.arange(float(n)))

    def expected(overlap):
        w, v = arrays(overlap)
        shifted.py_func(x.copy(), w, v)     # in Python, element by element
        return w

    g = pyzyme.grad(shifted)
    for _ in range(2):
        for overlap in (False, True, False):
            np.testing.assert_allclose(g(x, *arrays(overlap)), expected(overlap), rtol=1e-14)
