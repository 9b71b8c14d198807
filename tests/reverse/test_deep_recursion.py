"""Derivatives of recursive functions at depths the primal reaches (pyzyme.diff.side_stack).

At a depth of 100,000 the primal runs on Linux's 8 MiB main stack but its derivatives' larger
frames did not fit: reverse mode killed the process. The deep cases run in a subprocess, so that
a crash fails these tests instead of ending pytest; one subprocess serves them all.
"""

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

from pyzyme import Active, Duplicated, Forward, Reverse, autodiff, code_llvm
from pyzyme.runtime.target import side_stacks

DEPTH = 100_000

_DEEP = textwrap.dedent(f"""
    import json, math, numba, numpy as np, pyzyme
    from numba import float64, int64
    from pyzyme import (Active, Const, Duplicated, Forward, Reverse, ReverseSplitWithPrimal,
                        autodiff, autodiff_thunk)
    from pyzyme.settings import Options, using

    @numba.njit(float64(float64, int64))
    def power(x, n):            # x ** n, a multiplication a level
        if n == 0:
            return 1.0
        return x * power(x, n - 1)

    @numba.njit(float64(float64, int64))
    def damped(x, n):           # f_n = sin(f_(n-1)) / 2 + x
        if n == 0:
            return x
        return math.sin(damped(x, n - 1)) * 0.5 + x

    @numba.njit(float64(float64[::1], int64))
    def squares(a, i):          # sum of a[i:] ** 2, one level an element
        if i == a.shape[0]:
            return 0.0
        return a[i] * a[i] + squares(a, i + 1)

    D = {DEPTH}
    out = {{}}
    out["power_rev"] = autodiff(Reverse, power, Active, Active(1.00001), D)[0][0]
    out["damped_rev"] = autodiff(Reverse, damped, Active, Active(0.3), D)[0][0]
    out["damped_fwd"] = autodiff(Forward, damped, Duplicated, Duplicated(0.3, 1.0), D)[1]
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, damped, Active, Active(0.3), Const(D))
    tape, out["split_primal"], _ = fwd(Active(0.3), Const(D))
    out["damped_split"] = rev(Active(0.3), Const(D), 1.0, tape)[0][0]
    a = np.linspace(-1.0, 1.0, D)
    da = np.zeros(D)
    autodiff(Reverse, squares, Active, Duplicated(a, da), Const(0))
    out["squares_error"] = float(np.max(np.abs(da - 2 * a)))
    with using(Options(recursion_stack=1 << 20)):
        try:
            autodiff(Reverse, power, Active, Active(1.00001), D)
        except RecursionError as err:
            out["overflow"] = [type(err).__name__, str(err)]
        out["after_overflow"] = autodiff(Reverse, power, Active, Active(1.00001), 100)[0][0]
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def deep():
    """What the deep cases gave, or the failure of the subprocess that ran them."""
    if not side_stacks():
        pytest.skip("derivatives run on side stacks only on Linux (x86-64, AArch64)")
    run = subprocess.run([sys.executable, "-c", _DEEP], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert run.returncode == 0, (f"the deep derivatives ended the process (status "
                                 f"{run.returncode}): {run.stderr[-3000:]}")
    return json.loads(run.stdout.splitlines()[-1])


def damped_and_derivative(x: float, n: int) -> tuple[float, float]:
    """``damped(x, n)`` and its derivative in ``x``, as a loop: f_k = sin(f_(k-1)) / 2 + x,
    f_k' = cos(f_(k-1)) / 2 f_(k-1)' + 1."""
    f, d = x, 1.0
    for _ in range(n):
        f, d = math.sin(f) * 0.5 + x, math.cos(f) * 0.5 * d + 1.0
    return f, d


def test_reverse_mode_at_depth_100000_gives_the_closed_form(deep):
    x = 1.00001
    assert deep["power_rev"] == pytest.approx(DEPTH * x ** (DEPTH - 1), rel=1e-9)
    assert deep["damped_rev"] == pytest.approx(damped_and_derivative(0.3, DEPTH)[1], rel=1e-12)


def test_forward_mode_at_depth_100000_agrees_with_reverse(deep):
    assert deep["damped_fwd"] == pytest.approx(deep["damped_rev"], rel=1e-12)


def test_split_thunks_at_depth_100000(deep):
    f, d = damped_and_derivative(0.3, DEPTH)
    assert deep["split_primal"] == pytest.approx(f, rel=1e-12)
    assert deep["damped_split"] == pytest.approx(d, rel=1e-12)


def test_array_shadow_through_100000_levels(deep):
    assert deep["squares_error"] < 1e-12  # d/da sum(a ** 2) = 2 a, entry by entry


def test_recursion_deeper_than_the_stack_raises_and_the_next_call_runs(deep):
    name, message = deep["overflow"]
    assert name == "RecursionDepthError"
    assert "__main__.power" in message and "1 MiB" in message
    depth = int(message.split(" recursed ")[1].split()[0])
    assert 1000 < depth < DEPTH  # 1 MiB holds thousands of levels, not 100,000
    assert "hint: write the recursion as a loop" in message
    assert deep["after_overflow"] == pytest.approx(100 * 1.00001 ** 99, rel=1e-12)


# -- moderate depths, in this process: against finite differences -----------------------------
@numba.njit(numba.float64(numba.float64, numba.int64))
def damped(x, n):
    if n == 0:
        return x
    return math.sin(damped(x, n - 1)) * 0.5 + x


@numba.njit
def even(x, n):
    if n == 0:
        return x
    return odd(x, n - 1) * 0.9 + 0.01 * x


@numba.njit
def odd(x, n):
    if n == 0:
        return x * x
    return math.cos(even(x, n - 1))


@numba.njit
def calls_damped(x, n):  # not recursive itself
    return damped(x * x, n) * x


def central(f, x: float, n: int, h: float = 1e-6) -> float:
    return (f(x + h, n) - f(x - h, n)) / (2 * h)


@pytest.mark.parametrize("f", [damped, even, calls_damped], ids=lambda f: f.__name__)
def test_moderate_depth_against_finite_differences(f):
    n, x = 57, 0.4
    (rev, _), = autodiff(Reverse, f, Active, Active(x), n)
    _, tangent = autodiff(Forward, f, Duplicated, Duplicated(x, 1.0), n)
    assert rev == pytest.approx(central(f, x, n), rel=1e-6)
    assert tangent == pytest.approx(rev, rel=1e-12)


def test_only_modules_with_recursion_get_a_side_stack():
    assert "pyzyme.side_stack" not in code_llvm(Reverse, lambda x: x * x, Active, Active(2.0))
    text = code_llvm(Reverse, damped, Active, Active(0.3), 5)
    assert ("pyzyme.side_stack.run" in text) == side_stacks()


def test_threads_each_get_a_stack_of_their_own():
    import threading

    from pyzyme import grad

    g = grad(lambda x: damped(x[0], 3000))

    @numba.njit(nogil=True)
    def repeat(x, out, k):
        for i in range(out.shape[1]):
            out[k, i] = g(x)[0]

    x, out = np.array([0.3]), np.zeros((4, 40))
    repeat(x, out, 0)
    threads = [threading.Thread(target=repeat, args=(x, out, k)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(out, damped_and_derivative(0.3, 3000)[1], rtol=1e-12)
