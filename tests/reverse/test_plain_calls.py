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
