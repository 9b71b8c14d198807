"""The package version, and the numba and llvmlite versions pyzyme supports, below every layer
so that any module may read them.

pyzyme hooks Numba internals (:mod:`pyzyme.frontends.numba.hook`) that change between Numba's
minor releases, and reads the IR of the LLVM that llvmlite bundles, whose syntax changes with
each LLVM major version: so one minor version of each is supported (pyproject.toml pins the
same). :func:`check_dependencies` runs first thing in ``import pyzyme``.
"""

from __future__ import annotations

import os
import re

from pyzyme.errors import PyzymeError

__version__ = "0.1.0"

#: The (major, minor) of each dependency pyzyme is written for; pyproject.toml pins the same.
SUPPORTED = {"numba": (0, 68), "llvmlite": (0, 50)}

#: Set to 1 to import pyzyme with other versions anyway (to try a new Numba at one's own risk).
SKIP_CHECK = "PYZYME_SKIP_VERSION_CHECK"


class DependencyVersionError(PyzymeError, ImportError):
    """``import pyzyme`` with a numba or llvmlite of another minor version than the one pyzyme
    supports."""


def installed_version(name: str) -> str | None:
    """The version of the installed distribution ``name``, or None if it is not installed.

    Examples
    --------
    >>> installed_version("numba").startswith("0.68")
    True
    """
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_dependencies() -> None:
    """Raise :class:`DependencyVersionError` naming the supported versions if the installed
    numba or llvmlite is of another minor version (a missing one is left to the import that
    needs it, whose error names it).

    Examples
    --------
    >>> check_dependencies()   # numba 0.68.x and llvmlite 0.50.x: passes silently
    """
    if os.environ.get(SKIP_CHECK, "").strip() not in ("", "0"):
        return
    wrong = []
    for name, (major, minor) in SUPPORTED.items():
        found = installed_version(name)
        if found is not None and _major_minor(found) != (major, minor):
            wrong.append(f"{name} {found}")
    if wrong:
        wanted = ", ".join(f"{n} {a}.{b}.x" for n, (a, b) in SUPPORTED.items())
        pins = " ".join(f"'{n}=={a}.{b}.*'" for n, (a, b) in SUPPORTED.items())
        raise DependencyVersionError(
            f"pyzyme {__version__} supports {wanted}, and found {' and '.join(wrong)}: pyzyme "
            f"hooks Numba internals that change between minor releases, and reads the IR of "
            f"the LLVM llvmlite bundles",
            hint=f"pip install {pins}  (or set {SKIP_CHECK}=1 to try these versions anyway)")


def _major_minor(version: str) -> tuple[int, int] | None:
    """``(0, 68)`` of ``"0.68.1"`` (or ``"0.68.0rc1"``); None if it does not start so."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None
