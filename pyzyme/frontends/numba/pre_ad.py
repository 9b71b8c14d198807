"""The captured function made ready for differentiation, the same way in either mode.

When the caller found that no two arrays passed share memory, the data pointers of the array
arguments are marked ``noalias`` (what LLVM needs to keep values in registers and vectorize;
jitclass data is left alone, it may be reached through its instance too); then the function
gets the loop rewrites every function gets (:mod:`pyzyme.transforms.loop_rewrites`: negative
indices' wrap-around folded, given the array shapes the ABI says the parameters carry; integer
powers; loops skipping one index; nests interchanged where the arrays are apart; row strides
versioned). Every function of the module, callees too, has the signed zero Python's ``x % y``
gives for a zero remainder passed through ``@pyzyme.zero_remainder``, which gives it the
remainder's derivative (:mod:`pyzyme.transforms.zero_remainder`).
"""

from __future__ import annotations

from numba.core import types

from pyzyme.transforms import zero_remainder
from pyzyme.transforms.view_bases import rebase_views
from pyzyme.transforms.loop_rewrites import rewrite_loops

__all__ = ["ready"]


def ready(module, native, abi, distinct: bool, options, *, reverse: bool = True) -> None:
    """Rewrite ``native`` (of ``module``, described by ``abi``) in place for differentiation
    (in reverse mode, or forward mode where not ``reverse``) under ``options``
    (:class:`~pyzyme.settings.Options`: ``split_loops``, ``interchange_loops``,
    ``version_strides``); ``distinct``: the arrays of the call do not overlap."""
    if distinct:
        for arg in abi.args:
            for p in arg.params:
                if p.field.endswith(".data") and isinstance(p.numba_type, types.CPointer) \
                        and not isinstance(p.numba_type.dtype, types.ClassDataType):
                    a = native.args[p.index]
                    a.attrs = " ".join([*a.attrs.split(), "noalias"])
    for fn in list(module.functions):
        if not fn.is_declaration:
            zero_remainder.fold(module, fn)
            if reverse and options.rebase_views:
                rebase_views(module, fn)
    shapes = [native.args[p.index] for arg in abi.args for p in arg.params
              if ".shape[" in p.field]
    rewrite_loops(module, native, options, reverse=reverse, interchange_ok=distinct,
                  nonnegative=shapes)
