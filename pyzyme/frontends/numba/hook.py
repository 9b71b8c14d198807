"""The capture hook: keep the IR Numba builds before its JIT rewrites it.

Numba optimizes each library's module and then hands it to MCJIT, whose code generation passes
(CodeGenPrepare, loop strength reduction, atomic expansion) rewrite the module *in place*. What
``inspect_llvm()`` shows afterwards is full of machine-level artefacts (``%sunkaddr``,
``llvm.x86.atomic.*``) that are not meant to be read, let alone differentiated. Numba also links
callee libraries into their callers from the callee's already-rewritten module.

The hook wraps three methods of :class:`numba.core.codegen.CPUCodeLibrary`:

``_optimize_functions``
    A clone of each module Numba adds to a library is kept while Numba's per-function passes
    run on it (until the library is finalized).
``finalize``
    Before Numba links callees and optimizes, a clone of the library's own module (its functions
    after Numba's per-function passes) is kept. :mod:`pyzyme.frontends.numba.capture` links these
    clones together and optimizes them with an AD-friendly pipeline, so no part of the captured
    call tree went through Numba's unrolling and vectorizing O3. Numba's per-function passes are
    its O3 function pipeline, though, whose non-trivial loop unswitching copies an array
    expression's loop nest once per broadcast test: a 4-D softmax's function grew from 311
    blocks to 1,197, its derivative to 3,600, which took 50 s to build. Where the passes
    multiplied the blocks so (:data:`UNSWITCH_GROWTH`), the clones from before them are kept
    instead, and get the same passes at O2, which does not unswitch, when first captured; the
    derivative's own O3 then decides what to unswitch.
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
from pyzyme.progress import logger
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
    ("numba.core.codegen.CPUCodegen", "_function_pass_manager", ("self",)),
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
    module optimization; ``added`` holds, until the library is finalized, the clones of the
    modules added to it taken before Numba's per-function passes; ``unsimplified`` maps a
    library whose snapshot is such a clone, not yet through its function passes (run when
    first captured), to its blocks before and after Numba's. All are weak so a library's
    snapshot dies with the library.
    """

    prelink: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    added: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    unsimplified: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
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
    _wrap_optimize_functions(numba_codegen.CPUCodeLibrary)
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
    if snapshot is None:
        return None
    blocks = _REGISTRY.unsimplified.pop(library, None)
    if blocks is not None:
        _simplify(library, snapshot)
        logger.info("Numba's O3 function passes unswitched the loops of %s from %d "
                    "blocks to %d; captured from before them, at O2", library.name, *blocks)
    return snapshot.clone()


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


def _wrap_optimize_functions(cls: type) -> None:
    original = cls._optimize_functions

    def _optimize_functions(self, ll_module):
        _REGISTRY.added.setdefault(self, []).append(ll_module.clone())
        return original(self, ll_module)

    _optimize_functions.__wrapped__ = original
    cls._optimize_functions = _optimize_functions


def _wrap_finalize(cls: type) -> None:
    original = cls.finalize

    def finalize(self):
        if not self._finalized:
            _REGISTRY.prelink[self] = _snapshot(self)
        return original(self)

    finalize.__wrapped__ = original
    cls.finalize = finalize


def _snapshot(library: numba_codegen.CPUCodeLibrary) -> llvm.ModuleRef:
    """The library's own module as capture links it: after Numba's per-function passes, or
    from before them where their unswitching multiplied its blocks (see the module docstring).

    A library that did not run those passes (pyzyme's derivative libraries below level 3) or
    received modules before the hook was installed has no clones from before; its own module
    stands in.
    """
    added = _REGISTRY.added.pop(library, None)
    if added:
        before, after = sum(_blocks(m) for m in added), _blocks(library._final_module)
        if after > UNSWITCH_GROWTH * before + UNSWITCH_SLACK:
            module = added[0]
            for other in added[1:]:
                module.link_in(other)
            _REGISTRY.unsimplified[library] = (before, after)
            return module
    return library._final_module.clone()


#: Numba's per-function passes count as having unswitched a library apart when they leave more
#: than this many times its blocks, and :data:`UNSWITCH_SLACK` more. They shrink most code
#: (matmul's loops: 32 blocks to 11, an ``np.sum``: 60 to 36); a 4-D array expression grew
#: from 56 blocks to 747, npbench's softmax from 311 to 1,197.
UNSWITCH_GROWTH = 2
UNSWITCH_SLACK = 100


def _simplify(library: numba_codegen.CPUCodeLibrary, module: llvm.ModuleRef) -> None:
    """Numba's per-function passes (and its reference-count pruning) over ``module``, as
    ``_optimize_functions`` runs them, at O2 at most: without non-trivial unswitching."""
    module.data_layout = library._codegen._data_layout
    fpm, pb = library._codegen._function_pass_manager(opt=min(int(numba.config.OPT), 2))
    for fn in module.functions:
        if not fn.is_declaration:
            fpm.run(fn, pb)


def _blocks(module: llvm.ModuleRef) -> int:
    return sum(len(list(fn.blocks)) for fn in module.functions)


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
