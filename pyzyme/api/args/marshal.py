"""Arguments as a compiled derivative takes them: each annotated argument becomes the primal,
its shadows and its Numba type, checked on the way in and copied back on the way out.

Forward mode (:class:`ForwardArg`) gives each array shadow the primal's layout (same shape,
dtype and strides; a shadow laid out otherwise is copied into one that is, and back after the
call); reverse mode (:class:`ReverseArg`) does the same for ``Duplicated`` arguments and turns
an ``Active`` argument into the value whose adjoint comes back. :func:`distinct` says whether
the call's arrays may be ``noalias``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pyzyme.analysis.activity import Activity
from pyzyme.api import annotations as A
from pyzyme.api.args import complex as C
from pyzyme.api.args import refusals as R
from pyzyme.api.args import structured as S
from pyzyme.api.args.call_shape import share_memory
from pyzyme.api.args.typeof import argument_type
from pyzyme.errors import (
    ArgumentName,
    ArgumentTypeError,
    ArgumentValueError,
    UnsupportedError,
)

__all__ = ["ForwardArg", "ReverseArg", "distinct", "batch_width", "zeros_laid_out_like"]


def distinct(calls) -> bool:
    """Whether no two arrays the arguments ``calls`` reach (primals and shadows, inside
    tuples, records and jitclass instances too) share memory: then array data can be
    ``noalias``."""
    return not share_memory([a for c in calls for v in (c.primal, *c.shadows)
                             for a in S.reachable_arrays(v) if a.size])


class ReverseArg:
    """One argument (at ``position``) as the reverse derivative takes it; ``names``: the
    function's parameter names (or a callable giving them), for messages."""

    def __init__(self, ann: A.Annotation, views: dict, position: int, names=None) -> None:
        value = ann.val
        where = ArgumentName(names, position)
        R.check_passable(value, where)
        if isinstance(ann, A.Const):
            self.kind, self.primal, self.shadows, self._fwd = Activity.CONST, value, (), None
        elif isinstance(ann, A.Active):
            if S.all_real(value):
                self.primal = S.active_tuple(value)
            elif S.is_real(value):
                self.primal = value if isinstance(value, np.float32) else float(value)
            elif C.is_complex(value):
                self.primal = value
            else:
                raise R.active_not_immutable(where, type(value).__name__,
                                             isinstance(value, np.ndarray))
            self.kind, self.shadows, self._fwd = Activity.ACTIVE, (), None
        elif isinstance(ann, A.Duplicated):
            if not (isinstance(value, np.ndarray) or S.is_structured(value)):
                raise UnsupportedError(
                    f"Duplicated({type(value).__name__}) in reverse mode: a float cannot hold "
                    f"its adjoint; pass it as Active")
            if S.has_float_leaf(value):
                raise UnsupportedError(
                    "Duplicated(tuple) in reverse mode: the tuple holds floats, passed by "
                    "value, which cannot receive their adjoints; pass the tuple as Active (its "
                    "arrays then get fresh shadows, given back in its derivative)")
            if R.has_read_only_part(ann.dval):
                raise R.read_only_shadow(where, "reverse")
            self._fwd = ForwardArg(ann, views, position, names)
            self.kind, self.primal, self.shadows = Activity.DUPLICATED, value, self._fwd.shadows
        else:
            raise UnsupportedError(f"{type(ann).__name__} is not a reverse-mode activity")
        self.numba_type = self._fwd.numba_type if self._fwd is not None else \
            argument_type(self.primal)

    def copy_back(self) -> None:
        if self._fwd is not None:
            self._fwd.copy_back()


def batch_width(anns: Sequence[A.Annotation], ret_activity) -> int:
    """The number of shadows each differentiated argument of a forward-mode call carries
    (``BatchDuplicated``: its width; else 1), refusing annotations that do not fit."""
    for a in anns:
        if isinstance(a, A.Active):
            raise UnsupportedError(f"Active({a.val!r}) is for reverse mode; in forward mode "
                                   f"pass Duplicated(value, tangent)")
    widths = {len(a.shadows) for a in anns if isinstance(a, A.BatchDuplicated)}
    if len(widths) > 1:
        raise ArgumentValueError(f"all BatchDuplicated arguments of one call need the same "
                                 f"number of shadows; got widths {sorted(widths)}")
    width = widths.pop() if widths else 1
    single = [a for a in anns if isinstance(a, A.Duplicated)]
    if widths or any(isinstance(a, A.BatchDuplicated) for a in anns):
        if single and width > 1:
            raise ArgumentTypeError(
                f"Duplicated arguments (one shadow) cannot be mixed with BatchDuplicated ones "
                f"({width} shadows): give every differentiated argument {width} shadows")
        if ret_activity in (A.Duplicated, A.DuplicatedNoNeed) and width > 1:
            raise ArgumentTypeError(f"the arguments carry {width} shadows each, so the result "
                                    f"has {width} tangents: use BatchDuplicated or "
                                    f"BatchDuplicatedNoNeed as the return activity")
    return width


class ForwardArg:
    """One argument (at ``position``) as the compiled derivative takes it: the primal, its
    shadows laid out exactly like it (same shape, dtype and strides), and how to return
    tangents to the user. ``read_only``: a shadow is (or holds) a read-only array, which the
    derivative may only read. ``names``: the function's parameter names (or a callable
    giving them), for messages."""

    def __init__(self, ann: A.Annotation, views: dict, position: int, names=None) -> None:
        self.annotation = ann
        self._copies: list[tuple[np.ndarray, np.ndarray]] = []
        self._views = views
        self._where = where = ArgumentName(names, position)
        value = ann.val
        R.check_passable(value, where)
        self.read_only = any(R.has_read_only_part(s) for s in ann.shadows)
        if isinstance(ann, A.Const):
            self.primal, self.shadows = value, ()
        elif isinstance(value, np.ndarray):
            self.primal = value
            self.shadows = tuple(self._array_shadow(value, s, i)
                                 for i, s in enumerate(ann.shadows))
        elif S.is_real(value):
            self.primal = float(value)
            self.shadows = tuple(_real_shadow(s, self._shadow_of(i))
                                 for i, s in enumerate(ann.shadows))
        elif C.is_complex(value):
            self.primal = value
            self.shadows = tuple(C.complex_shadow(value, s) for s in ann.shadows)
        elif S.all_real(value):
            self.primal = S.active_tuple(value)
            self.shadows = tuple(S.rebuild_like(value, _tuple_shadow(s, len(value),
                                                                     self._shadow_of(i)))
                                 for i, s in enumerate(ann.shadows))
        elif S.is_structured(value):
            self.primal = value
            self.shadows = tuple(
                S.shadow_of(value, s, lambda x, dx, i=i: self._array_shadow(x, dx, i),
                            self._where)
                for i, s in enumerate(ann.shadows))
        else:
            raise UnsupportedError(
                f"{type(ann).__name__} of a {type(value).__name__} is not supported in forward "
                f"mode yet; pass floats or NumPy arrays")
        self.numba_type = argument_type(self.primal)

    def _shadow_of(self, lane: int) -> str:
        """How messages name shadow ``lane`` of this argument."""
        batch = isinstance(self.annotation, A.BatchDuplicated)
        return f"shadow {lane} of {self._where}" if batch else f"the shadow of {self._where}"

    def _array_shadow(self, x: np.ndarray, dx, lane: int) -> np.ndarray:
        if not isinstance(dx, np.ndarray):
            raise ArgumentTypeError(f"{self._shadow_of(lane)} must be an array like its "
                                    f"primal, not {type(dx).__name__}")
        if dx.shape != x.shape or dx.dtype != x.dtype:
            raise ArgumentValueError(f"{self._shadow_of(lane)} has shape {dx.shape} and dtype "
                                     f"{dx.dtype}; the primal has shape {x.shape} and dtype "
                                     f"{x.dtype}", hint="pass np.zeros_like(x)")
        if dx.size and np.may_share_memory(x, dx):
            raise ArgumentValueError(f"{self._shadow_of(lane)} shares memory with its primal "
                                     f"array: tangents would overwrite the values they are "
                                     f"tangents of; pass a separate array (np.zeros_like(x))")
        if dx.strides == x.strides and dx.flags.writeable and dx.flags.aligned:
            return dx
        # Shadow addresses are computed like primal ones, so the shadow needs the primal's
        # strides: a buffer spanning the same extent, viewed with the same strides. One such
        # view serves every argument given this same pair of arrays.
        key = (id(x), id(dx))
        if key in self._views:
            return self._views[key]
        view = zeros_laid_out_like(x)
        view[...] = dx
        if dx.flags.writeable:  # a read-only one is let through only where nothing is written
            self._copies.append((dx, view))
        self._views[key] = view
        return view

    def copy_back(self) -> None:
        for user, view in self._copies:
            user[...] = view
        self._copies.clear()


def zeros_laid_out_like(x: np.ndarray) -> np.ndarray:
    """Zeros of ``x``'s shape and dtype with ``x``'s strides: a view of a fresh buffer spanning
    the same extent. A derivative computes a shadow's addresses as its primal's, so an array's
    shadow must be laid out so (``np.zeros_like`` gives a strided view compact strides)."""
    buf = np.zeros(_extent(x) // x.itemsize + 1, dtype=x.dtype)
    offset = -min(0, _lowest_offset(x)) // x.itemsize
    return np.lib.stride_tricks.as_strided(buf[offset:], x.shape, x.strides)


def _real_shadow(s, what: str) -> float:
    if not S.is_real(s):
        raise ArgumentTypeError(f"{what} must be a float, like its primal, not "
                                f"{type(s).__name__}")
    return float(s)


def _tuple_shadow(s, n: int, what: str) -> tuple:
    if not (isinstance(s, tuple) and len(s) == n and all(S.is_real(v) for v in s)):
        raise ArgumentTypeError(f"{what} must be a tuple of {n} floats, like its primal, not "
                                f"{s!r}")
    return tuple(float(v) for v in s)


def _lowest_offset(x: np.ndarray) -> int:
    return sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides) if n)


def _extent(x: np.ndarray) -> int:
    hi = sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides) if n)
    return hi - _lowest_offset(x) + x.itemsize
