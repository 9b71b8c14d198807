"""A corpus of parallel functions (``prange`` loops, parallel reductions and array expressions),
written as Numba users write them, for tests/parallel. Each is compiled twice by the tests: with
``parallel=True`` and without (the reference)."""

import numba
import numpy as np
from numba import prange


def reduce_sum(x, w):
    s = 0.0
    for i in prange(x.shape[0]):
        s += w[i] * np.sin(x[i])
    return s


def reduce_two_in_one(x):
    s = 0.0
    t = 0.0
    for i in prange(x.shape[0]):
        s += x[i]
        t += x[i] * x[i]
    return s * t


def reduce_product(x):
    p = 1.0
    for i in prange(x.shape[0]):
        p *= 1.0 + 0.1 * x[i]
    return p


def reduce_max(x, w):
    m = -1e300
    for i in prange(x.shape[0]):
        m = max(m, x[i] * w[i])
    return m


def reduce_min(x):
    m = 1e300
    for i in prange(x.shape[0]):
        m = min(m, np.cos(3.0 * x[i]))
    return m


def reduce_with_index(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i] * x[i] * i
    return s


def elementwise(x, y):
    for i in prange(x.shape[0]):
        y[i] = np.sin(x[i]) * x[i]
    return np.sum(y * y)


def stencil(x, y):
    n = x.shape[0]
    for i in prange(1, n - 1):
        y[i] = x[i - 1] - 2.0 * x[i] + x[i + 1]
    s = 0.0
    for i in range(n):
        s += y[i] * y[i] * (i + 1)
    return s


def gather(x, w, idx, out):
    # a gather in the primal (race-free); its adjoint scatters through repeated indices
    for i in prange(w.shape[0]):
        out[i] = w[i] * x[idx[i]]
    s = 0.0
    for j in range(out.shape[0]):
        s += out[j] ** 2 * (j + 1)
    return s


def gather_reduce(x, w, idx):
    s = 0.0
    for i in prange(x.shape[0]):
        s += w[idx[i]] * x[i]
    return s * s


def rows(A, x):
    n, m = A.shape
    s = 0.0
    for i in prange(n):
        r = 0.0
        for j in range(m):
            r += A[i, j] * x[j]
        s += np.tanh(r)
    return s


def array_expression(a, b):
    return np.sum(np.exp(a) * b)


def array_assign(x, w, y):
    y[:] = np.sin(x) * w
    return np.sum(y * x)


def array_methods(x, w):
    return (x * w).sum() + np.sum(x ** 2)


def time_loop(u, tmp):
    n = u.shape[0]
    for _ in range(4):
        for i in prange(1, n - 1):
            tmp[i] = u[i] + 0.1 * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        for i in prange(1, n - 1):
            u[i] = tmp[i]
    s = 0.0
    for i in range(n):
        s += u[i] * u[i] * (1.0 + i)
    return s


def swapped_grids(u):
    """Explicit diffusion with two grids swapped after each step (``v, w = w, v``)."""
    n = u.shape[0]
    v = u.copy()
    w = u.copy()
    for _ in range(3):
        for i in prange(1, n - 1):
            w[i] = v[i] + 0.2 * (v[i - 1] - 2.0 * v[i] + v[i + 1])
        v, w = w, v
    s = 0.0
    for i in prange(n):
        s += v[i] * v[i] * (1.0 + i)
    return s


def time_loop_reduction(u, w):
    total = 0.0
    for _ in range(3):
        s = 0.0
        for i in prange(u.shape[0]):
            s += u[i] * w[i]
        for i in prange(u.shape[0]):
            u[i] = u[i] * (1.0 + 0.01 * s)
        total += s
    return total


def two_loops(x, w):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i] * x[i]
    t = 0.0
    for i in prange(x.shape[0]):
        t += w[i] * np.cos(x[i])
    return s * t


def allocation_in_body(x):
    s = 0.0
    for i in prange(x.shape[0]):
        tmp = np.empty(3)
        tmp[0] = x[i]
        tmp[1] = x[i] * x[i]
        tmp[2] = np.sin(x[i])
        s += tmp[0] * tmp[1] + tmp[2]
    return s


def branches(x):
    s = 0.0
    for i in prange(x.shape[0]):
        if x[i] < 0.3:
            continue
        if x[i] > 0.7:
            s += np.sqrt(x[i])
        else:
            s += x[i] ** 3
    return s


def select_in_body(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += x[i] if x[i] > 0.5 else -x[i] * x[i]
    return s


@numba.njit
def _bump(a, b):
    return a * np.exp(-b * b)


def calls_njit(x, w):
    s = 0.0
    for i in prange(x.shape[0]):
        s += _bump(w[i], x[i])
    return s


def lennard_jones(pos):
    n = pos.shape[0]
    e = 0.0
    for i in prange(n):
        for j in range(n):
            if i != j:
                dx = pos[i, 0] - pos[j, 0]
                dy = pos[i, 1] - pos[j, 1]
                r2 = dx * dx + dy * dy + 0.5
                ir6 = 1.0 / (r2 * r2 * r2)
                e += ir6 * ir6 - ir6
    return e


def stencil_2d(u, out):
    n, m = u.shape
    for i in prange(1, n - 1):
        for j in range(1, m - 1):
            out[i, j] = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4 * u[i, j]
    return np.sum(out * out)


def volume(a):
    n, m, k = a.shape
    s = 0.0
    for i in prange(n):
        for j in range(m):
            for l in range(k):
                s += a[i, j, l] * a[i, j, l] * (1 + i + j + l)
    return s


def softmax_rows(A, y):
    n, m = A.shape
    for i in prange(n):
        mx = A[i, 0]
        for j in range(m):
            mx = max(mx, A[i, j])
        z = 0.0
        for j in range(m):
            y[i, j] = np.exp(A[i, j] - mx)
            z += y[i, j]
        for j in range(m):
            y[i, j] /= z
    s = 0.0
    for i in range(n):
        for j in range(m):
            s += y[i, j] * (i + 2 * j + 1)
    return s


def overwritten_after(x, w):
    # The body reads x, which the caller then overwrites: its reverse cannot read x again.
    s = 0.0
    for i in prange(x.shape[0]):
        s += np.sin(x[i]) * w[i]
    for i in range(x.shape[0]):
        x[i] = 0.5 * x[i] * x[i]
    t = 0.0
    for i in prange(x.shape[0]):
        t += x[i] * w[i]
    return s * t


def scatter_add(x, w, idx, out):
    # out[idx[i]] += ...: race-free in the primal only for indices without repeats (here a
    # permutation); the reverse reads out's adjoint at idx[i], each x[i] and w[i] its own.
    for i in prange(x.shape[0]):
        out[idx[i]] += w[i] * x[i]
    s = 0.0
    for j in range(out.shape[0]):
        s += out[j] * out[j] * (j + 1)
    return s


def dot_of_temporaries(x, w):
    # np.dot (BLAS) in the body, on arrays the iteration allocates: no other thread touches
    # their adjoints.
    s = 0.0
    for i in prange(x.shape[0]):
        a = np.empty(3)
        b = np.empty(3)
        for k in range(3):
            a[k] = x[i] * (k + 1.0)
            b[k] = w[i] + k
        s += np.dot(a, b)
    return s


@numba.stencil
def _wave(p, c, r):
    return 2 * c[0, 0] - p[0, 0] + r * r * (c[-1, 0] + c[1, 0] + c[0, -1] + c[0, 1] - 4 * c[0, 0])


def numba_stencil(p, c, f):
    # A @stencil under parallel=True: its reverse keeps the shadow pointers of its forward
    # sweep, so a privatized array's copy must be chosen there already.
    _wave(p, c, 0.1, out=f)
    return np.sum(f * f)


def pair_energy(pos, sigma):
    # sigma reaches the body through a stack slot (how Numba passes a scalar to a parfor):
    # Const, its slot carries no derivative; Active, its adjoint is added by every pair.
    n = pos.shape[0]
    s2 = sigma * sigma
    e = 0.0
    for i in prange(n):
        ei = 0.0
        for j in range(n):
            if j != i:
                d = (pos[i, 0] - pos[j, 0]) ** 2 + (pos[i, 1] - pos[j, 1]) ** 2 + 0.5
                q = s2 / d
                ei += q * q - q
        e += ei
    return e
