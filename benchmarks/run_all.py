"""Run every benchmark script in this folder, one after the other (``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).parent
    # kernels.py holds the kernels reverse.py (and later benchmarks) import: not a script
    scripts = sorted(p for p in here.glob("*.py")
                     if not p.name.startswith(("_", "run_all")) and p.name != "kernels.py")
    failed = []
    for script in scripts:
        print(f"\n=== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], cwd=here.parent).returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
