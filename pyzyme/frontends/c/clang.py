"""C and C++ to LLVM IR, through the clang that the ``ziglang`` wheel bundles.

``ziglang`` (PyPI) ships clang 22, the same LLVM major version as llvmlite 0.50, so its IR
needs no upgrade. The text it writes is normalised through llvmlite (parsed, given the host's
triple and data layout, printed again), so what :func:`compile_to_ir` returns is exactly what
LLVM 22 prints and can be linked into JIT modules without data-layout mismatches.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pyzyme.errors import FrontendError
from pyzyme.frontends import ir_files
from pyzyme.progress import notice_if_slow

__all__ = ["compile_to_ir", "preprocess", "normalize_ir", "ziglang_available", "require_ziglang",
           "INSTALL_HINT"]

Lang = Literal["c", "c++"]

_CXX_SUFFIXES = {".cpp", ".cc", ".cxx", ".c++", ".C", ".hpp"}
_SUFFIX = {"c": ".c", "c++": ".cpp"}
# Flags added unless extra_args has one of the same family: no debug info; and neither the UBSan
# runtime calls (__ubsan_handle_*) nor the stack protectors (__stack_chk_fail) that zig cc adds
# to unoptimised builds, which a JIT cannot resolve. (zig lets -g0, -fno-sanitize=all and
# -fno-stack-protector win wherever they appear, so they must be left out, not overridden.)
_DEFAULT_FLAGS = (
    ("-g0", ("-g",)),
    ("-fno-sanitize=all", ("-fsanitize", "-fno-sanitize")),
    ("-fno-stack-protector", ("-fstack-protector", "-fno-stack-protector")),
)
# Printed by `zig cc` on every -S compile; not a diagnostic about the user's code.
_ZIG_NOISE = {
    "zig: warning: argument unused during compilation: '-c' [-Wunused-command-line-argument]"
}


def ziglang_available() -> bool:
    """Whether the ``ziglang`` package (and so its bundled clang) can be imported.

    Examples
    --------
    >>> isinstance(ziglang_available(), bool)
    True
    """
    return importlib.util.find_spec("ziglang") is not None


#: What to install for the C/C++ frontend: the extra that brings ``ziglang``.
INSTALL_HINT = "pip install 'pyzyme[c]'  (the ziglang package, which bundles clang 22)"


def require_ziglang() -> None:
    """Raise :class:`~pyzyme.FrontendError` naming ``pip install 'pyzyme[c]'`` when the
    ``ziglang`` package is missing."""
    if not ziglang_available():
        raise FrontendError(
            "the C/C++ frontend needs clang 22, which the 'ziglang' package bundles, and "
            "ziglang is not installed",
            hint=f"{INSTALL_HINT}; from Python, compile_to_ir(..., compiler=['clang-22']) "
                 f"uses a clang 22 of your own",
        )


def compile_to_ir(
    source: str | os.PathLike[str],
    lang: Lang | None = None,
    opt: str = "-O2",
    extra_args: Sequence[str] = (),
    *,
    compiler: Sequence[str] | None = None,
    timeout: float = 120.0,
    diagnostics: list[str] | None = None,
) -> str:
    """Compile C or C++ to LLVM IR text as LLVM 22 prints it.

    Parameters
    ----------
    source : str or os.PathLike
        A path (``pathlib.Path``, or a one-line ``str`` naming an existing file or ending in
        ``.c``, ``.cpp``, ...) or the source code itself (any other ``str``).
    lang : {"c", "c++"}, optional
        The language. By default it is taken from the file's suffix (``.cpp``, ``.cc``,
        ``.cxx`` mean C++) and is ``"c"`` for source code given as a string.
    opt : str, default "-O2"
        The optimisation flag, e.g. ``"-O0"``, ``"-O1"``, ``"-O3"``, ``"-Os"``.
    extra_args : sequence of str, optional
        More compiler arguments, e.g. ``("-ffast-math", "-DN=4", "-std=c++17")``. Debug
        information is off (``-g0``) unless one of them is a ``-g`` flag. Sanitizers and stack
        protectors (which zig turns on at ``-O0``) are off unless asked for here, e.g.
        ``("-fsanitize=undefined",)``.
    compiler : sequence of str, optional
        The command that runs the compiler, e.g. ``["clang-19"]``. By default
        ``[sys.executable, "-m", "ziglang", "cc"]`` (``"c++"`` for C++), for the host's CPU
        or the one ``NUMBA_CPU_NAME`` names, as Numba's own code.
    timeout : float, default 120
        Seconds to wait for the compiler.
    diagnostics : list of str, optional
        When given, the compiler's warnings (its stderr, one line per item) are appended to
        it; they are otherwise discarded after a successful compile.

    Returns
    -------
    str
        The module's LLVM IR, with the host's target triple and data layout.

    Raises
    ------
    FrontendError
        When ``ziglang`` is not installed, the compiler fails (the message includes its
        diagnostics) or llvmlite cannot read what it wrote.

    Examples
    --------
    >>> ir = compile_to_ir("double sq(double x) { return x * x; }")
    >>> "fmul double" in ir
    True
    >>> ir0 = compile_to_ir("int id(int x) { return x; }", opt="-O0")
    >>> "alloca i32" in ir0
    True
    """
    path: Path | None = None
    if isinstance(source, os.PathLike) or _looks_like_path(source):
        path = Path(source)
    if lang is None:
        lang = "c++" if path is not None and path.suffix in _CXX_SUFFIXES else "c"
    if lang not in _SUFFIX:
        raise FrontendError(f"unknown language {lang!r}", hint='use lang="c" or lang="c++"')
    if compiler is None:
        compiler = _zig(lang)
    text, stderr, what = _run(source, path, lang, compiler, [opt, *_default_flags(extra_args),
                                                             "-S", "-emit-llvm", *extra_args],
                              timeout)
    if diagnostics is not None:
        diagnostics += [line for line in stderr.splitlines() if line not in _ZIG_NOISE]
    return normalize_ir(text, name=what)


def preprocess(path: str | os.PathLike[str], lang: Lang, extra_args: Sequence[str] = (),
               timeout: float = 120.0) -> str:
    """The file ``path`` preprocessed (``-E``) as :func:`compile_to_ir` would compile it with
    ``extra_args``: its line markers name the file as it does.

    Raises
    ------
    FrontendError
        As :func:`compile_to_ir`.
    """
    text, _, _ = _run(path, Path(path), lang, _zig(lang), ["-E", *extra_args], timeout)
    return text


def _zig(lang: Lang) -> list[str]:
    """The command that runs zig's clang for ``lang``."""
    require_ziglang()
    return [sys.executable, "-m", "ziglang", "cc" if lang == "c" else "c++", *_zig_cpu_flag()]


def _run(source, path: Path | None, lang: Lang, compiler: Sequence[str], flags: Sequence[str],
         timeout: float) -> tuple[str, str, str]:
    """Run ``compiler`` on ``source`` (``path``, or code to write to a temporary file) with
    ``flags``; its output, its stderr and the name it compiled the source under."""
    with tempfile.TemporaryDirectory(prefix="pyzyme-clang-") as tmp:
        if path is None:
            # Compiled from inside the temporary folder under a fixed relative name, so that
            # ``source_filename`` does not depend on the folder's random name.
            what = f"input{_SUFFIX[lang]}"
            (Path(tmp) / what).write_text(str(source))
            arg, cwd = what, tmp
        elif not path.is_file():
            raise FrontendError(f"no such source file: {path}")
        else:
            # Run beside the file: relative includes work and the IR names the file alone.
            what = arg = path.name
            cwd = str(path.resolve().parent)
        out = Path(tmp) / "output.ll"
        cmd = [*compiler, "-x", lang, *flags, arg, "-o", str(out)]
        try:
            with notice_if_slow(f"pyzyme: clang is compiling {what} (zig's first run builds "
                                f"its caches, once, for a minute or so)"):
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
                )
        except FileNotFoundError as err:
            raise FrontendError(f"cannot run the compiler {compiler[0]!r}: {err}") from None
        except subprocess.TimeoutExpired:
            raise FrontendError(f"compiling {what} took longer than {timeout} s") from None
        if proc.returncode != 0 or not out.is_file():
            stderr = "\n".join(
                line for line in proc.stderr.strip().splitlines() if line not in _ZIG_NOISE
            )
            raise FrontendError(
                f"compiling {what} as {lang} failed (exit status {proc.returncode}):\n{stderr}",
                hint=f"command: {' '.join(cmd)}",
                stderr=proc.stderr,
            )
        return out.read_text(), proc.stderr, what


def _zig_cpu_flag() -> list[str]:
    """``-mcpu`` for the CPU ``NUMBA_CPU_NAME`` names, in zig's spelling (zig compiles for
    the host's otherwise, and its IR names that CPU on every function, which overrides the
    JIT's target machine)."""
    from pyzyme.runtime.target import requested_cpu  # imports Numba: only when compiling

    cpu = requested_cpu()
    return [] if cpu is None else [f"-mcpu={cpu.replace('-', '_')}"]


def _default_flags(extra_args: Sequence[str]) -> list[str]:
    """The flags of :data:`_DEFAULT_FLAGS` whose family ``extra_args`` does not mention."""
    return [
        flag for flag, family in _DEFAULT_FLAGS if not any(a.startswith(family) for a in extra_args)
    ]


def _looks_like_path(source: str) -> bool:
    """A one-line string naming an existing file, or shaped like a C/C++ file name."""
    if "\n" in source or len(source) > 4096:
        return False
    if os.path.isfile(source):
        return True
    return not any(c in source for c in " {};()") and Path(source).suffix in _CXX_SUFFIXES | {".c"}


def normalize_ir(text: str | bytes, name: str = "<module>") -> str:
    """Re-print LLVM IR through llvmlite with the host's triple and data layout.

    Parameters
    ----------
    text : str or bytes
        LLVM IR from any producer LLVM 22 can read (older clangs' typed pointers too): text,
        or the bytes of a file of text or bitcode (:mod:`pyzyme.frontends.ir_files`).
    name : str, optional
        What the text came from (a file's name), for error messages.

    Returns
    -------
    str
        The same module as LLVM 22 prints it.

    Raises
    ------
    FrontendError
        When llvmlite cannot parse the text (the message starts ``name:line:column:``) or
        the module does not verify.

    Examples
    --------
    >>> txt = normalize_ir("define i32 @f(i32 %x) {\\n  ret i32 %x\\n}\\n")
    >>> "target triple" in txt and "define i32 @f(i32 %x)" in txt
    True
    """
    import llvmlite.binding as llvm

    triple, layout = _host_target()
    mod = ir_files.parse(text, name)
    mod.name = name
    mod.triple = triple
    mod.data_layout = layout
    try:
        mod.verify()
    except RuntimeError as err:
        raise FrontendError(f"{name} is not a valid LLVM module: {str(err).strip()}") from None
    return str(mod)


@functools.cache
def _host_target() -> tuple[str, str]:
    """The process triple and the data layout of the host's target machine."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    tm = llvm.Target.from_triple(triple).create_target_machine()
    return triple, str(tm.target_data)
