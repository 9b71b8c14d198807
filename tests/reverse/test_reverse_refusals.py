"""What reverse mode does not differentiate yet is refused with an error naming it, never
answered with a wrong derivative."""

import numpy as np
import pytest

from pyzyme import Active, Duplicated, Reverse, UnsupportedError, autodiff


def test_a_call_with_no_rule_is_refused_with_its_python_line():
    x = np.array([1.0, 2.0]) + 0j  # complex BLAS has no rule (real BLAS has)
    with pytest.raises(UnsupportedError, match="numba_xxdot of kind 'z'") as info:
        autodiff(Reverse, lambda a: np.dot(a, a).real, Active, Duplicated(x, np.zeros(2) + 0j))
    assert "Python source" in str(info.value)
