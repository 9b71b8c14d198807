"""Parfors over more than one dimension (Numba's schedule splits a 2-D index space in boxes):
an array addressed by one of the indices only, a bias ``b[j]`` added to every row ``i`` of
``x``, is read by every row, whichever thread runs it. Its adjoint was added with plain adds
(the analysis took ``b`` as owned by index ``j``), and at 2 threads one task's adds were lost:
the gradient came out short by up to half, at random. At 1, 2 and 4 threads, repeated, against
closed forms; and the analysis itself on a 2-D schedule's body."""

import re

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse
from pyzyme.analysis.parallel_access import owned_arrays
from pyzyme.ir import parse_module

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)
RNG = np.random.default_rng(7)


@numba.njit(parallel=True, fastmath=True)
def bias_sum(x, b):
    y = x + b
    return np.sum(y)


@numba.njit(parallel=True, fastmath=True)
def dense_relu_layer(x, w, b):
    # npbench's mlp: the bias add and the ReLU are one 2-D parfor after the product
    y = np.maximum(x @ w + b, 0)
    return np.sum(y * y)


def test_bias_added_to_each_row_of_a_2d_parfor():
    x, b = RNG.standard_normal((8000, 5)), RNG.standard_normal(5)
    for threads in THREADS:
        numba.set_num_threads(threads)
        for _ in range(20):
            dx, db = pyzyme.gradient(Reverse, bias_sum, x, b)
            np.testing.assert_allclose(db, np.full(5, x.shape[0]), rtol=1e-12,
                                       err_msg=f"{threads} threads")
            np.testing.assert_allclose(dx, np.ones_like(x), rtol=1e-12)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_dense_relu_layer_gradient():
    x, w, b = (RNG.standard_normal(s) for s in ((2000, 5), (5, 5), (5,)))
    g = 2 * np.maximum(x @ w + b, 0)   # the adjoint of the layer's output
    want = (g @ w.T, x.T @ g, g.sum(axis=0))
    for threads in THREADS:
        numba.set_num_threads(threads)
        for _ in range(5):
            got = pyzyme.gradient(Reverse, dense_relu_layer, x, w, b)
            for name, a, e in zip("xwb", got, want):
                np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-9,
                                           err_msg=f"d{name}, {threads} threads")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


_BODY_2D = '''
define void @body(ptr %x, ptr %b, ptr %sched, i64 %m) {
entry:
  %i0 = load i64, ptr %sched
  %j0p = getelementptr i64, ptr %sched, i64 1
  %j0 = load i64, ptr %j0p
  %i1p = getelementptr i64, ptr %sched, i64 2
  %i1 = load i64, ptr %i1p
  %j1p = getelementptr i64, ptr %sched, i64 3
  %j1 = load i64, ptr %j1p
  br label %row
row:
  %i = phi i64 [ %i0, %entry ], [ %inext, %next ]
  %r = mul i64 %i, %m
  br label %col
col:
  %j = phi i64 [ %j0, %row ], [ %jnext, %col ]
  %pb = getelementptr double, ptr %b, i64 %j
  %vb = load double, ptr %pb
  %a = add i64 %r, %j
  %px = getelementptr double, ptr %x, i64 %a
  store double %vb, ptr %px
  %jnext = add i64 %j, 1
  %more = icmp sle i64 %jnext, %j1
  br i1 %more, label %col, label %next
next:
  %inext = add i64 %i, 1
  %again = icmp sle i64 %inext, %i1
  br i1 %again, label %row, label %exit
exit:
  ret void
}'''


def test_no_array_is_owned_by_one_index_of_a_2d_schedule():
    """``b[j]`` in a body over rows ``[i0, i1]`` and columns ``[j0, j1]``: boxes with the
    same columns, other rows, read the same ``b[j]``."""
    fn = parse_module(_BODY_2D).get_function("body")
    owned = owned_arrays(fn, [fn.args[2]], 0)
    b = fn.args[1]
    assert b not in owned.roots
    pointer = next(i for blk in fn.blocks for i in blk.instructions if i.name == "pb")
    assert not owned.owns(pointer) and owned.near_edges(pointer) is None
    # x[i, j]: one iteration's cell, wherever 0 <= j < m (checked where adjoints are added)
    assert str(owned) == ("owned by one iteration of @body: %x (8*%m*%i + 8*%j, shared within "
                          "0 of its box's ends in %i, 0 in %j)")
    px = next(i for blk in fn.blocks for i in blk.instructions if i.name == "px")
    index, reach, first, last, (terms, const, length), across = owned.near_edges(px)
    assert (index.ref, reach, first.ref, last.ref, length.ref) == ("%i", 0, "%i0", "%i1", "%m")
    assert [(atom.ref, k) for atom, k in terms] == [("%j", 1)] and const == 0
    assert [getattr(v, "ref", v) for v in across] == ["%j", 0, "%j0", "%j1"]


def _stencil_body(reads: str) -> str:
    """``_BODY_2D`` with ``x[i, j]`` written from ``reads`` (IR defining ``%vb``)."""
    old = ("  %pb = getelementptr double, ptr %b, i64 %j\n"
           "  %vb = load double, ptr %pb\n")
    assert old in _BODY_2D
    return _BODY_2D.replace(old, reads)


def test_a_stencil_over_boxes_is_shared_near_their_ends_in_both_dimensions():
    """``b[i - 1, j - 1]`` alone: each iteration its own cell; with ``b[i, j + 1]`` too,
    iterations one row and two columns apart touch one cell."""
    one = _stencil_body("  %up = sub i64 %r, %m\n  %left = add i64 %up, %j\n"
                        "  %a2 = add i64 %left, -1\n"
                        "  %pb = getelementptr double, ptr %b, i64 %a2\n"
                        "  %vb = load double, ptr %pb\n")
    two = one.replace("  %vb = load double, ptr %pb\n",
                      "  %vb0 = load double, ptr %pb\n  %a3 = add i64 %r, %j\n"
                      "  %pc = getelementptr double, ptr %b, i64 %a3\n"
                      "  %pd = getelementptr i8, ptr %pc, i64 8\n"
                      "  %vd = load double, ptr %pd\n  %vb = fadd double %vb0, %vd\n")
    for text, reach in ((one, "0 of its box's ends in %i, 0 in %j"),
                        (two, "1 of its box's ends in %i, 2 in %j")):
        fn = parse_module(text).get_function("body")
        assert f"%b (8*%m*%i + 8*%j, shared within {reach})" in \
            str(owned_arrays(fn, [fn.args[2]], 1))


@numba.njit(parallel=True)
def exp_times(a, b):
    return np.sum(np.exp(a) * b)


@numba.njit(parallel=True)
def squared_product(a, b):
    c = np.empty_like(a)
    c[:] = np.sin(a) * b
    return np.sum(c * c)


@numba.njit(parallel=True)
def with_transpose(a):
    return np.sum(a * a.T)


def test_2d_array_expressions_against_closed_forms():
    a, b = RNG.uniform(0.1, 1.0, (61, 67)), RNG.uniform(0.1, 1.0, (61, 67))
    s = RNG.uniform(0.1, 1.0, (53, 53))
    cases = [(exp_times, (a, b), (np.exp(a) * b, np.exp(a))),
             (squared_product, (a, b), (2 * np.sin(a) * np.cos(a) * b * b,
                                        2 * np.sin(a) ** 2 * b)),
             (with_transpose, (s,), (2 * s.T,))]
    for threads in THREADS:
        numba.set_num_threads(threads)
        for f, args, want in cases:
            for _ in range(10):
                got = pyzyme.gradient(Reverse, f, *args)
                got = got if isinstance(got, tuple) else (got,)
                for g, e in zip(got, want):
                    np.testing.assert_allclose(g, e, rtol=1e-12,
                                               err_msg=f"{f.__name__}, {threads} threads")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@numba.stencil
def _smooth(a):
    return (0.1 * a[-1, -1] + 0.2 * a[-1, 0] + 0.05 * a[-1, 1] + 0.15 * a[0, -1] + 0.3 * a[0, 0]
            + 0.02 * a[0, 1] + 0.08 * a[1, -1] + 0.04 * a[1, 0] + 0.06 * a[1, 1]
            + 0.01 * a[-1, 2])


def _smoothing(parallel):
    @numba.njit(parallel=parallel)
    def run(u, steps):
        v = u.copy()
        w = u.copy()
        for _ in range(steps):
            _smooth(v, out=w)
            v, w = w, v
        return np.sum(v * v)
    return run


SMOOTHING = _smoothing(True), _smoothing(False)


@pytest.mark.parametrize("shape", [(40, 47), (6, 61), (61, 6), (5, 5)])
def test_a_stencil_in_a_time_loop_against_the_serial_function(shape):
    """Boxes whose interior, between the columns near their ends, is wide, narrow or
    empty: the reverse loop runs its iterations with tests, without, and with again."""
    u = RNG.uniform(0.0, 1.0, shape)
    parallel, serial = SMOOTHING
    want = pyzyme.gradient(Reverse, serial, u, 3)[0]
    for threads in THREADS:
        numba.set_num_threads(threads)
        for _ in range(6):
            got = pyzyme.gradient(Reverse, parallel, u, 3)[0]
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15,
                                       err_msg=f"{threads} threads")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_a_box_runs_its_interior_columns_without_tests():
    """The reverse loop over a box's columns: a copy without the edge tests between the
    columns the tests hold for (found by binary searches before the loop)."""
    u = RNG.uniform(0.0, 1.0, (12, 13))
    text = pyzyme.code_llvm(Reverse, SMOOTHING[0], Active, Duplicated(u, np.zeros_like(u)),
                            Const(3), optimized=False)
    labels = set(re.findall(r"^([\w.]+):", text, flags=re.M))
    for part in ("top.step", "bottom.step", "choose", "interior", "after.copy"):
        assert any(label.endswith("." + part) for label in labels), part
