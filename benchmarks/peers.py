"""Peers: the gradients of K1..K5 and K3L as JAX, PyTorch, HIPS autograd and finite differences
give them.

Each kernel of ``kernels.py`` is differentiated the way a user of each tool would write it
(``_peer_jax.py``, ``_peer_torch.py``, ``_peer_autograd.py``: vectorized where that is the
tool's idiom, loops where nothing else exists) and by central finite differences on the Numba
primal. Every row gives, in one process and timed as ``reverse.py`` times pyzyme's rows:

- "time": the median seconds per gradient, after warm-up, called from Python (as the tools
  are used); "/ primal": the median ratio of a batch of gradients to a batch of Numba primal
  calls (from an @njit driver loop) run just before it, so that load drift cancels;
- "first call": the first call on a freshly built gradient (tracing and XLA compilation for JAX;
  for FD, compiling a fresh copy of the primal plus one gradient);
- "max rel. err": against the hand-written Numba adjoint, elementwise, each denominator floored
  at 1e-6 x the largest entry of the reference (as reverse.py);
- "peak extra mem": how far the resident set rose, at its highest, during one gradient call
  after a warm-up call, over the resident set just before it (``_memory.py``: the method and its
  granularity), measured for each kernel in a process of its own started with a malloc that
  hands freed memory back at once (never the process that times). It counts the tool's tape or
  residuals, its temporaries and the gradient it returns, not the inputs.

K3 is ADBench's GMM instance d=10 K=25 n=1000; K3L the same objective at d=64 K=200 n=1000, drawn
from ADBench's distributions, measured in a full-size run and left out by ``--small`` (name it
in ``--kernels`` to measure it anyway).

Rows marked "extrapolated" were timed on a smaller problem and scaled linearly: a tool's Python
loop over 10x fewer time steps (its error is against the hand-written adjoint at that size, and
its memory, a tape growing with the steps, is scaled too), or finite differences over a sample
of the inputs (2 primal calls per input; the error is over the sampled inputs; the memory is
that of the sampled run: FD keeps nothing from one input to the next). A tool that is not
installed is skipped with a note (``pip install -e .[bench]`` installs them all). The
hand-written adjoint's row is repeated from reverse.py's method for scale.

    python benchmarks/peers.py [--small] [--kernels K1,K3L] [--tools jax,torch] [--no-memory]
                               [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np

# reverse.py's timing, so that the peers' ratios mean what pyzyme's mean (it imports pyzyme,
# whose capture hook must be in place before Numba compiles the kernels)
from reverse import (_call_loop, _call_sampler, _first_call, _fmt_t, _loop_sampler, _max_rel,
                     _Primal, _value_loop)

import _memory
import _problems
import kernels as K

TOOLS = {"jax": "_peer_jax", "torch": "_peer_torch", "autograd": "_peer_autograd"}
FD_SAMPLE = 32   # inputs finite differences are timed on, where a kernel has more than 64


def _fmt_err(e: float) -> str:
    return f"{e:.1e}" + (" (!)" if e > 1e-6 else "")


# --- finite differences --------------------------------------------------------------------

def fd_gradient(p: _problems.Problem, h: float = 1e-6, sample: int = FD_SAMPLE):
    """``run()`` giving central differences of ``p.objective`` in the sampled inputs, the
    sample (per gradient array, flat indices) and the factor from the sample to all inputs."""
    arrays = [p.data[w].reshape(-1) for w in p.wrt]  # views: perturbing them perturbs p
    flat = [(a, i) for a, arr in enumerate(arrays) for i in range(arr.size)]
    if len(flat) > 2 * sample:
        picks = [flat[j] for j in np.linspace(0, len(flat) - 1, sample).astype(int)]
    else:
        picks = flat
    f = p.objective

    def run():
        out = []
        for a, i in picks:
            x = arrays[a]
            x0 = x[i]
            step = h * max(1.0, abs(x0))
            x[i] = x0 + step
            fp = f()
            x[i] = x0 - step
            fm = f()
            x[i] = x0
            out.append((fp - fm) / (2.0 * step))
        return out

    return run, picks, len(flat) / len(picks)


def _fd_error(p, picks, got) -> float:
    worst = 0.0
    for (a, i), g in zip(picks, got, strict=True):
        ref = p.ref[a].reshape(-1)
        floor = max(1e-6 * float(np.max(np.abs(ref))), np.finfo(np.float64).tiny)
        worst = max(worst, abs(g - ref[i]) / max(abs(ref[i]), floor))
    return worst


# --- one kernel ----------------------------------------------------------------------------

def _scaled(sampler, factor):
    return lambda: sampler() * factor


def _tool_rows(key: str, tools: dict, p: _problems.Problem, size: str):
    """(tool, label, problem to run it on, shrink, builder) for each tool's rows of ``key``."""
    for name, module in tools.items():
        for label, build, shrink in module.ROWS[key]:
            q = p if shrink == 1 else _problems.make(key, size, shrink)
            yield name, label, q, shrink, build


def measure(key: str, tools: dict, opts) -> list[dict]:
    """Rows for kernel ``key``: primal, hand-written adjoint, each tool's, finite differences."""
    size = "small" if opts.small else "full"
    p = _problems.make(key, size)
    rows = []

    def row(tool, label, **cells):
        rows.append({"kernel": p.name, "key": key, "tool": tool, "row": label, **cells})

    first, _ = _first_call(lambda: K.fresh(p.primal)(*p.args))
    primal_loop = (_value_loop if p.returns_value else _call_loop)(p.primal)
    primal = _Primal(_loop_sampler(primal_loop, p.args))
    primal.sampler()
    row("Numba primal", "Numba primal (@njit loop)", first=first, ratio=1.0)

    fn, args = p.adjoint
    first, _ = _first_call(lambda: K.fresh(fn)(*args))
    loop = (_value_loop if fn is K.taylor_adjoint else _call_loop)(fn)
    t, ratio = primal.compare(_loop_sampler(loop, args))
    row("hand-written", "hand-written adjoint (@njit loop)", time=t, ratio=ratio, first=first,
        err=0.0, note="the reference")

    for name, label, q, shrink, build in _tool_rows(key, tools, p, size):
        note = f"extrapolated x{shrink} from {q.name.split(' ', 1)[1]}" if shrink != 1 else ""
        try:
            t0 = time.perf_counter()
            run = build(q)
            got = run()
            first = (time.perf_counter() - t0) * shrink  # no compilation to scale wrongly
            err = _max_rel(got, q.ref)
            t, ratio = primal.compare(_scaled(_call_sampler(lambda: None, run), shrink))
            row(name, label, time=t, ratio=ratio, first=first, err=err, note=note)
        except Exception as exc:  # noqa: BLE001 - one failing peer must not end the table
            msg = (str(exc).strip().splitlines() or [""])[0][:160]
            row(name, label, note=f"error: {type(exc).__name__}: {msg}")

    run, picks, factor = fd_gradient(p)
    compile_s, _ = _first_call(lambda: K.fresh(p.primal)(*p.args))
    run_s, got = _first_call(run)
    first = compile_s + run_s * factor
    note = ("" if factor == 1 else
            f"extrapolated from {len(picks)} of {round(len(picks) * factor):,} inputs")
    t, ratio = primal.compare(_scaled(_call_sampler(lambda: None, run), factor))
    row("central FD", "central finite differences (Numba primal)", time=t, ratio=ratio,
        first=first, err=_fd_error(p, picks, got), note=note)
    rows[0]["time"] = primal.time
    return rows


# --- peak extra memory ---------------------------------------------------------------------

def measure_memory(key: str, tools: dict, opts) -> dict[str, int]:
    """{row label: peak extra bytes of one call} for kernel ``key``'s rows, as :func:`measure`
    builds them; run in a process started with :data:`_memory.ENV` (see ``_memory.py``)."""
    size = "small" if opts.small else "full"
    p = _problems.make(key, size)
    out = {"Numba primal (@njit loop)": _memory.peak_extra(lambda: p.primal(*p.args))}
    fn, args = p.adjoint
    out["hand-written adjoint (@njit loop)"] = _memory.peak_extra(lambda: fn(*args))
    for _, label, q, shrink, build in _tool_rows(key, tools, p, size):
        try:
            out[label] = _memory.peak_extra(build(q)) * shrink
        except Exception:  # noqa: BLE001 - measure() reports the error in the row
            pass
    run, _, _ = fd_gradient(p, sample=2)   # its peak is one primal call's, at any sample size
    out["central finite differences (Numba primal)"] = _memory.peak_extra(run)
    return out


def _memory_in_child(key: str, opts) -> tuple[dict[str, int], str]:
    """:func:`measure_memory` in a fresh process with the measuring malloc; its figures and,
    if it failed, why."""
    command = [sys.executable, str(Path(__file__).resolve()), "--kernels", key,
               "--tools", opts.tools, "--memory-child"] + (["--small"] if opts.small else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=_memory.child_env(),
                              timeout=opts.timeout)
    except subprocess.TimeoutExpired:
        return {}, f"memory: no result in {opts.timeout:.0f} s"
    for line in done.stdout.splitlines():
        if line.startswith(_MEM_EVENT):
            return json.loads(line[len(_MEM_EVENT):]), ""
    last = ([ln for ln in done.stderr.splitlines() if ln.strip()] or [""])[-1].strip()
    return {}, f"memory: the measuring process failed (status {done.returncode}): {last[:160]}"


_MEM_EVENT = "@@peers.py memory "


# --- output --------------------------------------------------------------------------------

def load_tools(wanted: list[str]) -> tuple[dict, list[str]]:
    """The peer modules that import, and a note for each that does not."""
    tools, notes = {}, []
    for name in wanted:
        try:
            module = importlib.import_module(TOOLS[name])
        except Exception as exc:  # noqa: BLE001 - missing or broken: the table goes on
            why = "not installed" if isinstance(exc, ImportError) else "failed to import"
            notes.append(f"{name} skipped: {why} ({type(exc).__name__}: {exc}); "
                         "pip install -e '.[bench]'")
            continue
        tools[module.NAME] = module
    return tools, notes


def table(rows: list[dict]) -> str:
    lines = ["| kernel | gradient | time | / primal | first call | max rel. err | peak extra mem "
             "| note |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    last = None
    for r in rows:
        kernel = r["kernel"] if r["kernel"] != last else ""
        last = r["kernel"]
        t = _fmt_t(r["time"]) if "time" in r else "-"
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        first = _fmt_t(r["first"]) if "first" in r else "-"
        err = "ref" if r["tool"] == "hand-written" else (_fmt_err(r["err"]) if "err" in r else "-")
        mem = _memory.fmt(r["mem"]) if "mem" in r else "-"
        lines.append(f"| {kernel} | {r['row']} | {t} | {ratio} | {first} | {err} | {mem} "
                     f"| {r.get('note', '')} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true",
                        help="matmul 128x64 @ 64x128, no K3L (as reverse.py --small)")
    parser.add_argument("--kernels", help="e.g. K1,K3L (default: all; --small: all but "
                        + ",".join(_problems.LARGE_ONLY) + ")")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--no-memory", action="store_true",
                        help="leave out the peak extra memory column (no measuring processes)")
    parser.add_argument("--timeout", type=float, default=1200.0,
                        help="seconds a kernel's memory-measuring process may take (1200)")
    parser.add_argument("--json", type=Path, help="also write the rows here (for the chart)")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.kernels is None:
        keys = [k for k in _problems.KEYS
                if not (opts.small and k in _problems.LARGE_ONLY)]
    else:
        keys = [k for k in _problems.KEYS if k in opts.kernels.upper().split(",")]
    tools, notes = load_tools([t for t in TOOLS if t in opts.tools.lower().split(",")])
    numba.njit(lambda x: x + 1.0)(1.0)   # Numba's own first-compile set-up: not a kernel's
    if opts.memory_child:
        for key in keys:
            print(_MEM_EVENT + json.dumps(measure_memory(key, tools, opts)), flush=True)
        return 0
    if not opts.no_memory and not _memory.available():
        notes.append("peak extra memory not measured: /proc/self/clear_refs cannot reset the "
                     "resident-set peak here")
        opts.no_memory = True
    start = time.perf_counter()
    rows = []
    for key in keys:
        print(f"measuring {key} ...", file=sys.stderr, flush=True)
        kernel_rows = measure(key, tools, opts)
        if not opts.no_memory:
            print(f"measuring {key}'s memory ...", file=sys.stderr, flush=True)
            mem, why = _memory_in_child(key, opts)
            for r in kernel_rows:
                if r["row"] in mem:
                    r["mem"] = mem[r["row"]]
            if why:
                notes.append(f"{key}: {why}")
        rows += kernel_rows
    versions = [f"numba {numba.__version__}", f"numpy {np.__version__}"]
    versions += [m.version() for m in tools.values()]
    print()
    print(table(rows))
    print()
    for note in notes:
        print(f"- {note}")
    print(f"({'; '.join(versions)}; {time.perf_counter() - start:.0f} s)")
    if opts.json:
        opts.json.write_text(json.dumps({"rows": rows, "versions": versions, "notes": notes},
                                        indent=1))
    return 0 if all("time" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
