"""Combined reverse mode against the split pair (augmented primal + reverse) on one kernel.

Enzyme's split mode costs 2-2.2x its combined mode on this machine (Taylor series, matmul VJP):
the tape must leave the function, so nothing stays in registers and LLVM cannot drop primal
work the gradient does not need. pyzyme emits both forms from one generator
(:mod:`pyzyme.diff.reverse.generator`); this measures what the split costs here, in one process, as the
ratio of each form to the Numba primal. Each form is kept out of line (``noinline``), so the
split pair is measured as two calls with the tape between them, not as whatever the inliner
makes of it.

Run: ``python benchmarks/reverse_split.py [--n N]``.
"""

from __future__ import annotations

import argparse
import ctypes
import time

import numba
import numpy as np

from pyzyme import ir
from pyzyme.analysis.activity import Activity
from pyzyme.diff.reverse.generator import ReverseGenerator, ReverseSignature
from pyzyme.frontends.numba import capture, pre_ad
from pyzyme.ir import IRBuilder, types as T
from pyzyme.ir.values import const_float, const_int
from pyzyme.rules import default_rules
from pyzyme.runtime import compile_module
from pyzyme.settings import Options

from kernels import taylor  # after pyzyme, whose capture hook must be in place first


def _driver(module, name: str, call) -> None:
    """``double name(double x, i64 n)``: d taylor / dx through ``call(b, slots, x, n)``."""
    fn = module.add_function(name, T.FunctionType(T.double, [T.double, T.i64]))
    b = IRBuilder(fn.append_block("entry"))
    result = b.alloca(T.double, name="result")
    excinfo = b.alloca(T.ptr, name="excinfo")
    seed = b.alloca(T.double, name="seed")
    b.store(const_float(T.double, 1.0), seed)
    b.ret(call(b, (result, excinfo, seed), fn.args[0], fn.args[1]))


def build(x_n_types=(numba.float64, numba.int64)):
    cap = capture(taylor, x_n_types)
    module = ir.parse_module(cap.text)
    native = module.get_function(cap.symbol)
    pre_ad.ready(module, native, cap.abi, distinct=False,
                 options=Options(interchange_loops=False))  # as autodiff
    acts = (Activity.DUPLICATED, Activity.CONST, Activity.ACTIVE, Activity.CONST)
    gen = ReverseGenerator(module, default_rules())
    combined = gen.derivative(native, ReverseSignature(acts, status_return=True))
    pair = gen.derivative(native, ReverseSignature(acts, status_return=True,
                                                   memory_stable=False, split=True))

    def via_combined(b, slots, x, n):
        result, excinfo, seed = slots
        out = b.call(combined, [result, excinfo, x, n, seed])
        return b.extractvalue(out, 1)

    def via_split(b, slots, x, n):
        result, excinfo, seed = slots
        aug = b.call(pair.augmented, [result, excinfo, x, n, seed])
        tape = b.extractvalue(aug, 1)
        out = b.call(pair.reverse, [result, excinfo, x, n, seed, const_int(T.i1, 0), tape])
        return b.extractvalue(out, 0)

    for fn in (combined, pair.augmented, pair.reverse):
        fn.suffix = (fn.suffix + " noinline").strip()  # each form as a function of its own
    _driver(module, "bench_combined", via_combined)
    _driver(module, "bench_split", via_split)
    for fn in module.functions:
        if not fn.is_declaration:
            fn.linkage = "external" if fn.name.startswith("bench_") else "internal"
    cm = compile_module(str(module), name="pyzyme_bench_split")
    sig = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_int64)
    return (sig(cm.address("bench_combined")), sig(cm.address("bench_split")),
            str(gen.tapes[pair.reverse]))


def _best(fn, *args, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**6)
    n = parser.parse_args().n
    combined, split, tape = build()
    x = 1.0 - 1e-6  # keeps Numba's integer power away from subnormals
    assert abs(combined(x, n) - split(x, n)) <= 1e-12 * abs(combined(x, n))
    taylor(x, n)
    primal = _best(taylor, x, n)
    tc, ts = _best(combined, x, n), _best(split, x, n)
    print(f"Taylor series, n = {n}: primal {primal * 1e3:.2f} ms")
    print("| form | time / primal |")
    print("| --- | --- |")
    print(f"| combined | {tc / primal:.2f} |")
    print(f"| split (augmented + reverse) | {ts / primal:.2f} |")
    print(f"split / combined: {ts / tc:.2f}")
    print(tape)


if __name__ == "__main__":
    main()
