"""Loop trees, induction variables and trip counts, checked by their printed form."""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest
from numba import njit

from pyzyme import ir
from pyzyme.analysis.cfg import dominators
from pyzyme.analysis.loops import analyze_loops, runs_at_most_twice


def _fn(text: str):
    return ir.parse_module(textwrap.dedent(text)).functions[0]


def _loops(text: str) -> str:
    return str(analyze_loops(_fn(text)))


def _expect(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


NESTED = """
define void @nest(i64 %n, i64 %m) {
entry:
  br label %outer
outer:
  %i = phi i64 [ 0, %entry ], [ %i.next, %outer.latch ]
  br label %inner
inner:
  %j = phi i64 [ 0, %outer ], [ %j.next, %inner ]
  %j.next = add nuw nsw i64 %j, 1
  %jd = icmp eq i64 %m, %j.next
  br i1 %jd, label %outer.latch, label %inner
outer.latch:
  %i.next = add nuw nsw i64 %i, 1
  %id = icmp eq i64 %i.next, %n
  br i1 %id, label %exit, label %outer
exit:
  ret void
}
"""


def test_nested_loops():
    info = analyze_loops(_fn(NESTED))
    assert str(info) == _expect("""
        loops of @nest
        loop %outer (depth 1): blocks %outer, %inner, %outer.latch; latch %outer.latch; exits %exit
          preheader %entry; exiting %outer.latch
          induction %i = 0 + 1*k; trip count %n (known before the loop)
          loop %inner (depth 2): blocks %inner; latch %inner; exits %outer.latch
            preheader %outer; exiting %inner
            induction %j = 0 + 1*k; trip count %m (known before the loop)""")
    outer, inner = info.loops
    assert inner.parent is outer and outer.children == [inner] and inner.depth == 2
    assert info.loop_of(inner.header) is inner and info.loop_of(outer.blocks[2]) is outer
    count = inner.trip_count
    # The bound sits on the left of the compare; the structured form reads "j.next != m".
    assert (count.start.ref, count.step, count.bound.ref, count.predicate, count.uses_next,
            count.exact) == ("0", 1, "%m", "ne", True, True)


def test_header_tested_loop_counts_header_runs():
    # for (i = s; i < n; i += 1), not rotated: the header runs once more than the body.
    assert _loops("""
        define void @top(i64 %s, i64 %n) {
        entry:
          br label %head
        head:
          %i = phi i64 [ %s, %entry ], [ %i.next, %body ]
          %more = icmp slt i64 %i, %n
          br i1 %more, label %body, label %exit
        body:
          %i.next = add i64 %i, 1
          br label %head
        exit:
          ret void
        }""") == _expect("""
        loops of @top
        loop %head (depth 1): blocks %head, %body; latch %body; exits %exit
          preheader %entry; exiting %head
          induction %i = %s + 1*k; trip count %n - %s + 1 (known before the loop)""")


@pytest.mark.parametrize("update, test, expected", [
    ("sub i64 %i, 1", "icmp eq i64 %i.next, 0", "%i = %n - 1*k; trip count %n"),
    ("add i64 %i, -1", "icmp sgt i64 %i.next, 0", "%i = %n - 1*k; trip count %n"),
    ("add i64 %i, 2", "icmp ne i64 %i.next, 10", "%i = %n + 2*k; trip count (10 - %n) / 2"),
    ("add i64 %i, 3", "icmp slt i64 %i.next, 100",
     "%i = %n + 3*k; trip count ceil((100 - %n) / 3)"),
    ("add i64 %i, 1", "icmp sle i64 %i.next, 100", "%i = %n + 1*k; trip count 101 - %n"),
])
def test_strides_and_predicates(update, test, expected):
    # The loop continues when the test holds except for ``eq``, whose true edge leaves.
    leave_first = test.startswith("icmp eq")
    targets = "label %exit, label %loop" if leave_first else "label %loop, label %exit"
    text = _loops(f"""
        define void @s(i64 %n) {{
        entry:
          br label %loop
        loop:
          %i = phi i64 [ %n, %entry ], [ %i.next, %loop ]
          %i.next = {update}
          %c = {test}
          br i1 %c, {targets}
        exit:
          ret void
        }}""")
    assert text.splitlines()[-1] == f"  induction {expected} (known before the loop)"


def test_unreachable_predecessor_is_ignored():
    assert _loops("""
        define void @d(i64 %n) {
        entry:
          br label %loop
        dead:
          br label %loop
        loop:
          %i = phi i64 [ 0, %entry ], [ 7, %dead ], [ %i.next, %loop ]
          %i.next = add i64 %i, 1
          %c = icmp ult i64 %i.next, %n
          br i1 %c, label %loop, label %exit
        exit:
          ret void
        }""") == _expect("""
        loops of @d
        loop %loop (depth 1): blocks %loop; latch %loop; exits %exit
          preheader %entry; exiting %loop
          induction %i = 0 + 1*k; trip count %n (known before the loop)""")


def test_early_exit_gives_an_upper_bound():
    assert _loops("""
        define i64 @find(ptr %p, i64 %n) {
        entry:
          br label %loop
        loop:
          %i = phi i64 [ 0, %entry ], [ %i.next, %latch ]
          %q = getelementptr double, ptr %p, i64 %i
          %x = load double, ptr %q
          %hit = fcmp olt double %x, 0.0
          br i1 %hit, label %found, label %latch
        latch:
          %i.next = add nuw nsw i64 %i, 1
          %done = icmp eq i64 %i.next, %n
          br i1 %done, label %exit, label %loop
        found:
          ret i64 %i
        exit:
          ret i64 -1
        }""") == _expect("""
        loops of @find
        loop %loop (depth 1): blocks %loop, %latch; latch %latch; exits %found, %exit
          preheader %entry; exiting %loop, %latch
          induction %i = 0 + 1*k; trip count at most %n (known before the loop; other exits)""")


def test_while_loop_with_data_dependent_exit():
    # An integer phi that is not stepped by a constant is no induction variable.
    assert _loops("""
        define i64 @collatz(i64 %x) {
        entry:
          br label %loop
        loop:
          %v = phi i64 [ %x, %entry ], [ %v.next, %loop ]
          %steps = phi i64 [ 0, %entry ], [ %steps.next, %loop ]
          %half = lshr i64 %v, 1
          %v.next = add i64 %half, 1
          %steps.next = add i64 %steps, 1
          %big = icmp ugt i64 %v.next, 1
          br i1 %big, label %loop, label %exit
        exit:
          ret i64 %steps.next
        }""") == _expect("""
        loops of @collatz
        loop %loop (depth 1): blocks %loop; latch %loop; exits %exit
          preheader %entry; exiting %loop
          induction %steps = 0 + 1*k; trip count unknown until exit""")


def test_irreducible_cycle_is_no_natural_loop():
    # The cycle a <-> b is entered at both blocks, so neither dominates the other.
    assert _loops("""
        define void @irr(i1 %c, i1 %d) {
        entry:
          br i1 %c, label %a, label %b
        a:
          br label %b
        b:
          br i1 %d, label %a, label %exit
        exit:
          ret void
        }""") == _expect("""
        loops of @irr
        irreducible edge %b -> %a (no natural loop)""")


def test_infinite_loop_and_shared_header():
    # Two latches for one header make one loop; the loop has no exit at all.
    assert _loops("""
        define void @forever(i1 %c) {
        entry:
          br label %head
        head:
          br i1 %c, label %l1, label %l2
        l1:
          br label %head
        l2:
          br label %head
        }""") == _expect("""
        loops of @forever
        loop %head (depth 1): blocks %head, %l2, %l1; latches %l2, %l1; exits none
          preheader %entry; exiting none
          no induction variable; trip count unknown until exit""")


def test_no_loops_and_given_dominators():
    f = _fn("""
        define void @straight() {
        entry:
          ret void
        }""")
    assert str(analyze_loops(f, dominators(f))) == "loops of @straight\nno loops"


# ---------------------------------------------------------------------------- real Numba code

@njit
def _taylor_exp(x, terms):
    s = 0.0
    t = 1.0
    for k in range(1, terms):
        t = t * x / k
        s += t
    return s


@njit
def _matmul(a, b, c):
    n, m = a.shape
    p = b.shape[1]
    for i in range(n):
        for j in range(p):
            acc = 0.0
            for k in range(m):
                acc += a[i, k] * b[k, j]
            c[i, j] = acc
    return 0.0


@njit
def _newton_sqrt(x):
    y = x
    while abs(y * y - x) > 1e-12:
        y = 0.5 * (y + x / y)
    return y


def _numba_loops(f, args) -> str:
    from pyzyme.frontends.numba import capture
    cap = capture(f, args)
    fn = ir.parse_module(cap.text).get_function(cap.symbol)
    # The first line names the mangled symbol, which depends on what else was compiled.
    return _unnumbered(str(analyze_loops(fn)).split("\n", 1)[1])


def _unnumbered(text: str) -> str:
    """``text`` with the numbers in Numba's block labels (``B46``: bytecode offsets) and its
    value names (``%.1014143``) hidden: they change with the Python version's bytecode (3.12
    labels the Taylor loop's block B40 where 3.11 labels it B46); the loops' shape does not."""
    return re.sub(r"%\.\d+", "%.#", re.sub(r"\bB\d+", "B#", text))


def test_numba_taylor_loop():
    assert _numba_loops(_taylor_exp, (1.0, 10)) == _unnumbered(_expect("""
        loop %B46.endif (depth 1): blocks %B46.endif; latch %B46.endif; exits %common.ret
          preheader %B0.endif; exiting %B46.endif
          induction %.1014143 = 1 + 1*k; trip count %arg.terms - 1 (known before the loop)"""))


def test_numba_matmul_triple_loop():
    ones = np.ones((2, 2))
    text = _numba_loops(_matmul, (ones, ones, ones.copy()))
    # Loop unswitching made a copy of the outer loop for m == 0 (which only zeroes c).
    assert text == _unnumbered(_expect("""
        loop %B82.endif.us.us (depth 1): blocks %B82.endif.us.us, %B116.endif.us.us.us, %B154.us.us.us, %B152.B206_crit_edge.us.us.us, %B114.B80.loopexit_crit_edge.split.us.us.us; latch %B114.B80.loopexit_crit_edge.split.us.us.us; exits %B224
          preheader %B82.endif.lr.ph.split.us; exiting %B114.B80.loopexit_crit_edge.split.us.us.us
          induction %.192267277.us.us = 0 + 1*k; trip count %arg.a.5.0 (known before the loop)
          loop %B116.endif.us.us.us (depth 2): blocks %B116.endif.us.us.us, %B154.us.us.us, %B152.B206_crit_edge.us.us.us; latch %B152.B206_crit_edge.us.us.us; exits %B114.B80.loopexit_crit_edge.split.us.us.us
            preheader %B82.endif.us.us; exiting %B152.B206_crit_edge.us.us.us
            induction %.313251257.us.us.us = 0 + 1*k; trip count %arg.b.5.1 (known before the loop)
            loop %B154.us.us.us (depth 3): blocks %B154.us.us.us; latch %B154.us.us.us; exits %B152.B206_crit_edge.us.us.us
              preheader %B116.endif.us.us.us; exiting %B154.us.us.us
              induction %.437241243.us.us.us = 0 + 1*k; trip count %arg.a.5.1 (known before the loop)
        loop %B82.endif.us (depth 1): blocks %B82.endif.us; latch %B82.endif.us; exits %B224
          preheader %B82.endif.us.preheader; exiting %B82.endif.us
          induction %.192267277.us = 0 + 1*k; trip count %arg.a.5.0 (known before the loop)"""))  # noqa: E501


def test_numba_while_loop():
    assert _numba_loops(_newton_sqrt, (2.0,)) == _unnumbered(_expect("""
        loop %B58 (depth 1): blocks %B58, %B58.endif; latch %B58.endif; exits %B130, %B58.if
          preheader %B0; exiting %B58, %B58.endif
          no induction variable; trip count unknown until exit"""))


# LLVM's form of a loop over two items whose exit it threaded (Numba's loop over a 2-D
# array's dimensions): the test in the middle leaves on a flag the back edge sets.
FLAGGED = """
define void @dims(ptr %p, i1 %c) {
entry:
  br label %head
head:
  %done = phi i1 [ false, %entry ], [ FLAG, %latch ]
  %k = phi i64 [ 0, %entry ], [ 1, %latch ]
  %q = getelementptr i64, ptr %p, i64 %k
  store i64 %k, ptr %q
  br i1 %c, label %fail, label %test
test:
  br i1 %done, label %exit, label %latch
latch:
  br label %head
fail:
  ret void
exit:
  ret void
}
"""


@pytest.mark.parametrize("flag,bounded", [("true", True), ("false", False)])
def test_loop_leaving_on_a_flag_its_back_edge_sets_runs_at_most_twice(flag, bounded):
    fn = _fn(FLAGGED.replace("FLAG", flag))
    (loop,) = analyze_loops(fn).top
    assert loop.latches[-1].name == "latch" and loop.trip_count is None
    assert runs_at_most_twice(loop, dominators(fn)) is bounded


# The same loop after capture inlines the broadcast once it is simplified: a loop nested in it
# passes the flag on through its own header phi, the test is the outer latch's, and the inner
# latch leaves the whole nest on the flag or a shape mismatch.
FLAGGED_NEST = """
define void @dims(ptr %p, i64 %n, i1 %c) {
entry:
  br label %outer
outer:
  %flag.ph = phi i1 [ false, %entry ], [ true, %olatch ]
  %k.ph = phi i64 [ 2, %entry ], [ %n, %olatch ]
  br label %inner
inner:
  %flag = phi i1 [ FLAG, %test ], [ %flag.ph, %outer ]
  %k = phi i64 [ %n, %test ], [ %k.ph, %outer ]
  br i1 %c, label %store, label %test
test:
  %bad = icmp ne i64 %k, 1
  %leave = or i1 %flag, %bad
  br i1 %leave, label %broke, label %inner
store:
  %q = getelementptr i64, ptr %p, i64 %k
  store i64 %k, ptr %q
  br label %olatch
olatch:
  br i1 %flag, label %exit, label %outer
broke:
  ret void
exit:
  ret void
}
"""


@pytest.mark.parametrize("flag,bounded", [("true", True), ("false", False)])
def test_flag_passed_on_through_a_nested_loop_runs_at_most_twice(flag, bounded):
    """Was not seen (the flag is no phi of the outer header), so the loop was checkpointed
    as a time loop and held part of the budget (test_checkpoint_allocations)."""
    fn = _fn(FLAGGED_NEST.replace("FLAG", flag))
    (loop,) = analyze_loops(fn).top
    assert loop.header.name == "outer" and loop.latches[-1].name == "olatch"
    assert runs_at_most_twice(loop, dominators(fn)) is bounded


def test_flag_fed_back_from_the_first_iteration_is_no_bound():
    """The header's flag comes back through a phi that may pass on its own first value
    (false): the loop may go on for ever (%c true), so it is no two-iteration loop."""
    fn = _fn("""
        define void @spin(ptr %p, i1 %c) {
        entry:
          br label %head
        head:
          %h = phi i1 [ false, %entry ], [ %z, %latch ]
          br i1 %c, label %a, label %b
        a:
          br label %test
        b:
          br label %test
        test:
          %z = phi i1 [ %h, %a ], [ true, %b ]
          br i1 %z, label %exit, label %latch
        latch:
          store i8 0, ptr %p
          br label %head
        exit:
          ret void
        }
        """)
    (loop,) = analyze_loops(fn).top
    assert not runs_at_most_twice(loop, dominators(fn))
