"""Run the test suite as shards: several short pytest processes, a few at a time (``make test``).

Compiled code is never freed (Numba's and pyzyme's JIT keep every module they load), so one
process running every test grows to hold all the code the suite compiles: 3 GB and more,
twice that with a pytest-xdist worker per core, each keeping what it compiled until the end.
A shard's process ends with its files, and its memory with it: the peak is what the shards
running at once hold. Test files are dealt to ``--shards`` shards, largest first, each to the
lightest shard so far, by what each file's tests add to a process's memory (measured, in
``shard_memory.json``; a file not measured yet weighs its bytes at the measured files' median
megabytes per byte): bytes alone dealt test_parallel.py and test_reverse_corpus.py, 0.87 GB each,
into one shard of 2.2 GB. The package's doctests are a shard's worth of their own, and so is
each file of ``ALONE`` (one alone holds more than a shard should: test_jax_wrap.py's JAX
runtime and kernels, 1.8 GB). At the end one line counts what all shards did (``N passed, N
failed``), and the exit status is the worst shard's. ``--measure`` runs each test file in a
process of its own instead and writes ``shard_memory.json``.

    python tests/shards.py [--jobs 2] [--shards 12] [--measure] [PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Scripts that tests launch in processes of their own (under mpiexec), named ``*_worker.py``:
#: not modules to import.
WORKER_SUFFIX = "_worker.py"
#: Test files run in a shard of their own (their memory alone is a shard's).
ALONE = ("test_jax_wrap.py",)
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


#: Megabytes each test file's tests add to a process (``--measure``), by path under tests/.
MEMORY = ROOT / "tests" / "shard_memory.json"


def deal(files: list[Path], shards: int, memory: dict | None = None) -> list[list[str]]:
    """``files`` dealt into ``shards`` groups of similar total weight, heaviest first: a
    file's megabytes in ``memory`` (by its path under tests/), else its bytes at the median
    megabytes per byte of the files there (its bytes alone where none are).

    >>> deal([Path("a"), Path("b")], 3)   # missing files weigh nothing; empty groups dropped
    [['a'], ['b']]
    >>> deal([Path("tests/x.py"), Path("tests/y.py"), Path("tests/z.py")], 2,
    ...      {"x.py": 600, "y.py": 500, "z.py": 200})
    [['tests/x.py'], ['tests/y.py', 'tests/z.py']]
    """
    memory = memory or {}

    def size(p: Path) -> int:
        return p.stat().st_size if p.exists() else 0

    rates = [mb / size(p) for p in files if _key(p) in memory and size(p)
             for mb in [memory[_key(p)]]]
    rate = statistics.median(rates) if rates else 1.0

    def weight(p: Path) -> float:
        return memory[_key(p)] if _key(p) in memory else size(p) * rate

    groups: list[tuple[float, list[str]]] = [(0.0, []) for _ in range(shards)]
    for f in sorted(files, key=weight, reverse=True):
        total, members = min(groups, key=lambda g: g[0])
        groups.remove((total, members))
        groups.append((total + weight(f), members + [str(f)]))
    return [sorted(m) for _, m in groups if m]


def _key(p: Path) -> str:
    """``p``'s path under tests/ (its name where it is not under tests/): its key in
    :data:`MEMORY`."""
    parts = p.parts
    return "/".join(parts[parts.index("tests") + 1:]) if "tests" in parts else p.name


def _pytest(pytest_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]


def _finished(items: list, jobs: int, start):
    """``start(item)`` (a process, and what to keep of it) for each of ``items``, ``jobs``
    at a time; yields ``(kept, exit code, resource usage)`` as each process ends."""
    pending, running = list(items), {}
    while pending or running:
        while pending and len(running) < max(1, jobs):
            proc, kept = start(pending.pop(0))
            running[proc.pid] = kept
        pid, status, usage = os.wait4(-1, 0)
        if pid in running:
            yield running.pop(pid), os.waitstatus_to_exitcode(status), usage


def _memory() -> dict:
    try:
        return json.loads(MEMORY.read_text())
    except (OSError, ValueError):
        return {}


def measure(tests: list[Path], jobs: int, pytest_args: list[str]) -> int:
    """Each test file in a process of its own, ``jobs`` at a time; its peak memory over that
    of a process that imports pyzyme and collects nothing, written to :data:`MEMORY`."""
    base = _pytest(pytest_args)
    bare = resource_peak([sys.executable, "-c", "import numba, numpy, pyzyme, pytest"])
    found, worst = {}, 0

    def start(path: Path):
        return subprocess.Popen(base + [str(path)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL), path

    for path, code, usage in _finished(tests, jobs, start):
        if code not in (0, 5):
            worst = code if code > 0 else 1
        key = _key(path)
        found[key] = max(0, round((usage.ru_maxrss - bare) / 1024))
        print(f"{key}: {found[key]} MB (exit {code})", flush=True)
    MEMORY.write_text(json.dumps(dict(sorted(found.items())), indent=1) + "\n")
    return worst


def resource_peak(command: list[str]) -> int:
    """The peak resident set of ``command`` run to its end, in kilobytes."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_maxrss


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="shards running at once")
    parser.add_argument("--shards", type=int, default=12, help="how many shards")
    parser.add_argument("--measure", action="store_true",
                        help=f"measure each test file's memory into {MEMORY.name}")
    opts, pytest_args = parser.parse_known_args(argv)
    tests = sorted((ROOT / "tests").rglob("test_*.py"))
    if opts.measure:
        return measure(tests, opts.jobs, pytest_args)
    # the other modules of tests/ hold doctests too (pytest's --doctest-modules reads them)
    rest = [p for p in (ROOT / "tests").rglob("*.py")
            if not p.name.startswith("test_")
            and p.name not in ("conftest.py", "__init__.py")
            and not p.name.endswith(WORKER_SUFFIX)]
    alone = [[str(p)] for p in tests if p.name in ALONE]
    groups = deal([p for p in tests if p.name not in ALONE], opts.shards, _memory()) + alone + [
        ["pyzyme"] + [str(p) for p in rest]]
    base = _pytest(pytest_args)
    totals: dict[str, int] = {}
    worst = 0
    start = time.time()

    def launch(item):
        index, group = item
        log = open(ROOT / f".pytest-shard-{index}.log", "w+")  # noqa: SIM115
        proc = subprocess.Popen(base + group, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        return proc, (index, group, log, time.time())

    for (index, group, log, began), code, usage in _finished(list(enumerate(groups)),
                                                             opts.jobs, launch):
        log.seek(0)
        output = log.read()
        log.close()
        os.unlink(log.name)
        print(output, end="" if output.endswith("\n") else "\n")
        tail = output.strip().splitlines()[-1] if output.strip() else ""
        for number, what in _COUNT.findall(tail):
            key = "errors" if what.startswith("error") else what
            totals[key] = totals.get(key, 0) + int(number)
        # pytest's 5: this shard collected nothing (every test deselected)
        if code not in (0, 5):
            worst = code if code > 0 else 1
        print(f"[shard {index + 1}/{len(groups)}: {len(group)} paths, "
              f"{time.time() - began:.0f} s, peak {usage.ru_maxrss / 1024:.0f} MB, "
              f"exit {code}]", flush=True)
    print(f"all {len(groups)} shards in {time.time() - start:.0f} s")
    # the closing line: the counts of every shard together
    extra = "".join(f", {n} {k}" for k, n in totals.items() if k not in ("passed", "failed"))
    print(f"{totals.get('passed', 0)} passed, {totals.get('failed', 0)} failed{extra}")
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
