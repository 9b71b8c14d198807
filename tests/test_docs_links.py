"""Errors that a documentation page explains end with a link to it: the link is in the
message, and the page and its anchor exist in docs/ (so a renamed section fails here, not in a
user's browser)."""

import ast
import re
from pathlib import Path

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, ActivityError, Const, Duplicated, Reverse, UnsupportedError, autodiff
from pyzyme.errors import DOCS_URL, PyzymeError

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _see(page_anchor: str) -> str:
    return f"  see {DOCS_URL}/{page_anchor}"


def test_message_ends_with_the_link_only_when_a_page_explains_it():
    plain = PyzymeError("no rule for @g", hint="write one")
    assert "see" not in str(plain) and plain.docs_url is None
    linked = PyzymeError("no rule for @g", hint="write one", docs="custom-rules.html")
    assert str(linked).splitlines()[-1] == _see("custom-rules.html")
    assert linked.docs_url == f"{DOCS_URL}/custom-rules.html"


def _anchors(rst: Path) -> set[str]:
    """The ids a page's sections get in the built HTML: a label just before a section title
    (``.. _temporary-storage:``) and each title's own id (docutils' ``make_id``)."""
    lines = rst.read_text().splitlines()
    ids = set()
    for n, line in enumerate(lines[:-1]):
        underline = lines[n + 1]
        if line.strip() and len(underline) >= len(line) and re.fullmatch(r"([=\-~^\"'`])\1+",
                                                                       underline):
            ids.add(re.sub(r"[^a-z0-9]+", "-", line.lower()).strip("-"))
        label = re.fullmatch(r"\.\. _([a-z0-9-]+):", line)
        if label:
            following = [ln for ln in lines[n + 1:n + 4] if ln.strip()]
            assert len(following) >= 2 and re.fullmatch(r"([=\-~^])\1+", following[1]), \
                f"{rst.name}: the label {label.group(1)} is not followed by a section title"
            ids.add(label.group(1))
    return ids


def _linked_pages() -> dict[str, str]:
    """Each ``docs=`` link an error of the package can carry (``"page.html#anchor"``), to the
    file and line that gives it. A link must be a string literal in the call, or in an
    assignment to the name the call passes, so that this test sees every one."""
    links = {}
    for source in sorted((ROOT / "pyzyme").rglob("*.py")):
        tree = ast.parse(source.read_text())
        assigned: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        assigned.setdefault(target.id, []).append(node.value)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg != "docs" or (isinstance(keyword.value, ast.Constant)
                                             and keyword.value.value is None):
                    continue
                values = [keyword.value]
                if isinstance(keyword.value, ast.Name):
                    values = assigned.get(keyword.value.id, [])
                found = [c.value for v in values for c in ast.walk(v)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                where = f"{source.relative_to(ROOT)}:{node.lineno}"
                assert found, f"{where}: docs= is not a literal this test can check"
                links.update((link, where) for link in found)
    return links


@pytest.mark.skipif(not DOCS.exists(), reason="docs/ is not installed with the package")
def test_every_linked_page_and_anchor_exists():
    links = _linked_pages()
    assert {"sharp-bits.html#temporary-storage", "sharp-bits.html#runtime-activity",
            "sharp-bits.html#read-only-arrays", "sharp-bits.html#integer-results",
            "sharp-bits.html#unsupported-constructs", "mental-model.html#annotations"} <= set(links)
    # the links the docs and docstrings print in full, as an error shows them
    for text in [p.read_text() for p in DOCS.glob("*.rst")] + \
            [p.read_text() for p in (ROOT / "pyzyme").rglob("*.py")]:
        for link in re.findall(re.escape(DOCS_URL) + r"/(\S+)", text):
            links.setdefault(link, "a page or docstring that shows it")
    for link, where in links.items():
        page, _, anchor = link.partition("#")
        assert re.fullmatch(r"[a-z0-9-]+\.html", page), f"{link} ({where}): not a page's file"
        rst = DOCS / page.replace(".html", ".rst")
        assert rst.exists(), f"{link} ({where}): no page {rst.name}"
        assert f"{page[:-5]}\n" in (DOCS / "index.rst").read_text(), \
            f"{link} ({where}): {rst.name} is in no toctree of index.rst"
        if anchor:
            assert anchor in _anchors(rst), f"{link} ({where}): no section {anchor} in {rst.name}"


@pytest.mark.skipif(not (ROOT / ".readthedocs.yaml").exists(),
                    reason=".readthedocs.yaml is not installed with the package")
def test_read_the_docs_builds_the_site_the_links_name():
    """DOCS_URL is the address Read the Docs gives the project named in pyproject.toml, and
    .readthedocs.yaml builds docs/ as make docs does: docs/conf.py, warnings as errors, pyzyme
    installed with its [docs] extra, on a Python pyproject allows."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert DOCS_URL == f"https://{project['name']}.readthedocs.io/en/latest"
    config = (ROOT / ".readthedocs.yaml").read_text()
    setting = dict(re.findall(r"^[ -]*([a-z_]+): *(\S.*?)\s*$", config, re.M))
    assert setting["version"] == "2"
    assert (ROOT / setting["configuration"]).resolve() == DOCS / "conf.py"
    assert setting["builder"] == "html" and setting["fail_on_warning"] == "true"
    assert "-W --keep-going" in (ROOT / "Makefile").read_text()
    assert setting["method"] == "pip" and setting["path"] == "."
    extras = re.search(r"extra_requirements:\n((?:\s+- \S+\n)+)", config).group(1).split()[1::2]
    assert extras == ["docs"] and "docs" in project["optional-dependencies"]
    python = tuple(int(v) for v in setting["python"].strip('"').split("."))
    assert python >= tuple(int(v) for v in project["requires-python"][2:].split("."))
    assert f"Programming Language :: Python :: {python[0]}.{python[1]}" in project["classifiers"]
    assert 'html_baseurl = DOCS_URL + "/"' in (DOCS / "conf.py").read_text()


def _tmp_power(x, tmp, n):
    tmp[0] = 1.0
    for _ in range(n):
        tmp[0] *= x
    return tmp[0]


def test_temporary_storage_error_links_its_section():
    with pytest.raises(ActivityError) as err:
        autodiff(Reverse, _tmp_power, Active(1.2), Const(np.empty(1)), Const(3))
    assert str(err.value).splitlines()[-1] == _see("sharp-bits.html#temporary-storage")


def test_runtime_activity_error_links_its_section():
    def pick(x, c, flag):
        a = x if flag else c
        a[0] = a[0] * a[1]
        return a[0] + x[1]
    with pytest.raises(ActivityError) as err:
        autodiff(Reverse, pick, Duplicated(np.ones(2), np.zeros(2)), Const(np.ones(2)),
                 Const(False))
    assert str(err.value).splitlines()[-1] == _see("sharp-bits.html#runtime-activity")


def test_read_only_shadow_error_links_its_section():
    shadow = np.zeros(2)
    shadow.flags.writeable = False
    with pytest.raises(ActivityError) as err:
        autodiff(Reverse, lambda v: np.sum(v * v), Duplicated(np.ones(2), shadow))
    assert str(err.value).splitlines()[-1] == _see("sharp-bits.html#read-only-arrays")


def test_integer_result_error_links_its_section():
    @numba.njit
    def bucket(x):
        return int(3.0 * x)
    with pytest.raises(UnsupportedError) as err:
        pyzyme.gradient(Reverse, bucket, 1.5)
    assert str(err.value).splitlines()[-1] == _see("sharp-bits.html#integer-results")


def test_active_array_error_links_the_annotations():
    with pytest.raises(UnsupportedError) as err:
        autodiff(Reverse, lambda v: np.sum(v), Active(np.ones(2)))
    assert str(err.value).splitlines()[-1] == _see("mental-model.html#annotations")


def test_a_construct_without_derivative_links_its_section():
    def singular_values(a):
        return np.sum(np.linalg.svd(a)[1])
    with pytest.raises(UnsupportedError) as err:
        pyzyme.gradient(Reverse, singular_values, np.eye(2))
    assert "np.linalg.svd" in str(err.value)
    assert str(err.value).splitlines()[-1] == _see("sharp-bits.html#unsupported-constructs")
