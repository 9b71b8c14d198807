"""Property test: forward mode of random numeric programs matches finite differences.

Hypothesis writes small programs as Python source: expression trees over three scalar inputs
``x, y, z`` and elements of one small array ``a`` (``+ - * /``, ``sin``, ``cos``, ``exp`` of a
bounded argument, ``sqrt`` of a square plus one, ``tanh``, integer powers), optionally inside a
``for`` loop over ``a`` with an accumulator and an ``if``/``else`` on a comparison. Each program is
``exec``'d, compiled with ``numba.njit`` and differentiated in forward mode along random
tangents of all four inputs. Every operation is total on the bounded domain (denominators are
``1 + e*e``, ``exp`` sees ``tanh(e)``, the accumulator enters expressions through ``tanh``), and
points where a branch condition is within 1e-4 of flipping are skipped, so central differences
are a valid reference.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from pyzyme import Duplicated, Forward, autodiff

from . import fd

SCALARS = ("x", "y", "z")
UNARY = ("math.sin({})", "math.cos({})", "math.exp(math.tanh({}))", "math.sqrt({0} * {0} + 1.0)",
         "math.tanh({})", "({}) ** 2", "({}) ** 3")
BINARY = ("({} + {})", "({} - {})", "({} * {})", "({} / (1.0 + {1} * {1}))")


def _expr(draw, depth: int, leaves: tuple[str, ...]) -> str:
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.integers(0, 4)) == 0:
            return repr(draw(st.sampled_from([0.5, 1.5, -2.0, 3.0])))
        return draw(st.sampled_from(leaves))
    if draw(st.booleans()):
        return draw(st.sampled_from(UNARY)).format(_expr(draw, depth - 1, leaves))
    op = draw(st.sampled_from(BINARY))
    lhs = _expr(draw, depth - 1, leaves)
    rhs = _expr(draw, depth - 1, leaves)
    return op.replace("{1}", "{r}").format(lhs, r=rhs) if "{1}" in op else op.format(lhs, rhs)


@st.composite
def programs(draw) -> tuple[str, str]:
    """(source of ``f(x, y, z, a)``, source of ``margin(x, y, z, a)``): the same program, the
    second returning how far its branch conditions were from flipping."""
    loop = draw(st.booleans())
    branch = loop and draw(st.booleans())
    outer = ("a[0]",) + SCALARS
    if not loop:
        body = [f"    return {_expr(draw, 4, outer)}"]
        return "\n".join(["def f(x, y, z, a):", *body]), ""
    inner = SCALARS + ("a[i]", "math.tanh(acc)")
    update = draw(st.sampled_from(["acc = acc + {}", "acc = 0.5 * acc + {}", "acc += {} * a[i]"]))
    lines = ["def f(x, y, z, a):", "    acc = 0.0", "    for i in range(a.shape[0]):"]
    if branch:
        lhs, rhs = _expr(draw, 2, inner), _expr(draw, 2, inner)
        lines += [f"        if {lhs} > {rhs}:",
                  f"            {update.format(_expr(draw, 3, inner))}",
                  "        else:",
                  f"            {update.format(_expr(draw, 3, inner))}"]
    else:
        lines.append(f"        {update.format(_expr(draw, 3, inner))}")
    lines.append(f"    return acc * {_expr(draw, 2, outer)} + {_expr(draw, 2, outer)}")
    src = "\n".join(lines)
    margin = ""
    if branch:
        margin = src.replace("def f(", "def margin(").replace(
            f"        if {lhs} > {rhs}:",
            f"        m = min(m, abs(({lhs}) - ({rhs})))\n        if {lhs} > {rhs}:")
        margin = margin.replace("    acc = 0.0", "    acc = 0.0\n    m = math.inf")
        margin = margin[:margin.rindex("    return")] + "    return m"
    return src, margin


def _compile(src: str):
    namespace = {"math": math}
    exec(compile(src, "<hypothesis program>", "exec"), namespace)
    return namespace


bounded = st.floats(-1.5, 1.5, allow_nan=False, allow_infinity=False)
unit = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prog=programs(), point=st.tuples(bounded, bounded, bounded),
       tangent=st.tuples(unit, unit, unit),
       n=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_random_programs_match_finite_differences(prog, point, tangent, n, seed):
    src, margin_src = prog
    note(src)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.5, 1.5, n)
    da = rng.uniform(-1.0, 1.0, n)
    if margin_src:
        margin = _compile(margin_src)["margin"]
        assume(margin(*point, a.copy()) > 1e-4)
    f = numba.njit(_compile(src)["f"])

    primal, tangent_out = autodiff(Forward, f, Duplicated, Duplicated(point[0], tangent[0]),
                                   Duplicated(point[1], tangent[1]),
                                   Duplicated(point[2], tangent[2]), Duplicated(a, da.copy()))
    assert math.isfinite(primal)
    assert primal == f(*point, a)
    (expected, _a_tangent) = fd.directional(
        f, lambda: (*point, a.copy()), "DDDD", [*tangent, da])
    scale = max(1.0, abs(primal))
    np.testing.assert_allclose(tangent_out, expected[0], rtol=1e-5, atol=1e-6 * scale)
