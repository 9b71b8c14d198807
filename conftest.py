"""The package's doctests need its optional frameworks: a bridge whose framework is not
installed (``pip install pyzyme[jax]``) is not collected."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("jax") else ["pyzyme/jax"]
