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

import inspect
import weakref
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm
import numba
from numba.core import codegen as numba_codegen

from pyzyme.errors import CaptureError

SUPPORTED_NUMBA = "0.68"

# (owner, attribute, parameter names or None for a plain attribute) that pyzyme relies on.
_REQUIRED_METHODS: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (numba_codegen.CPUCodeLibrary, "finalize", ("self",)),
    (numba_codegen.CPUCodeLibrary, "_optimize_final_module", ("self",)),
    (numba_codegen.CPUCodeLibrary, "_get_module_for_linking", ("self",)),
    (numba_codegen.CPUCodeLibrary, "add_linking_library", ("self", "library")),
    (numba_codegen.CPUCodeLibrary, "add_llvm_module", ("self", "ll_module")),
    (numba_codegen.JITCodeLibrary, "get_pointer_to_function", ("self", "name")),
    (numba_codegen.CPUCodegen, "create_library", ("self", "name")),
    (numba_codegen.CPUCodegen, "_pass_builder", ("self",)),
    (numba_codegen.JitEngine, "is_symbol_defined", ("self", "name")),
)
# Attributes set in CPUCodeLibrary.__init__ / CPUCodegen._init, found by reading their source.
_REQUIRED_INSTANCE_ATTRIBUTES: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (
        numba_codegen.CPUCodeLibrary,
        "__init__",
        ("self._final_module", "self._shared_module", "self._linking_libraries"),
    ),
    (
        numba_codegen.CPUCodegen,
        "_init",
        ("self._tm", "self._engine", "self._data_layout"),
    ),
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
    for owner, name, params in _REQUIRED_METHODS:
        method = getattr(owner, name, None)
        if method is None:
            problems.append(f"{owner.__qualname__}.{name} is missing")
            continue
        method = getattr(method, "__wrapped__", method)
        found = tuple(inspect.signature(method).parameters)
        if found[: len(params)] != params:
            problems.append(f"{owner.__qualname__}.{name}{found} (expected {params})")
    for owner, name, attributes in _REQUIRED_INSTANCE_ATTRIBUTES:
        source = inspect.getsource(getattr(owner, name))
        problems += [f"{owner.__qualname__} no longer sets {a}" for a in attributes if a not in source]
    if problems:
        raise CaptureError(
            f"pyzyme {_pyzyme_version()} was written for Numba {SUPPORTED_NUMBA}.x; "
            f"found Numba {numba.__version__}, whose internals differ: " + "; ".join(problems),
            hint=f"install numba=={SUPPORTED_NUMBA}.* (see pyproject.toml)",
        )


def _pyzyme_version() -> str:
    from pyzyme import __version__  # late: pyzyme/__init__ imports this module

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


def module_for_linking(module: llvm.ModuleRef) -> llvm.ModuleRef:
    """A clone of ``module`` whose external definitions are ``linkonce_odr``.

    This is Numba's ``_get_module_for_linking`` transformation: callers may link the module many
    times, inline from it and drop what they do not use.
    """
    clone = module.clone()
    for fn in clone.functions:
        if not fn.is_declaration and fn.linkage == llvm.Linkage.external:
            fn.linkage = "linkonce_odr"
    return clone


# Installed on import, because the hook only sees libraries finalized after it is in place and
# Numba compiles its runtime library at the first compilation of the process.
install()
