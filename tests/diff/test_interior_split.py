"""The interior version of a parallel loop's reverse loop (pyzyme.diff.reverse.interior):
the copy without the row-edge tests runs exactly on the iterations where every test is false.

A hand-written loop in the reverse sweep's shape (a counter in a stack slot, counting down to
``%end``) records, per iteration, which version ran it: the copy reads ``%shared`` as true
and the tests as false, so it writes 2; the loop as it was writes 1 where its test is false,
100 where it is true. Run for boxes whose interior is whole, in the middle, at one end,
empty, or not around the middle value (then the loop runs alone).
"""

import ctypes

import numpy as np
import pytest

from pyzyme.analysis.cfg import dominators
from pyzyme.diff.reverse.interior import _version
from pyzyme.ir import parse_module
from pyzyme.ir.verify import verify
from pyzyme.runtime import compile_module

LOOP = """
define void @f(ptr %out, i64 %first, i64 %end, i64 %lo, i64 %hi, i64 %r1, i64 %r2, i1 %shared) {
entry:
  %count = alloca i64
  store i64 %first, ptr %count
  br label %loop
loop:
  %c = load i64, ptr %count
  %a = sub i64 %c, %lo
  %near.lo = icmp ult i64 %a, %r1
  %b = sub i64 %hi, %c
  %near.hi = icmp ult i64 %b, %r2
  %t = or i1 %near.lo, %near.hi
  %v = select i1 %shared, double 2.0, double 1.0
  %w = select i1 %t, double 100.0, double %v
  %p = getelementptr double, ptr %out, i64 %c
  store double %w, ptr %p
  %next = sub i64 %c, 1
  store i64 %next, ptr %count
  %done = icmp eq i64 %next, %end
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""


@pytest.fixture(scope="module")
def run():
    m = parse_module(LOOP)
    fn = m.get_function("f")
    loop = next(b for b in fn.blocks if b.name == "loop")
    test = next(i for i in loop.instructions if i.name == "t")
    counter = fn.entry.instructions[0]
    assert _version(fn, dominators(fn), loop, counter, {test}, fn.args[-1], None) is not None
    verify(m)
    compiled = compile_module(str(m), name="interior_split")
    i64 = ctypes.c_int64
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, i64, i64, i64, i64, i64, i64, ctypes.c_bool)(
        compiled.address("f"))

    def call(first, end, lo, hi, r1, r2):
        out = np.zeros(first + 1)
        f(out.ctypes.data, first, end, lo, hi, r1, r2, False)
        return out[end + 1:], compiled   # keep the code alive while the result is used
    return call


# first, end, lo, hi, r1, r2: iterations first down to end + 1; the test is true within r1
# of lo and r2 of hi
CASES = {
    "interior in the middle": (20, -1, 0, 20, 3, 2),
    "whole loop interior": (10, 4, 0, 20, 3, 2),
    "interior at the top": (20, -1, 0, 40, 3, 2),
    "interior at the bottom": (20, 6, 0, 20, 3, 9),
    "one interior iteration": (20, -1, 0, 20, 10, 10),
    "no interior": (8, -1, 0, 8, 5, 5),
    "interior away from the middle": (20, -1, 0, 20, 15, 1),
    "one iteration": (5, 4, 0, 20, 3, 2),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_copy_runs_where_the_tests_are_false(run, case):
    first, end, lo, hi, r1, r2 = case
    got, _ = run(*case)
    c = np.arange(end + 1, first + 1)
    edge = ((c - lo) < r1) | ((hi - c) < r2)
    assert np.array_equal(got == 100.0, edge)
    middle = end + 1 + (first - end - 1) // 2
    if not edge[middle - end - 1]:
        # the interval around the middle value: all of it in the copy
        assert np.all(got[~edge] == 2.0)
    else:
        assert np.all(got[~edge] == 1.0)   # not found from the middle: the loop as it was
