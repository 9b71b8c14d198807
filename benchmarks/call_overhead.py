"""Per-call overhead of calling pyzyme-compiled native code from Python.

Two functions are compiled with :func:`pyzyme.runtime.compile_module` and wrapped with
:func:`pyzyme.frontends.numba.njit_callable`:

- ``scalar``: ``double f(double)`` built with pyzyme.ir (C convention);
- ``two arrays``: a copy of a captured ``@njit`` function of two float64 arrays (Numba's native
  convention, n = 8), as a derivative in Numba's convention would be called.

Each is timed against the same work as a plain ``@njit`` function and against an empty Python
function (the floor of any call from Python). Then the API's own cost: ``autodiff`` in both
modes of a scalar function, ``autodiff``, ``grad`` and ``value_and_grad`` of a small function
of one array (n = 8) and ``grad`` of one of three arrays from Python, against the primal's
call: what an optimizer loop written in Python pays per step beyond the derivative's work
(issue 23's targets: ``autodiff`` of a scalar function at most 2 us above its primal, ``grad``
with a few arrays at most 5 us). Run: ``python benchmarks/call_overhead.py``.
"""

from __future__ import annotations

import time
import timeit

import numpy as np
from numba import njit

import pyzyme
from pyzyme import ir
from pyzyme.frontends.numba import capture, njit_callable
from pyzyme.naming import symbol_name
from pyzyme.runtime import compile_module

CALLS = 200_000
API_CALLS = 20_000
REPEATS = 7


def per_call_us(call, calls: int = CALLS) -> float:
    call()
    # process time: what the call costs this process, whatever else the machine runs
    return min(timeit.repeat(call, number=calls, repeat=REPEATS,
                             timer=time.process_time)) / calls * 1e6


def scalar_function():
    name = symbol_name("bench_scalar", "0.5*x*x+1")
    m = ir.Module("bench")
    fn = m.add_function(name, ir.FunctionType(ir.double, [ir.double]))
    b = ir.IRBuilder(fn.append_block("entry"))
    x = fn.args[0]
    b.ret(
        b.fadd(b.fmul(b.fmul(x, x), ir.const_float(ir.double, 0.5)), ir.const_float(ir.double, 1.0))
    )
    return njit_callable(
        compile_module(m), name, "float64(float64)", convention="c", arg_names=["x"]
    )


@njit
def axpy_into(x, y):
    for i in range(x.shape[0]):
        y[i] += 2.0 * x[i]


@njit
def scalar_reference(x):
    return 0.5 * x * x + 1.0


@njit
def sum_of_squares(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@njit
def scalar_loss(a):
    return 0.5 * a * a + 1.0


@njit
def weighted_sum(x, y, z):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i] + z[i]
    return s


def api_rows(x: np.ndarray) -> list[tuple[str, float]]:
    dx = np.zeros_like(x)
    y, z = x.copy(), x.copy()
    grad = pyzyme.grad(sum_of_squares)
    grad3 = pyzyme.grad(weighted_sum, argnums=(0, 1, 2))
    value_and_grad = pyzyme.value_and_grad(sum_of_squares)
    calls = {
        "primal scalar_loss(a)": lambda: scalar_loss(1.5),
        "autodiff(Reverse, Active, Active(a))":
            lambda: pyzyme.autodiff(pyzyme.Reverse, scalar_loss, pyzyme.Active,
                                    pyzyme.Active(1.5)),
        "autodiff(Forward, Duplicated(a, 1.0))":
            lambda: pyzyme.autodiff(pyzyme.Forward, scalar_loss, pyzyme.Duplicated(1.5, 1.0)),
        "primal sum_of_squares(x)": lambda: sum_of_squares(x),
        "autodiff(Reverse, Active, Duplicated(x, dx))":
            lambda: pyzyme.autodiff(pyzyme.Reverse, sum_of_squares, pyzyme.Active,
                                    pyzyme.Duplicated(x, dx)),
        "autodiff(Forward, Duplicated(x, dx))":
            lambda: pyzyme.autodiff(pyzyme.Forward, sum_of_squares, pyzyme.Duplicated(x, dx)),
        "grad(f)(x)": lambda: grad(x),
        "value_and_grad(f)(x)": lambda: value_and_grad(x),
        "primal weighted_sum(x, y, z)": lambda: weighted_sum(x, y, z),
        "grad(f, argnums=(0, 1, 2))(x, y, z)": lambda: grad3(x, y, z),
    }
    return [(label, per_call_us(call, API_CALLS)) for label, call in calls.items()]


def two_array_function():
    cap = capture(axpy_into, (np.ones(8), np.ones(8)))
    module = cap.module
    name = symbol_name("bench_arrays", cap.text)
    module.get_function(cap.symbol).name = name
    return njit_callable(compile_module(module), name, cap.signature, arg_names=["x", "y"])


def main() -> None:
    scalar = scalar_function()
    arrays = two_array_function()
    x, y = np.ones(8), np.zeros(8)

    def empty(*args):
        return None

    rows = [
        ("scalar: pyzyme njit_callable", per_call_us(lambda: scalar(1.5))),
        ("scalar: plain @njit, same work", per_call_us(lambda: scalar_reference(1.5))),
        ("scalar: empty Python function", per_call_us(lambda: empty(1.5))),
        ("two arrays (n=8): pyzyme njit_callable", per_call_us(lambda: arrays(x, y))),
        ("two arrays (n=8): plain @njit, same work", per_call_us(lambda: axpy_into(x, y))),
        ("two arrays: empty Python function", per_call_us(lambda: empty(x, y))),
    ]
    print(f"per-call time from Python (process time), best of {REPEATS} x {CALLS} calls")
    for label, us in rows:
        print(f"  {label:42s} {us:6.3f} us")
    print(f"API calls from Python (n = 8), best of {REPEATS} x {API_CALLS} calls (process time)")
    for label, us in api_rows(x):
        print(f"  {label:46s} {us:7.2f} us")


if __name__ == "__main__":
    main()
