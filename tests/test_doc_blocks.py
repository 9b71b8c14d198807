"""Every code example in README.md and docs/ is run by a test, so none can go stale unseen.

A test claims a block by asking tests.doc_blocks for it by a marker written as a literal
(``readme_block("def taylor_exp")``, ``docs_block("mpi.rst", "def dot_mpi")``); these tests read
every module of tests/ for such calls. A block no test can run (an install command, a fragment)
is listed in NOT_RUN with the reason. The ``>>>`` examples of docs/*.rst are doctests
(tests/test_docs_pages.py), those of the API reference's docstrings run in the package's
doctests (``pytest --doctest-modules pyzyme``, a shard of ``make test``); the gallery runs in
``make docs``.
"""

import ast
import doctest
import functools
import importlib
import re
from pathlib import Path

import pytest

from tests.doc_blocks import DOCS, README, ROOT, docs_blocks, readme_blocks, run_block

TESTS = Path(__file__).resolve().parent

#: (file, language, marker) of the blocks that no test runs, and why.
NOT_RUN = {
    ("README.md", "sh", "make demo "): "installs .venv; tests/test_cli.py runs `pyzyme demo`",
    ("README.md", "sh", "gradbench run"): "needs a GradBench checkout; "
                                          "tests/test_gradbench_protocol.py speaks its protocol",
    ("README.md", "sh", "pip install '.[c]'"): "installs packages",
    ("README.md", "c", "#pragma enzyme checkpoint"): "a fragment (its '...'); "
                                                     "tests/test_enzyme_c.py runs whole programs",
    ("getting-started.rst", "sh", "pip install '.[docs]'"): "installs packages",
    ("c-cpp.rst", "sh", "clang -O2 -S -emit-llvm"): "needs clang on PATH; tests/test_llvm_api.py"
                                                    "::test_opt_writes_ir_clang_links does the "
                                                    "same with ziglang's",
}


@functools.cache
def _claims() -> frozenset[tuple[str, str, str]]:
    """``(file, language, marker)`` of each readme_block/docs_block call in tests/."""
    found = set()
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if node.func.id == "readme_block" and len(args) == len(node.args):
                found.add(("README.md", *(args[1:] or ["python"]), args[0]))
            elif node.func.id == "docs_block" and len(args) == len(node.args):
                found.add((args[0], *(args[2:] or ["python"]), args[1]))
    return frozenset(found)


def _unclaimed(where: str, blocks: dict[str, list[str]]) -> list[str]:
    claims = {c for c in _claims() | set(NOT_RUN) if c[0] == where}
    problems = []
    for lang, codes in blocks.items():
        for code in codes:
            if not any(c[1] == lang and c[2] in code for c in claims):
                problems.append(f"{where}: a {lang} block no test runs:\n{code}")
    for _, lang, marker in claims:
        count = sum(marker in code for code in blocks.get(lang, []))
        if count != 1:
            problems.append(f"{where}: the marker {marker!r} ({lang}) is in {count} blocks")
    return problems


@pytest.mark.skipif(not README.exists(), reason="README.md is not installed with the package")
def test_every_readme_block_is_run_by_a_test():
    text = README.read_text()
    fences = re.findall(r"^```(\w*)\n", text, re.M)
    langs = set(fences[::2])             # opening fences; each block opens and closes one
    assert "" not in langs, "a README block without a language: name it (```python, ```sh)"
    blocks = {lang: readme_blocks(lang) for lang in langs}
    assert sum(map(len, blocks.values())) * 2 == len(fences)
    assert len(blocks["python"]) >= 12
    problems = _unclaimed("README.md", blocks)
    assert not problems, "\n\n".join(problems)


@pytest.mark.skipif(not DOCS.exists(), reason="docs/ is not installed with the package")
def test_every_docs_code_block_is_run_by_a_test():
    problems = []
    for page in sorted(p for p in DOCS.glob("*.rst") if not p.name.startswith("sg_")):
        text = page.read_text()                          # (sg_: made by the gallery's build)
        for line in re.findall(r"^.*::[ \t]*$", text, re.M):
            # a paragraph's literal block, or code in a directive that tests cannot see
            line = line.strip()
            if not line.startswith(".. ") or re.match(r"\.\. (code|sourcecode|highlight)::",
                                                      line):
                problems.append(f"{page.name}: {line!r}: write code as >>> or .. code-block::")
        for snippet in re.findall(r"^\.\. literalinclude:: (\S+)", text, re.M):
            if not re.search(rf"^(>>>|\.\.\.) .*{re.escape(snippet)}", text, re.M):
                problems.append(f"{page.name}: {snippet} is shown, but no >>> example runs it")
        langs = set(re.findall(r"^\.\. code-block:: (\w+)", text, re.M))
        blocks = {lang: [c for p, c in docs_blocks(lang) if p == page.name] for lang in langs}
        problems += _unclaimed(page.name, blocks)
    assert not problems, "\n\n".join(problems)


@pytest.mark.skipif(not DOCS.exists(), reason="docs/ is not installed with the package")
def test_api_reference_examples_run_as_doctests():
    """The docstrings the API reference shows: an Examples section is made of ``>>>`` lines,
    found by doctest in a module of the package (which ``make test`` runs as doctests)."""
    text = (DOCS / "api.rst").read_text()
    names = re.findall(r"^\.\. auto\w+:: (\S+)$", text, re.M)
    assert len(names) > 40
    finder = doctest.DocTestFinder()
    checked = 0
    for full in names:
        module_name, _, attr = full.rpartition(".")
        obj = getattr(importlib.import_module(module_name), attr)
        doc = obj.__doc__ or ""
        if not re.search(r"^\s*Examples\n\s*-{8}", doc, re.M):
            assert not re.search(r"::\s*$", doc, re.M), f"{full}: literal code in its docstring"
            continue
        examples = doc[re.search(r"^\s*Examples\n", doc, re.M).end():]
        assert ">>>" in examples, f"{full}: its Examples section has no >>> example"
        module = importlib.import_module(obj.__module__)
        assert Path(module.__file__).is_relative_to(ROOT / "pyzyme")
        tests = [t for t in finder.find(module) if t.docstring == doc]
        assert tests and tests[0].examples, f"{full}: doctest does not find its examples"
        checked += 1
    assert checked >= 20


def test_run_block_checks_what_a_block_shows():
    assert run_block("x = 2\nx + 1   # -> 3: the sum\n")["x"] == 2
    run_block("divmod(7, 2)\n# -> (3, 1)\n")
    run_block("import numpy as np\nnp.ones(2) / 3   # -> array([0.33333333, 0.33333333])\n",
              rel=1e-7)
    for wrong in ("1 + 1   # -> 3", "1.0 + 1   # -> 2", "(1.0, 2.0)   # -> (1.0, 2)",
                  "x = 1   # -> 1", "def f():\n    return 1   # -> 1\n"):
        with pytest.raises(AssertionError):
            run_block(wrong)
