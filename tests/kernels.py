"""Kernels several test modules differentiate, and what they do with them, defined once."""

import numba
import numpy as np

from pyzyme.settings import Options, using


@numba.njit
def matmul(A, B, C):
    """``C = A @ B`` as the triple loop the seed documents differentiate."""
    n, k = A.shape
    m = B.shape[1]
    for i in range(n):
        for j in range(m):
            s = 0.0
            for p in range(k):
                s += A[i, p] * B[p, j]
            C[i, j] = s


@numba.njit
def taylor(x, n):
    """The seed documents' Taylor series ``sum(x ** i / i for i in range(1, n))``."""
    s = 0.0
    for i in range(1, n):
        s += x ** i / i
    return s


@numba.njit
def double_buffered(u, c, steps):
    """A 1-D diffusion stencil writing into a second array and swapping the two
    (``v, w = w, v``), then the sum of squares of the last state: its loop carries pointers,
    its step is linear."""
    n = u.shape[0]
    v = u.copy()
    w = np.empty_like(u)
    for _ in range(steps):
        w[0] = v[0]
        w[n - 1] = v[n - 1]
        for i in range(1, n - 1):
            w[i] = v[i] + c * (v[i - 1] - 2.0 * v[i] + v[i + 1])
        v, w = w, v
    s = 0.0
    for i in range(n):
        s += v[i] * v[i]
    return s


def njit_source(source: str, name: str = "f"):
    """``@njit`` of the function ``name`` that ``source`` defines (with ``np`` in scope): the
    property-based tests write their programs as text."""
    scope = {"np": np}
    exec(source, scope)  # noqa: S102
    return numba.njit(scope[name])


def in_sweep_order():
    """A context in which derivatives are built with their adjoints summed exactly in the
    reverse sweep's order (``Options(reassociate_adjoints=False)``), so that two derivatives
    that make the same sums (split and combined mode) can be compared bitwise: reassociated,
    LLVM could vectorize each its own way, differently on AVX2 and AVX-512 CPUs."""
    return using(Options(reassociate_adjoints=False))


def on_and_off(call, option: str):
    """``(call(), call())`` with the loop rewrite ``option`` (``"distribute_loops"``,
    ``"interchange_loops"``) on, then off: distinct compiled derivatives, their adjoints summed
    in the sweep's order (reassociated, the two could vectorize differently), so that they can
    be compared bitwise."""
    with using(Options(reassociate_adjoints=False, **{option: False})):
        off = call()
    with using(Options(reassociate_adjoints=False)):
        on = call()
    return on, off


def check_gradient(f, w, x, dw, fd_atol: float = 1e-7) -> None:
    """``dw``, the gradient of ``f(w, x)`` in the array ``w``, against forward mode (to
    rounding) and central finite differences, entry by entry."""
    import pytest

    import pyzyme

    for k in np.ndindex(w.shape):
        t = np.zeros_like(w)
        t[k] = 1.0
        _, tangent = pyzyme.autodiff(pyzyme.Forward, f, pyzyme.Duplicated(w.copy(), t),
                                     pyzyme.Const(x))
        assert dw[k] == pytest.approx(tangent, rel=1e-12, abs=1e-13)
        e = 1e-6
        up, down = w.copy(), w.copy()
        up[k] += e
        down[k] -= e
        assert dw[k] == pytest.approx((f(up, x) - f(down, x)) / (2 * e), rel=1e-6,
                                      abs=fd_atol)


def central_gradient(f, x, *rest, h: float = 1e-6):
    """The gradient of ``f(x, *rest)`` in the array ``x`` by central differences, entry by
    entry."""
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[k] += h
        down[k] -= h
        g[k] = (f(up, *rest) - f(down, *rest)) / (2 * h)
    return g
