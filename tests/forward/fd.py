"""Central finite differences of a function's outputs along a tangent direction.

The outputs of one call are its return value and the final contents of every argument passed as
``Duplicated`` that is an array (arrays the function mutates carry output tangents in their
shadows, so the finite difference looks at the arrays after the call). Scalars, tuples and arrays
are flattened into one float64 vector per output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

F64_TOL = {"rtol": 1e-5, "atol": 1e-7}
F32_TOL = {"rtol": 2e-2, "atol": 2e-3}


def flat(value) -> np.ndarray:
    """``value`` (None, a number, an array, a tuple of them) as a 1-D float64 array."""
    if value is None:
        return np.zeros(0)
    if isinstance(value, tuple):
        parts = [flat(v) for v in value]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(value, dtype=np.float64).reshape(-1)


def random_tangents(args: Sequence, pattern: str, seed: int) -> list:
    """One tangent per ``D`` argument (None for ``C``): uniform in [-1, 1], C-contiguous arrays of
    the argument's shape and dtype, Python floats for scalars."""
    rng = np.random.default_rng(seed)
    out = []
    for a, p in zip(args, pattern):
        if p != "D":
            out.append(None)
        elif isinstance(a, np.ndarray):
            out.append(rng.uniform(-1.0, 1.0, a.shape).astype(a.dtype))
        else:
            out.append(float(rng.uniform(-1.0, 1.0)))
    return out


def perturbed(make_args: Callable[[], tuple], pattern: str, tangents: Sequence,
              t: float) -> list:
    """Fresh arguments (same layouts as ``make_args`` gives) moved by ``t`` along ``tangents``."""
    args = list(make_args())
    for i, (p, v) in enumerate(zip(pattern, tangents)):
        if p != "D":
            continue
        if isinstance(args[i], np.ndarray):
            args[i][...] = (args[i].astype(np.float64) + t * v).astype(args[i].dtype)
        else:
            args[i] = args[i] + t * v
    return args


def outputs(fn, args: list, pattern: str) -> list[np.ndarray]:
    """Run ``fn`` on ``args`` (mutating them): [return value, then each Duplicated array]."""
    ret = fn(*args)
    outs = [flat(ret)]
    for a, p in zip(args, pattern):
        if p == "D" and isinstance(a, np.ndarray):
            outs.append(flat(a))
    return outs


def step(make_args: Callable[[], tuple], pattern: str, float32: bool = False) -> float:
    """The finite-difference step: 1e-6 (1e-3 for float32), scaled by the largest input."""
    scale = 1.0
    for a, p in zip(make_args(), pattern):
        if p == "D":
            m = float(np.max(np.abs(a))) if np.size(a) else 0.0
            scale = max(scale, m)
    return (1e-3 if float32 else 1e-6) * scale


def directional(fn, make_args: Callable[[], tuple], pattern: str, tangents: Sequence,
                float32: bool = False) -> list[np.ndarray]:
    """d/dt of every output at t = 0 along ``tangents``, by central differences."""
    h = step(make_args, pattern, float32)
    plus = outputs(fn, perturbed(make_args, pattern, tangents, h), pattern)
    minus = outputs(fn, perturbed(make_args, pattern, tangents, -h), pattern)
    return [(p - m) / (2.0 * h) for p, m in zip(plus, minus)]


def assert_close(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                 float32: bool = False, what: str = "") -> None:
    tol = F32_TOL if float32 else F64_TOL
    assert len(actual) == len(expected), what
    for k, (a, e) in enumerate(zip(actual, expected)):
        label = "return value" if k == 0 else f"Duplicated array #{k}"
        np.testing.assert_allclose(a, e, err_msg=f"{what}: {label}", **tol)
