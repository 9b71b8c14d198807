"""pyzyme: Enzyme-style automatic differentiation of optimized LLVM IR.

The public API is re-exported here and nothing else; see the README for the status of each part.
"""

from pyzyme.errors import (
    ActivityError,
    CaptureError,
    IRTypeError,
    ParseError,
    PyzymeError,
    UnsupportedError,
    VerifyError,
)

__version__ = "0.1.0"

import pyzyme.frontends.numba.hook  # noqa: E402,F401  installs the capture hook before Numba compiles anything

__all__ = [
    "ActivityError",
    "CaptureError",
    "IRTypeError",
    "ParseError",
    "PyzymeError",
    "UnsupportedError",
    "VerifyError",
]
