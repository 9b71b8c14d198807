"""Checking a module with LLVM's own verifier (through llvmlite).

pyzyme's constructors already reject ill-typed instructions; this catches everything else LLVM
cares about (dominance, terminators, phi predecessors, intrinsic signatures) and reports it as a
:class:`~pyzyme.VerifyError` that quotes LLVM's message.
"""

from __future__ import annotations

from pyzyme.errors import VerifyError


def verify(module) -> None:
    """Raise :class:`~pyzyme.VerifyError` unless LLVM accepts ``module``.

    ``module`` is a :class:`~pyzyme.ir.Module` or LLVM IR text.

    Examples
    --------
    >>> from pyzyme.ir import parse_module
    >>> verify(parse_module("define i32 @f() {\\n  ret i32 0\\n}"))
    >>> try:
    ...     verify(parse_module("define i32 @f() {\\n  %a = add i32 %a, 1\\n  ret i32 %a\\n}"))
    ... except VerifyError as e:
    ...     print(str(e).splitlines()[0])
    LLVM rejects the module: Only PHI nodes may reference their own value!
    """
    import llvmlite.binding as llvm

    text = module if isinstance(module, str) else str(module)
    try:
        ref = llvm.parse_assembly(text)
    except RuntimeError as err:
        raise VerifyError(f"LLVM cannot read the module: {_first_line(err)}",
                          hint="print the module (str(module)) to see the text LLVM saw") from None
    try:
        ref.verify()
    except RuntimeError as err:
        raise VerifyError(f"LLVM rejects the module: {_first_line(err)}") from None


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    for prefix in ("LLVM IR parsing error\n", "Verification failed\n"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text
