"""Checking a module with LLVM's own verifier (through llvmlite).

pyzyme's constructors already reject ill-typed instructions; this catches everything else LLVM
cares about (dominance, terminators, phi predecessors, intrinsic signatures) and reports it as a
:class:`~pyzyme.VerifyError` that quotes LLVM's message.

A module that declares a debug-info version is verified in a child process: LLVM's parser runs
the verifier on such modules itself and aborts the whole process (``report_fatal_error``) when it
fails, which must not take the user's Python session with it.
"""

from __future__ import annotations

import subprocess
import sys

from pyzyme.errors import VerifyError

_CHILD = """
import sys
import llvmlite.binding as llvm
text = sys.stdin.read()
try:
    llvm.parse_assembly(text).verify()
except RuntimeError as err:
    sys.stderr.write(str(err))
    sys.exit(1)
"""


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
    text = module if isinstance(module, str) else str(module)
    if '"Debug Info Version"' in text:
        _verify_in_child(text)
        return
    import llvmlite.binding as llvm

    try:
        ref = llvm.parse_assembly(text, context=llvm.create_context())
        ref.verify()
    except RuntimeError as err:
        raise _error(str(err)) from None


def _verify_in_child(text: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=text, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise _error(proc.stderr or f"the verifier exited with status {proc.returncode}")


def _error(message: str) -> VerifyError:
    text = message.strip()
    if text.startswith("LLVM IR parsing error"):
        return VerifyError("LLVM cannot read the module: " + text.split("\n", 1)[-1],
                           hint="print the module (str(module)) to see the text LLVM saw")
    for prefix in ("Verification failed\n",):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if "Broken module found" in text:
        text = text.replace("LLVM ERROR: Broken module found, compilation aborted!", "").strip()
    return VerifyError(f"LLVM rejects the module: {text}")
