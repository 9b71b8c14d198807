"""Functions compiled with Numba's full debug info differentiate as without it.

``@njit(debug=True)`` (and ``NUMBA_DEBUGINFO=1``, ``NUMBA_ENABLE_PROFILING=1``, which profilers
need) marks every function Numba lowers ``noinline``, and ``_dbg_optnone`` also ``optnone``.
Kept, a prange body stayed a call whose exception path read its error back through memory the
call wrote, and reverse mode refused the loop as a call into the Python interpreter.
"""

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Duplicated, Forward, Reverse

X = np.linspace(0.1, 1.0, 11)
# d/dx_i of sum_i (x_i * 2 x_i + sin(3 x_i))
EXPECTED = 4.0 * X + 3.0 * np.cos(3.0 * X)


def _kernels(**flags):
    @numba.njit(**flags)
    def term(v, i):
        return v[i] * (2.0 * v[i]) + np.sin(3.0 * v[i])

    @numba.njit(**flags)
    def serial(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += term(x, i)
        return s

    @numba.njit(parallel=True, **flags)
    def parallel(x):
        s = 0.0
        for i in prange(x.shape[0]):
            t = np.empty(3)  # a temporary in the body: its allocation can raise
            for j in range(3):
                t[j] = x[i] * (j + 1)
            s += t[0] * t[1] + np.sin(t[2])
        return s

    return serial, parallel


DEBUG = _kernels(debug=True)
OPTNONE = _kernels(debug=True, _dbg_optnone=True)


@pytest.mark.parametrize("kernels", [DEBUG, OPTNONE], ids=["debug", "optnone"])
@pytest.mark.parametrize("which", [0, 1], ids=["serial", "prange"])
def test_reverse_and_forward_match_the_closed_form(kernels, which):
    f = kernels[which]
    shadow = np.zeros_like(X)
    pyzyme.autodiff(Reverse, f, Active, Duplicated(X, shadow))
    np.testing.assert_allclose(shadow, EXPECTED, rtol=1e-12)
    for k in (0, 5, 10):
        _, tangent = pyzyme.autodiff(Forward, f, Duplicated, Duplicated(X, np.eye(X.size)[k]))
        np.testing.assert_allclose(tangent, EXPECTED[k], rtol=1e-12)


def test_hvp_of_a_prange_loop_with_debug_info():
    v = np.cos(np.arange(X.size))
    # the Hessian is diagonal: 4 - 9 sin(3 x)
    np.testing.assert_allclose(pyzyme.hvp(DEBUG[1], X, v), (4.0 - 9.0 * np.sin(3.0 * X)) * v,
                               rtol=1e-10, atol=1e-12)


def test_the_captured_module_defines_what_it_does_without_debug_info():
    from pyzyme.frontends.numba.capture import capture

    def defined(f):
        module = capture(f, (X,)).module
        # Numba's names differ between the builds past the function's own (its hash, its
        # version); the runtime's reference-count helpers are noinline either way
        return sorted(fn.name.split("0x")[0][:40] for fn in module.functions
                      if not fn.is_declaration and not fn.name.startswith("NRT_"))

    plain = _kernels()[1]
    # the loop's body, a function of its own in Numba's module, inlined into its launch
    names = defined(DEBUG[1])
    assert names == defined(plain) and len(names) == 2  # the function and its launch body
