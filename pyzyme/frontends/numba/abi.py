"""Where each Python argument of an ``@njit`` function goes in its native LLVM function.

Numba compiles ``def f(a, x)`` to ``i32 @native(ptr retptr, ptr excinfo, <a flattened>, <x>)``:
every argument is flattened, recursively, into scalars and pointers, and the result comes back
through ``retptr`` while the ``i32`` says how the call ended. An :class:`AbiMap` spells this out
for one compiled signature: which native parameter is ``a.data`` or ``a.shape[1]``, what it
points to, and where each field of the result lies in ``retptr``'s memory. Type analysis seeds
itself from it and derivative wrappers use it to place shadow arguments.

The map is read off Numba's own data model (the models of ``context.data_model_manager`` and the
argument packer behind ``call_conv.get_function_type``), not a table of pyzyme's, and is checked
against both Numba's function type and the parameters of the captured native function.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir as llir
from numba.core import types
from numba.core.base import BaseContext
from numba.core.datamodel import models
from numba.core.typing import Signature

from pyzyme.errors import CaptureError

#: Meaning of the ``i32`` a native function returns (numba/core/callconv.py).
STATUS_CODES: dict[str, str] = {
    "0": "ok",
    "-1": "error set",
    "-2": "None",
    "-3": "StopIteration",
    ">=1": "user exception (*excinfo)",
}

#: Numba's containers: the names a user knows them by.
_CONTAINERS = {types.ListType: ("numba.typed.List", "lists"),
               types.DictType: ("numba.typed.Dict", "dicts"),
               types.List: ("Python list", "lists"), types.Set: ("Python set", "sets")}

_SUPPORTED = (
    "numbers, booleans, NumPy arrays (of numbers, booleans or records), tuples and named tuples "
    "of these, records, jitclass instances, strings (as Const), and Optional of these"
)


@dataclass(frozen=True)
class NativeParam:
    """One parameter of the native function.

    ``index`` counts from the native function's first parameter (``retptr`` is 0, ``excinfo`` 1);
    ``field`` is the path from the Python argument (``a.shape[1]``); ``numba_type`` is what the
    parameter holds: for ``a.data`` of a float64 array, ``CPointer(float64)``.
    """

    index: int
    ir_name: str
    field: str
    llvm_type: str
    numba_type: types.Type


@dataclass(frozen=True)
class ArgAbi:
    """How one Python argument is passed: its native parameters, in order."""

    position: int
    name: str
    numba_type: types.Type
    kind: str
    params: tuple[NativeParam, ...]

    def param(self, field: str) -> NativeParam:
        """The native parameter holding ``field`` (e.g. ``"a.data"``)."""
        for p in self.params:
            if p.field == field:
                return p
        raise KeyError(
            f"argument {self.name!r} has no field {field!r}; "
            f"it has {[p.field for p in self.params]}"
        )


@dataclass(frozen=True)
class ResultField:
    """One scalar of the result, at ``offset`` bytes into ``retptr``'s memory."""

    offset: int
    field: str
    llvm_type: str
    numba_type: types.Type


@dataclass(frozen=True)
class ResultAbi:
    """How the result comes back: the type ``retptr`` points to and its scalar fields."""

    numba_type: types.Type
    kind: str
    llvm_type: str
    size: int
    fields: tuple[ResultField, ...]


@dataclass(frozen=True)
class AbiMap:
    """The native calling convention of one compiled signature of an ``@njit`` function.

    Build it with :meth:`from_signature`; print it to read it.

    Examples
    --------
    >>> from numba.core import types
    >>> from numba.core.registry import cpu_target
    >>> abi = AbiMap.from_signature(cpu_target.target_context, "scale",
    ...                             ("a", "k"), types.none(types.float64[::1], types.float64))
    >>> abi.args[0].param("a.data").index
    6
    >>> print(abi)                                      # doctest: +NORMALIZE_WHITESPACE
    AbiMap of scale(a, k)
      signature (array(float64, 1d, C), float64) -> none
      native i32 (ptr retptr, ptr excinfo, ptr, ptr, i64, i64, ptr, i64, i64, double)
      arg 0 a: array(float64, 1d, C) [array]
        #2   ptr     a.meminfo     %arg.a.0    meminfo(float64)
        #3   ptr     a.parent      %arg.a.1    pyobject
        #4   i64     a.nitems      %arg.a.2    int64
        #5   i64     a.itemsize    %arg.a.3    int64
        #6   ptr     a.data        %arg.a.4    float64*
        #7   i64     a.shape[0]    %arg.a.5.0  int64
        #8   i64     a.strides[0]  %arg.a.6.0  int64 (bytes)
      arg 1 k: float64 [scalar]
        #9   double  k             %arg.k      float64
      result none [none]: retptr -> 8 bytes
        (a null pointer is stored)
      status 0 ok | -1 error set | -2 None | -3 StopIteration | >=1 user exception (*excinfo)
    """

    function: str
    signature: Signature
    args: tuple[ArgAbi, ...]
    result: ResultAbi

    @classmethod
    def from_signature(
        cls, context: BaseContext, function: str, arg_names: tuple[str, ...], signature: Signature
    ) -> AbiMap:
        """Derive the map from Numba's data model for ``signature``.

        Raises
        ------
        CaptureError
            If an argument or the result has a type pyzyme cannot describe.
        """
        if len(arg_names) != len(signature.args):
            raise CaptureError(
                f"{function} has {len(arg_names)} parameters "
                f"but the signature has {len(signature.args)} types"
            )
        args, index = [], 2
        for position, (name, ty) in enumerate(zip(arg_names, signature.args)):
            kind = _kind(ty, what=f"argument {name!r} of {function}")
            params = tuple(
                NativeParam(
                    index + i,
                    f"arg.{name}" + ("." + ".".join(map(str, path)) if path else ""),
                    field,
                    llvm_str(llty),
                    leaf_ty,
                )
                for i, (field, path, llty, leaf_ty) in enumerate(
                    _argument_leaves(context, ty, name)
                )
            )
            index += len(params)
            args.append(ArgAbi(position, name, ty, kind, params))
        abi = cls(
            function, signature, tuple(args), _result_abi(context, signature.return_type, function)
        )
        abi._check_against_numba(context)
        return abi

    @property
    def native_params(self) -> tuple[NativeParam, ...]:
        """All native parameters after ``retptr`` and ``excinfo``, in order."""
        return tuple(p for a in self.args for p in a.params)

    @property
    def native_type(self) -> str:
        """The native function type, e.g. ``i32 (ptr retptr, ptr excinfo, double)``."""
        params = ", ".join(
            ["ptr retptr", "ptr excinfo"] + [p.llvm_type for p in self.native_params]
        )
        return f"i32 ({params})"

    def arg(self, name: str) -> ArgAbi:
        """The argument called ``name``."""
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(f"{self.function} has no argument {name!r}")

    def check_function(self, fn: llvm.ValueRef) -> None:
        """Check the parameters of the native LLVM function ``fn`` against this map.

        Raises
        ------
        CaptureError
            Naming the first parameter whose type differs, or the count mismatch.
        """
        found = [str(a.type) for a in fn.arguments]
        expected = ["ptr", "ptr"] + [p.llvm_type for p in self.native_params]
        if found != expected:
            raise CaptureError(
                f"native function of {self.function} has parameters ({', '.join(found)}); "
                f"Numba's data model says ({', '.join(expected)})",
                hint="the Numba data model and its lowering disagree; please report this",
            )

    def _check_against_numba(self, context: BaseContext) -> None:
        fnty = context.call_conv.get_function_type(self.signature.return_type, self.signature.args)
        numba_params = [llvm_str(t) for t in fnty.args[2:]]
        mine = [p.llvm_type for p in self.native_params]
        if numba_params != mine:
            raise CaptureError(
                f"pyzyme's reading of Numba's data model for {self.function} gives "
                f"({', '.join(mine)}) but Numba's calling convention gives "
                f"({', '.join(numba_params)})"
            )

    def __str__(self) -> str:
        sig = self.signature
        lines = [
            f"AbiMap of {self.function}({', '.join(a.name for a in self.args)})",
            f"  signature ({', '.join(map(str, sig.args))}) -> {sig.return_type}",
            f"  native {self.native_type}",
        ]
        width = max([len(p.field) for p in self.native_params] + [1])
        name_width = max([len(p.ir_name) for p in self.native_params] + [1]) + 1
        for a in self.args:
            lines.append(f"  arg {a.position} {a.name}: {a.numba_type} [{a.kind}]")
            for p in a.params:
                lines.append(
                    f"    {'#' + str(p.index):<4} {p.llvm_type:<7} {p.field:<{width}}  "
                    f"{'%' + p.ir_name:<{name_width}}  {_type_str(p.numba_type)}{_unit(p.field)}"
                )
        r = self.result
        lines.append(f"  result {r.numba_type} [{r.kind}]: retptr -> {r.size} bytes")
        if r.kind == "none":
            lines.append("    (a null pointer is stored)")
        else:
            fwidth = max(len(f.field) for f in r.fields)
            for f in r.fields:
                held = _type_str(f.numba_type) + _unit(f.field)
                lines.append(f"    +{f.offset:<4} {f.llvm_type:<7} {f.field:<{fwidth}}  {held}")
            if r.kind == "optional":
                lines.append("    (None is status -2, with retptr unwritten)")
            if r.kind == "array":
                lines.append("    (the caller owns a reference to result.meminfo)")
        lines.append("  status " + " | ".join(f"{k} {v}" for k, v in STATUS_CODES.items()))
        return "\n".join(lines)


def _kind(ty: types.Type, *, what: str, result: bool = False) -> str:
    """Classify ``ty`` or raise a CaptureError saying what is supported."""
    if isinstance(ty, types.Boolean):
        return "bool"
    if isinstance(ty, types.Complex):
        return "complex"
    if isinstance(ty, (types.Integer, types.Float)):
        return "scalar"
    if isinstance(ty, types.Array) and isinstance(
        ty.dtype, (types.Number, types.Boolean, types.Record)
    ):
        return "array"
    if isinstance(ty, types.BaseTuple):
        for i, elem in enumerate(ty):
            _kind(elem, what=f"element {i} of {what}", result=result)
        return "tuple"
    if isinstance(ty, types.Record):
        return "record"
    if isinstance(ty, types.ClassInstanceType):
        return "jitclass"  # (meminfo, data): data points to the struct of its fields
    if isinstance(ty, types.UnicodeType) and not result:
        return "string"  # carries no derivative; passed through as Const
    if isinstance(ty, types.Optional):
        _kind(ty.type, what=what, result=result)
        return "optional"
    if isinstance(ty, types.Omitted):
        return "omitted"
    if isinstance(ty, types.NoneType):
        return "none"
    message, hint = refusal(ty, what, result=result)
    raise CaptureError(message, hint=hint)


def refusal(ty: types.Type, what: str, result: bool = False) -> tuple[str, str]:
    """``(message, hint)`` saying that ``what`` (``"argument 0"``), of Numba type ``ty``,
    cannot be passed to a function pyzyme differentiates: the one wording, for capture and
    for the API's checks of annotated arguments.

    Numba's containers (typed and reflected lists, typed dicts, sets) are passed as pointers
    to Numba's own structures of variable size, which have no shadow pyzyme can lay out, so no
    annotation can pass them, Const included; made inside the function, they are
    differentiated.

    >>> print(refusal(types.ListType(types.float64), "argument 0")[0])
    ... # doctest: +NORMALIZE_WHITESPACE
    pyzyme cannot pass argument 0: it is a numba.typed.List (ListType[float64]), which no
    annotation passes (Const included); lists made inside the function are differentiated
    """
    container = None if result else _CONTAINERS.get(type(ty))
    if container is not None:
        name, plural = container
        return (f"pyzyme cannot pass {what}: it is a {name} ({ty}), which no annotation "
                f"passes (Const included); {plural} made inside the function are "
                f"differentiated",
                "pass the values as a NumPy array: Duplicated(x, np.zeros_like(x)) with "
                "x = np.asarray(values) to differentiate them, Const(x) otherwise")
    return (f"pyzyme cannot pass {what}: type {ty} is not supported",
            f"supported are {_SUPPORTED}")


def argument_refusal(ty: types.Type, what: str) -> tuple[str, str] | None:
    """:func:`refusal`'s ``(message, hint)`` when a value of Numba type ``ty`` cannot be an
    argument of a function pyzyme differentiates, in any annotation; None when it can."""
    try:
        _kind(ty, what=what)
    except CaptureError as err:
        return err.message, err.hint
    return None


def _argument_leaves(context: BaseContext, ty: types.Type, name: str) -> Iterator[tuple]:
    """(field, index path, llvm type, numba type) of each scalar ``ty`` flattens into, in order.

    The recursion follows the data model exactly as Numba's argument packer does: a struct model
    flattens into its members' argument types, a homogeneous tuple into its elements, anything
    else is one parameter.
    """
    dmm = context.data_model_manager

    def walk(ty, field, path):
        model = dmm[ty]
        if isinstance(model, models.UniTupleModel):
            for i in range(len(ty)):
                yield from walk(ty.dtype, f"{field}{_elem_name(ty, i)}", path + (i,))
        elif isinstance(model, models.StructModel):
            for i, (member, mty) in enumerate(zip(model._fields, model._members)):
                label = _elem_name(ty, i) if isinstance(ty, types.BaseTuple) else f".{member}"
                yield from walk(mty, f"{field}{label}", path + (i,))
        else:
            argty = model.get_argument_type()
            if argty == ():
                return  # an omitted argument has no native parameter
            yield field, path, argty, ty

    yield from walk(ty, name, ())


def _elem_name(ty: types.Type, i: int) -> str:
    fields = getattr(ty, "fields", None)  # named tuples
    return f".{fields[i]}" if fields else f"[{i}]"


def _result_abi(context: BaseContext, ty: types.Type, function: str) -> ResultAbi:
    kind = _kind(ty, what=f"the result of {function}", result=True)
    model = context.data_model_manager[ty]
    llty = model.get_return_type()
    td = context.target_data
    size = llty.get_abi_size(td)
    if kind == "none":
        return ResultAbi(ty, kind, llvm_str(llty), size, ())
    value_ty = ty.type if isinstance(ty, types.Optional) else ty  # None is the status -2
    fields = tuple(_result_leaves(context, value_ty, llty, "result", 0))
    return ResultAbi(ty, kind, llvm_str(llty), size, fields)


def _result_leaves(context: BaseContext, ty: types.Type, llty: llir.Type, field: str, offset: int):
    """(offset, field, ...) of each scalar in the memory ``retptr`` points to."""
    td = context.target_data
    model = context.data_model_manager[ty]
    if isinstance(llty, llir.ArrayType) and isinstance(model, models.UniTupleModel):
        step = llty.element.get_abi_size(td)
        for i in range(llty.count):
            yield from _result_leaves(
                context, ty.dtype, llty.element, f"{field}{_elem_name(ty, i)}", offset + i * step
            )
    elif isinstance(llty, llir.LiteralStructType) and isinstance(model, models.StructModel):
        here = offset
        for i, (member, mty, elem) in enumerate(zip(model._fields, model._members, llty.elements)):
            align = elem.get_abi_alignment(td)
            here = (here + align - 1) // align * align
            label = _elem_name(ty, i) if isinstance(ty, types.BaseTuple) else f".{member}"
            yield from _result_leaves(context, mty, elem, f"{field}{label}", here)
            here += elem.get_abi_size(td)
    else:
        yield ResultField(offset, field, llvm_str(llty), ty)


def llvm_str(t: llir.Type) -> str:
    """The LLVM 22 spelling of an llvmlite.ir type (which still prints typed pointers)."""
    if isinstance(t, llir.PointerType):
        return "ptr"
    if isinstance(t, llir.ArrayType):
        return f"[{t.count} x {llvm_str(t.element)}]"
    if isinstance(t, llir.LiteralStructType):
        return "{" + ", ".join(llvm_str(e) for e in t.elements) + "}"
    return str(t)


def _unit(field: str) -> str:
    # Numba's strides count bytes, not elements: the one fact about arrays easy to get wrong.
    return " (bytes)" if ".strides[" in field else ""


def _type_str(ty: types.Type) -> str:
    if isinstance(ty, types.CPointer):
        return f"{ty.dtype}*"
    if isinstance(ty, types.MemInfoPointer):
        return f"meminfo({ty.dtype})"
    return str(ty)
