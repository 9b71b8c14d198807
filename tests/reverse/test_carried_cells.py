"""Shadow cells carried between reverse iterations in registers
(pyzyme.diff.reverse.carried): stencils reading a neighbour of the cell they overwrite."""

import numpy as np
import pytest
from numba import njit

import pyzyme


@njit
def ahead(u, c, steps):
    """Each cell from itself and its neighbours, in place: reads ``u[i + 1]``, overwrites
    ``u[i]`` (offsets 0 and +1)."""
    n = u.shape[0]
    for _ in range(steps):
        left = u[0]
        for i in range(1, n - 1):
            new = u[i] + c * (left - 2.0 * u[i] + u[i + 1])
            left = u[i]
            u[i] = new
    s = 0.0
    for i in range(n):
        s += u[i] * u[i] * (1.0 + 0.1 * i)
    return s


@njit
def downward(u, c, steps):
    """``ahead`` run from the right end down: reads ``u[i - 1]`` before it is overwritten
    (offsets -1 and 0, the induction variable stepping by -1)."""
    n = u.shape[0]
    for _ in range(steps):
        right = u[n - 1]
        for i in range(n - 2, 0, -1):
            new = u[i] + c * (right - 2.0 * u[i] + u[i - 1])
            right = u[i]
            u[i] = new
    s = 0.0
    for i in range(n):
        s += u[i] * u[i] * (1.0 + 0.1 * i)
    return s


@njit
def behind(u, c, steps):
    """Reads the cell just overwritten, ``u[i - 1]``: LLVM keeps it in a register, and the
    loop's memory is all at offset 0 (nothing to carry)."""
    n = u.shape[0]
    for _ in range(steps):
        for i in range(1, n):
            u[i] = u[i] + c * (u[i - 1] - u[i]) * u[i]
    s = 0.0
    for i in range(n):
        s += u[i] * (1.0 + 0.1 * i)
    return s


@njit
def both_sides(u, c, steps):
    """Three neighbours: ``u[i - 1]`` is the value stored on the iteration before, which LLVM
    keeps in a register; the loop's memory is at offsets 0 and +1, as in ``ahead``."""
    n = u.shape[0]
    for _ in range(steps):
        for i in range(1, n - 1):
            u[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    s = 0.0
    for i in range(n):
        s += u[i] * u[i]
    return s


X = np.sin(np.linspace(0.0, 3.0, 23)) + 0.5


def _gradient(f, x, c, steps, budget=None):
    dx = np.zeros_like(x)
    with pyzyme.options(tape_budget=budget):
        ((_, dc, _),) = pyzyme.autodiff(pyzyme.Reverse, f, pyzyme.Active,
                                        pyzyme.Duplicated(x.copy(), dx), pyzyme.Active(c),
                                        pyzyme.Const(steps))
    return np.concatenate([dx, [dc]])


def _central(f, x, c, steps, eps=1e-6):
    def at(z):
        return f.py_func(z[:-1].copy(), z[-1], steps)
    z = np.concatenate([x, [c]])
    out = np.zeros_like(z)
    for k in range(z.size):
        e = np.zeros_like(z)
        e[k] = eps
        out[k] = (at(z + e) - at(z - e)) / (2 * eps)
    return out


@pytest.mark.parametrize("f", [ahead, downward, behind, both_sides])
def test_gradients_against_differences_and_the_checkpointed_loop(f):
    """Unbudgeted and under a budget (each step's derivative then runs the loop's reverse
    alone, its run entered and left once a step)."""
    got = _gradient(f, X, 0.2, 9)
    np.testing.assert_allclose(got, _central(f, X, 0.2, 9), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(_gradient(f, X, 0.2, 9, budget=4096), got, rtol=1e-12,
                               atol=1e-14)


def test_reverse_loop_of_the_in_place_stencil_is_vectorized():
    """With the neighbour's adjoint in a register, each reverse iteration stores one shadow
    cell, and LLVM vectorizes the loop: the sum into ``c``'s adjoint becomes a vector
    reduction (it was a scalar chain of additions, one a cell)."""
    x = X.copy()
    text = pyzyme.code_llvm(pyzyme.Reverse, ahead, pyzyme.Active,
                            pyzyme.Duplicated(x, np.zeros_like(x)), pyzyme.Active(0.2),
                            pyzyme.Const(3), optimized=True)
    assert "llvm.vector.reduce.fadd" in text


def test_first_reverse_iteration_is_peeled_out_of_the_vector_loop():
    """A run's first reverse iteration reads the other cell from memory; marked by a flag
    (true on entry, false after an iteration), LLVM peels that iteration, and the vector loop
    neither compares the counter on every lane nor blends in a load of the cell (it did while
    the first iteration was found by comparing the counter with its value on entry)."""
    x = X.copy()
    text = pyzyme.code_llvm(pyzyme.Reverse, ahead, pyzyme.Active,
                            pyzyme.Duplicated(x, np.zeros_like(x)), pyzyme.Active(0.2),
                            pyzyme.Const(3), optimized=True)
    assert "llvm.vector.reduce.fadd" in text
    vector_selects = [line for line in text.splitlines()
                      if " select <" in line and " x i1>" in line]
    assert vector_selects == []


# The stencil run from the right end down, as a compiler without Numba's wraparound of
# negative indices writes it: the induction variable steps by -1 and the loop reads u[i - 1]
# before overwriting it, so the reverse sweep (running i up) reaches u[i] first.
SWEEP_DOWN = """define void @sweep(ptr noalias %u, double %c, i64 %n) {
entry:
  %last = add i64 %n, -1
  %start = add i64 %n, -2
  %pl = getelementptr double, ptr %u, i64 %last
  %r0 = load double, ptr %pl
  %go = icmp sgt i64 %start, 0
  br i1 %go, label %loop, label %exit
loop:
  %i = phi i64 [ %start, %entry ], [ %next, %loop ]
  %right = phi double [ %r0, %entry ], [ %ui, %loop ]
  %pi = getelementptr double, ptr %u, i64 %i
  %ui = load double, ptr %pi
  %im1 = add i64 %i, -1
  %pm = getelementptr double, ptr %u, i64 %im1
  %um = load double, ptr %pm
  %t1 = fmul double %ui, 2.0
  %t2 = fsub double %right, %t1
  %t3 = fadd double %t2, %um
  %t4 = fmul double %c, %t3
  %t5 = fmul double %t4, %ui
  %new = fadd double %ui, %t5
  store double %new, ptr %pi
  %next = add i64 %i, -1
  %more = icmp sgt i64 %next, 0
  br i1 %more, label %loop, label %exit
exit:
  ret void
}"""


def _sweep_down(u, c):
    u = u.copy()
    right = u[-1]
    for i in range(u.size - 2, 0, -1):
        ui = u[i]
        u[i] = ui + c * (right - 2.0 * ui + u[i - 1]) * ui
        right = ui
    return u


def test_loop_counting_down_carries_the_other_cell():
    """The plan with the roles of the two offsets swapped: gradients in the array and in
    ``c`` against central differences."""
    import ctypes

    from pyzyme import llvm as pl
    kinds = ["dup", "active", "const"]
    assert "carried.q" in pl.differentiate(SWEEP_DOWN, "sweep", "reverse", kinds,
                                           opt_level=None)
    grad = pl.compile(SWEEP_DOWN, "sweep", "reverse", kinds)
    rng = np.random.default_rng(1)
    u, w, c = rng.random(12) + 0.5, rng.random(12), 0.3
    got, du = u.copy(), w.copy()
    p = ctypes.POINTER(ctypes.c_double)
    dc = grad(got.ctypes.data_as(p), c, 12, du.ctypes.data_as(p)).f0
    np.testing.assert_allclose(got, _sweep_down(u, c), rtol=1e-14)

    def loss(x, k):
        return w @ _sweep_down(x, k)
    eps = 1e-6
    fd = [(loss(u + eps * e, c) - loss(u - eps * e, c)) / (2 * eps) for e in np.eye(12)]
    np.testing.assert_allclose(du, fd, rtol=1e-7, atol=1e-9)
    assert abs(dc - (loss(u, c + eps) - loss(u, c - eps)) / (2 * eps)) < 1e-7
