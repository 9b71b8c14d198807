"""Cost of calling a pyzyme-compiled function from inside an ``@njit`` loop.

``poly(x) = 0.5 * x * x + 1`` is built with pyzyme.ir, compiled with
:func:`pyzyme.runtime.compile_module` and wrapped with :func:`pyzyme.frontends.numba.njit_callable`;
an ``@njit`` loop calls it 10^7 times. The reference is the same loop with the expression written
inline. Because the compiled library is linked into the caller, LLVM inlines the call and the two
loops should cost the same. Run: ``python benchmarks/njit_call.py``.
"""

from __future__ import annotations

import timeit

from numba import njit

from pyzyme import ir
from pyzyme.frontends.numba import njit_callable
from pyzyme.naming import symbol_name
from pyzyme.runtime import compile_module

N = 10_000_000
REPEATS = 5


def build_poly():
    name = symbol_name("bench_poly", "0.5*x*x+1")
    m = ir.Module("bench")
    fn = m.add_function(name, ir.FunctionType(ir.double, [ir.double]))
    b = ir.IRBuilder(fn.append_block("entry"))
    x = fn.args[0]
    b.ret(
        b.fadd(b.fmul(b.fmul(x, x), ir.const_float(ir.double, 0.5)), ir.const_float(ir.double, 1.0))
    )
    return name, njit_callable(
        compile_module(m), name, "float64(float64)", convention="c", arg_names=["x"]
    )


def main() -> None:
    name, poly = build_poly()

    @njit
    def loop_call(n):
        s = 0.0
        for i in range(n):
            s += poly(i * 1e-7)
        return s

    @njit
    def loop_inline(n):
        s = 0.0
        for i in range(n):
            x = i * 1e-7
            s += 0.5 * x * x + 1.0
        return s

    assert loop_call(N) == loop_inline(N)
    t_call = min(timeit.repeat(lambda: loop_call(N), number=1, repeat=REPEATS)) / N * 1e9
    t_inline = min(timeit.repeat(lambda: loop_inline(N), number=1, repeat=REPEATS)) / N * 1e9
    calls_left = loop_call.inspect_llvm(loop_call.signatures[0]).count(f"@{name}(")
    print(f"@njit loop of {N:.0e} iterations, best of {REPEATS}")
    print(f"  calling the pyzyme-compiled function  {t_call:6.3f} ns/iter")
    print(f"  same expression inline                {t_inline:6.3f} ns/iter")
    print(f"  ratio                                 {t_call / t_inline:6.3f}")
    print(f"  calls left in the loop's IR           {calls_left}")


if __name__ == "__main__":
    main()
