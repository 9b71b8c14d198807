"""Reverse-mode corpus: ``@njit`` functions with example arguments and activity patterns.

Each :class:`Case` names a function, a factory of fresh example arguments (every call builds new
arrays with the same layouts, so a function that mutates its arguments never sees the leftovers
of an earlier run), and a pattern with one letter per argument:

- ``A``: ``Active`` float scalar (reverse mode returns its derivative),
- ``D``: ``Duplicated`` array (its shadow holds the cotangent of the array's final contents on
  entry and ``+=`` the derivative of the initial contents on exit),
- ``C``: ``Const`` (integers, coefficient tables, data).

``ret`` is the return activity: ``Active`` for a function returning a float, ``Const`` for one
that returns nothing and writes its result into one of its ``Duplicated`` arrays (the test seeds
those arrays' shadows with a cotangent). Sample points keep away from the kinks of piecewise
functions (branches, ``abs``, ``min``/``max``, data-dependent loop exits, ties of sorts), so that
finite differences see the same branch as the derivative.

``forward_ok=False`` marks the cases forward mode cannot differentiate today; the tests then skip
only the comparison of reverse with forward mode.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from pyzyme import Active, Const


@dataclass(frozen=True)
class Case:
    name: str
    fn: Any                                   # numba dispatcher
    make_args: Callable[[], tuple]            # fresh, deterministic example arguments
    pattern: str                              # one letter per argument: A, D or C
    ret: type = Active
    float32: bool = False                     # looser tolerances
    forward_ok: bool = True                   # forward mode differentiates it today
    pending: str = ""                         # reverse mode refuses it today: the issue that
                                              # brings it (its tests are strict xfails)
    note: str = ""                            # why forward_ok is False, or other remarks

    def __post_init__(self) -> None:
        args = self.make_args()
        assert len(self.pattern) == len(args), self.name
        assert set(self.pattern) <= set("ADC"), self.name
        for a, p in zip(args, self.pattern):
            if p == "A":
                assert isinstance(a, float), f"{self.name}: Active args are Python floats"
            if p == "D":
                assert isinstance(a, np.ndarray), f"{self.name}: Duplicated args are arrays"
        if self.ret is Const:
            assert "D" in self.pattern, f"{self.name}: an output array is needed"


CASES: list[Case] = []


def case(name: str, fn, make_args, pattern: str, **kw) -> None:
    assert all(c.name != name for c in CASES), name
    CASES.append(Case(name, fn, make_args, pattern, **kw))


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def vec(n: int, seed: int, lo: float = -1.0, hi: float = 1.0, dtype=np.float64) -> np.ndarray:
    return _rng(seed).uniform(lo, hi, n).astype(dtype)


def mat(m: int, n: int, seed: int, order: str = "C", lo: float = -1.0,
        hi: float = 1.0) -> np.ndarray:
    return np.asarray(_rng(seed).uniform(lo, hi, (m, n)), order=order)


# --- straight-line scalar math -----------------------------------------------------------------


@njit
def s_sin_exp_log(x, y):
    return math.sin(x) * math.exp(y) + math.log(x * y + 2.0) - math.cos(x - y)


case("sin_exp_log", s_sin_exp_log, lambda: (0.7, -0.4), "AA")


@njit
def s_sqrt_tanh(x, y):
    return math.sqrt(x * x + 1.0) * math.tanh(y) + math.sqrt(y + 3.0) / x


case("sqrt_tanh", s_sqrt_tanh, lambda: (1.3, 0.6), "AA")


@njit
def s_pow_float(x, y):
    return x**2.5 + y**x + math.pow(x, 0.3) + x**y


case("pow_float_exponent", s_pow_float, lambda: (1.4, 2.2), "AA")


@njit
def s_pow_int(x):
    return x**3 + x**-2 + 2.0 * x**7 - x**2


case("pow_int_exponent", s_pow_int, lambda: (0.9,), "A")


@njit
def s_pow_int_arg(x, n):
    return x**n - math.pow(x, n - 1) + x ** (n // 2)


case("pow_int_const_arg", s_pow_int_arg, lambda: (1.1, 5), "AC")


@njit
def s_atan2_hypot(x, y):
    return math.atan2(y, x) * math.hypot(x, y) + math.atan2(x * x, y + 2.0) + math.atan(y)


case("atan2_hypot", s_atan2_hypot, lambda: (-0.8, 1.7), "AA")


@njit
def s_abs_min_max(x, y):
    return abs(x - y) + min(x, y) * max(x, 2.0) + abs(y) * math.fabs(x) + max(x * y, -3.0)


case("abs_min_max", s_abs_min_max, lambda: (0.3, -1.4), "AA")


@njit
def s_numpy_scalar_funcs(x, y):
    return np.sin(x) * np.exp(-y) + np.log(np.hypot(x, y)) + np.arctan2(x, y) + np.tanh(x * y)


case("numpy_scalar_funcs", s_numpy_scalar_funcs, lambda: (0.5, 1.2), "AA")


@njit
def s_const_float(x, c):
    return c * x**2 + math.sin(c * x) + math.exp(x / c)


case("active_and_const_float", s_const_float, lambda: (0.6, 2.5), "AC")


@njit
def s_mixed_api(a, b, c, d):
    return a * np.sqrt(b[0] ** 2 + b[1] ** 2) + c**2 * d**2


case("api_f_mixed_activities", s_mixed_api,
     lambda: (4.2, np.array([2.2, 3.3]), 55, 9.0), "ADCA")


@njit
def s_float32_scalar(x, y):
    s = np.float32(x)
    t = np.float32(y)
    return math.sqrt(s * s + np.float32(1.0)) * t + math.exp(s * t)


case("float32_scalar_inside", s_float32_scalar, lambda: (0.75, -0.5), "AA", float32=True)


@njit(fastmath=True)
def fm_scalar(x, y):
    return (x * x + y) / (y * y + 1.0) + math.exp(x - y) + math.sqrt(x * y)


case("fastmath_scalar", fm_scalar, lambda: (0.4, 1.1), "AA")


# --- branches ----------------------------------------------------------------------------------


@njit
def b_if_else(x, y):
    if x > y:
        z = x * y
    else:
        z = x - y * y
    return z * z + math.sin(x)


case("if_else_data_taken", b_if_else, lambda: (1.5, 0.5), "AA")
case("if_else_data_not_taken", b_if_else, lambda: (0.2, 0.9), "AA")


@njit
def b_elif_chain(x):
    if x < -1.0:
        return -x * x
    elif x < 0.0:
        return x * x + 1.0
    elif x < 1.0:
        return math.cos(x) * x
    return math.exp(-x)


case("elif_chain_middle", b_elif_chain, lambda: (0.6,), "A")
case("elif_chain_last", b_elif_chain, lambda: (1.7,), "A")


@njit
def b_int_branch(x, mode):
    if mode == 1:
        y = x * x * x
    elif mode == 2:
        y = math.sin(x) / x
    else:
        y = -x
    if mode % 2 == 0:
        y = y * x
    return y


case("if_on_const_int_1", b_int_branch, lambda: (0.8, 1), "AC")
case("if_on_const_int_2", b_int_branch, lambda: (0.8, 2), "AC")


@njit
def b_int_switch_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        m = i % 4
        if m == 0:
            s += math.sin(x[i])
        elif m == 1:
            s += x[i] * x[i]
        elif m == 2:
            s -= math.exp(x[i])
        else:
            s += x[i] * s
    return s


case("switch_on_loop_index", b_int_switch_loop, lambda: (vec(9, 1),), "D")


@njit
def b_data_branch_loop(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s += w * x[i] * x[i]
        else:
            s += math.sin(w * x[i])
    return s


case("if_on_data_in_loop", b_data_branch_loop, lambda: (vec(8, 2), 1.3), "DA")


# --- loops -------------------------------------------------------------------------------------


@njit
def l_taylor(x, n):
    s = 0.0
    for i in range(1, n + 1):
        s += x**i / i
    return s


case("taylor_series", l_taylor, lambda: (0.6, 12), "AC")


@njit
def l_early_return(x, limit):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i] * x[i]
        if total > limit:
            return total * i
    return -total


case("early_return_in_loop", l_early_return, lambda: (vec(8, 3, 0.5, 1.5), 3.0), "DC")
case("early_return_not_taken", l_early_return, lambda: (vec(5, 4, 0.1, 0.5), 3.0), "DC")


@njit
def l_break(x, y):
    acc = 1.0
    for i in range(x.shape[0]):
        acc = acc * x[i] + y
        if acc > 10.0:
            break
    return acc


case("for_break", l_break, lambda: (vec(8, 5, 1.2, 2.0), 0.5), "DA")


@njit
def l_newton_cbrt(a):
    g = 1.0 + a / 3.0
    dx = 1.0
    it = 0
    while abs(dx) > 1e-12 and it < 100:
        dx = (g * g * g - a) / (3.0 * g * g)
        g -= dx
        it += 1
    return g * a


case("while_newton_cbrt", l_newton_cbrt, lambda: (5.0,), "A")


@njit
def l_series_exp(x):
    term = 1.0
    total = 1.0
    k = 1
    while abs(term) > 1e-17 * abs(total):
        term *= x / k
        total += term
        k += 1
    return total


case("while_series_until_small", l_series_exp, lambda: (1.3,), "A")


@njit
def l_halving(x):
    count = 0
    while x > 1.0:
        x = x / 2.0
        count += 1
    return x * count + x * x


case("while_halving_exit", l_halving, lambda: (37.0,), "A")


@njit
def l_nested2(x):
    s = 0.0
    n = x.shape[0]
    for i in range(n):
        for j in range(n):
            s += math.sin(x[i] * x[j]) / (1.0 + i + 2 * j)
    return s


case("nested_2_deep", l_nested2, lambda: (vec(5, 6),), "D")


@njit
def l_nested3(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            for k in range(2):
                s += x[i] * y[j] ** (k + 1) / (1.0 + i + j + k)
    return s


case("nested_3_deep", l_nested3, lambda: (vec(3, 7), vec(4, 8)), "DD")


@njit
def l_triangular(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i):
            s += x[i] * math.cos(x[j]) + x[j] * x[j] * x[i]
    return s


case("triangular_inner_bound", l_triangular, lambda: (vec(6, 9),), "D")


@njit
def l_triangular3(x):
    s = 0.0
    n = x.shape[0]
    for i in range(n):
        for j in range(i):
            for k in range(j):
                s += x[i] * x[j] - x[k] * x[i] * x[i]
    return s


case("triangular_3_deep", l_triangular3, lambda: (vec(5, 10),), "D")


@njit
def l_varying_trip(x, counts):
    s = 0.0
    for i in range(x.shape[0]):
        p = 1.0
        for _ in range(counts[i]):
            p *= x[i] + 0.5
        s += p
    return s


case("inner_trip_count_per_outer", l_varying_trip,
     lambda: (vec(5, 11), np.array([3, 0, 5, 1, 2], dtype=np.int64)), "DC")


@njit
def l_while_per_element(out, y, e):
    # Kepler's equation x - e*sin(x) = y by Newton, a different number of steps per element
    for i in range(y.shape[0]):
        x = y[i]
        dx = 1.0
        it = 0
        while abs(dx) > 1e-13 and it < 50:
            dx = (x - e * math.sin(x) - y[i]) / (1.0 - e * math.cos(x))
            x -= dx
            it += 1
        out[i] = x


case("newton_per_element_output", l_while_per_element,
     lambda: (np.zeros(4), vec(4, 12, 0.2, 2.5), 0.4), "DDA", ret=Const)


@njit
def l_logistic_map(r, x0, n):
    x = x0
    for _ in range(n):
        x = r * x * (1.0 - x)
    return x


case("loop_carried_scalar", l_logistic_map, lambda: (2.7, 0.3, 8), "AAC")


@njit
def l_euler_ode(y0, k, n):
    y = y0
    dt = 1.0 / n
    for i in range(n):
        t = i * dt
        y = y - dt * k * y * math.sin(t + y)
    return y


case("euler_ode_int_steps", l_euler_ode, lambda: (1.2, 0.7, 20), "AAC")


# --- values overwritten after being read -------------------------------------------------------


@njit
def o_square_inplace_sum(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * (i + 1)
    return s


case("square_in_place_then_sum", o_square_inplace_sum, lambda: (vec(5, 13),), "D")


@njit
def o_square_inplace(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i] + math.sin(x[i])


case("square_in_place_output", o_square_inplace, lambda: (vec(5, 14),), "D", ret=Const)


@njit
def o_accumulator(a):
    for i in range(1, a.shape[0]):
        a[0] = a[0] * a[i] + a[i] * a[i]
    return a[0]


case("a0_reused_as_accumulator", o_accumulator, lambda: (vec(6, 15, 0.5, 1.5),), "D")


@njit
def o_tmp_reused(x):
    tmp = np.empty(3)
    s = 0.0
    for i in range(x.shape[0] - 2):
        for k in range(3):
            tmp[k] = x[i + k]
        tmp[1] = tmp[0] * tmp[2] + tmp[1]
        tmp[0] = math.sin(tmp[1])
        s += tmp[0] * tmp[1]
    return s


case("tmp_array_reused_each_iteration", o_tmp_reused, lambda: (vec(7, 16),), "D")


@njit
def o_tmp_storage(x, tmp, n):
    tmp[0] = 1.0
    for i in range(n):
        tmp[0] *= x
    return tmp[0]


case("tmp_storage_duplicated", o_tmp_storage, lambda: (1.2, np.zeros(1), 5), "ADC")


@njit
def o_cumsum_inplace(x):
    for i in range(1, x.shape[0]):
        x[i] += x[i - 1]


case("cumsum_in_place_output", o_cumsum_inplace, lambda: (vec(6, 17),), "D", ret=Const)


@njit
def o_cumsum_inplace_ret(x):
    for i in range(1, x.shape[0]):
        x[i] = x[i] + x[i - 1] * x[i - 1] * 0.5
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i])
    return s


case("cumulative_in_place_then_sum", o_cumsum_inplace_ret, lambda: (vec(6, 18),), "D")


@njit
def o_insertion_sort(x, w):
    y = x.copy()
    for i in range(1, y.shape[0]):
        key = y[i]
        j = i - 1
        while j >= 0 and y[j] > key:
            y[j + 1] = y[j]
            j -= 1
        y[j + 1] = key
    s = 0.0
    for i in range(y.shape[0]):
        s += w[i] * y[i] * y[i]
    return s


case("insertion_sort_of_copy", o_insertion_sort, lambda: (vec(7, 19), vec(7, 20)), "DC")


@njit
def o_bubble_sort(x):
    n = x.shape[0]
    for i in range(n):
        for j in range(n - 1 - i):
            if x[j] > x[j + 1]:
                t = x[j]
                x[j] = x[j + 1]
                x[j + 1] = t
    s = 0.0
    for i in range(n):
        s += (i + 1.0) * math.exp(x[i])
    return s


case("bubble_sort_in_place", o_bubble_sort, lambda: (vec(6, 21),), "D")


@njit
def o_np_sort(x, w):
    y = np.sort(x)
    return np.sum(y * w) + y[0] * y[-1]


case("np_sort_weighted", o_np_sort, lambda: (vec(6, 22), vec(6, 23)), "DC")




# --- allocation and NumPy inside ---------------------------------------------------------------


@njit
def n_empty_fill(x):
    n = x.shape[0]
    tmp = np.empty(n)
    for i in range(n):
        tmp[i] = x[i] * x[(i + 1) % n]
    s = 0.0
    for i in range(n):
        s += tmp[i] * (i + 1)
    return s


case("alloc_empty_fill_reduce", n_empty_fill, lambda: (vec(5, 25),), "D")


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


case("alloc_zeros_prefix_sums", n_zeros_prefix, lambda: (vec(6, 26),), "D")


@njit
def n_copy_modify(x):
    y = x.copy()
    for i in range(y.shape[0]):
        y[i] = y[i] * x[i] + 1.0
    return np.sum(y * y) + x[0]


case("array_copy_then_modify", n_copy_modify, lambda: (vec(5, 27),), "D")


@njit
def n_ones_like(x, c):
    y = np.ones_like(x)
    z = np.zeros_like(x)
    for i in range(x.shape[0]):
        y[i] += c * x[i]
        z[i] = y[i] * y[i]
    return z.sum() * c


case("ones_like_zeros_like", n_ones_like, lambda: (vec(4, 28), 0.7), "DA")


@njit
def n_slice_assign(x, c):
    z = np.zeros_like(x)
    z[1:] = x[:-1]
    s = 0.0
    for i in range(x.shape[0]):
        s += (z[i] + c) * x[i] * x[i]
    return s


case("slice_assignment", n_slice_assign, lambda: (vec(5, 90), 1.3), "DA")


@njit
def n_tmp_in_loop(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        t = np.empty(2)
        t[0] = x[i] * x[i + 1]
        t[1] = x[i] - x[i + 1]
        s += t[0] * t[1] + math.exp(t[1])
    return s


case("temporary_array_in_loop", n_tmp_in_loop, lambda: (vec(5, 29),), "D")


@njit
def n_sum(x):
    return np.sum(x * x) + x.sum() * x[0]


case("np_sum_and_method", n_sum, lambda: (vec(6, 30),), "D")


@njit
def n_dot(x, y):
    return np.dot(x, y) * x[1]


case("np_dot_1d", n_dot, lambda: (vec(4, 31), vec(4, 32)), "DD")


@njit
def n_exp_elementwise(x):
    return np.sum(np.sqrt(np.exp(x) + 1.0))


case("np_exp_elementwise", n_exp_elementwise, lambda: (vec(5, 33),), "D")


@njit
def n_elementwise_mul(a, b):
    c = a * b
    return np.sum(c * np.sin(a))


case("elementwise_mul_sin", n_elementwise_mul, lambda: (vec(5, 34), vec(5, 35)), "DD")


@njit
def n_mean(x):
    m = np.mean(x)
    return np.mean((x - m) ** 2) + m * m


case("np_mean_variance", n_mean, lambda: (vec(6, 36),), "D")


@njit
def n_slice(x):
    inner = x[1:-1]
    return np.sum(inner * x[:-2] * x[2:]) + inner.sum() * x[0]


case("slice_1_minus_1", n_slice, lambda: (vec(7, 37),), "D")


@njit
def n_strided_inside(x):
    ev = x[::2]
    od = x[1::2]
    s = 0.0
    for i in range(od.shape[0]):
        s += ev[i] * od[i] + ev[i] ** 2
    return s


case("strided_views_inside", n_strided_inside, lambda: (vec(8, 38),), "D")


@njit
def n_sum_sq(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * (i + 1.0)
    return s


case("strided_view_passed_in", n_sum_sq, lambda: (vec(10, 39)[::2],), "D")
case("negative_stride_passed_in", n_sum_sq, lambda: (vec(6, 40)[::-1],), "D")


@njit
def n_cumsum(x):
    c = np.cumsum(x)
    return np.sum(c * c)


case("np_cumsum", n_cumsum, lambda: (vec(5, 41),), "D")


@njit
def n_logsumexp(x):
    m = x.max()
    return m + math.log(np.sum(np.exp(x - m)))


case("np_logsumexp_max", n_logsumexp, lambda: (vec(6, 42, -2.0, 2.0),), "D")


# --- 2-D arrays, layouts, views ----------------------------------------------------------------


@njit
def t_quadratic_form(a, x):
    s = 0.0
    m, n = a.shape
    for i in range(m):
        for j in range(n):
            s += x[i] * a[i, j] * x[j]
    return s


case("2d_c_order", t_quadratic_form, lambda: (mat(3, 3, 43), vec(3, 44)), "DD")
case("2d_fortran_order", t_quadratic_form, lambda: (mat(3, 3, 45, "F"), vec(3, 46)), "DD")
case("2d_transposed_passed_in", t_quadratic_form, lambda: (mat(3, 3, 47).T, vec(3, 48)), "DD")
case("2d_strided_block_passed_in", t_quadratic_form,
     lambda: (mat(6, 5, 49)[::2, 1:4], vec(3, 50)), "DD")


@njit
def t_transpose_inside(a):
    t = a.T
    s = 0.0
    for i in range(t.shape[0]):
        for j in range(t.shape[1]):
            s += (i + 1.0) * t[i, j] ** 2 + t[i, j] * t[i, 0]
    return s


case("2d_transpose_inside", t_transpose_inside, lambda: (mat(3, 4, 51),), "D")


@njit
def t_np_2d(a, b):
    col = a[:, 1]
    row = b[0]
    s = 0.0
    for i in range(col.shape[0]):
        s += col[i] * row[i] + math.exp(a[i, 2]) * b[i, i]
    return s + a.sum() * np.sum(b)


case("2d_column_row_views_and_sum", t_np_2d, lambda: (mat(3, 3, 52), mat(3, 3, 53)), "DD")


@njit
def t_matmul_sum(a, b, w):
    m, k = a.shape
    n = b.shape[1]
    s = 0.0
    for i in range(m):
        for j in range(n):
            c = 0.0
            for p in range(k):
                c += a[i, p] * b[p, j]
            s += w[i, j] * c * c
    return s


case("matmul_triple_loop", t_matmul_sum, lambda: (mat(3, 4, 54), mat(4, 2, 55), mat(3, 2, 56)),
     "DDC")


@njit
def t_matmul_out(c, a, b):
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            c[i, j] = 0.0
            for p in range(k):
                c[i, j] += a[i, p] * b[p, j]


case("matmul_triple_loop_output", t_matmul_out,
     lambda: (np.zeros((2, 3)), mat(2, 3, 57), mat(3, 3, 58)), "DDD", ret=Const)
case("matmul_output_fortran_transposed", t_matmul_out,
     lambda: (np.zeros((2, 2), order="F"), mat(3, 2, 59).T, mat(3, 2, 60, "F")), "DDD",
     ret=Const)


@njit
def t_3d(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                s += math.cos(a[i, j, k]) * (i - j + k + 0.5)
    return s


case("3d_array", t_3d, lambda: (_rng(61).uniform(-1, 1, (2, 3, 2)),), "D")


# --- calls and recursion -----------------------------------------------------------------------


@njit
def _helper(x):
    return x * math.sin(x) + 1.0


@njit
def c_calls_helper(x, y):
    return _helper(x) + _helper(x * y) * _helper(y)


case("calls_njit_helper", c_calls_helper, lambda: (0.7, 1.3), "AA")


@njit
def _weighted_term(v, c):
    return c * v * v + math.exp(-v)


@njit
def c_helper_in_loop(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += _weighted_term(x[i], c) * _weighted_term(c, x[i])
    return s


case("helper_called_in_loop", c_helper_in_loop, lambda: (vec(5, 62), 0.9), "DA")


@njit
def _array_helper(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += c * x[i] ** 2
    return s


@njit
def c_calls_array_helper(x, c):
    return _array_helper(x, c) + _array_helper(x[1:], c * c)


case("helper_with_array_and_slice", c_calls_array_helper, lambda: (vec(5, 63), 1.5), "DA")


@njit
def _accumulate_squares(out, x, k):
    for i in range(x.shape[0]):
        out[i] += k * x[i] * x[i]


@njit
def c_helper_mutates(out, x):
    _accumulate_squares(out, x, 2.0)
    _accumulate_squares(out, out, 0.5)
    return out.sum()


case("helper_mutates_array", c_helper_mutates, lambda: (np.zeros(3), vec(3, 64)), "DD")


@njit
def _polar(x, y):
    return math.hypot(x, y), math.atan2(y, x)


@njit
def c_tuple_internal(x, y):
    r, t = _polar(x, y)
    return r * math.cos(2.0 * t) + t


case("helper_returns_tuple", c_tuple_internal, lambda: (1.1, 0.6), "AA")


@njit
def _rpow(x, n):
    if n == 0:
        return 1.0
    return x * _rpow(x, n - 1)


@njit
def c_recursive_pow(x, n):
    return _rpow(x, n) + x


case("recursive_pow", c_recursive_pow, lambda: (1.2, 6), "AC")


@njit
def _rsum(a, lo, hi):
    if hi - lo == 1:
        return a[lo] * a[lo]
    mid = (lo + hi) // 2
    return _rsum(a, lo, mid) + math.sin(_rsum(a, mid, hi))


@njit
def c_recursive_range_sum(a):
    return _rsum(a, 0, a.shape[0])


case("recursive_sum_over_range", c_recursive_range_sum, lambda: (vec(6, 65),), "D")


@njit
def _horner(c, x, i):
    if i == c.shape[0] - 1:
        return c[i]
    return c[i] + x * _horner(c, x, i + 1)


@njit
def c_recursive_horner(c, x):
    return _horner(c, x, 0)


case("recursive_horner", c_recursive_horner, lambda: (vec(5, 66), 0.8), "DA")
case("recursive_horner_const_coeffs", c_recursive_horner, lambda: (vec(4, 67), -0.6), "CA")


# --- functions returning nothing (results written into an output array) ------------------------


@njit
def r_write_out(out, x, c):
    for i in range(x.shape[0]):
        out[i] = c * math.sin(x[i]) + x[0] * x[i]


case("output_array_active_scalar", r_write_out, lambda: (np.zeros(5), vec(5, 68), 2.0), "DDA",
     ret=Const)
case("output_array_const_scalar", r_write_out, lambda: (np.zeros(4), vec(4, 69), 0.5), "DDC",
     ret=Const)


@njit
def r_stencil(y, x):
    n = x.shape[0]
    for i in range(1, n - 1):
        y[i - 1] = x[i - 1] - 2.0 * x[i] + x[i + 1] * x[i]


case("stencil_output", r_stencil, lambda: (np.zeros(4), vec(6, 70)), "DD", ret=Const)


@njit
def r_softmax(out, x):
    m = x.max()
    s = 0.0
    for i in range(x.shape[0]):
        out[i] = math.exp(x[i] - m)
        s += out[i]
    for i in range(x.shape[0]):
        out[i] /= s


case("softmax_output", r_softmax, lambda: (np.zeros(5), vec(5, 71)), "DD", ret=Const)


@njit
def r_accumulate_out(out, x):
    for i in range(out.shape[0]):
        out[i] += x[i] * out[i] + math.sin(x[i])


case("output_read_and_accumulated", r_accumulate_out, lambda: (vec(4, 72), vec(4, 73)), "DD",
     ret=Const)


@njit
def r_write_out_2d(out, a):
    m, n = a.shape
    for i in range(m):
        for j in range(n):
            out[j, i] = a[i, j] * a[i, j] - a[i, 0]


case("output_2d_fortran", r_write_out_2d,
     lambda: (np.zeros((3, 2), order="F"), mat(2, 3, 74)), "DD", ret=Const)


@njit
def r_cube(y, x):
    y[()] = x[()] ** 3


case("zero_d_cube", r_cube, lambda: (np.array(0.0), np.array(4.0)), "DD", ret=Const)


@njit
def r_alloc_then_write(out, x):
    tmp = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        tmp[i] = math.exp(x[i])
    tot = tmp.sum()
    for i in range(x.shape[0]):
        out[i] = tmp[i] / tot * x[i]


case("output_from_temporary", r_alloc_then_write, lambda: (np.zeros(4), vec(4, 75)), "DD",
     ret=Const)


# --- float32 -----------------------------------------------------------------------------------


@njit
def f32_sum(x):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += x[i] * x[i] + np.float32(0.5) * x[i]
    return s


case("float32_array_sum", f32_sum, lambda: (vec(6, 76, dtype=np.float32),), "D", float32=True)


@njit
def f32_with_scale(x, c):
    return np.sum(np.exp(x)) * c + x[0] * np.float32(c)


case("float32_array_active_f64_scalar", f32_with_scale,
     lambda: (vec(5, 77, dtype=np.float32), 0.8), "DA", float32=True)


@njit
def f32_out(out, x):
    for i in range(x.shape[0]):
        out[i] = math.exp(x[i]) * np.float32(0.25) + x[i] * x[i]


case("float32_output_array", f32_out,
     lambda: (np.zeros(4, np.float32), vec(4, 78, dtype=np.float32)), "DD", ret=Const,
     float32=True)


@njit
def f32_2d(a):
    s = np.float32(0.0)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += math.sin(a[i, j]) * a[j, i]
    return s


case("float32_2d", f32_2d, lambda: (mat(3, 3, 79).astype(np.float32),), "D", float32=True)


# --- fastmath ----------------------------------------------------------------------------------


@njit(fastmath=True)
def fm_norm(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return math.sqrt(s) / x.shape[0]


case("fastmath_norm_reduction", fm_norm, lambda: (vec(16, 80),), "D")


@njit(fastmath=True)
def fm_loop(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] * y[i]) / (1.0 + y[i] * y[i])
    return s


case("fastmath_loop_two_arrays", fm_loop, lambda: (vec(9, 81), vec(9, 82)), "DD")


@njit(fastmath=True)
def fm_out(out, x, c):
    for i in range(x.shape[0]):
        out[i] = c * x[i] * x[i] + math.sqrt(x[i] + 2.0)


case("fastmath_output_array", fm_out, lambda: (np.zeros(8), vec(8, 83), 1.5), "DDA",
     ret=Const)


# --- whole programs ----------------------------------------------------------------------------


@njit
def p_diffusion(u, dt, steps):
    n = u.shape[0]
    v = u.copy()
    for _ in range(steps):
        w = v.copy()
        for i in range(1, n - 1):
            v[i] = w[i] + dt * (w[i - 1] - 2.0 * w[i] + w[i + 1])
    return np.sum(v * v)


case("diffusion_with_copies", p_diffusion, lambda: (vec(6, 84), 0.2, 4), "DAC")


@njit
def p_logistic_loss(w, xs, ys):
    loss = 0.0
    for i in range(xs.shape[0]):
        z = w[0] + w[1] * xs[i]
        loss += math.log1p(math.exp(-ys[i] * z))
    return loss / xs.shape[0]


case("logistic_loss_const_data", p_logistic_loss,
     lambda: (np.array([0.2, -0.4]), vec(8, 85), np.sign(vec(8, 86))), "DCC")


@njit
def p_matvec_tanh(a, x, y):
    m, n = a.shape
    for i in range(m):
        s = 0.0
        for j in range(n):
            s += a[i, j] * x[j]
        y[i] = math.tanh(s)
    return y.sum()


case("matvec_output_and_return", p_matvec_tanh,
     lambda: (mat(3, 4, 87), vec(4, 88), np.zeros(3)), "DDD")


@njit
def p_rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


case("rosenbrock", p_rosenbrock, lambda: (vec(6, 89, 0.0, 1.2),), "D")
