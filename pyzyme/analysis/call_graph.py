"""Who calls whom in a module, and which functions (or blocks) lie on cycles.

Recursion changes what a derivative must do at run time: its native frames can run out of
stack (:mod:`pyzyme.diff.side_stack` runs it on a stack of its own), and every call keeps a
tape of its own until the reverse sweep, millions of them for a recursion that branches
(:mod:`pyzyme.diff.tape.cache` takes them from the tape allocator). Both ask the same
question of the call graph, answered here.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @f(i64 %n) {
...   call void @g(i64 %n)
...   ret void
... }
... define void @g(i64 %n) {
...   call void @f(i64 %n)
...   ret void
... }
... define void @h() {
...   call void @f(i64 1)
...   ret void
... }''')
>>> sorted(fn.name for fn in on_cycles(call_graph(m)))
['f', 'g']
"""

from __future__ import annotations

from pyzyme.ir import instructions as I

__all__ = ["call_graph", "on_cycles"]


def call_graph(module) -> dict:
    """Each defined function of ``module`` -> the defined functions it calls directly."""
    graph = {}
    for fn in module.functions:
        if fn.is_declaration:
            continue
        out = set()
        for inst in fn.instructions():
            if isinstance(inst, I.CallBase):
                callee = inst.called_function
                if callee is not None and not callee.is_declaration:
                    out.add(callee)
        graph[fn] = out
    return graph


def on_cycles(graph: dict) -> set:
    """The nodes of ``graph`` (node -> successors) that lie on a cycle: Tarjan's strongly
    connected components, iteratively (a deep call graph or CFG cannot exhaust Python's
    stack)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), set()
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(graph[root]))]
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while not component or component[-1] is not node:
                    component.append(stack.pop())
                    on_stack.discard(component[-1])
                if len(component) > 1 or node in graph[node]:
                    found.update(component)
    return found
