"""Activity analysis by printed form: forward (varied) and both halves (varied and useful)."""

from pyzyme import ir
from pyzyme.analysis.activity import Activity, analyze_activity

A, C, D = Activity.ACTIVE, Activity.CONST, Activity.DUPLICATED

SOURCE = """
define double @f(double %x, double %y, ptr %out, ptr %tmp, i64 %n) {
entry:
  %a = fmul double %x, %y
  %dead = fadd double %a, 1.0
  %t = fmul double %x, 2.0
  store double %t, ptr %out, align 8
  %l = load double, ptr %out, align 8
  %i = fptosi double %a to i64
  %k = sitofp i64 %i to double
  %r = fadd double %a, %k
  ret double %r
}
"""


def _fn():
    return ir.parse_module(SOURCE).get_function("f")


def test_forward_half_marks_everything_that_depends_on_inputs():
    text = str(analyze_activity(_fn(), [A, C, D, C, C]))
    assert "  %dead = fadd double %a, 1.0: active" in text
    assert "  %k = sitofp i64 %i to double: const" in text


def test_both_halves_with_active_return():
    text = str(analyze_activity(_fn(), [A, C, D, C, C], return_active=True))
    lines = dict(line.rsplit(": ", 1) for line in text.splitlines()[1:])
    assert lines["  arg %x"] == "active"
    assert lines["  arg %y"] == "const"
    assert lines["  arg %out"] == "active"          # receives an active value
    assert lines["  %a = fmul double %x, %y"] == "active"
    assert lines["  %dead = fadd double %a, 1.0"] == "const"     # reaches no output
    assert lines["  %t = fmul double %x, 2.0"] == "active"      # stored into shadowed memory
    assert lines["  %l = load double, ptr %out, align 8"] == "const"  # loaded, never used
    assert lines["  %r = fadd double %a, %k"] == "active"


def test_inactive_return_leaves_only_memory_outputs():
    text = str(analyze_activity(_fn(), [A, C, D, C, C], return_active=False))
    lines = dict(line.rsplit(": ", 1) for line in text.splitlines()[1:])
    assert lines["  %r = fadd double %a, %k"] == "const"
    assert lines["  %a = fmul double %x, %y"] == "const"
    assert lines["  %t = fmul double %x, 2.0"] == "active"


def test_nothing_active_without_active_inputs():
    text = str(analyze_activity(_fn(), [C, C, C, C, C], return_active=True))
    assert "active" not in text.split("\n", 1)[1]


def test_a_slot_a_callee_only_reads_and_zeroes_stays_inactive():
    """A reverse sweep's entry hands its inner function the seed's slot, which the sweep
    reads and zeroes: forward mode over it (a Hessian-vector product) needs no tangent for
    the seed, nor for the adjoints read from it. A callee that stores a computed value
    through the slot, or passes it on, may write a varied value there."""
    text = """
    define double @sweep(ptr %seed, ptr %x) {
      %s = load double, ptr %seed
      store double 0.0, ptr %seed
      %v = load double, ptr %x
      %r = fmul double %s, %v
      ret double %r
    }
    define double @keeps(ptr %seed, ptr %x) {
      %v = load double, ptr %x
      store double %v, ptr %seed
      ret double %v
    }
    define double @passes(ptr %seed, ptr %x) {
      %r = call double @sweep(ptr %seed, ptr %x)
      ret double %r
    }
    define double @entry(double %dret, ptr %x) {
      %a = alloca double
      store double %dret, ptr %a
      %r1 = call double @sweep(ptr %a, ptr %x)
      %b = alloca double
      store double %dret, ptr %b
      %r2 = call double @keeps(ptr %b, ptr %x)
      %c = alloca double
      store double %dret, ptr %c
      %r3 = call double @passes(ptr %c, ptr %x)
      ret double %r1
    }"""
    fn = ir.parse_module(text).get_function("entry")
    printed = str(analyze_activity(fn, [C, D]))
    lines = dict(line.rsplit(": ", 1) for line in printed.splitlines()[1:])
    assert lines["  %a = alloca double"] == "const"
    assert lines["  %b = alloca double"] == "active"
    assert lines["  %c = alloca double"] == "active"


def test_a_slot_holding_a_pointer_a_callee_reads_stays_active():
    """Eigen's gemm reads its blocking object's buffer pointer (null) and merges it with a
    fresh buffer it allocates, into which it writes derivatives; the callee stores only
    constants into the object, but the pointer it reads needs a shadow to be merged with the
    buffer's (before: the object was const and the merge was refused)."""
    text = """
    declare ptr @malloc(i64)
    define double @gemm(ptr %blk, ptr %x) {
      %p = load ptr, ptr %blk
      %isnull = icmp eq ptr %p, null
      %fresh = call ptr @malloc(i64 8)
      %buf = select i1 %isnull, ptr %fresh, ptr %p
      %v = load double, ptr %x
      store double %v, ptr %buf
      %w = load double, ptr %buf
      store ptr null, ptr %blk
      ret double %w
    }
    define double @entry(double %dret, ptr %x) {
      %blocking = alloca ptr
      store ptr null, ptr %blocking
      %r = call double @gemm(ptr %blocking, ptr %x)
      ret double %r
    }"""
    fn = ir.parse_module(text).get_function("entry")
    printed = str(analyze_activity(fn, [C, D]))
    lines = dict(line.rsplit(": ", 1) for line in printed.splitlines()[1:])
    assert lines["  %blocking = alloca ptr"] == "active"


RELOADS = """
define double @rev(ptr %tape, ptr %x) {
entry:
  %kept = load ptr, ptr %tape, !pyzyme.constant !{}
  %c = load double, ptr %kept
  %p = getelementptr i8, ptr %tape, i64 8
  %y = load double, ptr %p
  %v = load double, ptr %x
  %m = fmul double %c, %v
  %r = fadd double %m, %y
  ret double %r
}
"""


def test_a_marked_reload_is_constant_only_where_the_caller_says_so():
    """A reverse sweep's read of a pointer its forward sweep kept, marked as one no active
    input changes: forward mode over the derivative (hvp) holds it, and what is read through
    it, constant though the tape is active memory; the unmarked read beside it stays varied.
    Without ``constant_reloads`` (a mixed second derivative may vary what reverse mode held
    constant) the mark is not trusted."""
    fn = ir.parse_module(RELOADS).get_function("rev")
    lines = dict(line.rsplit(": ", 1) for line in
                 str(analyze_activity(fn, [D, D], constant_reloads=True)).splitlines()[1:])
    assert lines["  %kept = load ptr, ptr %tape, !pyzyme.constant !{}"] == "const"
    assert lines["  %c = load double, ptr %kept"] == "const"
    assert lines["  %y = load double, ptr %p"] == "active"
    assert lines["  %m = fmul double %c, %v"] == "active"
    distrust = str(analyze_activity(fn, [D, D]))
    assert "  %c = load double, ptr %kept: active" in distrust
