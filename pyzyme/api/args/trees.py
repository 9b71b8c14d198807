"""Differentiated containers as trees: tuples, namedtuples, lists and dicts flattened into
their leaves, each leaf annotated for reverse mode, the derivative built back in the
container's structure.

A call of ``grad(f)`` with a tuple argument is differentiated through an ``@njit`` wrapper
whose parameters are the tree's leaves (:func:`pyzyme.api.wrappers.flat_wrapper`): float leaves
``Active``, float arrays ``Duplicated`` with zero shadows, records and jitclass instances
``Duplicated`` with a zeroed copy, the rest ``Const``. Non-float leaves keep their values in the
derivative.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyzyme.api import annotations as A
from pyzyme.api.args.complex import is_complex
from pyzyme.api.args.make_zero import make_zero
from pyzyme.api.args.pytree import dict_class, dict_keys, keys_of
from pyzyme.api.args.structured import is_jitclass, is_real, keep_non_float

__all__ = ["Node", "tree", "tree_key", "leaf_annotation", "shadowed_in_place", "rebuild"]


class Node:
    """A differentiated argument: a leaf, or a tuple / namedtuple / list / dict of nodes."""

    def __init__(self, kind: str, value=None, children=(), cls=None) -> None:
        self.kind, self.value, self.children, self.cls = kind, value, tuple(children), cls

    def leaves(self) -> list[Node]:
        if self.kind == "leaf":
            return [self]
        return [leaf for c in self.children for leaf in c.leaves()]


def tree_key(node: Node | None):
    """What a wrapper made for ``node`` depends on: its structure, not its values."""
    if node is None:
        return None
    if node.kind == "leaf":
        return "leaf"
    return (node.kind, node.cls, tuple(tree_key(c) for c in node.children))


def tree(value, where: str) -> Node:
    """The tree of ``value`` (``where`` names it in errors)."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return Node("namedtuple", children=[tree(v, where) for v in value], cls=type(value))
    if isinstance(value, (tuple, list)):
        return Node("tuple" if isinstance(value, tuple) else "list",
                    children=[tree(v, where) for v in value])
    if isinstance(value, dict):
        keys = keys_of(value, where)
        return Node("dict", children=[tree(value[k], f"{where}[{k!r}]") for k in keys],
                    cls=dict_class(keys))
    return Node("leaf", value)


def leaf_annotation(value, top: bool):
    """The annotation of a differentiated leaf and how its derivative is read back:
    ``("active", None)`` from the adjoints, ``("shadow", array)``, ``("after", reader)`` or
    ``("const", value)``. ``top``: the leaf is an argument itself (an int is then Active)."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "fc":   # floating or complex
        shadow = np.zeros_like(value)
        return A.Duplicated(value, shadow), ("shadow", shadow)
    if shadowed_in_place(value):
        shadow = make_zero(value)
        return A.Duplicated(value, shadow), ("after", lambda: keep_non_float(shadow, value))
    if isinstance(value, (float, np.floating)) or (top and is_real(value)) or is_complex(value):
        return A.Active(value), ("active", None)
    return A.Const(value), ("const", value)


def shadowed_in_place(value) -> bool:
    """Records, arrays of records and jitclass instances: their derivative is a zeroed copy
    (``make_zero``) that the reverse sweep accumulates into, float fields differentiated and
    the others kept."""
    return (isinstance(value, np.void) or is_jitclass(value)
            or (isinstance(value, np.ndarray) and value.dtype.fields is not None))


def rebuild(node: Node, values) -> Any:
    """``node``'s container with its leaves taken from the iterator ``values``."""
    if node.kind == "leaf":
        return next(values)
    items = [rebuild(c, values) for c in node.children]
    if node.kind == "namedtuple":
        return node.cls(*items)
    if node.kind == "dict":
        return dict(zip(dict_keys(node.cls), items))
    return tuple(items) if node.kind == "tuple" else items
