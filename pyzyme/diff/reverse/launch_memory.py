"""The memory a parallel loop's launch made before its body ran, as the body's reverse sees it.

The body of a parfor (:mod:`pyzyme.transforms.parallel_body`) reads its arrays from the argument
array its launcher fills, and its shadows from the shadow one; neither can point into what the
body allocates. The split pair of the body (forward function and reverse function) tells LLVM
so (:func:`pyzyme.transforms.alias_scopes.annotate`'s ``outside``): in the reverse function the
arrays and the scratch the body allocated both come back from the tape, and LLVM, which no
longer sees the allocations as fresh, kept every adjoint sum of GMM's triangle loop in memory.

Where the launch keeps shadows apart from primal memory (:class:`~pyzyme.diff.signature.
ParallelBody`'s ``apart``), the side each access is on says more (:func:`launch_side`): adds
into a shadow do not change the arrays the body reads, so LLVM keeps loop-invariant primal
loads (GMM's ``x[i] - means[k, i]``, an array's extent checked for a negative index) out of
the inner loops of the reverse, instead of loading them again after every add.
"""

from __future__ import annotations

from pyzyme.analysis.overwrite import underlying_object, underlying_objects
from pyzyme.diff.context import ReverseContext
from pyzyme.ir import instructions as I
from pyzyme.ir.values import Value
from pyzyme.transforms.parallel_body import CARGS

__all__ = ["launch_memory", "launch_side", "PRIMAL", "SHADOW"]

#: :func:`launch_side`'s answers: memory of the launch's arguments, or of their shadows.
PRIMAL, SHADOW = "launch arrays", "launch shadows"


def launch_memory(st: ReverseContext, pointer: Value) -> bool:
    """In the body of a parallel loop: whether ``pointer`` points into memory its launch
    made before the body ran (an array read from the argument array, or its shadow from
    the shadow one; the launcher's ``args``, ``dims``, ``steps``), seen through
    reverse-sweep copies; apart from everything the body allocates."""
    return _launch_roots(st, pointer) is not None


def launch_side(st: ReverseContext, pointer: Value) -> str | bool:
    """:func:`launch_memory`, told apart where the launch keeps shadows apart from primal
    memory: :data:`PRIMAL` where ``pointer`` points into what the argument array (or
    ``dims``, ``steps``, the inactive slots) hold, :data:`SHADOW` into what the shadow
    argument array holds; True where it is launch memory of either or both; False where it
    is not launch memory."""
    roots = _launch_roots(st, pointer)
    if roots is None:
        return False
    body = st.sig.parallel_body
    if body is None or not body.apart or st.runtime:
        return True
    shadows = _shadow_args(st)
    sides = {SHADOW if root in shadows else PRIMAL for root in roots}
    return sides.pop() if len(sides) == 1 else True


def _shadow_args(st: ReverseContext) -> list:
    return [st.shadow_args[a] for a in (st.old.args[0],) if a in st.shadow_args]


def _launch_roots(st: ReverseContext, pointer: Value) -> list | None:
    """The launcher's arrays (``args``, ``dims``, ``steps``, ``cargs``, the shadow ``args``)
    that the objects under ``pointer`` are, or were loaded from; None where one is neither."""
    launcher = [st.fwd.args[k] for k in (0, 1, 2, CARGS)] + _shadow_args(st)
    roots = []
    for obj in underlying_objects(pointer) or ():
        obj = _seen_through(st, obj)
        if obj not in launcher and isinstance(obj, I.Load):
            obj = _seen_through(st, underlying_object(obj.pointer))
        if obj not in launcher:
            return None
        roots.append(obj)
    return roots or None


def _seen_through(st: ReverseContext, value: Value) -> Value:
    """``value`` of the reverse function as the forward function has it."""
    for _ in range(64):
        if st.rev_origin.get(value) is None:
            return value
        value = underlying_object(st.rev_origin[value])
    return value
