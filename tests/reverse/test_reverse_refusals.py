"""What reverse mode does not differentiate yet is refused with an error naming it, never
answered with a wrong derivative."""

import numba
import numpy as np
import pytest

from pyzyme import Active, Duplicated, Reverse, UnsupportedError, autodiff


@numba.njit
def grow_a_list(x):
    acc = []
    for i in range(x.shape[0]):
        acc.append(x[i] * i)
    s = 0.0
    for v in acc:
        s += v * v
    return s


def test_a_growing_list_of_active_values_is_refused():
    # Growing moves the list's data; cached pointers into the old block would be stale.
    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(UnsupportedError, match="resizes memory that holds active values"):
        autodiff(Reverse, grow_a_list, Active, Duplicated(x, np.zeros(3)))


def test_a_call_with_no_rule_is_refused_with_its_python_line():
    x = np.array([1.0, 2.0]) + 0j  # complex BLAS has no rule (real BLAS has)
    with pytest.raises(UnsupportedError, match="numba_xxdot of kind 'z'") as info:
        autodiff(Reverse, lambda a: np.dot(a, a).real, Active, Duplicated(x, np.zeros(2) + 0j))
    assert "Python source" in str(info.value)
