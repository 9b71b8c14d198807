"""``benchmarks/RESULTS.md`` and its chart, from what ``run_all.py`` collected.

The Markdown holds the date, the machine (CPU model and cores from /proc/cpuinfo, Python and
package versions), the exact commands, and each script's output: reverse.py and peers.py print
Markdown tables, the other scripts plain text (fenced). The chart (matplotlib, optional) plots
gradient time / Numba primal time per kernel and tool on a log scale, from peers.py's JSON and
the pyzyme rows of reverse.py's table.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import sys
import textwrap
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

SMALL = ("**A `--small` run**: the matmul is 128x64 @ 64x128 rather than 1024x64 @ 64x512, and "
         "K3L (the GMM at d=64 K=200 n=1000) is left out; `make bench` measures the full sizes.")
MEMORY = (
    "**Peak extra memory** (both tables, every row measured alike; `benchmarks/_memory.py`): in "
    "a second process per kernel, started with glibc's malloc told to map blocks of 64 KiB or "
    "more on their own and to hand freed memory back at once (`MALLOC_MMAP_THRESHOLD_=65536`, "
    "`MALLOC_TRIM_THRESHOLD_=131072`), each gradient is called once to warm up, then "
    "`gc.collect()` and `malloc_trim(0)` hand back what is free, `/proc/self/clear_refs` (\"5\") "
    "resets the resident-set peak, and one more call is measured: `VmHWM` after it minus `VmRSS` "
    "before it. That counts the tape or residuals, the temporaries and the returned gradient, "
    "not the inputs or shadows made before the call. Granularity: pages, and the kernel's "
    "counters are read without synchronising (a few hundred KiB): below 1 MB reads \"< 1 MB\". "
    "pyzyme's \"tape\" column is exact instead: the bytes `Tape.nbytes` reports for the same "
    "call in split mode.")
PACKAGES = ("numba", "llvmlite", "numpy", "jax", "jaxlib", "torch", "autograd", "matplotlib")
MARKDOWN_SCRIPTS = ("reverse.py", "peers.py")   # their stdout is Markdown already


def machine() -> list[str]:
    """Lines describing this machine: CPU model, cores, OS, Python, package versions."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return [f"CPU: {model}, {cores} cores available to the process",
            f"OS: {platform.platform()}; Python {sys.version.split()[0]}",
            "Packages: " + ", ".join(found)]


# --- chart ---------------------------------------------------------------------------------

def pyzyme_ratios(reverse_stdout: str) -> dict[str, float]:
    """{kernel key: gradient/primal ratio} of the "pyzyme reverse" rows of reverse.py's table
    (rows still "pending" or failed are left out)."""
    ratios, key = {}, None
    for line in reverse_stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not line.startswith("|"):
            continue
        m = re.match(r"K\d+L?\b", cells[0])   # K1..K5, K3L
        if m:
            key = m.group(0)
        if key and cells[1].startswith("pyzyme reverse"):
            try:
                ratios[key] = float(cells[3])
            except ValueError:
                pass
    return ratios


def chart(peer_rows: list[dict], pyzyme: dict[str, float], path: Path) -> str | None:
    """Write the PNG; None when it was written, else why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart"
    # per (family, kernel): the fastest row of the family, and whether it was extrapolated
    best: dict[tuple[str, str], tuple[float, bool]] = {}
    keys: list[str] = []
    for r in peer_rows:
        if "ratio" not in r or r["tool"] == "Numba primal":
            continue
        if r["key"] not in keys:
            keys.append(r["key"])
        fam = r["tool"]  # one bar per tool: JAX's loop and vectorized forms share one
        val = (r["ratio"], "extrapolated" in r.get("note", ""))
        if (fam, r["key"]) not in best or val[0] < best[fam, r["key"]][0]:
            best[fam, r["key"]] = val
    for key, ratio in pyzyme.items():
        best["pyzyme reverse", key] = (ratio, False)
    families = ["hand-written", "pyzyme reverse"] + [f for f in dict.fromkeys(
        fam for fam, _ in best) if f not in ("hand-written", "pyzyme reverse")]
    fig, ax = plt.subplots(figsize=(max(10.0, 1.9 * len(keys)), 4.8))
    width = 0.8 / max(1, len(families))
    labelled = set()
    for j, fam in enumerate(families):
        for i, key in enumerate(keys):
            if (fam, key) not in best:
                continue
            ratio, extrapolated = best[fam, key]
            ax.bar(i + (j - (len(families) - 1) / 2) * width, ratio, width,
                   color=f"C{j}", hatch="//" if extrapolated else None,
                   label=None if fam in labelled else fam)
            labelled.add(fam)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(keys)), [
        textwrap.fill(next(r["kernel"] for r in peer_rows if r["key"] == k), 17)
        for k in keys], fontsize=8)
    ax.set_ylabel("gradient time / Numba primal time")
    ax.set_title("Gradient cost relative to the Numba primal (lower is better; "
                 "hatched: extrapolated)", fontsize=10)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# --- RESULTS.md ----------------------------------------------------------------------------

def write(path: Path, runs: list[dict], commands: list[str], chart_note: str | None,
          chart_path: Path | None, noise: str) -> None:
    """``runs``: one dict per script, {"script", "command", "stdout", "rc", "seconds"}."""
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    out = ["# Benchmark results", "",
           f"Measured {now} by `benchmarks/run_all.py` (`make bench`).", "",
           "## Machine", ""]
    out += [f"- {line}" for line in machine()]
    out += ["", f"**Noise.** {noise}", "", "## Commands", "", "```sh", *commands, "```", ""]
    out += ["Every ratio is a gradient's time over the Numba primal's time measured in the same "
            "process, batch by batch (see each script's docstring). Peers are installed with "
            "`pip install -e '.[bench]'`; a peer that is not installed is skipped with a note.",
            ""]
    if any("--small" in c.split() for c in commands):
        out += [SMALL, ""]
    out += [MEMORY, ""]
    if chart_path is not None and chart_note is None:
        out += ["## Chart", "", f"![gradient / primal per kernel and tool]({chart_path.name})",
                "", "Per kernel and tool the fastest of the tool's forms (e.g. JAX vectorized "
                "or fori_loop); pyzyme's bar is reverse.py's `autodiff(Reverse, ...)` row.", ""]
    elif chart_note:
        out += ["## Chart", "", f"Not drawn: {chart_note}.", ""]
    for run in runs:
        status = "" if run["rc"] == 0 else f" (exit status {run['rc']})"
        out += [f"## {run['script']}{status}", "", f"`{run['command']}` "
                f"({run['seconds']:.0f} s)", ""]
        text = run["stdout"].strip()
        if run["script"] in MARKDOWN_SCRIPTS:
            out += [text, ""]
        else:
            out += ["```text", text, "```", ""]
    path.write_text("\n".join(out))
