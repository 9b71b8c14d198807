"""Random reduction nests through reverse mode with loop interchange on and off: the gradients
must be bitwise equal where each array is read at one place (every cell gets its terms in the
same order either way), equal to rounding where an array is read at two (A[i, p] and
A[i, k - 1 - p] add into one cell from two iterations, whose order the interchange changes),
and agree with forward mode. The nests vary in the sum's start and update, the factors and how
they are indexed (down a column, along a row, reversed), the loop bounds and the array
sizes."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import pyzyme
from pyzyme import Const, Duplicated, Forward, Reverse
from tests.kernels import njit_source, on_and_off

FACTORS = ["A[i, p]", "B[p, j]", "B[p, m - 1 - j]", "A[i, k - 1 - p]", "B[k - 1 - p, j]",
           "np.sin(B[p, j])", "A[i, p] * A[i, p]", "2.5"]
UPDATES = ["s + {t}", "s - {t}", "s * 0.75 + {t}", "max(s, {t})", "s + s * {t}"]


@st.composite
def nests(draw):
    factors = draw(st.lists(st.sampled_from(FACTORS), min_size=1, max_size=3))
    update = draw(st.sampled_from(UPDATES)).format(t=" * ".join(factors))
    init = draw(st.sampled_from(["0.0", "1.0", "-0.5"]))
    outer = draw(st.sampled_from(["range(m)", "range(1, m)"]))
    source = (
        "def f(C, A, B):\n"
        "    n, k = A.shape\n"
        "    m = B.shape[1]\n"
        "    for i in range(n):\n"
        f"        for j in {outer}:\n"
        f"            s = {init}\n"
        "            for p in range(k):\n"
        f"                s = {update}\n"
        "            C[i, j] = s\n")
    sizes = draw(st.tuples(*(st.sampled_from([1, 3, 6]) for _ in range(3))))
    return source, sizes


def _read_at_one_place(source: str) -> bool:
    """Whether the nest's update reads each array at one index (however often)."""
    update = source.split("s = ")[-1]
    places: dict = {}
    for array, index in re.findall(r"([AB])\[([^\]]*)\]", update):
        places.setdefault(array, set()).add(index)
    return all(len(p) == 1 for p in places.values())


# B read at three places: dB's cells get additions from three iterations (found by hypothesis).
_THREE_READS = ("def f(C, A, B):\n    n, k = A.shape\n    m = B.shape[1]\n"
                "    for i in range(n):\n        for j in range(m):\n            s = 0.0\n"
                "            for p in range(k):\n"
                "                s = s + B[p, j] * B[p, m - 1 - j] * B[k - 1 - p, j]\n"
                "            C[i, j] = s\n", (1, 3, 6))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nests(), st.integers(0, 2**31 - 1))
@example(_THREE_READS, 0)
def test_random_nests(nest, seed):
    source, (n, k, m) = nest
    f = njit_source(source)
    rng = np.random.default_rng(seed)
    A, B = rng.standard_normal((n, k)), rng.standard_normal((k, m))
    C = rng.standard_normal((n, m))
    seed_c = rng.standard_normal((n, m))

    def reverse():
        dA, dB, dC = np.zeros_like(A), np.zeros_like(B), seed_c.copy()
        pyzyme.autodiff(Reverse, f, Const, Duplicated(C.copy(), dC), Duplicated(A.copy(), dA),
                        Duplicated(B.copy(), dB))
        return dA, dB, dC

    on, off = on_and_off(reverse, "interchange_loops")
    for a, b in zip(on, off):
        if _read_at_one_place(source):
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13 * float(np.max(np.abs(b),
                                                                                  initial=1.0)))
    # <seed, J v> == <J^T seed, v>: the cells of C the nest writes carry the seed back.
    vA, vB = rng.standard_normal(A.shape), rng.standard_normal(B.shape)
    tC = np.zeros_like(C)
    pyzyme.autodiff(Forward, f, Const, Duplicated(C.copy(), tC), Duplicated(A.copy(), vA),
                    Duplicated(B.copy(), vB.copy()))
    with np.errstate(over="ignore", invalid="ignore"):
        lhs = float(np.sum(seed_c * tC))
        rhs = float(np.sum(on[0] * vA) + np.sum(on[1] * vB))
    assume(np.isfinite(lhs) and np.isfinite(rhs))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-10)
