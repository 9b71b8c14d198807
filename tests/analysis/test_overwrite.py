"""Overwrite analysis (which loads must be cached for the reverse sweep), by printed form."""

from pyzyme import ir
from pyzyme.analysis.loops import analyze_loops
from pyzyme.analysis.overwrite import (
    analyze_overwrites, may_alias, released_in_loops, underlying_object,
)


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


_TEMPORARIES = """
define double @f(i64 %n) {
entry:
  %kept = call ptr @NRT_MemInfo_alloc_aligned(i64 80, i32 32)
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %m = call ptr @NRT_MemInfo_alloc_aligned(i64 80, i32 32)
  %pd = getelementptr i8, ptr %m, i64 24
  %d = load ptr, ptr %pd, align 8
  %x = load double, ptr %d, align 8
  %c = call ptr @calloc(i64 10, i64 8)
  %y = load double, ptr %c, align 8
  call void @free(ptr %c)
  call void @NRT_decref(ptr %m)
  %acc1 = fadd double %acc, %x
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %exit
exit:
  %kd.p = getelementptr i8, ptr %kept, i64 24
  %kd = load ptr, ptr %kd.p, align 8
  %z = load double, ptr %kd, align 8
  call void @NRT_decref(ptr %kept)
  %r = fadd double %acc1, %z
  ret double %r
}
declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare ptr @calloc(i64, i64)
declare void @free(ptr)
declare void @NRT_decref(ptr)"""


def test_a_loops_temporaries_are_released_in_the_forward_sweep():
    """A reference count that may release a MemInfo allocated in the same iteration of the
    same loop (a NumPy temporary of a time step) is made where the primal makes it; one of
    memory allocated outside the loop, and a C ``free`` (a checkpoint's snapshot may be such
    a block), stay deferred. The released one writes the memory it may free (the MemInfo's
    data too): loads from it are cached, never read again in the reverse sweep. A reference
    count alone writes only the count: without it nothing writes %x's memory. (``free`` is a
    write of what it frees either way.)"""
    fn = ir.parse_module(_TEMPORARIES).get_function("f")
    released = released_in_loops(fn, analyze_loops(fn))
    assert [str(r) for r in released] == ["call void @NRT_decref(ptr %m)"]
    lines = str(analyze_overwrites(fn, released=released)).splitlines()
    assert "  %x = load double, ptr %d, align 8: overwritten by call void @NRT_decref(ptr %m)" \
        in lines
    assert "  %y = load double, ptr %c, align 8: overwritten by call void @free(ptr %c)" in lines
    assert "  %z = load double, ptr %kd, align 8: not overwritten" in lines
    before = str(analyze_overwrites(fn)).splitlines()
    assert "  %x = load double, ptr %d, align 8: not overwritten" in before
