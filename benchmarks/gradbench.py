"""GradBench's evals (issue 23): pyzyme's derivative / primal time for each eval and input
size, next to the ratios GradBench publishes for other tools, in one process.

Each eval is pyzyme's GradBench tool module (``pyzyme.gradbench.evals.<eval>``): the Numba
primal the eval asks for and its derivative by pyzyme, called exactly as
``python -m pyzyme.gradbench`` calls them (``FUNCTIONS[name].arguments(input)`` untimed, then
``FUNCTIONS[name].run(*arguments)`` timed). Inputs are made here at GradBench's default sizes
(the evals' ``run.py`` defaults at gradbench/gradbench f26651a), with random values of the
eval's shapes: the ratios do not depend on the values, and no GradBench file is needed.

- gmm: d 2 10 20 32 64 x k 5 10 25 50 100, n 1000; lse: n 2500 .. 1280000 (doubling);
  llsq: n 16 .. 16392, m 128; kmeans: k 10 100 1000 x n 1000 10000 x d 8 16; ode: n 1000 10000
  100000 x s 1 10 100; det: ell 5 .. 10 (ell 11's tape needs about 50 GB); lstm: l 2 4 6 x
  c 1024 4096 8192 (b 14); ba: the n, m, p of ADBench's ba1 .. ba14; ht: the point counts of
  ADBench's hand1 .. hand12, complicated variant, on a hand model of ADBench's size (22 bones,
  544 vertices) with random values; particle and saddle: their four nested-mode variants (no
  primal, so a time per call).

Times: the best of ``--repeat`` samples (each a batch of calls lasting at least 20 ms of the
process's CPU time, per call), primal and derivative alternating, with Numba on one thread (as
GradBench's published figures). "first call" is the first call's time, compilation included
(the primal's is Numba's compile, the derivative's pyzyme's AD and compile too). GradBench
itself reports the mean of ``min_seconds`` worth of runs; minima are steadier on a shared
machine.

    python benchmarks/gradbench.py [--small] [--evals gmm,lse] [--repeat 5]

``--small``: the first two sizes of each eval.
"""

from __future__ import annotations

import argparse
import importlib
import math
import statistics
import sys
import time

import numba
import numpy as np

from pyzyme.gradbench.evals import EVALS

#: GradBench nightly 2026-03-14: median derivative / primal time over the inputs, each tool
#: against its own primal (the figures issue 23 quotes)
PUBLISHED = {
    "gmm": {"Enzyme": 6.91, "JAX": 3.23, "PyTorch": 3.47, "Tapenade": 3.17},
    "ba": {"Enzyme": 9.74, "Tapenade": 14.1},
    "ht": {"Enzyme": 48.0, "Tapenade": 67.6},
    "lstm": {"Enzyme": 2.80, "PyTorch": 2.73, "CoDiPack": 2.12},
    "kmeans": {"Enzyme": 2.81, "JAX": 2.15, "Futhark": 1.37},
    "lse": {"Enzyme": 2.14, "JAX": 1.20},
    "ode": {"Enzyme": 3.21, "JAX": 2.57},
    "llsq": {"Enzyme": 1.44, "JAX": 1.14},
    "det": {"Enzyme": 15.1, "Futhark": 1.11},
}

#: (primal, derivative) function names of each eval; particle and saddle have variants only
PAIRS = {"gmm": ("objective", "jacobian"), "ba": ("objective", "jacobian"),
         "ht": ("objective", "jacobian"), "lstm": ("objective", "jacobian"),
         "kmeans": ("cost", "dir"), "lse": ("primal", "gradient"),
         "ode": ("primal", "gradient"), "llsq": ("primal", "gradient"),
         "det": ("primal", "gradient")}
VARIANTS = ("rr", "rf", "fr", "ff")

BA_SIZES = [(49, 7776, 31843), (21, 11315, 36455), (161, 48126, 182072),
            (372, 47423, 204472), (257, 65132, 225911), (539, 65220, 277273),
            (93, 61203, 287451), (88, 64298, 383937), (810, 88814, 393775),
            (1197, 126327, 563734), (1723, 156502, 678718), (253, 163691, 899155),
            (245, 198739, 1091386), (356, 226730, 1255268)]
HT_POINTS = [100, 192, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200, 100000]


# -- inputs, as GradBench's evals send them -------------------------------------------------
def _gmm(rng):
    for d in (2, 10, 20, 32, 64):
        for k in (5, 10, 25, 50, 100):
            n = 1000
            yield f"{d}_{k}_{n}", {
                "d": d, "k": k, "n": n, "m": 0, "gamma": 1.0,
                "alpha": rng.standard_normal(k), "mu": rng.random((k, d)),
                "q": rng.standard_normal((k, d)),
                "l": rng.standard_normal((k, d * (d - 1) // 2)),
                "x": rng.standard_normal((n, d))}


def _lse(rng):
    for j in range(10):
        n = 2500 * 2 ** j
        yield f"n={n}", {"x": rng.standard_normal(n)}


def _llsq(rng):
    for n in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8196, 16392):
        yield f"n={n}", {"x": rng.standard_normal(128), "n": n}


def _kmeans(rng):
    for k in (10, 100, 1000):
        for n in (1000, 10000):
            for d in (8, 16):
                points = rng.random((n, d))
                yield f"k={k},n={n},d={d}", {"points": points, "centroids": points[-k:]}


def _ode(rng):
    for n in (1000, 10000, 100000):
        for s in (1, 10, 100):
            yield f"n={n},s={s}", {"x": rng.random(n), "s": s}


def _det(rng):
    for ell in range(5, 11):
        yield f"ell={ell}", {"A": rng.standard_normal(ell * ell), "ell": ell}


def _lstm(rng):
    b = 14
    for c in (1024, 4096, 8192):
        for layers in (2, 4, 6):
            yield f"l={layers},c={c}", {
                "main_params": rng.uniform(-1, 1, (2 * layers, 4 * b)),
                "extra_params": rng.uniform(-1, 1, (3, b)),
                "state": rng.uniform(-1, 1, (2 * layers, b)),
                "sequence": (rng.random((c, b)) < 0.5).astype(float)}


def _ba(rng):
    for i, (n, m, p) in enumerate(BA_SIZES, 1):
        cam = np.concatenate([0.1 * rng.standard_normal(3), rng.standard_normal(3), [1.0],
                              0.1 * rng.standard_normal(2), 1e-3 * rng.standard_normal(2)])
        yield f"ba{i}", {"n": n, "m": m, "p": p, "cam": cam,
                         "x": rng.standard_normal(3) + [0.0, 0.0, -5.0],
                         "w": float(rng.random()), "feat": rng.standard_normal(2)}


def _hand_model(rng, bones=22, vertices=544, triangles=1084):
    def transforms(count):
        t = np.zeros((count, 4, 4))
        for j in range(count):
            q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
            t[j, :3, :3], t[j, :3, 3], t[j, 3, 3] = q, 0.1 * rng.standard_normal(3), 1.0
        return t
    weights = rng.random((vertices, bones))
    positions = np.ones((vertices, 4))
    positions[:, :3] = rng.standard_normal((vertices, 3))
    return {"bone_count": bones, "bone_names": [f"b{j}" for j in range(bones)],
            "parents": [-1] + [j - 1 if j % 4 != 1 else 0 for j in range(1, bones)],
            "base_relatives": transforms(bones), "inverse_base_absolutes": transforms(bones),
            "base_positions": positions, "weights": weights / weights.sum(1, keepdims=True),
            "triangles": rng.integers(0, vertices, (triangles, 3)), "is_mirrored": False}


def _ht(rng):
    model = _hand_model(rng)
    for i, count in enumerate(HT_POINTS, 1):
        us = rng.random((count, 2)) * 0.5
        yield f"hand{i}", {
            "theta": 0.1 * rng.standard_normal(26), "us": us,
            "data": {"model": model, "points": rng.standard_normal((count, 3)),
                     "correspondences": rng.integers(0, len(model["triangles"]), count)}}


INPUTS = {"gmm": _gmm, "lse": _lse, "llsq": _llsq, "kmeans": _kmeans, "ode": _ode,
          "det": _det, "lstm": _lstm, "ba": _ba, "ht": _ht}


# -- timing ---------------------------------------------------------------------------------
def _sample(run, args) -> float:
    """One sample: seconds per call, over a batch of calls lasting at least 20 ms of this
    process's CPU time (Numba runs on one thread here): on a machine shared with other work,
    wall-clock batches also counted the time the process waited for a core."""
    calls, start = 0, time.process_time()
    while True:
        run(*args)
        calls += 1
        elapsed = time.process_time() - start
        if elapsed >= 0.02:
            return elapsed / calls


def _first(run, args) -> float:
    start = time.perf_counter()
    run(*args)
    return time.perf_counter() - start


def _eval_rows(name: str, small: bool, repeat: int):
    """``(rows, first calls, ratios)`` of one eval: a row per input."""
    functions = importlib.import_module(EVALS[name]).FUNCTIONS
    primal, derivative = (functions[f] for f in PAIRS[name])
    rows, ratios, first = [], [], None
    inputs = list(INPUTS[name](np.random.default_rng(31337)))
    for description, data in inputs[:2] if small else inputs:
        pa, da = primal.arguments(data), derivative.arguments(data)
        if first is None:
            first = (_first(primal.run, pa), _first(derivative.run, da))
        times = [math.inf, math.inf]
        for _ in range(repeat):
            times[0] = min(times[0], _sample(primal.run, pa))
            times[1] = min(times[1], _sample(derivative.run, da))
        ratios.append(times[1] / times[0])
        rows.append(f"| {description} | {times[0] * 1e3:.4g} | {times[1] * 1e3:.4g} | "
                    f"{ratios[-1]:.2f} |")
        print(f"  {name} {description}: {ratios[-1]:.2f}", file=sys.stderr, flush=True)
    return rows, first, ratios


def _variants(name: str, repeat: int) -> str:
    functions = importlib.import_module(EVALS[name]).FUNCTIONS
    data = {"w": 0.0} if name == "particle" else {"start": [1.0, 1.0]}
    cells = []
    for variant in VARIANTS:
        args = functions[variant].arguments(data)
        first = _first(functions[variant].run, args)
        best = min(_sample(functions[variant].run, args) for _ in range(repeat))
        cells.append(f"{variant} {best * 1e3:.3g} ms (first {first:.2g} s)")
    return f"| {name} | " + " | ".join(cells) + " |"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the first two sizes of each eval")
    parser.add_argument("--evals", help="comma-separated evals (default: all)")
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args(argv)
    numba.set_num_threads(1)
    chosen = opts.evals.split(",") if opts.evals else [*PAIRS, "particle", "saddle"]
    start = time.perf_counter()
    summary, details, nested = [], [], []
    for name in chosen:
        if name in ("particle", "saddle"):
            nested.append(_variants(name, opts.repeat))
            continue
        rows, first, ratios = _eval_rows(name, opts.small, opts.repeat)
        geo = math.exp(statistics.fmean(math.log(r) for r in ratios))
        published = PUBLISHED[name]
        peers = ", ".join(f"{tool} {r:g}" for tool, r in published.items())
        best = min(published.values())
        enzyme = published["Enzyme"]
        summary.append(f"| {name} | {len(ratios)} | {statistics.median(ratios):.2f} | "
                       f"{geo:.2f} | {min(ratios):.2f}-{max(ratios):.2f} | {peers} | "
                       f"{'yes' if statistics.median(ratios) <= enzyme else 'no'} | "
                       f"{'yes' if statistics.median(ratios) <= best else 'no'} | "
                       f"{first[0]:.2f} / {first[1]:.2f} |")
        details.append(f"\n**{name}** ({' / '.join(PAIRS[name])})\n\n"
                       "| input | primal (ms) | derivative (ms) | ratio |\n"
                       "| --- | ---: | ---: | ---: |\n" + "\n".join(rows))
    print("| eval | inputs | median ratio | geometric mean | range | published (median) | "
          "<= Enzyme | <= best published | first call primal / derivative (s) |")
    print("| --- | ---: | ---: | ---: | --- | --- | --- | --- | ---: |")
    print("\n".join(summary))
    if nested:
        print("\n| nested eval | " + " | ".join(VARIANTS) + " |")
        print("| --- |" + " --- |" * len(VARIANTS))
        print("\n".join(nested))
    print("\n".join(details))
    print(f"\n(numba {numba.__version__}, one thread; best of {opts.repeat} samples; "
          f"{time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
