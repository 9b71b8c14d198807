"""First-call time: a derivative made in a fresh process, and loaded from the on-disk cache.

For each kernel of ``kernels.py`` (copied to a temporary module whose functions are
``@numba.njit(cache=True)``, with ``NUMBA_CACHE_DIR`` a fresh temporary directory), two fresh
processes in turn:

1. the cold process compiles the primal with Numba (timed alone: that is Numba's cost, which
   every first call of the function pays), then makes the derivative: capture, AD, compile
   ("AD + compile"); "first call" is the two together;
2. the warm process calls ``autodiff`` the same way and finds the derivative in pyzyme's
   on-disk cache beside Numba's ("cached"); it must load it from disk (not build it) and give
   the same derivative, bit for bit.

Times are of the ``autodiff`` call (or ``Dispatcher.compile``) inside the process, after
``import pyzyme`` (shown once, "import"). Target (DESIGN.md): first call (AD + compile)
<= 2 s per kernel; a cached second process under 0.3 s.

    python benchmarks/first_call.py [--kernels K1,K3] [--profile K3]

``--profile K`` runs kernel K's cold process under cProfile and prints where the time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# kernel -> (mode, the autodiff call as code; ``K`` is the cached kernels module, ``D`` the
# data directory); each call's result is turned into lists of floats by _flat.
CALLS = {
    "K1 taylor": [
        ("reverse", "autodiff(Reverse, K.taylor, Active, Active(0.5), Const(1000))"),
        ("forward", "autodiff(Forward, K.taylor, Duplicated, Duplicated(0.5, 1.0), "
                    "Const(1000))"),
    ],
    "K2 matmul": [
        ("reverse", "autodiff(Reverse, K.matmul, Const, Duplicated(A, dA), Duplicated(B, dB), "
                    "Duplicated(C, dC))"),
    ],
    "K3 GMM": [
        ("reverse", "autodiff(Reverse, K.gmm_objective, Active, Duplicated(al, dal), "
                    "Duplicated(me, dme), Duplicated(ic, dic), Const(x), Const(g), Const(m))"),
        # forward over reverse, in alphas: the other five arguments held constant
        ("hvp", "pyzyme.hvp(K.gmm_objective, al, np.linspace(-1.0, 1.0, al.size), me, ic, x, "
                "g, m)"),
    ],
    "K4 RK4": [
        ("reverse", "autodiff(Reverse, K.lotka_volterra, Active, Duplicated(p, dp), Const(1.0), "
                    "Const(1.0), Const(1e-3), Const(100))"),
        ("forward", "autodiff(Forward, K.lotka_volterra, Duplicated, Duplicated(p, tp), "
                    "Const(1.0), Const(1.0), Const(1e-3), Const(100))"),
    ],
    "K5 diffusion": [
        ("reverse", "autodiff(Reverse, K.diffusion, Active, Duplicated(u, du), Const(0.25), "
                    "Const(10))"),
        ("forward", "autodiff(Forward, K.diffusion, Duplicated, Duplicated(u, tu), Const(0.25), "
                    "Const(10))"),
    ],
    "K6 softmax 4-D": [
        ("reverse", "autodiff(Reverse, K.softmax_4d, Active, Duplicated(xs, dxs), Const(ws))"),
    ],
}
PRIMAL = {"K1 taylor": ("taylor", "(0.5, 1000)"), "K2 matmul": ("matmul", "(A, B, C)"),
          "K3 GMM": ("gmm_objective", "(al, me, ic, x, g, m)"),
          "K4 RK4": ("lotka_volterra", "(p, 1.0, 1.0, 1e-3, 100)"),
          "K5 diffusion": ("diffusion", "(u, 0.25, 10)"),
          "K6 softmax 4-D": ("softmax_4d", "(xs, ws)")}

_CHILD = r'''
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import numba
import pyzyme
from pyzyme import autodiff, Reverse, Forward, Active, Const, Duplicated
from pyzyme.api.plans import CACHE
import kernels_cached as K
imported = time.perf_counter() - t0
rng = np.random.default_rng(0)
A, B = rng.standard_normal((8, 4)), rng.standard_normal((4, 6)); C = np.zeros((8, 6))
dA, dB, dC = np.zeros_like(A), np.zeros_like(B), rng.standard_normal((8, 6))
al, me, ic, x, g, m = K.read_gmm(sys.argv[3])
dal, dme, dic = np.zeros_like(al), np.zeros_like(me), np.zeros_like(ic)
p, dp, tp = np.array([1.5, 1.0, 3.0, 1.0]), np.zeros(4), np.array([0.5, -0.25, 0.75, 1.0])
u, du, tu = rng.standard_normal(50), np.zeros(50), rng.standard_normal(50)
xs, ws = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 4, 5))
dxs = np.zeros_like(xs)

def flat(v):
    if isinstance(v, np.ndarray):
        return [float(e) for e in v.ravel()]
    if isinstance(v, (tuple, list)):
        return [e for item in v for e in flat(item)]
    return [] if v is None else [float(v)]

out = {"import": imported}
if sys.argv[1] == "cold":
    t = time.perf_counter()
    getattr(K, sys.argv[4]).compile(tuple(numba.typeof(a) for a in eval(sys.argv[5])))
    out["primal"] = time.perf_counter() - t
t = time.perf_counter()
result = eval(sys.argv[2])
out["call"] = time.perf_counter() - t
out["result"] = flat(result) + flat([dA, dB, dal, dme, dic, dp, du, dxs])
out["disk"] = vars(CACHE.disk.stats)
print("RESULT " + json.dumps(out))
'''


def _kernels_module(directory: Path) -> None:
    """``kernels.py`` with every ``@numba.njit`` made ``@numba.njit(cache=True)``."""
    text = (HERE / "kernels.py").read_text()
    text = re.sub(r"^@numba\.njit$", "@numba.njit(cache=True)", text, flags=re.M)
    (directory / "kernels_cached.py").write_text(text)
    (directory / "child.py").write_text(_CHILD)


def _run(directory: Path, mode: str, call: str, primal: tuple[str, str],
         profile: bool = False) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(directory / "cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(directory)]))
    data = str(HERE / "data" / "gmm_d10_K25_n1000.txt")
    cmd = [sys.executable]
    if profile:
        cmd += ["-m", "cProfile", "-s", "cumulative"]
    cmd += [str(directory / "child.py"), mode, call, data, *primal]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=directory)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} process failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if profile:
        shown = [ln for ln in proc.stdout.splitlines() if not ln.startswith("RESULT ")]
        print("\n".join(shown[:60]))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def measure(kernels) -> list[dict]:
    rows = []
    for name in kernels:
        for mode, call in CALLS[name]:
            with tempfile.TemporaryDirectory(prefix="pyzyme-first-call-") as tmp:
                directory = Path(tmp)
                _kernels_module(directory)
                cold = _run(directory, "cold", call, PRIMAL[name])
                warm = _run(directory, "warm", call, PRIMAL[name])
            same = cold["result"] == warm["result"]
            rows.append({"kernel": name, "mode": mode, "import": warm["import"],
                         "primal": cold["primal"], "ad": cold["call"],
                         "first": cold["primal"] + cold["call"], "cached": warm["call"],
                         "loaded": warm["disk"]["loaded"] == 1 and warm["disk"]["stored"] == 0,
                         "same": same})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| kernel | mode | Numba primal compile | AD + compile | first call | cached "
             "(second process) | loaded from disk, same derivative |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        flag = "yes" if r["loaded"] and r["same"] else \
            f"NO (loaded={r['loaded']}, same={r['same']})"
        lines.append(f"| {r['kernel']} | {r['mode']} | {r['primal']:.2f} s | {r['ad']:.2f} s | "
                     f"{r['first']:.2f} s | {r['cached'] * 1e3:.0f} ms | {flag} |")
    imports = sorted(r["import"] for r in rows)
    lines.append(f"\n(`import pyzyme` and the kernels module: {imports[len(imports) // 2]:.2f} s "
                 f"per process, not included)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=",".join(k.split()[0] for k in CALLS),
                        help="comma-separated kernel ids, e.g. K1,K3")
    parser.add_argument("--profile", default=None, help="profile the cold process of one kernel")
    args = parser.parse_args()
    wanted = args.kernels.split(",")
    if args.profile:
        name = next(k for k in CALLS if k.split()[0] == args.profile)
        with tempfile.TemporaryDirectory(prefix="pyzyme-first-call-") as tmp:
            _kernels_module(Path(tmp))
            _run(Path(tmp), "cold", CALLS[name][0][1], PRIMAL[name], profile=True)
        return 0
    start = time.perf_counter()
    rows = measure([k for k in CALLS if k.split()[0] in wanted])
    print(table(rows))
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0 if all(r["loaded"] and r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
