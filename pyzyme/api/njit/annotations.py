"""``Const``, ``Active``, ``Duplicated`` and ``DuplicatedNoNeed`` in ``@njit`` code.

Inside ``@njit`` code an annotation is a small struct of its value (and its shadow), with one
Numba type per annotation class and value type(s): ``Duplicated(A, dA)`` there has the type
``Duplicated(array(float64, 1d, C), array(float64, 1d, C))``. Annotations can be built inside
``@njit`` code with the same call as in Python, passed in from Python, returned to Python, and
read with ``.val`` and ``.dval``. The thunks of :func:`~pyzyme.autodiff_thunk` take them there
as they do in Python (see :mod:`pyzyme.api.njit.thunks`). ``BatchDuplicated`` stays
Python-only.

:mod:`pyzyme.api.annotations` itself imports nothing heavy; importing this module registers
the Numba side (``pyzyme`` does so on import).

Examples
--------
>>> import numba
>>> import numpy as np
>>> from pyzyme import Duplicated
>>> @numba.njit
... def shadow_sum(x):
...     d = Duplicated(x, np.ones_like(x))
...     return d.val.sum() + d.dval.sum()
>>> shadow_sum(np.array([1.0, 2.0]))
5.0
>>> numba.typeof(Duplicated(1.5, 1.0))
Duplicated(float64, float64)
"""

from __future__ import annotations

import numba
from numba.core import cgutils, types
from numba.core.imputils import impl_ret_borrowed, lower_builtin, lower_getattr_generic
from numba.core.typing.templates import AttributeTemplate, infer_getattr
from numba.extending import (
    NativeValue,
    box,
    models,
    register_model,
    type_callable,
    typeof_impl,
    unbox,
)

from pyzyme.api import annotations as A

__all__ = ["AnnotationType", "NJIT_ANNOTATIONS", "annotation_of"]

#: The annotation classes that exist inside ``@njit`` code, and whether they carry a shadow.
NJIT_ANNOTATIONS = {A.Const: False, A.Active: False, A.Duplicated: True,
                    A.DuplicatedNoNeed: True}


class AnnotationType(types.Type):
    """The Numba type of an annotation: its class, the type of ``val`` and (for the
    Duplicated kinds) of ``dval``."""

    def __init__(self, cls: type, val: types.Type, dval: types.Type | None = None) -> None:
        self.cls, self.val, self.dval = cls, val, dval
        shadow = "" if dval is None else f", {dval}"
        super().__init__(name=f"{cls.__name__}({val}{shadow})")

    @property
    def key(self):
        return self.cls, self.val, self.dval

    @property
    def members(self) -> list[tuple[str, types.Type]]:
        out = [("val", self.val)]
        return out + ([("dval", self.dval)] if self.dval is not None else [])


def annotation_of(t: types.Type) -> tuple[type, types.Type, types.Type | None]:
    """``(annotation class, value type, shadow type or None)`` of an argument's Numba type;
    a bare value is ``Const``."""
    if isinstance(t, AnnotationType):
        return t.cls, t.val, t.dval
    return A.Const, types.unliteral(t), None


@register_model(AnnotationType)
class _AnnotationModel(models.StructModel):
    def __init__(self, dmm, fe_type: AnnotationType) -> None:
        super().__init__(dmm, fe_type, fe_type.members)


@typeof_impl.register(A.Annotation)
def _typeof_annotation(val: A.Annotation, c):
    cls = type(val)
    if cls not in NJIT_ANNOTATIONS:
        raise TypeError(f"{cls.__name__} cannot be passed to @njit code; there pass Const, "
                        f"Active, Duplicated or DuplicatedNoNeed")
    value = numba.typeof(val.val, c.purpose)
    shadow = numba.typeof(val.dval, c.purpose) if NJIT_ANNOTATIONS[cls] else None
    return AnnotationType(cls, value, shadow)


def _register_constructor(cls: type, shadowed: bool) -> None:
    @type_callable(cls)
    def _type(context):
        if shadowed:
            def typer(val, dval):
                return AnnotationType(cls, types.unliteral(val), types.unliteral(dval))
        else:
            def typer(val):
                return AnnotationType(cls, types.unliteral(val))
        return typer

    @lower_builtin(cls, *([types.Any] * (1 + shadowed)))
    def _lower(context, builder, sig, args):
        ty = sig.return_type
        struct = cgutils.create_struct_proxy(ty)(context, builder)
        for (name, member), arg, argty in zip(ty.members, args, sig.args):
            setattr(struct, name, context.cast(builder, arg, argty, member))
        return impl_ret_borrowed(context, builder, ty, struct._getvalue())


for _cls, _shadowed in NJIT_ANNOTATIONS.items():
    _register_constructor(_cls, _shadowed)


@infer_getattr
class _AnnotationAttributes(AttributeTemplate):
    key = AnnotationType

    def generic_resolve(self, ty: AnnotationType, attr: str):
        return dict(ty.members).get(attr)


@lower_getattr_generic(AnnotationType)
def _getattr(context, builder, ty: AnnotationType, value, attr: str):
    struct = cgutils.create_struct_proxy(ty)(context, builder, value=value)
    return impl_ret_borrowed(context, builder, dict(ty.members)[attr], getattr(struct, attr))


@unbox(AnnotationType)
def _unbox(ty: AnnotationType, obj, c):
    struct = cgutils.create_struct_proxy(ty)(c.context, c.builder)
    failed = cgutils.alloca_once_value(c.builder, cgutils.false_bit)
    cleanups = []
    for name, member in ty.members:
        # typeof read the same attributes of the same object, so they are there.
        item = c.pyapi.object_getattr_string(obj, name)
        native = c.unbox(member, item)
        c.pyapi.decref(item)  # the annotation keeps the value alive
        with cgutils.if_unlikely(c.builder, native.is_error):
            c.builder.store(cgutils.true_bit, failed)
        setattr(struct, name, native.value)
        if native.cleanup is not None:
            cleanups.append(native.cleanup)

    def cleanup():
        for fn in reversed(cleanups):
            fn()

    return NativeValue(struct._getvalue(), is_error=c.builder.load(failed),
                       cleanup=cleanup if cleanups else None)


@box(AnnotationType)
def _box(ty: AnnotationType, value, c):
    struct = cgutils.create_struct_proxy(ty)(c.context, c.builder, value=value)
    items = [c.box(member, getattr(struct, name)) for name, member in ty.members]
    cls = c.pyapi.unserialize(c.pyapi.serialize_object(ty.cls))
    out = c.pyapi.call_function_objargs(cls, items)
    c.pyapi.decref(cls)
    for item in items:
        c.pyapi.decref(item)
    return out
