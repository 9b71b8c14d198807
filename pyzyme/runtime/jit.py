"""Compile LLVM IR to native code inside Numba's JIT engine.

A module compiled here becomes a Numba code library: its functions get addresses in the same
MCJIT engine that runs all ``@njit`` code, resolve Numba's runtime (``NRT_*``, ``numba_*``
helpers) exactly as Numba's own code does, and can be *linked into* ``@njit`` callers, where LLVM
inlines them (see :func:`pyzyme.frontends.numba.njit_callable`).

MCJIT cannot unload code, so every compiled module lives as long as the process; compiling the
same text twice returns the first result instead of defining its symbols twice.
"""

from __future__ import annotations

import weakref

import hashlib
from dataclasses import dataclass, field

import llvmlite.binding as llvm
from numba.core import codegen as numba_codegen
from numba.core.compiler_lock import global_compiler_lock
from numba.core.runtime import rtsys

from pyzyme import settings
from pyzyme.errors import PyzymeError, VerifyError, error_context
from pyzyme.progress import stage
from pyzyme.runtime import modules, passes, target

# Numba's runtime linker creates these globals for recursive calls and resolves them itself.
_NUMBA_UNRESOLVED_PREFIX = ".numba.unresolved$"


@dataclass(frozen=True, eq=False)
class CompiledModule:
    """A module compiled into Numba's JIT engine.

    Attributes
    ----------
    library
        The Numba code library holding the code; pass it to
        ``context.active_code_library.add_linking_library`` to link (and inline) it into a caller.
    functions
        Names of the externally visible functions the module defines.
    opt
        The optimization level it was compiled at.
    """

    library: numba_codegen.JITCodeLibrary
    functions: tuple[str, ...]
    opt: int

    def address(self, symbol: str) -> int:
        """The address of the native code of function ``symbol``.

        Raises
        ------
        PyzymeError
            If the module defines no such externally visible function.
        """
        self.require(symbol)
        return self.library.get_pointer_to_function(symbol)

    def require(self, symbol: str) -> None:
        """Raise unless the module defines an externally visible function ``symbol`` (without
        generating machine code, which :meth:`address` does).

        Raises
        ------
        PyzymeError
            If the module defines no such externally visible function.
        """
        if symbol not in self.functions:
            raise PyzymeError(
                f"compiled module defines no function @{symbol}; it defines {list(self.functions)}"
            )

    @property
    def optimized_ir(self) -> str:
        """The module after optimization, before machine code generation, as LLVM IR text."""
        return str(self.library._get_module_for_linking())


class _PyzymeLibrary(numba_codegen.JITCodeLibrary):
    """A Numba code library whose optimization level pyzyme chooses.

    At level 3 it runs Numba's own pipeline, so derivative code is optimized exactly like the
    ``@njit`` code around it; at lower levels LLVM's default pipeline at that level (level 0 to
    inspect or debug generated code). Either way, the module callers link is taken before
    machine code generation rewrites it, and its local symbols get names of their own (see
    :func:`_rename_locals`).
    """

    def __init__(self, codegen: numba_codegen.JITCPUCodegen, name: str, *, opt: int, tag: str,
                 mirror_lanes: bool):
        super().__init__(codegen, name)
        self._pyzyme_opt = opt
        self._pyzyme_mirror_lanes = mirror_lanes
        self._pyzyme_tag = tag

    def _optimize_functions(self, ll_module: llvm.ModuleRef) -> None:
        if self._pyzyme_opt == 3:
            super()._optimize_functions(ll_module)
        else:
            ll_module.data_layout = self._codegen._data_layout

    def _optimize_final_module(self) -> None:
        if self._pyzyme_opt == 3:
            super()._optimize_final_module()
        else:
            passes.optimize(self._final_module, self._pyzyme_opt)
        if self._pyzyme_mirror_lanes:
            self._final_module = passes.lanes_in_memory_order(self._final_module)
        _rename_locals(self._final_module, self._pyzyme_tag)
        self._shared_module = modules.module_for_linking(self._final_module)

    def _finalize_final_module(self) -> None:
        # Machine code waits for the first address asked of this library: a derivative called
        # through njit_callable is linked into its caller, whose own code generation covers it,
        # so generating it here too would double the cost of a first call.
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        self._finalized = True
        self._pyzyme_code_pending = True
        # Keep the object code MCJIT makes of the module, as Numba does for its own libraries,
        # so that the on-disk cache (serialize) can store it; Numba's object-cache hook finds
        # the library through this attribute of the module.
        self.enable_object_caching()
        self._final_module._CPUCodeLibrary__library = weakref.proxy(self)

    def get_pointer_to_function(self, name: str) -> int:
        if getattr(self, "_pyzyme_code_pending", False):
            self._pyzyme_code_pending = False
            with stage("compile"):
                cleanup = self._codegen._add_module(self._final_module)
                if cleanup:
                    weakref.finalize(self, cleanup)
                self._finalize_specific()
        return super().get_pointer_to_function(name)


def serialize(compiled: CompiledModule) -> tuple:
    """``compiled`` as plain data for :func:`load_serialized` in another process: its object
    code (generated now if it was not yet), the bitcode callers link, and its function names.

    Examples
    --------
    >>> cm = compile_module("define double @__pyzyme_doc_thrice(double %x) {\\n"
    ...                     "  %y = fmul double %x, 3.0\\n  ret double %y\\n}")
    >>> state = serialize(cm)
    >>> state[0]
    'pyzyme-object-1'
    """
    library = compiled.library
    with global_compiler_lock:
        if getattr(library, "_pyzyme_code_pending", False):
            library.get_pointer_to_function(compiled.functions[0])
        libdata = library.serialize_using_object_code()
    return (_FORMAT, libdata, compiled.functions, compiled.opt)


_FORMAT = "pyzyme-object-1"


def load_serialized(state: tuple, key: str | None = None) -> CompiledModule:
    """The :class:`CompiledModule` :func:`serialize` stored, its object code loaded into
    Numba's JIT without optimizing or generating code again.

    ``key`` (:func:`compile_key` of the module's text) lets a later :func:`compile_module` of
    the same text return this module instead of defining its symbols twice.

    Raises
    ------
    VerifyError
        If ``state`` is not what :func:`serialize` makes, a symbol it defines is already
        defined in the JIT, or one it uses cannot be found (loading it would abort the process).

    Examples
    --------
    >>> text = ("define double @__pyzyme_doc_fifth(double %x) {\\n"
    ...         "  %y = fmul double %x, 0.2\\n  ret double %y\\n}")
    >>> state = serialize(compile_module(text))
    >>> load_serialized(state, compile_key(text)) is compile_module(text)  # already loaded
    True
    """
    if not (isinstance(state, tuple) and len(state) == 4 and state[0] == _FORMAT):
        raise VerifyError("not a serialized pyzyme module")
    _, libdata, functions, opt = state
    codegen = target.numba_codegen_instance()
    with global_compiler_lock:
        if key is not None and key in _COMPILED.by_key:
            return _COMPILED.by_key[key]
        shared = llvm.parse_bitcode(libdata[2][1])
        clashes = [n for n in functions
                   if codegen._engine.is_symbol_defined(n) or n in _COMPILED.pending]
        if clashes:
            raise VerifyError(f"symbol(s) {', '.join('@' + n for n in clashes)} are already "
                              f"defined in the JIT")
        _check_resolvable(shared, codegen)
        library = codegen.unserialize_library(libdata)
        compiled = CompiledModule(library=library, functions=tuple(functions), opt=opt)
        if key is not None:
            _COMPILED.by_key[key] = compiled
        return compiled


def compile_key(text: str, opt: int = 3, mirror_lanes: bool = True) -> str:
    """The key under which :func:`compile_module` remembers the module ``text`` at ``opt``.

    Examples
    --------
    >>> compile_key("x") != compile_key("x", opt=2) != compile_key("x", mirror_lanes=False)
    True
    """
    lanes = "" if mirror_lanes else " lanes as vectorized"
    return hashlib.sha256(f"{opt}{lanes}\n{text}".encode()).hexdigest()


def check_resolvable(module: llvm.ModuleRef) -> None:
    """Raise :class:`VerifyError` unless every symbol ``module`` declares can be resolved in
    Numba's JIT or the process (MCJIT aborts the process on one it cannot resolve).

    Examples
    --------
    >>> check_resolvable(modules.parse("declare double @__pyzyme_doc_nowhere(double)\\n"
    ...                                "define double @g(double %x) {\\n"
    ...                                "  %y = call double @__pyzyme_doc_nowhere(double %x)\\n"
    ...                                "  ret double %y\\n}"))
    Traceback (most recent call last):
    ...
    pyzyme.errors.VerifyError: the module uses @__pyzyme_doc_nowhere, ...
    """
    codegen = target.numba_codegen_instance()
    with global_compiler_lock:
        _check_resolvable(module, codegen)


def _rename_locals(module: llvm.ModuleRef, tag: str) -> None:
    """Suffix every internal/private function and global of ``module`` with ``.tag``.

    MCJIT's object linker can bind another module's *weak* definition of a name (Numba links
    ``NRT_decref`` into every library as ``linkonce_odr``) to a *local* symbol of the same name
    in a module loaded earlier. A captured module has exactly such locals: its copy of
    ``NRT_decref``, made internal and ``fastcc`` by the optimizer, then served Numba's own calls
    with the wrong calling convention. Local names are free to change, so they are made unique.
    """
    local = (llvm.Linkage.internal, llvm.Linkage.private)
    for group in (module.functions, module.global_variables):
        for value in group:
            if not value.is_declaration and value.linkage in local:
                value.name = f"{value.name}.{tag}"


@dataclass
class _CompiledRegistry:
    """Modules compiled in this process, by hash of (text, opt): MCJIT keeps them all anyway.

    Guarded by Numba's global compiler lock, which any compilation takes first (a second lock
    could deadlock against a Numba compilation that compiles a module from an intrinsic).
    """

    by_key: dict[str, CompiledModule]
    # Library of each symbol defined by a compiled module whose machine code is not in the
    # engine yet (it goes there when an address is asked, or a module using it is compiled).
    pending: dict = field(default_factory=dict)


_COMPILED = _CompiledRegistry(by_key={})


def compile_module(module, opt: int = 3, *, name: str = "pyzyme",
                   mirror_lanes: bool | None = None) -> CompiledModule:
    """Verify, optimize and JIT-compile an LLVM module into Numba's engine.

    Parameters
    ----------
    module
        A :class:`pyzyme.ir.Module`, or LLVM IR text (anything whose ``str()`` is LLVM IR).
        Functions meant to be called must have external linkage.
    opt
        Optimization level, 0-3. Level 3 is Numba's own pipeline.
    name
        Name of the code library (shown in Numba's diagnostics).
    mirror_lanes
        Rewrite vector loops that walk memory downwards with their lanes in memory order after
        optimizing (:func:`pyzyme.runtime.passes.lanes_in_memory_order`); None (default): as
        the options in force say (``mirror_lanes`` of :class:`pyzyme.settings.Options`).

    Raises
    ------
    VerifyError
        If LLVM rejects the module, a function or global it uses cannot be found in the process
        or the JIT, or a symbol it defines already has a different definition in the JIT.

    Examples
    --------
    >>> import ctypes
    >>> cm = compile_module("define double @__pyzyme_doc_twice(double %x) {\\n"
    ...                     "  %y = fmul double %x, 2.0\\n  ret double %y\\n}")
    >>> ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(cm.address("__pyzyme_doc_twice"))(4.0)
    8.0
    """
    if opt not in (0, 1, 2, 3):
        raise ValueError(f"optimization level must be 0, 1, 2 or 3; got {opt!r}")
    text = str(module)
    if mirror_lanes is None:
        mirror_lanes = settings.current().mirror_lanes
    key = compile_key(text, opt, mirror_lanes)
    with global_compiler_lock:
        if key in _COMPILED.by_key:
            return _COMPILED.by_key[key]
        with error_context("compiling module", name):
            compiled = _compile(text, opt, name, tag=key[:16], mirror_lanes=mirror_lanes)
        _COMPILED.by_key[key] = compiled
        return compiled


def _compile(text: str, opt: int, name: str, *, tag: str, mirror_lanes: bool) -> CompiledModule:
    ll_module = modules.parse(text)
    codegen = target.numba_codegen_instance()
    _check_new_definitions(ll_module, codegen)
    _check_resolvable(ll_module, codegen)
    functions = tuple(
        fn.name
        for fn in ll_module.functions
        if not fn.is_declaration and fn.linkage == llvm.Linkage.external
    )
    if not functions:
        raise VerifyError(
            "the module defines no externally visible function, so nothing could be called",
            hint="give the entry points external linkage (no 'internal'/'linkonce_odr')",
        )
    defined = modules.defined_names(ll_module)
    library = _PyzymeLibrary(codegen, name, opt=opt, tag=tag, mirror_lanes=mirror_lanes)
    # Numba links its runtime into every library so NRT_incref/NRT_decref can be inlined.
    library.add_linking_library(rtsys.library)
    library.add_llvm_module(ll_module)
    with stage("LLVM optimization"):
        library.finalize()
    _COMPILED.pending.update(dict.fromkeys(defined, library))
    return CompiledModule(library=library, functions=functions, opt=opt)


def _check_new_definitions(ll_module: llvm.ModuleRef, codegen: numba_codegen.JITCPUCodegen) -> None:
    # MCJIT does not diagnose a second definition of a symbol: calls silently go to one of them.
    clashes = [n for n in modules.defined_names(ll_module)
               if codegen._engine.is_symbol_defined(n) or n in _COMPILED.pending]
    if clashes:
        raise VerifyError(
            f"symbol(s) {', '.join('@' + n for n in clashes)} are already defined in the JIT "
            "by other code",
            hint="name generated functions with pyzyme.naming.symbol_name(kind, <their IR>)",
        )


def _check_resolvable(ll_module: llvm.ModuleRef, codegen: numba_codegen.JITCPUCodegen) -> None:
    for n in modules.declared_names(ll_module):
        library = _COMPILED.pending.get(n)
        if library is not None and not codegen._engine.is_symbol_defined(n):
            library.get_pointer_to_function(n)  # its code into the engine, so n resolves
    # An unresolved symbol makes MCJIT abort the whole process; say which one instead.
    missing = [
        n
        for n in modules.declared_names(ll_module)
        if not n.startswith(_NUMBA_UNRESOLVED_PREFIX)
        and not codegen._engine.is_symbol_defined(n)
        and not llvm.address_of_symbol(n)
    ]
    if missing:
        raise VerifyError(
            f"the module uses {', '.join('@' + n for n in missing)}, defined neither in the "
            "module, nor in Numba's JIT, nor in the process",
            hint="include the callee's definition in the module, or load the shared library "
            "that defines it (llvmlite.binding.load_library_permanently)",
        )
