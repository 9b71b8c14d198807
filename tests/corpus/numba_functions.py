"""A corpus of Numba functions with example arguments, for round-trip and frontend tests.

``CORPUS`` lists ``(name, function, example_args)``: ``function`` is an ``@njit`` dispatcher and
``example_args`` a tuple of values whose Numba types give the signature to compile. Calling
``function(*example_args)`` must work (``tests/test_roundtrip.py`` checks it), so that every
entry is valid Numba code. Arguments that the function mutates are built fresh by
:func:`corpus` on every call.

The functions cover what Numba lowers to distinctive IR: scalar and integer arithmetic, every
loop shape, 1-D/2-D/3-D arrays (C-contiguous, Fortran order and strided views), allocation
through NRT, NumPy reductions and ufuncs, BLAS/LAPACK (``np.dot``, ``np.linalg``), tuples,
namedtuples, records, complex numbers, ``prange``, ``fastmath``, exceptions and bounds checks,
integer and float powers, ``math`` functions, recursion, calls between jitted functions,
optionals, generators, closures, lists, strings and ``literal_unroll``.
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import literal_unroll, njit, prange

Point = namedtuple("Point", ["x", "y"])

RECORD = np.dtype(
    [("mass", np.float64), ("charge", np.int32), ("pos", np.float64, (3,))], align=True
)
WEIGHTS = np.array([0.25, 0.5, 0.25])


# --- scalars -------------------------------------------------------------------------------


@njit
def poly_scalar(x):
    return 3.0 * x**3 - 2.0 * x * x + x / 7.0 - 1.0


@njit
def int_arith(a, b):
    q = a // b
    r = a % b
    return (q << 2) ^ (r | 5) & ~b, -a // 3, abs(a - b), max(a, b), min(a, 3)


@njit
def bool_logic(a, b, c):
    return (a and not b) or (c and a != b), a ^ c, not (a or b)


@njit
def mixed_types(i, x, j):
    y = i * x + np.int32(j)
    k = np.int64(y) + np.uint8(200) + np.uint8(100)
    return y / 2, k, np.float32(x) * np.float32(1.5), int(x) % 7


@njit
def float32_ops(x, y):
    z = x * y + np.float32(0.5)
    return math.sqrt(z * z + 1) if z > 0 else -z


# --- loops ---------------------------------------------------------------------------------


@njit
def taylor_exp(x, n):
    term = 1.0
    total = 1.0
    for i in range(1, n):
        term *= x / i
        total += term
    return total


@njit
def newton_sqrt(a):
    x = max(a, 1.0)
    for _ in range(100):
        nxt = 0.5 * (x + a / x)
        if abs(nxt - x) < 1e-15:
            break
        x = nxt
    return x


@njit
def collatz(n):
    steps = 0
    while n != 1:
        n = 3 * n + 1 if n % 2 else n // 2
        steps += 1
    return steps


@njit
def nested_triangle(n):
    s = 0.0
    for i in range(n):
        for j in range(i + 1):
            if (i + j) % 3 == 0:
                continue
            s += 1.0 / (1 + i + j)
    return s


@njit
def first_negative(x):
    for i in range(x.shape[0]):
        if x[i] < 0:
            return i
    return -1


@njit
def enumerate_zip(x, y):
    s = 0.0
    for i, (a, b) in enumerate(zip(x, y)):
        s += i * a - b
    return s


@njit
def reversed_range_step(x):
    s = 0.0
    for i in range(x.size - 1, -1, -2):
        s = s * 0.5 + x[i]
    return s


# --- arrays --------------------------------------------------------------------------------


@njit
def dot_loop(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@njit
def matmul_loops(a, b):
    n, k = a.shape
    m = b.shape[1]
    c = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            acc = 0.0
            for p in range(k):
                acc += a[i, p] * b[p, j]
            c[i, j] = acc
    return c


@njit
def diffusion_step(u, dt):
    out = u.copy()
    for i in range(1, u.size - 1):
        out[i] = u[i] + dt * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    return out


@njit
def strided_sum(x):
    s = 0.0
    for v in x:
        s += v
    return s


@njit
def fortran_column_sums(a):
    out = np.empty(a.shape[1])
    for j in range(a.shape[1]):
        out[j] = a[:, j].sum()
    return out


@njit
def scale_inplace(x, s):
    for i in range(x.size):
        x[i] *= s


@njit
def slices_and_views(x):
    inner = x[1:-1]
    inner[:] = inner * 2.0
    return x[::3].sum() + x[-1] + inner[::-1][0]


@njit
def int_histogram(x, nbins):
    counts = np.zeros(nbins, dtype=np.int32)
    for v in x:
        b = min(int(v * nbins), nbins - 1)
        counts[b] += 1
    return counts


@njit
def three_d(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                s += a[i, j, k] * (i - j + k)
    return s


@njit
def reshape_transpose(x):
    m = x.reshape((2, x.size // 2))
    t = m.T.copy()
    return t.ravel()[1] + m[1].sum() + np.ascontiguousarray(m.T)[0, 1]


@njit
def global_weights(x):
    out = np.empty(x.size - 2)
    for i in range(out.size):
        out[i] = WEIGHTS[0] * x[i] + WEIGHTS[1] * x[i + 1] + WEIGHTS[2] * x[i + 2]
    return out


# --- allocation ----------------------------------------------------------------------------


@njit
def alloc_1d(n):
    a = np.empty(n)
    b = np.zeros(n)
    c = np.ones(n)
    d = np.arange(n)
    for i in range(n):
        a[i] = b[i] + c[i] * d[i]
    return a


@njit
def alloc_2d(n, m):
    a = np.zeros((n, m), dtype=np.float32)
    for i in range(n):
        a[i, :] = i
    e = np.eye(n)
    return a.sum() + np.trace(e) + np.full((2, 2), 3.0).sum()


@njit
def arange_linspace(n):
    return np.arange(0.0, 1.0, 1.0 / n).sum() + np.linspace(0.0, 1.0, n)[n // 2]


# --- NumPy functions -----------------------------------------------------------------------


@njit
def np_reductions(x):
    return x.sum(), x.mean(), x.std(), np.prod(x[:3]), x.max(), x.min(), np.argmax(x), np.argmin(x)


@njit
def np_ufuncs(x):
    return np.exp(x) * np.sqrt(np.abs(x)) + np.sin(x) ** 2 - np.log1p(x * x) + np.maximum(x, 0.5)


@njit
def np_dot_1d(x, y):
    return np.dot(x, y)


@njit
def np_matmul(a, b):
    return a @ b + np.dot(a, np.ascontiguousarray(b[:, 0])).sum()


@njit
def np_linalg(a, b):
    return np.linalg.solve(a, b), np.linalg.det(a), np.linalg.inv(a)[0, 0]


@njit
def np_cumsum_diff(x):
    c = np.cumsum(x)
    return np.diff(c), np.cumprod(x[:4])


@njit
def np_sort_where(x):
    s = np.sort(x)
    return np.where(s > 0.5, s, -s), np.searchsorted(s, 0.5), np.clip(x, 0.2, 0.8)


@njit
def np_outer_axis(x, y):
    o = np.outer(x, y)
    return o.sum(axis=0), np.empty_like(x).size, np.concatenate((x, y))


@njit
def np_bool_arrays(x):
    mask = (x > 0.3) & ~(x > 0.9)
    return np.any(mask), np.all(x >= 0), np.count_nonzero(mask), x[mask].sum()


# --- tuples, namedtuples, records ----------------------------------------------------------


@njit
def tuple_minmax(x):
    lo = x[0]
    hi = x[0]
    for v in x:
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi


@njit
def tuple_args(t, u):
    a, b, c = t
    return a * b + c + u[0] * len(u), (c, a)


@njit
def namedtuple_point(p, q):
    d = Point(p.x - q.x, p.y - q.y)
    return math.hypot(d.x, d.y), Point(d.y, d.x)


@njit
def heterogeneous_tuple(t):
    n, x, arr = t
    return n * x + arr.sum()


@njit
def literal_unroll_sum(t):
    s = 0.0
    for v in literal_unroll(t):
        s += v * 2
    return s


@njit
def record_array(recs):
    e = 0.0
    for i in range(recs.shape[0]):
        r = recs[i]
        e += r.mass * r.charge + r.pos[0] - recs["pos"][i, 2]
    return e


@njit
def record_update(recs, dt):
    for r in recs:
        r.mass += dt
        r.pos[1] = r.pos[0] * dt
    return recs[0].mass


# --- complex -------------------------------------------------------------------------------


@njit
def complex_scalar(z, w):
    u = z * w / (z + 1j) - z.conjugate()
    return abs(u) + u.real * u.imag, np.exp(z) + np.sqrt(w)


@njit
def complex_array(zs):
    acc = 0j
    for z in zs:
        acc += z * z
    return acc, np.abs(zs).sum(), np.conj(zs)[0]


@njit
def mandelbrot(cr, ci, max_iter):
    c = complex(cr, ci)
    z = 0j
    for i in range(max_iter):
        z = z * z + c
        if z.real * z.real + z.imag * z.imag > 4.0:
            return i
    return max_iter


# --- parallel and fastmath -----------------------------------------------------------------


@njit(parallel=True)
def prange_sum(x):
    s = 0.0
    for i in prange(x.size):
        s += math.sqrt(abs(x[i]))
    return s


@njit(parallel=True)
def prange_rows(a):
    out = np.empty(a.shape[0])
    for i in prange(a.shape[0]):
        acc = 0.0
        for j in range(a.shape[1]):
            acc += a[i, j] * a[i, j]
        out[i] = acc
    return out


@njit(fastmath=True)
def fastmath_norm(x):
    s = 0.0
    for v in x:
        s += v * v
    return math.sqrt(s)


@njit(fastmath=True)
def fastmath_logsumexp(x):
    m = x.max()
    s = 0.0
    for v in x:
        s += math.exp(v - m)
    return m + math.log(s)


@njit(fastmath={"nsz", "contract"})
def fastmath_partial(x, y):
    return x * y + x - y


# --- exceptions ----------------------------------------------------------------------------


@njit
def checked_log(x):
    if x <= 0.0:
        raise ValueError("checked_log needs a positive argument")
    return math.log(x)


@njit(boundscheck=True)
def bounds_checked(x, i):
    return x[i] + x[i - 1]


@njit
def index_error_manual(x, i):
    if i >= x.size:
        raise IndexError("index out of range")
    assert x[i] == x[i], "NaN in input"
    return x[i]


@njit
def try_except(x):
    try:
        if x < 0:
            raise ValueError()
        r = x * 2
    except Exception:  # noqa: BLE001 - Numba matches no narrower class here
        r = -1.0
    return r


# --- powers and math -----------------------------------------------------------------------


@njit
def int_power(x, n):
    return x**n + x**2 + x**-1 + n**3


@njit
def float_power(x, y):
    return x**y + x**0.5 + 2.0**x + math.pow(x, 1.5)


@njit
def math_functions(x, y):
    return (
        math.sin(x) * math.cos(y)
        + math.tan(x / 4)
        + math.exp(-x)
        + math.log(y)
        + math.log10(y)
        + math.tanh(x)
        + math.atan2(y, x)
        + math.hypot(x, y)
        + math.erf(x)
        + math.gamma(y)
        + math.lgamma(y)
        + math.asinh(x)
        + math.expm1(x)
        + math.log2(y)
        + math.atan(x)
    )


@njit
def math_predicates(x):
    return (
        math.isnan(x),
        math.isinf(x),
        math.isfinite(x),
        math.copysign(2.0, x),
        math.floor(x),
        math.ceil(x),
        math.trunc(x),
        round(x, 2),
        x % 0.7,
        -x // 0.3,
    )


# --- calls, recursion, closures, generators -----------------------------------------------


@njit
def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


@njit
def _helper_sq(v):
    return v * v + 1.0


@njit
def _helper_apply(f_arr, k):
    s = 0.0
    for v in f_arr:
        s += _helper_sq(v) ** k
    return s


@njit
def calls_helpers(x):
    return _helper_apply(x, 2) + _helper_sq(x[0])


@njit
def inner_closure(x, a):
    def scaled(v):
        return a * v + 1.0

    s = 0.0
    for v in x:
        s += scaled(v)
    return s


@njit
def _squares(n):
    for i in range(n):
        yield i * i


@njit
def generator_sum(n):
    s = 0
    for v in _squares(n):
        s += v
    return s


@njit
def function_argument(x):
    return _helper_apply(x, 1) - _helper_sq(2.0)


# --- optionals, lists, strings -------------------------------------------------------------


@njit
def optional_return(x):
    if x > 0:
        return math.sqrt(x)
    return None


@njit
def optional_argument(x, y=None):
    if y is None:
        return x
    return x + y


@njit
def optional_caller(x):
    return optional_argument(x, None) + optional_argument(x, 2.0) + optional_argument(x)


@njit
def list_build(n):
    out = [0.0]
    for i in range(1, n):
        if i % 2:
            out.append(out[-1] + i)
    return sum(out) + len(out)


@njit
def string_ops(n):
    s = "ab" * n + "c"
    t = s.upper() + "-" + s[::-1]
    return len(t) + t.find("C") + (1 if t.startswith("A") else 0) + len(str(n))


@njit
def random_walk(n, seed):
    np.random.seed(seed)
    x = 0.0
    for _ in range(n):
        x += np.random.normal()
    return x + np.random.random()


# --- the corpus ----------------------------------------------------------------------------


def _records() -> np.ndarray:
    recs = np.zeros(4, dtype=RECORD)
    recs["mass"] = [1.0, 2.0, 3.0, 4.0]
    recs["charge"] = [1, -1, 2, -2]
    recs["pos"] = np.arange(12.0).reshape(4, 3)
    return recs


def corpus() -> list[tuple[str, Callable[..., Any], tuple[Any, ...]]]:
    """``(name, dispatcher, example_args)`` for every function, with fresh argument arrays."""
    rng = np.random.default_rng(0)
    x = rng.random(16)
    y = rng.random(16)
    a = rng.random((4, 3))
    b = rng.random((3, 5))
    sq = rng.random((4, 4)) + 4 * np.eye(4)
    return [
        ("poly_scalar", poly_scalar, (1.5,)),
        ("int_arith", int_arith, (17, 5)),
        ("bool_logic", bool_logic, (True, False, True)),
        ("mixed_types", mixed_types, (3, 2.5, np.int32(7))),
        ("float32_ops", float32_ops, (np.float32(1.5), np.float32(-2.0))),
        ("taylor_exp", taylor_exp, (0.5, 20)),
        ("newton_sqrt", newton_sqrt, (2.0,)),
        ("collatz", collatz, (27,)),
        ("nested_triangle", nested_triangle, (10,)),
        ("first_negative", first_negative, (x - 0.5,)),
        ("enumerate_zip", enumerate_zip, (x, y)),
        ("reversed_range_step", reversed_range_step, (x,)),
        ("dot_loop", dot_loop, (x, y)),
        ("matmul_loops", matmul_loops, (a, b)),
        ("diffusion_step", diffusion_step, (x, 0.1)),
        ("strided_sum", strided_sum, (x[::3],)),
        ("fortran_column_sums", fortran_column_sums, (np.asfortranarray(a),)),
        ("scale_inplace", scale_inplace, (x.copy(), 2.0)),
        ("slices_and_views", slices_and_views, (x.copy(),)),
        ("int_histogram", int_histogram, (x, 5)),
        ("three_d", three_d, (rng.random((2, 3, 4)),)),
        ("reshape_transpose", reshape_transpose, (x,)),
        ("global_weights", global_weights, (x,)),
        ("alloc_1d", alloc_1d, (8,)),
        ("alloc_2d", alloc_2d, (3, 4)),
        ("arange_linspace", arange_linspace, (10,)),
        ("np_reductions", np_reductions, (x,)),
        ("np_ufuncs", np_ufuncs, (x,)),
        ("np_dot_1d", np_dot_1d, (x, y)),
        ("np_matmul", np_matmul, (a, b)),
        ("np_linalg", np_linalg, (sq, y[:4].copy())),
        ("np_cumsum_diff", np_cumsum_diff, (x,)),
        ("np_sort_where", np_sort_where, (x,)),
        ("np_outer_axis", np_outer_axis, (x[:4].copy(), y[:3].copy())),
        ("np_bool_arrays", np_bool_arrays, (x,)),
        ("tuple_minmax", tuple_minmax, (x,)),
        ("tuple_args", tuple_args, ((1.0, 2, 3.5), (4, 5))),
        ("namedtuple_point", namedtuple_point, (Point(1.0, 2.0), Point(0.5, -1.0))),
        ("heterogeneous_tuple", heterogeneous_tuple, ((3, 0.5, x),)),
        ("literal_unroll_sum", literal_unroll_sum, ((1, 2.5, np.float32(3.0)),)),
        ("record_array", record_array, (_records(),)),
        ("record_update", record_update, (_records(), 0.1)),
        ("complex_scalar", complex_scalar, (1.0 + 2.0j, 0.5 - 1.0j)),
        ("complex_array", complex_array, (x + 1j * y,)),
        ("mandelbrot", mandelbrot, (-0.5, 0.5, 50)),
        ("prange_sum", prange_sum, (x,)),
        ("prange_rows", prange_rows, (a,)),
        ("fastmath_norm", fastmath_norm, (x,)),
        ("fastmath_logsumexp", fastmath_logsumexp, (x,)),
        ("fastmath_partial", fastmath_partial, (1.5, 2.5)),
        ("checked_log", checked_log, (2.0,)),
        ("bounds_checked", bounds_checked, (x, 3)),
        ("index_error_manual", index_error_manual, (x, 2)),
        ("try_except", try_except, (1.5,)),
        ("int_power", int_power, (1.5, 3)),
        ("float_power", float_power, (1.5, 2.5)),
        ("math_functions", math_functions, (0.7, 1.3)),
        ("math_predicates", math_predicates, (2.345,)),
        ("fib", fib, (10,)),
        ("calls_helpers", calls_helpers, (x,)),
        ("inner_closure", inner_closure, (x, 3.0)),
        ("generator_sum", generator_sum, (10,)),
        ("function_argument", function_argument, (x,)),
        ("optional_return", optional_return, (2.0,)),
        ("optional_argument", optional_argument, (1.0, 2.0)),
        ("optional_caller", optional_caller, (1.0,)),
        ("list_build", list_build, (10,)),
        ("string_ops", string_ops, (3,)),
        ("random_walk", random_walk, (10, 42)),
    ]


CORPUS = corpus()
