"""Complex numbers at the boundary of a derivative: values, shadows, seeds and conventions.

Numba passes a ``complex128`` as two ``double`` parameters (real part, imaginary part) and
stores complex arrays as interleaved pairs, so inside the derivative a complex number is two
floats and no rule is specific to it. What is specific is what the user gives and gets back:

- Forward mode: ``Duplicated(z, dz)`` with complex ``dz`` is the direction
  ``(Re dz, Im dz)``; the tangent of a complex result is ``dRe f + i dIm f`` along it, so for a
  holomorphic ``f`` it is ``f'(z) * dz``.
- Reverse mode, real result: the derivative of ``Active(z)`` is ``df/dRe(z) + i df/dIm(z)``
  (Enzyme.jl's and PyTorch's convention); a ``Duplicated`` complex array accumulates the same
  quantity per element. JAX's ``grad`` returns the complex conjugate of this,
  ``df/dRe(z) - i df/dIm(z)``.
- Reverse mode, complex result: ambiguous (which real function of the result?), so refused;
  :data:`~pyzyme.ReverseHolomorphic` answers ``f'(z)`` for holomorphic ``f``: one reverse
  sweep of ``Re f`` gives ``dRe f/dRe z + i dRe f/dIm z``, which by the Cauchy-Riemann
  equations is ``conj(f'(z))``.
- Split mode (``autodiff_thunk``) takes the seed ``w`` of a result from the user; for a
  complex result ``w = dL/dRe f + i dL/dIm f`` (so ``L = Re(conj(w) f)``), and the
  derivatives follow the reverse-mode convention above.

Examples
--------
>>> is_complex(1 + 2j), is_complex(np.complex64(1)), is_complex(1.0)
(True, True, False)
>>> complex_shadow(1 + 0j, 2.0)
(2+0j)
>>> from numba.core import types
>>> complex(holomorphic_seed(types.complex128))
(1+0j)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyzyme.errors import ArgumentTypeError, UnsupportedError

__all__ = ["is_complex", "is_complex_array", "complex_shadow", "has_complex", "holomorphic_seed",
           "check_complex_result", "check_holomorphic_argument", "conjugate_in_place"]


def is_complex(value: Any) -> bool:
    """Whether ``value`` is a complex scalar (Python or NumPy)."""
    return isinstance(value, (complex, np.complexfloating))


def is_complex_array(value: Any) -> bool:
    """Whether ``value`` is an ndarray of a complex dtype."""
    return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.complexfloating)


def complex_shadow(primal, shadow) -> Any:
    """The shadow ``shadow`` of the complex scalar ``primal``, as ``primal``'s type.

    A real shadow is the complex number with that real part.
    """
    ok = isinstance(shadow, (int, float, complex, np.number)) and not isinstance(
        shadow, (bool, np.bool_))
    if not ok:
        raise ArgumentTypeError(f"the shadow of a complex number must be a number, got "
                                f"{type(shadow).__name__}")
    return type(primal)(shadow)


def has_complex(numba_type) -> bool:
    """Whether the Numba type is complex or a tuple holding a complex."""
    from numba.core import types

    if isinstance(numba_type, types.Complex):
        return True
    if isinstance(numba_type, types.BaseTuple):
        return any(has_complex(t) for t in numba_type.types)
    return False


def holomorphic_seed(numba_type) -> complex:
    """The seed of a complex result in :data:`~pyzyme.ReverseHolomorphic` mode: a unit
    adjoint of its real part."""
    from numba.core import types

    if not isinstance(numba_type, types.Complex):
        raise UnsupportedError(
            f"ReverseHolomorphic differentiates functions returning a complex number; this one "
            f"returns {numba_type}: use Reverse for real results")
    return np.dtype(numba_type.name).type(1.0)


def check_complex_result(numba_type, function: str) -> None:
    """Refuse an Active complex result in plain reverse mode: which real function of it is
    meant is not said."""
    if has_complex(numba_type):
        raise UnsupportedError(
            f"{function} returns {numba_type}: a complex result's reverse-mode derivative is "
            f"ambiguous. Use ReverseHolomorphic for a holomorphic function (it returns f'(z)), "
            f"Forward mode (the tangent of the complex result), or differentiate a real-valued "
            f"function of the result (e.g. its real part or abs(...)**2)")


def check_holomorphic_argument(value, position: int) -> None:
    """Refuse a real differentiated argument in holomorphic mode: d f/dx of a complex ``f``
    by a real ``x`` is complex, which one sweep of ``Re f`` does not give."""
    if not (is_complex(value) or is_complex_array(value)):
        raise UnsupportedError(
            f"argument {position} is real ({type(value).__name__}); ReverseHolomorphic "
            f"differentiates with respect to complex arguments only: pass it as Const, make it "
            f"complex, or use Forward mode")


def conjugate_in_place(array: np.ndarray) -> None:
    """``array[...] = conj(array)`` (holomorphic mode: shadows accumulate ``conj(df/dz)``)."""
    np.conjugate(array, out=array)
