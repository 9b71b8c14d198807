"""A parallel reduction's per-thread sums, which no part of a derivative that does not return
the primal reads: the body's forward sweep leaves their stores out
(pyzyme.analysis.unread_slots). What the code is, where they go and where they stay, and that
gradients and returned primals are the serial function's at 1 and 2 threads."""

import re

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Duplicated, Reverse, ReverseWithPrimal, autodiff

from . import kernels as K

THREADS = tuple(t for t in (1, 2) if t <= numba.config.NUMBA_NUM_THREADS)
PAR = {name: numba.njit(parallel=True)(getattr(K, name))
       for name in ("reduce_sum", "reduce_two_in_one", "reduce_product", "lennard_jones")}
SER = {name: numba.njit(getattr(K, name)) for name in PAR}


def _args(name, rng):
    if name == "lennard_jones":
        return [rng.standard_normal((12, 2)) * 2.0]
    x = rng.standard_normal(17)
    return [x, rng.standard_normal(17)] if name == "reduce_sum" else [x]


def _augmented_body_stores(mode, name) -> int:
    """Float stores in the augmented primal of the parallel body (the IR pyzyme generates)."""
    args = _args(name, np.random.default_rng(0))
    ir = pyzyme.code_llvm(mode, PAR[name], Active,
                          *[Duplicated(a, np.zeros_like(a)) for a in args])
    bodies = re.findall(r"^define [^\n]*@augmented___gufunc__[^\n]*\n(.*?)^}", ir, re.S | re.M)
    assert len(bodies) == 1
    return len(re.findall(r"\bstore (?:double|float) ", bodies[0]))


@pytest.mark.parametrize("name", ["reduce_sum", "lennard_jones"])
def test_a_sum_no_one_reads_is_not_stored(name):
    """Reverse does not return the primal: the body stores nothing (its only stores are into
    its thread's slot); ReverseWithPrimal returns it: the stores stay."""
    assert _augmented_body_stores(Reverse, name) == 0
    assert _augmented_body_stores(ReverseWithPrimal, name) > 0


def test_the_forward_sweep_divides_no_more():
    """Lennard-Jones' terms, a division each, were computed for their sum only: with it not
    stored, strong zero's test of each division is whether its divisor is zero, and the
    optimized forward sweep of the body keeps no division."""
    args = _args("lennard_jones", np.random.default_rng(0))
    ir = pyzyme.code_llvm(Reverse, PAR["lennard_jones"], Active,
                          *[Duplicated(a, np.zeros_like(a)) for a in args], optimized=True)
    forward = re.findall(r"^define [^\n]*@pyzyme\.parfor\.aug\.[^\n]*\n(.*?)^}", ir,
                         re.S | re.M)
    assert len(forward) == 1
    assert "fdiv" not in forward[0] and "fcmp oeq" in forward[0]


@pytest.mark.parametrize("name", ["reduce_two_in_one", "reduce_product"])
def test_sums_the_reverse_needs_are_stored(name):
    """``s * t`` of two sums (the adjoint of each reads the other), a product reduction (the
    body's partial reads the running product): each slot's value is needed, and kept."""
    assert _augmented_body_stores(Reverse, name) > 0


def _gradient(mode, f, args):
    shadows = [np.zeros_like(a) for a in args]
    out = autodiff(mode, f, Active, *[Duplicated(a.copy(), s) for a, s in zip(args, shadows)])
    return shadows, (out[1] if mode is ReverseWithPrimal else None)


@pytest.mark.parametrize("name", ["reduce_sum", "reduce_two_in_one", "lennard_jones"])
def test_gradients_and_primals_are_the_serial_functions(name):
    """At 1 and 2 threads: both modes' gradients are the serial function's (itself checked
    against central differences), ReverseWithPrimal's primal is the function's value."""
    rng = np.random.default_rng(5)
    args = _args(name, rng)
    expect, _ = _gradient(Reverse, SER[name], args)
    x = args[0]
    for flat in rng.choice(x.size, 4, replace=False):
        at = np.unravel_index(flat, x.shape)
        h = 1e-6
        up, down = x.copy(), x.copy()
        up[at] += h
        down[at] -= h
        fd = (SER[name](up, *args[1:]) - SER[name](down, *args[1:])) / (2 * h)
        assert expect[0][at] == pytest.approx(fd, rel=1e-5, abs=1e-6)
    value = SER[name](*args)
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            for mode in (Reverse, ReverseWithPrimal):
                got, primal = _gradient(mode, PAR[name], args)
                for g, e in zip(got, expect):
                    np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
                if mode is ReverseWithPrimal:
                    assert primal == pytest.approx(value, rel=1e-12)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
