"""Reverse mode on the corpus (tests/reverse/corpus.py) and the API.md reverse examples.

Every case is read as a map from its inputs (the ``Active`` scalars and the initial contents of
its ``Duplicated`` arrays) to its outputs (the returned float, if ``ret`` is ``Active``, and the
final contents of its ``Duplicated`` arrays). Reverse mode seeds the return with 1.0 and each
array's shadow with a cotangent ``w``, so it computes the gradient of

    L = ret + sum_k dot(w_k, final contents of array k)

with respect to the inputs: the derivative of each ``Active`` argument comes back in the result,
that of each array's initial contents in its shadow (which the call consumes and refills).
Functions that return a float start with zero shadows (the shadows then hold the plain
gradient); functions that return nothing get a random cotangent in every shadow (a VJP).

For every case:

1. the reverse gradient matches 5-point central finite differences of ``L``;
2. the same with random shadows for float-returning functions (``+=`` semantics);
3. it matches the gradient assembled from forward mode, one direction per input element;
4. ``ReverseWithPrimal`` gives the same derivatives plus the primal result, and the arrays end
   with the contents a plain call leaves in them.

Every run gets fresh arguments from the case's factory, so nothing one run mutates leaks into
another.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from pyzyme import UnsupportedError

import pyzyme
from pyzyme import (
    Active,
    Const,
    Duplicated,
    Forward,
    Reverse,
    ReverseWithPrimal,
    autodiff,
    gradient,
)
from forward import fd  # tests/forward/fd.py (tests/ is on sys.path under pytest)

from .corpus import CASES

FD_TOL = {"rtol": 1e-6, "atol": 1e-8}
FD_TOL_F32 = fd.F32_TOL
AD_TOL = {"rtol": 1e-10, "atol": 1e-12}
AD_TOL_F32 = {"rtol": 1e-5, "atol": 1e-6}


def _params(select=lambda c: True, reverse: bool = True):
    return [pytest.param(c, id=c.name, marks=[pytest.mark.xfail(
                raises=UnsupportedError, strict=True, reason=c.pending)]
                if c.pending and reverse else [])
            for c in CASES if select(c)]


def _seed(name: str, salt: str = "") -> int:
    return zlib.crc32(f"{name}/{salt}".encode())


# --- the objective L and its gradient by finite differences ------------------------------------


def _like(c, i: int, values) -> np.ndarray:
    """An array laid out as argument ``i`` of a fresh ``make_args()`` (same strides, so the same
    Numba type), holding ``values``."""
    s = c.make_args()[i]
    v = np.asarray(values)
    s[...] = v if v.ndim == 0 else v.reshape(s.shape)
    return s


def _weights(c, random: bool, salt: str = "w") -> dict[int, np.ndarray]:
    """The cotangent of each Duplicated array's final contents (float64, the array's shape)."""
    rng = np.random.default_rng(_seed(c.name, salt))
    out = {}
    for i, (a, p) in enumerate(zip(c.make_args(), c.pattern)):
        if p == "D":
            out[i] = rng.uniform(-1.0, 1.0, a.shape) if random else np.zeros(a.shape)
    return out


def _objective(c, args: list, weights) -> float:
    """Run the function on ``args`` (mutating them) and return L."""
    ret = c.fn(*args)
    total = float(ret) if c.ret is Active else 0.0
    for i, w in weights.items():
        total += float(np.dot(w.reshape(-1), fd.flat(args[i])))
    return total


def _inputs(c) -> list[tuple[int, tuple | None]]:
    """Every input coordinate: (argument index, element index or None for a scalar)."""
    out = []
    for i, (a, p) in enumerate(zip(c.make_args(), c.pattern)):
        if p == "A":
            out.append((i, None))
        elif p == "D":
            out.extend((i, idx) for idx in np.ndindex(a.shape))
    return out


def _label(c, coord) -> str:
    i, idx = coord
    return f"arg {i}" if idx is None else f"arg {i}{list(idx)}"


def _unit(c, coord) -> tuple[str, list]:
    """A pattern and tangents for fd.perturbed that move only input ``coord``."""
    i, idx = coord
    a = c.make_args()[i]
    pattern = "".join("D" if j == i else "C" for j in range(len(c.pattern)))
    tangents: list = [None] * len(c.pattern)
    if idx is None:
        tangents[i] = 1.0
    else:
        e = np.zeros(a.shape)
        e[idx] = 1.0
        tangents[i] = e
    return pattern, tangents


def _fd_gradient(c, weights) -> np.ndarray:
    """dL/d(input) for every input coordinate, by 5-point central differences."""
    h = fd.step(c.make_args, c.pattern.replace("A", "D"), c.float32)
    grad = []
    for coord in _inputs(c):
        pattern, tangents = _unit(c, coord)
        vals = {t: _objective(c, fd.perturbed(c.make_args, pattern, tangents, t * h), weights)
                for t in (-2, -1, 1, 2)}
        grad.append((vals[-2] - 8.0 * vals[-1] + 8.0 * vals[1] - vals[2]) / (12.0 * h))
    return np.array(grad)


# --- reverse and forward mode ------------------------------------------------------------------


def _run_reverse(c, weights, mode=Reverse):
    """autodiff on fresh arguments, array shadows holding ``weights``: (result, args, shadows)."""
    args = list(c.make_args())
    shadows: dict[int, np.ndarray] = {}
    anns = []
    for i, (a, p) in enumerate(zip(args, c.pattern)):
        if p == "A":
            anns.append(Active(a))
        elif p == "D":
            shadows[i] = _like(c, i, weights[i])
            anns.append(Duplicated(a, shadows[i]))
        else:
            anns.append(Const(a))
    res = autodiff(mode, c.fn, c.ret, *anns)
    return res, args, shadows


def _reverse_gradient(c, res, shadows) -> np.ndarray:
    """The gradient from a reverse result, in the order of ``_inputs``; checks its structure."""
    assert isinstance(res, tuple) and len(res) >= 1, res
    derivs = res[0]
    assert isinstance(derivs, tuple) and len(derivs) == len(c.pattern), derivs
    for i, p in enumerate(c.pattern):
        if p == "A":
            assert isinstance(derivs[i], float), f"arg {i}: {derivs[i]!r}"
        else:
            assert derivs[i] is None, f"arg {i} is not Active: {derivs[i]!r}"
    grad = []
    for i, idx in _inputs(c):
        grad.append(derivs[i] if idx is None else float(shadows[i][idx]))
    return np.array(grad)


def _forward_gradient(c, weights) -> np.ndarray:
    """dL/d(input) for every input coordinate, one forward-mode call per coordinate."""
    grad = []
    ret = Duplicated if c.ret is Active else Const
    for coord in _inputs(c):
        args = list(c.make_args())
        tangents: dict[int, np.ndarray] = {}
        anns = []
        for j, (a, p) in enumerate(zip(args, c.pattern)):
            if p == "A":
                anns.append(Duplicated(a, 1.0 if coord == (j, None) else 0.0))
            elif p == "D":
                tangents[j] = _like(c, j, 0.0)
                if coord[0] == j:
                    tangents[j][coord[1]] = 1.0
                anns.append(Duplicated(a, tangents[j]))
            else:
                anns.append(Const(a))
        res = autodiff(Forward, c.fn, ret, *anns)
        d = float(res[1]) if c.ret is Active else 0.0
        for j, w in weights.items():
            d += float(np.dot(w.reshape(-1), fd.flat(tangents[j])))
        grad.append(d)
    return np.array(grad)


def _assert_grad(c, actual, expected, tol, what):
    # atol is relative to the largest entry of the gradient (entries much smaller than it carry
    # the rounding error of the large ones, in finite differences and in forward mode alike)
    scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
    atol = tol["atol"] * scale
    bad = [k for k, (a, e) in enumerate(zip(actual, expected))
           if not abs(a - e) <= atol + tol["rtol"] * abs(e)]
    if bad:
        coords = _inputs(c)
        lines = [f"  {_label(c, coords[k])}: reverse {actual[k]!r}, {what} {expected[k]!r}"
                 for k in bad[:12]]
        raise AssertionError(f"{c.name}: reverse gradient differs from {what} at "
                             f"{len(bad)} of {len(actual)} inputs\n" + "\n".join(lines))


# --- the corpus --------------------------------------------------------------------------------


@pytest.mark.parametrize("c", _params(reverse=False))
def test_primal_runs(c):
    """Every case's function compiles and runs under Numba (no pyzyme involved)."""
    args = list(c.make_args())
    ret = c.fn(*args)
    if c.ret is Active:
        assert math.isfinite(float(ret))
    else:
        assert ret is None


@pytest.mark.parametrize("c", _params())
def test_reverse_matches_finite_differences(c):
    weights = _weights(c, random=c.ret is Const)
    res, _, shadows = _run_reverse(c, weights)
    assert len(res) == 1
    actual = _reverse_gradient(c, res, shadows)
    expected = _fd_gradient(c, weights)
    _assert_grad(c, actual, expected, FD_TOL_F32 if c.float32 else FD_TOL, "finite differences")


@pytest.mark.parametrize("c", _params(lambda c: c.ret is Active and "D" in c.pattern))
def test_reverse_shadows_accumulate(c):
    """Shadows holding something on entry: reverse mode adds the derivative of the final
    contents' cotangent (for arrays the function does not write: the cotangent itself)."""
    weights = _weights(c, random=True, salt="acc")
    res, _, shadows = _run_reverse(c, weights)
    actual = _reverse_gradient(c, res, shadows)
    expected = _fd_gradient(c, weights)
    _assert_grad(c, actual, expected, FD_TOL_F32 if c.float32 else FD_TOL, "finite differences")


@pytest.mark.parametrize("c", _params(lambda c: c.forward_ok))
def test_reverse_matches_forward(c):
    weights = _weights(c, random=c.ret is Const)
    res, _, shadows = _run_reverse(c, weights)
    actual = _reverse_gradient(c, res, shadows)
    expected = _forward_gradient(c, weights)
    _assert_grad(c, actual, expected, AD_TOL_F32 if c.float32 else AD_TOL, "forward mode")


@pytest.mark.parametrize("c", _params())
def test_reverse_with_primal(c):
    weights = _weights(c, random=c.ret is Const)
    res, args, shadows = _run_reverse(c, weights, ReverseWithPrimal)
    assert isinstance(res, tuple) and len(res) == 2, res
    with_primal = _reverse_gradient(c, res, shadows)
    ref_res, _, ref_shadows = _run_reverse(c, weights)
    plain = _reverse_gradient(c, ref_res, ref_shadows)
    _assert_grad(c, with_primal, plain, AD_TOL_F32 if c.float32 else AD_TOL, "Reverse")

    ref_args = list(c.make_args())
    expected = c.fn(*ref_args)
    tol = {"rtol": 1e-6, "atol": 1e-7} if c.float32 else {"rtol": 1e-13, "atol": 1e-15}
    if expected is None:
        assert res[1] is None
    else:
        np.testing.assert_allclose(float(res[1]), float(expected), **tol)
    # arrays the function mutates end with the contents a plain call leaves in them
    for i, p in enumerate(c.pattern):
        if p == "D":
            np.testing.assert_allclose(args[i], ref_args[i], err_msg=f"arg {i}", **tol)


# --- the reverse examples of API.md ------------------------------------------------------------


def test_api_mixed_activities():
    def f(a, b, c, d):
        return a * np.sqrt(b[0]**2 + b[1]**2) + c**2 * d**2

    b = np.array([2.2, 3.3])
    db = np.zeros(2)
    res = autodiff(Reverse, f, Active, Active(4.2), Duplicated(b, db), Const(55), Active(9.0))
    assert len(res) == 1 and len(res[0]) == 4
    da, d_b, dc, dd = res[0]
    assert da == pytest.approx(3.966106403010388, rel=1e-15)
    assert da == pytest.approx(math.hypot(2.2, 3.3), rel=1e-15)
    assert d_b is None and dc is None
    assert dd == 54450.0                                  # 2 * 55**2 * 9
    norm = math.sqrt(2.2**2 + 3.3**2)
    np.testing.assert_allclose(db, [4.2 * 2.2 / norm, 4.2 * 3.3 / norm], rtol=1e-14)
    np.testing.assert_array_equal(b, [2.2, 3.3])


def test_api_reverse_with_primal_square():
    assert autodiff(ReverseWithPrimal, lambda x: x * x, Active, Active(3.0)) == ((6.0,), 9.0)


def test_api_reverse_return_activity_deduced():
    assert autodiff(Reverse, lambda x: x * x, Active(1.0)) == ((2.0,),)


def test_api_cube_zero_d_arrays():
    def cube(y, x):
        y[()] = x[()] ** 3

    x = np.array(4.0)
    dx = np.array(0.0)
    y = np.array(0.0)
    dy = np.array(1.0)
    res = autodiff(Reverse, cube, Const, Duplicated(y, dy), Duplicated(x, dx))
    assert res == ((None, None),)
    assert dx[()] == 48.0
    assert dy[()] == 0.0
    assert y[()] == 64.0


def _tmp_power(x, tmp, n):
    tmp[0] = 1.0
    for i in range(n):
        tmp[0] *= x
    return tmp[0]


def test_api_const_temporary_storage_raises_activity_error():
    with pytest.raises(pyzyme.ActivityError):
        autodiff(Reverse, _tmp_power, Active(1.2), Const(np.empty(1)), Const(5))


def test_api_activity_error_names_the_argument():
    with pytest.raises(pyzyme.ActivityError, match="tmp"):
        autodiff(Reverse, _tmp_power, Active(1.2), Const(np.empty(1)), Const(5))


def test_api_activity_error_is_a_pyzyme_error():
    assert issubclass(pyzyme.ActivityError, pyzyme.PyzymeError)


def test_api_duplicated_temporary_storage():
    res = autodiff(Reverse, _tmp_power, Active(1.2), Duplicated(np.empty(1), np.zeros(1)),
                   Const(5))
    assert len(res) == 1 and len(res[0]) == 3
    assert res[0][0] == pytest.approx(5 * 1.2**4, rel=1e-14)
    assert res[0][0] == pytest.approx(10.367999999999999, rel=1e-14)
    assert res[0][1] is None and res[0][2] is None


def test_api_gradient_reverse():
    g = gradient(Reverse, lambda x: x[0] * x[1], np.array([2.0, 3.0]))
    assert isinstance(g, np.ndarray)
    np.testing.assert_array_equal(g, [3.0, 2.0])


def test_api_gradient_reverse_out():
    dx = np.array([7.0, 7.0])
    g = gradient(Reverse, lambda x: x[0] * x[1], np.array([2.0, 3.0]), out=dx)
    assert g is dx
    np.testing.assert_array_equal(dx, [3.0, 2.0])
