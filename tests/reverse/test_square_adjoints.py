"""The adjoint of ``x * x`` is one product with the doubled seed (``x * (seed + seed)``): a sum
of squares (a distance, a norm, Lennard-Jones' ``dx*dx + dy*dy + dz*dz``) doubles its one seed
once and pays one multiply per square, where two products summed became ``(x * seed) * 2``,
two multiplies per square (issue 22: P2's reverse sweep, 10% of its time)."""

import re

import numba
import numpy as np

import pyzyme.llvm as pl
from pyzyme import Active, Const, Duplicated, Reverse, autodiff, code_llvm


@numba.njit
def _three_squares(a, b, c):
    return a * a + b * b + c * c


@numba.njit
def _pair_energy(pos, sigma):  # the shape of a Lennard-Jones energy, serial
    n = pos.shape[0]
    s2 = sigma * sigma
    e = 0.0
    for i in range(n):
        for j in range(n):
            if j != i:
                dx = pos[i, 0] - pos[j, 0]
                dy = pos[i, 1] - pos[j, 1]
                dz = pos[i, 2] - pos[j, 2]
                q = s2 / (dx * dx + dy * dy + dz * dz)
                q6 = q * q * q
                e += q6 * q6 - q6
    return e


def test_sum_of_squares_doubles_its_seed_once():
    text = code_llvm(Reverse, _three_squares, Active, Active(1.0), Active(2.0), Active(3.0),
                     optimized=True)
    ops = re.findall(r"= f(add|mul|sub) [^\n]*", text[text.index("define"):])
    assert sorted(ops) == ["add", "mul", "mul", "mul"], ops   # was 6 multiplies
    grads = autodiff(Reverse, _three_squares, Active, Active(0.3), Active(-1.7), Active(2.5))
    assert grads[0] == (0.6, -3.4, 5.0)   # 0.3 * (1 + 1): doubling is exact


def test_pair_energy_gradient_against_central_differences():
    rng = np.random.default_rng(3)
    grid = np.stack(np.meshgrid(*[np.arange(2)] * 3, indexing="ij"), -1).reshape(-1, 3)
    pos = 1.2 * grid.astype(np.float64) + rng.uniform(-0.1, 0.1, grid.shape)
    dpos = np.zeros_like(pos)
    autodiff(Reverse, _pair_energy, Active, Duplicated(pos, dpos), Const(1.0))
    for flat in rng.choice(pos.size, 8, replace=False):
        at = np.unravel_index(flat, pos.shape)
        h, keep = 1e-6, pos[at]
        pos[at] = keep + h
        up = _pair_energy(pos, 1.0)
        pos[at] = keep - h
        down = _pair_energy(pos, 1.0)
        pos[at] = keep
        assert abs(dpos[at] - (up - down) / (2 * h)) <= 1e-6 * max(1.0, abs(dpos[at]))


_SQUARES_IR = """
declare double @llvm.fmuladd.f64(double, double, double)
define double @squares(ptr %x) {
  %a = load double, ptr %x, align 8
  %q = getelementptr double, ptr %x, i64 1
  %b = load <2 x double>, ptr %q, align 8
  %v = call double @llvm.fmuladd.f64(double %a, double %a, double %a)
  %bb = fmul <2 x double> %b, %b
  %b0 = extractelement <2 x double> %bb, i64 0
  %b1 = extractelement <2 x double> %bb, i64 1
  %s = fadd double %b0, %b1
  %w = call double @llvm.fmuladd.f64(double %v, double %s, double %b0)
  ret double %w
}
"""


def test_fmuladd_and_vector_squares_against_the_closed_form():
    # w = (a^2 + a) (b0^2 + b1^2) + b0^2: fmuladd(a, a, c) squares its first two operands
    # too, and a vector product squares each lane.
    reverse = pl.compile(_SQUARES_IR, "squares", "reverse", ["dup"])
    x = np.array([0.7, -1.3, 2.1])
    grad = np.zeros(3)
    reverse(x.ctypes.data, grad.ctypes.data, 1.5)
    a, b0, b1 = x
    v, s = a * a + a, b0 * b0 + b1 * b1
    want = 1.5 * np.array([(2 * a + 1) * s, v * 2 * b0 + 2 * b0, v * 2 * b1])
    np.testing.assert_allclose(grad, want, rtol=1e-14)
