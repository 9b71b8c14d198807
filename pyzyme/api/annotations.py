"""Activity annotations: what each argument of a differentiated function is.

They mirror Enzyme.jl's, and import nothing heavy, so code that only annotates arguments does
not pull in the compiler. An annotation *class* is used as the activity of the return value
(``autodiff(Forward, f, Duplicated, ...)``); an *instance* wraps an argument.

Examples
--------
>>> Duplicated(3.0, 1.0)
Duplicated(3.0, 1.0)
>>> BatchDuplicated(2.0, (1.0, 0.0)).width
2
>>> Active(2).val
2
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Annotation", "Const", "Active", "Duplicated", "DuplicatedNoNeed",
           "BatchDuplicated", "BatchDuplicatedNoNeed", "annotate"]


class Annotation:
    """Base of all annotations. ``val`` is the primal value."""

    __slots__ = ("val",)
    needs_primal = True

    def __init__(self, val: Any) -> None:
        self.val = val

    @property
    def shadows(self) -> tuple:
        """The shadow values (one per batch lane); empty for Const and Active."""
        return ()

    @property
    def width(self) -> int:
        return len(self.shadows) or 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.val!r})"


class Const(Annotation):
    """Not differentiated. A bare argument means the same."""

    __slots__ = ()


class Active(Annotation):
    """An immutable float value (scalar, complex, tuple of floats): reverse mode returns its
    derivative."""

    __slots__ = ()


class Duplicated(Annotation):
    """A value with a shadow ``dval`` of the same type. Forward mode reads the tangent from the
    shadow; reverse mode adds the derivative into it (for mutable values)."""

    __slots__ = ("dval",)

    def __init__(self, val: Any, dval: Any) -> None:
        super().__init__(val)
        self.dval = dval

    @property
    def shadows(self) -> tuple:
        return (self.dval,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.val!r}, {self.dval!r})"


class DuplicatedNoNeed(Duplicated):
    """As :class:`Duplicated`; the primal result may be skipped."""

    __slots__ = ()
    needs_primal = False


class BatchDuplicated(Annotation):
    """A value with several shadows at once (vector mode); every batch in a call has the same
    width."""

    __slots__ = ("dvals",)

    def __init__(self, val: Any, dvals: Sequence[Any]) -> None:
        super().__init__(val)
        self.dvals = tuple(dvals)
        if not self.dvals:
            raise ValueError("BatchDuplicated needs at least one shadow")

    @property
    def shadows(self) -> tuple:
        return self.dvals

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.val!r}, {self.dvals!r})"


class BatchDuplicatedNoNeed(BatchDuplicated):
    """As :class:`BatchDuplicated`; the primal result may be skipped."""

    __slots__ = ()
    needs_primal = False


def annotate(arg: Any) -> Annotation:
    """``arg`` itself if it is an annotation, else ``Const(arg)``."""
    return arg if isinstance(arg, Annotation) else Const(arg)
