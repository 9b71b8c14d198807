"""Parsing, verifying and relinking llvmlite modules.

Every module pyzyme hands to LLVM passes through :func:`parse` first, so a malformed module fails
here with a :class:`~pyzyme.errors.VerifyError` that quotes LLVM's message, never later inside a
pass or the JIT.
"""

from __future__ import annotations

from collections.abc import Iterable

import llvmlite.binding as llvm

from pyzyme.errors import VerifyError
from pyzyme.runtime import target


def parse(text: str, *, what: str = "module") -> llvm.ModuleRef:
    """Parse and verify LLVM IR text, retargeted to Numba's triple and data layout.

    Parameters
    ----------
    text
        LLVM IR in any syntax LLVM 22 reads (typed pointers are upgraded).
    what
        How to name the module in error messages.

    Raises
    ------
    VerifyError
        If LLVM cannot parse the text or its verifier rejects the module.

    Examples
    --------
    >>> m = parse("define double @f(double %x) {\\n  ret double %x\\n}")
    >>> [fn.name for fn in m.functions]
    ['f']
    """
    try:
        module = llvm.parse_assembly(text)
    except RuntimeError as err:
        raise VerifyError(f"LLVM cannot parse the {what}: {str(err).strip()}") from None
    # A module without them links silently but optimizes with the wrong cost model; one with an
    # older layout (clang 14's) is rejected by the JIT.
    module.triple = target.triple()
    module.data_layout = target.data_layout()
    verify(module, what=what)
    return module


def verify(module: llvm.ModuleRef, *, what: str = "module") -> None:
    """Run LLVM's verifier on ``module``.

    Raises
    ------
    VerifyError
        With LLVM's message.
    """
    try:
        module.verify()
    except RuntimeError as err:
        raise VerifyError(f"LLVM's verifier rejects the {what}: {str(err).strip()}") from None


def internalize_all_but(
    module: llvm.ModuleRef, keep: Iterable[str], *, keep_globals=lambda name: False
) -> None:
    """Give every definition except those named in ``keep`` internal linkage.

    Internal definitions that nothing uses are what global dead-code elimination may delete; this
    is the only way to remove functions with llvmlite. ``keep_globals(name)`` spares global
    variables that must stay visible (e.g. Numba's environment pointers, which Numba fills by name).
    """
    keep = set(keep)
    for fn in module.functions:
        if not fn.is_declaration and fn.name not in keep:
            fn.linkage = "internal"
    for gv in module.global_variables:
        if not gv.is_declaration and gv.name not in keep and not keep_globals(gv.name):
            gv.linkage = "internal"


def module_for_linking(module: llvm.ModuleRef) -> llvm.ModuleRef:
    """A clone of ``module`` whose external function definitions are ``linkonce_odr``.

    This is Numba's ``CPUCodeLibrary._get_module_for_linking`` transformation: a module linked
    into many callers must not define the same strong symbol twice, and the callers may inline
    from it and drop what they do not use.

    Examples
    --------
    >>> m = module_for_linking(parse("define void @f() {\\n  ret void\\n}"))
    >>> m.get_function("f").linkage == llvm.Linkage.linkonce_odr
    True
    """
    clone = module.clone()
    for fn in clone.functions:
        if not fn.is_declaration and fn.linkage == llvm.Linkage.external:
            fn.linkage = "linkonce_odr"
    return clone


def defined_names(module: llvm.ModuleRef) -> tuple[str, ...]:
    """Names of the externally visible definitions (functions and globals) of ``module``."""
    visible = (llvm.Linkage.external, llvm.Linkage.weak_odr, llvm.Linkage.common)
    return tuple(
        g.name
        for group in (module.functions, module.global_variables)
        for g in group
        if not g.is_declaration and g.linkage in visible
    )


def declared_names(module: llvm.ModuleRef) -> tuple[str, ...]:
    """Names ``module`` uses but does not define, LLVM intrinsics excluded."""
    return tuple(
        g.name
        for group in (module.functions, module.global_variables)
        for g in group
        if g.is_declaration and not g.name.startswith("llvm.")
    )
