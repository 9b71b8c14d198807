"""The tape pool (freed tape arrays kept per size class) and the capacity a loop's caches start
at on a later call."""

from __future__ import annotations

import ctypes
import math

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Duplicated, Forward, ReverseSplitWithPrimal
from pyzyme import naming
from pyzyme.diff.tape.pool import FIRST_CAPACITY, SLOTS, tape_capacity, tape_free, tape_realloc
from pyzyme.ir import IRBuilder, Module, types as T
from pyzyme.ir.values import const_null
from pyzyme.runtime import compile_module


@pytest.fixture(scope="module")
def pool():
    """``alloc(bytes)``, ``grow(p, bytes)``, ``release(p)`` and ``capacity(hint, cap)`` of one
    module's pool."""
    m = Module("pool_test")
    realloc, free, capacity = tape_realloc(m), tape_free(m), tape_capacity(m)
    for name, params, ret in (("alloc", [T.i64], T.ptr), ("grow", [T.ptr, T.i64], T.ptr),
                              ("release", [T.ptr], T.void), ("capacity", [T.ptr, T.i64], T.i64)):
        fn = m.add_function(name, T.FunctionType(ret, params))
        b = IRBuilder(fn.append_block("entry"))
        if name == "alloc":
            b.ret(b.call(realloc, [const_null(T.ptr), fn.args[0]]))
        elif name == "release":
            b.call(free, [fn.args[0]])
            b.ret_void()
        else:
            b.ret(b.call(realloc if name == "grow" else capacity, list(fn.args)))
    compiled = compile_module(str(m), name="pool_test")
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    return {"alloc": ctypes.CFUNCTYPE(vp, i64)(compiled.address("alloc")),
            "grow": ctypes.CFUNCTYPE(vp, vp, i64)(compiled.address("grow")),
            "release": ctypes.CFUNCTYPE(None, vp)(compiled.address("release")),
            "capacity": ctypes.CFUNCTYPE(i64, vp, i64)(compiled.address("capacity"))}


def test_pool_keeps_several_blocks_per_class(pool):
    blocks = [pool["alloc"](3000) for _ in range(SLOTS + 1)]   # all in the 4 KiB class
    assert len(set(blocks)) == SLOTS + 1
    for p in blocks:
        pool["release"](p)
    # The first SLOTS went into the free slots; the last found none and was given back.
    again = [pool["alloc"](3500) for _ in range(SLOTS)]
    assert set(again) == set(blocks[:SLOTS])
    other = pool["alloc"](100)   # another class: never one of these
    assert other not in again
    for p in [*again, other]:
        pool["release"](p)


def test_growing_keeps_the_contents(pool):
    p = pool["alloc"](64)
    ctypes.memmove(p, bytes(range(64)), 64)
    q = pool["grow"](p, 10_000)
    assert ctypes.string_at(q, 64) == bytes(range(64))
    assert pool["grow"](q, 5000) == q   # big enough already: the same block
    pool["release"](q)


def test_capacity_starts_at_the_largest_reached_then_doubles(pool):
    hint = ctypes.c_int64(0)
    at = ctypes.addressof(hint)
    assert pool["capacity"](at, 0) == FIRST_CAPACITY       # nothing reached yet
    assert pool["capacity"](at, 64) == 128 and hint.value == 128
    assert pool["capacity"](at, 1024) == 2048 and hint.value == 2048
    assert pool["capacity"](at, 0) == 2048                 # a new call starts there
    assert pool["capacity"](at, 128) == 256 and hint.value == 2048   # never lowered


@numba.njit
def two_recurrences(x, steps):
    """Two values overwritten every iteration (two caches of one loop), and a loop that may
    leave early, so its trip count is not known when it starts (its caches grow)."""
    y = x
    z = 0.5 * x
    i = 0
    while i < steps and y > -10.0:
        y = math.sin(y) * 0.9 + 0.1 * z
        z = math.cos(z) * y
        i += 1
    return y + z


def _gradient(steps):
    fwd, rev = pyzyme.autodiff_thunk(ReverseSplitWithPrimal, two_recurrences, Active,
                                     Active(0.3), pyzyme.Const(steps))
    tape, _, _ = fwd(Active(0.3), pyzyme.Const(steps))
    nbytes = tape.nbytes
    ((dx, _),) = rev(Active(0.3), pyzyme.Const(steps), 1.0, tape)
    return dx, nbytes


def _tangent(steps):
    return pyzyme.autodiff(Forward, two_recurrences, Duplicated(0.3, 1.0),
                           pyzyme.Const(steps))[1]


def test_later_calls_start_at_the_capacity_reached():
    # One global per loop with caches, named after the function running the forward sweep.
    text = pyzyme.code_llvm(ReverseSplitWithPrimal, two_recurrences, Active, Active(0.3),
                            pyzyme.Const(5))
    prefix = naming.capacity_hint("augmented_", "B").rsplit(".", 1)[0]
    assert f"@{prefix}" in text and "atomicrmw umax" in text
    sizes = [10, 50_000, 30, 200_000, 7]
    found = {n: _gradient(n) for n in sizes}
    for n in sizes:   # growing past the remembered capacity, and starting above the need
        assert found[n][0] == pytest.approx(_tangent(n), rel=1e-12, abs=1e-15)
    big = found[50_000][1]
    assert found[30][1] >= big > found[10][1]        # started at the capacity 50_000 reached
    assert found[7][1] >= found[200_000][1] > big


@numba.njit
def two_recurrences_of_an_array(x):
    y = x[0]
    z = x[1]
    i = 0
    while i < 5000 and y > -10.0:
        y = math.sin(y) * 0.9 + 0.1 * z
        z = math.cos(z) * y
        i += 1
    return y + z


def test_forward_over_reverse_grows_the_tangent_caches_alike():
    # hvp differentiates the gradient, whose caches grow through pyzyme.tape_capacity.
    x, v = np.array([0.3, 0.2]), np.array([1.0, -0.5])
    h = pyzyme.hvp(two_recurrences_of_an_array, x, v)
    e = 1e-6
    g = lambda p: pyzyme.gradient(pyzyme.Reverse, two_recurrences_of_an_array, p)  # noqa: E731
    np.testing.assert_allclose(h, (g(x + e * v) - g(x - e * v)) / (2 * e), rtol=1e-6)
