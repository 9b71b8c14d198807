"""Two Taylor series as Numba functions, and their derivatives by pyzyme.

    python examples/taylor.py                      # the derivatives, next to the exact ones
    pyzyme explain examples/taylor.py:taylor_log --args "float64, int64"

``pyzyme explain`` imports this file without running the block at the bottom, takes
``taylor_log`` from it and prints each instruction of its LLVM IR with its activity, its type
and its Python line.
"""

import math

import numba

from pyzyme import Active, Const, Duplicated, Forward, Reverse, autodiff


@numba.njit
def taylor_exp(x, terms):          # exp(x): a loop with a dynamic trip count
    total, term = 0.0, 1.0
    for i in range(1, terms + 1):
        total += term
        term *= x / i
    return total


@numba.njit
def taylor_log(x, n):              # -log(1 - x) = sum of x**i / i
    s = 0.0
    for i in range(1, n):
        s += x ** i / i
    return s


if __name__ == "__main__":
    value, dvalue = autodiff(Forward, taylor_exp, Duplicated, Duplicated(1.5, 1.0), Const(20))
    print(f"d/dx taylor_exp(x, 20) at 1.5 = {dvalue!r}   (exp(1.5) = {math.exp(1.5)!r})")
    ((dx, _),) = autodiff(Reverse, taylor_log, Active, Active(0.5), Const(10**6))
    print(f"d/dx taylor_log(x, 10**6) at 0.5 = {dx!r}   (1 / (1 - 0.5) = 2.0)")
