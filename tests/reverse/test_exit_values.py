"""A value a loop leaves, read after it both inside a loop around it and after that loop too
(reverse mode's exit caches, pyzyme.diff.reverse.values): LLVM's jump threading split a time
loop in two around the step that copies the array, and the copy's data pointer was read by the
step's stencil (once per time step) and by the result's copy (the last step's). One slot for
both kept only the last step's pointer, and every earlier step's adjoint went to the last
step's array: a wrong gradient, silently. Each loop around both now has a cache of its own."""

import numpy as np
import pytest

import pyzyme.llvm

# Each time step t runs an inner loop whose product s1 (over x[0..n-1], scaled by t + 1) is
# read right after it, in the time loop (acc += s1 * s1), and once more after the time loop.
SOURCE = """
define double @steps(ptr %x, i64 %n, i64 %steps) {
entry:
  br label %outer
outer:
  %t = phi i64 [ 0, %entry ], [ %t1, %olatch ]
  %acc = phi double [ 0.0, %entry ], [ %acc2, %olatch ]
  %t1 = add i64 %t, 1
  %tf = sitofp i64 %t1 to double
  br label %inner
inner:
  %j = phi i64 [ 0, %outer ], [ %j1, %inner ]
  %s = phi double [ 1.0, %outer ], [ %s1, %inner ]
  %p = getelementptr double, ptr %x, i64 %j
  %v = load double, ptr %p
  %sv = fmul double %s, %v
  %s1 = fmul double %sv, %tf
  %j1 = add i64 %j, 1
  %cj = icmp slt i64 %j1, %n
  br i1 %cj, label %inner, label %olatch
olatch:
  %sq = fmul double %s1, %s1
  %acc2 = fadd double %acc, %sq
  %ct = icmp slt i64 %t1, %steps
  br i1 %ct, label %outer, label %exit
exit:
  %cube = fmul double %sq, %s1
  %r = fadd double %acc2, %cube
  ret double %r
}
"""


def _value(x, steps):
    s = [np.prod(x * (t + 1)) for t in range(steps)]
    return sum(v * v for v in s) + s[-1] ** 3


@pytest.mark.parametrize("mode", ["reverse", "split"])
def test_a_value_left_by_a_loop_read_in_the_loop_around_it_and_after_that(mode):
    x = np.array([0.9, 1.1, 0.7])
    steps = 4
    grad = pyzyme.llvm.compile(SOURCE, "steps", mode, ["dup", "const", "const"])
    dx = np.zeros_like(x)
    args = (x.ctypes.data, x.size, steps, dx.ctypes.data)   # the shadows come last
    if mode == "reverse":
        out = grad(*args, 1.0)
    else:
        augmented = grad.augmented(*args)
        out = augmented.f0
        grad.reverse(*args, 1.0, False, augmented.f1)
    assert out == pytest.approx(_value(x, steps), rel=1e-14)
    eps = 1e-6
    fd = [(_value(x + eps * e, steps) - _value(x - eps * e, steps)) / (2 * eps)
          for e in np.eye(x.size)]
    np.testing.assert_allclose(dx, fd, rtol=1e-7)
