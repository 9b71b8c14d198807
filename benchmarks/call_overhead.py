"""Per-call overhead of calling pyzyme-compiled native code from Python.

Two functions are compiled with :func:`pyzyme.runtime.compile_module` and wrapped with
:func:`pyzyme.frontends.numba.njit_callable`:

- ``scalar``: ``double f(double)`` built with pyzyme.ir (C convention);
- ``two arrays``: a copy of a captured ``@njit`` function of two float64 arrays (Numba's native
  convention, n = 8), as a derivative in Numba's convention would be called.

Each is timed against the same work as a plain ``@njit`` function and against an empty Python
function (the floor of any call from Python). Run: ``python benchmarks/call_overhead.py``.
"""

from __future__ import annotations

import timeit

import numpy as np
from numba import njit

from pyzyme import ir
from pyzyme.frontends.numba import capture, njit_callable
from pyzyme.runtime import compile_module, symbol_name

CALLS = 200_000
REPEATS = 7


def per_call_us(call) -> float:
    call()
    return min(timeit.repeat(call, number=CALLS, repeat=REPEATS)) / CALLS * 1e6


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
    print(f"per-call time from Python, best of {REPEATS} x {CALLS} calls")
    for label, us in rows:
        print(f"  {label:42s} {us:6.3f} us")


if __name__ == "__main__":
    main()
