"""The seed documents' struct examples in Python form: Enzyme.jl's ``gradient`` of a struct
(``gradient(Reverse, only ∘ f, (a = 2.0, b = [3.0], c = "str"))``) and the tutorial's linked
list (``sumlist`` over ``LList``), in both modes."""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np
import pytest
from numba import deferred_type, float64, int64, optional
from numba.experimental import jitclass

from pyzyme import (Active, Duplicated, Forward, PyzymeError, Reverse, ReverseWithPrimal, autodiff,
                    gradient, make_zero)

# -- the linked list ---------------------------------------------------------------------------
llist_type = deferred_type()


@jitclass([("next", optional(llist_type)), ("val", float64)])
class LList:                              # struct LList; next::Union{LList,Nothing}; val; end
    def __init__(self, next, val):
        self.next = next
        self.val = val


llist_type.define(LList.class_type.instance_type)


@numba.njit
def sumlist(n):
    s = 0.0
    while n is not None:
        s += n.val
        n = n.next
    return s


def test_sumlist_reverse():
    regular = LList(LList(None, 1.0), 2.0)
    shadow = LList(LList(None, 0.0), 0.0)
    (derivs,), value = autodiff(ReverseWithPrimal, sumlist, Active, Duplicated(regular, shadow))
    assert derivs is None and value == 3.0
    assert shadow.val == 1.0          # shadow.val ≈ 1.0
    assert shadow.next.val == 1.0     # shadow.next.val ≈ 1.0
    assert shadow.next.next is None
    assert regular.val == 2.0 and regular.next.val == 1.0


def test_sumlist_shadow_from_make_zero_accumulates():
    regular = LList(LList(LList(None, 1.0), 2.0), 4.0)
    shadow = make_zero(regular)
    assert shadow.next.next.next is None and shadow.next.next.val == 0.0
    autodiff(Reverse, sumlist, Active, Duplicated(regular, shadow))
    autodiff(Reverse, sumlist, Active, Duplicated(regular, shadow))
    assert (shadow.val, shadow.next.val, shadow.next.next.val) == (2.0, 2.0, 2.0)  # dx += df/dx


def test_sumlist_forward():
    regular = LList(LList(None, 1.0), 2.0)
    tangent = LList(LList(None, 0.25), 1.0)
    assert autodiff(Forward, sumlist, Duplicated, Duplicated(regular, tangent)) == (3.0, 1.25)


def test_sumlist_shadow_must_mirror_the_primal():
    regular = LList(LList(None, 1.0), 2.0)
    with pytest.raises(PyzymeError, match="is the instance itself"):
        autodiff(Reverse, sumlist, Active, Duplicated(regular, regular))


# -- gradient of a struct -----------------------------------------------------------------------
NT = namedtuple("NT", "a b c")


def f(x):                                 # f(x) = x[1] * x[2]: a float times a 1-element array
    return x[0] * x[1]


def only_f(x):                            # only ∘ f
    return (x[0] * x[1])[0]


def test_struct_gradient_reverse():
    grad = gradient(Reverse, only_f, NT(a=2.0, b=np.array([3.0]), c="str"))
    assert isinstance(grad, NT)
    assert grad.a == 3.0                  # (a = 3.0, b = [2.0], c = "str")
    np.testing.assert_array_equal(grad.b, [2.0])
    assert grad.c == "str"


def test_struct_active_reverse_and_forward():
    x = NT(a=2.0, b=np.array([3.0]), c="str")
    ((d,),) = autodiff(Reverse, only_f, Active, Active(x))
    assert d.a == 3.0 and d.c == "str"
    np.testing.assert_array_equal(d.b, [2.0])
    # forward mode: one direction per call, the tangent shaped like the struct
    assert autodiff(Forward, only_f, Duplicated,
                    Duplicated(x, NT(1.0, np.array([0.0]), "str"))) == (6.0, 3.0)
    assert autodiff(Forward, only_f, Duplicated,
                    Duplicated(x, NT(0.0, np.array([1.0]), "str"))) == (6.0, 2.0)


@jitclass([("a", float64), ("b", float64[:]), ("c", int64)])
class S:                                  # a mutable struct: its gradient is another S
    def __init__(self, a, b, c):
        self.a = a
        self.b = b
        self.c = c


@numba.njit
def only_f_struct(s):
    return s.a * s.b[0] * s.c


def test_jitclass_gradient_is_an_instance_with_non_float_fields_kept():
    s = S(2.0, np.array([3.0]), 5)
    grad = gradient(Reverse, only_f_struct, s)
    assert isinstance(grad, S) and grad is not s
    assert grad.a == 15.0 and grad.c == 5           # grad.c == x.c for other types
    np.testing.assert_array_equal(grad.b, [10.0])
    ds = make_zero(s)
    autodiff(Reverse, only_f_struct, Active, Duplicated(s, ds))
    assert (ds.a, ds.b[0], ds.c) == (15.0, 10.0, 0)   # Duplicated: integers left alone
    t = make_zero(s)
    t.a = 1.0
    assert autodiff(Forward, only_f_struct, Duplicated, Duplicated(s, t)) == (30.0, 15.0)
