"""What users of JAX and Enzyme.jl expect: ``grad`` / ``value_and_grad`` with ``has_aux`` and
keyword arguments, ``gradient`` of several arguments, argument errors that are ``TypeError`` /
``ValueError`` and name the argument, ``stop_gradient``; each checked against finite
differences or the other mode."""

import math

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Forward, Reverse, grad, gradient, value_and_grad


def fd_grad(f, x, h=1e-6):
    x = np.asarray(x, dtype=float)
    g = np.empty(x.shape)
    for i in range(x.size):
        up, down = x.copy(), x.copy()
        up.reshape(-1)[i] += h
        down.reshape(-1)[i] -= h
        g.reshape(-1)[i] = (f(up) - f(down)) / (2 * h)
    return g


FD = {"rtol": 1e-6, "atol": 1e-9}
X = np.array([0.3, -1.2, 2.0])


# -- has_aux and keyword arguments --------------------------------------------------------------
@numba.njit
def loss_with_aux(x, scale):
    r = np.sin(x) * scale
    return np.sum(r * r), r


G_AUX = grad(loss_with_aux, has_aux=True)
VG_AUX = value_and_grad(loss_with_aux, has_aux=True)


@numba.njit
def call_aux(x, scale):
    return G_AUX(x, scale), VG_AUX(x, scale)


def test_grad_has_aux_gives_the_loss_gradient_and_the_aux():
    g, aux = G_AUX(X, 1.5)
    np.testing.assert_allclose(g, fd_grad(lambda v: loss_with_aux(v, 1.5)[0], X), **FD)
    np.testing.assert_array_equal(aux, np.sin(X) * 1.5)
    (value, aux2), g2 = VG_AUX(X, 1.5)
    assert value == loss_with_aux(X, 1.5)[0]
    np.testing.assert_array_equal(aux2, aux)
    np.testing.assert_array_equal(g2, g)
    # the derivative of the loss alone, written out: 2 sum(r dr) with r = 1.5 sin x
    np.testing.assert_allclose(g, 2 * 1.5 ** 2 * np.sin(X) * np.cos(X), rtol=1e-14)


def test_has_aux_inside_njit():
    (g, aux), ((value, aux2), g2) = call_aux(X, 1.5)
    want_g, want_aux = G_AUX(X, 1.5)
    np.testing.assert_allclose(g, want_g, rtol=1e-14)
    np.testing.assert_allclose(g2, want_g, rtol=1e-14)
    np.testing.assert_array_equal(aux, want_aux)
    np.testing.assert_array_equal(aux2, want_aux)
    assert value == pytest.approx(loss_with_aux(X, 1.5)[0], rel=1e-15)


def test_has_aux_refuses_a_function_without_aux():
    with pytest.raises(pyzyme.PyzymeError, match=r"\(loss, aux\)"):
        grad(lambda x: np.sum(x * x), has_aux=True)(X)
    with pytest.raises(pyzyme.PyzymeError, match="has_aux"):
        grad(lambda x: x, has_aux=1)


def test_keyword_arguments_are_passed_through_as_constants():
    def f(x, scale=2.0, shift=0.0):
        return scale * np.sum((x - shift) ** 2)
    g = grad(f)
    np.testing.assert_allclose(g(X, shift=0.5), 2 * 2.0 * (X - 0.5), rtol=1e-14)
    np.testing.assert_allclose(g(X, scale=3.0), fd_grad(lambda v: f(v, 3.0), X), **FD)
    np.testing.assert_allclose(g(X), 4.0 * X, rtol=1e-14)            # defaults
    value, gx = value_and_grad(f)(X, shift=1.0, scale=0.5)
    assert value == pytest.approx(f(X, 0.5, 1.0), rel=1e-15)
    np.testing.assert_allclose(gx, X - 1.0, rtol=1e-14)


def test_a_differentiated_argument_passed_by_keyword_is_a_type_error():
    with pytest.raises(TypeError, match=r"argument 'y' \(position 1\).*by position") as err:
        grad(lambda x, y: x * y, argnums=1)(2.0, y=3.0)
    assert isinstance(err.value, pyzyme.PyzymeError)
    with pytest.raises(TypeError, match="unexpected keyword"):
        grad(lambda x: x * x)(2.0, z=1.0)


# -- argument errors: TypeError / ValueError, naming the argument ------------------------------
def scaled_first(x, y):
    return x[0] * y


@pytest.mark.parametrize("call, kind, message", [
    (lambda: pyzyme.autodiff(Forward, scaled_first, pyzyme.Duplicated(np.ones(2), np.ones(3)),
                             pyzyme.Const(2.0)),
     ValueError, r"the shadow of argument 'x' \(position 0\) has shape \(3,\)"),
    (lambda: pyzyme.autodiff(Reverse, scaled_first, pyzyme.Duplicated(np.ones(2), np.ones(3)),
                             pyzyme.Active(2.0)),
     ValueError, r"the shadow of argument 'x' \(position 0\) has shape \(3,\)"),
    (lambda: pyzyme.autodiff(Forward, scaled_first, pyzyme.Const(np.ones(2)),
                             pyzyme.Duplicated(2.0, "one")),
     TypeError, r"the shadow of argument 'y' \(position 1\) must be a float"),
    (lambda: pyzyme.autodiff(Forward, scaled_first, pyzyme.BatchDuplicated(
        np.ones(2), (np.ones(2), np.ones(2, np.float32))), pyzyme.Const(2.0)),
     ValueError, r"shadow 1 of argument 'x' \(position 0\) has shape \(2,\) and dtype float32"),
    (lambda: grad(scaled_first)(np.arange(2), 3.0),
     TypeError, r"argument 'x' \(position 0\) is an array of int64"),
    (lambda: grad(scaled_first, argnums=2)(np.ones(2), 3.0), ValueError, "argnums=2"),
    (lambda: grad(scaled_first, argnums="x"), TypeError, "argnums must be an int"),
    (lambda: gradient(Reverse, lambda x: x[0], np.ones(2), out=np.zeros(3)),
     ValueError, r"out must be an array of shape \(2,\)"),
    (lambda: gradient(Forward, lambda x: x[0], np.ones(2), out=np.zeros(2)),
     TypeError, "out= is for reverse mode"),
    (lambda: pyzyme.autodiff(Forward, lambda t: t[0][0] * t[1], pyzyme.Duplicated(
        (np.ones(2), 2.0), (np.zeros(2),))),
     TypeError, r"the shadow of argument 't' \(position 0\) must be a tuple of 2 items"),
    (lambda: pyzyme.vjp(lambda x: x * x, np.ones(3))[1](np.ones(2)),
     ValueError, r"the cotangent has shape \(2,\)"),
    (lambda: pyzyme.jvp(lambda x, y: x * y, (1.0, 2.0), (1.0,)),
     ValueError, "one tangent per primal"),
    (lambda: pyzyme.hvp(lambda x: np.sum(x ** 3), np.ones(3), np.ones(2)),
     ValueError, r"v has shape \(2,\)"),
], ids=["forward shape", "reverse shape", "float shadow", "batch lane", "int array",
        "argnums range", "argnums type", "out shape", "out forward", "tuple shadow",
        "vjp cotangent", "jvp tangents", "hvp direction"])
def test_argument_errors_are_type_or_value_errors_naming_the_argument(call, kind, message):
    with pytest.raises(kind, match=message) as info:
        call()
    assert isinstance(info.value, pyzyme.PyzymeError)


# -- stop_gradient --------------------------------------------------------------------------------
@numba.njit
def held_scale(x):
    return x * pyzyme.stop_gradient(x) * math.sin(x)


@numba.njit
def normalized(w):
    return np.sum(w * w * np.cos(w)) / pyzyme.stop_gradient(np.sum(np.abs(w)))


@numba.njit
def self_weighted(w):
    c = pyzyme.stop_gradient(w)
    c[0] = 10.0       # the copy is the caller's to write: w keeps its value
    return np.sum(w * c)


G_NORMALIZED = grad(normalized)


@numba.njit
def call_normalized(w):
    return G_NORMALIZED(w)


def test_stop_gradient_of_a_scalar_in_both_modes():
    x = 0.7
    # the stopped value held fixed at c = x: d/dx (x c sin x) = c (sin x + x cos x)
    fd = fd_grad(lambda v: v[()] * x * math.sin(v[()]), np.array(x))
    want = x * (math.sin(x) + x * math.cos(x))
    assert want == pytest.approx(float(fd), rel=1e-7)
    reverse = pyzyme.autodiff(Reverse, held_scale, pyzyme.Active(x))[0][0]
    forward = pyzyme.autodiff(Forward, held_scale, pyzyme.Duplicated(x, 1.0))[1]
    assert reverse == pytest.approx(want, rel=1e-14)
    assert forward == pytest.approx(want, rel=1e-14)
    # and the plain derivative differs (what stop_gradient stops is real)
    assert grad(lambda v: v * v * math.sin(v))(x) != pytest.approx(want, rel=1e-3)


def test_stop_gradient_of_an_array_in_both_modes_and_inside_njit():
    w = np.array([0.5, -1.5, 2.0, 0.25, -0.75])
    scale = np.sum(np.abs(w))
    fd = fd_grad(lambda v: np.sum(v * v * np.cos(v)) / scale, w)
    reverse = gradient(Reverse, normalized, w)
    np.testing.assert_allclose(reverse, fd, **FD)
    np.testing.assert_allclose(gradient(Forward, normalized, w), reverse, rtol=1e-13)
    np.testing.assert_allclose(call_normalized(w), reverse, rtol=1e-13)
    # forward mode with several tangents at once (jacfwd sweeps 4 lanes per call)
    np.testing.assert_allclose(pyzyme.jacfwd(normalized)(w), reverse, rtol=1e-13)


def test_stop_gradient_result_is_a_writable_copy():
    w = np.array([1.0, -3.0, 2.0])
    c = w.copy()
    c[0] = 10.0
    np.testing.assert_allclose(gradient(Reverse, self_weighted, w), c, rtol=1e-15)
    np.testing.assert_allclose(gradient(Forward, self_weighted, w), c, rtol=1e-15)
    assert self_weighted(w) == pytest.approx(np.sum(w * c))
    y = pyzyme.stop_gradient(w)
    assert y is not w
    np.testing.assert_array_equal(y, w)
    assert pyzyme.stop_gradient(2.5) == 2.5


def test_stop_gradient_of_a_complex_array():
    # d/dRe + i d/dIm of sum(Re(a c)) with c = a held fixed: conj(c)
    a = np.array([1.0 + 2.0j, 0.5 - 1.0j])
    f = lambda a: np.sum((a * pyzyme.stop_gradient(a)).real)    # noqa: E731
    np.testing.assert_allclose(gradient(Reverse, f, a), np.conj(a), rtol=1e-15)
    np.testing.assert_allclose(gradient(Forward, f, a), np.conj(a), rtol=1e-15)
    with pytest.raises(pyzyme.PyzymeError, match="cannot compile"):
        grad(lambda z: (z * pyzyme.stop_gradient(z)).real)(1.0 + 2.0j)


def test_has_aux_with_argnums_out_of_order_on_repeated_calls():
    # from the second call on, the plain-argument fast path answers: the order must hold
    def f(a, b, k):
        return np.sum(a * b * b) * k, a[0]
    a, b = np.array([0.5, -1.0]), np.array([2.0, 3.0])
    g = grad(f, argnums=(1, 0), has_aux=True)
    for _ in range(3):
        (gb, ga), aux = g(a, b, 1.5)
        np.testing.assert_allclose(gb, fd_grad(lambda v: f(a, v, 1.5)[0], b), **FD)
        np.testing.assert_allclose(ga, fd_grad(lambda v: f(v, b, 1.5)[0], a), **FD)
        assert aux == a[0]


@numba.njit
def _scaled_cubes(x, c, n):
    s = 0.0
    for _ in range(n):
        s += c * np.sum(x ** 3)
    return s


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_gradient_of_several_arguments_holds_const_ones_constant(mode):
    """As Enzyme.jl's gradient(Reverse, f, x, Const(y)): the Const argument is passed as it
    is and its entry is None; the others are differentiated (a bare int carries no
    derivative either)."""
    x = np.array([1.0, 2.0])
    dx, dc, dn = gradient(mode, _scaled_cubes, x, pyzyme.Const(0.5), pyzyme.Const(3))
    assert dc is None and dn is None
    np.testing.assert_allclose(np.asarray(dx), 1.5 * 3.0 * x ** 2, rtol=1e-12)
    both = gradient(mode, _scaled_cubes, x, 0.5, pyzyme.Const(3))
    assert both[1] == pytest.approx(3.0 * np.sum(x ** 3)) and both[2] is None
    with pytest.raises(ValueError, match="every argument is Const"):
        gradient(mode, _scaled_cubes, pyzyme.Const(x), pyzyme.Const(0.5), pyzyme.Const(3))
