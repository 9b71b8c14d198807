"""pyzyme.ir reads and prints every module of the corpus (tests/corpus/) without losing anything.

For each module, as LLVM 22 prints it (``text0``):

1. ``text1 = str(ir.parse_module(text0))`` -- pyzyme reads LLVM's text and prints it again;
2. LLVM accepts ``text1`` (``parse_assembly(text1).verify()``);
3. ``str(ir.parse_module(text1)) == text1`` -- printing is a fixed point;
4. LLVM sees the same module in ``text0`` and ``text1`` (both re-printed by LLVM compare equal),
   so nothing was dropped or changed on the way through pyzyme.

The corpus: C/C++ programs compiled at -O0 and -O2 (skipped without ``ziglang``), hand-written
``.ll`` modules, and Numba functions captured with the ``ad`` and ``numba`` pipelines.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable
from pathlib import Path

import corpus
import llvmlite.binding as llvm
import pytest
from corpus import numba_functions

from pyzyme.errors import PyzymeError
from pyzyme.frontends.c.clang import ziglang_available

ir = pytest.importorskip("pyzyme.ir")

C_IDS = corpus.c_ids()
LL_IDS = [f"ll/{p.name}" for p in sorted(corpus.LL_DIR.glob("*.ll"))]
NUMBA_IDS = corpus.numba_ids()
NUMBA_NAMES = [name for name, _f, _args in numba_functions.CORPUS]

needs_zig = pytest.mark.skipif(
    not ziglang_available(),
    reason="the C/C++ corpus is compiled with the 'ziglang' package, not installed",
)


# --- corpus fixtures (built once per session) ----------------------------------------------


@pytest.fixture(scope="session")
def ir_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the corpus IR is written, so that a failing module can be inspected."""
    return tmp_path_factory.mktemp("corpus-ir")


@pytest.fixture(scope="session")
def c_corpus(ir_dir: Path) -> dict[str, str]:
    if not ziglang_available():
        pytest.skip("the C/C++ corpus is compiled with the 'ziglang' package, not installed")
    return corpus.compile_c_corpus(cache_dir=ir_dir / "c-cache")


@pytest.fixture(scope="session")
def ll_corpus() -> dict[str, str]:
    return corpus.ll_modules()


@pytest.fixture(scope="session")
def numba_corpus() -> dict[str, str | Exception]:
    try:
        from pyzyme.frontends.numba import capture  # noqa: F401
    except ImportError as err:
        pytest.skip(f"pyzyme.frontends.numba.capture is not available: {err}")
    return corpus.capture_numba_corpus()


class RoundTrip:
    """The stages of one module's round trip, computed once and shared by the tests."""

    def __init__(self, key: str, text0: str, ir_dir: Path) -> None:
        self.key = key
        self.text0 = text0
        self.path = ir_dir / (key.replace("/", "__") + ".ll")
        self.path.write_text(text0)
        self.text1 = str(ir.parse_module(text0))
        self.path.with_suffix(".pyzyme.ll").write_text(self.text1)

    def where(self) -> str:
        return f"(input: {self.path}, pyzyme's print: {self.path.with_suffix('.pyzyme.ll')})"


@pytest.fixture(scope="session")
def roundtrip(ir_dir: Path) -> Callable[[str, str], RoundTrip]:
    memo: dict[str, RoundTrip] = {}

    def get(key: str, text0: str) -> RoundTrip:
        if key not in memo:
            memo[key] = RoundTrip(key, text0, ir_dir)
        return memo[key]

    return get


# --- checks --------------------------------------------------------------------------------


def _diff(a: str, b: str, a_name: str, b_name: str, limit: int = 80) -> str:
    lines = list(
        difflib.unified_diff(a.splitlines(), b.splitlines(), a_name, b_name, lineterm="", n=2)
    )
    more = f"\n... {len(lines) - limit} more diff lines" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def _llvm_print(text: str) -> str:
    # A fresh context each time: in a shared one, LLVM renames struct types that already exist.
    return str(llvm.parse_assembly(text, llvm.create_context()))


def check_fixed_point(rt: RoundTrip) -> None:
    try:
        llvm.parse_assembly(rt.text1, llvm.create_context()).verify()
    except RuntimeError as err:
        pytest.fail(f"LLVM rejects pyzyme's print of {rt.key}: {err}\n{rt.where()}")
    text2 = str(ir.parse_module(rt.text1))
    if text2 != rt.text1:
        pytest.fail(
            f"printing {rt.key} is not a fixed point {rt.where()}:\n"
            + _diff(
                rt.text1,
                text2,
                "text1 (pyzyme print of LLVM's text)",
                "text2 (pyzyme print of text1)",
            )
        )


def check_preserved(rt: RoundTrip) -> None:
    before = _llvm_print(rt.text0)
    try:
        after = _llvm_print(rt.text1)
    except RuntimeError as err:
        pytest.fail(f"LLVM cannot read pyzyme's print of {rt.key}: {err}\n{rt.where()}")
    if before != after:
        pytest.fail(
            f"LLVM sees a different module after pyzyme's round trip of {rt.key} {rt.where()}:\n"
            + _diff(before, after, "LLVM print of the input", "LLVM print of pyzyme's print")
        )


def _text(table: dict[str, str | Exception], key: str) -> str:
    text = table[key]
    if isinstance(text, Exception):
        pytest.fail(f"could not produce the IR of {key}: {type(text).__name__}: {text}")
    return text


# --- tests ---------------------------------------------------------------------------------


@needs_zig
@pytest.mark.parametrize("key", C_IDS)
def test_c_fixed_point(key: str, c_corpus, roundtrip) -> None:
    check_fixed_point(roundtrip(key, _text(c_corpus, key)))


@needs_zig
@pytest.mark.parametrize("key", C_IDS)
def test_c_preserved(key: str, c_corpus, roundtrip) -> None:
    check_preserved(roundtrip(key, _text(c_corpus, key)))


@pytest.mark.parametrize("key", LL_IDS)
def test_ll_fixed_point(key: str, ll_corpus, roundtrip) -> None:
    check_fixed_point(roundtrip(key, _text(ll_corpus, key)))


@pytest.mark.parametrize("key", LL_IDS)
def test_ll_preserved(key: str, ll_corpus, roundtrip) -> None:
    check_preserved(roundtrip(key, _text(ll_corpus, key)))


@pytest.mark.parametrize("key", NUMBA_IDS)
def test_numba_fixed_point(key: str, numba_corpus, roundtrip) -> None:
    check_fixed_point(roundtrip(key, _text(numba_corpus, key)))


@pytest.mark.parametrize("key", NUMBA_IDS)
def test_numba_preserved(key: str, numba_corpus, roundtrip) -> None:
    check_preserved(roundtrip(key, _text(numba_corpus, key)))


@pytest.fixture(scope="session")
def numba_entries() -> dict[str, tuple]:
    # Compile under pyzyme's capture hook, so that capturing later needs no second compile;
    # running the corpus does not need the hook, so a hook that cannot be installed is ignored.
    with contextlib.suppress(ImportError, PyzymeError):
        from pyzyme.frontends.numba import hook

        hook.require_installed()
    return {name: (f, args) for name, f, args in numba_functions.corpus()}


@pytest.mark.parametrize("name", NUMBA_NAMES)
def test_numba_corpus_runs(name: str, numba_entries) -> None:
    """Every corpus function compiles and runs on its example arguments."""
    f, args = numba_entries[name]
    f(*args)


def test_corpus_sizes() -> None:
    """The corpus stays as large as the round-trip tests promise."""
    assert len(corpus.c_programs()) >= 24
    assert len(NUMBA_NAMES) >= 45
    assert len(set(NUMBA_NAMES)) == len(NUMBA_NAMES)
