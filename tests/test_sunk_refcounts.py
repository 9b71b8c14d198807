"""Reference-count calls that LLVM sank into a join (``NRT_decref(phi ...)``) are moved back into
the join's predecessors before Numba's pruner runs, so an argument's count pair is pruned from
a recursive function with two exits (GradBench's det) and its derivative mirrors none onto the
shadows; and only where that merely reorders count updates."""

import re

import numpy as np

import pyzyme
from pyzyme import Active, Duplicated, Reverse
from pyzyme.gradbench.evals.det import det
from pyzyme.runtime.sunk_refcounts import unsink_refcounts


def _increfs(text):
    return len(re.findall(r"call[^@\n]*@NRT_incref\b", text))


def test_recursive_det_derivative_has_no_count_pairs():
    # _minor returns through a join where LLVM had merged the last decrefs of two exits
    # (r on one, A on the other) into one decref of a phi: the pairs on A, r and c stayed, and
    # the augmented sweep added a pair on each shadow: 12 atomic updates per call.
    A = np.random.default_rng(0).standard_normal((4, 4))
    dA = np.zeros_like(A)
    text = pyzyme.code_llvm(Reverse, det, Active, Duplicated(A, dA), optimized=True)
    assert _increfs(text) == 0
    pyzyme.autodiff(Reverse, det, Active, Duplicated(A, dA))
    np.testing.assert_allclose(dA, np.linalg.det(A) * np.linalg.inv(A).T, rtol=1e-10)


_JOIN = """define void @f(ptr %a, ptr %b, i1 %c) {
entry:
  br i1 %c, label %left, label %right
left:
  br LEFT_EXIT
right:
  br label %join
join:
  %p = phi ptr [ %a, %left ], [ %b, %right ]
  BEFORE
  tail call fastcc void @NRT_decref(ptr %p)
  ret void
}"""


def _join(left_exit, before):
    text = _JOIN.replace("LEFT_EXIT", left_exit)
    return text.replace("  BEFORE\n", f"  {before}\n" if before else "")


def test_a_predecessor_that_branches_elsewhere_too_keeps_the_call_in_the_join():
    text = _join("i1 %c, label %join, label %right", "")
    assert unsink_refcounts(text) == text


def test_a_use_before_the_call_keeps_it_in_the_join():
    # A load between the phi and the decref: releasing earlier could free what it reads.
    text = _join("label %join", "%v = load i8, ptr %p")
    assert unsink_refcounts(text) == text


def test_calls_move_to_each_predecessor():
    text = _join("label %join", "")
    lines = unsink_refcounts(text).splitlines()
    assert "NRT_decref" not in "".join(lines[lines.index("join:"):])
    assert lines[lines.index("left:") + 1].endswith("@NRT_decref(ptr %a)")
    assert lines[lines.index("right:") + 1].endswith("@NRT_decref(ptr %b)")
