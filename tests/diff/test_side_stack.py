"""Side stacks for recursive derivatives (pyzyme.diff.side_stack), on hand-written IR: which
functions are wrapped and guarded, where the stack slots go, and the wrapped code run out of
its stack."""

import math

import pytest

from pyzyme.diff import side_stack
from pyzyme.errors import RecursionDepthError
from pyzyme.frontends.numba import njit_callable
from pyzyme.ir import instructions as I, parse_module
from pyzyme.runtime import compile_module
from pyzyme.runtime.target import side_stacks

pytestmark = pytest.mark.skipif(not side_stacks(), reason="no side stacks on this platform")

# @power(x, n) = x ** n in Numba's convention through @rec, which recurses; @rec keeps its
# partial result in a slot made once a call (hoisted) and one made in a loop (left alone).
# @square reaches no cycle.
MODULE = """
define internal double @rec(double %x, i64 %n) {
entry:
  br label %body
body:
  %slot = alloca double
  %zero = icmp eq i64 %n, 0
  br i1 %zero, label %base, label %more
base:
  ret double 1.0
more:
  %m = sub i64 %n, 1
  %r = call double @rec(double %x, i64 %m)
  store double %r, ptr %slot
  br label %loop
loop:
  %i = phi i64 [ 0, %more ], [ %i1, %loop ]
  %scratch = alloca double
  %i1 = add i64 %i, 1
  %again = icmp ult i64 %i1, 1
  br i1 %again, label %loop, label %out
out:
  %v = load double, ptr %slot
  %y = fmul double %v, %x
  ret double %y
}

define internal double @twice(double %x) {
entry:
  %y = fadd double %x, %x
  ret double %y
}

define i32 @__pyzyme_test_power(ptr %retptr, ptr %excinfo, double %x, i64 %n) {
entry:
  %r = call double @rec(double %x, i64 %n)
  store double %r, ptr %retptr
  ret i32 0
}

define i32 @__pyzyme_test_square(ptr %retptr, ptr %excinfo, double %x) {
entry:
  %r = call double @twice(double %x)
  %s = fmul double %r, %x
  store double %s, ptr %retptr
  ret i32 0
}
"""


def calls(fn) -> list[str]:
    return [i.called_function.name for i in fn.instructions()
            if isinstance(i, I.Call) and i.called_function is not None]


def test_entries_reaching_a_cycle_are_wrapped_and_cycles_guarded():
    module = parse_module(MODULE)
    wrapped = side_stack.install(module, 1 << 20)
    assert [fn.name for fn in wrapped] == ["__pyzyme_test_power"]
    power = module.get_function("__pyzyme_test_power")
    assert "pyzyme.side_stack.run" in calls(power)
    assert "__pyzyme_test_power.body" in calls(power)  # when no side stack is to be had
    rec = module.get_function("rec")
    assert calls(rec).count("pyzyme.side_stack.leave") == 2  # before each return
    assert calls(rec)[0] == "pyzyme.side_stack.enter"
    for name in ("twice", "__pyzyme_test_square"):
        assert not any(c.startswith("pyzyme.side_stack") for c in calls(module.get_function(name)))


def test_slots_made_once_a_call_move_to_the_entry_block_and_loop_slots_stay():
    module = parse_module(MODULE)
    side_stack.install(module, 1 << 20)
    rec = module.get_function("rec")
    entry = [i.name for i in rec.entry.instructions if isinstance(i, I.Alloca)]
    loop = next(b for b in rec.blocks if b.name == "loop")
    assert entry == ["slot"]
    assert any(isinstance(i, I.Alloca) and i.name == "scratch" for i in loop.instructions)


def test_wrapped_code_says_when_its_stack_runs_out_and_runs_on():
    module = parse_module(MODULE)
    side_stack.install(module, 1 << 20)
    power = njit_callable(compile_module(str(module)), "__pyzyme_test_power",
                          "float64(float64, int64)")
    assert power(1.00001, 10_000) == pytest.approx(1.00001 ** 10_000, rel=1e-10)
    # 100,000 levels do not fit in 1 MiB (but would in the thread's stack, were the code
    # not on the side stack: then nothing is raised and the test fails, not the process)
    with pytest.raises(RecursionDepthError, match=r"of rec recursed \d+ calls deep.* 1 MiB"):
        power(1.00001, 100_000)
    assert power(2.0, 10) == 1024.0  # the stack was given back
    assert math.isclose(power(1.5, 3), 3.375)


@pytest.mark.parametrize("nbytes", [3 << 20, 1 << 19, 0, 2.0 ** 24])
def test_the_stack_size_is_a_power_of_two_of_at_least_one_mebibyte(nbytes):
    from pyzyme.settings import Options

    with pytest.raises(ValueError, match="power of two of at least 1 MiB"):
        Options(recursion_stack=nbytes)
