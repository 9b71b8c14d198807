"""Forward-mode corpus: ``@njit`` functions with example arguments and annotation patterns.

Each :class:`Case` names a function, a factory of fresh example arguments (functions that mutate
their arguments get new arrays on every call, and perturbed copies for finite differences keep
the arrays' layout), and a pattern with one letter per argument:

- ``D``: ``Duplicated`` (a random tangent is seeded; arrays that the function mutates carry their
  output tangents back in their shadows),
- ``C``: ``Const`` (integers, coefficient tables, ...).

``ret`` is the return activity (``Duplicated`` for a function returning floats, ``Const`` for one
that returns nothing and writes into an output array). Points are chosen away from kinks of
piecewise functions (branches, ``floor``, ``min``/``max``, data-dependent loop exits) so that
central finite differences see the same branch as the derivative.

``UNSUPPORTED`` lists functions whose derivative must be refused with
:class:`pyzyme.UnsupportedError` naming the operation (LAPACK calls with no rule, as the
SVD's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from pyzyme import Const, Duplicated


@dataclass(frozen=True)
class Case:
    name: str
    fn: Any                                   # numba dispatcher
    make_args: Callable[[], tuple]            # fresh, deterministic example arguments
    pattern: str                              # one letter per argument: D or C
    ret: type = Duplicated
    float32: bool = False                     # looser finite-difference tolerances
    # known pyzyme bugs: test kind ("fd", "primal", "batch") -> reason; the tests of that kind
    # are strict xfails for this case
    xfail: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert len(self.pattern) == len(self.make_args()), self.name


CASES: list[Case] = []


ALL_KINDS = ("fd", "primal", "batch")

def case(name: str, fn, make_args, pattern: str, **kw) -> None:
    CASES.append(Case(name, fn, make_args, pattern, **kw))


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def vec(n: int, seed: int, lo: float = -1.0, hi: float = 1.0, dtype=np.float64) -> np.ndarray:
    return _rng(seed).uniform(lo, hi, n).astype(dtype)


def mat(m: int, n: int, seed: int, order: str = "C", lo: float = -1.0,
        hi: float = 1.0) -> np.ndarray:
    return np.asarray(_rng(seed).uniform(lo, hi, (m, n)), order=order)


# --- scalar arithmetic and math ----------------------------------------------------------------


@njit
def s_poly(x):
    return 3.0 * x**3 - 2.0 * x * x + x / 7.0 - 1.0


case("poly", s_poly, lambda: (0.7,), "D")


@njit
def s_rational(x, y):
    return (x * y + 1.0) / (x - y * y) - y / (1.0 + x * x)


case("rational", s_rational, lambda: (1.3, 0.4), "DD")


@njit
def s_trig(x, y):
    return math.sin(x) * math.cos(y) + math.tan(x / 3.0)


case("sin_cos_tan", s_trig, lambda: (0.9, -0.3), "DD")


@njit
def s_exp_log(x, y):
    return math.exp(0.5 * x) * math.log(y) + math.log(x * x + 1.0)


case("exp_log", s_exp_log, lambda: (0.8, 2.5), "DD")


@njit
def s_sqrt(x, y):
    return math.sqrt(x) + math.sqrt(x * y + 4.0) * y


case("sqrt", s_sqrt, lambda: (2.0, 1.5), "DD")


@njit
def s_pow_float(x, y):
    return x**2.5 + y**x + math.pow(x, 0.3)


case("pow_float_exponent", s_pow_float, lambda: (1.4, 2.2), "DD")


@njit
def s_pow_int(x):
    return x**3 + x**-2 + 2.0 * x**7


case("pow_int_exponent", s_pow_int, lambda: (0.9,), "D")


@njit
def s_pow_const_int(x, n):
    return x**n - math.pow(x, n - 1)


case("pow_int_const_arg", s_pow_const_int, lambda: (1.1, 5), "DC")


@njit
def s_tanh_atan2(x, y):
    return math.tanh(x * y) + math.atan2(y, x) - math.atan(x)


case("tanh_atan2", s_tanh_atan2, lambda: (0.6, -1.2), "DD")


@njit
def s_hypot(x, y):
    return math.hypot(x, y) * math.hypot(y, 2.0)


case("hypot", s_hypot, lambda: (-0.8, 1.7), "DD")


@njit
def s_erf(x, y):
    return math.erf(x) * math.erfc(y) + math.erf(x * y)


case("erf_erfc", s_erf, lambda: (0.4, 0.7), "DD")


@njit
def s_fabs_minmax(x, y):
    return math.fabs(x - y) + min(x, y) * max(x, 2.0) + abs(y)


case("fabs_min_max", s_fabs_minmax, lambda: (0.3, -1.4), "DD")


@njit
def s_floor(x, y):
    return math.floor(x) * x + math.floor(y * 3.0) - math.ceil(x) * y


case("floor_ceil_piecewise", s_floor, lambda: (2.3, 1.1), "DD")


@njit
def s_log1p_expm1(x, y):
    return math.log1p(x) * math.expm1(y) + math.log1p(x * y)


case("log1p_expm1", s_log1p_expm1, lambda: (0.02, -0.05), "DD")


@njit
def s_lgamma(x):
    return math.lgamma(x) + math.lgamma(2.0 * x + 1.0)


case("lgamma", s_lgamma, lambda: (3.7,), "D")


@njit
def s_inverse_trig_hyperbolic(x):
    return math.asin(x) + math.acos(x / 2.0) + math.sinh(x) * math.cosh(x) + math.asinh(x)


case("asin_acos_sinh_cosh", s_inverse_trig_hyperbolic, lambda: (0.35,), "D")


@njit
def s_log10_log2(x):
    return math.log10(x) + math.log2(x * 3.0) + 2.0**x


case("log10_log2_exp2", s_log10_log2, lambda: (1.8,), "D")


# --- branches, loops, early returns ------------------------------------------------------------


@njit
def b_if_else(x, y):
    if x > y:
        z = x * y
    else:
        z = x - y * y
    return z * z


case("if_else_taken", b_if_else, lambda: (1.5, 0.5), "DD")
case("if_else_not_taken", b_if_else, lambda: (0.2, 0.9), "DD")


@njit
def b_elif_chain(x):
    if x < -1.0:
        return -x
    elif x < 0.0:
        return x * x + 1.0
    elif x < 1.0:
        return math.cos(x)
    return math.exp(-x)


case("elif_chain_middle", b_elif_chain, lambda: (0.6,), "D")
case("elif_chain_first", b_elif_chain, lambda: (-3.0,), "D")


@njit
def l_newton_sqrt(a):
    g = a
    while abs(g * g - a) > 1e-13 * a:
        g = 0.5 * (g + a / g)
    return g


case("while_newton_sqrt", l_newton_sqrt, lambda: (7.3,), "D")


@njit
def l_halving(x):
    count = 0
    while x > 1.0:
        x = x / 2.0
        count += 1
    return x * count + x * x


case("while_halving_exit", l_halving, lambda: (37.0,), "D")


@njit
def l_taylor_exp(x, n):
    term = 1.0
    total = 1.0
    for i in range(1, n):
        term *= x / i
        total += term
    return total


case("for_dynamic_trip_count", l_taylor_exp, lambda: (0.8, 12), "DC")


@njit
def l_nested(x):
    s = 0.0
    n = x.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            s += math.sin(x[i] * x[j]) / (1.0 + j - i)
    return s


case("nested_loops_triangle", l_nested, lambda: (vec(6, 1),), "D")


@njit
def l_early_return(x, limit):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i] * x[i]
        if total > limit:
            return total * i
    return -total


case("early_return_in_loop", l_early_return, lambda: (vec(8, 2, 0.5, 1.5), 3.0), "DC")


@njit
def l_break(x):
    acc = 1.0
    i = 0
    while True:
        acc = acc * x[i] + 0.5
        i += 1
        if i >= x.shape[0] or acc > 10.0:
            break
    return acc


case("while_true_break", l_break, lambda: (vec(5, 3, 1.0, 2.0),), "D")


@njit
def l_euler_ode(y0, k, n):
    y = y0
    dt = 1.0 / n
    for i in range(n):
        t = i * dt
        y = y - dt * k * y * math.sin(t + y)
    return y


case("euler_ode_int_steps", l_euler_ode, lambda: (1.2, 0.7, 50), "DDC")


# --- 1-D / 2-D arrays, layouts and views -------------------------------------------------------


@njit
def a_sum_sq(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


case("array_sum_squares", a_sum_sq, lambda: (vec(7, 4),), "D")
case("array_strided_view", a_sum_sq, lambda: (vec(10, 5)[::2],), "D")
case("array_negative_stride", a_sum_sq, lambda: (vec(6, 6)[::-1],), "D")


@njit
def a_weighted(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * math.exp(x[i] * (i + 1) / 10.0)
    return s


case("array_neg_stride_weighted", a_weighted, lambda: (vec(9, 7)[::-2], vec(5, 8)), "DC")


@njit
def a_quadratic_form(a, x):
    s = 0.0
    m, n = a.shape
    for i in range(m):
        for j in range(n):
            s += x[i] * a[i, j] * x[j]
    return s


case("array_2d_c_order", a_quadratic_form, lambda: (mat(4, 4, 9), vec(4, 10)), "DD")
case("array_2d_fortran_order", a_quadratic_form, lambda: (mat(4, 4, 11, "F"), vec(4, 12)),
     "DD")
case("array_2d_transposed", a_quadratic_form, lambda: (mat(3, 3, 13).T, vec(3, 14)), "DD")
case("array_2d_strided_block", a_quadratic_form, lambda: (mat(6, 5, 15)[::2, 1:4], vec(3, 16)),
     "DD")


@njit
def a_views_inside(x):
    ev = x[::2]
    rev = x[::-1]
    s = 0.0
    for i in range(ev.shape[0]):
        s += ev[i] * rev[i]
    return s


case("views_made_inside", a_views_inside, lambda: (vec(8, 17),), "D")


@njit
def a_transpose_inside(a):
    t = a.T
    s = 0.0
    for i in range(t.shape[0]):
        for j in range(t.shape[1]):
            s += (i + 1.0) * t[i, j] ** 2
    return s


case("transpose_inside", a_transpose_inside, lambda: (mat(3, 4, 18),), "D")


@njit
def a_three_d(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                s += math.cos(a[i, j, k]) * (i - j + k)
    return s


case("array_3d", a_three_d, lambda: (_rng(19).uniform(-1, 1, (2, 3, 2)),), "D")


@njit
def a_scale_inplace(x, s):
    for i in range(x.shape[0]):
        x[i] = x[i] * s + x[i] * x[i]


case("mutate_input_array", a_scale_inplace, lambda: (vec(5, 20), 1.7), "DD", ret=Const)


@njit
def a_write_out(out, x, c):
    for i in range(x.shape[0]):
        out[i] = c * math.sin(x[i]) + x[0]


case("write_output_array", a_write_out, lambda: (np.zeros(5), vec(5, 21), 2.0), "DDD",
     ret=Const)
case("write_output_const_scale", a_write_out, lambda: (np.zeros(4), vec(4, 22), 0.5), "DDC",
     ret=Const)


@njit
def a_write_out_2d(out, a):
    m, n = a.shape
    for i in range(m):
        for j in range(n):
            out[j, i] = a[i, j] * a[i, j] - a[i, 0]


case("write_output_2d_fortran", a_write_out_2d,
     lambda: (np.zeros((3, 2), order="F"), mat(2, 3, 23)), "DD", ret=Const)


@njit
def a_cube(y, x):
    y[()] = x[()] ** 3


case("zero_d_cube", a_cube, lambda: (np.array(0.0), np.array(4.0)), "DD", ret=Const)


@njit
def a_zero_d_accumulate(acc, x, n):
    for i in range(n):
        acc[()] += math.sin(x * (i + 1)) * acc[()]
    return acc[()] * 2.0


case("zero_d_accumulate_and_return", a_zero_d_accumulate, lambda: (np.array(0.9), 0.4, 4),
     "DDC")


# --- NumPy inside -------------------------------------------------------------------------------


@njit
def n_alloc_fill_reduce(x):
    n = x.shape[0]
    tmp = np.empty(n)
    for i in range(n):
        tmp[i] = x[i] * x[(i + 1) % n]
    s = 0.0
    for i in range(n):
        s += tmp[i] * (i + 1)
    return s


case("alloc_empty_fill_reduce", n_alloc_fill_reduce, lambda: (vec(5, 24),), "D")


@njit
def n_zeros_prefix(x):
    n = x.shape[0]
    pre = np.zeros(n + 1)
    for i in range(n):
        pre[i + 1] = pre[i] + x[i] * x[i]
    s = 0.0
    for i in range(n + 1):
        s += math.sqrt(pre[i] + 1.0)
    return s


case("alloc_zeros_prefix_sums", n_zeros_prefix, lambda: (vec(6, 25),), "D")


@njit
def n_sum(x):
    return np.sum(x * x) + x.sum()


case("np_sum", n_sum, lambda: (vec(6, 26),), "D")


@njit
def n_exp_sqrt(x):
    return np.sum(np.sqrt(np.exp(x) + 1.0))


case("np_exp_sqrt", n_exp_sqrt, lambda: (vec(5, 27),), "D")


@njit
def n_cumsum(x):
    c = np.cumsum(x)
    return np.sum(c * c)


case("np_cumsum", n_cumsum, lambda: (vec(5, 28),), "D")


@njit
def n_maximum(x, y):
    return np.sum(np.maximum(x, y) * y)


case("np_maximum", n_maximum, lambda: (vec(6, 29), vec(6, 30)), "DD")


@njit
def n_max_method(x):
    return x.max() * 2.0 + x.min()


case("array_max_min_method", n_max_method, lambda: (vec(7, 31),), "D")


@njit
def n_logsumexp(x):
    m = x.max()
    return m + math.log(np.sum(np.exp(x - m)))


case("np_logsumexp", n_logsumexp, lambda: (vec(6, 32, -2.0, 2.0),), "D")


@njit
def n_returns_array(x):
    return np.exp(x) * 2.0


case("returns_array_exp", n_returns_array, lambda: (vec(4, 33),), "D")


@njit
def n_returns_alloc(x, y):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * y + math.sin(x[i])
    return out


case("returns_allocated_array", n_returns_alloc, lambda: (vec(4, 34), 0.6), "DD")


@njit
def n_returns_2d(x):
    out = np.empty((x.shape[0], 3))
    for i in range(x.shape[0]):
        for j in range(3):
            out[i, j] = x[i] ** (j + 1)
    return out


case("returns_2d_allocated", n_returns_2d, lambda: (vec(3, 48),), "D")


@njit
def n_returns_view(a):
    return a.T[::-1]


case("returns_view_of_input", n_returns_view, lambda: (mat(2, 3, 49),), "D")


@njit
def n_returns_reshaped(x):
    return (x * x).reshape(2, 2)


case("returns_reshaped", n_returns_reshaped, lambda: (vec(4, 54),), "D")


# --- float32 -----------------------------------------------------------------------------------


@njit
def f32_sum(x):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += x[i] * x[i] + np.float32(0.5) * x[i]
    return s


case("float32_array_sum", f32_sum, lambda: (vec(6, 35, dtype=np.float32),), "D", float32=True)


@njit
def f32_scalar(x):
    s = np.float32(x)
    return math.sqrt(s * s + np.float32(1.0)) * s


case("float32_scalar_inside", f32_scalar, lambda: (0.75,), "D", float32=True)


@njit
def f32_out(out, x):
    for i in range(x.shape[0]):
        out[i] = math.exp(x[i]) * np.float32(0.25)


case("float32_output_array", f32_out,
     lambda: (np.zeros(4, np.float32), vec(4, 36, dtype=np.float32)), "DD", ret=Const,
     float32=True)


# --- calls, recursion, tuples -------------------------------------------------------------------


@njit
def _helper(x):
    return x * math.sin(x)


@njit
def c_calls_helper(x, y):
    return _helper(x) + _helper(x * y) * _helper(y)


case("calls_njit_helper", c_calls_helper, lambda: (0.7, 1.3), "DD")


@njit
def _array_helper(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += c * x[i] ** 2
    return s


@njit
def c_calls_array_helper(x, c):
    return _array_helper(x, c) + _array_helper(x[1:], c * c)


case("calls_helper_with_array", c_calls_array_helper, lambda: (vec(5, 37), 1.5), "DD")


@njit
def _rpow(x, n):
    if n == 0:
        return 1.0
    return x * _rpow(x, n - 1)


@njit
def c_recursive_pow(x, n):
    return _rpow(x, n) + x


case("recursive_pow", c_recursive_pow, lambda: (1.2, 6), "DC")


@njit
def _horner(c, x, i):
    if i == c.shape[0] - 1:
        return c[i]
    return c[i] + x * _horner(c, x, i + 1)


@njit
def c_recursive_horner(c, x):
    return _horner(c, x, 0)


case("recursive_horner", c_recursive_horner, lambda: (vec(5, 38), 0.8), "DD")
case("recursive_horner_const_coeffs", c_recursive_horner, lambda: (vec(4, 39), -0.6), "CD")


@njit
def c_tuple_return(x, y):
    return x * y, math.sin(x) + y, x / y


case("tuple_of_floats_returned", c_tuple_return, lambda: (0.5, 2.0), "DD")


@njit
def _polar(x, y):
    return math.hypot(x, y), math.atan2(y, x)


@njit
def c_tuple_internal(x, y):
    r, t = _polar(x, y)
    return r * math.cos(2.0 * t)


case("tuple_passed_between_calls", c_tuple_internal, lambda: (1.1, 0.6), "DD")


@njit
def _accumulate_squares(out, x, k):
    for i in range(x.shape[0]):
        out[i] += k * x[i] * x[i]


@njit
def c_helper_mutates(out, x):
    _accumulate_squares(out, x, 2.0)
    _accumulate_squares(out, out, 0.5)      # the helper reads and writes the same array
    return out.sum()


case("helper_mutates_array", c_helper_mutates, lambda: (np.zeros(3), vec(3, 47)), "DD")


@njit
def c_list_of_floats(x, y):
    items = [x, x * y, math.sin(y)]
    s = 0.0
    for v in items:
        s += v * v
    return s


case("list_of_floats", c_list_of_floats, lambda: (0.7, 1.2), "DD")


@njit
def s_gamma(x):
    return math.gamma(x) * x


case("gamma", s_gamma, lambda: (2.3,), "D")


# --- fastmath, int constants --------------------------------------------------------------------


@njit(fastmath=True)
def fm_norm(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return math.sqrt(s) / x.shape[0]


case("fastmath_norm", fm_norm, lambda: (vec(16, 40),), "D")


@njit(fastmath=True)
def fm_scalar(x, y):
    return (x * x + y) / (y * y + 1.0) + math.exp(x - y)


case("fastmath_scalar", fm_scalar, lambda: (0.4, 1.1), "DD")


@njit
def i_mixed(i, x, j, y):
    return i * x + y**j + x / j


case("int_consts_between_floats", i_mixed, lambda: (3, 0.7, 2, 1.9), "CDCD")


@njit
def i_index_offset(x, k, scale):
    s = 0.0
    for i in range(k, x.shape[0]):
        s += scale * x[i] * x[i - k]
    return s


case("int_const_index_offset", i_index_offset, lambda: (vec(8, 41), 2, 0.3), "DCD")


@njit
def i_int_times_float(n, x):
    return float(n) * x + (n // 2) * x * x


case("int_const_first", i_int_times_float, lambda: (7, 0.4), "CD")


# --- a few whole programs -----------------------------------------------------------------------


@njit
def p_diffusion(u, dt, steps):
    n = u.shape[0]
    v = u.copy()
    for _ in range(steps):
        w = v.copy()
        for i in range(1, n - 1):
            v[i] = w[i] + dt * (w[i - 1] - 2.0 * w[i] + w[i + 1])
    return np.sum(v * v)


case("diffusion_with_copies", p_diffusion, lambda: (vec(8, 42), 0.2, 5), "DDC")


@njit
def p_matvec_loops(a, x, y):
    m, n = a.shape
    for i in range(m):
        s = 0.0
        for j in range(n):
            s += a[i, j] * x[j]
        y[i] = math.tanh(s)
    return y.sum()


case("matvec_loops_output", p_matvec_loops, lambda: (mat(3, 4, 43), vec(4, 44), np.zeros(3)),
     "DDD")


@njit
def p_softplus_loss(w, xs, ys):
    loss = 0.0
    for i in range(xs.shape[0]):
        z = w[0] + w[1] * xs[i]
        loss += math.log1p(math.exp(-ys[i] * z))
    return loss / xs.shape[0]


case("logistic_loss_const_data", p_softplus_loss,
     lambda: (np.array([0.2, -0.4]), vec(10, 45), np.sign(vec(10, 46))), "DCC")


# --- BLAS through Numba's helpers: derivatives by BLAS again ----------------------------------


@njit
def u_np_dot(x, y):
    return np.dot(x, y)


@njit
def u_matmul(a, x):
    return np.sum(a @ x)


@njit
def u_matmat(a, b):
    c = a @ b
    return np.sum(c * c)


case("np_dot_blas", u_np_dot, lambda: (vec(3, 50), vec(3, 51)), "DD")
case("matmul_blas", u_matmul, lambda: (mat(3, 3, 52), vec(3, 53)), "DD")
case("matmat_blas", u_matmat, lambda: (mat(3, 4, 55), mat(4, 2, 56)), "DD")


@njit
def u_det(a):
    return np.linalg.det(a)


case("linalg_det_lapack", u_det, lambda: (mat(3, 3, 54) + 2.0 * np.eye(3),), "D")


# --- expected UnsupportedError ------------------------------------------------------------------


@njit
def u_singular_values(a):
    return np.sum(np.linalg.svd(a)[1])


UNSUPPORTED: list[Case] = [
    Case("linalg_svd_lapack", u_singular_values, lambda: (mat(3, 3, 54),), "D"),
]
