"""Compile again, under the capture hook, what Numba compiled without it.

A library finalized before ``import pyzyme`` installed the hook, or loaded from Numba's on-disk
cache (``cache=True``), has no snapshot (:func:`~pyzyme.frontends.numba.hook.prelink_module`):
all Numba keeps of it is its final module, unrolled and vectorized by Numba's O3 and rewritten
by MCJIT's code generation. Differentiating that module would give another derivative than the
same function compiled after the hook (or none: ``shufflevector`` has no adjoint), and so would a
library that merely *links* such a library (a kernel compiled after ``import pyzyme`` calling
one compiled before, or a NumPy implementation Numba compiled for an earlier kernel).

So :func:`capture` compiles such a function again while the hook watches, without touching the
user's dispatcher: a *shadow*, a private dispatcher of the same Python function and options,
compiles the same signature (:func:`fresh`). Inside that compilation (:func:`recompiling`),
every way Numba reuses stale code is redirected to fresh code:

- a call of a dispatcher (an ``@njit`` function, the dispatcher of an ``@overload``
  implementation, a jitclass method) whose overload for the call's types is stale: typing the
  call compiles the dispatcher's shadow, and lowering it asks the dispatcher for its overload
  (``get_overload``, ``get_compile_result``) and gets the shadow's;
- a subroutine Numba compiled once and keeps (``BaseContext.cached_internal_func``): stale
  entries are dropped, so Numba compiles them again (under the hook) when they are used.

A shadow's functions have other mangled names than the user's (Numba numbers each dispatcher);
:func:`original_names` gives the user's name of each, so a captured module names them as a
fresh compilation would (user rules are found by those names).

What no dispatcher or cache of Numba's leads to (a ``@vectorize`` kernel, a ``cfunc``), and a
callee that cannot be compiled again, stay stale; capture then takes Numba's final module of
them, and says so (:attr:`~pyzyme.frontends.numba.capture.Captured.stale_libraries`).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

from numba.core import compiler_lock, sigutils
from numba.core.compiler import CompileResult
from numba.core.dispatcher import Dispatcher, LiftedCode
from numba.core.registry import cpu_target
from numba.core.runtime import rtsys

from pyzyme.frontends.numba import hook

__all__ = ["copy_of", "fresh", "is_stale", "original_names", "recompiling"]


class _Depth(threading.local):
    value = 0


@dataclass
class _Registry:
    """What recompiling has made in this process.

    ``shadows`` maps a dispatcher to its shadow (which lives as long as the dispatcher);
    ``is_shadow`` holds the shadows; ``stale`` remembers :func:`is_stale` of finalized
    libraries (fixed once finalized); ``failed`` maps a dispatcher to the argument types whose
    overload could not be compiled again (e.g. an ``@njit`` wrapper of pyzyme's loaded from
    its disk cache, which forwards to no Python it could compile); ``original_names`` maps a
    shadow's function to the function it stands for, by mangled name.
    """

    shadows: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    is_shadow: weakref.WeakSet = field(default_factory=weakref.WeakSet)
    stale: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    failed: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    original_names: dict[str, str] = field(default_factory=dict)
    depth: _Depth = field(default_factory=_Depth)  # nesting of recompiling() in this thread
    installed: bool = False


_REGISTRY = _Registry()


def is_stale(library) -> bool:
    """Whether ``library``, or a library it links (transitively), was finalized without the hook
    watching. Numba's runtime library does not count: capture regenerates its IR."""
    known = _REGISTRY.stale.get(library)
    if known is not None:
        return known
    stale, seen, todo = False, set(), [library]
    while todo and not stale:
        lib = todo.pop()
        # An unfinalized library is yet to be seen by the hook.
        if id(lib) in seen or lib is rtsys.library or not lib._finalized:
            continue
        seen.add(id(lib))
        stale = not hook.has_prelink(lib)
        todo += lib._linking_libraries
    if library._finalized:
        _REGISTRY.stale[library] = stale
    return stale


def copy_of(dispatcher: Dispatcher) -> Dispatcher:
    """A new dispatcher of ``dispatcher``'s Python function, with its options, locals and
    pipeline but no disk cache: it compiles what ``dispatcher`` would, under other names."""
    options = {k: v for k, v in dispatcher.targetoptions.items() if k != "cache"}
    return type(dispatcher)(dispatcher.py_func, locals=dispatcher.locals, targetoptions=options,
                            pipeline_class=dispatcher._compiler.pipeline_class)


def fresh(dispatcher: Dispatcher, cres: CompileResult) -> tuple[Dispatcher, CompileResult]:
    """``(shadow, its compile result)``: ``dispatcher``'s overload ``cres`` compiled again with
    every library it links seen by the hook (``cres`` itself when it already was, or when Numba
    cannot compile it again: object mode, lifted loops)."""
    if (cres.objectmode or isinstance(dispatcher, LiftedCode) or dispatcher in _REGISTRY.is_shadow
            or not is_stale(cres.library)):
        return dispatcher, cres
    with recompiling():
        shadow = _shadow(dispatcher)
        args = tuple(cres.signature.args)
        new = shadow.overloads.get(args)
        if new is None:
            shadow.compile(cres.signature)
            new = shadow.overloads[args]
        _REGISTRY.original_names[new.fndesc.llvm_func_name] = cres.fndesc.llvm_func_name
    return shadow, new


def original_names() -> dict[str, str]:
    """``{shadow function's mangled name: the shadowed function's}``, for every shadow made in
    this process."""
    return _REGISTRY.original_names


@contextlib.contextmanager
def recompiling() -> Iterator[None]:
    """Within: Numba compilations in this thread reuse no stale code (see the module
    docstring). Holds Numba's compiler lock, so no other thread compiles meanwhile."""
    with compiler_lock.global_compiler_lock:
        _install()
        if _REGISTRY.depth.value == 0:
            _drop_stale_subroutines()
        _REGISTRY.depth.value += 1
        try:
            yield
        finally:
            _REGISTRY.depth.value -= 1


def _shadow(dispatcher: Dispatcher) -> Dispatcher:
    shadow = _REGISTRY.shadows.get(dispatcher)
    if shadow is None:
        shadow = copy_of(dispatcher)
        # While the shadow compiles, the dispatcher counts as compiling: a call of the function
        # from its own body is then typed as recursion (onto the shadow's frame), as Numba
        # types it when the function itself compiles.
        shadow._compiling_counter = dispatcher._compiling_counter
        _REGISTRY.shadows[dispatcher] = shadow
        _REGISTRY.is_shadow.add(shadow)
    return shadow


def _redirected(dispatcher: Dispatcher, sig) -> CompileResult | None:
    """The shadow's compile result for ``sig`` when ``dispatcher``'s is stale and this thread
    is recompiling; None to let Numba answer."""
    if _REGISTRY.depth.value == 0:
        return None
    args, _ = sigutils.normalize_signature(sig)
    args = tuple(args)
    cres = dispatcher.overloads.get(args)
    if cres is None or args in _REGISTRY.failed.get(dispatcher, ()):
        return None
    try:
        _, new = fresh(dispatcher, cres)
    except Exception:  # noqa: BLE001 - what cannot be compiled again is linked as Numba has it
        _REGISTRY.failed.setdefault(dispatcher, set()).add(args)
        return None
    return None if new is cres else new


def _drop_stale_subroutines() -> None:
    cache = cpu_target.target_context.cached_internal_func
    for key in [k for k, cres in cache.items() if is_stale(cres.library)]:
        del cache[key]


def _install() -> None:
    """Wrap the Dispatcher methods through which Numba reaches a compiled overload: typing a
    call (the shadow is compiled then, while the caller's frame is on Numba's call stack, so
    that mutual recursion is typed as such) and lowering it (once per process; outside
    :func:`recompiling` they do what they did)."""
    if _REGISTRY.installed:
        return
    get_call_template = Dispatcher.get_call_template
    get_overload = Dispatcher.get_overload
    get_compile_result = Dispatcher.get_compile_result

    def get_call_template_fresh(self, args, kws):
        template = get_call_template(self, args, kws)
        _redirected(self, template[2])  # the argument types, folded
        return template

    def get_overload_fresh(self, sig):
        new = _redirected(self, sig)
        return get_overload(self, sig) if new is None else new.entry_point

    def get_compile_result_fresh(self, sig):
        new = _redirected(self, sig)
        return get_compile_result(self, sig) if new is None else new

    get_call_template_fresh.__wrapped__ = get_call_template
    get_overload_fresh.__wrapped__ = get_overload
    get_compile_result_fresh.__wrapped__ = get_compile_result
    Dispatcher.get_call_template = get_call_template_fresh
    Dispatcher.get_overload = get_overload_fresh
    Dispatcher.get_compile_result = get_compile_result_fresh
    _REGISTRY.installed = True
