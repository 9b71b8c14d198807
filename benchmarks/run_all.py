"""Run every benchmark script in this folder, one after the other (``make bench``), and write
``benchmarks/RESULTS.md`` (tables, commands, machine) and ``benchmarks/ratios.png`` (the chart).

    python benchmarks/run_all.py [--small] [--only reverse,peers]

``--small`` passes ``--small`` to reverse.py and peers.py (a quick run: the smaller matmul, and
no K3L, the GMM at d=64 K=200 n=1000, whose gradients take seconds each; the other scripts have
no such option and run as they are); ``--only`` picks scripts by name. Both tables carry a
"peak extra mem" column measured the same way for every row (``_memory.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _report

HERE = Path(__file__).resolve().parent
SIZED = ("reverse.py", "peers.py")   # the scripts that take --small
NOISE = ("This machine may be shared with other jobs while it runs, and the peers use their "
         "default thread pools on the cores listed above: single figures can be off by tens of "
         "percent (ratios less so: each compares batches run seconds apart). Compare orders of "
         "magnitude, and rerun before reading much into a factor of 1.5.")


def _run(command: list[str]) -> tuple[str, int]:
    """Run ``command`` from the repository root, echoing its stdout as it comes; its stdout
    and exit status (stderr goes straight to the terminal). The repository root goes first on
    the children's PYTHONPATH: a script's own folder, not the working directory, starts its
    sys.path, and the pyzyme measured must be this checkout's, whichever one is installed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    proc = subprocess.Popen(command, cwd=HERE.parent, stdout=subprocess.PIPE, text=True,
                            env=env)
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    return "".join(lines), proc.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small sizes (a quick run)")
    parser.add_argument("--only", help="comma-separated script names, e.g. reverse,peers")
    parser.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    opts = parser.parse_args(argv)
    # kernels.py holds the kernels the other scripts import: not a script
    scripts = sorted(p for p in HERE.glob("*.py")
                     if not p.name.startswith(("_", "run_all")) and p.name != "kernels.py")
    if opts.only:
        wanted = {w.strip().removesuffix(".py") for w in opts.only.split(",")}
        scripts = [p for p in scripts if p.stem in wanted]
    peers_json = Path(tempfile.mkstemp(suffix=".json")[1])
    runs, failed, pyzyme_out = [], [], ""
    for script in scripts:
        extra = ["--small"] if opts.small and script.name in SIZED else []
        if script.name == "peers.py":
            extra += ["--json", str(peers_json)]
        shown = " ".join(["python", f"benchmarks/{script.name}",
                          *[a for a in extra if a not in ("--json", str(peers_json))]])
        print(f"\n=== {shown}", flush=True)
        start = time.perf_counter()
        stdout, rc = _run([sys.executable, str(script), *extra])
        runs.append({"script": script.name, "command": shown, "stdout": stdout, "rc": rc,
                     "seconds": time.perf_counter() - start})
        if script.name == "reverse.py":
            pyzyme_out = stdout
        if rc != 0:
            failed.append(script.name)
    peer_rows = []
    if peers_json.stat().st_size:
        peer_rows = json.loads(peers_json.read_text())["rows"]
    peers_json.unlink()
    chart_path = opts.results.with_name("ratios.png")
    note = (_report.chart(peer_rows, _report.pyzyme_ratios(pyzyme_out), chart_path)
            if peer_rows else "peers.py did not run")
    this = "python benchmarks/run_all.py" + (" " + shlex.join(argv or sys.argv[1:])
                                             if (argv or sys.argv[1:]) else "")
    _report.write(opts.results, runs, [this] + [r["command"] for r in runs], note,
                  chart_path, NOISE)
    print(f"\nwrote {opts.results}" + ("" if note else f" and {chart_path}"))
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
