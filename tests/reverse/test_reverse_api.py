"""The reverse-mode convenience and JAX-style layer of API.md: ``gradient(Reverse, ...)``,
``jacobian(Reverse, ...)``, ``grad``, ``value_and_grad``, ``vjp`` and ``jacrev``, checked against
central finite differences and against their forward-mode counterparts; and the functions
``grad`` / ``value_and_grad`` / ``jacrev`` return, called from inside ``@njit`` code."""

from __future__ import annotations

import collections
import math

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import (
    Forward,
    Reverse,
    ReverseWithPrimal,
    grad,
    gradient,
    jacfwd,
    jacobian,
    jacrev,
    value_and_grad,
    vjp,
)


# -- finite differences -----------------------------------------------------------------------
def fd_gradient(f, x, h=1e-6):
    """Central differences of the float ``f`` at the float array ``x``."""
    g = np.empty(x.size)
    for i in range(x.size):
        xp, xm = x.copy(), x.copy()
        xp.reshape(-1)[i] += h
        xm.reshape(-1)[i] -= h
        g[i] = (f(xp) - f(xm)) / (2 * h)
    return g.reshape(x.shape)


def fd_jacobian(f, x, h=1e-6):
    cols = []
    for i in range(x.size):
        xp, xm = x.copy(), x.copy()
        xp.reshape(-1)[i] += h
        xm.reshape(-1)[i] -= h
        cols.append((np.asarray(f(xp)) - np.asarray(f(xm))).reshape(-1) / (2 * h))
    y = np.asarray(f(x))
    return np.stack(cols, axis=1).reshape(y.shape + x.shape)     # JAX's out.shape + in.shape


FD = {"rtol": 1e-6, "atol": 1e-8}


# -- functions --------------------------------------------------------------------------------
@numba.njit
def energy(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * x[(i + 1) % x.shape[0]] + math.exp(0.1 * x[i]) * x[i] ** 2
    return s


@numba.njit
def field(x):
    out = np.empty(4)
    out[0] = x[0] * x[1]
    out[1] = math.exp(x[2]) - x[0]
    out[2] = x[0] + x[1] + x[2] ** 3
    out[3] = math.sin(x[1] * x[2])
    return out


@numba.njit
def grid(x):
    y = np.empty((2, 3))
    for i in range(2):
        for j in range(3):
            y[i, j] = x[i] * x[j] + math.cos(x[j]) * (i + 1)
    return y


@numba.njit
def loss(p, data):
    s = 0.0
    for i in range(data.shape[0]):
        r = p[0] * data[i] + p[1] - math.sin(data[i])
        s += r * r
    return s


@numba.njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


@numba.njit
def mixed(a, x, n, b):
    s = 0.0
    for i in range(n):
        s += a * x[i] * x[i] + b * math.cos(x[i]) * a
    return s


@numba.njit
def dot(a, b):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


Params = collections.namedtuple("Params", "w b n")


@numba.njit
def model(p, x):
    s = 0.0
    for i in range(x.shape[0]):
        r = p.w[i] * x[i] + p.b
        s += r * r * p.n
    return s


X4 = np.array([0.3, -1.2, 0.7, 2.1])
X3 = np.array([0.5, -0.8, 0.3])


# -- gradient(Reverse, ...) -------------------------------------------------------------------
def test_gradient_api_example():
    g = gradient(Reverse, lambda x: x[0] * x[1], np.array([2.0, 3.0]))
    assert isinstance(g, np.ndarray)
    np.testing.assert_array_equal(g, [3.0, 2.0])


def test_gradient_matches_finite_differences_and_forward():
    g = gradient(Reverse, energy, X4)
    np.testing.assert_allclose(g, fd_gradient(energy, X4), **FD)
    np.testing.assert_allclose(g, gradient(Forward, energy, X4), rtol=1e-14, atol=1e-15)
    assert g.shape == X4.shape and g is not X4


def test_gradient_with_primal():
    g, value = gradient(ReverseWithPrimal, energy, X4)
    np.testing.assert_allclose(g, gradient(Reverse, energy, X4), rtol=1e-15)
    assert value == pytest.approx(energy(X4), rel=1e-15)


def test_gradient_into_out_zeroes_it_first():
    dx = np.full(4, 123.0)
    got = gradient(Reverse, energy, X4, out=dx)
    assert got is dx
    np.testing.assert_allclose(dx, gradient(Reverse, energy, X4), rtol=1e-15)


def test_gradient_into_strided_out():
    buf = np.full(8, 5.0)
    out = buf[::2]
    gradient(Reverse, energy, X4, out=out)
    np.testing.assert_allclose(out, gradient(Reverse, energy, X4), rtol=1e-15)
    np.testing.assert_array_equal(buf[1::2], 5.0)


def test_gradient_of_a_strided_and_2d_input():
    x = np.linspace(-1.0, 1.0, 12)[::3]
    np.testing.assert_allclose(gradient(Reverse, energy, x), fd_gradient(energy, x), **FD)

    def f2(a):
        return a[0, 0] * a[1, 1] - a[0, 1] * a[1, 0] + math.exp(a[1, 0])

    a = np.array([[1.0, 2.0], [3.0, 4.0]]).T  # Fortran order
    g = gradient(Reverse, f2, a)
    np.testing.assert_allclose(g, [[a[1, 1], -a[1, 0]], [-a[0, 1] + math.exp(a[1, 0]), a[0, 0]]],
                               rtol=1e-15)


def test_gradient_of_a_float_and_an_int():
    assert gradient(Reverse, lambda x: x * x * x, 2.0) == pytest.approx(12.0)
    assert gradient(Reverse, lambda x: x * x * x, 2) == pytest.approx(12.0)
    assert gradient(Reverse, lambda x: math.sin(x), 0.3) == pytest.approx(math.cos(0.3))


def test_gradient_of_a_tuple_and_a_namedtuple():
    assert gradient(Reverse, lambda t: t[0] * t[1] ** 2, (2.0, 3.0)) == \
        pytest.approx((9.0, 12.0))
    p = Params(np.array([1.0, 2.0]), 0.5, 3)
    x = np.array([3.0, 4.0])
    g = gradient(Reverse, lambda q: model(q, x), p)
    assert isinstance(g, Params)
    r = p.w * x + p.b
    np.testing.assert_allclose(g.w, 2 * p.n * r * x, rtol=1e-15)
    assert g.b == pytest.approx(2 * p.n * r.sum())
    assert g.n == 3  # non-float fields keep their value


def test_gradient_errors():
    with pytest.raises(pyzyme.UnsupportedError, match="returning a float"):
        gradient(Reverse, field, X3)
    with pytest.raises(pyzyme.PyzymeError, match="shape"):
        gradient(Reverse, energy, X4, out=np.zeros(3))
    with pytest.raises(pyzyme.PyzymeError, match="out= needs an array"):
        gradient(Reverse, lambda x: x * x, 1.0, out=np.zeros(1))
    with pytest.raises(pyzyme.PyzymeError, match="chunk"):
        gradient(Reverse, energy, X4, chunk=2)
    with pytest.raises(pyzyme.PyzymeError, match="floating array"):
        gradient(Reverse, lambda x: x[0] * 1.0, np.array([1, 2]))


def test_user_exceptions_propagate():
    @numba.njit
    def picky(x):
        if x[0] < 0.0:
            raise ValueError("negative")
        return x[0] * x[1]

    with pytest.raises(ValueError, match="negative"):
        gradient(Reverse, picky, np.array([-1.0, 2.0]))


# -- jacobian(Reverse, ...) -------------------------------------------------------------------
def test_jacobian_api_example():
    f = lambda x: np.array([x[0] * x[1], x[1]])  # noqa: E731
    np.testing.assert_array_equal(jacobian(Reverse, f, np.array([2.0, 3.0])),
                                  [[3.0, 2.0], [0.0, 1.0]])


def test_jacobian_matches_forward_and_finite_differences():
    J = jacobian(Reverse, field, X3)
    assert J.shape == (4, 3)
    np.testing.assert_allclose(J, jacobian(Forward, field, X3), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(J, fd_jacobian(field, X3), **FD)
    # n_outs only skips the primal call that counts the rows: the same compiled sweeps.
    np.testing.assert_array_equal(jacobian(Reverse, field, X3, n_outs=4), J)


def test_jacobian_of_a_2d_result():
    J = jacobian(Reverse, grid, X3)
    assert J.shape == (2, 3, 3)
    np.testing.assert_allclose(J, jacobian(Forward, grid, X3), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(J, fd_jacobian(grid, X3), **FD)


@numba.njit
def square_map(x):
    return x * x + np.sin(x[::-1, ::-1])


JR_MAP, JF_MAP = jacrev(square_map), jacfwd(square_map)


@numba.njit
def call_jacobians(x):
    return JR_MAP(x), JF_MAP(x)


def test_jacobians_of_a_map_between_matrices_have_shape_out_plus_in():
    x = np.arange(1.0, 7.0).reshape(2, 3) / 7.0
    fd = fd_jacobian(square_map, x)
    assert fd.shape == (2, 3, 2, 3)
    got = [jacobian(Forward, square_map, x), jacobian(Reverse, square_map, x),
           jacfwd(square_map)(x), jacrev(square_map)(x), *call_jacobians(x)]
    for J in got:
        assert J.shape == (2, 3, 2, 3)
        np.testing.assert_allclose(J, fd, **FD)
    # J[i, j, k, l] = d y[i, j] / d x[k, l]: 2 x[i, j] on the diagonal, cos at the mirror
    assert got[0][1, 2, 1, 2] == pytest.approx(2 * x[1, 2], rel=1e-14)
    assert got[1][1, 2, 0, 0] == pytest.approx(math.cos(x[0, 0]), rel=1e-14)


def test_jacobians_of_a_float_function_have_the_input_shape():
    x = np.arange(1.0, 7.0).reshape(2, 3) / 7.0
    f = lambda x: np.sum(x ** 3)  # noqa: E731
    for J in (jacobian(Forward, f, x), jacobian(Reverse, f, x), jacfwd(f)(x), jacrev(f)(x)):
        assert J.shape == (2, 3)
        np.testing.assert_allclose(J, 3 * x * x, rtol=1e-14)


def test_jacobian_of_a_float_input_and_a_float_result():
    J = jacobian(Reverse, lambda s: np.array([s, s * s, math.sin(s)]), 3.0)
    np.testing.assert_allclose(J, [1.0, 6.0, math.cos(3.0)], rtol=1e-15)
    assert J.shape == (3,)
    J = jacobian(Reverse, energy, X4)
    assert J.shape == X4.shape
    np.testing.assert_allclose(J, gradient(Reverse, energy, X4), rtol=1e-15)


def test_jacobian_n_outs_too_large():
    with pytest.raises(IndexError, match="n_outs"):
        jacobian(Reverse, field, X3, n_outs=5)


# -- grad / value_and_grad --------------------------------------------------------------------
def test_grad_with_constant_arguments():
    data = np.linspace(0.0, 1.0, 7)
    p = np.array([0.4, -0.2])
    g = grad(loss)(p, data)
    np.testing.assert_allclose(g, fd_gradient(lambda q: loss(q, data), p), **FD)
    np.testing.assert_allclose(g, gradient(Forward, lambda q: loss(q, data), p), rtol=1e-14)


def test_grad_argnums():
    x = np.array([0.2, 0.9, -0.4])
    a, b, n = 1.7, 0.3, 3
    ga, gx, gb = grad(mixed, argnums=(0, 1, 3))(a, x, n, b)
    assert ga == pytest.approx((mixed(a + 1e-6, x, n, b) - mixed(a - 1e-6, x, n, b)) / 2e-6,
                               rel=1e-6)
    np.testing.assert_allclose(gx, fd_gradient(lambda y: mixed(a, y, n, b), x), **FD)
    assert gb == pytest.approx(a * np.cos(x).sum(), rel=1e-14)
    assert grad(mixed, argnums=-1)(a, x, n, b) == pytest.approx(gb, rel=1e-15)
    # Another set of active arguments is another derivative, whose adjoint sums LLVM may
    # order differently (Options.reassociate_adjoints): equal to rounding.
    np.testing.assert_allclose(grad(mixed, argnums=1)(a, x, n, b), gx, rtol=1e-14)
    assert grad(lambda x, y: x * y * y, argnums=(0, 1))(2.0, 3.0) == (9.0, 12.0)
    assert grad(lambda x, y: x * y * y, argnums=1)(2, 3) == 12.0  # ints become floats


def test_grad_of_containers():
    p = Params(np.array([1.0, 2.0]), 0.5, 3)
    x = np.array([3.0, 4.0])
    gp = grad(model)(p, x)
    assert isinstance(gp, Params) and gp.n == 3
    np.testing.assert_allclose(gp.w, gradient(Reverse, lambda q: model(q, x), p).w)
    assert grad(lambda v: v[0] * v[1] + v[2][0])([2.0, 3.0, np.array([5.0])])[:2] == [3.0, 2.0]
    gd = grad(lambda d: d["a"] * d["b"][1])({"a": 2.0, "b": np.array([0.5, 3.0])})
    assert list(gd) == ["a", "b"] and gd["a"] == 3.0
    np.testing.assert_array_equal(gd["b"], [0.0, 2.0])
    with pytest.raises(pyzyme.UnsupportedError, match="dict with the key 1"):
        grad(lambda d: d[1])({1: 1.0})


def test_grad_errors():
    with pytest.raises(pyzyme.UnsupportedError, match="returning a float"):
        grad(field)(X3)
    with pytest.raises(pyzyme.PyzymeError, match="argnums"):
        grad(loss, argnums=2)(X3, X3)
    with pytest.raises(pyzyme.PyzymeError, match="argnums"):
        grad(loss, argnums=(0, 0))
    with pytest.raises(pyzyme.PyzymeError, match="argnums"):
        grad(loss, argnums="p")


def test_value_and_grad():
    data = np.linspace(0.0, 1.0, 7)
    p = np.array([0.4, -0.2])
    value, g = value_and_grad(loss)(p, data)
    assert value == pytest.approx(loss(p, data), rel=1e-15)
    # ReverseWithPrimal and Reverse are two derivatives, whose adjoint sums LLVM may order
    # differently (Options.reassociate_adjoints): equal to rounding.
    np.testing.assert_allclose(g, grad(loss)(p, data), rtol=1e-14)
    value, (gp, gd) = value_and_grad(loss, argnums=(0, 1))(p, data)
    np.testing.assert_allclose(gd, fd_gradient(lambda d: loss(p, d), data), **FD)


def test_value_and_grad_drives_scipy_minimize():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    x0 = np.array([1.3, 0.7, 0.8, 1.9, 1.2])
    np.testing.assert_allclose(value_and_grad(rosenbrock)(x0)[1], scipy_optimize.rosen_der(x0),
                               rtol=1e-13)
    res = scipy_optimize.minimize(value_and_grad(rosenbrock), x0, jac=True, method="BFGS",
                                  options={"gtol": 1e-8})
    assert res.success
    np.testing.assert_allclose(res.x, np.ones(5), rtol=1e-6)


# -- vjp ---------------------------------------------------------------------------------------
def test_vjp_of_a_float_function_scales_by_the_cotangent():
    data = np.linspace(0.0, 1.0, 5)
    p = np.array([0.4, -0.2])
    value, vjp_fn = vjp(loss, p, data)
    assert value == pytest.approx(loss(p, data))
    gp, gd = vjp_fn(2.5)
    np.testing.assert_allclose(gp, 2.5 * grad(loss)(p, data), rtol=1e-15)
    np.testing.assert_allclose(gd, 2.5 * grad(loss, argnums=1)(p, data), rtol=1e-15)
    value, vjp_fn = vjp(lambda x, y: x * y, 2.0, 3.0)
    assert value == 6.0 and vjp_fn(1.5) == (4.5, 3.0)


def test_vjp_of_an_array_function_matches_the_forward_jacobian():
    value, vjp_fn = vjp(field, X3)
    np.testing.assert_array_equal(value, field(X3))
    w = np.array([0.5, -1.0, 2.0, 0.25])
    (ct,) = vjp_fn(w)
    np.testing.assert_allclose(ct, w @ jacobian(Forward, field, X3), rtol=1e-14, atol=1e-15)
    value, vjp_fn = vjp(grid, X3)
    w2 = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(vjp_fn(w2)[0], np.tensordot(w2, jacobian(Forward, grid, X3)),
                               rtol=1e-14)
    with pytest.raises(pyzyme.PyzymeError, match="shape"):
        vjp_fn(np.ones(6))


def test_vjp_gives_none_for_integer_inputs():
    x = np.array([0.2, 0.9, -0.4])
    _, vjp_fn = vjp(mixed, 1.7, x, 3, 0.3)
    ga, gx, gn, gb = vjp_fn(1.0)
    assert gn is None
    # another set of active arguments, another derivative: equal to rounding
    np.testing.assert_allclose((ga, gb), grad(mixed, argnums=(0, 3))(1.7, x, 3, 0.3),
                               rtol=1e-14)
    np.testing.assert_allclose(gx, grad(mixed, argnums=1)(1.7, x, 3, 0.3), rtol=1e-14)


# -- jacrev ------------------------------------------------------------------------------------
def test_jacrev_matches_jacfwd():
    np.testing.assert_allclose(jacrev(field)(X3), jacfwd(field)(X3), rtol=1e-14, atol=1e-15)
    J = jacrev(lambda x, y: x * y * y, argnums=1)(2.0, 3.0)
    assert J.shape == () and J == pytest.approx(12.0)
    with pytest.raises(pyzyme.PyzymeError, match="one positional argument"):
        jacrev(field, argnums=(0,))


# -- inside @njit code -------------------------------------------------------------------------
G = grad(loss)


@numba.njit
def descend(p, data, lr, steps):
    for _ in range(steps):
        p = p - lr * G(p, data)
    return p


def test_grad_inside_njit_gradient_descent():
    data = np.linspace(0.0, 1.0, 20)
    p0 = np.zeros(2)
    in_njit = descend(p0, data, 0.02, 300)
    in_python = descend.py_func(p0, data, 0.02, 300)
    np.testing.assert_allclose(in_njit, in_python, rtol=1e-13)
    assert loss(in_njit, data) < 0.01 * loss(p0, data)
    # The least-squares fit of sin(d) by a line, solved directly.
    best = np.linalg.lstsq(np.stack([data, np.ones_like(data)], axis=1), np.sin(data),
                           rcond=None)[0]
    np.testing.assert_allclose(descend(p0, data, 0.02, 20000), best, rtol=1e-8)


VG = value_and_grad(loss)
GMIXED = grad(mixed, argnums=(0, 1, 3))
JR = jacrev(field)
GDOT = grad(dot, argnums=(0, 1))


@numba.njit
def call_value_and_grad(p, data):
    return VG(p, data)


@numba.njit
def call_mixed(a, x, n, b):
    return GMIXED(a, x, n, b)


@numba.njit
def call_jacrev(x):
    return JR(x)


@numba.njit
def polar(x):
    return x[0] * math.cos(x[1]), x[0] * math.sin(x[1])


@numba.njit
def polar_of_row(x):
    return polar(x[0])


JR_POLAR, JR_POLAR_ROW = jacrev(polar), jacrev(polar_of_row)


@numba.njit
def call_jacrev_polar(x):
    return JR_POLAR(x)


@numba.njit
def call_jacrev_polar_row(x):
    return JR_POLAR_ROW(x)


@numba.njit
def call_dot_aliased(a):
    return GDOT(a, a)


@numba.njit
def call_passed(fn, p, data):
    return fn(p, data)


def test_value_and_grad_inside_njit():
    data = np.linspace(0.0, 1.0, 7)
    p = np.array([0.4, -0.2])
    value, g = call_value_and_grad(p, data)
    assert value == loss(p, data)  # the primal's own operations, in order: bitwise anywhere
    # Linked into the caller, the derivative is optimized again there (its adjoint sums
    # reassociated, vectorized for the CPU's widths): equal to rounding, not bitwise.
    np.testing.assert_allclose(g, VG(p, data)[1], rtol=1e-14)


def test_argnums_and_integer_arguments_inside_njit():
    x = np.array([0.2, 0.9, -0.4])
    got = call_mixed(1.7, x, 3, 0.3)
    want = GMIXED(1.7, x, 3, 0.3)
    # inlined into call_mixed and optimized there: equal to rounding (on AVX2 CPUs got[1]
    # differed from want[1] in the last bit)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-14)
    assert call_mixed(2, x, 3, 0.3)[0] == pytest.approx(GMIXED(2.0, x, 3, 0.3)[0])


def test_jacrev_inside_njit():
    np.testing.assert_allclose(call_jacrev(X3), jacfwd(field)(X3), rtol=1e-14, atol=1e-15)


def test_jacrev_of_a_pair_inside_njit():
    r, t = 2.0, 0.3
    want = [[math.cos(t), -r * math.sin(t)], [math.sin(t), r * math.cos(t)]]
    np.testing.assert_allclose(call_jacrev_polar(np.array([r, t])), want, rtol=1e-14)
    # A 1-D argument's rows are the Jacobian's as they are: no run-time reshape (a call, and
    # a count pair on the view) around each sweep of a small derivative
    text = call_jacrev_polar.inspect_llvm(call_jacrev_polar.signatures[0])
    assert "numba_attempt_nocopy_reshape" not in text
    # A 2-D argument's are reshaped to the argument's shape
    J = call_jacrev_polar_row(np.array([[r, t]]))
    np.testing.assert_allclose(J, np.reshape(want, (2, 1, 2)), rtol=1e-14)


def test_aliased_arrays_inside_njit():
    a = np.array([1.0, 2.0, -3.0])
    ga, gb = call_dot_aliased(a)
    # each entry is one product with the seed 1.0: exact, however it is compiled
    np.testing.assert_array_equal(ga, a)
    np.testing.assert_array_equal(gb, a)
    b = np.array([4.0, 5.0, 6.0])
    ga, gb = numba.njit(lambda a, b: GDOT(a, b))(a, b)
    np.testing.assert_array_equal(ga, b)
    np.testing.assert_array_equal(gb, a)


@numba.njit
def scale_into(a, b):
    for i in range(a.shape[0]):
        b[i] = 2.0 * a[i]
    return dot(a, b)


def test_njit_grad_compiles_the_overlap_version_only_for_written_arrays():
    # dot only reads its arrays: the noalias derivative serves overlapping ones too (LLVM's
    # noalias is about memory written through one pointer and read through another).
    from pyzyme.api.njit.reverse import _plans
    vec = numba.float64[::1]
    _, general, checked = _plans(dot, [vec, vec], ["duplicated", "duplicated"])
    assert general is None and checked == []
    _, general, checked = _plans(scale_into, [vec, vec], ["duplicated", "duplicated"])
    assert general is not None and checked == [0, 1]


def test_grad_passed_as_an_argument_to_njit():
    data = np.linspace(0.0, 1.0, 7)
    p = np.array([0.4, -0.2])
    np.testing.assert_allclose(call_passed(G, p, data), G(p, data), rtol=1e-14)


def test_non_contiguous_array_inside_njit_is_a_clear_error():
    with pytest.raises(Exception, match="C-contiguous"):
        call_passed(G, np.arange(4.0)[::2], np.linspace(0.0, 1.0, 7))


def test_non_numeric_argument_is_an_error_not_a_zero_gradient():
    with pytest.raises(pyzyme.UnsupportedError, match="argument 's' .position 0. is a str"):
        grad(lambda s: 1.0)("x")


def test_gradient_of_several_arguments():
    """API.md: gradient(Reverse, f, x, y, ...) gives one derivative per argument, each in its
    argument's structure; forward mode one tuple of partials per argument."""
    def f(a, b, c):
        return a[0] * b ** 2 + np.sum(a * c)

    a, b, c = np.array([2.0, 1.0]), 3.0, np.array([0.5, -1.0])
    da, db, dc = pyzyme.gradient(pyzyme.Reverse, f, a, b, c)
    np.testing.assert_allclose(da, [b ** 2 + c[0], c[1]])
    assert db == pytest.approx(2 * a[0] * b)
    np.testing.assert_allclose(dc, a)
    grads, value = pyzyme.gradient(pyzyme.ReverseWithPrimal, f, a, b, c)
    assert value == pytest.approx(f(a, b, c))
    np.testing.assert_allclose(grads[0], da)
    fa, fb, fc = pyzyme.gradient(pyzyme.Forward, f, a, b, c)
    np.testing.assert_allclose(fa, da)
    assert fb == pytest.approx((db,))
    np.testing.assert_allclose(fc, dc)


# -- jacrev inside @njit for each kind of result and argument ---------------------------------
@numba.njit
def plane_energy(x):
    return np.sum(x * x) * x[0, 1] + math.sin(x[1, 0])


@numba.njit
def pair(x):
    return x[0] * x[1], math.exp(x[2]) - x[0]


@numba.njit
def outer_grid(x):
    out = np.empty((2, 3))
    for i in range(2):
        for j in range(3):
            out[i, j] = x[i] * x[j] + j
    return out


@numba.njit
def scalar_pair(t):
    return t * t, math.sin(t)


@numba.njit
def scalar_energy(t):
    return t ** 3


@numba.njit
def scalar_grid(t):
    out = np.empty((2, 2))
    for i in range(2):
        for j in range(2):
            out[i, j] = t ** (i + j)
    return out


def _fd_jacobian(f, x, h=1e-6):
    """Central differences: an array of shape ``f(x).shape + x.shape`` (a tuple result as an
    array)."""
    x = np.asarray(x, dtype=np.float64)
    cols = []
    for i in range(x.size):
        xp, xm = x.copy(), x.copy()
        xp.reshape(-1)[i] += h
        xm.reshape(-1)[i] -= h
        args = (xp, xm) if x.ndim else (float(xp), float(xm))
        cols.append((np.asarray(f(args[0])) - np.asarray(f(args[1]))) / (2 * h))
    out = np.stack(cols, axis=-1)
    return out.reshape(out.shape[:-1] + x.shape)


@pytest.mark.parametrize("f,x", [
    (plane_energy, np.array([[0.5, -0.8, 0.3], [0.2, 0.9, -0.4]])),
    (pair, X3), (outer_grid, X3),
    (scalar_pair, 0.7), (scalar_energy, 0.7), (scalar_grid, 0.7)])
def test_jacrev_inside_njit_of_each_result_kind(f, x):
    """A float, a tuple of floats, a 2-D array, of an array or a float: JAX's shape (the
    result's, then the argument's), the values of finite differences."""
    J = jacrev(f)
    got = numba.njit(lambda x: J(x))(x)
    want = _fd_jacobian(f, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)
