"""``pyzyme.jax.wrap``: Numba kernels inside JAX under every transformation (issue #25).

Five kernels (a scalar loss with loops and an integer argument, an array map with a time loop
and a parameter, two arrays and a scalar, a temporary allocated inside, a tuple result), each
with a pure-JAX re-implementation. Every entry point (call, ``jit``, ``grad``, ``vjp``,
``jvp``, ``jacfwd``, ``jacrev``, ``hessian``, ``vmap``, ``jit(grad(...))`` composed with JAX
operations) is compared with the re-implementation, and first derivatives also with central
finite differences of the wrapped kernel itself.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="pyzyme.jax needs JAX: pip install pyzyme[jax]")
jnp = jax.numpy

import pyzyme.jax  # noqa: E402
from pyzyme import UnsupportedError  # noqa: E402

RTOL, ATOL = 1e-7, 1e-9

# Float64 throughout (finite differences need it, and the cases below are made at import);
# JAX's setting is restored when the module's tests are done.
_X64 = jax.config.jax_enable_x64
jax.config.update("jax_enable_x64", True)


@pytest.fixture(autouse=True, scope="module")
def float64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", _X64)


# -- the kernels and their JAX twins -------------------------------------------------------

@numba.njit
def loss_with_loops(x, p, n):
    s = 0.0
    for k in range(n):
        for i in range(x.shape[0]):
            s += np.sin(x[i] * p) / (k + 1) + x[i] ** 2 * 0.1
    return s


def loss_with_loops_jax(x, p, n):
    return sum(jnp.sum(jnp.sin(x * p)) / (k + 1) + 0.1 * jnp.sum(x ** 2) for k in range(n))


@numba.njit
def diffusion(u, kappa):
    n = u.shape[0]
    u = u.copy()
    for _ in range(4):
        v = u.copy()
        for i in range(1, n - 1):
            v[i] = u[i] + kappa * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + 0.1 * u[i] ** 2
        u = v
    return u


def diffusion_jax(u, kappa):
    for _ in range(4):
        lap = jnp.zeros_like(u).at[1:-1].set(u[:-2] - 2.0 * u[1:-1] + u[2:])
        inner = jnp.zeros_like(u).at[1:-1].set(0.1 * u[1:-1] ** 2)
        u = u + kappa * lap + inner
    return u


@numba.njit
def two_arrays(a, b, c):
    out = np.empty(a.shape)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i, j] = a[i, j] * np.tanh(b[j]) * c + b[j] ** 2
    return out


def two_arrays_jax(a, b, c):
    return a * jnp.tanh(b)[None, :] * c + (b ** 2)[None, :]


@numba.njit
def with_temporary(x):
    t = np.empty(x.shape[0] - 1)
    for i in range(t.shape[0]):
        t[i] = x[i + 1] * x[i]
    s = 0.0
    for i in range(t.shape[0]):
        s += np.exp(-t[i]) * t[i]
    return s


def with_temporary_jax(x):
    t = x[1:] * x[:-1]
    return jnp.sum(jnp.exp(-t) * t)


@numba.njit
def pair(x, s):
    return np.sum(x ** 3) * s, x * s + np.cos(x)


def pair_jax(x, s):
    return jnp.sum(x ** 3) * s, x * s + jnp.cos(x)


def f64(shape=()):
    return jax.ShapeDtypeStruct(shape, jnp.float64)


@dataclass
class Case:
    name: str
    kernel: Any
    reference: Any
    args: tuple
    result: Any
    argnums: tuple        # the float arguments differentiated
    wrapped: Any = None

    def __post_init__(self):
        self.wrapped = pyzyme.jax.wrap(self.kernel, self.result)


rng = np.random.default_rng(0)
CASES = [
    Case("loss_with_loops", loss_with_loops, loss_with_loops_jax,
         (jnp.asarray(rng.uniform(-1, 1, 4)), jnp.float64(0.7), 3), f64(), (0, 1)),
    Case("diffusion", diffusion, diffusion_jax,
         (jnp.asarray(rng.uniform(0, 1, 6)), jnp.float64(0.2)),
         lambda u, k: jax.ShapeDtypeStruct(u.shape, u.dtype), (0, 1)),
    Case("two_arrays", two_arrays, two_arrays_jax,
         (jnp.asarray(rng.uniform(-1, 1, (2, 3))), jnp.asarray(rng.uniform(-1, 1, 3)),
          jnp.float64(1.3)), f64((2, 3)), (0, 1, 2)),
    Case("with_temporary", with_temporary, with_temporary_jax,
         (jnp.asarray(rng.uniform(0, 1, 5)),), f64(), (0,)),
    Case("pair", pair, pair_jax, (jnp.asarray(rng.uniform(-1, 1, 3)), jnp.float64(0.9)),
         (f64(), f64((3,))), (0, 1)),
]
IDS = [c.name for c in CASES]


def close(actual, expected, rtol=RTOL, atol=ATOL):
    flat_a, tree_a = jax.tree_util.tree_flatten(actual)
    flat_e, tree_e = jax.tree_util.tree_flatten(expected)
    assert tree_a == tree_e
    for a, e in zip(flat_a, flat_e):
        assert np.shape(a) == np.shape(e)
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol)


def scalarized(case: Case, weights):
    """``sum(w * result)`` over the leaves of the result: a float function of the
    differentiated arguments (the others fixed)."""
    def loss(fn):
        def scalar(*diff):
            args = list(case.args)
            for i, d in zip(case.argnums, diff):
                args[i] = d
            leaves = jax.tree_util.tree_leaves(fn(*args))
            return sum(jnp.sum(w * y) for w, y in zip(weights, leaves))
        return scalar
    return loss


def weights_for(case: Case):
    leaves = jax.tree_util.tree_leaves(case.result if not callable(case.result)
                                       else case.result(*case.args))
    return [jnp.asarray(rng.uniform(0.5, 1.5, leaf.shape)) for leaf in leaves]


def finite_differences(fn, args, h=1e-6):
    """The gradient of the float ``fn`` at ``args`` by central differences, one per arg."""
    grads = []
    for k, a in enumerate(args):
        a = np.asarray(a, np.float64)
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            up, down = a.copy(), a.copy()
            up[idx] += h
            down[idx] -= h
            hi = fn(*args[:k], jnp.asarray(up), *args[k + 1:])
            lo = fn(*args[:k], jnp.asarray(down), *args[k + 1:])
            g[idx] = (float(hi) - float(lo)) / (2 * h)
        grads.append(g)
    return tuple(grads)


def diff_args(case: Case):
    return tuple(case.args[i] for i in case.argnums)


# -- every entry point on every kernel ------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_call_and_jit_match_jax(case):
    close(case.wrapped(*case.args), case.reference(*case.args))
    static = tuple(i for i, a in enumerate(case.args) if isinstance(a, int))
    close(jax.jit(case.wrapped, static_argnums=static)(*case.args),
          case.reference(*case.args))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_grad_matches_jax_and_finite_differences(case):
    loss = scalarized(case, weights_for(case))
    argnums = tuple(range(len(case.argnums)))
    got = jax.grad(loss(case.wrapped), argnums=argnums)(*diff_args(case))
    close(got, jax.grad(loss(case.reference), argnums=argnums)(*diff_args(case)))
    fd = finite_differences(loss(case.wrapped), diff_args(case))
    close(got, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vjp_matches_jax(case):
    def fix(fn):
        def f(*diff):
            args = list(case.args)
            for i, d in zip(case.argnums, diff):
                args[i] = d
            return fn(*args)
        return f
    out, pullback = jax.vjp(fix(case.wrapped), *diff_args(case))
    ref_out, ref_pullback = jax.vjp(fix(case.reference), *diff_args(case))
    close(out, ref_out)
    cotangent = jax.tree_util.tree_map(lambda y: jnp.asarray(rng.normal(size=y.shape)), out)
    close(pullback(cotangent), ref_pullback(cotangent))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jvp_matches_jax_and_finite_differences(case):
    def fix(fn):
        def f(*diff):
            args = list(case.args)
            for i, d in zip(case.argnums, diff):
                args[i] = d
            return fn(*args)
        return f
    primals = diff_args(case)
    tangents = tuple(jnp.asarray(rng.normal(size=np.shape(p))) for p in primals)
    out, tangent_out = jax.jvp(fix(case.wrapped), primals, tangents)
    ref_out, ref_tangent = jax.jvp(fix(case.reference), primals, tangents)
    close(out, ref_out)
    close(tangent_out, ref_tangent)
    h = 1e-6
    up = fix(case.wrapped)(*[p + h * t for p, t in zip(primals, tangents)])
    down = fix(case.wrapped)(*[p - h * t for p, t in zip(primals, tangents)])
    fd = jax.tree_util.tree_map(lambda u, d: (u - d) / (2 * h), up, down)
    close(tangent_out, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("jacobian", ["jacfwd", "jacrev"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jacobians_match_jax(case, jacobian):
    transform = getattr(jax, jacobian)
    argnums = case.argnums
    static = tuple(i for i, a in enumerate(case.args) if isinstance(a, int))
    got = jax.jit(transform(case.wrapped, argnums=argnums), static_argnums=static)(*case.args)
    close(got, transform(case.reference, argnums=argnums)(*case.args))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_hessian_is_forward_over_reverse_and_matches_jax(case):
    # with respect to every float argument, as the other tests differentiate (so that they
    # share the reverse derivative: compiling derivatives is what these tests spend on)
    loss = scalarized(case, weights_for(case))
    argnums = tuple(range(len(case.argnums)))
    got = jax.hessian(loss(case.wrapped), argnums=argnums)(*diff_args(case))
    close(got, jax.hessian(loss(case.reference), argnums=argnums)(*diff_args(case)),
          rtol=1e-6)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vmap_over_the_first_argument_matches_jax(case):
    batch = jnp.stack([case.args[0], 0.5 * case.args[0], case.args[0] + 0.25])
    rest = case.args[1:]
    got = jax.vmap(lambda x: case.wrapped(x, *rest))(batch)
    close(got, jax.vmap(lambda x: case.reference(x, *rest))(batch))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jit_of_grad_composed_with_jax_operations(case):
    weights = weights_for(case)

    def model(fn):
        def loss(*ws):
            args = list(case.args)
            for i, w in zip(case.argnums, ws):
                args[i] = jnp.tanh(w) * 0.9 + case.args[i] * 0.1
            leaves = jax.tree_util.tree_leaves(fn(*args))
            return jnp.log1p(sum(jnp.sum((wt * y) ** 2) for wt, y in zip(weights, leaves)))
        return loss
    ws = [jnp.asarray(rng.uniform(-1, 1, np.shape(case.args[i]))) for i in case.argnums]
    argnums = tuple(range(len(ws)))
    got = jax.jit(jax.value_and_grad(model(case.wrapped), argnums=argnums))(*ws)
    close(got, jax.value_and_grad(model(case.reference), argnums=argnums)(*ws))


# -- arguments, errors, imports -------------------------------------------------------------

def test_vmap_of_grad_with_an_integer_argument_and_batched_parameter():
    case = CASES[0]
    x, _, n = case.args
    ps = jnp.array([0.3, 0.7, 1.1])
    grad = jax.vmap(jax.grad(case.wrapped, argnums=(0, 1)), in_axes=(None, 0, None))
    close(grad(x, ps, n), jax.vmap(jax.grad(case.reference, argnums=(0, 1)),
                                   in_axes=(None, 0, None))(x, ps, n))


def test_nondiff_argnums_are_constant_and_refuse_a_derivative():
    wrapped = pyzyme.jax.wrap(loss_with_loops, f64(), nondiff_argnums=(1,))
    x, p, n = CASES[0].args
    close(jax.grad(wrapped)(x, p, n), jax.grad(loss_with_loops_jax)(x, p, n))
    with pytest.raises(UnsupportedError, match="nondiff_argnums"):
        jax.grad(wrapped, argnums=1)(x, p, n)


@numba.njit
def eigen_loss(a):
    return np.sum(np.linalg.eigvals(a).real)


def test_a_pyzyme_error_names_the_kernels_line_when_jax_traces():
    wrapped = pyzyme.jax.wrap(eigen_loss, f64())
    a = jnp.array([[3.0, 1.0], [1.0, 2.0]])
    close(wrapped(a), 5.0)
    with pytest.raises(UnsupportedError, match=r"np\.linalg\.eigvals") as info:
        jax.grad(wrapped)(a)
    lines, start = inspect.getsourcelines(eigen_loss.py_func)
    line = start + next(i for i, text in enumerate(lines) if "eigvals" in text)
    assert f"{inspect.getsourcefile(eigen_loss.py_func)}:{line}" in str(info.value)


def test_importing_pyzyme_does_not_import_jax():
    code = "import sys, pyzyme; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_a_result_spec_that_is_not_shape_dtype_structs_is_refused():
    with pytest.raises(TypeError, match="result_shape_dtypes"):
        pyzyme.jax.wrap(with_temporary, "float64")(jnp.ones(3))


def test_readme_example_matches_the_solver_in_jax():
    from tests.doc_blocks import readme_block, run_block
    scope = run_block(readme_block("pyzyme.jax.wrap"))

    def heat_jax(u0, kappa, steps):
        u = u0
        for _ in range(steps):
            u = u.at[1:-1].add(kappa[1:-1] * (u[:-2] - 2.0 * u[1:-1] + u[2:]))
        return u

    def loss(w, u0, target):
        return jnp.mean((heat_jax(u0, 0.4 * jax.nn.sigmoid(w), 50) - target) ** 2)
    u0 = scope["u0"]
    close(scope["g"], jax.grad(loss)(jnp.zeros(16), u0, 0.5 * u0))


@numba.njit
def refuses_negative(x):
    if x[0] < 0:
        raise ValueError("negative")
    return x * 2.0


def test_an_exception_in_the_kernel_is_an_error_of_the_jax_call_not_garbage():
    wrapped = pyzyme.jax.wrap(refuses_negative, lambda x: x)
    close(jax.jit(wrapped)(jnp.ones(3)), 2.0 * jnp.ones(3))
    with pytest.raises(Exception, match="raised an exception inside an XLA computation"):
        jax.block_until_ready(jax.jit(wrapped)(-jnp.ones(3)))


@numba.njit
def returns_a_shorter_array(x):
    return x[:2] * 2.0


def test_a_result_of_another_shape_than_declared_is_an_error():
    wrapped = pyzyme.jax.wrap(returns_a_shorter_array, lambda x: x)
    with pytest.raises(Exception, match="raised an exception inside an XLA computation"):
        jax.block_until_ready(jax.jit(wrapped)(jnp.ones(3)))


@numba.njit
def scaled_in_place(x, y):
    x *= 2.0              # writes its first argument
    s = 0.0
    for i in range(x.size):
        s += x[i] * x[i] * y[i]
    return s


def test_a_kernel_writing_its_argument_leaves_the_jax_array_as_it_was():
    """JAX arrays never change: an argument the kernel may write is copied first, so repeated
    calls agree, the caller's array keeps its values, and the derivatives are those of the
    function of the values passed (d/dx = 8 x y, d/dy = 4 x**2)."""
    w = pyzyme.jax.wrap(scaled_in_place, jax.ShapeDtypeStruct((), jnp.float64))
    x, y = jnp.array([1.0, 2.0, 3.0]), jnp.array([0.5, -1.0, 2.0])
    f = jax.jit(w)
    first, second = float(f(x, y)), float(f(x, y))
    want = float(np.sum(4.0 * np.asarray(x) ** 2 * np.asarray(y)))
    assert first == pytest.approx(want, rel=1e-12) and second == pytest.approx(want, rel=1e-12)
    np.testing.assert_array_equal(np.asarray(x), [1.0, 2.0, 3.0])
    gx, gy = jax.jit(jax.grad(w, argnums=(0, 1)))(x, y)
    close(gx, 8.0 * x * y)
    close(gy, 4.0 * x ** 2)
    np.testing.assert_array_equal(np.asarray(x), [1.0, 2.0, 3.0])


@numba.njit(parallel=True)
def _shifted_products(a, b):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += a[i] * b[(i + 1) % a.shape[0]] ** 2
    return s


@pytest.mark.parametrize("threads", [1, 2])
def test_a_prange_kernel_given_one_buffer_twice_under_grad(threads):
    """The bridge's reverse kernels are built for arrays apart (it makes every array they
    write), so one JAX buffer passed as both arguments is two read-only views: the gradient
    of ``sum_i a_i b_{i+1}^2`` at ``a = b = x`` is ``x_{i+1}^2 + 2 x_{i-1} x_i``, each
    argument's cotangent its own, at one thread and with tasks sharing the adjoints."""
    w = pyzyme.jax.wrap(_shifted_products, jax.ShapeDtypeStruct((), jnp.float64))
    x = jnp.asarray(np.random.default_rng(3).random(1000))
    xn = np.asarray(x)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        close(jax.jit(jax.grad(lambda v: w(v, v)))(x),
              np.roll(xn, -1) ** 2 + 2.0 * np.roll(xn, 1) * xn)
        ga, gb = jax.grad(w, argnums=(0, 1))(x, x)
    finally:
        numba.set_num_threads(before)
    close(ga, np.roll(xn, -1) ** 2)
    close(gb, 2.0 * np.roll(xn, 1) * xn)
