"""The memory a parallel loop's launch made before its body ran, as the body's reverse sees it.

The body of a parfor (:mod:`pyzyme.transforms.parallel_body`) reads its arrays from the argument
array its launcher fills, and its shadows from the shadow one; neither can point into what the
body allocates. The split pair of the body (forward function and reverse function) tells LLVM
so (:func:`pyzyme.transforms.alias_scopes.annotate`'s ``outside``): in the reverse function the
arrays and the scratch the body allocated both come back from the tape, and LLVM, which no
longer sees the allocations as fresh, kept every adjoint sum of GMM's triangle loop in memory.
"""

from __future__ import annotations

from pyzyme.analysis.overwrite import underlying_object, underlying_objects
from pyzyme.diff.context import ReverseContext
from pyzyme.ir import instructions as I
from pyzyme.ir.values import Value
from pyzyme.transforms.parallel_body import CARGS

__all__ = ["launch_memory"]


def launch_memory(st: ReverseContext, pointer: Value) -> bool:
    """In the body of a parallel loop: whether ``pointer`` points into memory its launch
    made before the body ran (an array read from the argument array, or its shadow from
    the shadow one; the launcher's ``args``, ``dims``, ``steps``), seen through
    reverse-sweep copies; apart from everything the body allocates."""
    launcher = [st.fwd.args[k] for k in (0, 1, 2, CARGS)]
    launcher += [st.shadow_args[a] for a in (st.old.args[0],) if a in st.shadow_args]
    objects = underlying_objects(pointer)
    seen = [_seen_through(st, obj) for obj in objects or ()]
    return bool(seen) and all(obj in launcher or (
        isinstance(obj, I.Load)
        and _seen_through(st, underlying_object(obj.pointer)) in launcher)
        for obj in seen)


def _seen_through(st: ReverseContext, value: Value) -> Value:
    """``value`` of the reverse function as the forward function has it."""
    for _ in range(64):
        if st.rev_origin.get(value) is None:
            return value
        value = underlying_object(st.rev_origin[value])
    return value
