"""A derivative called (not linked) from @njit code: a cache=True caller must not be cached,
because its machine code would hold an address of the process that compiled it."""

import subprocess
import sys
import textwrap


def test_cached_caller_of_a_called_derivative_recompiles_in_a_new_process(tmp_path):
    module = tmp_path / "cached_caller.py"
    module.write_text(textwrap.dedent("""
        import numba
        import numpy as np
        import pyzyme
        import pyzyme.frontends.numba.bridge as bridge

        bridge._LINK_LIMIT = 0  # call every derivative through its address, as large ones are

        @numba.njit
        def f(x):
            return np.sum(x * x)

        g = pyzyme.grad(f)

        @numba.njit(cache=True)
        def use(x):
            return g(x)[1]

        print(use(np.array([1.0, 2.0, 3.0])))
    """))
    for _ in range(2):  # the second process would find a cached caller, were there one
        run = subprocess.run([sys.executable, str(module)], capture_output=True, text=True,
                             cwd=tmp_path, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == "4.0"
