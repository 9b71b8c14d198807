"""Errors that a documentation page explains end with a link to it: the link is in the
message, and the page and its anchor exist in docs/ (so a renamed section fails here, not in a
user's browser)."""

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


@pytest.mark.skipif(not DOCS.exists(), reason="docs/ is not installed with the package")
def test_every_linked_page_and_anchor_exists():
    links = set()
    for source in (ROOT / "pyzyme").rglob("*.py"):
        links.update(re.findall(r'"([a-z0-9-]+\.html(?:#[a-z0-9-]+)?)"', source.read_text()))
    assert {"sharp-bits.html#temporary-storage", "sharp-bits.html#runtime-activity",
            "sharp-bits.html#read-only-arrays", "sharp-bits.html#integer-results",
            "sharp-bits.html#unsupported-constructs", "mental-model.html#annotations"} <= links
    for link in links:
        page, _, anchor = link.partition("#")
        rst = DOCS / page.replace(".html", ".rst")
        assert rst.exists(), f"{link}: no page {rst.name}"
        if anchor:
            assert f".. _{anchor}:" in rst.read_text(), f"{link}: no label {anchor} in {rst.name}"


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
