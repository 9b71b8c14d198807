"""The on-disk cache of compiled derivatives: files beside Numba's cache of a function.

One file per derivative, ``<Numba's file name base>.<hash of the key>.pyzyme`` in the
directory where Numba caches the function (``__pycache__`` beside the source, or
``NUMBA_CACHE_DIR``). A file holds a format tag, the full key as text and the payload. The key
is everything the derivative's code depends on (what the caller gives, see
:func:`pyzyme.frontends.numba.persist.function_identity`) plus what this module adds: the
versions of pyzyme, Numba, llvmlite and Python and the CPU (triple, name and features) the
object code was generated for.

A file is trusted only if it unpickles, carries this format and exactly the key asked for;
anything else (an older format, a hash collision, a truncated or corrupt file) is ignored, the
derivative is built again and the file replaced. Files are written to a temporary name and
renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import threading
import uuid
import warnings
from dataclasses import dataclass, field

import llvmlite
import numba

from pyzyme.runtime import target

__all__ = ["DiskCache", "DiskStats"]

_FORMAT = "pyzyme-derivative-cache-1"
_SUFFIX = ".pyzyme"


@dataclass
class DiskStats:
    """What the on-disk cache did in this process (for tests and benchmarks).

    Attributes
    ----------
    loaded
        Derivatives taken from files.
    stored
        Files written.
    rejected
        Files found but not used: unreadable, another format or key, or code that would not
        load into this process.
    missed
        Lookups that found no file.
    """

    loaded: int = 0
    stored: int = 0
    rejected: int = 0
    missed: int = 0


@dataclass
class DiskCache:
    """Reads and writes derivative files; one instance serves the process.

    Examples
    --------
    >>> import tempfile
    >>> cache = DiskCache()
    >>> d = tempfile.mkdtemp()
    >>> path = cache.path(d, "mod.f-3.py311", "key text")
    >>> cache.store(path, "key text", {"answer": 42})
    >>> cache.load(path, "key text")
    {'answer': 42}
    >>> cache.load(path, "another key") is None
    True
    >>> (cache.stats.stored, cache.stats.loaded, cache.stats.rejected)
    (1, 1, 1)
    """

    stats: DiskStats = field(default_factory=DiskStats)
    # A leaf lock (the counters only): files are read and written outside it.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @staticmethod
    def environment() -> str:
        """The key part no derivative can be shared across: versions and the CPU."""
        from pyzyme._version import __version__

        codegen = target.numba_codegen_instance()
        return "\n".join([f"pyzyme {__version__}", f"numba {numba.__version__}",
                          f"llvmlite {llvmlite.__version__}", f"python {sys.version}",
                          f"cpu {codegen.magic_tuple()!r}"])

    def path(self, directory: str, base: str, key: str) -> str:
        """The file of the derivative with ``key`` among those of Numba's file ``base``."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        return os.path.join(directory, f"{base}.{digest}{_SUFFIX}")

    def load(self, path: str, key: str):
        """The payload stored under ``key`` at ``path``, or None (no file, or one that cannot
        be trusted)."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            self._count("missed")
            return None
        try:
            tag, stored_key, payload = pickle.loads(data)  # noqa: S301 (our own cache files)
        except Exception:  # noqa: BLE001  (any damage means: do not use it)
            self._count("rejected")
            return None
        if tag != _FORMAT or stored_key != key:
            self._count("rejected")
            return None
        self._count("loaded")
        return payload

    def reject(self) -> None:
        """Count a payload :meth:`load` gave that the caller could not use."""
        with self._lock:
            self.stats.rejected += 1
            self.stats.loaded -= 1

    def store(self, path: str, key: str, payload, dumps=pickle.dumps) -> None:
        """Write ``payload`` under ``key`` to ``path`` atomically (temporary file, rename).
        A cache that cannot be written is a warning, not an error: the derivative works."""
        try:
            data = dumps((_FORMAT, key, payload))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            temporary = f"{path}.tmp.{uuid.uuid4().hex[:12]}"
            try:
                with open(temporary, "wb") as f:
                    f.write(data)
                os.replace(temporary, path)
            finally:
                if os.path.exists(temporary):
                    os.unlink(temporary)
        except (OSError, pickle.PicklingError, TypeError, ValueError) as err:
            warnings.warn(f"pyzyme could not write its derivative cache file {path}: {err}",
                          RuntimeWarning, stacklevel=3)
            return
        self._count("stored")

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self.stats, what, getattr(self.stats, what) + 1)
