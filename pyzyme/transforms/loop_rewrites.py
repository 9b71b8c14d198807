"""The loop rewrites every function gets before differentiation, in one order: a captured
function (:mod:`pyzyme.frontends.numba.pre_ad`, which adds Numba's own around them) and the
body of each parallel loop, which Numba compiles apart from the function that launches it
(:mod:`pyzyme.diff.parallel.launch`), so that the function's own rewrites never see it.

0. Numba's wrap-around of negative indices (``a[j + (n if j < 0 else 0)]``) folded where the
   index cannot be negative, given values known non-negative (``nonnegative``: shapes, sizes)
   (:mod:`pyzyme.transforms.wraparound`), and its broadcasting indices in array expressions
   (``k = i if shape > 1 else k``) made values of the loop index the reverse sweep recomputes
   (:mod:`pyzyme.transforms.broadcast_index`);
1. integer powers: Numba's binary-exponentiation loops for ``x ** i`` become calls of a
   function with a derivative rule, which the reverse sweep recomputes instead of taping every
   squaring (:mod:`pyzyme.transforms.int_power`);
2. loops that skip one index (``for j: if j != i: ...``) become two loops without the test,
   whose derivatives vectorize (:mod:`pyzyme.transforms.index_split`, ``split_loops``);
3. where the arrays are known apart (``interchange``: their pointers ``noalias``), nests that
   keep a sum in a register over an inner loop striding through memory are interchanged
   (:mod:`pyzyme.transforms.interchange`, ``interchange_loops``);
4. last, the function gets a second version in which the row length of a 2-D array its loops
   read a few columns at a time is a constant (:mod:`pyzyme.transforms.stride_versions`,
   ``version_strides``), after the others so that the loops are analysed once and copied as
   they end up.

Each is a no-op on a function it has rewritten already (a parallel loop's body is prepared
once per launch that reaches it).
"""

from __future__ import annotations

from pyzyme.transforms import index_split, int_power
from pyzyme.transforms.broadcast_index import fold_broadcast_indices
from pyzyme.transforms.wraparound import fold_wraparound
from pyzyme.transforms.interchange import interchange
from pyzyme.transforms.stride_versions import version_strides

__all__ = ["rewrite_loops"]


def rewrite_loops(module, fn, options, *, reverse: bool, interchange_ok: bool,
                  nonnegative=()) -> None:
    """Apply the rewrites above to ``fn`` (of ``module``) in place, as ``options``
    (:class:`~pyzyme.settings.Options`) asks, for a derivative in reverse mode (or forward
    mode, where not ``reverse``: stride versions only for rows ``fn`` writes)."""
    fold_wraparound(fn, nonnegative)
    fold_broadcast_indices(fn)
    int_power.fold(module, fn)
    if options.split_loops:
        index_split.split(fn)
    if interchange_ok and options.interchange_loops:
        interchange(fn)
    if options.version_strides:
        version_strides(fn, reverse=reverse)
