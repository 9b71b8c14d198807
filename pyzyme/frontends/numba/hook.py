"""The capture hook: keep the IR Numba builds before its JIT rewrites it.

Numba optimizes each library's module and then hands it to MCJIT, whose code generation passes
(CodeGenPrepare, loop strength reduction, atomic expansion) rewrite the module *in place*. What
``inspect_llvm()`` shows afterwards is full of machine-level artefacts (``%sunkaddr``,
``llvm.x86.atomic.*``) that are not meant to be read, let alone differentiated. Numba also links
callee libraries into their callers from the callee's already-rewritten module.

The hook wraps two methods of :class:`numba.core.codegen.CPUCodeLibrary`:

``finalize``
    Before Numba links callees and optimizes, a clone of the library's own module (its functions
    after Numba's per-function passes) is kept. :mod:`pyzyme.frontends.numba.capture` links these
    clones together and optimizes them with an AD-friendly pipeline, so no part of the captured
    call tree went through Numba's unrolling and vectorizing O3.
``_optimize_final_module``
    Right after Numba's module passes, and before MCJIT sees the module, a clone prepared for
    linking into callers (external definitions made ``linkonce_odr``, exactly what
    ``CPUCodeLibrary._get_module_for_linking`` would do later) is stored as the library's shared
    module. Callers then link clean IR, which also keeps Numba's own output free of codegen
    artefacts.

The hook must be installed before Numba compiles anything, in particular its runtime library
(``NRT_incref``/``NRT_decref``); ``import pyzyme`` installs it.
"""

from __future__ import annotations

import importlib
import inspect
import weakref
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm
import numba
from numba.core import codegen as numba_codegen

from pyzyme._version import SUPPORTED
from pyzyme.errors import CaptureError
from pyzyme.runtime.modules import module_for_linking

SUPPORTED_NUMBA = ".".join(map(str, SUPPORTED["numba"]))

# (owner, attribute, leading parameter names) of every Numba function or method pyzyme calls or
# wraps: the hook, capture and recapture, the AbiMap, the runtime and the @njit bridge. Owners
# are dotted paths, resolved when checked, so that a Numba missing one fails the check rather
# than this import.
_REQUIRED_METHODS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("numba.core.codegen.CPUCodeLibrary", "finalize", ("self",)),
    ("numba.core.codegen.CPUCodeLibrary", "_optimize_final_module", ("self",)),
    ("numba.core.codegen.CPUCodeLibrary", "_optimize_functions", ("self", "ll_module")),
    ("numba.core.codegen.CPUCodeLibrary", "_get_module_for_linking", ("self",)),
    ("numba.core.codegen.CPUCodeLibrary", "add_linking_library", ("self", "library")),
    ("numba.core.codegen.CPUCodeLibrary", "add_llvm_module", ("self", "ll_module")),
    ("numba.core.codegen.JITCodeLibrary", "get_pointer_to_function", ("self", "name")),
    ("numba.core.codegen.JitEngine", "is_symbol_defined", ("self", "name")),
    ("numba.core.callconv.CPUCallConv", "get_function_type", ("self", "restype", "argtypes")),
    (
        "numba.core.callconv.CPUCallConv",
        "call_function",
        ("self", "builder", "callee", "resty", "argtys", "args"),
    ),
    ("numba.core.callconv.CPUCallConv", "return_status_propagate", ("self", "builder", "status")),
    (
        "numba.core.imputils",
        "fix_returning_optional",
        ("context", "builder", "sig", "status", "retval"),
    ),
    ("numba.core.runtime.nrtdynmod", "create_nrt_module", ("ctx",)),
    ("numba.core.dispatcher.Dispatcher", "get_call_template", ("self", "args", "kws")),
    ("numba.core.dispatcher.Dispatcher", "get_overload", ("self", "sig")),
    ("numba.core.dispatcher.Dispatcher", "get_compile_result", ("self", "sig")),
    ("numba.core.dispatcher.Dispatcher", "compile", ("self", "sig")),
    ("numba.core.dispatcher.Dispatcher", "__init__",
     ("self", "py_func", "locals", "targetoptions", "pipeline_class")),
)
# Attributes set in constructors, found by reading their source.
_REQUIRED_INSTANCE_ATTRIBUTES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "numba.core.codegen.CPUCodeLibrary",
        "__init__",
        ("self._final_module", "self._shared_module", "self._linking_libraries"),
    ),
    ("numba.core.codegen.CPUCodegen", "_init", ("self._tm", "self._engine", "self._data_layout")),
    ("numba.core.datamodel.models.StructModel", "__init__", ("self._fields", "self._members")),
    ("numba.core.datamodel.models.UniTupleModel", "__init__", ("self._count",)),
    ("numba.core.dispatcher._DispatcherBase", "__init__", ("self._compiling_counter",)),
    ("numba.core.dispatcher.Dispatcher", "__init__", ("self.locals",)),
    ("numba.core.dispatcher._FunctionCompiler", "__init__", ("self.pipeline_class",)),
    ("numba.core.base.BaseContext", "__init__", ("self.cached_internal_func",)),
)


@dataclass
class _CaptureRegistry:
    """Process-wide state of the hook: the one place pyzyme keeps mutable globals for Numba.

    ``prelink`` maps a live Numba library to a clone of its own module taken before linking and
    module optimization; it is weak so a library's snapshot dies with the library.
    """

    prelink: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    installed: bool = False
    install_error: CaptureError | None = None


_REGISTRY = _CaptureRegistry()


def check_numba_internals() -> None:
    """Check that the Numba internals the hook and the runtime use are there, as expected.

    Raises
    ------
    CaptureError
        Naming each missing attribute or changed signature, and the Numba version found.

    Examples
    --------
    >>> check_numba_internals()   # Numba 0.68.x: passes silently
    """
    problems = []
    for path, name, params in _REQUIRED_METHODS:
        method = getattr(_resolve(path), name, None)
        if method is None:
            problems.append(f"{path}.{name} is missing")
            continue
        method = getattr(method, "__wrapped__", method)  # our own wrapper, once installed
        found = tuple(inspect.signature(method).parameters)
        if found[: len(params)] != params:
            problems.append(f"{path}.{name}{found} (expected {params})")
    for path, name, attributes in _REQUIRED_INSTANCE_ATTRIBUTES:
        try:
            source = inspect.getsource(getattr(_resolve(path), name))
        except (OSError, TypeError, AttributeError):  # no source shipped, or no such method
            continue
        problems += [f"{path} no longer sets {a}" for a in attributes if a not in source]
    if problems:
        raise CaptureError(
            f"pyzyme {_pyzyme_version()} was written for Numba {SUPPORTED_NUMBA}.x; "
            f"found Numba {numba.__version__}, whose internals differ: " + "; ".join(problems),
            hint=f"install numba=={SUPPORTED_NUMBA}.* (see pyproject.toml)",
        )


def _resolve(path: str) -> Any:
    """The module or class at dotted ``path``, or None if it does not exist."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            obj = getattr(obj, attribute, None)
        return obj
    return None


def _pyzyme_version() -> str:
    from pyzyme._version import __version__

    return __version__


def install() -> None:
    """Install the hook once per process; remember, rather than raise, an incompatibility.

    Importing pyzyme must work even with a Numba whose internals moved (the IR and the C frontend
    do not need the hook), so the error is raised by :func:`require_installed` when a Numba
    function is captured.
    """
    if _REGISTRY.installed or _REGISTRY.install_error is not None:
        return
    try:
        check_numba_internals()
    except CaptureError as err:
        _REGISTRY.install_error = err
        return
    _wrap_finalize(numba_codegen.CPUCodeLibrary)
    _wrap_optimize_final_module(numba_codegen.CPUCodeLibrary)
    _REGISTRY.installed = True


def require_installed() -> None:
    """Raise the :class:`CaptureError` that kept the hook out, if one did."""
    if _REGISTRY.install_error is not None:
        raise _REGISTRY.install_error
    if not _REGISTRY.installed:
        install()
        require_installed()


def prelink_module(library: numba_codegen.CPUCodeLibrary) -> llvm.ModuleRef | None:
    """A fresh clone of ``library``'s own module before linking, or None if it was not seen.

    None means the library was finalized before the hook was installed, or it was loaded from
    Numba's on-disk cache.
    """
    snapshot = _REGISTRY.prelink.get(library)
    return None if snapshot is None else snapshot.clone()


def library_defining(symbol: str) -> numba_codegen.CPUCodeLibrary | None:
    """A library the hook saw that defines function ``symbol``, or None."""
    for library, snapshot in list(_REGISTRY.prelink.items()):
        try:
            fn = snapshot.get_function(symbol)
        except NameError:
            continue
        if not fn.is_declaration:
            return library
    return None


def has_prelink(library: numba_codegen.CPUCodeLibrary) -> bool:
    """Whether the hook saw ``library`` being finalized (see :func:`prelink_module`)."""
    return library in _REGISTRY.prelink


def _wrap_finalize(cls: type) -> None:
    original = cls.finalize

    def finalize(self):
        if not self._finalized:
            _REGISTRY.prelink[self] = self._final_module.clone()
        return original(self)

    finalize.__wrapped__ = original
    cls.finalize = finalize


def _wrap_optimize_final_module(cls: type) -> None:
    original = cls._optimize_final_module

    def _optimize_final_module(self):
        original(self)
        # An empty module is left to Numba, whose _get_module_for_linking reports it clearly.
        if any(True for _ in self._final_module.functions):
            self._shared_module = module_for_linking(self._final_module)

    _optimize_final_module.__wrapped__ = original
    cls._optimize_final_module = _optimize_final_module


# Installed on import, because the hook only sees libraries finalized after it is in place and
# Numba compiles its runtime library at the first compilation of the process.
install()
