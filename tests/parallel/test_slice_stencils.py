"""Stencils written with slices of one array under ``parallel=True`` (``w[:-2, 1:-1] +
w[2:, 1:-1] + ...``): Numba hands the loop body each slice as an array of its own, and the
reverse sweep added into all of them atomically, the gradient slower at 2 threads than at 1.
Before differentiating, a copy of the body reads them as one array at constant offsets,
launched where a test finds them so (:mod:`pyzyme.transforms.view_bases`), its adjoints owned
cell by cell. Against the same functions without ``parallel=True`` and central differences, at
1, 2 and 4 threads, repeated; with arrays that fail the test (Fortran order, a step in the
slice), which run the body as written; and the analysis of the copy."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse
from pyzyme.analysis.parallel_access import owned_arrays
from pyzyme.ir import parse_module
from pyzyme.transforms.parallel_body import slot_loads

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)
RNG = np.random.default_rng(11)


def _repeated(threads, times, check):
    """``check()`` ``times`` times at ``threads`` threads (lost updates would show as a
    short, random gradient), the process's thread count restored after."""
    numba.set_num_threads(threads)
    try:
        for _ in range(times):
            check()
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def _step(v, w, c):
    v[1:-1, 1:-1] = w[1:-1, 1:-1] + c * (w[:-2, 1:-1] + w[2:, 1:-1] + w[1:-1, :-2]
                                         + w[1:-1, 2:] - 4.0 * w[1:-1, 1:-1])


def _diffuse(u, c, steps):
    v = u.copy()
    w = u.copy()
    for _ in range(steps):
        _step(v, w, c)
        v, w = w, v
    return np.sum(w * w)


def _sharpen(w):
    v = np.zeros_like(w)
    v[1:-1] = w[:-2] * w[2:] - np.sin(w[1:-1])
    return np.sum(v * v)


def _heat(u, c, steps):
    # in place: Numba computes the right side into a temporary, then copies it into u
    for _ in range(steps):
        u[1:-1] = u[1:-1] + c * (u[:-2] - 2.0 * u[1:-1] + u[2:])
    return np.sum(u * u)


def _scale_interior(v, w, c):
    # views of two arrays, none of one array twice: only their strides are made constant
    v[1:-1, 1:-1] = c * np.tanh(w[1:-1, 1:-1])


def _second_difference(u):
    # slices of rows of a C-ordered array: contiguous views, their rows' length from dims
    d = u[2:] - 2.0 * u[1:-1] + u[:-2]
    return np.sum(d * d)


def _compile(parallel):
    step = numba.njit(parallel=parallel)(_step)
    glb = dict(_diffuse.__globals__, _step=step)
    diffuse = numba.njit(parallel=parallel)(
        type(_diffuse)(_diffuse.__code__, glb, "_diffuse"))
    return (step, diffuse, numba.njit(parallel=parallel)(_sharpen),
            numba.njit(parallel=parallel)(_heat), numba.njit(parallel=parallel)(_scale_interior),
            numba.njit(parallel=parallel)(_second_difference))


STEP, DIFFUSE, SHARPEN, HEAT, SCALE, SECOND = _compile(True)
STEP_SERIAL, DIFFUSE_SERIAL, SHARPEN_SERIAL, HEAT_SERIAL, SCALE_SERIAL, SECOND_SERIAL = \
    _compile(False)


def _step_gradient(step, w, c, dv):
    v, dw, dv = w.copy(), np.zeros_like(w), dv.copy()
    (_, _, dc), = pyzyme.autodiff(Reverse, step, Const, Duplicated(v, dv),
                                  Duplicated(w, dw), Active(c))
    return dw, dc


@pytest.mark.parametrize("threads", THREADS)
def test_step_against_the_serial_function(threads):
    w, dv = RNG.standard_normal((61, 47)), RNG.standard_normal((61, 47))
    want = _step_gradient(STEP_SERIAL, w, 0.2, dv)

    def check():
        dw, dc = _step_gradient(STEP, w, 0.2, dv)
        np.testing.assert_allclose(dw, want[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dc, want[1], rtol=1e-12)
    _repeated(threads, 10, check)


def test_step_against_central_differences():
    w, dv = RNG.standard_normal((30, 20)), RNG.standard_normal((30, 20))
    dw, dc = _step_gradient(STEP, w, 0.2, dv)

    def loss(w, c, v0=w.copy()):
        v = v0.copy()     # v's border is not w's: only its interior depends on w
        STEP(v, w, c)
        return np.sum(v * dv)
    h = 1e-6
    for i, j in [(0, 0), (1, 1), (0, 5), (15, 0), (29, 19), (14, 10), (28, 1)]:
        e = np.zeros_like(w)
        e[i, j] = h
        fd = (loss(w + e, 0.2) - loss(w - e, 0.2)) / (2 * h)
        assert dw[i, j] == pytest.approx(fd, rel=1e-7, abs=1e-8), (i, j)
    fd = (loss(w, 0.2 + h) - loss(w, 0.2 - h)) / (2 * h)
    assert dc == pytest.approx(fd, rel=1e-7)


def _diffuse_gradient(diffuse, u, c, steps):
    du = np.zeros_like(u)
    (_, dc, _), = pyzyme.autodiff(Reverse, diffuse, Active, Duplicated(u, du), Active(c),
                                  Const(steps))
    return du, dc


@pytest.mark.parametrize("threads", THREADS)
def test_time_loop_with_swapped_grids(threads):
    u = RNG.random((40, 33))
    want = _diffuse_gradient(DIFFUSE_SERIAL, u, 0.1, 6)

    def check():
        du, dc = _diffuse_gradient(DIFFUSE, u, 0.1, 6)
        np.testing.assert_allclose(du, want[0], rtol=1e-11, atol=1e-12)
        assert dc == pytest.approx(want[1], rel=1e-11)
    _repeated(threads, 5, check)


def test_time_loop_against_central_differences():
    u = RNG.random((12, 9))
    du, dc = _diffuse_gradient(DIFFUSE, u, 0.1, 4)
    h = 1e-6
    fd = (DIFFUSE(u, 0.1 + h, 4) - DIFFUSE(u, 0.1 - h, 4)) / (2 * h)
    assert dc == pytest.approx(fd, rel=1e-7)
    for i, j in [(0, 0), (5, 4), (11, 8), (1, 7)]:
        e = np.zeros_like(u)
        e[i, j] = h
        fd = (DIFFUSE(u + e, 0.1, 4) - DIFFUSE(u - e, 0.1, 4)) / (2 * h)
        assert du[i, j] == pytest.approx(fd, rel=1e-7, abs=1e-9), (i, j)


@pytest.mark.parametrize("layout", ["fortran", "strided"])
def test_arrays_the_copy_does_not_fit_run_the_body_as_written(layout):
    """Fortran order (the inner stride is a row) and a slice with a step fail the test before
    the launch: the body as written runs, its adjoints added atomically."""
    base = RNG.standard_normal((50, 70))
    w = np.asfortranarray(base) if layout == "fortran" else base[::2, ::3]
    dv = RNG.standard_normal(w.shape)
    want = _step_gradient(STEP_SERIAL, np.ascontiguousarray(w), 0.3, dv)

    def check():
        v, dw, dvc = w.copy(order="K"), np.zeros_like(w), dv.copy()
        (_, _, dc), = pyzyme.autodiff(Reverse, STEP, Const, Duplicated(v, dvc),
                                      Duplicated(w, dw), Active(0.3))
        np.testing.assert_allclose(dw, want[0], rtol=1e-12, atol=1e-12)
        assert dc == pytest.approx(want[1], rel=1e-12)
    for threads in THREADS:
        _repeated(threads, 2, check)


@pytest.mark.parametrize("threads", THREADS)
def test_one_dimensional_slices(threads):
    w = RNG.standard_normal(3001)
    want = pyzyme.gradient(Reverse, SHARPEN_SERIAL, w)
    _repeated(threads, 10, lambda: np.testing.assert_allclose(
        pyzyme.gradient(Reverse, SHARPEN, w), want, rtol=1e-12, atol=1e-12))
    h, k = 1e-6, 1500
    e = np.zeros_like(w)
    e[k] = h
    assert want[k] == pytest.approx((SHARPEN(w + e) - SHARPEN(w - e)) / (2 * h), rel=1e-6)


def _heat_gradient(heat, u, c, steps):
    u, du = u.copy(), np.zeros_like(u)
    (_, dc, _), = pyzyme.autodiff(Reverse, heat, Active, Duplicated(u, du), Active(c),
                                  Const(steps))
    return du, dc


@pytest.mark.parametrize("threads", THREADS)
def test_one_dimensional_slices_in_place(threads):
    u = RNG.random(2001)
    want = _heat_gradient(HEAT_SERIAL, u, 0.2, 7)

    def check():
        du, dc = _heat_gradient(HEAT, u, 0.2, 7)
        np.testing.assert_allclose(du, want[0], rtol=1e-12, atol=1e-12)
        assert dc == pytest.approx(want[1], rel=1e-12)
    _repeated(threads, 5, check)
    h = 1e-6
    fd = (HEAT(u.copy(), 0.2 + h, 7) - HEAT(u.copy(), 0.2 - h, 7)) / (2 * h)
    assert want[1] == pytest.approx(fd, rel=1e-7)
    for k in (0, 1, 1000, 2000):
        e = np.zeros_like(u)
        e[k] = h
        fd = (HEAT(u + e, 0.2, 7) - HEAT(u - e, 0.2, 7)) / (2 * h)
        assert want[0][k] == pytest.approx(fd, rel=1e-6, abs=1e-9), k


def test_hessian_vector_product_of_slices():
    w, t = RNG.standard_normal(201), RNG.standard_normal(201)
    got = pyzyme.hvp(SHARPEN, w, t)
    np.testing.assert_allclose(got, pyzyme.hvp(SHARPEN_SERIAL, w, t), rtol=1e-10, atol=1e-10)
    h = 1e-5
    fd = (pyzyme.gradient(Reverse, SHARPEN, w + h * t)
          - pyzyme.gradient(Reverse, SHARPEN, w - h * t)) / (2 * h)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-6)


def _body_analyses(f, *args, result=Const):
    """The owned arrays of each split parallel loop body in ``f``'s reverse derivative, by
    whether the body is the rebased copy."""
    module = parse_module(pyzyme.code_llvm(Reverse, f, result, *args, optimized=False))
    found = {}
    for fn in module.functions:
        if fn.name.startswith("__gufunc__") and ".split" in fn.name:
            schedule = [load for load, k in slot_loads(fn).items() if k == 0]
            found.setdefault(".views" in fn.name, []).append(str(owned_arrays(fn, schedule, 0)))
    return found


def test_the_copy_owns_the_array_cell_by_cell():
    w = RNG.standard_normal((20, 20))
    args = (Duplicated(w.copy(), np.zeros_like(w)), Duplicated(w, np.zeros_like(w)), Active(0.1))
    found = _body_analyses(STEP, *args)
    # as written: five views of w and v, which may overlap: nothing owned
    assert found[False] == [found[False][0]] and found[False][0].endswith(": nothing")
    # the copy: w at rows and columns -1..1 from the iteration's cell, v at its cell
    (copy,) = found[True]
    assert "shared within 2 of its box's ends" in copy
    assert copy.count("shared within 0 of its box's ends") == 1
    with pyzyme.options(rebase_views=False):
        assert True not in _body_analyses(STEP, *args)


def test_contiguous_views_are_owned_by_element():
    """1-D slices of a C-ordered array are contiguous views, indexed by element: the copy
    reads ``u[:-2]``, ``u[1:-1]`` and ``u[2:]`` as one array at offsets -1, 0 and 1."""
    u = RNG.random(50)
    found = _body_analyses(HEAT, Duplicated(u, np.zeros_like(u)), Active(0.2), Const(3),
                           result=Active)
    owned = [text for text in found[True] if "shared within 2" in text]
    assert len(owned) == 1 and "8*" in owned[0], found[True]


@pytest.mark.parametrize("threads", THREADS)
def test_views_of_different_arrays(threads):
    """Views of two arrays: the copy only makes their strides the element size, and owns
    each cell of both (the body as written owns neither: its strides are run-time values)."""
    w, dv = RNG.standard_normal((40, 30)), RNG.standard_normal((40, 30))
    want = _step_gradient(SCALE_SERIAL, w, 0.7, dv)
    _repeated(threads, 5, lambda: [np.testing.assert_allclose(a, e, rtol=1e-13, atol=1e-14)
                                   for a, e in zip(_step_gradient(SCALE, w, 0.7, dv), want)])
    inner = w[1:-1, 1:-1]
    np.testing.assert_allclose(want[1], np.sum(dv[1:-1, 1:-1] * np.tanh(inner)), rtol=1e-12)
    if threads == THREADS[0]:
        args = (Duplicated(w.copy(), np.zeros_like(w)), Duplicated(w, np.zeros_like(w)),
                Active(0.7))
        found = _body_analyses(SCALE, *args)
        assert found[False] == [found[False][0]] and found[False][0].endswith(": nothing")
        (copy,) = found[True]
        assert copy.count("shared within 0 of its box's ends") == 2, copy


@pytest.mark.parametrize("threads", THREADS)
def test_contiguous_views_of_rows(threads):
    """``u[2:]``, ``u[1:-1]``, ``u[:-2]`` of a C-ordered 2-D array: contiguous views whose
    rows the body indexes by a length read from ``dims``; the copy reads them as ``u`` two
    rows apart and owns its cells (reach 2 in rows, none in columns)."""
    u = RNG.standard_normal((37, 23))
    d = u[2:] - 2.0 * u[1:-1] + u[:-2]
    want = np.zeros_like(u)     # d/du of sum(d^2): 2d scattered back through the stencil
    want[2:] += 2 * d
    want[1:-1] -= 4 * d
    want[:-2] += 2 * d
    np.testing.assert_allclose(pyzyme.gradient(Reverse, SECOND_SERIAL, u), want, rtol=1e-12)
    _repeated(threads, 5, lambda: np.testing.assert_allclose(
        pyzyme.gradient(Reverse, SECOND, u), want, rtol=1e-12, atol=1e-12))
    if threads == THREADS[0]:
        found = _body_analyses(SECOND, Duplicated(u, np.zeros_like(u)), result=Active)
        (copy,) = found[True]
        assert "shared within 2 of its box's ends" in copy and ", 0 in" in copy, copy
