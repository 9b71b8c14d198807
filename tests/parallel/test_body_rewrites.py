"""The rewrites a captured function gets before differentiation, given to the body of each
prange loop too: ``r ** 6`` (which Numba lowers to a loop of squarings) folded into a call with a
rule, so that the body's forward sweep tapes nothing per squaring; gradients checked against the
function without parallel=True and central differences at 1, 2 and 4 threads."""

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Duplicated, Forward, Reverse
from pyzyme.naming import INT_POWER


def cluster_energy(pos):
    n = pos.shape[0]
    e = 0.0
    for i in prange(n - 1):
        for j in range(i + 1, n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            r = (dx * dx + dy * dy + dz * dz) ** 0.5
            sr6 = (1.0 / r) ** 6
            e += 4.0 * (sr6 * sr6 - sr6)
    return e


parallel = numba.njit(parallel=True)(cluster_energy)
serial = numba.njit(cluster_energy)


def _positions(n=9):
    g = np.stack(np.meshgrid(*[np.arange(3.0)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
    return 1.2 * g + 0.05 * np.random.default_rng(1).standard_normal((n, 3))


def _reverse_body(text: str) -> str:
    start = text.index("define internal void @reverse___gufunc__")
    return text[start:text.index("\n}\n", start)]


def test_an_integer_power_in_a_prange_body_is_a_call_with_a_rule():
    pos = _positions()
    text = pyzyme.code_llvm(Reverse, parallel, Active, Duplicated(pos, np.zeros_like(pos)))
    body = _reverse_body(text)
    assert f"@{INT_POWER}" in body
    # the loop of squarings is gone: no per-step value of it left in the body's caches
    assert ".cache" not in "".join(line for line in body.splitlines()
                                   if "exp." in line or "spec.select" in line)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_prange_body_with_an_integer_power_gradient(threads):
    pos = _positions()
    reference = np.zeros_like(pos)
    pyzyme.autodiff(Reverse, serial, Active, Duplicated(pos, reference))
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for _ in range(3):
            d = np.zeros_like(pos)
            pyzyme.autodiff(Reverse, parallel, Active, Duplicated(pos, d))
            np.testing.assert_allclose(d, reference, rtol=1e-12, atol=1e-12)
        t = np.zeros_like(pos)
        t[4, 1] = 1.0
        (_, tangent) = pyzyme.autodiff(Forward, parallel, Duplicated(pos, t))
        assert tangent == pytest.approx(reference[4, 1], rel=1e-10)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    e = 1e-6
    for k in [(0, 0), (4, 1), (8, 2)]:
        up, down = pos.copy(), pos.copy()
        up[k] += e
        down[k] -= e
        fd = (serial(up) - serial(down)) / (2 * e)
        assert reference[k] == pytest.approx(fd, rel=1e-6)
