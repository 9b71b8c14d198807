"""Throughput of pyzyme.ir: parsing (``ir.parse_module``) and printing (``str(module)``).

The corpus is the round-trip corpus of tests/corpus/ built in this process: the C/C++ programs
at -O0 and -O2, the hand-written modules and the Numba functions (all but the slowest to
compile) captured with both pipelines. Every module is parsed and printed in rounds until at
least ``--min-lines`` lines have been processed; throughput is lines of input per second, over
all rounds. Target: 30,000 lines/s for each on a 2-core machine.

Run: ``python benchmarks/ir_speed.py`` (about 30 s, most of it compiling the corpus).
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _corpus import corpus_texts, numba_names

from pyzyme import ir
from pyzyme.errors import PyzymeError

TARGET = 30_000


def measure(texts: dict[str, str], min_lines: int) -> dict[str, dict[str, float]]:
    """Per module: lines and seconds spent parsing and printing over all rounds; best parse."""
    readable = {}
    for key, text in texts.items():  # warm-up (first-use paths), and leave out what fails
        try:
            str(ir.parse_module(text))
        except PyzymeError as err:
            print(f"note: {key} left out: {str(err).splitlines()[0]}", file=sys.stderr)
        else:
            readable[key] = text
    texts = readable
    lines = {key: text.count("\n") for key, text in texts.items()}
    rounds = max(1, math.ceil(min_lines / max(1, sum(lines.values()))))
    stats = {
        key: {"lines": 0.0, "parse": 0.0, "print": 0.0, "best_parse": math.inf, "module_lines": n}
        for key, n in lines.items()
    }
    gc.collect()
    for _ in range(rounds):
        for key, text in texts.items():
            t0 = time.perf_counter()
            module = ir.parse_module(text)
            t1 = time.perf_counter()
            str(module)
            t2 = time.perf_counter()
            s = stats[key]
            s["lines"] += lines[key]
            s["parse"] += t1 - t0
            s["print"] += t2 - t1
            s["best_parse"] = min(s["best_parse"], t1 - t0)
    return stats


def report(stats: dict[str, dict[str, float]], slowest: int) -> bool:
    groups: dict[str, dict[str, float]] = defaultdict(
        lambda: {"lines": 0.0, "parse": 0.0, "print": 0.0}
    )
    for key, s in stats.items():
        for group in ("all", key.split("/")[0]):
            for field in ("lines", "parse", "print"):
                groups[group][field] += s[field]
    print(f"{'corpus':8} {'modules':>8} {'lines':>9} {'parse lines/s':>14} {'print lines/s':>14}")
    for group in ("c", "ll", "numba", "all"):
        if group not in groups:
            continue
        g = groups[group]
        n = sum(1 for key in stats if group == "all" or key.startswith(group + "/"))
        print(
            f"{group:8} {n:8d} {int(g['lines']):9d} {g['lines'] / g['parse']:14,.0f} "
            f"{g['lines'] / g['print']:14,.0f}"
        )
    if slowest:
        print("\nslowest modules to parse (best round; modules of at least 200 lines):")
        rate = {k: s["module_lines"] / s["best_parse"] for k, s in stats.items()}
        big = [k for k, s in stats.items() if s["module_lines"] >= 200]
        for key in sorted(big, key=rate.get)[:slowest]:
            print(
                f"  {key:40} {int(stats[key]['module_lines']):6d} lines {rate[key]:10,.0f} lines/s"
            )
    total = groups["all"]
    parse_rate, print_rate = total["lines"] / total["parse"], total["lines"] / total["print"]
    ok = parse_rate >= TARGET and print_rate >= TARGET
    print(
        f"\nparse {parse_rate:,.0f} lines/s, print {print_rate:,.0f} lines/s "
        f"(target {TARGET:,} each): {'OK' if ok else 'BELOW TARGET'}"
    )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--min-lines",
        type=int,
        default=100_000,
        help="process the corpus in rounds until this many lines (default 100000)",
    )
    parser.add_argument(
        "--all-numba",
        action="store_true",
        help="also capture the Numba functions that are slow to compile",
    )
    parser.add_argument("--no-numba", action="store_true", help="leave the Numba corpus out")
    parser.add_argument("--slowest", type=int, default=5, help="list this many slowest modules")
    parser.add_argument("--check", action="store_true", help="exit with 1 below the target")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    names = () if args.no_numba else numba_names(include_slow=args.all_numba)
    texts = corpus_texts(numba=names)
    n_lines = sum(t.count("\n") for t in texts.values())
    print(
        f"corpus: {len(texts)} modules, {n_lines:,} lines, "
        f"built in {time.perf_counter() - t0:.1f} s"
    )
    t1 = time.perf_counter()
    stats = measure(texts, args.min_lines)
    print(f"measured in {time.perf_counter() - t1:.1f} s\n")
    ok = report(stats, args.slowest)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
