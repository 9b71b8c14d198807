"""Control-flow graph facts: reachable blocks in reverse post-order.

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
>>> [b.name for b in reverse_post_order(m.get_function("f"))]
['entry', 'a', 'b']
"""

from __future__ import annotations

__all__ = ["reverse_post_order"]


def reverse_post_order(fn) -> list:
    """The blocks reachable from the entry, each after all its dominators."""
    if not fn.blocks:
        return []
    order: list = []
    seen = {fn.blocks[0]}
    # Iterative DFS: (block, iterator over its successors).
    stack = [(fn.blocks[0], iter(fn.blocks[0].successors))]
    while stack:
        block, succs = stack[-1]
        for succ in succs:
            if succ not in seen:
                seen.add(succ)
                stack.append((succ, iter(succ.successors)))
                break
        else:
            stack.pop()
            order.append(block)
    order.reverse()
    return order
