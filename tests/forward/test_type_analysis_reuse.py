"""Forward mode analyses each function it differentiates, and each analysis goes down into the
functions it calls, knowing more of their arguments than they know alone. Over a reverse
module (hvp: forward mode over the gradient) that is the reverse of a parallel loop's body,
met by its launch, the launch's caller and itself: forward mode analyses the callees first,
from nothing, and the runs that follow start from those fixed points
(:mod:`pyzyme.analysis.type_runs`), where each was a run from nothing, some of tens of thousands
of instructions. The Hessian-vector products are checked against the exact ones."""

import numba
import numpy as np
from numba import prange

import pyzyme
from pyzyme.analysis import type_analysis


@numba.njit(parallel=True)
def smooth_energy(x):
    e = 0.0
    for i in prange(1, x.shape[0] - 1):
        d = x[i + 1] - 2.0 * x[i] + x[i - 1]
        e += d * d + x[i] ** 3
    return e


def _exact_hvp(x, v):
    n = x.size
    h = np.zeros((n, n))
    for i in range(1, n - 1):
        row = np.zeros(n)
        row[i - 1], row[i], row[i + 1] = 1.0, -2.0, 1.0
        h += 2.0 * np.outer(row, row)
        h[i, i] += 6.0 * x[i]
    return h @ v


def test_runs_after_the_first_of_each_function_start_from_a_fixed_point(monkeypatch):
    runs: list = []
    plain = type_analysis._Analyzer._run_once

    def run_once(self, seeds, return_tree, start=None):
        runs.append((self.fn.name, start is None))
        return plain(self, seeds, return_tree, start)

    monkeypatch.setattr(type_analysis._Analyzer, "_run_once", run_once)
    x = np.linspace(-1.0, 1.0, 11)
    v = np.cos(np.arange(11.0))
    np.testing.assert_allclose(pyzyme.hvp(smooth_energy, x, v), _exact_hvp(x, v),
                               rtol=1e-12, atol=1e-12)
    body = [cold for name, cold in runs if name.startswith("reverse_") and "gufunc" in name]
    assert len(body) >= 2               # the body's reverse, analysed more than once
    assert body.count(True) == 1        # from nothing once only
