"""A loop's temporaries in reverse mode: memory allocated and released in the same iteration (a
time step's NumPy temporaries) is released where the primal releases it, in the forward sweep
(:func:`pyzyme.analysis.overwrite.released_in_loops`), not kept until the reverse sweep is
done. What the reverse sweep needs of such a temporary is cached; its shadow lives on until
the reverse sweep is done with it."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse, ReverseSplitWithPrimal, autodiff, \
    autodiff_thunk

from tests.kernels import central_gradient, double_buffered


@numba.njit
def slice_steps(u, c, steps):
    """A 1-D diffusion whose step assigns a slice expression: Numba computes the right side
    into a new array (a temporary per step), then copies it."""
    v = u.copy()
    w = u.copy()
    for _ in range(steps):
        w[1:-1] = v[1:-1] + c * (v[:-2] - 2.0 * v[1:-1] + v[2:])
        v, w = w, v
    return np.sum(v * v)


@numba.njit
def nonlinear_steps(u, steps):
    """Each step's ``t`` is a temporary whose values the reverse sweep needs (``t * t``): they
    must be cached, since its memory is released, and the next step's ``t`` takes it."""
    v = u.copy()
    for k in range(steps):
        t = np.sin(v + 0.1 * k)
        v = t * t + 0.5 * v
    return np.sum(v)


def _gradient(f, x, *rest):
    dx = np.zeros_like(x)
    autodiff(Reverse, f, Active, Duplicated(x, dx), *[Const(r) for r in rest])
    return dx


def test_slice_steps_against_differences_and_the_index_loop():
    """Against the same stencil written with an index loop (no temporaries)."""
    u = np.random.default_rng(0).standard_normal(17)
    g = _gradient(slice_steps, u, 0.2, 6)
    np.testing.assert_allclose(g, _gradient(double_buffered, u, 0.2, 6), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_allclose(g, central_gradient(slice_steps, u, 0.2, 6), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("steps", [1, 2, 9])
def test_a_temporary_the_reverse_sweep_reads(steps):
    """The reverse of ``t * t`` reads each step's ``t``, whose block the next step's ``t``
    reuses once it is released: read again from that memory, every step would see the
    last step's values."""
    u = np.random.default_rng(steps).standard_normal(13)
    g = _gradient(nonlinear_steps, u, steps)
    np.testing.assert_allclose(g, central_gradient(nonlinear_steps, u, steps), rtol=1e-6, atol=1e-7)


def test_split_mode_and_hvp_through_released_temporaries():
    u = np.random.default_rng(5).standard_normal(11)
    g = _gradient(nonlinear_steps, u, 4)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, nonlinear_steps, Active,
                              Duplicated(u, np.zeros_like(u)), Const(4))
    du = np.zeros_like(u)
    tape, primal, _ = fwd(Duplicated(u, du), Const(4))
    rev(Duplicated(u, du), Const(4), 1.0, tape)
    assert primal == pytest.approx(nonlinear_steps(u, 4), rel=1e-14)
    np.testing.assert_allclose(du, g, rtol=1e-13, atol=1e-14)
    t = np.random.default_rng(6).standard_normal(11)
    hv = pyzyme.hvp(nonlinear_steps, u, t, 4)
    h = 1e-5
    expected = (_gradient(nonlinear_steps, u + h * t, 4)
                - _gradient(nonlinear_steps, u - h * t, 4)) / (2 * h)
    np.testing.assert_allclose(hv, expected, rtol=1e-6, atol=1e-7)


_MEMORY = textwrap.dedent("""
    import re
    import numpy as np
    from pyzyme import Active, Const, Duplicated, Reverse, autodiff
    from tests.reverse.test_loop_temporaries import slice_steps

    def peak_mib(steps):
        # The resident peak of this call alone: clear_refs 5 resets it (Linux 4.0 on).
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        autodiff(Reverse, slice_steps, Active, Duplicated(u, du), Const(0.2), Const(steps))
        with open("/proc/self/status") as f:
            return int(re.search(r"VmHWM:\\s+(\\d+)", f.read()).group(1)) / 1024.0

    u = np.random.default_rng(0).standard_normal(1 << 20)   # 8 MiB, and a temporary as big
    du = np.zeros_like(u)
    peak_mib(1)
    few = peak_mib(4)     # first: the tape pool keeps the shadows a call gives back
    print((peak_mib(16) - few) / 12)
""")


def test_memory_per_step_is_the_shadow_alone():
    """Each step of ``slice_steps`` on 2**20 cells makes an 8 MiB temporary. Its shadow is kept
    until the reverse sweep is done with it (8 MiB a step); the temporary itself is released
    in its step. Kept until the end, as before, the two took 16 MiB a step. (The peaks are
    each call's own, not the process's, which compiling the derivative may have set.)"""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("no /proc/self/clear_refs to reset the resident peak with")
    out = subprocess.run([sys.executable, "-c", _MEMORY], capture_output=True, text=True,
                         timeout=240, check=True, cwd=Path(__file__).resolve().parents[2])
    per_step = float(out.stdout.split()[-1])
    assert 4.0 < per_step < 12.0, out.stdout
