"""The IR corpus shared by the round-trip tests and the IR benchmarks.

Three sources of LLVM IR, each as text printed by LLVM 22 (through llvmlite):

- ``c/``: C and C++ programs, each compiled at ``-O0`` and ``-O2`` by
  :func:`pyzyme.frontends.c.clang.compile_to_ir`. A line ``pyzyme-corpus-flags: ...`` in a source
  file adds compiler flags for that file.
- ``ll/``: hand-written modules for instructions, attributes and module-level entities that
  neither clang nor Numba emit often (``va_arg``, ``callbr``, funclet EH, ifuncs, TLS modes...).
- ``numba_functions.py``: ``@njit`` functions with example arguments, captured by
  :func:`pyzyme.frontends.numba.capture` with both of its pipelines.

Every function here returns ``{id: ir_text}`` with readable ids such as ``c/loops.c-O2``,
``ll/calls.ll`` and ``numba/taylor_exp/ad``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent
C_DIR = CORPUS_DIR / "c"
LL_DIR = CORPUS_DIR / "ll"
OPT_LEVELS = ("-O0", "-O2")
NUMBA_PIPELINES = ("ad", "numba")
_FLAGS = re.compile(r"pyzyme-corpus-flags:([^\n]*)")
_C_SUFFIXES = {".c", ".cpp"}


def c_programs() -> list[Path]:
    """The C and C++ source files of the corpus, sorted by name."""
    return sorted(p for p in C_DIR.iterdir() if p.suffix in _C_SUFFIXES)


def compile_flags(path: Path) -> tuple[str, ...]:
    """Extra compiler flags a source file asks for with ``pyzyme-corpus-flags:``."""
    match = _FLAGS.search(path.read_text())
    return tuple(match.group(1).split()) if match else ()


def c_ids(opt_levels: Iterable[str] = OPT_LEVELS) -> list[str]:
    """The ids :func:`compile_c_corpus` returns, without compiling anything."""
    return [f"c/{p.name}{opt}" for p in c_programs() for opt in opt_levels]


def compile_c_corpus(
    cache_dir: Path | None = None, opt_levels: Iterable[str] = OPT_LEVELS, jobs: int = 4
) -> dict[str, str]:
    """Compile every C/C++ program at every optimisation level, in parallel.

    Parameters
    ----------
    cache_dir
        If given, compiled IR is kept there under a hash of the source, flags and level, and
        reused by later calls (e.g. a ``tmp_path_factory`` folder shared by a test session).
    opt_levels
        The optimisation flags to compile with.
    jobs
        Compilers run at the same time (each is a separate process).

    Returns
    -------
    dict
        ``{"c/<file><opt>": ir_text}``, in the order of :func:`c_ids`.
    """
    from pyzyme.frontends.c.clang import compile_to_ir

    work = [(p, opt) for p in c_programs() for opt in opt_levels]

    def one(item: tuple[Path, str]) -> str:
        path, opt = item
        flags = compile_flags(path)
        cached = None
        if cache_dir is not None:
            key = hashlib.sha256(f"{path.read_text()}\0{opt}\0{flags}".encode()).hexdigest()[:24]
            cached = Path(cache_dir) / f"{path.name}{opt}.{key}.ll"
            if cached.is_file():
                return cached.read_text()
        text = compile_to_ir(path, opt=opt, extra_args=flags)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(text)
        return text

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        texts = list(pool.map(one, work))
    return {f"c/{p.name}{opt}": text for (p, opt), text in zip(work, texts)}


def ll_modules() -> dict[str, str]:
    """The hand-written modules, normalised through llvmlite: ``{"ll/<file>": ir_text}``."""
    from pyzyme.frontends.c.clang import normalize_ir

    return {
        f"ll/{p.name}": normalize_ir(p.read_text(), name=p.name)
        for p in sorted(LL_DIR.glob("*.ll"))
    }


def numba_ids(pipelines: Iterable[str] = NUMBA_PIPELINES) -> list[str]:
    """The ids :func:`capture_numba_corpus` returns, without compiling anything."""
    from corpus.numba_functions import CORPUS

    return [f"numba/{name}/{pl}" for name, _f, _args in CORPUS for pl in pipelines]


def capture_numba_corpus(pipelines: Iterable[str] = NUMBA_PIPELINES) -> dict[str, str | Exception]:
    """Capture every Numba corpus function: ``{"numba/<name>/<pipeline>": ir_text}``.

    A function that cannot be captured maps to the :class:`~pyzyme.errors.PyzymeError` (or
    other exception) raised, so that one failure does not hide the rest of the corpus.
    """
    from corpus.numba_functions import corpus
    from pyzyme.frontends.numba import capture

    out: dict[str, str] = {}
    for name, function, args in corpus():
        for pipeline in pipelines:
            try:
                out[f"numba/{name}/{pipeline}"] = capture(function, args, pipeline=pipeline).text
            except Exception as err:  # noqa: BLE001 - reported per entry by the tests
                out[f"numba/{name}/{pipeline}"] = err
    return out
