"""Overwrite analysis (which loads must be cached for the reverse sweep), by printed form."""

from pyzyme import ir
from pyzyme.analysis.overwrite import analyze_overwrites, may_alias, underlying_object


def _analyze(text: str, name: str = "f") -> str:
    return str(analyze_overwrites(ir.parse_module(text).get_function(name)))


def test_store_in_a_later_iteration_overwrites_an_earlier_load():
    text = _analyze("""
define void @f(ptr noalias %a, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %p = getelementptr double, ptr %a, i64 %i
  store double 1.0, ptr %a, align 8
  %v = load double, ptr %p, align 8
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  ret void
}""")
    assert text.splitlines()[1] == (
        "  %v = load double, ptr %p, align 8: overwritten by store double 1.0, ptr %a, align 8")


def test_distinct_objects_do_not_alias():
    text = _analyze("""
define double @f(ptr %arg, ptr noalias %na) {
entry:
  %s = alloca double, align 8
  %m = call ptr @malloc(i64 8)
  store double 2.0, ptr %s, align 8
  %x = load double, ptr %arg, align 8
  %y = load double, ptr %na, align 8
  %z = load double, ptr %s, align 8
  store double 3.0, ptr %m, align 8
  store double 4.0, ptr %na, align 8
  %r = fadd double %x, %z
  ret double %r
}
declare ptr @malloc(i64)""")
    assert text == """\
overwrites in @f
  %x = load double, ptr %arg, align 8: not overwritten
  %y = load double, ptr %na, align 8: overwritten by store double 4.0, ptr %na, align 8
  %z = load double, ptr %s, align 8: not overwritten"""


def test_parameters_without_noalias_may_alias():
    text = _analyze("""
define double @f(ptr %a, ptr %b) {
  %x = load double, ptr %a, align 8
  store double 0.0, ptr %b, align 8
  ret double %x
}""")
    assert text.endswith("%x = load double, ptr %a, align 8: overwritten by "
                         "store double 0.0, ptr %b, align 8")


def test_calls_write_through_their_pointer_arguments_unless_known():
    text = _analyze("""
define double @f(ptr noalias %a, ptr noalias %b) {
  %x = load double, ptr %a, align 8
  %y = load double, ptr %b, align 8
  call void @llvm.lifetime.start.p0(ptr %a)
  call void @llvm.memcpy.p0.p0.i64(ptr %b, ptr %a, i64 8, i1 false)
  call void @opaque(ptr %a)
  %r = fadd double %x, %y
  ret double %r
}
declare void @llvm.lifetime.start.p0(ptr)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
declare void @opaque(ptr)""")
    lines = text.splitlines()
    assert lines[1].endswith("overwritten by call void @opaque(ptr %a)")
    assert lines[2].endswith(
        "overwritten by call void @llvm.memcpy.p0.p0.i64(ptr %b, ptr %a, i64 8, i1 false)")


def test_underlying_object_strips_addressing():
    m = ir.parse_module("""
define void @f(ptr %a) {
  %p = getelementptr i8, ptr %a, i64 8
  %q = getelementptr double, ptr %p, i64 2
  ret void
}""")
    f = m.get_function("f")
    q = f.blocks[0].instructions[1]
    assert underlying_object(q) is f.args[0]
    assert may_alias(q, f.args[0])


def test_numba_fresh_output_array_does_not_overwrite_the_input():
    import numba
    import numpy as np

    from pyzyme.frontends.numba import capture

    @numba.njit
    def scaled(x):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = 2.0 * x[i]
        return out

    @numba.njit
    def scale_into(out, x):
        for i in range(x.shape[0]):
            out[i] = 2.0 * x[i]

    x = np.ones(4)
    for f, args, expected in ((scaled, (x,), False), (scale_into, (np.ones(4), x), True)):
        cap = capture(f, args)
        fn = ir.parse_module(cap.text).get_function(cap.symbol)
        result = analyze_overwrites(fn)
        loads = [ld for ld in result.overwritten_by if ld.type == ir.double]
        assert loads, f.__name__
        # Numba's array parameters carry no noalias: an output array passed in may be x itself.
        assert all(result.is_overwritten(ld) == expected for ld in loads), str(result)


def test_every_allocator_row_is_fresh_memory():
    """The allocators are those of the rule rows (pyzyme.rules.runtime): a MemInfo made with a
    destructor (jitclass instances, records) is fresh memory too, and its data (at the
    row's data offset) is written by nothing the load could read."""
    text = _analyze("""
define double @f(ptr %a) {
  %m = call ptr @NRT_MemInfo_alloc_dtor_safe(i64 8, ptr @dtor)
  %pd = getelementptr i8, ptr %m, i64 24
  %d = load ptr, ptr %pd, align 8
  store double 1.0, ptr %d, align 8
  %x = load double, ptr %a, align 8
  %n = call ptr @NRT_MemInfo_alloc_dtor_safe(i64 8, ptr @dtor)
  store double 2.0, ptr %d, align 8
  %y = load double, ptr %d, align 8
  %r = fadd double %x, %y
  ret double %r
}
declare ptr @NRT_MemInfo_alloc_dtor_safe(i64, ptr)
declare void @dtor(ptr, i64, ptr)""")
    lines = text.splitlines()
    assert lines[2] == "  %x = load double, ptr %a, align 8: not overwritten", text
    assert lines[3] == "  %y = load double, ptr %d, align 8: not overwritten", text
