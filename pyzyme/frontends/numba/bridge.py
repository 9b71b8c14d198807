"""Call compiled native code from Python and from ``@njit`` code, through Numba.

:func:`njit_callable` turns a function of a :class:`~pyzyme.runtime.CompiledModule` into an
``@njit`` function. Behind it is a Numba ``@intrinsic`` whose code generation links the compiled
library into the caller and emits a direct call, so:

- from Python, a call costs one Numba dispatch (about 0.1-0.3 us), Numba unboxing the arguments
  exactly as for any ``@njit`` function;
- from ``@njit`` code, a small compiled module is linked into the caller's module and LLVM may
  inline it: no Python, no function pointer, no call overhead; a large one is called directly
  (one call instruction), so its code is optimized and generated once, not once per caller;
- with Numba's calling convention, status codes propagate as in Numba's own calls, so an
  exception raised in the native code (an ``IndexError`` from a bounds check) reaches the caller,
  and Python, intact.

The wrapper compiles for its signature when first called or typed, not when made: the ``@njit``
glue of ``grad``, ``jacrev`` and ``jacfwd`` calls the intrinsic itself (:func:`njit_target`), so
a derivative used only from ``@njit`` code is never compiled into a wrapper of its own (one more
round of LLVM's optimization and code generation of it: 0.05-0.15 s of each first call).
"""

from __future__ import annotations

import keyword
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir as llir
from numba.core import cgutils, imputils, sigutils, typeinfer, types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher
from numba.core.registry import CPUDispatcher
from numba.core.typing import Signature
from numba.extending import intrinsic

from pyzyme.errors import UnsupportedError
from pyzyme.runtime.jit import CompiledModule
from pyzyme.runtime.raising_blocks import EXCEPTION_OUTPUT

CONVENTIONS = ("numba", "c")
_TARGET = "__pyzyme_target__"
_RESERVED = ("typingctx", _TARGET)


def njit_callable(
    compiled: CompiledModule,
    symbol: str,
    signature: Signature | str,
    *,
    convention: str = "numba",
    arg_names: Sequence[str] | None = None,
) -> Dispatcher:
    """An ``@njit`` function that calls ``symbol`` of ``compiled``.

    Parameters
    ----------
    compiled
        The module holding the function.
    symbol
        Name of an externally visible function of ``compiled``.
    signature
        Its Numba signature, e.g. ``float64(float64[::1], int64)``.
    convention
        ``"numba"``: the function has Numba's native calling convention,
        ``i32 (ptr retptr, ptr excinfo, <flattened arguments>)`` (see
        :class:`~pyzyme.frontends.numba.AbiMap`); arrays, tuples, records, an exception status.
        ``"c"``: a plain C function of scalars, e.g. ``double (double, i64)``.
    arg_names
        Parameter names of the returned function (default ``a0, a1, ...``).

    Returns
    -------
    numba.core.dispatcher.Dispatcher
        Compiled for ``signature`` (when first called or typed); callable from Python, and from
        ``@njit`` code as a global or an argument.

    Examples
    --------
    >>> from pyzyme.runtime import compile_module
    >>> cm = compile_module("define double @__pyzyme_doc_cube(double %x) {\\n"
    ...   "  %s = fmul double %x, %x\\n  %c = fmul double %s, %x\\n  ret double %c\\n}")
    >>> cube = njit_callable(cm, "__pyzyme_doc_cube", "float64(float64)", convention="c")
    >>> cube(3.0)
    27.0
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}; got {convention!r}")
    sig = _full_signature(signature)
    compiled.require(symbol)  # fail now, with the list of defined functions, if absent
    names = list(arg_names) if arg_names is not None else [f"a{i}" for i in range(len(sig.args))]
    valid = all(n.isidentifier() and not keyword.iskeyword(n) and n not in _RESERVED for n in names)
    if len(names) != len(sig.args) or len(set(names)) != len(names) or not valid:
        raise ValueError(f"need {len(sig.args)} distinct identifiers as arg_names; got {names!r}")
    if convention == "c":
        _check_c_signature(sig, symbol)
    emit = _emit_numba_call if convention == "numba" else _emit_c_call
    link = _worth_linking(compiled)
    call = _make_intrinsic(compiled, symbol, sig, names, emit, link)
    wrapper = _make_wrapper(symbol, names, call, sig)
    _NATIVE[wrapper] = NativeCall(compiled, symbol, sig, tuple(names), convention, link)
    _INTRINSIC[wrapper] = call
    return wrapper


def njit_target(wrapper):
    """What ``@njit`` glue calls for ``wrapper``: the intrinsic behind an :func:`njit_callable`
    wrapper (the derivative's call emitted in the glue itself, its module linked there, with no
    wrapper compiled), else ``wrapper`` (one loaded from the disk cache, any other function)."""
    try:
        return _INTRINSIC.get(wrapper, wrapper)
    except TypeError:  # not weakly referenceable: no wrapper of ours
        return wrapper


def signature_of(wrapper) -> Signature:
    """The signature ``wrapper`` (an :func:`njit_callable` wrapper, or one loaded from the disk
    cache) takes, without compiling it."""
    native = native_call(wrapper)
    return native.signature if native is not None else wrapper.nopython_signatures[0]


def ensure_compiled(wrapper) -> Dispatcher:
    """``wrapper``, compiled for its signature if it was not yet (its ``overloads`` read)."""
    if isinstance(wrapper, _Wrapper):
        wrapper.ensure_compiled()
    return wrapper


def native_call(wrapper) -> NativeCall | None:
    """What the :func:`njit_callable` wrapper ``wrapper`` calls (None for any other object):
    what :mod:`pyzyme.frontends.numba.persist` needs to store the wrapper and make it again."""
    try:
        return _NATIVE.get(wrapper)
    except TypeError:  # not weakly referenceable: no wrapper of ours
        return None


@dataclass(frozen=True, eq=False)
class NativeCall:
    """What an :func:`njit_callable` wrapper calls: ``symbol`` of ``compiled``, and whether
    its module is linked into callers (else it is called through its address)."""

    compiled: CompiledModule
    symbol: str
    signature: Signature
    arg_names: tuple[str, ...]
    convention: str
    linked: bool


# wrapper -> what it calls; weak keys, as the wrappers' callers own them
_NATIVE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# wrapper -> the intrinsic it forwards to (njit_target)
_INTRINSIC: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# address -> (compiled module, symbol) of each function @njit code calls through its address;
# compiled modules live as long as the process (MCJIT cannot unload code), so do the entries
_ADDRESSED: dict[int, tuple[CompiledModule, str]] = {}


def addressed_function(address: int) -> tuple[CompiledModule, str] | None:
    """``(compiled module, symbol)`` of the function that :func:`njit_callable` wrappers call at
    ``address`` (a module too large to link into callers), or None: capture links its IR in
    place of the address, so that an ``@njit`` caller of a derivative can be differentiated."""
    return _ADDRESSED.get(address)


def _full_signature(signature: Signature | str) -> Signature:
    argtypes, return_type = sigutils.normalize_signature(signature)
    if return_type is None:
        raise ValueError(
            f"the signature needs a return type, e.g. 'float64(float64)'; got {signature!r}"
        )
    return return_type(*argtypes)


def _make_intrinsic(compiled: CompiledModule, symbol: str, sig: Signature, names: list[str], emit,
                    link: bool):
    def codegen(context, builder, call_sig, args):
        pointer = None
        if link:
            # Linking (not just declaring) lets LLVM inline the callee into the caller.
            context.active_code_library.add_linking_library(compiled.library)
        else:
            # A large module is called through its address, not linked: every @njit layer
            # that linked it would optimize and generate its code again (seconds each). As a
            # dynamic address it also tells Numba not to cache the caller, whose machine code
            # would name an address of this process.
            address = compiled.address(symbol)
            _ADDRESSED[address] = (compiled, symbol)
            pointer = context.add_dynamic_addr(builder, address, symbol)
        args = [context.cast(builder, v, a, f) for v, a, f in zip(args, call_sig.args, sig.args)]
        return emit(context, builder, symbol, sig, args, pointer)

    def define(typingctx, *args):
        if all(
            typingctx.can_convert(actual, formal) is not None
            for actual, formal in zip(args, sig.args)
        ):
            return sig.return_type(*args), codegen
        return None

    return intrinsic(_forwarder(f"call_{_identifier(symbol)}", ["typingctx", *names], define))


# Above this many instructions a compiled module is called from @njit code rather than linked
# into it: inlining buys nothing next to a body this size, and each linking caller pays the
# module's optimization and code generation again. K5's gradient (1,283 instructions), linked
# into the wrapper and into an @njit caller of grad(f), took 2.3 s to its first call, against
# 1.4 s called; its time per call is the same either way. Below the limit sit the derivatives
# of small functions, where inlining into the caller is what makes them free (K1's: 78).
_LINK_LIMIT = 400


def _worth_linking(compiled: CompiledModule) -> bool:
    # Counted in the module's text: one call into LLVM, where walking its instructions
    # through llvmlite costs one per instruction (a tenth of a second for GMM's gradient).
    text = str(compiled.library._get_module_for_linking())
    size = text.count("\n  ") - text.count("\n  ;")
    return size <= _LINK_LIMIT


def _callee(builder, fnty, symbol: str, pointer):
    """The function ``symbol``, declared, or the function at ``pointer``."""
    if pointer is None:
        return cgutils.get_or_insert_function(builder.module, fnty, symbol)
    return builder.bitcast(pointer, fnty.as_pointer())


def _emit_numba_call(context, builder, symbol: str, sig: Signature, args, pointer=None):
    """A call as Numba emits one to another ``@njit`` function (BaseContext.call_internal)."""
    fnty = context.call_conv.get_function_type(sig.return_type, sig.args)
    fn = _callee(builder, fnty, symbol, pointer)
    status, result = context.call_conv.call_function(builder, fn, sig.return_type, sig.args, args)
    with cgutils.if_unlikely(builder, status.is_error):
        _propagate(context, builder, status)
    return imputils.fix_returning_optional(context, builder, sig, status, result)


def _propagate(context, builder, status) -> None:
    """Numba's ``return_status_propagate``, with the store of the callee's exception marked
    as a raise (:mod:`~pyzyme.runtime.raising_blocks`): unmarked, Numba's reference-count
    pruner took the path for a return without decrefs and kept the wrapper's count pair on
    every array argument, six atomic operations per call of a derivative of three arrays
    (GradBench's ba calls two per observation). The wrapper holds no ``try`` block, so the
    error always returns."""
    call_conv = context.call_conv
    if not hasattr(call_conv, "_get_excinfo_argument"):  # a convention without excinfo
        call_conv.return_status_propagate(builder, status)
        return
    excinfo = call_conv._get_excinfo_argument(builder.function)
    store = builder.store(status.excinfoptr, excinfo)
    store.set_metadata(EXCEPTION_OUTPUT, builder.module.add_metadata([llir.IntType(1)(1)]))
    call_conv._return_errcode_raw(builder, status.code)


def _emit_c_call(context, builder, symbol: str, sig: Signature, args, pointer=None):
    returns_none = isinstance(sig.return_type, types.NoneType)
    restype = llir.VoidType() if returns_none else context.get_value_type(sig.return_type)
    fnty = llir.FunctionType(restype, [context.get_value_type(t) for t in sig.args])
    fn = _callee(builder, fnty, symbol, pointer)
    result = builder.call(fn, args)
    return context.get_dummy_value() if returns_none else result


def _check_c_signature(sig: Signature, symbol: str) -> None:
    scalar = (types.Integer, types.Float, types.Boolean)
    bad = [t for t in sig.args if not isinstance(t, scalar)]
    if not isinstance(sig.return_type, (*scalar, types.NoneType)):
        bad.append(sig.return_type)
    if bad:
        raise UnsupportedError(
            f"@{symbol} with the C convention can only take and return numbers and booleans; "
            f"got {', '.join(map(str, bad))}",
            hint="compile the function in Numba's calling convention and pass convention='numba'",
        )


class _Wrapper(CPUDispatcher):
    """An ``@njit`` dispatcher made for one signature, compiled when first needed: as
    ``numba.njit(signature)`` compiles it at once and then compiles nothing else (arguments of
    other types are converted to it, or refused)."""

    def __init__(self, *args, signature: Signature | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pending = signature

    def ensure_compiled(self) -> None:
        if self._pending is None:
            return
        with global_compiler_lock:  # one thread compiles; the others find it done
            if self._pending is None:
                return
            with typeinfer.register_dispatcher(self):
                self.compile(self._pending.args)
            self.disable_compile()
            self._pending = None

    def _compile_for_args(self, *args, **kws):
        if self._pending is None:
            return super()._compile_for_args(*args, **kws)
        self.ensure_compiled()
        # What the dispatcher calls with the arguments: itself again, now compiled for the
        # signature (the arguments converted to it, or refused, as numba.njit(sig) would).
        return self

    def get_call_template(self, args, kws):
        self.ensure_compiled()
        return super().get_call_template(args, kws)


def _make_wrapper(symbol: str, names: list[str], call, sig: Signature) -> Dispatcher:
    return _Wrapper(py_func=_forwarder(_identifier(symbol), names, call),
                    targetoptions={"nopython": True, "boundscheck": None}, signature=sig)


def _identifier(symbol: str) -> str:
    return re.sub(r"\W", "_", symbol)


def _forwarder(name: str, params: list[str], target):
    """``def name(p0, p1, ...): return target(p0, p1, ...)``.

    Numba reads a function's parameters from its code object (``*args`` would reach lowering as a
    tuple), so the arity is spelled out in generated source.
    """
    joined = ", ".join(params)
    source = f"def {name}({joined}):\n    return {_TARGET}({joined})\n"
    namespace = {_TARGET: target}
    exec(compile(source, f"<pyzyme: {name}>", "exec"), namespace)  # noqa: S102  (our own source)
    return namespace[name]
