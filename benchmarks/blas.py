"""A GEMM-based VJP at BLAS speed: ``C = A @ B`` in @njit code, differentiated by pyzyme.

The primal is one GEMM (Numba's ``numba_xxgemm``); its reverse-mode derivative is two GEMMs
(``dA += dC B^T``, ``dB += A^T dC``), so the gradient should cost about three primals. Printed:
the median time of the primal, of pyzyme's gradient and of the same two GEMMs written by hand
with NumPy, and their ratios to the primal, measured in one process.

    python benchmarks/blas.py [--sizes 1024x64x512,512x512x512]
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import pyzyme
from pyzyme import Const, Duplicated, Reverse


@numba.njit
def product(A, B, C):
    C[:] = A @ B


@numba.njit
def hand_vjp(A, B, dA, dB, dC):
    dA += dC @ B.T
    dB += A.T @ dC


def median_time(run, reps: int = 15) -> float:
    run()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def measure(n: int, k: int, m: int) -> dict:
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((n, k)), rng.standard_normal((k, m))
    C, cot = np.empty((n, m)), rng.standard_normal((n, m))
    dA, dB, dC = np.zeros_like(A), np.zeros_like(B), np.zeros_like(C)

    def gradient():
        dA[:] = 0.0
        dB[:] = 0.0
        dC[:] = cot
        pyzyme.autodiff(Reverse, product, Const, Duplicated(A, dA), Duplicated(B, dB),
                        Duplicated(C, dC))

    def by_hand():
        dC[:] = cot
        hand_vjp(A, B, np.zeros_like(A), np.zeros_like(B), dC)

    t0 = time.perf_counter()
    gradient()
    first = time.perf_counter() - t0
    ref_a, ref_b = cot @ B.T, A.T @ cot
    error = max(np.abs(dA - ref_a).max() / np.abs(ref_a).max(),
                np.abs(dB - ref_b).max() / np.abs(ref_b).max())
    primal = median_time(lambda: product(A, B, C))
    return {"shape": f"{n}x{k} @ {k}x{m}", "primal": primal, "pyzyme": median_time(gradient),
            "hand": median_time(by_hand), "first": first, "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024x64x512,512x512x512")
    sizes = [tuple(int(v) for v in s.split("x")) for s in parser.parse_args().sizes.split(",")]
    print("| product | primal (ms) | pyzyme VJP / primal | two GEMMs by hand / primal | "
          "first call (s) | rel. error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, k, m in sizes:
        r = measure(n, k, m)
        print(f"| {r['shape']} | {1e3 * r['primal']:.2f} | {r['pyzyme'] / r['primal']:.2f}x | "
              f"{r['hand'] / r['primal']:.2f}x | {r['first']:.2f} | {r['error']:.1e} |")


if __name__ == "__main__":
    main()
