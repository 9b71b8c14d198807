"""Sphinx configuration of pyzyme's documentation site (``make docs``).

The site is built with warnings as errors (``-W --keep-going``, in the Makefile): a docstring
numpydoc cannot read, a broken cross-reference or a gallery example that raises fails the build.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # document the checkout's pyzyme, not an installed copy
os.environ.setdefault("PYZYME_NOTICE", "0")  # no compile notices in the gallery's output

import pyzyme  # noqa: E402
from pyzyme.errors import DOCS_URL  # noqa: E402

project = "pyzyme"
author = "The pyzyme developers"
copyright = "The pyzyme developers, Apache License 2.0"
release = version = pyzyme.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

exclude_patterns = ["_build", "examples/README.txt", "gallery/*.ipynb", "gallery/*.py",
                    "gallery/*.md5", "gallery/*.json", "gallery/*.zip"]
templates_path = []
html_static_path = []
root_doc = "index"

# numpydoc reads the docstrings; autosummary makes no stub pages (api.rst lists each name)
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
autosummary_generate = False
autodoc_default_options = {"members": False}
autodoc_typehints = "none"  # the signatures and numpydoc's Parameters say it, once

html_theme = "pydata_sphinx_theme"
html_title = f"pyzyme {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_prev_next": True,
    "secondary_sidebar_items": ["page-toc"],
}
html_baseurl = DOCS_URL + "/"  # where the errors' "see ..." links point (pyzyme.errors)

sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "gallery",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
}
