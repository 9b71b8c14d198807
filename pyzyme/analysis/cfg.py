"""Control-flow graph facts: reverse post-order, dominator and post-dominator trees.

Only blocks reachable from the entry take part: unreachable code has no dominators and no
derivative code.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''define void @f(i1 %c) {
... entry:
...   br i1 %c, label %a, label %b
... dead:
...   br label %a
... a:
...   br label %b
... b:
...   ret void
... }''')
>>> f = m.get_function("f")
>>> [b.name for b in reverse_post_order(f)]
['entry', 'a', 'b']
>>> print(dominators(f))
dominator tree of @f
  %entry
    %a
    %b
>>> print(post_dominators(f))
post-dominator tree of @f
  <exit>
    %b
      %entry
      %a
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from pyzyme.ir.opcodes import EXITS  # terminators that leave the function
from pyzyme.progress import timed

__all__ = ["DominatorTree", "block_label", "dominators", "post_dominators", "error_only_blocks",
           "reverse_post_order", "reachable_from", "exit_blocks"]


def block_label(block) -> str:
    """How a block is named in printed analysis results: ``%name``, or ``%<index>`` if unnamed."""
    if block is None:
        return "<exit>"
    if block.name:
        return block.ref
    fn = block.parent
    index = fn.blocks.index(block) if fn is not None and block in fn.blocks else -1
    return f"%<block {index}>"


def reverse_post_order(fn) -> list:
    """The blocks reachable from the entry, each after all its dominators."""
    if not fn.blocks:
        return []
    return _rpo(fn.blocks[0], lambda b: b.successors)


def reachable_from(block) -> set:
    """The blocks a path of one edge or more leads to from ``block`` (``block`` itself only
    where it is on a cycle)."""
    return {b for succ in block.successors for b in _rpo(succ, lambda b: b.successors)}


def _rpo(root: Hashable, succs: Callable[[Hashable], Iterable]) -> list:
    """Reverse post-order of the nodes reachable from ``root`` along ``succs``."""
    order: list = []
    seen = {root}
    # Iterative DFS: (node, iterator over its successors), so deep CFGs cannot hit recursion limits.
    stack = [(root, iter(succs(root)))]
    while stack:
        node, it = stack[-1]
        for succ in it:
            if succ not in seen:
                seen.add(succ)
                stack.append((succ, iter(succs(succ))))
                break
        else:
            stack.pop()
            order.append(node)
    order.reverse()
    return order


def exit_blocks(fn) -> list:
    """Reachable blocks that leave the function (``ret``, ``unreachable``, ``resume``)."""
    return [b for b in reverse_post_order(fn)
            if b.terminator is not None and b.terminator.opcode in EXITS]


@dataclass
class DominatorTree:
    """Immediate (post-)dominators of the reachable blocks of ``function``.

    ``idom[b]`` is the immediate dominator of ``b``; it is ``None`` for the entry of a dominator
    tree, and for the blocks immediately post-dominated by the virtual exit in a post-dominator
    tree. ``order`` lists the blocks in reverse post-order of the graph the tree was computed on
    (the CFG, or the reversed CFG from the virtual exit). ``preds`` gives each block's
    predecessors in that graph (``None`` stands for the virtual exit).
    """

    function: object
    post: bool
    idom: dict = field(default_factory=dict)
    order: list = field(default_factory=list)
    preds: dict = field(default_factory=dict)

    def __contains__(self, block) -> bool:
        return block in self.idom

    def dominates(self, a, b) -> bool:
        """Whether every path from the root to ``b`` goes through ``a`` (``a`` may equal ``b``).

        ``a = None`` is the virtual root, which dominates everything in the tree.
        """
        if b not in self.idom:
            return False
        if a is None:
            return True
        node = b
        while node is not None:
            if node is a:
                return True
            node = self.idom[node]
        return False

    def strictly_dominates(self, a, b) -> bool:
        return a is not b and self.dominates(a, b)

    def children(self, block) -> list:
        """Blocks whose immediate dominator is ``block`` (``None``: the tree's roots).

        They come in the order of the function's block list, so printed trees read like the IR.
        """
        position = {b: i for i, b in enumerate(self.function.blocks)}
        return sorted((b for b in self.order if self.idom[b] is block), key=position.__getitem__)

    def roots(self) -> list:
        return self.children(None)

    def frontier(self) -> dict:
        """The dominance frontier of each block (Cooper-Harvey-Kennedy's two-finger walk).

        For a post-dominator tree this is the post-dominance frontier: the branches a block is
        control-dependent on. Keys come in the function's block order.
        """
        df: dict = {b: [] for b in self.function.blocks if b in self.idom}
        for b in self.order:
            preds = [p for p in self.preds[b] if p is None or p in self.idom]
            if len(preds) < 2:
                continue
            for p in preds:
                runner = p
                while runner is not None and runner is not self.idom[b]:
                    if b not in df[runner]:
                        df[runner].append(b)
                    runner = self.idom[runner]
        return df

    def __str__(self) -> str:
        kind = "post-dominator" if self.post else "dominator"
        lines = [f"{kind} tree of {self.function.ref}"]

        def walk(block, depth: int) -> None:
            for child in self.children(block):
                lines.append("  " * depth + block_label(child))
                walk(child, depth + 1)

        if self.post:
            lines.append("  <exit>")
            walk(None, 2)
        else:
            walk(None, 1)
        return "\n".join(lines)


def _idoms(nodes: list, preds: dict) -> dict:
    """Cooper, Harvey and Kennedy, "A Simple, Fast Dominance Algorithm" (2001).

    ``nodes`` is in reverse post-order with the root first; ``preds`` maps each node to its
    predecessors. Returns the immediate dominator of each node (the root maps to itself).
    """
    index = {n: i for i, n in enumerate(nodes)}
    root = nodes[0]
    idom = {root: root}

    def intersect(a, b):
        # Walk the two fingers up the tree, by post-order number, until they meet.
        while a is not b:
            while index[a] > index[b]:
                a = idom[a]
            while index[b] > index[a]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for n in nodes[1:]:
            # The root may be None (the virtual exit), so "no candidate yet" is a flag.
            found, new = False, None
            for p in preds[n]:
                if p in idom:
                    new = intersect(p, new) if found else p
                    found = True
            if found and (n not in idom or idom[n] is not new):
                idom[n] = new
                changed = True
    return idom


@timed("analyses")
def dominators(fn) -> DominatorTree:
    """The dominator tree of the blocks of ``fn`` reachable from its entry."""
    order = reverse_post_order(fn)
    tree = DominatorTree(fn, post=False, order=order)
    if not order:
        return tree
    live = set(order)
    tree.preds = {b: [p for p in b.predecessors if p in live] for b in order}
    idom = _idoms(order, tree.preds)
    tree.idom = {b: (None if b is order[0] else idom[b]) for b in order}
    return tree


@timed("analyses")
def post_dominators(fn) -> DominatorTree:
    """The post-dominator tree of the reachable blocks of ``fn``, rooted at a virtual exit.

    The virtual exit (``None``) succeeds every block ending in ``ret``, ``unreachable`` or
    ``resume``, so functions with several returns have one tree. Blocks that reach no exit
    (infinite loops) would be left out; as LLVM does, each such region gets an extra edge to the
    virtual exit from one of its blocks — the last one in reverse post-order, which for a loop is
    its latch — so that every reachable block is in the tree.

    Examples
    --------
    >>> from pyzyme.ir import parse_module
    >>> m = parse_module('''define void @spin(i1 %c) {
    ... entry:
    ...   br i1 %c, label %loop, label %done
    ... loop:
    ...   br label %loop
    ... done:
    ...   ret void
    ... }''')
    >>> print(post_dominators(m.get_function("spin")))
    post-dominator tree of @spin
      <exit>
        %entry
        %loop
        %done
    """
    order = reverse_post_order(fn)
    tree = DominatorTree(fn, post=True)
    if not order:
        return tree
    live = set(order)
    # Reverse-CFG successors (= forward predecessors) of every node; the virtual exit is None.
    rsuccs: dict = {b: [p for p in b.predecessors if p in live] for b in order}
    exits = [b for b in order
             if b.terminator is not None and b.terminator.opcode in EXITS]
    rsuccs[None] = list(exits)
    reached = set(_rpo(None, rsuccs.__getitem__))
    # Infinite loops: connect the last unreached block (in RPO) until every block is reached.
    for b in reversed(order):
        if b not in reached:
            rsuccs[None].append(b)
            reached.update(_rpo(b, rsuccs.__getitem__))
    nodes = _rpo(None, rsuccs.__getitem__)
    # Predecessors in the reverse CFG are the forward successors (plus the virtual exit).
    rpreds: dict = {n: [] for n in nodes}
    for n in nodes:
        for s in rsuccs[n]:
            if n not in rpreds[s]:
                rpreds[s].append(n)
    idom = _idoms(nodes, rpreds)
    tree.order = nodes[1:]
    tree.preds = rpreds
    tree.idom = {b: idom[b] for b in nodes[1:]}
    return tree


def error_only_blocks(fn, status_return: bool) -> set:
    """Blocks from which every path ends in an error: a ``ret`` of a nonzero constant status
    (``status_return``: Numba's convention, 0 is success), directly or through the phi of a
    shared return block, or an ``unreachable``. A derivative never runs its reverse sweep after
    an error, so such blocks need no derivative code.

    Examples
    --------
    >>> from pyzyme.ir import parse_module
    >>> m = parse_module('''define i32 @f(i1 %c) {
    ... entry:
    ...   br i1 %c, label %bad, label %good
    ... bad:
    ...   br label %done
    ... good:
    ...   br label %done
    ... done:
    ...   %s = phi i32 [ 1, %bad ], [ 0, %good ]
    ...   ret i32 %s
    ... }''')
    >>> sorted(b.name for b in error_only_blocks(m.get_function("f"), True))
    ['bad']
    """
    from pyzyme.ir import instructions as I

    order = reverse_post_order(fn)
    normal: set = set()
    work = []

    def failing(value) -> bool:
        return status_return and isinstance(getattr(value, "value", None), int) and \
            value.value != 0 and value.type.is_int

    for block in order:
        term = block.terminator
        if not isinstance(term, I.Ret):
            continue
        value = term.value
        if isinstance(value, I.Phi) and value.parent is block:
            # A shared return: each edge into it says whether it fails.
            work += [pred for v, pred in zip(value.operands, value.blocks) if not failing(v)]
            normal.add(block)
        elif value is None or not failing(value):
            work.append(block)
    preds: dict = {b: [] for b in order}
    for b in order:
        for s in b.successors:
            if s in preds:
                preds[s].append(b)
    while work:
        b = work.pop()
        if b in normal or b not in preds:
            continue
        normal.add(b)
        work.extend(preds[b])
    return {b for b in order if b not in normal and not isinstance(b.terminator, I.Ret)}
