"""Floats copied through integers (LLVM's lowering of a small ``memcpy``): reverse mode
carries their adjoints back. Both were refused ("copies memory that may hold floats through an
integer of type i64") before :mod:`pyzyme.transforms.float_moves`."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import pyzyme.llvm as pl
from pyzyme.errors import UnsupportedError
from pyzyme import Active, Duplicated, DuplicatedNoNeed, Forward, Reverse, autodiff

# x[1] = x[0] through an i64; returns x[0] * x[1]. LLVM forwards the copy, so x[0] is read
# as `bitcast i64 %bits to double`.
COPY = """
define double @f(ptr %x) {
entry:
  %bits = load i64, ptr %x, align 1
  %y = getelementptr inbounds double, ptr %x, i64 1
  store i64 %bits, ptr %y, align 1
  %a = load double, ptr %x
  %b = load double, ptr %y
  %ab = fmul double %a, %b
  ret double %ab
}
"""


def test_an_i64_copy_of_a_double_in_reverse_mode():
    grad = pl.compile(COPY, "f", "reverse", ["dup"])
    x, dx = np.array([1.5, 7.0]), np.zeros(2)
    grad(x.ctypes.data, dx.ctypes.data, 1.0)
    np.testing.assert_allclose(dx, [3.0, 0.0])  # x[1] is overwritten before it is read
    assert x[1] == 1.5  # the primal's copy is exact


def test_an_i64_copy_of_a_double_in_split_mode():
    aug, rev = pl.compile(COPY, "f", "split", ["dup"])
    x, dx = np.array([1.5, 7.0]), np.zeros(2)
    first = aug(x.ctypes.data, dx.ctypes.data)
    rev(x.ctypes.data, dx.ctypes.data, 1.0, False, first.f1)
    np.testing.assert_allclose(dx, [3.0, 0.0])


def test_an_i64_copy_of_a_double_in_forward_mode():
    # The copy's tangent was the primal's bits, and x[0] read through the copy had none.
    tangent = pl.compile(COPY, "f", "forward", ["dup"])
    for seed, expected in (([1.0, 0.0], 3.0), ([0.0, 1.0], 0.0)):
        x, dx = np.array([1.5, 7.0]), np.array(seed)
        out = tangent(x.ctypes.data, dx.ctypes.data)
        assert (out.f0, out.f1) == pytest.approx((2.25, expected))
        assert dx[1] == seed[0]  # the copy's tangent is x[0]'s


@numba.njit
def _flattened(x, out):
    a = np.zeros(1)
    a[0] = x[0] * x[1]
    out[:] = a.flatten()  # Numba copies the one element with an 8-byte memcpy: an i64
    return out.sum() * x[2]


def test_numba_flatten_of_a_one_element_array():
    x = np.array([1.5, 2.0, 3.0])
    dx, out, dout = np.zeros(3), np.zeros(1), np.zeros(1)
    autodiff(Reverse, _flattened, Active, Duplicated(x, dx), Duplicated(out, dout))
    np.testing.assert_allclose(dx, [x[1] * x[2], x[0] * x[2], x[0] * x[1]])
    for i in range(3):  # forward mode, which always copied the tangent's bits, agrees
        e = np.zeros(3)
        e[i] = 1.0
        (t,) = autodiff(Forward, _flattened, DuplicatedNoNeed, Duplicated(x, e), Duplicated(out, np.zeros(1)))
        assert t == pytest.approx(dx[i])


# %x's bits go to %y through an i64; %z, which may be either, is read as a double: nothing
# tells whether the copy moves a float.
UNKNOWN = """
define double @g(ptr %x, ptr %y, ptr %z) {
entry:
  %bits = load i64, ptr %x
  store i64 %bits, ptr %y
  %b = load double, ptr %z
  ret double %b
}
"""


def test_a_copy_that_may_move_a_float_is_refused_in_reverse_mode():
    with pytest.raises(UnsupportedError, match="through an integer of type i64"):
        pl.compile(UNKNOWN, "g", "reverse", ["dup", "dup", "dup"])


def test_forward_mode_copies_the_shadows_bits_where_a_copy_may_move_a_float():
    # Forward mode used to mirror the primal's bits into the shadow (a wrong tangent), then
    # refused the copy; the shadow's bits are what a float's tangent or an integer's mirror
    # is, whichever the copy moves (tests/forward/test_byte_copies.py: byte by byte).
    tangent = pl.compile(UNKNOWN, "g", "forward", ["dup", "dup", "dup"])
    x, y, z = np.array([1.5]), np.zeros(1), np.array([4.0])
    dx, dy, dz = np.array([-2.5]), np.zeros(1), np.array([0.25])
    out = tangent(x.ctypes.data, y.ctypes.data, z.ctypes.data, dx.ctypes.data, dy.ctypes.data,
                  dz.ctypes.data)
    assert (out.f0, out.f1) == (4.0, 0.25)
    assert (y[0], dy[0]) == (1.5, -2.5)


# x[0] read as a double from its bits, which are also tested for the sign.
PUNNED = """
define double @h(ptr %x) {
entry:
  %bits = load i64, ptr %x
  %d = bitcast i64 %bits to double
  %neg = icmp slt i64 %bits, 0
  %m = fmul double %d, %d
  %r = select i1 %neg, double 0.0, double %m
  ret double %r
}
"""


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_a_float_read_from_an_integer_used_otherwise_is_refused(mode):
    # Its derivative was zero: the integer load carried none.
    with pytest.raises(UnsupportedError, match="reads a float from the bits of an integer"):
        pl.compile(PUNNED, "h", mode, ["dup"])


# An i64 field of a typed stack slot copied out: the slot's type says it is an integer,
# though the function reads a double through a pointer that may point into it.
FIELD = """
define double @k(ptr %out) {
entry:
  %slot = alloca { ptr, i64 }, align 8
  call void @fill(ptr %slot)
  %n.addr = getelementptr inbounds i8, ptr %slot, i64 8
  %n = load i64, ptr %n.addr
  store i64 %n, ptr %out
  %data = load ptr, ptr %slot
  %v = load double, ptr %data
  ret double %v
}
declare void @fill(ptr)
"""


def test_an_integer_field_of_a_typed_slot_is_copied_as_an_integer():
    from pyzyme.analysis.type_analysis import analyze_types
    from pyzyme.ir import parse_module
    from pyzyme.transforms.float_moves import float_pointers, reads_integers

    fn = parse_module(FIELD).get_function("k")
    load = next(i for i in fn.instructions() if i.name == "n")
    # forward mode over a custom rule's result slot met this (hvp of a rule returning an array)
    assert reads_integers(load, analyze_types(fn), lambda: float_pointers(fn))
