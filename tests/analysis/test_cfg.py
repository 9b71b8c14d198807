"""Dominator and post-dominator trees of hand-written CFGs, checked by their printed form."""

from __future__ import annotations

import textwrap

from pyzyme import ir
from pyzyme.analysis.cfg import dominators, exit_blocks, post_dominators, reverse_post_order


def _fn(text: str):
    return ir.parse_module(textwrap.dedent(text)).functions[0]


def _names(blocks) -> list[str]:
    return [b.name if b is not None else "<exit>" for b in blocks]


def _frontier(tree) -> str:
    return "; ".join(f"{b.name}: {','.join(_names(df))}" for b, df in tree.frontier().items())


DIAMOND = """
define double @diamond(i1 %c, double %x) {
entry:
  br i1 %c, label %then, label %else
then:
  %a = fmul double %x, %x
  br label %join
else:
  %b = fadd double %x, %x
  br label %join
join:
  %r = phi double [ %a, %then ], [ %b, %else ]
  ret double %r
}
"""


def test_diamond():
    f = _fn(DIAMOND)
    doms = dominators(f)
    assert str(doms) == textwrap.dedent("""\
        dominator tree of @diamond
          %entry
            %then
            %else
            %join""")
    assert str(post_dominators(f)) == textwrap.dedent("""\
        post-dominator tree of @diamond
          <exit>
            %join
              %entry
              %then
              %else""")
    entry, then, other, join = f.blocks
    assert doms.dominates(entry, join) and doms.dominates(join, join)
    assert not doms.dominates(then, join) and not doms.strictly_dominates(join, join)
    assert _names(doms.children(entry)) == ["then", "else", "join"]
    assert _frontier(doms) == "entry: ; then: join; else: join; join: "
    # Post-dominance frontier = control dependence: both arms depend on the entry's branch.
    assert _frontier(post_dominators(f)) == "entry: ; then: entry; else: entry; join: "


def test_switch():
    f = _fn("""
        define i32 @sw(i32 %k) {
        entry:
          switch i32 %k, label %other [ i32 0, label %zero
                                        i32 1, label %one
                                        i32 2, label %one ]
        zero:
          br label %join
        one:
          br label %join
        other:
          br label %join
        join:
          %r = phi i32 [ 10, %zero ], [ 11, %one ], [ 12, %other ]
          ret i32 %r
        }""")
    assert str(dominators(f)) == textwrap.dedent("""\
        dominator tree of @sw
          %entry
            %zero
            %one
            %other
            %join""")
    assert str(post_dominators(f)) == textwrap.dedent("""\
        post-dominator tree of @sw
          <exit>
            %join
              %entry
              %zero
              %one
              %other""")


def test_multiple_returns_and_unreachable_blocks():
    f = _fn("""
        define i32 @two(i1 %c, i1 %d) {
        entry:
          br i1 %c, label %early, label %more
        early:
          ret i32 0
        more:
          br i1 %d, label %late, label %trap
        late:
          ret i32 1
        trap:
          unreachable
        dead:
          br label %late
        }""")
    assert _names(reverse_post_order(f)) == ["entry", "more", "trap", "late", "early"]
    assert _names(exit_blocks(f)) == ["entry", "more", "trap", "late", "early"][2:]
    assert str(dominators(f)) == textwrap.dedent("""\
        dominator tree of @two
          %entry
            %early
            %more
              %late
              %trap""")
    # No block but the virtual exit post-dominates the entry: its paths end in three places.
    assert str(post_dominators(f)) == textwrap.dedent("""\
        post-dominator tree of @two
          <exit>
            %entry
            %early
            %more
            %late
            %trap""")
    assert "dead" not in _names(dominators(f).order)


def test_nested_loops_dominators():
    f = _fn("""
        define void @nest(i64 %n) {
        entry:
          br label %outer
        outer:
          %i = phi i64 [ 0, %entry ], [ %i.next, %outer.latch ]
          br label %inner
        inner:
          %j = phi i64 [ 0, %outer ], [ %j.next, %inner ]
          %j.next = add i64 %j, 1
          %jd = icmp eq i64 %j.next, %n
          br i1 %jd, label %outer.latch, label %inner
        outer.latch:
          %i.next = add i64 %i, 1
          %id = icmp eq i64 %i.next, %n
          br i1 %id, label %exit, label %outer
        exit:
          ret void
        }""")
    assert str(dominators(f)) == textwrap.dedent("""\
        dominator tree of @nest
          %entry
            %outer
              %inner
                %outer.latch
                  %exit""")
    assert str(post_dominators(f)) == textwrap.dedent("""\
        post-dominator tree of @nest
          <exit>
            %exit
              %outer.latch
                %inner
                  %outer
                    %entry""")


def test_infinite_loop_joins_the_virtual_exit():
    f = _fn("""
        define void @spin(i1 %c) {
        entry:
          br i1 %c, label %head, label %done
        head:
          br label %body
        body:
          br label %head
        done:
          ret void
        }""")
    # %body (the loop's latch, last in reverse post-order) stands in for the missing exit.
    assert str(post_dominators(f)) == textwrap.dedent("""\
        post-dominator tree of @spin
          <exit>
            %entry
            %body
              %head
            %done""")


def test_empty_declaration():
    f = ir.parse_module("declare void @g()").functions[0]
    assert str(dominators(f)) == "dominator tree of @g"
    assert str(post_dominators(f)) == "post-dominator tree of @g\n  <exit>"
