"""``make_zero``: a zeroed copy of a value, the shadow a ``Duplicated`` argument needs.

The copy has the structure of the original and its aliasing: whatever is reached twice in ``x``
(one list in two places, one jitclass node linked from two others, a dict that holds itself) is
zeroed once and the copy reaches that one zero twice, so cycles end and shadows alias the way
their primals do. Numeric data (floats, complex numbers, integers) becomes zero; values that
carry no derivative (bools, strings, bytes, ``None``, enum members) are kept.

Jitclass instances are copied without running the class's ``__init__``: a small compiled
allocator per class makes the instance (``_jitclass_ops``), exactly as the jitclass constructor
allocates it but with no constructor call, and a compiled setter stores every zeroed field.
"""

from __future__ import annotations

import copy
import ctypes
import enum
import types as pytypes
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numba
import numpy as np
from numba.core import cgutils, types
from numba.core.dispatcher import Dispatcher
from numba.core.typing import signature
from numba.experimental.jitclass import _box
from numba.experimental.jitclass.base import imp_dtor
from numba.extending import intrinsic
from numba.np.numpy_support import as_dtype
from numba.typed import Dict, List

from pyzyme.errors import UnsupportedError

__all__ = ["make_zero"]

# Values with no derivative: make_zero gives them back unchanged.
_KEPT = (bool, np.bool_, str, bytes, enum.Enum, np.datetime64, np.timedelta64, type(None))
# Python objects make_zero will not copy attribute by attribute.
_NOT_DATA = (type, pytypes.ModuleType, pytypes.FunctionType, pytypes.BuiltinFunctionType,
             pytypes.MethodType, pytypes.BuiltinMethodType)


def make_zero(x: Any) -> Any:
    """A recursive zeroed copy of ``x``, structure and aliasing included.

    Parameters
    ----------
    x : Any
        Numbers (Python and NumPy scalars), NumPy arrays of any dtype, layout and dimension
        (0-d, views, structured, complex), record scalars (``np.void``), tuples, namedtuples,
        lists, dicts, ``numba.typed.List`` / ``numba.typed.Dict``, jitclass instances, and
        Python objects whose attributes are any of these, nested to any depth.

    Returns
    -------
    Any
        A fresh value of the same type and shape. Floats, complex numbers and integers are
        zero; bools, strings, bytes, ``None`` and enum members are kept. Arrays come back as new
        arrays of the same shape and dtype (numeric fields of a structured array zeroed, its
        bool and string fields kept). Dict keys are kept. A jitclass instance becomes a new
        instance of its class made without calling ``__init__``, every field zeroed (a field
        that is ``None`` stays ``None``). Whatever ``x`` reaches twice -- the same object, the
        same jitclass instance, arrays viewing exactly the same memory -- is zeroed once and
        reached twice in the result, so cycles are copied as cycles.

    Raises
    ------
    UnsupportedError
        For a value of any other type (sets, functions, ...); the message names the type and
        where in ``x`` it was found.

    Examples
    --------
    >>> import numpy as np
    >>> from collections import namedtuple
    >>> make_zero({"w": np.ones(2), "b": (1.5, 2), "name": "layer"})
    {'w': array([0., 0.]), 'b': (0.0, 0), 'name': 'layer'}
    >>> P = namedtuple("P", "x y")
    >>> make_zero(P(np.array(3.0), 4.5j))
    P(x=array(0.), y=0j)
    >>> a = np.arange(3.0)
    >>> z = make_zero((a, a))
    >>> z[0] is z[1], z[0] is a
    (True, False)
    >>> loop = [1.0]
    >>> loop.append(loop)
    >>> zl = make_zero(loop)
    >>> zl[0], zl[1] is zl
    (0.0, True)
    >>> make_zero({1, 2})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pyzyme.errors.UnsupportedError: make_zero cannot zero a set (in x): ...
    """
    try:
        return _Zeroer().run(x)
    except _Unzeroable as err:
        raise UnsupportedError(
            f"make_zero cannot zero a {err.type_name} (in x{_path_text(err.path)}): it zeroes "
            f"numbers, NumPy arrays and records, tuples, namedtuples, lists, dicts, numba typed "
            f"List/Dict, jitclass instances and objects whose attributes are those; convert "
            f"this value to one of them, or build its zero yourself") from None


class _Unzeroable(Exception):
    """A value make_zero has no rule for, and the path from ``x`` down to it."""

    def __init__(self, value: Any, path: _Path) -> None:
        cls = type(value)
        module = "" if cls.__module__ == "builtins" else f"{cls.__module__}."
        self.type_name = module + cls.__qualname__
        self.path = path
        super().__init__(self.type_name)


# Where a value sits inside x: ``(".next", (".next", ((0,), None)))`` is ``x[0].next.next``,
# innermost step first, so stepping down shares the parent's path instead of copying it. A
# step is an attribute (".name") or a subscript as a 1-tuple, written out only for a message.
_Path = Optional[tuple[Any, "_Path"]]


def _path_text(path: _Path) -> str:
    steps: list[str] = []
    while path is not None:
        step, path = path
        steps.append(step if isinstance(step, str) else f"[{step[0]!r}]")
    steps.reverse()
    runs: list[str] = []                    # x.next.next...: one run per repeated step
    i = 0
    while i < len(steps):
        j = i
        while j < len(steps) and steps[j] == steps[i]:
            j += 1
        runs.append(steps[i] * (j - i) if j - i < 4 else f"({steps[i]})*{j - i}")
        i = j
    return "".join(runs)


class _Zeroer:
    """One ``make_zero`` call.

    ``memo`` maps each mutable thing already zeroed (by identity, or by address for what Numba
    boxes afresh on every access) to ``(original, zero)``; holding the original keeps its id
    from being reused while the copy is made. A mutable container is made and remembered at
    once, and its contents are zeroed later from the ``pending`` work list, so cycles end at the
    memo and a linked list a million nodes long needs no deeper Python stack than one node.
    """

    def __init__(self) -> None:
        self.memo: dict[Any, tuple[Any, Any]] = {}
        self.path: _Path = None                           # where in x the current value is
        self.pending: list[tuple[_Path, Callable[[], None]]] = []

    def run(self, x: Any) -> Any:
        out = self.zero(x)
        while self.pending:
            self.path, fill = self.pending.pop()
            fill()
        return out

    def zero(self, x: Any) -> Any:
        t = type(x)
        if t is float:
            return 0.0
        if t is int:
            return 0
        if isinstance(x, _KEPT):
            return x
        if isinstance(x, (int, float, complex, np.number)):
            return t(0)
        if isinstance(x, np.ndarray):
            return self._array(x)
        if isinstance(x, np.void):
            return self._record(x)
        if isinstance(x, tuple):
            return self._tuple(x)
        key = id(x)
        if key in self.memo:
            return self.memo[key][1]
        if isinstance(x, list):
            return self._list(x)
        if isinstance(x, dict):
            return self._dict(x)
        if isinstance(x, _box.Box):
            return self._jitclass(x)
        if isinstance(x, List):
            return self._typed_list(x)
        if isinstance(x, Dict):
            return self._typed_dict(x)
        return self._object(x)

    def item(self, value: Any, where: Any) -> Any:
        """The zero of ``value``, found at ``where`` inside the value being zeroed."""
        parent = self.path
        self.path = (where, parent)
        out = self.zero(value)
        self.path = parent
        return out

    def _made(self, key: Any, x: Any, out: Any, fill: Callable[[], None] | None = None) -> Any:
        """Remember ``out`` as the zero of ``x``; ``fill`` zeroes its contents later."""
        self.memo[key] = (x, out)
        if fill is not None:
            self.pending.append((self.path, fill))
        return out

    def _unzeroable(self, x: Any) -> _Unzeroable:
        return _Unzeroable(x, self.path)

    # -- NumPy ---------------------------------------------------------------------------------

    def _array(self, x: np.ndarray) -> np.ndarray:
        # Arrays viewing exactly the same memory share one zero: Numba boxes an array field as
        # a new ndarray on every access, so identity alone would split one array into several.
        if x.size:
            key = ("array", x.__array_interface__["data"][0], x.shape, x.strides, x.dtype)
        else:
            key = id(x)
        if key in self.memo:
            return self.memo[key][1]
        if x.dtype.kind in "iufc":
            return self._made(key, x, np.zeros_like(x))
        out = np.array(x, copy=True, order="K", subok=True)   # bools, strings, dates kept
        return self._made(key, x, out, lambda: self._zero_in_place(out))

    def _zero_in_place(self, a: np.ndarray) -> None:
        """Zero the numeric data of ``a``: the fields of a structured array one by one, the
        objects of an object array each by ``zero``; bools, strings and dates are kept."""
        if a.dtype.names is not None:
            parent = self.path
            for name in a.dtype.names:
                self.path = ((name,), parent)
                self._zero_in_place(a[name])
            self.path = parent
        elif a.dtype.kind in "iufc":
            a[...] = 0
        elif a.dtype.kind == "O":
            for index in np.ndindex(a.shape):
                a[index] = self.item(a[index], f"[{', '.join(map(str, index))}]")

    def _record(self, x: np.void) -> np.void:
        key = id(x)
        if key in self.memo:
            return self.memo[key][1]
        box = np.empty((), dtype=x.dtype)   # np.array(x) would view x's own memory
        box[()] = x
        self._zero_in_place(box)
        return self._made(key, x, box[()])

    # -- Python containers and objects ---------------------------------------------------------

    def _tuple(self, x: tuple) -> tuple:
        key = id(x)
        if key in self.memo:
            return self.memo[key][1]
        # Made at once from its items' zeros: a tuple cannot reach itself except through a
        # mutable container, and containers are filled later, from the work list.
        items = [self.item(v, (i,)) for i, v in enumerate(x)]
        cls = type(x)
        if cls is tuple:
            out = tuple(items)
        elif hasattr(cls, "_fields"):
            out = cls._make(items)
        else:
            out = cls(items)
        return self._made(key, x, out)

    def _list(self, x: list) -> list:
        out = copy.copy(x)

        def fill() -> None:
            item = self.item
            out[:] = [0.0 if type(v) is float else item(v, (i,)) for i, v in enumerate(x)]

        return self._made(id(x), x, out, fill)

    def _dict(self, x: dict) -> dict:
        out = copy.copy(x)                  # same class, keys and order (and default_factory)

        def fill() -> None:
            for k, v in x.items():
                out[k] = 0.0 if type(v) is float else self.item(v, (k,))

        return self._made(id(x), x, out, fill)

    def _object(self, x: Any) -> Any:
        slots = _slot_names(type(x))
        if (isinstance(x, _NOT_DATA) or isinstance(x, Dispatcher)
                or not (hasattr(x, "__dict__") or slots)):
            raise self._unzeroable(x)
        out = copy.copy(x)                  # copy's reduce protocol: no __init__ call
        if out is x:
            raise self._unzeroable(x)

        def fill() -> None:
            if hasattr(x, "__dict__"):
                attrs = vars(out)           # written directly: no __setattr__, frozen or not
                for name, value in vars(x).items():
                    attrs[name] = self.item(value, f".{name}")
            for name in slots:
                if hasattr(x, name):
                    object.__setattr__(out, name, self.item(getattr(x, name), f".{name}"))

        return self._made(id(x), x, out, fill)

    # -- Numba containers and jitclass instances -----------------------------------------------

    def _typed_list(self, x: Any) -> Any:
        if not x._typed:                    # List() before its first append has no type yet
            return List()
        key = ("typed", x._opaque.data)
        if key in self.memo:
            return self.memo[key][1]
        item_type = numba.typeof(x).item_type
        out = List.empty_list(item_type, allocated=max(len(x), 1))
        if isinstance(item_type, types.Number):
            out.extend(np.zeros(len(x), dtype=as_dtype(item_type)))   # one compiled call
            return self._made(key, x, out)
        if isinstance(item_type, (types.Boolean, types.UnicodeType)):
            out.extend(x)
            return self._made(key, x, out)

        def fill() -> None:
            for i, v in enumerate(x):
                out.append(self.item(v, (i,)))

        return self._made(key, x, out, fill)

    def _typed_dict(self, x: Any) -> Any:
        key = ("typed", x._opaque.data)
        if key in self.memo:
            return self.memo[key][1]
        dict_type = numba.typeof(x)
        out = Dict.empty(dict_type.key_type, dict_type.value_type)

        def fill() -> None:
            for k, v in x.items():
                out[k] = self.item(v, (k,))

        return self._made(key, x, out, fill)

    def _jitclass(self, x: Any) -> Any:
        key = ("jitclass", _instance_data(x))
        if key in self.memo:
            return self.memo[key][1]
        ops = _jitclass_ops(type(x)._numba_type_)
        out = ops.allocate()

        def fill() -> None:
            ops.store(out, tuple(self.item(getattr(x, name), step)
                                 for name, step in zip(ops.fields, ops.steps)))

        return self._made(key, x, out, fill)


def _slot_names(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and name not in names:
                names.append(name)
    return names


def _instance_data(box: Any) -> int:
    """The address of a jitclass instance's data: the same for every Python object Numba
    boxes for that instance."""
    return ctypes.c_void_p.from_address(id(box) + _box.box_dataptr_offset).value


# -- compiled helpers, one pair per jitclass ---------------------------------------------------

@dataclass(frozen=True)
class _JitclassOps:
    fields: tuple[str, ...]
    steps: tuple[str, ...]               # ".name" for each field, for error messages
    allocate: Callable[[], Any]          # a new instance, every field null, no __init__ run
    store: Callable[[Any, tuple], None]  # store(instance, field values in `fields` order)


_OPS: dict[Any, _JitclassOps] = {}


def _jitclass_ops(instance_type: Any) -> _JitclassOps:
    ops = _OPS.get(instance_type)
    if ops is None:
        ops = _OPS[instance_type] = _build_ops(instance_type)
    return ops


def _build_ops(instance_type: Any) -> _JitclassOps:
    try:
        return _compile_ops(instance_type)
    except (numba.core.errors.NumbaError, NotImplementedError) as err:
        raise UnsupportedError(
            f"make_zero cannot copy instances of jitclass {instance_type.classname}: Numba "
            f"could not compile a store to its fields ({type(err).__name__}: "
            f"{str(err).strip().splitlines()[0]}); build its zero with the class's "
            f"constructor instead") from err


def _compile_ops(instance_type: Any) -> _JitclassOps:
    fields = tuple(instance_type.struct)
    allocate_intrinsic = _allocator(instance_type)

    @numba.njit
    def allocate():
        return allocate_intrinsic()

    @numba.njit
    def store(instance, values):
        _store_fields(instance, values)

    allocate.compile(())
    # The compiled entry point converts each Python value to its field's exact type (None to
    # an optional field, a Python int to an int32 one): one compile serves every call.
    entry = store.compile((instance_type, types.Tuple(list(instance_type.struct.values()))))
    return _JitclassOps(fields, tuple(f".{name}" for name in fields), allocate, entry)


def _allocator(instance_type: Any):
    """An intrinsic that allocates an instance of ``instance_type`` as the jitclass
    constructor does (NRT memory with the class's destructor, every byte zero) but never
    calls ``__init__``. The null fields are valid: the destructor skips null references."""
    @intrinsic
    def allocate(typingctx):
        def codegen(context, builder, sig, args):
            _define_deferred(context, instance_type, set())
            data_type = context.get_data_type(instance_type.get_data_type())
            size = context.get_constant(types.uintp, context.get_abi_sizeof(data_type))
            meminfo = context.nrt.meminfo_alloc_dtor(
                builder, size, imp_dtor(context, builder.module, instance_type))
            data = builder.bitcast(context.nrt.meminfo_data(builder, meminfo),
                                   data_type.as_pointer())
            builder.store(cgutils.get_null_value(data_type), data)
            instance = context.make_helper(builder, instance_type)
            instance.meminfo = meminfo
            instance.data = data
            return instance._getvalue()

        return instance_type(), codegen

    return allocate


def _define_deferred(context: Any, ty: Any, seen: set) -> None:
    """Give every deferred type inside ``ty`` (a linked list's ``next``) its LLVM body, which
    Numba otherwise sets only once some code has used it; the struct cannot be sized before."""
    if ty in seen:
        return
    seen.add(ty)
    if isinstance(ty, types.DeferredType):
        context.data_model_manager[ty].make_uninitialized()
        _define_deferred(context, ty.get(), seen)
    elif isinstance(ty, types.Optional):
        _define_deferred(context, ty.type, seen)
    elif isinstance(ty, types.BaseTuple):
        for member in ty.types:
            _define_deferred(context, member, seen)
    elif isinstance(ty, types.ClassInstanceType):
        for member in ty.struct.values():
            _define_deferred(context, member, seen)


@intrinsic
def _store_fields(typingctx, instance, values):
    """``_store_fields(instance, values)`` stores ``values[i]`` into the i-th field of a
    jitclass instance through the jitclass setter (which increfs the new value and decrefs the
    old one, a no-op on the allocator's null fields)."""
    names = list(instance.struct)

    def codegen(context, builder, sig, args):
        instance_type, values_type = sig.args
        for i, name in enumerate(names):
            field_type = instance_type.struct[name]
            value = builder.extract_value(args[1], i)
            value = context.cast(builder, value, values_type.types[i], field_type)
            setter = context.get_setattr(name, signature(types.none, instance_type,
                                                         field_type))
            setter(builder, (args[0], value))
        return context.get_dummy_value()

    return types.none(instance, values), codegen
