"""Functions whose Numba helpers stay calls (as with ``NUMBA_ENABLE_PROFILING=1``, which also
adds debug information): ``np.empty`` then fills its result through a stack slot, and errors
come back through ``excinfo``. Both modes must see the new array's shadow."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import numba
    import numpy as np
    from pyzyme import Active, Duplicated, Forward, Reverse, autodiff

    @numba.njit
    def f(x):
        t = np.empty(x.shape[0])
        for i in range(x.shape[0]):
            t[i] = x[i] * x[i]
        return t.sum()

    x = np.linspace(0.1, 1.0, 5)
    dx = np.zeros(5)
    autodiff(Reverse, f, Active, Duplicated(x, dx))
    _, tangent = autodiff(Forward, f, Duplicated, Duplicated(x, np.ones(5)))
    print(" ".join(repr(float(v)) for v in [*dx, tangent]))
""")


def test_helpers_kept_as_calls():
    env = {**os.environ, "NUMBA_ENABLE_PROFILING": "1"}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", SCRIPT], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    *grad, tangent = map(float, out.stdout.split())
    x = [0.1 + 0.225 * i for i in range(5)]
    assert all(abs(g - 2 * v) < 1e-12 for g, v in zip(grad, x)) and len(grad) == 5
    assert abs(tangent - sum(2 * v for v in x)) < 1e-12
