"""Symbol names of the code pyzyme compiles.

Numba's own names carry a per-process counter (``B2v1``), so they cannot be used to find code
again across processes. pyzyme names each compiled function after what it is and a hash of what
it was built from; equal inputs give equal names in every process, which is what an on-disk cache
and the JIT's one-definition-per-symbol rule both need.
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "__pyzyme"


def symbol_name(kind: str, *inputs: str) -> str:
    """The symbol of a compiled function of ``kind`` built from ``inputs`` (IR text, activity...).

    Parameters
    ----------
    kind
        A short word saying what the function is (``"fwd"``, ``"rev"``, ``"copy"``); letters,
        digits and underscores only.
    inputs
        Everything the function's code depends on, as strings.

    Examples
    --------
    >>> symbol_name("fwd", "define double @f(double %x) ...", "Duplicated")
    '__pyzyme_fwd_69b67f0904c84fe14eae'
    >>> symbol_name("fwd", "a", "b") != symbol_name("fwd", "ab")
    True
    """
    if not re.fullmatch(r"[A-Za-z0-9_]+", kind):
        raise ValueError(f"symbol kind must be letters, digits and underscores; got {kind!r}")
    digest = hashlib.sha256()
    for part in inputs:
        # Length-prefix each part so ("a", "b") and ("ab",) differ.
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return f"{PREFIX}_{kind}_{digest.hexdigest()[:20]}"
