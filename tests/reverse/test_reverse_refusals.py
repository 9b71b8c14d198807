"""What reverse mode does not differentiate yet is refused with an error naming it, never
answered with a wrong derivative."""

import numpy as np
import pytest

from pyzyme import Active, Duplicated, Reverse, UnsupportedError, autodiff


def test_a_call_with_no_rule_is_refused_with_its_python_line():
    x = np.eye(2) + 0j  # complex LAPACK has no rule (real LAPACK has)
    with pytest.raises(UnsupportedError, match=r"numba_xxgetrf .* of kind 'z'") as info:
        autodiff(Reverse, lambda a: np.linalg.det(a).real, Active,
                 Duplicated(x, np.zeros((2, 2)) + 0j))
    assert "Python source" in str(info.value)
