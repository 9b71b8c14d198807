"""The round-trip corpus of tests/corpus/ as IR texts, for benchmarks.

Usage (from a script in benchmarks/)::

    from _corpus import corpus_texts
    texts = corpus_texts()                      # {"c/loops.c-O2": "...", "numba/fib/ad": ...}
    small = corpus_texts(c=False, numba=())     # the hand-written modules only
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

import corpus as _corpus  # noqa: E402  (found on the path set just above)

# Numba functions whose compilation takes over a second each (BLAS/LAPACK, sorting, strings);
# left out of the default benchmark corpus to keep it quick to build.
SLOW_NUMBA = frozenset(
    {
        "alloc_2d",
        "np_cumsum_diff",
        "np_linalg",
        "np_matmul",
        "np_outer_axis",
        "np_reductions",
        "np_sort_where",
        "slices_and_views",
        "string_ops",
    }
)


def numba_names(include_slow: bool = False) -> list[str]:
    """Names of the Numba corpus functions, without :data:`SLOW_NUMBA` unless asked."""
    from corpus.numba_functions import CORPUS

    return [name for name, _f, _a in CORPUS if include_slow or name not in SLOW_NUMBA]


def corpus_texts(
    *,
    c: bool = True,
    ll: bool = True,
    numba: Iterable[str] | None = None,
    pipelines: Iterable[str] = _corpus.NUMBA_PIPELINES,
    cache_dir: Path | None = None,
) -> dict[str, str]:
    """IR texts of the corpus, ``{id: text}``, as LLVM 22 prints them.

    Parameters
    ----------
    c
        Include the C/C++ programs at -O0 and -O2 (needs ``ziglang``; left out without it).
    ll
        Include the hand-written ``.ll`` modules.
    numba
        Names of the Numba functions to capture; by default :func:`numba_names` (all but the
        slow ones). ``()`` leaves Numba out.
    pipelines
        The :func:`pyzyme.frontends.numba.capture` pipelines to capture each function with.
    cache_dir
        Passed to :func:`corpus.compile_c_corpus` to reuse compiled C.

    Functions that cannot be captured are left out, with a note on stderr.
    """
    from pyzyme.frontends.c.clang import ziglang_available

    texts: dict[str, str] = {}
    if c and ziglang_available():
        texts.update(_corpus.compile_c_corpus(cache_dir=cache_dir))
    elif c:
        print("note: ziglang is not installed; the C/C++ corpus is left out", file=sys.stderr)
    if ll:
        texts.update(_corpus.ll_modules())
    names = set(numba_names() if numba is None else numba)
    if names:
        from corpus.numba_functions import corpus as numba_corpus

        from pyzyme.frontends.numba import capture

        for name, function, args in numba_corpus():
            if name not in names:
                continue
            for pipeline in pipelines:
                try:
                    texts[f"numba/{name}/{pipeline}"] = capture(
                        function, args, pipeline=pipeline
                    ).text
                except Exception as err:  # noqa: BLE001 - a benchmark reports and goes on
                    print(f"note: cannot capture {name} ({pipeline}): {err}", file=sys.stderr)
    return texts
