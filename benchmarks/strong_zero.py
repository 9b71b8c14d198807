"""What strong zero costs: each kernel's derivative with the option on, over the same with it off.

Strong zero (on by default) keeps a zero adjoint or tangent from turning an infinite partial
into NaN, with a compare and a select on each product whose partial can be non-finite
(``pyzyme.analysis.finite``). For each kernel of ``reverse.py`` (K3L left out: seconds a call)
and each mode it has, this builds the derivative twice, on fresh copies of the kernel, with the
option on and off, and shows how many guards the optimized derivative keeps (``select``s on a
compare with zero that the option added) and the median ratio of batches of the two, timed
alternately (as ``reverse.py`` times against the primal). A ratio of 1.00 with no guards is the
expected case: the derivative is then the same code.

    python benchmarks/strong_zero.py [--kernels K1,K5]
"""

from __future__ import annotations

import argparse
import re
import statistics

import numpy as np

import pyzyme
from pyzyme.settings import Options, using

import kernels as K  # noqa: F401 - after pyzyme, whose capture hook must be in place first
import reverse as R

OFF = Options(strong_zero=False)
_GUARD = re.compile(r"fcmp (?:fast |[a-z ]*)?(?:oeq|une)\b")


def _cases():
    return {"K1": R.taylor_case(10**6), "K2": R.matmul_case(True), "K3": R.gmm_case(False),
            "K4": R.lotka_volterra_case(), "K5": R.diffusion_case()}


def _measure(make, label: str, samples: int = 9) -> tuple[str, float, float]:
    """(label, ratio on/off, max relative difference of the results)."""
    samplers, results = [], []
    for options in (Options(), OFF):
        prepare, run = make()
        with using(options):          # the derivative is built (and cached) under these
            prepare()
            results.append(run())
        samplers.append(R._call_sampler(prepare, run))
    ratios = []
    for _ in range(samples):
        on, off = samplers[0](), samplers[1]()
        ratios.append(on / off)
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / (np.abs(np.asarray(b)) + 1e-300)))
               for a, b in zip(results[0], results[1]))
    return label, statistics.median(ratios), diff


def _guards(code: str) -> int:
    return len(_GUARD.findall(code))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="K1,K2,K3,K4,K5")
    opts = parser.parse_args(argv)
    cases = _cases()
    print("| kernel | mode | guards (on - off) | time on / off | max rel. diff |")
    print("| --- | --- | --- | --- | --- |")
    for name in opts.kernels.split(","):
        case = cases[name]
        modes = [("reverse", case.reverse)]
        if case.forward is not None:
            modes.append(("forward", lambda f, fw=case.forward: (lambda: None,
                                                                  lambda: [fw(f)()])))
        for mode, build in modes:
            fns = {}

            def make(build=build, fns=fns):
                f = K.fresh(case.primal)
                fns.setdefault("f", []).append(f)
                return build(f)
            label, ratio, diff = _measure(make, f"{name} {mode}")
            counts = []
            for f, options in zip(fns["f"], (Options(), OFF)):
                counts.append(_guards(_code(case, mode, f, options)))
            print(f"| {case.name} | {mode} | {counts[0] - counts[1]} | {ratio:.3f}x | "
                  f"{diff:.1e} |", flush=True)
    return 0


def _code(case, mode: str, f, options: Options) -> str:
    """The optimized derivative's IR, for counting guards (Const for every non-array)."""
    args = []
    for a in case.args:
        if isinstance(a, np.ndarray):
            args.append(pyzyme.Duplicated(a, np.ones_like(a)))
        elif isinstance(a, float) and not args:
            args.append(pyzyme.Active(a) if mode == "reverse" else pyzyme.Duplicated(a, 1.0))
        else:
            args.append(pyzyme.Const(a))
    ret = None
    if case.primal_returns_value:
        ret = pyzyme.Active if mode == "reverse" else pyzyme.Duplicated
    else:
        ret = pyzyme.Const
    m = pyzyme.Reverse if mode == "reverse" else pyzyme.Forward
    with using(options):
        return pyzyme.code_llvm(m, f, ret, *args)


if __name__ == "__main__":
    raise SystemExit(main())
