"""``pyzyme cc`` and ``pyzyme run``: C and C++ programs that call ``__enzyme_*``, compiled.

``cc`` does what ``clang -fplugin=ClangEnzyme.so`` does: each source file to LLVM IR (clang
from the ``ziglang`` package), its ``__enzyme_*`` calls replaced by derivatives
(:func:`pyzyme.frontends.c.lower.lower`), then compiled and linked by the same clang.
``run`` JIT-compiles the result and calls ``main``, as Enzyme's tests pipe it into ``lli``
(a C++ program needs the C++ runtime this process lacks: it is linked and run instead).

Sources are compiled with ``-gline-tables-only`` unless a ``-g`` flag is given, so errors name
``file.c:LINE``; sanitizers and stack protectors are off, as in
:func:`pyzyme.frontends.c.clang.compile_to_ir`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyzyme.errors import FrontendError, UnsupportedError
from pyzyme.progress import notice_if_slow

__all__ = ["AD_FLAGS", "INCLUDE_DIR", "Invocation", "parse_invocation", "compile_source",
           "source_to_ir", "cc", "run"]

_SOURCES = {".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".ll", ".bc"}
_CXX = {".cc", ".cpp", ".cxx", ".c++", ".C"}
#: Added to every compile: Enzyme's clang plugin differentiates before LLVM vectorizes; from
#: clang's output, loops and structs vectorized by its -O2 would reach pyzyme as vectors.
AD_FLAGS = ("-fno-vectorize", "-fno-slp-vectorize")
#: Enzyme's headers as pyzyme provides them (``<enzyme/enzyme>``, ...), searched after the
#: user's and the system's include directories.
INCLUDE_DIR = Path(__file__).resolve().parent / "include"
# Flags that matter only when linking; everything else goes to the compile step too.
_LINK_ONLY = ("-l", "-L", "-Wl,", "-shared", "-static", "-pthread", "-rdynamic")


@dataclass
class Invocation:
    """A ``cc``/``run`` command line, sorted out."""

    sources: list[Path] = field(default_factory=list)
    output: str | None = None
    opt: str = "-O0"
    compile_flags: list[str] = field(default_factory=list)
    link_flags: list[str] = field(default_factory=list)
    program_args: list[str] = field(default_factory=list)
    shared: bool = False

    @property
    def cxx(self) -> bool:
        return any(p.suffix in _CXX for p in self.sources)

    @property
    def opt_level(self) -> int:
        digits = self.opt[2:] or "2"
        return int(digits) if digits.isdigit() else 2


def parse_invocation(args: Sequence[str], *, run: bool = False) -> Invocation:
    """Sort ``args`` into sources, ``-o``, the ``-O`` level, compile and link flags; for
    ``run``, what follows the source (or ``--``) is the program's own argv.

    >>> inv = parse_invocation(["a.c", "-O2", "-DN=3", "-lm", "-o", "prog"])
    >>> inv.sources, inv.output, inv.opt, inv.compile_flags, inv.link_flags
    ([PosixPath('a.c')], 'prog', '-O2', ['-DN=3'], ['-lm'])
    """
    inv, it = Invocation(), iter(range(len(args)))
    args = list(args)
    for i in it:
        a = args[i]
        if run and (a == "--" or inv.sources and not a.startswith("-")):
            inv.program_args = args[i + 1:] if a == "--" else args[i:]
            break
        if a == "-o":
            inv.output = args[next(it)]
        elif a.startswith("-O"):
            inv.opt = a
        elif a == "-shared":
            inv.shared = True
            inv.link_flags.append(a)
        elif a in ("-c", "-S", "-emit-llvm"):
            raise FrontendError(f"pyzyme cc compiles and links; {a} is not supported",
                                hint="for IR, compile with clang and use pyzyme opt")
        elif a.startswith(_LINK_ONLY):
            inv.link_flags.append(a)
        elif not a.startswith("-") and Path(a).suffix in _SOURCES:
            inv.sources.append(Path(a))
        elif a in ("-I", "-D", "-U", "-include", "-isystem", "-x", "-std"):
            inv.compile_flags += [a, args[next(it)]]
        else:
            inv.compile_flags.append(a)
    if not inv.sources:
        raise FrontendError("no source file given (.c, .cpp, .ll or .bc)")
    return inv


def source_to_ir(path: Path, inv: Invocation) -> str:
    """One source file as LLVM IR, its ``__enzyme_*`` calls replaced."""
    from pyzyme.frontends import ir_files
    from pyzyme.frontends.c.clang import compile_to_ir, normalize_ir
    from pyzyme.frontends.c.lower import lower

    if path.suffix in (".ll", ".bc"):  # text or bitcode, whichever the bytes are
        text = normalize_ir(ir_files.read_bytes(str(path)), name=str(path))
    else:
        text = compile_source(path, inv.opt, inv.compile_flags)
    return lower(text, opt_level=max(inv.opt_level, 2))


def compile_source(path: Path, opt: str = "-O0", flags: Sequence[str] = ()) -> str:
    """``path`` (C or C++) as LLVM IR optimised at ``opt``, as Enzyme's clang plugin sees it
    before it replaces the ``__enzyme_*`` calls.

    Clang stops after its front end, the functions the module registers with Enzyme are kept
    from inlining (:mod:`~pyzyme.frontends.c.preopt`), then clang's ``opt`` pipeline runs.
    Enzyme's headers (``<enzyme/enzyme>``, ...) are on the include path and its attributes
    (``__attribute__((enzyme_inactive))``, ...) are spelled for this clang; one pyzyme does not
    read is refused (:class:`~pyzyme.errors.UnsupportedError`) rather than ignored.
    """
    from pyzyme.frontends.c import fixed_point_markers, loop_annotations
    from pyzyme.frontends.c import preopt as enzyme_preopt
    from pyzyme.frontends.c.clang import compile_to_ir

    path = Path(path)
    flags = [*AD_FLAGS, *flags, "-Wunknown-pragmas", "-idirafter", str(INCLUDE_DIR),
             "-include", str(INCLUDE_DIR / "pyzyme_enzyme_attributes.h")]
    if not any(f.startswith("-g") for f in flags):
        flags.append("-gline-tables-only")
    # %O0TBAA-style builds (-O1 -Xclang -disable-llvm-passes) ask for no pipeline at all.
    level = 0 if "-disable-llvm-passes" in flags else Invocation(opt=opt).opt_level
    if level:
        flags += enzyme_preopt.FRONTEND_ONLY
    warnings: list[str] = []
    lang = "c++" if path.suffix in _CXX else "c"
    marked = loop_annotations.mark(path, lang, flags)
    with tempfile.TemporaryDirectory(prefix="pyzyme-marked-") as tmp:
        if marked is not None:  # compiled under its own name: the IR names the file alone
            path = Path(tmp) / path.name
            path.write_text(marked)
        text = compile_to_ir(path, lang, opt, flags, diagnostics=warnings)
    _refuse_unknown_enzyme_attributes(warnings)
    text = fixed_point_markers.outline(loop_annotations.outline(text))
    if level:
        text = enzyme_preopt.optimize(enzyme_preopt.preserve_registered(text), level, flags)
    return text


_UNKNOWN_ATTRIBUTE = re.compile(r"^(\S+?:\d+):\d+: warning: unknown attribute '(enzyme[\w:]*)'")
_UNKNOWN_PRAGMA = re.compile(r"^(\S+?:\d+):\d+: warning: unknown pragma ignored")
_DIAGNOSTIC = re.compile(r"^\S+?:\d+:\d+: (warning|error|fatal error):")
# Enzyme's pragma as the source spells it, directly or through a macro: "enzyme checkpoint".
_ENZYME_PRAGMA = re.compile(r"\benzyme\s+([A-Za-z_]\w*)")
_CHECKPOINT_HINT = ("write the loop as __enzyme_checkpoint_for((void *)step, start, n, "
                    "enzyme_scheme, &EnzymeCkptRevolve, &config, enzyme_checkpoint_region, "
                    "ptr, bytes, args...) of <enzyme/checkpoint.h>, its body a function of its "
                    "own; pyzyme does not read the loop annotations")


def _refuse_unknown_enzyme_attributes(warnings: list[str]) -> None:
    """Clang ignores, with a warning, the Enzyme attributes pyzyme does not spell for it
    (``pyzyme_enzyme_attributes.h``) and Enzyme's pragmas (``#pragma enzyme checkpoint``); a
    program relying on one is refused, naming it."""
    for k, line in enumerate(warnings):
        m = _UNKNOWN_ATTRIBUTE.match(line)
        if m:
            raise UnsupportedError(
                f"{m.group(1)}: the Enzyme attribute {m.group(2)} is not supported by pyzyme",
                hint=_CHECKPOINT_HINT if "checkpoint" in m.group(2) else
                "pyzyme reads enzyme_inactive, enzyme_inactive_noblock, "
                "enzyme_function_like and enzyme_shadow; remove the attribute or use "
                "pyzyme's own equivalent")
        m = _UNKNOWN_PRAGMA.match(line)
        if m:
            end = next((j for j in range(k + 1, len(warnings))
                        if _DIAGNOSTIC.match(warnings[j])), len(warnings))
            pragma = _ENZYME_PRAGMA.search("\n".join(warnings[k + 1:end]))
            if pragma:
                raise UnsupportedError(
                    f"{m.group(1)}: the Enzyme pragma `enzyme {pragma.group(1)}` is not "
                    f"supported by pyzyme",
                    hint=_CHECKPOINT_HINT if "checkpoint" in pragma.group(1) else
                    "remove the pragma")


def _compiler(cxx: bool) -> list[str]:
    from pyzyme.frontends.c.clang import require_ziglang

    require_ziglang()
    return [sys.executable, "-m", "ziglang", "c++" if cxx else "cc"]


def cc(inv: Invocation, workdir: str | None = None) -> Path:
    """Compile, differentiate and link ``inv``; returns the executable (or library)."""
    output = Path(inv.output or ("a.out" if not inv.shared else "a.so"))
    with tempfile.TemporaryDirectory(prefix="pyzyme-cc-", dir=workdir) as tmp:
        lls = []
        for k, src in enumerate(inv.sources):
            ll = Path(tmp) / f"{k}-{src.stem}.ll"
            ll.write_text(source_to_ir(src, inv))
            lls.append(str(ll))
        cmd = [*_compiler(inv.cxx), inv.opt, "-Wno-override-module", *lls,
               *inv.link_flags, "-lm", "-o", str(output)]
        with notice_if_slow(f"pyzyme: clang is linking {output} (zig's first run builds "
                            f"its C library, once, for a minute or so)"):
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise FrontendError(f"linking {output} failed:\n{proc.stderr.strip()}",
                                hint=" ".join(cmd))
    return output


def run(inv: Invocation) -> int:
    """JIT-compile ``inv``'s program and run its ``main``; returns its exit status."""
    from pyzyme.runtime.modules import parse
    from pyzyme.runtime.standalone import Program, _unresolved

    texts = [source_to_ir(src, inv) for src in inv.sources]
    module = parse(texts[0], what=str(inv.sources[0]))
    for text, src in zip(texts[1:], inv.sources[1:]):
        module.link_in(parse(text, what=str(src)))
    if _unresolved(module):  # the C++ runtime: link an executable instead
        with tempfile.TemporaryDirectory(prefix="pyzyme-run-") as tmp:
            inv.output = os.path.join(tmp, "program")
            exe = cc(inv)
            return subprocess.run([str(exe), *inv.program_args], check=False).returncode
    return Program(str(module), name=str(inv.sources[0]), opt_level=0).run_main(
        inv.program_args)
