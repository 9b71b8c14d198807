"""Functions Numba compiled before ``import pyzyme``, as a notebook user meets them.

pyzyme captures a function's IR before Numba's O3 vectorizes it; code compiled before the
capture hook was installed (in this process, or by an earlier one and loaded from Numba's
``cache=True`` files) must be compiled again under the hook, callees and Numba's own NumPy
implementations included, so that it is differentiated exactly as code compiled after it.

Three fresh interpreters share one module of kernels (a 1-D diffusion stepper returning its
state, which LLVM vectorizes, and scalar losses calling it):

- ``fresh`` imports pyzyme first, compiles the kernels with ``cache=True`` into a temporary
  ``NUMBA_CACHE_DIR`` and prints the derivatives' IR: the reference;
- ``before`` imports Numba, compiles and calls the kernels (no cache), then imports pyzyme and
  runs every public entry point against finite differences;
- ``cached`` imports Numba, loads the kernels from the cache the first process wrote, calls
  them, then imports pyzyme and runs each mode against finite differences.

What each entry point differentiates (the captured IR of the kernels and of the wrappers ``vjp``
and ``jacrev`` make) and two derivatives must be the reference's, name for name (Numba's
per-process numbers aside): the same derivative, at the same speed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

KERNELS = """
import os

import numba
import numpy as np

CACHE = os.environ.get("ORDER_CACHE") == "1"


@numba.njit(cache=CACHE)
def step(u, k, n):                  # 1-D diffusion, n explicit steps: returns the state
    u = u.copy()
    for _ in range(n):
        v = u.copy()
        for i in range(1, u.size - 1):
            u[i] = v[i] + k * (v[i - 1] - 2.0 * v[i] + v[i + 1])
    return u


@numba.njit(cache=CACHE)
def energy(u, k):                   # a scalar loss of the stepped state
    y = step(u, k, 30)
    s = 0.0
    for i in range(y.size):
        s += (1.0 + 0.1 * i) * y[i] * y[i]
    return s


@numba.njit(cache=CACHE)
def energy1(u):                     # one argument: gradient and hvp
    return energy(u, 0.2)
"""

CHILD = r"""
import json
import re
import sys

role = sys.argv[1]
if role == "fresh":
    import pyzyme                               # the reference: the hook sees everything

import ctypes
import ctypes.util
import math

import numba
import numpy as np

import ordkern as K

N, STEPS, KAPPA = 12, 30, 0.2
rng = np.random.default_rng(7)
u = np.sin(np.linspace(0.0, 3.0, N)) + 0.1 * rng.random(N)
t = rng.standard_normal(N)                      # a tangent
w = rng.standard_normal(N)                      # a cotangent
K.step(u, KAPPA, STEPS), K.energy(u, KAPPA), K.energy1(u)
out = {"checks": {}, "ir": {}}
if role == "cached":
    out["cache_hits"] = {name: sum(getattr(K, name).stats.cache_hits.values())
                         for name in ("step", "energy", "energy1")}

if role == "before":
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    c_erf = libm.erf
    c_erf.restype, c_erf.argtypes = ctypes.c_double, [ctypes.c_double]

    @numba.njit
    def erf_step(u):                            # a call pyzyme cannot see into
        out = np.empty_like(u)
        for i in range(u.size):
            out[i] = c_erf(u[i])
        return out

    erf_step(u)

    @numba.njit
    def softplus(x):                            # inf / inf as its own derivative at 800
        return math.log(1.0 + math.exp(x))

    @numba.njit
    def softplus_loss(x, w):
        return w * softplus(x)

    softplus_loss(800.0, 2.0)

    @numba.njit
    def even(x, n):                             # mutual recursion
        return x if n == 0 else odd(1.5 * x, n - 1)

    @numba.njit
    def odd(x, n):
        return x * x if n == 0 else even(x, n - 1)

    even(1.1, 3)

import pyzyme
from pyzyme import (Active, Const, Duplicated, Forward, Reverse, ReverseSplitWithPrimal,
                    autodiff, autodiff_thunk, grad, gradient, hvp, jacfwd, jacrev, vjp)


def fd(f, x, h=1e-6):
    # central differences of f (array or float valued) along each element of x
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h))
    return np.stack(cols, axis=-1)


def err(got, want):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


uk = np.append(u, KAPPA)
energy_uk = lambda z: K.energy(z[:-1], z[-1])
step_uk = lambda z: K.step(z[:-1], z[-1], STEPS)


def reverse_autodiff():
    du = np.zeros(N)
    ((_, dk),) = autodiff(Reverse, K.energy, Active, Duplicated(u, du), Active(KAPPA))
    return err(np.append(du, dk), fd(energy_uk, uk))


def forward_autodiff():
    y, dy = autodiff(Forward, K.step, Duplicated, Duplicated(u, t), Const(KAPPA), Const(STEPS))
    assert err(y, K.step(u, KAPPA, STEPS)) < 1e-14
    return err(dy, fd(lambda z: K.step(z, KAPPA, STEPS), u) @ t)


def reverse_gradient():
    return err(gradient(Reverse, K.energy1, u), fd(K.energy1, u))


def forward_gradient():
    return err(gradient(Forward, K.energy1, u), fd(K.energy1, u))


def grad_():
    return err(grad(K.energy)(u, KAPPA), fd(lambda z: K.energy(z, KAPPA), u))


def vjp_():
    y, pullback = vjp(K.step, u, KAPPA, STEPS)
    du, dk, dn = pullback(w)
    assert dn is None and err(y, K.step(u, KAPPA, STEPS)) < 1e-14
    return err(np.append(du, dk), w @ fd(step_uk, uk))


def jacrev_():
    return err(jacrev(K.step)(u, KAPPA, STEPS), fd(lambda z: K.step(z, KAPPA, STEPS), u))


def jacfwd_():
    return err(jacfwd(K.step)(u, KAPPA, STEPS), fd(lambda z: K.step(z, KAPPA, STEPS), u))


def hvp_():
    # energy1 is quadratic in u: a central difference of its gradient is exact
    g = lambda z: gradient(Reverse, K.energy1, z)
    return err(hvp(K.energy1, u, t), (g(u + 1e-3 * t) - g(u - 1e-3 * t)) / 2e-3)


def split():
    du = np.zeros(N)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, K.energy, Active, Duplicated(u, du),
                              Active(KAPPA))
    tape, value, _ = fwd(Duplicated(u, du), Active(KAPPA))
    assert err(value, K.energy(u, KAPPA)) < 1e-14
    ((_, dk),) = rev(Duplicated(u, du), Active(KAPPA), 1.0, tape)[:1]
    return err(np.append(du, dk), fd(energy_uk, uk))


def message():
    # an error inside a function differentiated through a generated wrapper names the user's
    try:
        vjp(erf_step, u)[1](w)
    except pyzyme.UnsupportedError as e:
        text = str(e)
        assert "erf_step" in text and "dotted" not in text and "<dynamic>" not in text, text
        return 0.0
    raise AssertionError("no error for a call through a ctypes pointer")


def recursion():
    got = autodiff(Reverse, even, Active(1.1), Const(3))[0][0]
    return err(got, fd(lambda z: np.array(even(z[0], 3)), np.array([1.1]))[0])


def rule():
    # a user's rule for a callee compiled before pyzyme is used, in both modes: the callee
    # compiled again keeps the name the rule is registered under
    @pyzyme.rules.forward(softplus)
    @numba.njit
    def softplus_fwd(config, x, dx):
        return x + math.log1p(math.exp(-x)), dx / (1.0 + math.exp(-x))

    @pyzyme.rules.augmented_primal(softplus)
    @numba.njit
    def softplus_aug(config, x, dx):
        return x + math.log1p(math.exp(-x)), None, 1.0 / (1.0 + math.exp(-x))

    @pyzyme.rules.reverse(softplus)
    @numba.njit
    def softplus_rev(config, dret, tape, x, dx):
        return dret * tape

    got = (autodiff(Reverse, softplus_loss, Active(800.0), Const(2.0))[0][0],
           autodiff(Forward, softplus_loss, Duplicated(800.0, 1.0), Const(2.0))[1])
    return err(got, [2.0, 2.0])


def normalized(text):
    # Numba numbers functions and environments per process; pyzyme hashes names from them
    text = re.sub(r"B\d+v\d+", "Bv", text)
    text = re.sub(r"_ZN08NumbaEnv[^\s,()]*", "ENV", text)
    return re.sub(r"(__pyzyme_[a-z]+)_[0-9a-f]{12,}", r"\1", text)


# What each entry point differentiates (the functions, and the wrappers vjp and jacrev make
# of an array-valued one), and two derivatives, as IR.
from pyzyme.api.wrappers import dotted_wrapper, row_wrapper
from pyzyme.frontends.numba.capture import capture

ir = {
    "capture energy": lambda: capture(K.energy, (u, KAPPA)).text,
    "capture energy1": lambda: capture(K.energy1, (u,)).text,
    "capture step": lambda: capture(K.step, (u, KAPPA, STEPS)).text,
    "capture vjp wrapper": lambda: capture(dotted_wrapper(K.step, 3, 1),
                                           (u, KAPPA, STEPS, w)).text,
    "capture jacrev wrapper": lambda: capture(row_wrapper(K.step, 3, 1),
                                              (u, KAPPA, STEPS, 0)).text,
    "reverse energy": lambda: pyzyme.code_llvm(Reverse, K.energy, Active,
                                               Duplicated(u, np.zeros(N)), Active(KAPPA)),
    "forward step": lambda: pyzyme.code_llvm(Forward, K.step, Duplicated, Duplicated(u, t),
                                             Const(KAPPA), Const(STEPS)),
}
for what, text in ir.items():
    try:
        out["ir"][what] = normalized(text())
    except Exception as e:
        out["ir"][what] = f"{type(e).__name__}: {e}"

if role != "fresh":
    # Every entry point in one process; after a load from the cache, the modes (what the
    # others differentiate is compared above, as captured IR). The rule comes last: it is
    # registered for the rest of the process.
    checks = ([reverse_autodiff, forward_autodiff, reverse_gradient, forward_gradient, grad_,
               vjp_, jacrev_, jacfwd_, hvp_, split, message, recursion, rule]
              if role == "before" else
              [reverse_autodiff, forward_autodiff, vjp_, split])
    for check in checks:
        try:
            out["checks"][check.__name__.strip("_")] = check()
        except Exception as e:                  # reported, one line per check
            out["checks"][check.__name__.strip("_")] = f"{type(e).__name__}: {e}"
print("RESULT " + json.dumps(out))
"""

CHECKS = ["reverse_autodiff", "forward_autodiff", "reverse_gradient", "forward_gradient",
          "grad", "vjp", "jacrev", "jacfwd", "hvp", "split"]
CACHED_CHECKS = ["reverse_autodiff", "forward_autodiff", "vjp", "split"]


def _run(project: Path, role: str, cache: bool) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(project / "numba_cache"),
               ORDER_CACHE="1" if cache else "0",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(project)]))
    run = subprocess.run([sys.executable, "-W", "ignore", "child.py", role], capture_output=True,
                         text=True, cwd=project, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    project = tmp_path_factory.mktemp("import_order")
    (project / "ordkern.py").write_text(KERNELS)
    (project / "child.py").write_text(textwrap.dedent(CHILD))
    fresh = _run(project, "fresh", cache=True)
    # The reference's derivatives went to pyzyme's disk cache beside Numba's; the later
    # processes must build theirs.
    for path in (project / "numba_cache").rglob("*.pyzyme"):
        path.unlink()
    return {"fresh": fresh, "before": _run(project, "before", cache=False),
            "cached": _run(project, "cached", cache=True)}


@pytest.mark.parametrize("role, check", [("before", c) for c in CHECKS] +
                         [("cached", c) for c in CACHED_CHECKS])
def test_entry_points_match_finite_differences(runs, role, check):
    result = runs[role]["checks"][check]
    assert isinstance(result, float), result
    assert result < 1e-6


def test_kernels_were_loaded_from_numbas_cache(runs):
    assert all(hits > 0 for hits in runs["cached"]["cache_hits"].values()), runs["cached"]


IR = ["capture energy", "capture energy1", "capture step", "capture vjp wrapper",
      "capture jacrev wrapper", "reverse energy", "forward step"]


@pytest.mark.parametrize("role", ["before", "cached"])
@pytest.mark.parametrize("what", IR)
def test_same_ir_as_compiled_after_import(runs, role, what):
    from conftest import assert_same_text

    assert runs["fresh"]["ir"][what].startswith("; ModuleID"), runs["fresh"]["ir"][what]
    assert_same_text(runs["fresh"]["ir"][what], runs[role]["ir"][what], what)


def test_errors_name_the_users_function_not_a_wrapper(runs):
    result = runs["before"]["checks"]["message"]
    assert isinstance(result, float), result


def test_mutual_recursion_compiled_before_import(runs):
    result = runs["before"]["checks"]["recursion"]
    assert isinstance(result, float), result
    assert result < 1e-6


def test_rules_of_a_callee_compiled_before_import_are_used(runs):
    result = runs["before"]["checks"]["rule"]
    assert isinstance(result, float), result
    assert result < 1e-15
