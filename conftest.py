"""The package's doctests need its optional frameworks: a bridge whose framework is not
installed (``pip install pyzyme[torch]``, ``pyzyme[jax]``) is not collected (its tests in
tests/ skip themselves)."""

import importlib.util

_BRIDGES = {"torch": "pyzyme/torch.py", "jax": "pyzyme/jax"}   # framework -> its bridge

collect_ignore = [path for framework, path in _BRIDGES.items()
                  if importlib.util.find_spec(framework) is None]
