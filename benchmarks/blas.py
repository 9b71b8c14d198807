"""A GEMM-based VJP at BLAS speed: ``C = A @ B`` in @njit code, differentiated by pyzyme.

The primal is one GEMM (Numba's ``numba_xxgemm``); its reverse-mode derivative is two GEMMs
(``dA += dC B^T``, ``dB += A^T dC``), so the gradient should cost about three primals. Printed:
the median time of the primal, of pyzyme's gradient and of the same two GEMMs written by hand
with NumPy, and their ratios to the primal, measured in one process.

A second table does the same for ``np.linalg.inv``, ``det`` and ``cholesky`` (LAPACK's getrf,
getri and potrf, whose rules are GEMMs and triangular inverses), against the closed-form VJP
written with NumPy (``-X^T W X^T`` for the inverse, ``det(A) A^-T`` for the determinant,
Murray's formula for Cholesky).

    python benchmarks/blas.py [--sizes 1024x64x512,512x512x512] [--orders 100,400]
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


@numba.njit
def inv_loss(A, W):
    return np.sum(np.linalg.inv(A) * W)


@numba.njit
def det_loss(A, W):
    return np.linalg.det(A)


@numba.njit
def cholesky_loss(A, W):
    return np.sum(np.linalg.cholesky(A) * W)


def _inv_by_hand(A, W):
    X = np.linalg.inv(A)
    return -X.T @ W @ X.T


def _det_by_hand(A, W):
    return np.linalg.det(A) * np.linalg.inv(A).T


def _cholesky_by_hand(A, W):
    # Murray 2016: Sbar = L^-T Phi(L^T Lbar) L^-1, read from the lower triangle only.
    L = np.linalg.cholesky(A)
    P = np.tril(L.T @ np.tril(W))
    P[np.diag_indices_from(P)] *= 0.5
    Linv = np.linalg.inv(L)
    S = Linv.T @ P @ Linv
    return np.tril(S + S.T, -1) + np.diag(np.diag(S))


LINALG = {"inv": (inv_loss, _inv_by_hand), "det": (det_loss, _det_by_hand),
          "cholesky": (cholesky_loss, _cholesky_by_hand)}


def measure_linalg(name: str, n: int) -> dict:
    rng = np.random.default_rng(0)
    M = rng.standard_normal((n, n)) / np.sqrt(n)
    A = M @ M.T + np.eye(n) if name == "cholesky" else M + 2.0 * np.eye(n)
    if name == "det":
        A = A / abs(np.linalg.det(A)) ** (1.0 / n)   # |det| = 1: no overflow at large n
    W = rng.standard_normal((n, n))
    f, by_hand = LINALG[name]
    dA = np.zeros_like(A)

    def gradient():
        dA[:] = 0.0
        pyzyme.autodiff(Reverse, f, pyzyme.Active, Duplicated(A, dA), Const(W))

    t0 = time.perf_counter()
    gradient()
    first = time.perf_counter() - t0
    ref = by_hand(A, W)
    error = np.abs(dA - ref).max() / np.abs(ref).max()
    return {"shape": f"{name} {n}x{n}", "primal": median_time(lambda: f(A, W)),
            "pyzyme": median_time(gradient), "hand": median_time(lambda: by_hand(A, W)),
            "first": first, "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024x64x512,512x512x512")
    parser.add_argument("--orders", default="100,400")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    print("| product | primal (ms) | pyzyme VJP / primal | two GEMMs by hand / primal | "
          "first call (s) | rel. error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, k, m in sizes:
        r = measure(n, k, m)
        print(f"| {r['shape']} | {1e3 * r['primal']:.2f} | {r['pyzyme'] / r['primal']:.2f}x | "
              f"{r['hand'] / r['primal']:.2f}x | {r['first']:.2f} | {r['error']:.1e} |")
    print()
    print("| function | primal (ms) | pyzyme VJP / primal | closed form with NumPy / primal | "
          "first call (s) | rel. error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in (int(v) for v in args.orders.split(",")):
        for name in LINALG:
            r = measure_linalg(name, n)
            print(f"| {r['shape']} | {1e3 * r['primal']:.2f} | "
                  f"{r['pyzyme'] / r['primal']:.2f}x | {r['hand'] / r['primal']:.2f}x | "
                  f"{r['first']:.2f} | {r['error']:.1e} |")


if __name__ == "__main__":
    main()
