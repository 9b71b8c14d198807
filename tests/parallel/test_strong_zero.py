"""Strong zero in parallel loop bodies (pyzyme.diff.reverse.versions): Numba compiles a prange
body without its ``ZeroDivisionError`` check, so a division there can give inf, and the
reverse body comes in two versions, the guarded one run for the rows whose forward sweep saw a
non-finite source. Rows with a pole and rows without, at 1, 2 and 4 threads, against the
closed form and the same function compiled serially with NumPy's error model (no check:
guarded everywhere)."""

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Duplicated, Reverse, autodiff

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)


def masked_ratio(x, y):
    """``x / y`` where ``y != 0``, else 0: the division runs for every i, infinite where
    ``y[i] == 0`` (``x[i] != 0``) and NaN where both are 0; its adjoint there is zero."""
    s = 0.0
    for i in numba.prange(x.shape[0]):
        q = x[i] / y[i]
        t = q if y[i] != 0.0 else 0.0
        s += t * x[i]
    return s


def masked_log(x, w):
    """``log(x)`` where ``x > 0``, else 0: ``log(0) = -inf``, where its partial ``1 / x`` has
    its pole, so the forward sweep's test of ``log``'s value covers it: two versions."""
    s = 0.0
    for i in numba.prange(x.shape[0]):
        v = np.log(x[i])
        t = v if x[i] > 0.0 else 0.0
        s += t * w[i]
    return s


def skipped_root(d):
    """``sqrt(d)`` at ``d == 0`` in a branch not taken: sqrt's partial ``0.5 / sqrt(d)`` is
    infinite where its value is finite (0), which no test of the forward sweep's values sees:
    one guarded version."""
    s = 0.0
    for i in numba.prange(d.shape[0]):
        r = np.sqrt(d[i])
        if r > 1e-6:
            s += 1.0 / r
        else:
            s += d[i]
    return s


PAR = {f.__name__: numba.njit(parallel=True)(f) for f in (masked_ratio, masked_log, skipped_root)}
SER = {f.__name__: numba.njit(error_model="numpy")(f)
       for f in (masked_ratio, masked_log, skipped_root)}


def _ratio_inputs(n=41):
    rng = np.random.default_rng(7)
    x, y = rng.uniform(0.5, 2.0, n), rng.uniform(0.5, 2.0, n)
    y[[3, 17, 18]] = 0.0      # poles in some rows only, whatever the thread count
    x[17] = 0.0               # 0 / 0: NaN
    return x, y


def _gradient(f, *arrays):
    shadows = [np.zeros_like(a) for a in arrays]
    autodiff(Reverse, f, Active, *[Duplicated(a.copy(), s) for a, s in zip(arrays, shadows)])
    return shadows


def test_a_zero_adjoint_through_a_division_by_zero_in_some_rows():
    x, y = _ratio_inputs()
    safe = np.where(y != 0.0, y, 1.0)
    dx_exact = np.where(y != 0.0, 2.0 * x / safe, 0.0)
    dy_exact = np.where(y != 0.0, -(x / safe) ** 2, 0.0)
    ser = _gradient(SER["masked_ratio"], x, y)
    for threads in THREADS:
        numba.set_num_threads(threads)
        for _ in range(3):
            dx, dy = _gradient(PAR["masked_ratio"], x, y)
            np.testing.assert_allclose(dx, dx_exact, rtol=1e-13, err_msg=f"{threads} threads")
            np.testing.assert_allclose(dy, dy_exact, rtol=1e-13, err_msg=f"{threads} threads")
            np.testing.assert_allclose(dx, ser[0], rtol=1e-13)
            np.testing.assert_allclose(dy, ser[1], rtol=1e-13)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_without_a_pole_every_row_agrees_with_central_differences():
    rng = np.random.default_rng(8)
    x, y = rng.uniform(0.5, 2.0, 23), rng.uniform(0.5, 2.0, 23)
    f = SER["masked_ratio"]
    h = 1e-6
    for threads in THREADS:
        numba.set_num_threads(threads)
        dx, dy = _gradient(PAR["masked_ratio"], x, y)
        for k in (0, 11, 22):
            e = np.zeros_like(x)
            e[k] = h
            assert dx[k] == pytest.approx((f(x + e, y) - f(x - e, y)) / (2 * h), rel=1e-6)
            assert dy[k] == pytest.approx((f(x, y + e) - f(x, y - e)) / (2 * h), rel=1e-6)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_a_zero_adjoint_through_log_at_zero():
    rng = np.random.default_rng(10)
    x, w = rng.uniform(0.5, 2.0, 29), rng.uniform(0.5, 2.0, 29)
    x[[2, 20]] = 0.0
    safe = np.where(x > 0.0, x, 1.0)
    for threads in THREADS:
        numba.set_num_threads(threads)
        dx, dw = _gradient(PAR["masked_log"], x, w)
        np.testing.assert_allclose(dx, np.where(x > 0.0, w / safe, 0.0), rtol=1e-13)
        np.testing.assert_allclose(dw, np.where(x > 0.0, np.log(safe), 0.0), rtol=1e-13,
                                   atol=1e-300)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_a_pole_of_a_partial_at_a_finite_value_keeps_the_guards():
    d = np.linspace(0.0, 2.0, 19)
    d[[5, 9]] = 0.0
    expect = np.where(np.sqrt(d) > 1e-6, -0.5 * np.where(d > 0, d, 1.0) ** -1.5, 1.0)
    for threads in THREADS:
        numba.set_num_threads(threads)
        (dd,) = _gradient(PAR["skipped_root"], d)
        np.testing.assert_allclose(dd, expect, rtol=1e-12, err_msg=f"{threads} threads")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def _reverse_ir(name, *arrays):
    return pyzyme.code_llvm(Reverse, PAR[name], Active,
                            *[Duplicated(a.copy(), np.zeros_like(a)) for a in arrays])


def test_the_body_runs_unguarded_where_no_source_was_non_finite():
    """The division's and the logarithm's bodies: two versions chosen by the forward sweep's
    test; sqrt's body (a pole the test cannot see): one, guarded."""
    x, y = _ratio_inputs()
    assert "sweep.choose" in _reverse_ir("masked_ratio", x, y)
    assert "sweep.choose" in _reverse_ir("masked_log", x, y)
    assert "sweep.choose" not in _reverse_ir("skipped_root", np.ones(5))


def _with_y(f, y):
    """``x -> f(x, y)``, ``y`` a global of its module (Numba freezes it)."""
    env = {"f": f, "y": y}
    exec("def g(x):\n    return f(x.copy(), y.copy())", env)
    return env["g"]


def test_hvp_through_both_versions():
    x, y = _ratio_inputs(21)
    v = np.random.default_rng(9).standard_normal(x.shape)
    expect = pyzyme.hvp(_with_y(SER["masked_ratio"], y), x, v)
    assert np.all(np.isfinite(expect))
    for threads in THREADS:
        numba.set_num_threads(threads)
        got = pyzyme.hvp(_with_y(PAR["masked_ratio"], y), x, v)
        np.testing.assert_allclose(got, expect, rtol=1e-12)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
