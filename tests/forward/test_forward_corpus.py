"""Forward mode on the corpus (tests/forward/corpus.py) against finite differences.

For every case: the tangents from ``autodiff(Forward, ...)`` (the returned one and those written
into the shadows of Duplicated arrays) match central finite differences along the same tangent;
``ForwardWithPrimal`` returns the primal result of calling the function; ``BatchDuplicated`` of
width 3 gives what three width-1 calls give. ``gradient``, ``jacobian`` (several chunk sizes)
and ``jvp`` are checked on a few array functions.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import pyzyme
from pyzyme import (
    BatchDuplicated,
    Const,
    Duplicated,
    Forward,
    ForwardWithPrimal,
    autodiff,
    gradient,
    jacfwd,
    jacobian,
    jvp,
)

from . import fd
from .corpus import CASES, UNSUPPORTED, mat, vec

WIDTH = 3


def _params(kind: str):
    out = []
    for c in CASES:
        marks = ()
        if kind in c.xfail:
            marks = (pytest.mark.xfail(strict=True, reason=c.xfail[kind]),)
        out.append(pytest.param(c, id=c.name, marks=marks))
    return out


def _seed(name: str, lane: int = 0) -> int:
    return zlib.crc32(f"{name}/{lane}".encode())


def _annotate(args, pattern, tangents):
    return [Duplicated(a, t) if p == "D" else Const(a) for a, p, t in zip(args, pattern, tangents)]


def _ad_outputs(ret_tangent, args, pattern, tangents) -> list[np.ndarray]:
    outs = [fd.flat(ret_tangent)]
    for a, p, t in zip(args, pattern, tangents):
        if p == "D" and isinstance(a, np.ndarray):
            outs.append(fd.flat(t))
    return outs


def _run_forward(c, tangents, mode=Forward):
    """autodiff on fresh arguments; returns (result tuple, args, shadows as passed)."""
    args = list(c.make_args())
    shadows = [t.copy() if isinstance(t, np.ndarray) else t for t in tangents]
    res = autodiff(mode, c.fn, c.ret, *_annotate(args, c.pattern, shadows))
    return res, args, shadows


@pytest.mark.parametrize("c", _params("fd"))
def test_tangents_match_finite_differences(c):
    tangents = fd.random_tangents(c.make_args(), c.pattern, _seed(c.name))
    res, args, shadows = _run_forward(c, tangents)
    if c.ret is Const:
        assert res == ()
        ret_tangent = None
    else:
        assert len(res) == 2
        ret_tangent = res[1]
    ad = _ad_outputs(ret_tangent, args, c.pattern, shadows)
    expected = fd.directional(c.fn, c.make_args, c.pattern, tangents, c.float32)
    fd.assert_close(ad, expected, c.float32, what=c.name)


@pytest.mark.parametrize("c", _params("primal"))
def test_forward_with_primal_returns_primal(c):
    tangents = fd.random_tangents(c.make_args(), c.pattern, _seed(c.name))
    res, args, _ = _run_forward(c, tangents, ForwardWithPrimal)
    ref_args = list(c.make_args())
    expected = c.fn(*ref_args)
    assert len(res) == (1 if c.ret is Const else 2)
    tol = {"rtol": 1e-6, "atol": 1e-7} if c.float32 else {"rtol": 1e-13, "atol": 1e-15}
    if expected is None:
        assert res[0] is None
    else:
        np.testing.assert_allclose(fd.flat(res[0]), fd.flat(expected), **tol)
        assert type(res[0]) is type(expected) or isinstance(expected, np.ndarray) or \
            np.isscalar(expected)
    # arrays the function mutates end with the values a plain call leaves in them
    for a, r in zip(args, ref_args):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, r, **tol)


@pytest.mark.parametrize("c", _params("batch"))
def test_batch_width3_equals_three_width1_runs(c):
    lanes = [fd.random_tangents(c.make_args(), c.pattern, _seed(c.name, k))
             for k in range(WIDTH)]
    singles = []
    for lane in lanes:
        res, args, shadows = _run_forward(c, lane)
        singles.append(_ad_outputs(res[1] if res else None, args, c.pattern, shadows))

    args = list(c.make_args())
    batch_shadows = [[(lane[i].copy() if isinstance(lane[i], np.ndarray) else lane[i])
                      for lane in lanes] for i in range(len(args))]
    anns = [BatchDuplicated(a, tuple(s)) if p == "D" else Const(a)
            for a, p, s in zip(args, c.pattern, batch_shadows)]
    ret = BatchDuplicated if c.ret is Duplicated else Const
    res = autodiff(Forward, c.fn, ret, *anns)
    if ret is Const:
        assert res == ()
        ret_tangents = (None,) * WIDTH
    else:
        primal, ret_tangents = res
        assert len(ret_tangents) == WIDTH
        np.testing.assert_allclose(fd.flat(primal), fd.flat(c.fn(*c.make_args())),
                                   rtol=1e-6 if c.float32 else 1e-13)
    for k in range(WIDTH):
        lane_shadows = [s[k] if p == "D" else None for s, p in zip(batch_shadows, c.pattern)]
        batched = _ad_outputs(ret_tangents[k], args, c.pattern, lane_shadows)
        for b, s in zip(batched, singles[k]):
            np.testing.assert_allclose(b, s, rtol=1e-6 if c.float32 else 1e-14, atol=0,
                                       err_msg=f"{c.name}: lane {k}")


@pytest.mark.parametrize("c", [pytest.param(c, id=c.name) for c in UNSUPPORTED])
def test_lapack_calls_are_unsupported(c):
    tangents = fd.random_tangents(c.make_args(), c.pattern, 0)
    with pytest.raises(pyzyme.UnsupportedError, match=r"numba_ez_gesdd"):
        _run_forward(c, tangents)


# --- gradient, jacobian, jvp, jacfwd ---------------------------------------------------------


def _fd_gradient(f, x, float32=False):
    x = np.asarray(x, dtype=np.float64)
    out = []
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = 1.0
        d = fd.directional(f, lambda: (x.copy(),), "D", [e.reshape(x.shape)], float32)[0]
        out.append(d)
    return np.array(out).T  # (n_out, n_in)


def g_rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def g_soft_norm(x):
    return np.sqrt(np.sum(x * x) + 1.0) * np.exp(-x[0])


def j_stencil(x):
    n = x.shape[0]
    out = np.empty(n - 1)
    for i in range(n - 1):
        out[i] = x[i] * x[i + 1] + np.sin(x[i])
    return out


def j_polar(x):
    return np.array([np.hypot(x[0], x[1]), np.arctan2(x[1], x[0]), x[0] * x[1] * x[2]])


GRADIENT_FUNCS = [("rosenbrock", g_rosenbrock, vec(7, 60)),
                  ("soft_norm", g_soft_norm, vec(5, 61))]
JACOBIAN_FUNCS = [("stencil", j_stencil, vec(7, 62)), ("polar", j_polar, vec(3, 63, 0.5, 1.5))]


@pytest.mark.parametrize("chunk", [None, 1, 3])
@pytest.mark.parametrize("name,f,x", GRADIENT_FUNCS, ids=[g[0] for g in GRADIENT_FUNCS])
def test_gradient_forward(name, f, x, chunk):
    g = gradient(Forward, f, x.copy(), chunk=chunk)
    assert isinstance(g, tuple) and len(g) == x.size
    assert all(isinstance(v, float) for v in g)
    np.testing.assert_allclose(g, _fd_gradient(f, x)[0], **fd.F64_TOL)


@pytest.mark.parametrize("chunk", [None, 1, 3])
@pytest.mark.parametrize("name,f,x", JACOBIAN_FUNCS, ids=[j[0] for j in JACOBIAN_FUNCS])
def test_jacobian_forward(name, f, x, chunk):
    jac = jacobian(Forward, f, x.copy(), chunk=chunk)
    expected = _fd_gradient(f, x)
    assert jac.shape == expected.shape
    np.testing.assert_allclose(jac, expected, **fd.F64_TOL)


def test_jacobian_of_2d_input_has_shape_out_plus_in():
    a = mat(2, 3, 64)

    def f(a):
        return np.array([a[0, 0] * a[1, 2], a[0, 1] + a[1, 0] ** 2])

    jac = jacobian(Forward, f, a.copy(), chunk=4)
    assert jac.shape == (2, 2, 3)     # JAX's out.shape + in.shape
    np.testing.assert_allclose(jac.reshape(2, 6),
                               _fd_gradient(lambda v: f(v.reshape(2, 3)), a.ravel()),
                               **fd.F64_TOL)


def test_jacfwd_matches_jacobian():
    x = vec(5, 65)
    np.testing.assert_allclose(jacfwd(j_stencil)(x), jacobian(Forward, j_stencil, x),
                               rtol=1e-14)


def test_jacfwd_argnums_other_args_const():
    def f(c, x):
        return np.sin(x) * c

    x = vec(3, 66)
    jac = jacfwd(f, argnums=1)(2.5, x)
    np.testing.assert_allclose(jac, np.diag(2.5 * np.cos(x)), rtol=1e-14)


def test_jvp_scalar_and_array():
    def f(x, a):
        s = 0.0
        for i in range(a.shape[0]):
            s += np.sin(x * a[i])
        return s

    a = vec(4, 67)
    t = vec(4, 68)
    primal, tangent = jvp(f, (0.7, a.copy()), (0.3, t.copy()))
    assert primal == pytest.approx(f(0.7, a), rel=1e-14)
    expected = fd.directional(f, lambda: (0.7, a.copy()), "DD", [0.3, t])[0]
    np.testing.assert_allclose(tangent, expected[0], **fd.F64_TOL)
