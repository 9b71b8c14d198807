"""The benchmark harness's report code: the tables' columns, the chart's parsing of reverse.py's
table (K3L apart from K3), the extrapolated tape cell and the peak-memory measurement."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def _import_benchmarks(*names: str) -> list:
    """The scripts of benchmarks/ as modules. They import each other by plain names, some of
    which (``reverse``, ``forward``) are also test packages here: those are set aside while the
    scripts import and put back after, so that neither sees the other's."""
    ours = {p.stem for p in BENCH.glob("*.py")}
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if n.split(".")[0] in ours}
    sys.path.insert(0, str(BENCH))
    try:
        return [importlib.import_module(n) for n in names]
    finally:
        sys.path.remove(str(BENCH))
        for n in [n for n in sys.modules if n.split(".")[0] in ours]:
            del sys.modules[n]
        sys.modules.update(saved)


_memory, _report, peers, reverse = _import_benchmarks("_memory", "_report", "peers", "reverse")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_pyzyme_ratios_keeps_k3l_apart_from_k3():
    kernels = []
    for key, ratio in (("K3", "3.15"), ("K3L", "2.47")):
        k = reverse._Kernel(key)
        k.event({"case": f"{key} GMM", "names": ["Numba primal", "hand-written adjoint",
                                                 "pyzyme reverse (autodiff, from Python)"]})
        k.event({"row": 0, "cells": {"time": "1.00 ms", "ratio": "1.00"}})
        k.event({"row": 1, "cells": {"time": "2.00 ms", "ratio": "2.00", "mem": "< 1 MB"}})
        k.event({"row": 2, "cells": {"time": "3.00 ms", "ratio": ratio, "mem": "12.5 MB"}})
        kernels.append(k)
    pending = reverse._Kernel("K5")
    pending.event({"case": "K5 diffusion", "names": ["pyzyme reverse (autodiff, from Python)"]})
    pending.event({"row": 0, "cells": {"time": "pending", "ratio": "pending", "note": "why"}})
    table, notes = reverse._table(kernels + [pending])
    assert _report.pyzyme_ratios(table) == {"K3": 3.15, "K3L": 2.47}
    assert notes == ["why"]
    lines = table.splitlines()
    header = _cells(lines[0])
    assert header[-2:] == ["tape", "peak extra mem"]
    assert all(len(_cells(line)) == len(header) for line in lines)
    assert _cells(lines[4])[header.index("peak extra mem")] == "12.5 MB"


def test_peers_table_has_a_memory_cell_per_row():
    rows = [{"kernel": "K3L GMM", "key": "K3L", "tool": "Numba primal", "row": "primal",
             "time": 0.3, "ratio": 1.0, "first": 1.0, "mem": 0},
            {"kernel": "K3L GMM", "key": "K3L", "tool": "JAX", "row": "JAX jit(grad)",
             "time": 0.6, "ratio": 2.0, "first": 3.0, "err": 1e-12, "mem": 2_345_000_000},
            {"kernel": "K3L GMM", "key": "K3L", "tool": "PyTorch", "row": "torch",
             "note": "error: RuntimeError: x"}]
    lines = peers.table(rows).splitlines()
    header = _cells(lines[0])
    at = header.index("peak extra mem")
    assert [_cells(line)[at] for line in lines[2:]] == ["< 1 MB", "2.35 GB", "-"]
    assert all(len(_cells(line)) == len(header) for line in lines)


def test_extrapolated_tape_is_the_line_through_three_sizes():
    assert (reverse.extrapolated_tape((10, 20, 40), [1_000 + 480 * 10, 1_000 + 480 * 20,
                                                     1_000 + 480 * 40], 1000)
            == "481,000 B (split, extrapolated from n = 10, 20, 40)")
    assert reverse.extrapolated_tape((10, 20, 40), [100, 200, 500], 1000).startswith(
        "not linear in n: 100 / 200 / 500 B")


@pytest.mark.skipif(not _memory.available(), reason="cannot reset the resident-set peak")
def test_peak_extra_sees_an_allocation_and_not_the_state_before_it():
    n = 6_000_000                       # 48 MB: over glibc's largest heap threshold, mmapped
    kept = np.ones(n)                   # exists before the call: not counted
    extra = _memory.peak_extra(lambda: kept * 2.0)
    assert 0.98 * 8 * n <= extra <= 8 * n + 4_000_000
    assert _memory.peak_extra(lambda: float(kept[:10].sum())) < 1_000_000
    assert _memory.fmt(extra).endswith(" MB")


def test_results_md_explains_the_memory_column_and_a_small_run(tmp_path):
    runs = [{"script": "reverse.py", "command": "python benchmarks/reverse.py --small",
             "stdout": "| kernel | what |", "rc": 0, "seconds": 1.0}]
    for commands, small in ((["python benchmarks/run_all.py --small"], True),
                            (["python benchmarks/run_all.py"], False)):
        out = tmp_path / "RESULTS.md"
        _report.write(out, runs, commands, None, None, "noisy")
        text = out.read_text()
        assert ("K3L (the GMM at d=64 K=200 n=1000) is left out" in text) == small
        assert "**Peak extra memory**" in text and "/proc/self/clear_refs" in text
