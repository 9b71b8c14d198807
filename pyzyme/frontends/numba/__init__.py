"""The Numba frontend: capture ``@njit`` functions as LLVM IR, and call compiled code from Numba.

- :mod:`~pyzyme.frontends.numba.hook` keeps Numba's IR before its JIT rewrites it (installed by
  ``import pyzyme``).
- :func:`capture` turns one compiled signature into a module and an :class:`AbiMap`.
- :func:`njit_callable` wraps a function compiled by :func:`pyzyme.runtime.compile_module` as an
  ``@njit`` function, callable from Python and from other ``@njit`` code.
- :mod:`~pyzyme.frontends.numba.derive` builds the derivatives of ``@njit`` functions (forward,
  reverse, split, hvp) through :mod:`pyzyme.pipeline`.
"""

from pyzyme.frontends.numba.abi import AbiMap
from pyzyme.frontends.numba.bridge import njit_callable
from pyzyme.frontends.numba.capture import Captured, capture
from pyzyme.frontends.numba.hook import check_numba_internals

__all__ = ["AbiMap", "Captured", "capture", "check_numba_internals", "njit_callable"]
