"""pyzyme keeps what it makes of a user's function in registries of its own
(:mod:`pyzyme.api.dispatchers`), never as attributes of the function or its dispatcher."""

import numpy as np
import pytest

from pyzyme import Forward, Reverse, UnsupportedError, gradient, vjp
from pyzyme.api.dispatchers import njit_of


def test_a_plain_function_gets_no_attribute_and_is_compiled_once():
    def f(x):
        return np.sum(x * x * x)

    x = np.array([1.0, 2.0])
    assert gradient(Reverse, f, x) == pytest.approx(3.0 * x * x, rel=1e-15)
    assert gradient(Forward, f, x) == pytest.approx((3.0, 12.0), rel=1e-15)
    assert vars(f) == {}
    assert njit_of(f) is njit_of(f)
    assert list(njit_of(f).overloads) == [(njit_of(f).typeof_pyval(x),)]  # both modes, one


def test_an_error_inside_a_wrapper_names_the_users_function():
    def f(x):
        print("x is", x[0])
        return x * 2.0

    _, vjp_fn = vjp(f, np.array([1.0, 2.0]))
    with pytest.raises(UnsupportedError) as info:
        vjp_fn(np.ones(2))   # through the @njit wrapper returning the dot product with w
    line = f.__code__.co_firstlineno
    assert f"{f.__qualname__} ({__file__}:{line}) in reverse mode" in str(info.value)
