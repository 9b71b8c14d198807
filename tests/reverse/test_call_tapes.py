"""What one call of a recursive function's split pair costs: its tape block holds the shadows
of its stack slots (the slot a recursive call returns its result in), each loop's caches share
one block, and the counts of the arrays it is passed are made where the primal makes them,
not deferred. Counted in the generated IR of the augmented primal; values against central
differences and forward mode, including a loop whose caches grow (and are copied) several
times."""

import math
import re

import numba
import numpy as np
import pytest

from pyzyme import Active, Const, Duplicated, Forward, Reverse, autodiff, code_llvm
from pyzyme.runtime.target import side_stacks


@numba.njit
def _expand(x, depth, order):
    """A sum over the depth-long sequences of indices of x, as a determinant by minors
    recurses: a loop around a recursive call, several values cached per iteration, an integer
    array written as it goes."""
    if depth == 0:
        return x[order[0]]
    total = 0.0
    sign = 1.0
    for k in range(x.shape[0]):
        order[0] = k
        inner = _expand(x, depth - 1, order)
        total += sign * math.sin(x[k] * inner) * (k + 1.0)
        sign = -sign
    order[0] = 0
    return total


@numba.njit
def expand(x, depth):
    order = np.zeros(1, dtype=np.intp)
    return _expand(x, depth, order)


def _augmented(text, name):
    """The body of the augmented primal of ``name`` in generated module ``text``."""
    start = re.search(r"define [^\n]*@augmented_[^\n(]*" + name, text).start()
    return text[start:text.index("\n}\n", start)]


@pytest.fixture(scope="module")
def augmented():
    x = np.array([0.3, 0.7, 1.1])
    text = code_llvm(Reverse, expand, Active, Duplicated(x, np.zeros(3)), Const(2))
    return _augmented(text, "_expand")


def _allocations(augmented) -> int:
    # A recursive function's blocks come from its side stack's tape arena, or (no side
    # stacks on this platform) from the tape pool; never from malloc.
    assert "@malloc(" not in augmented
    return sum(augmented.count(f"@pyzyme.{f}(") for f in ("tape_arena", "tape_realloc"))


def test_one_allocation_per_loop_for_its_caches(augmented):
    # Sized once before the loop for every iteration its trip count allows (a counted loop:
    # no capacity test in its header), one block, not one per cached value (five arrays made
    # five allocations a call, all alive until the reverse sweep); and the tape's own block.
    assert _allocations(augmented) == 2
    assert ("@pyzyme.tape_arena(" in augmented) == side_stacks()


def test_stack_slot_shadow_lives_in_the_tape(augmented):
    # The shadow of the slot the recursive call returns its result in: room in the tape,
    # not a block of its own freed with the deferred releases.
    assert _allocations(augmented) == 2
    assert "ptr @free to" not in augmented


def test_counts_of_passed_arrays_are_not_deferred(augmented):
    # The caller holds the arrays (and their shadows) until its own reverse sweep is done:
    # their decrefs are made now, not deferred to the outermost reverse sweep (a deferred
    # release is tagged with its function's address). None is left to make here since the
    # pairs on x and order are pruned (tests/test_sunk_refcounts.py).
    assert not re.search(r"ptrtoint ptr @NRT_decref\S* to", augmented)
    assert "pyzyme.defer_release" not in augmented


@pytest.mark.parametrize("depth", [1, 3])
def test_values_against_differences_and_forward_mode(depth):
    x = np.array([0.3, 0.7, 1.1])
    dx = np.zeros(3)
    autodiff(Reverse, expand, Active, Duplicated(x, dx), Const(depth))
    h = 1e-6
    central = [(expand(x + h * e, depth) - expand(x - h * e, depth)) / (2 * h)
               for e in np.eye(3)]
    np.testing.assert_allclose(dx, central, rtol=1e-6, atol=1e-9)
    forward = [autodiff(Forward, expand, Duplicated, Duplicated(x, e), Const(depth))[1]
               for e in np.eye(3)]
    np.testing.assert_allclose(dx, forward, rtol=1e-12, atol=1e-14)


@numba.njit
def _wander(x, goal):
    """A loop whose trip count is known only when it ends (its caches grow as it runs: 64,
    then 128, 256 entries), caching floats, integers and branch bits."""
    s = 0.0
    i = 0
    while s < goal:
        v = x[i % x.shape[0]]
        if v * s > 0.5:
            s += math.sin(v * s) + 1.0
        else:
            s += math.cos(s) * v + 0.5
        i += 1
    return s * s


@numba.njit
def wander(x, goal, depth):
    """Recursive, so _wander's pair is a callee's split pair."""
    if depth == 0:
        return _wander(x, goal)
    return wander(x, goal, depth - 1) * 0.5 + x[0]


def test_growing_caches_keep_their_values():
    x = np.array([0.6, 0.9, 0.45, 0.8])
    goal = 200.0
    dx = np.zeros(4)
    autodiff(Reverse, wander, Active, Duplicated(x, dx), Const(goal), Const(2))
    h = 1e-7
    central = [(wander(x + h * e, goal, 2) - wander(x - h * e, goal, 2)) / (2 * h)
               for e in np.eye(4)]
    np.testing.assert_allclose(dx, central, rtol=1e-5)
    forward = [autodiff(Forward, wander, Duplicated, Duplicated(x, e), Const(goal),
                        Const(2))[1] for e in np.eye(4)]
    np.testing.assert_allclose(dx, forward, rtol=1e-11)
