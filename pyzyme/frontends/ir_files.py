"""LLVM modules from what users hand the command line: IR text or bitcode, by file or pipe.

``clang -S -emit-llvm`` writes text (``.ll``), ``clang -c -emit-llvm`` bitcode (``.bc``); a
file is told to be bitcode by its first bytes, not by its name. Whatever is neither, or is
malformed, is refused with the file's name and the line:column where reading stopped, as a
compiler reports it, never with LLVM's ``<string>`` or a Python traceback.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import llvmlite.binding as llvm

from pyzyme.errors import FrontendError

__all__ = ["is_bitcode", "parse", "read_bytes"]

#: The first bytes of LLVM bitcode: raw ("BC" 0xC0DE), or inside the wrapper header that
#: Apple's tools write (the 32-bit word 0x0B17C0DE, little-endian).
BITCODE_MAGIC = b"BC\xc0\xde"
WRAPPER_MAGIC = (0x0B17C0DE).to_bytes(4, "little")

_HINT = "pass LLVM IR text (clang -S -emit-llvm) or bitcode (clang -c -emit-llvm)"
# LLVM's parser names the text it was handed "<string>" and writes "error: " after the place.
_LLVM_PLACE = re.compile(r"^<string>:(\d+):(\d+): (?:error: )?", re.M)


def is_bitcode(data: bytes) -> bool:
    """Whether ``data`` starts as LLVM bitcode does (raw or wrapped).

    Examples
    --------
    >>> is_bitcode(b"BC\\xc0\\xde\\x35\\x14"), is_bitcode(b"; ModuleID = 'a.c'")
    (True, False)
    """
    return data[:4] in (BITCODE_MAGIC, WRAPPER_MAGIC)


def read_bytes(path: str) -> bytes:
    """The contents of the file ``path`` (``-``: standard input).

    Raises
    ------
    FrontendError
        Naming the file, when it is missing, a folder, or cannot be read.
    """
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise FrontendError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise FrontendError(f"{path} is a folder, not a file of LLVM IR") from None
    except OSError as err:
        raise FrontendError(f"cannot read {path}: {err.strerror or err}") from None


def parse(data: bytes | str, name: str) -> llvm.ModuleRef:
    """LLVM's module of ``data``: bitcode, or IR text (as ``str`` or UTF-8 bytes).

    Parameters
    ----------
    data
        What the file held.
    name
        The file's name, for error messages.

    Raises
    ------
    FrontendError
        ``name:line:column: what is wrong`` for text LLVM cannot parse and for bytes that are
        neither bitcode nor UTF-8 text; ``name: ...`` for malformed bitcode.

    Examples
    --------
    >>> try:
    ...     parse("define i32 @f(i32 %x) {\\n  ret i32 %y\\n}", "f.ll")
    ... except FrontendError as err:
    ...     print(err.message)
    f.ll:2:11: use of undefined value '%y'
      ret i32 %y
              ^
    """
    if isinstance(data, bytes):
        if is_bitcode(data):
            try:
                return llvm.parse_bitcode(data)
            except RuntimeError as err:
                detail = str(err).replace("LLVM bitcode parsing error", "").strip()
                raise FrontendError(f"{name}: malformed LLVM bitcode ({detail})",
                                    hint="LLVM 22 reads bitcode of LLVM 22 and older") from None
        data = _text(data, name)
    try:
        return llvm.parse_assembly(data)
    except RuntimeError as err:
        raise FrontendError(_placed(str(err), name)) from None


def _text(data: bytes, name: str) -> str:
    """``data`` as UTF-8 text, or an error at the line and column of its first byte that is
    not (columns count bytes, as LLVM's do)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        at = err.start
        line = data.count(b"\n", 0, at) + 1
        column = at - (data.rfind(b"\n", 0, at) + 1) + 1
        raise FrontendError(
            f"{name}:{line}:{column}: neither LLVM IR text nor LLVM bitcode (byte "
            f"0x{data[at]:02x} is not UTF-8 text, and the file does not start with "
            f"bitcode's magic bytes)", hint=_HINT) from None


def _placed(message: str, name: str) -> str:
    """LLVM's parse error with ``name`` where it says ``<string>``, without its header.

    >>> print(_placed("LLVM IR parsing error\\n<string>:1:17: error: expected type\\n", "a.ll"))
    a.ll:1:17: expected type
    """
    body = message.replace("LLVM IR parsing error", "", 1).strip("\n")
    placed = _LLVM_PLACE.sub(lambda m: f"{name}:{m[1]}:{m[2]}: ", body)
    return placed if placed != body else f"{name}: {body.strip()}"
