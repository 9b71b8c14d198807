"""Collection for the whole tree (tests/conftest.py has the suite's fixtures)."""

import importlib.util

# pyzyme/torch.py imports torch, an optional extra (pyzyme[torch]; `make test` installs it):
# without it, its doctests are not collected (tests/test_torch_wrap.py skips itself).
collect_ignore = [] if importlib.util.find_spec("torch") else ["pyzyme/torch.py"]
