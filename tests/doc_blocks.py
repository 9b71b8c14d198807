"""The code blocks of README.md and of docs/*.rst, for the tests that run them.

A test asks for a block by a marker, a string that only that block contains
(``readme_block("def taylor_exp")``, ``docs_block("mpi.rst", "dot_mpi")``), with the marker
written as a literal: tests/test_doc_blocks.py reads the tests' source for those calls and fails
when a block is run by no test (or is not listed there as one that cannot run, such as
``pip install``). :func:`run_block` executes a Python block statement by statement and checks
each result it shows as ``# -> VALUE`` (on the statement's line or the next one).
"""

from __future__ import annotations

import ast
import math
import re
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
_CODE_BLOCK = re.compile(r"^\.\. code-block:: (\w+)\n((?:\n|[ \t]+\S.*\n)+)", re.M)
_SHOWN = re.compile(r"#\s*->\s*(.*)$")


def _missing(path: Path) -> None:
    if not path.exists():
        import pytest
        pytest.skip(f"{path.name} is not installed with the package")


def readme_blocks(lang: str = "python") -> list[str]:
    """Every fenced block of README.md in ``lang`` (``python``, ``sh``, ``c``), in order."""
    return [code for fence, code in _FENCE.findall(README.read_text()) if fence == lang]


def docs_blocks(lang: str = "python") -> list[tuple[str, str]]:
    """Every ``.. code-block:: lang`` of docs/*.rst as ``(page name, dedented code)``."""
    return [(page.name, textwrap.dedent(code).strip("\n") + "\n")
            for page in sorted(DOCS.glob("*.rst")) if not page.name.startswith("sg_")
            for fence, code in _CODE_BLOCK.findall(page.read_text()) if fence == lang]


def _only(blocks: list[str], marker: str, where: str) -> str:
    found = [b for b in blocks if marker in b]
    if len(found) != 1:
        raise LookupError(f"{len(found)} blocks of {where} contain {marker!r}; a marker names one")
    return found[0]


def readme_block(marker: str, lang: str = "python") -> str:
    """The one ``lang`` block of README.md that contains ``marker`` (skips without README)."""
    _missing(README)
    return _only(readme_blocks(lang), marker, f"README.md ({lang})")


def docs_block(page: str, marker: str, lang: str = "python") -> str:
    """The one ``.. code-block:: lang`` of ``docs/page`` that contains ``marker``."""
    _missing(DOCS / page)
    return _only([code for name, code in docs_blocks(lang) if name == page], marker,
                 f"docs/{page} ({lang})")


def shown_value(comment: str) -> str | None:
    """The Python expression a ``# -> VALUE: prose`` comment shows: its longest prefix, cut
    before a ``:``, ``,`` or the end, that parses as an expression.

    >>> shown_value("(0.6, 0.8)")
    '(0.6, 0.8)'
    >>> shown_value("3.0: stop_gradient's result is held constant")
    '3.0'
    >>> shown_value("((None, 2.2),), and dA == [3.3]")
    '((None, 2.2),)'
    """
    cuts = [m.start() for m in re.finditer(r"[:,]\s", comment)] + [len(comment.rstrip())]
    for cut in sorted(cuts, reverse=True):
        try:
            ast.parse(comment[:cut], mode="eval")
        except SyntaxError:
            continue
        return comment[:cut]
    return None


def assert_shown(got, shown, where: str, rel: float = 1e-9) -> None:
    """``got`` is what the docs show: the same structure and types of entries, numbers to
    ``rel`` (the docs print rounded values; the last bits differ between CPUs)."""
    if isinstance(shown, (tuple, list)) and not isinstance(got, np.ndarray):
        assert isinstance(got, (tuple, list)) and len(got) == len(shown), \
            f"{where}: got {got!r}, the docs show {shown!r}"
        assert type(got) is type(shown) or not hasattr(shown, "_fields"), \
            f"{where}: got a {type(got).__name__}, the docs show a {type(shown).__name__}"
        for g, s in zip(got, shown):
            assert_shown(g, s, where, rel)
    elif isinstance(shown, dict):
        assert isinstance(got, dict) and got.keys() == shown.keys(), \
            f"{where}: got {got!r}, the docs show {shown!r}"
        for key in shown:
            assert_shown(got[key], shown[key], where, rel)
    elif isinstance(shown, (np.ndarray, list)) or isinstance(got, np.ndarray):
        np.testing.assert_allclose(np.asarray(got), np.asarray(shown), rtol=rel, atol=0,
                                   err_msg=where)
    elif shown is None or isinstance(shown, (str, bool)):
        assert got == shown and type(got) is type(shown), \
            f"{where}: got {got!r}, the docs show {shown!r}"
    elif isinstance(shown, int):
        assert isinstance(got, (int, np.integer)) and got == shown, \
            f"{where}: got {got!r}, the docs show the integer {shown!r}"
    else:
        assert isinstance(got, (float, complex, np.floating, np.complexfloating)), \
            f"{where}: got {got!r}, the docs show {shown!r}"
        assert math.isclose(got.real, shown.real, rel_tol=rel, abs_tol=1e-300) and \
            math.isclose(got.imag, shown.imag, rel_tol=rel, abs_tol=1e-300), \
            f"{where}: got {got!r}, the docs show {shown!r}"


def run_block(code: str, scope: dict | None = None, name: str = "README.md",
              rel: float = 1e-9) -> dict:
    """Execute ``code`` in ``scope`` statement by statement, checking each expression
    statement that shows its value (``# -> VALUE``, on its last line or alone on the next
    one) against that value; returns the scope. A ``# ->`` anywhere else (after an
    assignment, inside a function) fails too: no shown value goes unchecked."""
    scope = {} if scope is None else scope
    lines = code.splitlines()
    unchecked = {n for n, line in enumerate(lines) if _SHOWN.search(line)}
    for stmt in ast.parse(code).body:
        unit = compile(ast.Module([stmt], type_ignores=[]), name, "exec")
        if not isinstance(stmt, ast.Expr):
            exec(unit, scope)  # noqa: S102 - the docs' own code
            continue
        comment = _SHOWN.search(lines[stmt.end_lineno - 1])
        after = lines[stmt.end_lineno].strip() if stmt.end_lineno < len(lines) else ""
        if comment is None and after.startswith("#"):
            comment = _SHOWN.search(after)
        unchecked -= {stmt.end_lineno - 1, stmt.end_lineno} if comment else set()
        got = eval(compile(ast.Expression(stmt.value), name, "eval"), scope)  # noqa: S307
        if comment is None:
            continue
        text = shown_value(comment.group(1))
        where = f"{name}: {ast.get_source_segment(code, stmt)}"
        assert text is not None, f"{where}: cannot read the shown value {comment.group(1)!r}"
        shown = eval(text, {**scope, "array": np.array, "nan": np.nan,  # noqa: S307
                            "inf": np.inf})
        assert_shown(got, shown, where, rel)
    assert not unchecked, (f"{name}: '# ->' shows a value where no expression statement ends: "
                           f"{[lines[n] for n in sorted(unchecked)]}")
    return scope
