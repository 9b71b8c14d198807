"""What the on-disk derivative cache needs to know about ``@njit`` code.

A second process must find a derivative without compiling the primal (loading the primal from
Numba's own cache gives machine code, not the IR pyzyme differentiates, so capturing it would
mean compiling it again). So the cache identity of a function is what Numba's own cache index
uses, read off the Python function, plus what Numba's index leaves out:

- the bytecode and closure values of the function (Numba's index key);
- the modification time and size of its source file (Numba drops its whole index when they
  change), and the same for every ``@njit`` function it reaches through its globals, in any
  module (Numba's cache of a caller goes stale when a callee in another file changes; ours
  does not);
- the values of the plain global constants it reads (Numba freezes them into the code);
- Numba's compilation options of the function and the global switches that change its IR.

When the primal's IR *is* at hand (the function was compiled in this process while pyzyme's
hook watched), :func:`ir_fingerprint` hashes it, and an entry made from different IR is not
used.

A derivative is stored as its plan (what the API layer keeps in memory): :func:`plan_state`
and :func:`rebuild_plan`, with its ``@njit`` wrappers
(:func:`~pyzyme.frontends.numba.njit_callable`) as object code (:func:`wrapper_state`,
:func:`rebuild_wrapper`), so a second process compiles nothing, not even Python.
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import hashlib
import os
import re
import types as pytypes
from collections.abc import Sequence

import llvmlite.binding as llvm
import numba
import numpy as np
from numba.core import compiler, config
from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher
from numba.core.environment import Environment
from numba.core.registry import cpu_target
from numba.core.serialize import dumps

from pyzyme.errors import PyzymeError, VerifyError
from pyzyme.frontends.numba import bridge, hook
from pyzyme.runtime import jit, modules

__all__ = ["cache_location", "function_identity", "ir_fingerprint", "plan_state", "rebuild_plan",
           "rebuild_wrapper", "wrapper_state"]

# Numba's switches that change the IR of a function compiled under them.
_NUMBA_SWITCHES = ("OPT", "LOOP_VECTORIZE", "SLP_VECTORIZE", "ENABLE_AVX", "BOUNDSCHECK",
                   "FASTMATH", "DEBUGINFO_DEFAULT", "CPU_NAME", "CPU_FEATURES")
_SIMPLE = (int, float, complex, bool, str, bytes, type(None), np.number, np.bool_)


def cache_location(dispatcher) -> tuple[str, str] | None:
    """``(directory, file name base)`` of Numba's cache for ``dispatcher``, or None when it
    was not made with ``cache=True`` (then nothing is cached on disk, as in Numba).

    Examples
    --------
    >>> @numba.njit
    ... def f(x):
    ...     return x
    >>> cache_location(f) is None
    True
    """
    cache = getattr(dispatcher, "_cache", None)
    if not isinstance(cache, FunctionCache):
        return None
    return cache.cache_path, cache._impl.filename_base


def function_identity(dispatcher, primal_types: Sequence) -> str:
    """Text that changes whenever the code Numba compiles for ``dispatcher`` at
    ``primal_types`` may change (see the module docstring); cheap, compiles nothing.

    Examples
    --------
    >>> @numba.njit
    ... def f(x):
    ...     return x * SCALE
    >>> SCALE = 2.0
    >>> "SCALE = 2.0" in function_identity(f, (numba.float64,))
    True
    >>> f.signatures      # nothing was compiled
    []
    """
    codegen = cpu_target.target_context.codegen()
    py = dispatcher.py_func
    # What Numba's own index key (Cache._index_key) holds, computed the same way.
    closure = dumps(tuple(c.cell_contents for c in py.__closure__)) if py.__closure__ else b""
    parts = [repr(tuple(primal_types)), repr(codegen.magic_tuple()),
             hashlib.sha256(closure).hexdigest(),
             repr(_options(dispatcher)),
             repr(tuple(getattr(config, name, None) for name in _NUMBA_SWITCHES))]
    seen: set[int] = set()
    _describe_function(dispatcher.py_func, parts, seen)
    return "\n".join(parts)


def _options(dispatcher) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in dispatcher.targetoptions.items()
                        if k != "cache"))


def _describe_function(py_func, parts: list[str], seen: set[int]) -> None:
    """Append what ``py_func``'s compiled code depends on: its source file's stamp, and the
    globals its code reads, recursively through the ``@njit`` functions among them."""
    if id(py_func) in seen:
        return
    seen.add(id(py_func))
    code = py_func.__code__
    parts.append(f"function {py_func.__module__}.{py_func.__qualname__} "
                 f"{hashlib.sha256(code.co_code).hexdigest()} {_stamp(code.co_filename)}")
    for name in sorted(_global_names(code)):
        if name not in py_func.__globals__:
            continue
        value = py_func.__globals__[name]
        parts.append(f"  {name} = {_describe_value(value, parts, seen)}")
    for cell in py_func.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        _describe_value(value, parts, seen)


def _global_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= _global_names(const)
    return names


def _describe_value(value, parts: list[str], seen: set[int]) -> str:
    if isinstance(value, Dispatcher):
        _describe_function(value.py_func, parts, seen)
        return f"@njit {value.py_func.__module__}.{value.py_func.__qualname__}"
    if isinstance(value, np.ndarray):
        data = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return f"ndarray {value.dtype} {value.shape} {data}"
    if isinstance(value, _SIMPLE):
        return repr(value)
    if isinstance(value, tuple) and all(isinstance(v, _SIMPLE) for v in value):
        return repr(value)
    if isinstance(value, pytypes.ModuleType):
        return f"module {value.__name__}"
    methods = getattr(getattr(value, "class_type", None), "jit_methods", None)
    if isinstance(methods, dict):  # a jitclass: its methods are compiled into callers
        for method in methods.values():
            py = getattr(method, "py_func", method)
            if hasattr(py, "__code__"):
                _describe_function(py, parts, seen)
    code = getattr(value, "__code__", None)
    if isinstance(code, pytypes.CodeType):  # overloads, intrinsics: name and bytecode
        digest = hashlib.sha256(code.co_code).hexdigest()
        return f"{type(value).__name__} {getattr(value, '__qualname__', '?')} {digest}"
    return f"{type(value).__module__}.{type(value).__qualname__}"


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "(no file)"
    return f"{st.st_mtime_ns} {st.st_size}"


# Numba's per-process function counter appears in mangled names as an ABI tag (B2v13).
_COUNTER = re.compile(r"B\d+v\d+")


def ir_fingerprint(dispatcher, primal_types: Sequence) -> str | None:
    """A hash of the IR Numba made of ``dispatcher`` at ``primal_types`` and of everything it
    links, before module optimization; None unless that IR was seen in this process (the
    function was compiled here, not loaded from Numba's cache, while pyzyme's hook watched).

    Examples
    --------
    >>> @numba.njit
    ... def f(x):
    ...     return x + 1.0
    >>> ir_fingerprint(f, (numba.float64,)) is None     # not compiled yet
    True
    >>> f(1.0)
    2.0
    >>> len(ir_fingerprint(f, (numba.float64,)))
    64
    """
    from pyzyme.frontends.numba.capture import _linked_libraries

    cres = dispatcher.overloads.get(tuple(primal_types))
    if cres is None or not hook.has_prelink(cres.library):
        return None
    digest = hashlib.sha256()
    for library in [cres.library, *_linked_libraries(cres.library)]:
        module = hook.prelink_module(library)
        text = "(not seen)" if module is None else str(module)
        text = re.sub(r"^; ModuleID = .*$", "", text, flags=re.M)
        digest.update(_COUNTER.sub("Bv", text).encode())
    return digest.hexdigest()


def process_bound(dispatcher, primal_types: Sequence) -> bool:
    """Whether ``dispatcher``'s code at ``primal_types`` calls into this process through
    addresses (ctypes functions, as numba-mpi calls MPI: Numba's "dynamic globals"). Numba
    does not cache such code; nor does pyzyme its derivatives, whose MPI handles and symbols
    are this process's."""
    cres = dispatcher.overloads.get(tuple(primal_types))
    return cres is not None and bool(getattr(cres.library, "has_dynamic_globals", False))


def wrapper_state(wrapper) -> tuple:
    """An :func:`~pyzyme.frontends.numba.njit_callable` wrapper as plain data for
    :func:`rebuild_wrapper`, stored so that loading it compiles no Python (the first Numba
    compilation of a process costs a second of setting up Numba's typing).

    A wrapper that links the derivative into itself is stored as Numba stores a compiled
    function: object code, plus the bitcode callers link (which holds the derivative). One
    that calls the derivative through its address stores the derivative's object code and its
    own small module, whose address is replaced by the new one when it is loaded.

    Examples
    --------
    >>> from pyzyme.runtime import compile_module
    >>> cm = compile_module("define double @__pyzyme_doc_half(double %x) {\\n"
    ...                     "  %y = fmul double %x, 0.5\\n  ret double %y\\n}")
    >>> half = bridge.njit_callable(cm, "__pyzyme_doc_half", "float64(float64)",
    ...                             convention="c")
    >>> wrapper_state(half)[0]
    'linked'
    """
    native = bridge.native_call(wrapper)
    if native is None:
        raise PyzymeError(f"{wrapper!r} was not made by njit_callable")
    cres = bridge.ensure_compiled(wrapper).overloads[tuple(native.signature.args)]
    fndesc = copy.copy(cres.fndesc)
    # The generated wrapper's globals (the intrinsic, the compiled module) stay behind.
    fndesc.global_dict = fndesc.typemap = fndesc.calltypes = None
    numba_part = (fndesc, cres.signature, str(cres.type_annotation))
    if native.linked:
        if cres.library.has_dynamic_globals:
            raise PyzymeError("the wrapper refers to addresses of this process")
        libdata = cres.library.serialize_using_object_code()
        return ("linked", native.symbol, native.arg_names, native.signature,
                (libdata, numba_part))
    text = str(cres.library._get_module_for_linking())
    address = native.compiled.address(native.symbol)
    return ("address", native.symbol, native.arg_names, native.signature,
            (jit.serialize(native.compiled), text, address, numba_part))


def rebuild_wrapper(state: tuple, compile_key: str | None = None):
    """The wrapper :func:`wrapper_state` stored, made without compiling the derivative.

    Raises
    ------
    VerifyError
        If the stored code uses a symbol this process does not define, or defines one it
        already has (a caller then builds the derivative afresh).

    Examples
    --------
    >>> from pyzyme.runtime import compile_module
    >>> cm = compile_module("define double @__pyzyme_doc_quarter(double %x) {\\n"
    ...                     "  %y = fmul double %x, 0.25\\n  ret double %y\\n}")
    >>> quarter = bridge.njit_callable(cm, "__pyzyme_doc_quarter", "float64(float64)",
    ...                                convention="c")
    >>> state = wrapper_state(quarter)     # loaded in another process; in this one, where
    >>> rebuild_wrapper(state)             # its symbols exist, it is refused
    Traceback (most recent call last):
    ...
    pyzyme.errors.VerifyError: the stored wrapper's symbols [...] are already defined
    """
    kind, symbol, names, signature, data = state
    fndesc = data[-1][0]
    engine = cpu_target.target_context.codegen()._engine
    taken = [n for n in (fndesc.mangled_name, fndesc.llvm_cpython_wrapper_name)
             if engine.is_symbol_defined(n)]
    if taken:  # loaded before in this process (a reloaded module): two definitions of a name
        raise VerifyError(f"the stored wrapper's symbols {taken} are already defined")
    if kind == "address":
        serialized, text, old, numba_part = data
        compiled = jit.load_serialized(serialized, compile_key)
        libdata = _readdressed(text, old, compiled.address(symbol), numba_part[0])
    elif kind == "linked":
        libdata, numba_part = data
        jit.check_resolvable(llvm.parse_bitcode(libdata[2][1]))
    else:
        raise VerifyError(f"unknown kind of stored wrapper {kind!r}")
    _, cres_signature, typeann = numba_part
    context = cpu_target.target_context
    cres = compiler.CompileResult._rebuild(context, libdata, fndesc,
                                           Environment.from_fndesc(fndesc), cres_signature,
                                           False, (), typeann, [], [])
    forwarder = bridge._forwarder(bridge._identifier(symbol), list(names), _loaded_target)
    wrapper = numba.njit(forwarder)
    # As Numba's Dispatcher.compile does with an overload from its cache: @njit callers
    # lower calls of the wrapper to this code.
    context.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
    wrapper.add_overload(cres)
    wrapper.disable_compile()
    return wrapper


def _readdressed(text: str, old: int, new: int, fndesc) -> tuple:
    """The wrapper module ``text`` calling the derivative at address ``new`` instead of
    ``old``, as a Numba library serialized as bitcode (compiled when loaded: it is small)."""
    # Numba's dynamic address: @"numba.dynamic.globals.<hex>" = linkonce global ptr
    # inttoptr (i64 <decimal> to ptr); a unique name per address, so both are replaced.
    name_old, name_new = f"numba.dynamic.globals.{old:x}", f"numba.dynamic.globals.{new:x}"
    value_old, value_new = f"inttoptr (i64 {old} to ptr)", f"inttoptr (i64 {new} to ptr)"
    if text.count(value_old) != 1 or name_old not in text:
        raise VerifyError("the stored wrapper does not hold the derivative's address once")
    module = modules.parse(text.replace(value_old, value_new).replace(name_old, name_new),
                           what="stored wrapper module")
    # The module was stored as callers link it (definitions linkonce_odr); the wrapper's own
    # functions are the library's entry points again.
    for name in (fndesc.mangled_name, fndesc.llvm_cpython_wrapper_name):
        module.get_function(name).linkage = "external"
    jit.check_resolvable(module)
    return (fndesc.qualname, "bitcode", module.as_bitcode())


def plan_state(plan) -> tuple:
    """A plan (a frozen dataclass of compiled code and plain data, as the API layer keeps
    them) as plain data for :func:`rebuild_plan`: its :func:`njit_callable` wrappers by
    :func:`wrapper_state`, compiled modules by :func:`pyzyme.runtime.jit.serialize`, ctypes
    functions of a compiled module by symbol, everything else as it is.

    Examples
    --------
    >>> from pyzyme.runtime import compile_module
    >>> @dataclasses.dataclass(frozen=True)
    ... class Plan:
    ...     function: object
    ...     ir_text: str
    >>> text = ("define double @__pyzyme_doc_sixth(double %x) {\\n"
    ...         "  %y = fmul double %x, 6.0\\n  ret double %y\\n}")
    >>> f = bridge.njit_callable(compile_module(text), "__pyzyme_doc_sixth",
    ...                          "float64(float64)", convention="c")
    >>> [(name, kind) for name, kind, _ in plan_state(Plan(f, text))[1]]
    [('function', 'wrapper'), ('ir_text', 'value')]
    """
    fields = []
    for field in dataclasses.fields(plan):
        value = getattr(plan, field.name)
        if isinstance(value, Dispatcher):
            fields.append((field.name, "wrapper", wrapper_state(value)))
        elif isinstance(value, jit.CompiledModule):
            fields.append((field.name, "compiled", jit.serialize(value)))
        elif isinstance(value, ctypes._CFuncPtr):
            fields.append((field.name, "cfunc", _cfunc_state(value)))
        else:
            fields.append((field.name, "value", value))
    return (type(plan), fields)


def _cfunc_state(fn) -> tuple:
    compiled = getattr(fn, "_keep", None)
    if not isinstance(compiled, jit.CompiledModule):
        raise PyzymeError("a ctypes function of no compiled module cannot be stored")
    address = ctypes.cast(fn, ctypes.c_void_p).value
    symbol = next((n for n in compiled.functions if compiled.address(n) == address), None)
    if symbol is None:
        raise PyzymeError("a ctypes function not at a function of its module")
    return (symbol, fn.restype, tuple(fn.argtypes), jit.serialize(compiled))


def rebuild_plan(state: tuple, compile_key: str | None = None):
    """The plan :func:`plan_state` stored, its code loaded (compiled modules first, so that
    wrappers and ctypes functions of the same module find it loaded once).

    Raises
    ------
    VerifyError
        As :func:`rebuild_wrapper`.

    Examples
    --------
    >>> from pyzyme.runtime import compile_module
    >>> @dataclasses.dataclass(frozen=True)
    ... class Plan:
    ...     compiled: object
    ...     ir_text: str
    >>> text = ("define double @__pyzyme_doc_seventh(double %x) {\\n"
    ...         "  %y = fmul double %x, 7.0\\n  ret double %y\\n}")
    >>> cm = compile_module(text)
    >>> plan = rebuild_plan(plan_state(Plan(cm, text)), jit.compile_key(text))
    >>> plan.compiled is cm      # in this process the module is loaded already
    True
    """
    cls, fields = state
    values = {}
    order = {"compiled": 0, "cfunc": 1, "wrapper": 2, "value": 3}
    for name, kind, data in sorted(fields, key=lambda f: order[f[1]]):
        if kind == "compiled":
            values[name] = jit.load_serialized(data, compile_key)
        elif kind == "cfunc":
            symbol, restype, argtypes, serialized = data
            compiled = jit.load_serialized(serialized, compile_key)
            fn = ctypes.CFUNCTYPE(restype, *argtypes)(compiled.address(symbol))
            fn._keep = compiled  # the code lives as long as the function is used
            values[name] = fn
        elif kind == "wrapper":
            values[name] = rebuild_wrapper(data, compile_key)
        elif kind == "value":
            values[name] = data
        else:
            raise VerifyError(f"unknown kind of stored plan field {kind!r}")
    return cls(**values)


def _loaded_target(*args):
    raise PyzymeError("a derivative loaded from the on-disk cache cannot be compiled for other "
                      "argument types; call autodiff again for them")


def state_bytes(state) -> bytes:
    """``state`` pickled as Numba pickles what it caches (Numba types included).

    Examples
    --------
    >>> import pickle
    >>> print(pickle.loads(state_bytes((numba.float64[:], "x")))[0])
    array(float64, 1d, A)
    """
    return dumps(state)
