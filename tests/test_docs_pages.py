"""Every code example in the documentation's pages (docs/*.rst) runs, and prints what the page
shows: the ``>>>`` blocks are doctests, checked page by page (the gallery, docs/examples, runs
in ``make docs`` instead).

A page about a feature still on its way into main says so in its first lines, as
``.. requires: pyzyme.jax.wrap`` (a dotted name); its examples run once that name imports,
and are skipped until then.
"""

import doctest
from dataclasses import fields
import importlib
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p for p in DOCS.glob("*.rst") if not p.name.startswith("sg_"))  # sg_: generated


def _available(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.skipif(not PAGES, reason="docs/ is not installed with the package")
@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_page_examples(page, monkeypatch):
    text = page.read_text()
    for needed in re.findall(r"^\.\. requires: (\S+)", text, re.M):
        if not _available(needed):
            pytest.skip(f"{page.name} documents {needed}, not in this pyzyme yet")
    monkeypatch.setenv("PYZYME_NOTICE", "0")
    monkeypatch.chdir(page.parent)
    from pyzyme import settings
    before = settings.current()  # a page may change the options; the next one gets them back
    try:
        result = doctest.testfile(str(page), module_relative=False, verbose=False, report=True,
                                  optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                                  globs={"__name__": f"docs_{page.stem.replace('-', '_')}"})
    finally:
        settings.set_options(**{f.name: getattr(before, f.name) for f in fields(before)})
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {page.name}"
    if ">>>" in text:
        assert result.attempted > 0


@pytest.mark.skipif(not PAGES, reason="docs/ is not installed with the package")
def test_api_reference_lists_every_public_name():
    import pyzyme
    text = (DOCS / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. auto\w+:: pyzyme\.(\w+)$", text, re.M))
    missing = sorted(set(pyzyme.__all__) - documented)
    assert not missing, f"docs/api.rst lacks {missing}"
