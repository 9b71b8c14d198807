"""The captured function made ready for differentiation, the same way in either mode.

Five rewrites of the captured ``native`` function, before any derivative exists:

- Numba's wrap-around of negative indices is folded where the index cannot be negative
  (:mod:`pyzyme.frontends.numba.wraparound`);
- Numba's binary-exponentiation loops for ``x ** i`` become calls of a function with a
  derivative rule, which the reverse sweep recomputes instead of taping every squaring
  (:mod:`pyzyme.transforms.int_power`);
- when the caller found that no two arrays passed share memory, the data pointers of the
  array arguments are marked ``noalias`` (what LLVM needs to keep values in registers and
  vectorize; jitclass data is left alone, it may be reached through its instance too);
- loops that skip one index (``for j: if j != i: ...``) become two loops without the test
  (:mod:`pyzyme.transforms.index_split`), whose derivatives vectorize;
- then, if asked, nests that keep a sum in a register over an inner loop striding through
  memory are interchanged (:mod:`pyzyme.transforms.interchange`, which needs those ``noalias``);
- last, if asked, the function gets a second version in which the row length of a 2-D array
  its loops read a few columns at a time is a constant (:mod:`pyzyme.transforms.stride_versions`:
  the one its derivative's loops vectorize in), after the interchange so that the nests are
  analysed once and copied as they end up.
"""

from __future__ import annotations

from numba.core import types

from pyzyme.transforms import index_split, int_power
from pyzyme.transforms.interchange import interchange
from pyzyme.transforms.stride_versions import version_strides
from pyzyme.frontends.numba.wraparound import fold_wraparound, shape_params

__all__ = ["ready"]


def ready(module, native, abi, distinct: bool, options, *, reverse: bool = True) -> None:
    """Rewrite ``native`` (of ``module``, described by ``abi``) in place for differentiation
    (in reverse mode, or forward mode where not ``reverse``) under ``options``
    (:class:`~pyzyme.settings.Options`: ``split_loops``, ``interchange_loops``,
    ``version_strides``); ``distinct``: the arrays of the call do not overlap."""
    fold_wraparound(native, shape_params(native, abi))
    int_power.fold(module, native)
    if options.split_loops:
        index_split.split(native)
    if distinct:
        for arg in abi.args:
            for p in arg.params:
                if p.field.endswith(".data") and isinstance(p.numba_type, types.CPointer) \
                        and not isinstance(p.numba_type.dtype, types.ClassDataType):
                    a = native.args[p.index]
                    a.attrs = " ".join([*a.attrs.split(), "noalias"])
        if options.interchange_loops:
            interchange(native)
    if options.version_strides:
        version_strides(native, reverse=reverse)
