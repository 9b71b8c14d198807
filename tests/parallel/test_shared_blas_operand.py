"""Matrix products in a prange body with an operand all iterations share: ``P @ B.T`` with
``P`` the iteration's own and ``B`` the caller's, ``A[i] @ B`` (gemv), ``A[i] @ B`` with
``A[i]`` a matrix (gemm), and a dot of a strided column, which Numba copies, with a shared row
(npbench's symm). The reverse of a BLAS call adds into its operands' adjoints by a BLAS
call of its own, so in a parallel loop's body every operand it adds into must belong to the
iteration. A shared operand that carries no derivative has no adjoint to add into; a shared
one that does is read whole by every iteration, so each reverse task adds into a private copy
of its adjoint (:mod:`pyzyme.diff.parallel.private`), summed after the launch. Checked against
the serial function's gradient and differences at 1, 2 and 4 threads, with rows chosen by
an index read from memory too (a repeated row's adjoint gets both iterations' adds), and a
product of two of the iteration's temporaries, one of which Numba passes through a phi of
the temporary and its copy (npbench's scattering_self_energies: refused before, the phi not
seen through). An
operand that is one of two shared arrays, chosen per iteration, has no one copy to add into:
refused, naming the loop.

The reverse launch releases the GIL while its workers run, as Numba's launch does: a worker's
first BLAS call of a kind looks the routine up under the GIL (numba/_lapack.c), and before
that the caller's thread held it while waiting for the workers (a deadlock, checked in a
fresh process, where no routine has been looked up yet)."""

import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse, autodiff

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)


def products(a, b):
    out = np.zeros((a.shape[0], 3))
    for i in prange(a.shape[0]):
        p = np.empty((2, 3))
        for j in range(3):
            p[0, j] = np.sin(a[i] * (j + 1))
            p[1, j] = a[i] * a[i] * (j + 1)
        q = p @ b.T
        out[i, :] = q[0] + q[1]
    return np.sum(out * out)


def rows_times_matrix(a, b, out):
    for i in prange(a.shape[0]):
        out[i] = np.sum(a[i] @ b) ** 2       # gemv: a row the iteration owns, b shared
    return out.sum()


def blocks_times_matrix(a, b):
    s = 0.0
    for i in prange(a.shape[0]):
        m = np.tanh(a[i]) @ b                # gemm: (3, 4) @ (4, 5), b shared
        s += np.sum(m * m)
    return s


def column_dots(a, b, c0, out):
    c = c0.copy()
    for i in range(1, a.shape[0]):          # a serial loop around the prange, as symm's
        for j in prange(b.shape[1]):
            c[:i, j] += b[i, j] * a[i, :i]
            out[i, j] = b[:i, j] @ a[i, :i]  # dot: a strided column (Numba copies it) and a row
    return np.sum(out * out) + np.sum(c * c)  # of a every iteration reads


def gathered_rows(a, idx, b):
    s = 0.0
    for i in prange(idx.shape[0]):
        s += np.sum(a[idx[i]] @ b) ** 2      # a's rows chosen by data, some twice
    return s


def products_of_temporaries(g, h, d):
    s = 0.0
    for k in prange(g.shape[0]):
        acc = np.zeros((g.shape[1], d.shape[3]))
        for i in range(h.shape[1]):
            for a in range(h.shape[0]):
                left = g[k] @ h[a, i]            # h shared, g[k] the iteration's own
                right = h[a, i] * d[a, i]
                acc += left @ right              # two temporaries: Numba passes one as a
        s += np.sum(acc * acc)                   # phi of it and its copy of the last round
    return s


def _parallel(f):
    return numba.njit(parallel=True)(f)


def _serial(f):
    return numba.njit(f)


def _gradient(f, args, active, outputs=()):
    """The adjoints of ``args[k]`` for ``k`` in ``active``; ``outputs`` (arrays the function
    writes its results into) get a shadow too, not compared; the rest are constants."""
    shadows = {k: np.zeros_like(args[k]) for k in (*active, *outputs)}
    annotated = [Duplicated(x, shadows[k]) if k in shadows else Const(x)
                 for k, x in enumerate(args)]
    autodiff(Reverse, f, Active, *annotated)
    return [shadows[k] for k in active]


def _differences(f, args, k, h=1e-6):
    x = args[k]
    out = np.zeros_like(x)
    for at in np.ndindex(x.shape):
        keep = x[at]
        x[at] = keep + h
        up = f(*args)
        x[at] = keep - h
        down = f(*args)
        x[at] = keep
        out[at] = (up - down) / (2 * h)
    return out


def _cases():
    rng = np.random.default_rng(7)
    return {
        "P @ B.T": (products, (np.linspace(0.1, 1.2, 9), np.arange(9.0).reshape(3, 3) / 7.0)),
        "A[i] @ B": (rows_times_matrix, (rng.standard_normal((13, 4)),
                                         rng.standard_normal((4, 5)), np.zeros(13))),
        "tanh(A[i]) @ B": (blocks_times_matrix, (rng.standard_normal((7, 3, 4)),
                                                 rng.standard_normal((4, 5)))),
        "B[:i, j] @ A[i, :i]": (column_dots, (rng.standard_normal((6, 6)),
                                              rng.standard_normal((6, 5)),
                                              rng.standard_normal((6, 5)), np.zeros((6, 5)))),
        "A[idx[i]] @ B": (gathered_rows, (rng.standard_normal((6, 4)),
                                          np.array([0, 2, 2, 5, 1, 0, 3]),
                                          rng.standard_normal((4, 3)))),
        "(G[k] @ H[a, i]) @ (H[a, i] * D[a, i])": (
            products_of_temporaries, (rng.standard_normal((5, 2, 2)),
                                      rng.standard_normal((3, 2, 2, 2)),
                                      rng.standard_normal((3, 2, 2, 2)))),
    }


CASES = _cases()


@pytest.mark.parametrize("threads", THREADS)
def test_a_shared_operand_without_a_derivative(threads):
    f, (a, b) = CASES["P @ B.T"]
    expected, = _gradient(_serial(f), [a, b], (0,))
    np.testing.assert_allclose(expected, _differences(_serial(f), [a, b], 0), rtol=1e-7)
    numba.set_num_threads(threads)
    try:
        for _ in range(3):
            got, = _gradient(_parallel(f), [a, b], (0,))
            np.testing.assert_allclose(got, expected, rtol=1e-13)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_shared_operand_with_a_derivative(name):
    f, args = CASES[name]
    args = [x.copy() for x in args]
    active, outputs = {gathered_rows: ((0, 2), ()), column_dots: ((0, 1, 2), (3,)),
                       rows_times_matrix: ((0, 1), (2,)),
                       products_of_temporaries: ((0, 1, 2), ())}.get(f, ((0, 1), ()))
    serial, parallel = _serial(f), _parallel(f)
    expected = _gradient(serial, args, active, outputs)
    for k, g in zip(active, expected):
        np.testing.assert_allclose(g, _differences(serial, args, k), rtol=1e-6, atol=1e-7)
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            for _ in range(5 if threads == 4 else 1):    # 4 threads on 2 cores: races show
                for got, want in zip(_gradient(parallel, args, active, outputs), expected):
                    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def either_matrix(a, b, c, flags):
    s = 0.0
    for i in prange(a.shape[0]):
        m = b if flags[i] > 0 else c        # each iteration picks one of two shared arrays
        s += np.sum(a[i] @ m) ** 2
    return s


def test_an_operand_that_is_one_of_two_shared_arrays_is_refused():
    # No copy per thread stands for "b or c": the BLAS call's reverse would add into a shared
    # adjoint unguarded. The refusal names the loop.
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s) for s in ((9, 4), (4, 3), (4, 3)))
    flags = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1])
    line = either_matrix.__code__.co_firstlineno + 2  # the prange loop's
    with pytest.raises(pyzyme.UnsupportedError, match="prange") as err:
        autodiff(Reverse, _parallel(either_matrix), Active, Duplicated(a, np.zeros_like(a)),
                 Duplicated(b, np.zeros_like(b)), Duplicated(c, np.zeros_like(c)), Const(flags))
    assert "other threads add into" in str(err.value)
    assert f"test_shared_blas_operand.py:{line}" in str(err.value)


_FRESH = textwrap.dedent("""
    import numba, numpy as np, pyzyme
    from numba import prange

    @numba.njit(parallel=True)
    def f(a, b):
        s = 0.0
        for i in prange(a.shape[0]):
            s += np.sum((a[i] @ b) ** 2)     # gemv; its reverse calls gemm, not yet used
        return s

    numba.set_num_threads(2)
    a, b = np.random.default_rng(0).standard_normal((40, 4)), np.ones((4, 5))
    da, db = np.zeros_like(a), np.zeros_like(b)
    pyzyme.autodiff(pyzyme.Reverse, f, pyzyme.Active, pyzyme.Duplicated(a, da),
                    pyzyme.Duplicated(b, db))
    # d/db of sum_i |a_i b|^2 is sum_i 2 a_i^T (a_i b)
    want = sum(2 * np.outer(x, x @ b) for x in a)
    print(float(np.max(np.abs(db - want))))
""")


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two threads")
def test_a_worker_that_needs_the_gil_does_not_deadlock():
    run = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split()[-1]) < 1e-10
