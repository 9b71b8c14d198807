"""Seeding type analysis from the Numba calling convention.

``seed_from_abi`` turns an :class:`~pyzyme.frontends.numba.AbiMap` (which native parameter is
``a.data`` of which dtype, where the result goes) into one TypeTree per native parameter;
``extents_from_abi`` says how many bytes each contiguous array's data spans.
"""

from __future__ import annotations

from pyzyme.analysis.type_analysis import meminfo_tree
from pyzyme.analysis.typetree import FLOAT32, FLOAT64, INTEGER, POINTER, ConcreteType, TypeTree
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int
from pyzyme.rules.runtime import MEMINFO_DATA

__all__ = ["seed_from_abi", "extents_from_abi", "axis_extents_from_abi"]


def seed_from_abi(abi) -> dict[int, TypeTree]:
    """Argument trees of a Numba native function, from its :class:`AbiMap`.

    ``retptr`` (0) points to the result's fields, ``excinfo`` (1) is a pointer; an array's
    ``data`` points to its dtype at every offset, ``meminfo`` to NRT's MemInfo (data pointer at
    offset 24), shape, strides and sizes are integers, scalars follow their Numba type, a record
    argument points to its fields, and a jitclass instance's data pointer to its fields as
    Numba lays them out (floats, arrays, tuples, optional and nested instances, followed
    ``CLASS_DEPTH`` pointer levels deep).

    >>> from numba.core import types
    >>> from numba.core.registry import cpu_target
    >>> from pyzyme.frontends.numba.abi import AbiMap
    >>> abi = AbiMap.from_signature(cpu_target.target_context, "f", ("a", "k"),
    ...                             types.float64(types.float64[::1], types.int64))
    >>> seeds = seed_from_abi(abi)
    >>> for i in sorted(seeds): print(i, seeds[i])      # doctest: +NORMALIZE_WHITESPACE
    0 {[-1]:Pointer, [-1,0]:Float@double}
    1 {[-1]:Pointer}
    2 {[-1]:Pointer, [-1,0]:Integer, [-1,1]:Integer, [-1,2]:Integer, [-1,3]:Integer,
       [-1,4]:Integer, [-1,5]:Integer, [-1,6]:Integer, [-1,7]:Integer, [-1,8]:Pointer,
       [-1,16]:Pointer, [-1,24]:Pointer, [-1,24,-1]:Float@double, [-1,32]:Integer,
       [-1,33]:Integer, [-1,34]:Integer, [-1,35]:Integer, [-1,36]:Integer, [-1,37]:Integer,
       [-1,38]:Integer, [-1,39]:Integer, [-1,40]:Pointer}
    3 {[-1]:Pointer}
    4 {[-1]:Integer}
    5 {[-1]:Integer}
    6 {[-1]:Pointer, [-1,-1]:Float@double}
    7 {[-1]:Integer}
    8 {[-1]:Integer}
    9 {[-1]:Integer}
    """
    from numba.core import types

    seeds: dict[int, TypeTree] = {1: TypeTree({(-1,): POINTER})}
    result = TypeTree()
    for f in abi.result.fields:
        leaf = _numba_value_tree(f.numba_type)
        size = _NATIVE_SIZES.get(f.llvm_type, 8)
        result.merge(leaf.shift(0, size, f.offset))
    seeds[0] = TypeTree.pointer_to(result)
    for arg in abi.args:
        for p in arg.params:
            if arg.kind == "jitclass" and isinstance(p.numba_type, types.MemInfoPointer):
                t = meminfo_tree()  # its dtype is an Opaque: the data pointer stays a Pointer
            else:
                t = _numba_value_tree(p.numba_type)
            if t:
                seeds[p.index] = t
    return seeds


#: How many pointer levels of a jitclass instance's fields the seeds spell out. A recursive
#: class (a linked list through ``next: Optional[Node]``) would otherwise be infinite; type
#: analysis carries the tree around loops and through recursive calls (a phi of the argument
#: and the loaded ``next`` keeps the argument's depth), so a few levels suffice.
CLASS_DEPTH = 4


def _model_memory(ty, depth: int) -> TypeTree:
    """What the bytes of a Numba value of type ``ty`` hold, as Numba lays it out in memory
    (its data model's value type): struct members at their aligned offsets, tuples element by
    element, pointers to what they point to."""
    from numba.core import types
    from numba.core.datamodel import models
    from numba.core.registry import cpu_target

    ctx = cpu_target.target_context
    if isinstance(ty, types.DeferredType):
        ty = ty.get()
    model = ctx.data_model_manager[ty]
    llty = model.get_value_type()
    td = ctx.target_data
    if isinstance(model, models.UniTupleModel):
        step = llty.element.get_abi_size(td)
        inner = _model_memory(ty.dtype, depth)
        out = TypeTree()
        for i in range(len(ty)):
            out.merge(inner.shift(0, step, i * step))
        return out
    if isinstance(model, models.StructModel) and not isinstance(ty, types.ClassInstanceType):
        out, here = TypeTree(), 0
        for mty, elem in zip(model._members, llty.elements):
            align = elem.get_abi_alignment(td)
            here = (here + align - 1) // align * align
            size = elem.get_abi_size(td)
            out.merge(_model_memory(mty, depth).shift(0, size, here))
            here += size
        return out
    size = llty.get_abi_size(td)
    return _leaf_value_tree(ty, depth).shift(0, size)


def _leaf_value_tree(ty, depth: int) -> TypeTree:
    """The value-form tree of one leaf, following jitclass data pointers ``depth`` levels."""
    from numba.core import types

    if isinstance(ty, types.ClassInstanceType):
        # {meminfo, data}: the data pointer leads to the fields
        out = meminfo_tree().shift(0, 8)
        data = TypeTree({(-1,): POINTER})
        if depth > 0:
            data = TypeTree.pointer_to(_model_memory(ty.get_data_type(), depth - 1))
        out.merge(data.shift(0, 8, 8))
        return out
    if isinstance(ty, types.CPointer) and isinstance(ty.dtype, types.ClassDataType):
        if depth <= 0:
            return TypeTree({(-1,): POINTER})
        return TypeTree.pointer_to(_model_memory(ty.dtype, depth - 1))
    return _numba_value_tree(ty)


_NATIVE_SIZES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "float": 4, "double": 8,
                 "ptr": 8}


def _numba_value_tree(ty) -> TypeTree:
    """The value-form tree of one flattened Numba leaf type."""
    from numba.core import types

    if isinstance(ty, types.Boolean):
        return TypeTree({(-1,): INTEGER})
    if isinstance(ty, (types.Integer, types.NPDatetime, types.NPTimedelta)):
        return TypeTree({(-1,): INTEGER})
    if isinstance(ty, (types.Float, types.Complex)):
        return TypeTree({(-1,): _numba_float(ty)})
    if isinstance(ty, types.Record):
        return TypeTree.pointer_to(_record_memory(ty))
    if isinstance(ty, types.CPointer) and isinstance(ty.dtype, types.ClassDataType):
        return _leaf_value_tree(ty, CLASS_DEPTH)
    if isinstance(ty, types.CPointer):
        return TypeTree.pointer_to(_element_memory(ty.dtype))
    if isinstance(ty, types.MemInfoPointer):
        mi = meminfo_tree()
        data = TypeTree.pointer_to(_element_memory(ty.dtype)).shift(0, 8, MEMINFO_DATA)
        mi.merge(TypeTree.pointer_to(data))
        return mi
    if isinstance(ty, (types.PyObject, types.RawPointer, types.Opaque)):
        return TypeTree({(-1,): POINTER})
    return TypeTree()


def _numba_float(ty) -> ConcreteType:
    from numba.core import types

    bits = ty.bitwidth // 2 if isinstance(ty, types.Complex) else ty.bitwidth
    return {16: ConcreteType.float("half"), 32: FLOAT32, 64: FLOAT64}[bits]


def _element_memory(dtype) -> TypeTree:
    """What an array's data pointer points to: every element of ``dtype``."""
    from numba.core import types

    if isinstance(dtype, types.Record):
        return _record_memory(dtype)  # the first record's fields; a stride -1 cannot say
    scalar = _numba_value_tree(dtype)
    return scalar if not isinstance(dtype, types.Boolean) else TypeTree({(-1,): INTEGER})


def _record_memory(rec) -> TypeTree:
    from numba.core import types

    out = TypeTree()
    for _, fld in rec.fields.items():
        ft = fld.type
        if isinstance(ft, types.NestedArray):
            n, ft = ft.nitems, ft.dtype
        else:
            n = 1
        leaf = _numba_value_tree(ft)
        if not leaf or isinstance(ft, types.Record):
            continue
        width = ft.bitwidth // 8 if hasattr(ft, "bitwidth") else 1
        out.merge(leaf.shift(0, width * n, fld.offset))
    return out


def extents_from_abi(abi) -> dict[int, tuple[int, int]]:
    """The memory each contiguous array argument's data pointer spans, from the
    :class:`AbiMap`: ``{data param: (nitems param, itemsize param)}`` (its bytes are their
    product, from the data pointer on; a strided view's are not, so it has no entry).

    >>> from numba.core import types
    >>> from numba.core.registry import cpu_target
    >>> from pyzyme.frontends.numba.abi import AbiMap
    >>> abi = AbiMap.from_signature(cpu_target.target_context, "f", ("a", "b"),
    ...                             types.float64(types.float64[:, ::1], types.float64[::2]))
    >>> extents_from_abi(abi)
    {6: (4, 5)}
    """
    from numba.core import types
    extents = {}
    for arg in abi.args:
        ty = arg.numba_type
        if isinstance(ty, types.Array) and ty.layout in ("C", "F"):
            try:
                data, nitems, itemsize = (arg.param(f"{arg.name}.{field}").index
                                          for field in ("data", "nitems", "itemsize"))
            except KeyError:
                continue
            extents[data] = (nitems, itemsize)
    return extents


def axis_extents_from_abi(abi) -> frozenset[int]:
    """The parameters holding an array argument's length along an axis, or its element count
    (any layout): a loop counting up to one of them runs at most that many times, so what its
    reverse sweep keeps per iteration is no bigger than the array
    (:meth:`pyzyme.diff.reverse.values.ReverseValues._keeps_library_result`).

    >>> from numba.core import types
    >>> from numba.core.registry import cpu_target
    >>> from pyzyme.frontends.numba.abi import AbiMap
    >>> abi = AbiMap.from_signature(cpu_target.target_context, "f", ("a", "n"),
    ...                             types.float64(types.float64[:, ::1], types.int64))
    >>> sorted(axis_extents_from_abi(abi))
    [4, 7, 8]
    """
    from numba.core import types
    found = set()
    for arg in abi.args:
        ty = arg.numba_type
        if not isinstance(ty, types.Array):
            continue
        for field in ("nitems", *(f"shape[{k}]" for k in range(ty.ndim))):
            try:
                found.add(arg.param(f"{arg.name}.{field}").index)
            except KeyError:
                continue
    return frozenset(found)


def shape_extents_from_abi(abi) -> dict:
    """The memory each contiguous array argument's data pointer spans, as the product of its
    shape parameters and its item size (an ``i64`` constant): what a callee gets of the
    array where LLVM dropped ``nitems`` and ``itemsize`` from its parameters, which it
    passes on (:func:`pyzyme.transforms.checkpoint_callees.callee_extents`).

    >>> from numba.core import types
    >>> from numba.core.registry import cpu_target
    >>> from pyzyme.frontends.numba.abi import AbiMap
    >>> abi = AbiMap.from_signature(cpu_target.target_context, "f", ("a",),
    ...                             types.float64(types.float32[:, ::1]))
    >>> {k: (v[0], v[1], v[2].value) for k, v in shape_extents_from_abi(abi).items()}
    {6: (7, 8, 4)}
    """
    from numba.core import errors, types  # as extents_from_abi does
    from numba.np.numpy_support import as_dtype
    extents = {}
    for arg in abi.args:
        ty = arg.numba_type
        if isinstance(ty, types.Array) and ty.layout in ("C", "F"):
            try:
                data = arg.param(f"{arg.name}.data").index
                shape = tuple(arg.param(f"{arg.name}.shape[{k}]").index
                              for k in range(ty.ndim))
                itemsize = as_dtype(ty.dtype).itemsize
            except (KeyError, NotImplementedError, errors.NumbaError):
                continue  # no such parameter, or an item NumPy has no dtype for
            extents[data] = (*shape, const_int(T.i64, itemsize))
    return extents
