"""The headless-browser check of the documentation site (docs/check_site.py, make docs-check):
it finds what it is meant to find on a small site made here, and passes on the built site.
Both run only where Chromium is installed (apt-get install chromium); the second only once
make docs has built the site."""

import importlib.util
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
SITE = DOCS / "_build" / "html"


def _checker():
    spec = importlib.util.spec_from_file_location("check_site", DOCS / "check_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_site = _checker() if (DOCS / "check_site.py").exists() else None
BROWSER = check_site.find_browser() if check_site else None
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no Chromium (apt-get install chromium)")

_PNG = bytes.fromhex(  # a 1x1 PNG
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c63f8cfc0f01f0005000201a5f2d3c30000000049454e44ae426082")

_SEARCH = """<html><head><title>Search</title></head><body><main>
<div id="search-results"><ul class="search"></ul></div>
<script>setTimeout(() => { if (location.search.includes('q=gradient'))
  document.querySelector('ul.search').innerHTML = '<li>a result</li>'; }, 300);</script>
</main></body></html>"""


def _page(body: str) -> str:
    return (f"<html><head><title>A page</title>{body}</head><body><main>"
            "Some text long enough to count as content.</main></body></html>")


@needs_browser
def test_check_reports_missing_assets_and_images(tmp_path):
    (tmp_path / "ok.png").write_bytes(_PNG)
    (tmp_path / "index.html").write_text(_page('<link rel="stylesheet" href="_static/gone.css">'))
    (tmp_path / "pictures.html").write_text(
        _page("").replace("</main>", '<img src="ok.png"><img src="gone.png" loading="lazy">'
                                     "</main>"))
    (tmp_path / "empty.html").write_text("<html><head><title></title></head><body></body></html>")
    (tmp_path / "search.html").write_text(_SEARCH)
    problems = check_site.check_site(tmp_path, BROWSER, log=lambda *a: None)
    assert "index.html: 404 _static/gone.css" in problems
    assert "pictures.html: image gone.png did not load" in problems
    assert any(p.startswith("empty.html: renders no content") for p in problems)
    assert not any("ok.png" in p or "search" in p for p in problems), problems


@needs_browser
def test_check_reports_a_search_without_results(tmp_path):
    (tmp_path / "index.html").write_text(_page(""))
    (tmp_path / "search.html").write_text(_SEARCH.replace("q=gradient", "q=nothing"))
    problems = check_site.check_site(tmp_path, BROWSER, log=lambda *a: None, search_timeout=2)
    assert problems == ["search.html: no results for 'gradient'"]


@needs_browser
@pytest.mark.skipif(not (SITE / "index.html").exists(), reason="the site is not built (make docs)")
def test_built_site_renders_and_searches():
    lines = []
    assert check_site.check_site(SITE, BROWSER, log=lines.append) == []
    pages = int(lines[0].split()[0])
    assert pages >= 20 and (SITE / "gallery" / "index.html").exists()
