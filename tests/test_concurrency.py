"""First calls of pyzyme's entry points from two threads at once: no deadlock, and each
thread's derivative right (against derivatives worked out by hand).

A first call builds a derivative, which waits for Numba's global compiler lock; Numba holds that
lock while it types a call of ``jacfwd(f)``, or of ``grad(f)`` inside ``@njit`` code, and those
typers build a derivative too. A lock of pyzyme's that a build holds while it waits for
Numba's, and that such a typer wants, hangs the process for good, so the runs happen in a child process: each run starts its threads together,
joins them with a timeout, and a run whose threads are still alive is reported as a deadlock
naming its entry points (the child then stops: the stuck threads keep their locks). Every run
uses functions made for it, so each call takes the first-call path.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import numba
import numpy as np
import pytest

import pyzyme  # here, not in the threads: a first import from two threads at once fails

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT = 60.0       # seconds a run's threads get; a first call takes well under 10
CHILD_TIMEOUT = 600.0    # the whole child, in case it stalls outside a joined thread

X = np.array([0.7, 1.3])
V = np.array([0.4, -1.1])
W = np.array([1.5, -0.5])
A, B = 0.7, 1.3


# -- the functions, fresh per run, and their derivatives by hand ---------------------------
def _g_value(x):
    return x[0] * x[1] + np.sin(x[0])


def _g_grad(x):
    return np.array([x[1] + np.cos(x[0]), x[0]])


def _g_hessian(x):
    return np.array([[-np.sin(x[0]), 1.0], [1.0, 0.0]])


def _h_value(x):
    return x * x[0]


def _h_jacobian(x):
    return np.array([[2.0 * x[0], 0.0], [x[1], x[0]]])


class Fresh:
    """New Python functions (so new Numba dispatchers and empty derivative caches):
    ``g: R^2 -> R``, ``h: R^2 -> R^2``, ``s: R x R -> R``."""

    def __init__(self) -> None:
        def g(x):
            return x[0] * x[1] + np.sin(x[0])

        def h(x):
            return x * x[0]

        def s(a, b):
            return a * b + np.sin(a)

        self.g, self.h, self.s = g, h, s


# -- entry points: (call on a Fresh, expected result) ----------------------------------------
def _autodiff_reverse(fn: Fresh):
    got = pyzyme.autodiff(pyzyme.Reverse, fn.s, pyzyme.Active, pyzyme.Active(A),
                          pyzyme.Active(B))
    return got, ((B + np.cos(A), A),)


def _autodiff_forward(fn: Fresh):
    got = pyzyme.autodiff(pyzyme.Forward, fn.s, pyzyme.Duplicated, pyzyme.Duplicated(A, 1.0),
                          pyzyme.Const(B))
    return got, (A * B + np.sin(A), B + np.cos(A))


def _gradient_reverse(fn: Fresh):
    return pyzyme.gradient(pyzyme.Reverse, fn.g, X.copy()), _g_grad(X)


def _gradient_forward(fn: Fresh):
    return pyzyme.gradient(pyzyme.Forward, fn.g, X.copy()), tuple(_g_grad(X))


def _jacobian(fn: Fresh):
    return pyzyme.jacobian(pyzyme.Forward, fn.h, X.copy()), _h_jacobian(X)


def _grad(fn: Fresh):
    return pyzyme.grad(fn.g)(X.copy()), _g_grad(X)


def _value_and_grad(fn: Fresh):
    return pyzyme.value_and_grad(fn.g)(X.copy()), (_g_value(X), _g_grad(X))


def _jvp(fn: Fresh):
    return pyzyme.jvp(fn.g, (X.copy(),), (V.copy(),)), (_g_value(X), _g_grad(X) @ V)


def _vjp(fn: Fresh):
    value, vjp_fn = pyzyme.vjp(fn.h, X.copy())
    return (value, vjp_fn(W.copy())), (_h_value(X), (_h_jacobian(X).T @ W,))


def _jacrev(fn: Fresh):
    return pyzyme.jacrev(fn.h)(X.copy()), _h_jacobian(X)


def _hessian(fn: Fresh):
    return pyzyme.hessian(fn.g)(X.copy()), _g_hessian(X)


def _hvp(fn: Fresh):
    return pyzyme.hvp(fn.g, X.copy(), V.copy()), _g_hessian(X) @ V


def _autodiff_thunk(fn: Fresh):
    x, dx = X.copy(), np.zeros(2)
    fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, fn.g, pyzyme.Active,
                                     pyzyme.Duplicated(x, dx))
    tape, result, _ = fwd(pyzyme.Duplicated(x, dx))
    rev(pyzyme.Duplicated(x, dx), 1.0, tape)
    return (result, dx), (_g_value(X), _g_grad(X))


def _jacfwd(fn: Fresh):
    # Its first call compiles an @njit function whose typing builds the derivative while
    # Numba holds its compiler lock.
    return pyzyme.jacfwd(fn.g)(X.copy()).reshape(-1), _g_grad(X)


def _njit_grad(fn: Fresh):
    dg = pyzyme.grad(fn.g)

    @numba.njit
    def descend(x):
        return x - 0.5 * dg(x)

    return descend(X.copy()), X - 0.5 * _g_grad(X)


def _forward_over_njit_grad(fn: Fresh):
    dg = pyzyme.grad(fn.g)

    @numba.njit
    def slope(x):
        return dg(x)[0]

    # Not compiled yet: capturing it for its derivative types the grad call inside it, whose
    # typer asks for g's derivative while the build of slope's is in progress.
    return pyzyme.gradient(pyzyme.Forward, slope, X.copy()), tuple(_g_hessian(X)[0])


PYTHON_ENTRIES = {
    "autodiff(Reverse)": _autodiff_reverse,
    "autodiff(Forward)": _autodiff_forward,
    "gradient(Reverse)": _gradient_reverse,
    "gradient(Forward)": _gradient_forward,
    "jacobian": _jacobian,
    "grad": _grad,
    "value_and_grad": _value_and_grad,
    "jvp": _jvp,
    "vjp": _vjp,
    "jacrev": _jacrev,
    "hessian": _hessian,
    "hvp": _hvp,
    "autodiff_thunk": _autodiff_thunk,
}
# Entry points whose first call builds a derivative from inside Numba's typing, holding
# Numba's compiler lock.
NUMBA_ENTRIES = {
    "jacfwd": _jacfwd,
    "@njit calling grad": _njit_grad,
}
ENTRIES = {**PYTHON_ENTRIES, **NUMBA_ENTRIES,
           "gradient(Forward) of @njit calling grad": _forward_over_njit_grad}

# A run: the entry points its threads call at once, and whether they share one Fresh (the same
# derivative asked for twice) or each gets its own. A deadlock needs a thread inside Numba's
# typing (a NUMBA_ENTRIES one) and a thread building from Python: each Python entry point meets
# jacfwd, and the @njit caller of grad meets one of each kind of derivative (forward, reverse,
# Hessian-vector product, split).
RUNS: list[tuple[tuple[str, ...], bool]] = (
    [((p, "jacfwd"), False) for p in PYTHON_ENTRIES]
    + [((p, "@njit calling grad"), False)
       for p in ("autodiff(Forward)", "gradient(Reverse)", "hessian", "autodiff_thunk")]
    + [(("jacfwd", "@njit calling grad"), False),
       (("gradient(Reverse)", "gradient(Reverse)"), True),
       (("grad", "@njit calling grad"), True),
       (("jacfwd", "gradient(Reverse)"), True),
       (("gradient(Forward) of @njit calling grad",), False)]
)


def run_name(entries: tuple[str, ...], shared: bool) -> str:
    return " + ".join(entries) + (" (same function)" if shared else "")


def _test_id(entries: tuple[str, ...], shared: bool) -> str:
    """The run's name as pytest's ``-k`` takes it."""
    return re.sub(r"\W+", "_", run_name(entries, shared)).strip("_")


# -- the child process ---------------------------------------------------------------------
def _close(got, expected) -> bool:
    if isinstance(expected, tuple):
        return (isinstance(got, tuple) and len(got) == len(expected)
                and all(_close(a, b) for a, b in zip(got, expected)))
    got = np.asarray(got, dtype=float)
    expected = np.asarray(expected, dtype=float)
    return got.shape == expected.shape and bool(np.allclose(got, expected, rtol=1e-10,
                                                            atol=1e-12))


def _one_run(entries: tuple[str, ...], shared: bool) -> dict:
    fresh = Fresh()
    outcomes: dict[int, str] = {}
    start = threading.Barrier(len(entries))

    def work(k: int, name: str) -> None:
        fn = fresh if shared else Fresh()
        start.wait()
        try:
            got, expected = ENTRIES[name](fn)
            outcomes[k] = "ok" if _close(got, expected) else \
                f"{name} gave {got!r}, expected {expected!r}"
        except BaseException:  # noqa: BLE001  (reported to the parent, which fails on it)
            outcomes[k] = f"{name} raised:\n{traceback.format_exc()}"

    threads = [threading.Thread(target=work, args=(k, name), daemon=True)
               for k, name in enumerate(entries)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + RUN_TIMEOUT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [name for name, t in zip(entries, threads) if t.is_alive()]
    if stuck:
        return {"stuck": stuck}
    return {"failures": [o for k, o in sorted(outcomes.items()) if o != "ok"]}


def _child() -> None:
    only = set(sys.argv[1:])
    for entries, shared in RUNS:
        name = run_name(entries, shared)
        if only and name not in only:
            continue
        report = _one_run(entries, shared)
        print(json.dumps({"run": name, **report}), flush=True)
        if "stuck" in report:
            faulthandler.dump_traceback(sys.stderr)
            os._exit(1)  # the stuck threads hold their locks: nothing more could run
    os._exit(0)


# -- the tests -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reports(request) -> dict:
    # Only the runs selected (``-k``) are made.
    selected = [run_name(item.callspec.params["entries"], item.callspec.params["shared"])
                for item in request.session.items
                if getattr(item, "originalname", None) == "test_concurrent_first_calls"
                and item.module.__name__ == __name__]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        done = subprocess.run([sys.executable, __file__, *selected], capture_output=True,
                              text=True,
                              timeout=CHILD_TIMEOUT, env=env, cwd=ROOT)
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired as timeout:
        out = timeout.stdout or ""
        err = f"the child ran past {CHILD_TIMEOUT:.0f} s\n{timeout.stderr or ''}"
        if isinstance(out, bytes):
            out = out.decode()
        if isinstance(err, bytes):
            err = err.decode()
    found = {}
    for line in out.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
            found[report.pop("run")] = report
    return {"runs": found, "stderr": err}


@pytest.mark.parametrize("entries,shared", RUNS,
                         ids=[_test_id(e, s) for e, s in RUNS])
def test_concurrent_first_calls(reports, entries, shared):
    name = run_name(entries, shared)
    report = reports["runs"].get(name)
    if report is None:
        stuck = [r for r, rep in reports["runs"].items() if "stuck" in rep]
        raise AssertionError(
            f"{name} did not run: the child stopped "
            + (f"at the deadlock of {stuck[0]}" if stuck else "early")
            + f"\n{reports['stderr'][-4000:]}")
    if "stuck" in report:
        raise AssertionError(
            f"deadlock: the first calls of {' and '.join(report['stuck'])} still waited after "
            f"{RUN_TIMEOUT:.0f} s (run {name}); stacks:\n{reports['stderr'][-8000:]}")
    assert not report["failures"], "\n".join(report["failures"])


if __name__ == "__main__":
    _child()
