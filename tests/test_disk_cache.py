"""The on-disk cache of compiled derivatives, across fresh processes.

Every test writes a module with ``@njit(cache=True)`` functions to a temporary directory and
runs it in new processes with ``NUMBA_CACHE_DIR`` there: the first process builds and stores
each derivative, later ones must load it (no capture, the disk counter says so) and give the
same numbers, bit for bit; an edited source, a callee edited in another file or a corrupt file
makes them build it again, with the new function's derivative.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MODULE = """
import numba
import numpy as np
from helper import inner

SCALE = 1.0

@numba.njit(cache=True)
def poly(x, n):                      # sum_{i=1}^{n-1} SCALE * x**i / i
    s = 0.0
    for i in range(1, n):
        s += SCALE * x ** i / i
    return s

@numba.njit(cache=True)
def energy(a, b):                    # sum exp(a) * inner(b)
    s = 0.0
    for i in range(a.shape[0]):
        s += np.exp(a[i]) * inner(b[i])
    return s

@numba.njit(cache=True)
def quartic(x):                      # sum (i + 1) * x[i]**4: hvp (forward over reverse)
    s = 0.0
    for i in range(x.shape[0]):
        s += (i + 1) * x[i] ** 4
    return s

@numba.njit
def plain(x):                        # no cache=True: nothing on disk, as in Numba
    return x * x * x
"""

HELPER = """
import numba
import numpy as np

@numba.njit
def inner(v):
    return np.log(1.0 + v * v)
"""

CHILD = """
import json, sys
import numba
import numpy as np
import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse, autodiff
import pyzyme.frontends.numba.derive.forward as nf
import pyzyme.frontends.numba.derive.reverse as nr
import pyzyme.frontends.numba.bridge as bridge
from pyzyme.api.plans import CACHE

if sys.argv[1] == "address":
    bridge._LINK_LIMIT = 0   # every derivative called through its address, as large ones are

captures = []
def counting(original):
    def capture(*args, **kwargs):
        captures.append(args[0].py_func.__name__)
        return original(*args, **kwargs)
    return capture
nr.capture = counting(nr.capture)
nf.capture = counting(nf.capture)

import dcmod

a = np.array([0.1, -0.4, 0.7]); b = np.array([0.5, 1.5, -2.0])
da = np.zeros(3)
if "precompile" in sys.argv:  # the primals first (their IR is then at hand, or not)
    dcmod.poly(0.7, 8), dcmod.energy(a, b)
out = {}
out["rev_poly"] = autodiff(Reverse, dcmod.poly, Active, Active(0.7), Const(8))[0][0]
out["fwd_poly"] = list(autodiff(Forward, dcmod.poly, Duplicated, Duplicated(0.7, 1.0), Const(8)))
autodiff(Reverse, dcmod.energy, Active, Duplicated(a, da), Const(b))
out["rev_energy"] = da.tolist()
out["fwd_energy"] = autodiff(Forward, dcmod.energy, Duplicated,
                             Duplicated(a, np.array([1.0, 2.0, 3.0])), Const(b))[1]
fwd, rev = pyzyme.autodiff_thunk(pyzyme.ReverseSplitWithPrimal, dcmod.energy, Active,
                                 Duplicated(a, np.zeros(3)), Const(b))
ds = np.zeros(3)
tape, primal, _ = fwd(Duplicated(a, ds), Const(b))
rev(Duplicated(a, ds), Const(b), 1.0, tape)
out["split_energy"] = [primal] + ds.tolist()
if "njit" in sys.argv:  # grad(f) called from @njit code (slow to compile: only where asked)
    g = pyzyme.grad(dcmod.energy)

    @numba.njit
    def in_njit(a, b):
        return g(a, b)

    out["grad_njit"] = in_njit(a, b).tolist()

    @numba.njit
    def sweeps(a, da, b):             # the split thunks inside @njit code
        tape, result, _ = fwd(Duplicated(a, da), Const(b))
        rev(Duplicated(a, da), Const(b), 1.0, tape)
        return result

    ds = np.zeros(3)
    out["split_njit"] = [sweeps(a, ds, b)] + ds.tolist()
out["hvp_quartic"] = pyzyme.hvp(dcmod.quartic, a, np.array([1.0, 0.0, -1.0])).tolist()
out["rev_plain"] = autodiff(Reverse, dcmod.plain, Active, Active(2.0))[0][0]
if "reload" in sys.argv:  # the same function again in this process: built, not loaded twice
    import importlib
    out["reloaded_poly"] = autodiff(Reverse, importlib.reload(dcmod).poly, Active, Active(0.7),
                                    Const(8))[0][0]
out["captures"] = sorted(set(captures))
out["disk"] = vars(CACHE.disk.stats)
print("RESULT " + json.dumps(out))
"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "dcmod.py").write_text(MODULE)
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "child.py").write_text(textwrap.dedent(CHILD))
    return tmp_path


def _run(project: Path, mode: str = "linked", *flags: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(project / "numba_cache"),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(project)]))
    run = subprocess.run([sys.executable, "child.py", mode, *flags], capture_output=True, text=True,
                         cwd=project, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _cache_files(project: Path) -> list[Path]:
    return sorted((project / "numba_cache").rglob("*.pyzyme"))


def _check_values(out: dict, scale: float = 1.0, inner=lambda v: math.log(1.0 + v * v)):
    x, n = 0.7, 8
    exact = scale * sum(x ** (i - 1) for i in range(1, n))
    assert out["rev_poly"] == pytest.approx(exact, rel=1e-13)
    assert out["fwd_poly"][1] == pytest.approx(exact, rel=1e-13)
    a, b = [0.1, -0.4, 0.7], [0.5, 1.5, -2.0]
    grad = [math.exp(ai) * inner(bi) for ai, bi in zip(a, b)]
    assert out["rev_energy"] == pytest.approx(grad, rel=1e-13)
    assert out["split_energy"][1:] == pytest.approx(grad, rel=1e-13)
    assert out["split_energy"][0] == pytest.approx(sum(
        math.exp(ai) * inner(bi) for ai, bi in zip(a, b)), rel=1e-13)
    if "grad_njit" in out:
        assert out["grad_njit"] == pytest.approx(grad, rel=1e-13)
        assert out["split_njit"] == pytest.approx(out["split_energy"], rel=1e-13)
    assert out["fwd_energy"] == pytest.approx(sum(g * t for g, t in zip(grad, [1, 2, 3])),
                                              rel=1e-13)
    assert out["rev_plain"] == 12.0
    hv = [12.0 * (i + 1) * ai ** 2 * vi for i, (ai, vi) in enumerate(zip(a, [1.0, 0.0, -1.0]))]
    assert out["hvp_quartic"] == pytest.approx(hv, rel=1e-13)


def _derivatives(out: dict) -> dict:
    return {k: v for k, v in out.items() if k not in ("captures", "disk")}


@pytest.mark.parametrize("mode", ["linked", "address"])
def test_second_process_loads_the_derivatives_from_disk(project, mode):
    cold = _run(project, mode, "njit")
    _check_values(cold)
    # poly: reverse, forward; energy: reverse (autodiff's and grad's in @njit code: energy
    # only reads its arrays, so grad needs no second one for overlapping arrays), forward,
    # split thunks; quartic: hvp
    assert cold["disk"]["stored"] == 6 and cold["disk"]["loaded"] == 0
    assert cold["captures"] == ["energy", "plain", "poly", "quartic"]
    names = [p.name for p in _cache_files(project)]
    assert len(names) == 6 and not any(n.startswith("dcmod.plain") for n in names)

    warm = _run(project, mode, "njit", "reload")
    # reloading dcmod gives poly's dispatcher anew; its stored derivative is loaded in this
    # process already, so it is built again rather than loaded twice
    assert warm["disk"] == {"loaded": 6, "stored": 1, "rejected": 1, "missed": 0}
    assert warm["captures"] == ["plain", "poly"]
    # bitwise: the same IR compiled for the same CPU (or its stored object code) each time
    assert warm.pop("reloaded_poly") == warm["rev_poly"]
    assert _derivatives(warm) == _derivatives(cold)


def test_damaged_stale_and_edited_entries_are_built_again(project):
    import pickle

    cold = _run(project)
    _check_values(cold)
    files = _cache_files(project)
    assert len(files) == 6
    files[0].write_bytes(b"not a pickle")
    files[1].write_bytes(files[1].read_bytes()[:100])  # truncated
    # An entry made from other primal IR: checked where the IR is at hand, that is where the
    # primal was compiled in this process rather than loaded from Numba's cache.
    tag, key, (state, fingerprint) = pickle.loads(files[2].read_bytes())
    assert fingerprint is not None
    files[2].write_bytes(pickle.dumps((tag, key, (state, "0" * 64))))
    for path in (project / "numba_cache").rglob("*.nb*"):
        path.unlink()
    damaged = _run(project, "linked", "precompile")
    assert damaged["disk"] == {"loaded": 3, "stored": 3, "rejected": 3, "missed": 0}
    assert _derivatives(damaged) == _derivatives(cold)

    (project / "dcmod.py").write_text(MODULE.replace("SCALE = 1.0", "SCALE = 2.0"))
    edited = _run(project)
    assert edited["disk"]["loaded"] == 0 and edited["disk"]["stored"] == 6
    _check_values(edited, scale=2.0)

    # A callee in another file: Numba's cache of the caller does not notice; ours does.
    (project / "helper.py").write_text(HELPER.replace("1.0 + v * v", "2.0 + v * v"))
    callee = _run(project)
    assert callee["disk"]["loaded"] == 3  # poly's and quartic's do not depend on helper.py
    assert callee["captures"] == ["energy", "plain"]
    _check_values(callee, scale=2.0, inner=lambda v: math.log(2.0 + v * v))
