"""Enzyme's C/C++ interface: self-checking programs that call ``__enzyme_*``.

Each program in ``tests/corpus/enzyme_c`` checks its derivatives against analytic ones and
returns the number of mismatches from ``main``. It is compiled at two of the levels -O0 to -O3
(:func:`levels`: one unoptimized or lightly optimized, one fully) with the clang of the
``ziglang`` package, its calls replaced (:func:`pyzyme.frontends.c.lower.lower`),
and run: C programs JIT-compiled in this process (as Enzyme's tests use ``lli``), here; C++
programs linked into an executable by ``pyzyme cc`` in test_enzyme_cxx.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pyzyme.frontends.c.clang import ziglang_available

pytestmark = pytest.mark.skipif(not ziglang_available(), reason="needs the 'ziglang' package")

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "corpus" / "enzyme_c"
C_PROGRAMS = sorted(p.name for p in PROGRAMS.glob("*.c"))
CXX_PROGRAMS = sorted(p.name for p in PROGRAMS.glob("*.cpp"))
LEVELS = ("-O0", "-O1", "-O2", "-O3")


def levels(programs: list[str]) -> list[tuple[str, str]]:
    """Each program with two levels, in turn -O0 and -O2 or -O1 and -O3: every program runs
    unoptimized (or nearly) and fully optimized, and every level runs half the corpus. All
    four levels of every program took a fifth of make test's budget; Enzyme's Integration
    suite, run outside the project, still covers each program at each level.

    >>> levels(["a.c", "b.c"])
    [('a.c', '-O0'), ('a.c', '-O2'), ('b.c', '-O1'), ('b.c', '-O3')]
    """
    return [(name, LEVELS[k % 2 + step]) for k, name in enumerate(programs) for step in (0, 2)]


@pytest.fixture(scope="session")
def c_ir():
    """Every C program at its levels as LLVM IR (with line tables, so errors name lines),
    compiled by parallel clang processes once per session."""
    from pyzyme.frontends.c.driver import compile_source

    work = levels(C_PROGRAMS)

    def one(item):
        name, opt = item
        return compile_source(PROGRAMS / name, opt)

    with ThreadPoolExecutor(4) as pool:
        return dict(zip(work, pool.map(one, work)))


def test_the_corpus_is_large_enough():
    assert len(C_PROGRAMS) + len(CXX_PROGRAMS) >= 30


@pytest.mark.parametrize("name, opt", levels(C_PROGRAMS))
def test_c_program(c_ir, name, opt, capfd):
    from pyzyme.frontends.c.lower import lower
    from pyzyme.runtime.standalone import Program

    text = lower(c_ir[name, opt])
    assert "@__enzyme_autodiff(" not in text and "@__enzyme_fwddiff(" not in text
    failures = Program(text, name=name, opt_level=0).run_main()
    assert failures == 0, capfd.readouterr().err


@pytest.mark.parametrize("tbaa", [(), ("-Xclang", "-new-struct-path-tbaa")],
                         ids=["tbaa", "new-struct-path-tbaa"])
@pytest.mark.parametrize("opt", LEVELS[1:])
@pytest.mark.parametrize("name", ["struct_int_fields.c", "float_pointer_copy.c"])
def test_programs_read_by_type_tags(name, opt, tbaa, capfd):
    """What pyzyme's own type analysis cannot tell, clang's type tags (!tbaa; none at -O0)
    say, in either of clang's formats (the newer one, which Eigen's tests ask for, was not
    read): an integer field of a struct in active memory, copied in reverse mode, holds an
    integer (it was refused as copying float bits); a block copied through a pointer tagged
    float * holds floats (it was refused as a copy of unknown contents)."""
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower
    from pyzyme.runtime.standalone import Program

    text = lower(compile_source(PROGRAMS / "tagged" / name, opt, tbaa))
    assert Program(text, opt_level=0).run_main() == 0, capfd.readouterr().err


def test_vectorized_ir_from_clang(c_ir):
    """``pyzyme opt`` takes whatever clang wrote: at -O2 without AD_FLAGS, loops come
    vectorized, and the tape keeps vectors (16-byte aligned blocks, not 32)."""
    from pyzyme.frontends.c.clang import compile_to_ir
    from pyzyme.frontends.c.lower import lower
    from pyzyme.runtime.standalone import Program

    text = compile_to_ir(PROGRAMS / "overwritten.c", "c", "-O2")
    assert "<4 x double>" in text or "<2 x double>" in text
    for _ in range(5):  # a misaligned access crashes only when malloc's block is unlucky
        assert Program(lower(text), opt_level=0).run_main() == 0


_RULED = '''define double @f(double %x) noinline {
  %y = fmul double %x, %x
  ret double %y
}
define double @f_aug(double %x) {
  ret double %x
}
define double @f_rev(double %x, double %seed) {
  ret double %seed
}
define double @g(double %x) {
  %y = call double @f(double %x)
  ret double %y
}
define double @dg(double %x) {
  %d = call double (ptr, ...) @__enzyme_autodiff(ptr @g, double %x)
  ret double %d
}
declare double @__enzyme_autodiff(ptr, ...)
'''


@pytest.mark.parametrize("registration, message", [
    ("[2 x ptr] [ptr @f, ptr @f_aug]", "must be {(void *)f, (void *)augmented_f, "
                                       "(void *)reverse_f}: 3 functions, got {@f, @f_aug}"),
    ("[3 x ptr] [ptr @f, ptr @f_aug, ptr null]", "3 functions, got {@f, @f_aug, null}"),
])
def test_malformed_registration_names_the_global(registration, message):
    from pyzyme.frontends.c.enzyme_calls import EnzymeCallError
    from pyzyme.frontends.c.lower import lower

    text = _RULED + f"@__enzyme_register_gradient_f = global {registration}\n"
    with pytest.raises(EnzymeCallError) as err:
        lower(text)
    assert "@__enzyme_register_gradient_f must be" in str(err.value)
    assert message in str(err.value)


def test_registered_rule_with_the_wrong_signature_is_refused():
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.lower import lower

    good = "@__enzyme_register_gradient_f = global [3 x ptr] [ptr @f, ptr @f_aug, ptr @f_rev]\n"
    out = lower(_RULED + good)  # f_rev's seed is its derivative: d g = seed
    assert "@f_rev" in out
    bad = _RULED.replace("@f_rev(double %x, double %seed)", "@f_rev(double %seed)")
    with pytest.raises(UnsupportedError) as err:
        lower(bad + good)
    text = str(err.value)
    assert "@__enzyme_register_gradient_f" in text and "reverse function @f_rev" in text
    assert "(double, double)" in text  # what Enzyme's convention expects


def test_runtime_activity_marker_is_the_hint(tmp_path):
    """Without enzyme_runtime_activity, a pointer of run-time activity is refused, and the
    message says which marker to pass."""
    from pyzyme.errors import ActivityError
    from pyzyme.frontends.c.clang import compile_to_ir
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "no_marker.c"
    src.write_text((PROGRAMS / "runtime_activity.c").read_text().replace(
        "enzyme_runtime_activity, ", ""))
    text = compile_to_ir(src, "c", "-O2", ("-I", str(PROGRAMS), "-gline-tables-only"))
    with pytest.raises(ActivityError) as err:
        lower(text)
    assert "no_marker.c:" in str(err.value)
    assert "enzyme_runtime_activity" in (err.value.hint or "")


def test_llvm_api_reads_registrations():
    """pyzyme.llvm.compile honours the module's registrations as pyzyme opt does."""
    import pyzyme.llvm

    base = _RULED.split("define double @dg")[0]
    reg = "@__enzyme_register_gradient_f = global [3 x ptr] [ptr @f, ptr @f_aug, ptr @f_rev]\n"
    ruled = pyzyme.llvm.compile(base + reg, "g", "reverse")(3.0, 1.0)
    plain = pyzyme.llvm.compile(base, "g", "reverse")(3.0, 1.0)
    assert (ruled.f0, ruled.f1) == (3.0, 1.0)  # f_aug's primal, f_rev's derivative
    assert (plain.f0, plain.f1) == (9.0, 6.0)


def test_unknown_enzyme_attribute_is_refused(tmp_path):
    """An Enzyme attribute pyzyme does not read is an error naming it and its line, not a
    clang warning and a derivative without it."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source

    src = tmp_path / "unknown_attr.c"
    src.write_text("__attribute__((enzyme_sparse_accumulate)) double f(double x) {\n"
                   "  return x * x;\n}\n")
    with pytest.raises(UnsupportedError) as err:
        compile_source(src, "-O1")
    assert "unknown_attr.c:1" in str(err.value)
    assert "enzyme_sparse_accumulate" in str(err.value)


def test_annotated_loops_become_checkpointed_steps():
    """Each annotated loop of checkpoint_annotations.c (whose values its run checks) is
    outlined into a step that a checkpoint driver reverses, not taped as it is."""
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    text = lower(compile_source(PROGRAMS / "checkpoint_annotations.c", "-O2"), opt_level=None)
    steps = {line.split("@")[1].split("(")[0] for line in text.splitlines()
             if line.startswith("define") and ".checkpointed.step" in line}
    annotated = {"binomial", "periodic", "store_all", "dflt", "revolve_int"}
    assert {f"{name}.checkpointed.step" for name in annotated} <= steps
    assert not any(name.startswith("plain") for name in steps)
    assert "@pyzyme.checkpoint_for.rev." in text and "@pyzyme.checkpoint_for.aug." in text


@pytest.mark.parametrize("loop, expected", [
    ('#pragma enzyme checkpoint("binomial", 2)\n'
     "  for (long i = 0; i < n; i++) { if (w[0] > 3) break; w[0] *= 1.1; }",
     "leaves other than by its condition"),
    ('#pragma enzyme checkpoint("binomial", 2)\n  for (long i = 0; i < n; i++) u[0] *= 1.1;',
     "whose size pyzyme cannot tell"),
    ('#pragma enzyme checkpoint("binomial", 2)\n  for (long i = 0; i < n; i += 2) w[0] *= 1.1;',
     "does not go up by one"),
    ("#pragma enzyme checkpoint\n  while (n-- > 0) w[0] *= 1.1;", "other than a for loop"),
    ('#pragma enzyme checkpoint("fancy", 2)\n  for (long i = 0; i < n; i++) w[0] *= 1.1;',
     "unknown checkpointing scheme 'fancy'"),
    ('__attribute__((enzyme_checkpoint("revolve", 2))) for (long i = 0; i < n; i++)\n'
     "    w[0] *= 1.1;", "needs pyzyme's <enzyme/checkpoint.h>"),
])
def test_annotated_loops_pyzyme_cannot_outline_are_refused(tmp_path, loop, expected):
    """An annotated loop pyzyme cannot turn into a checkpointed step is an error at the
    annotation's line saying what to change, never a loop taped as if unannotated."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source

    header = "" if "needs pyzyme" in expected else "#include <enzyme/checkpoint.h>"
    src = tmp_path / "annotated.c"
    src.write_text(header + "\n#include <stdlib.h>\n"
                   "void f(double *u, long n) {\n  double *w = malloc(16);\n  " + loop +
                   "\n  u[1] = w[0];\n  free(w);\n}\n")
    with pytest.raises(UnsupportedError) as err:
        compile_source(src, "-O1")
    assert "annotated.c:5" in str(err.value) and expected in str(err.value)


_CHECKPOINT = """#include <enzyme/checkpoint.h>
extern int enzyme_dup, enzyme_const;
void __enzyme_autodiff(void *, ...);
static void step(int64_t i, double *u, double *w) { u[0] = u[0] * w[0]; w[0] += 1.0; }
__attribute__((noinline)) static void bump(double *w) { w[0] += 1.0; }
__attribute__((noinline)) static double peek(double *w) { return w[0]; }
static int grows(int64_t i, double *u, double *w) { u[0] *= peek(w); bump(w); return i < 3; }
static int reads(int64_t i, double *u, double *w) { u[0] *= peek(w); return i < 3; }
"""


@pytest.mark.parametrize("body, expected", [
    # w is written by every step but not in any region: a snapshot would miss it.
    ("__enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, &EnzymeCkptRevolve, c,\n"
     "  enzyme_checkpoint_region, u, 8, u, w);",
     "argument 2, which no enzyme_checkpoint_region covers"),
    ("__enzyme_checkpoint_for((void *)step, 0, n, enzyme_checkpoint_region, u, 8,\n"
     "  enzyme_checkpoint_region, w, 8, u, w);", "needs a scheme"),
    ("__enzyme_checkpoint_for((void *)step, 0, n, enzyme_scheme, &EnzymeCkptRevolve, c,\n"
     "  enzyme_checkpoint_region, u, 8, enzyme_checkpoint_region, w, 8, u);",
     "passes 1 arguments to @step, which takes 2"),
    ("__enzyme_checkpoint_while((void *)step, enzyme_scheme, &EnzymeCkptStoreAll, c, u, w);",
     "the step of __enzyme_checkpoint_while (@step) returns void, not whether to go on"),
    # w is written by a function the step calls.
    ("__enzyme_checkpoint_while((void *)grows, enzyme_scheme, &EnzymeCkptStoreAll, c,\n"
     "  enzyme_checkpoint_region, u, 8, u, w);",
     "(@grows) write through their argument 2, which no enzyme_checkpoint_region covers"),
])
def test_checkpointed_loops_pyzyme_cannot_snapshot_are_refused(tmp_path, body, expected):
    """A checkpointed loop whose state a snapshot would not hold, or that does not read as
    Enzyme's, is an error at its line, not a gradient from the wrong state."""
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.enzyme_calls import EnzymeCallError
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "ckpt.c"
    src.write_text(_CHECKPOINT + "double f(double *u, double *w, int64_t n, EnzymeCkptConfig *c)"
                   " {\n  " + body + "\n  return u[0];\n}\n"
                   "void g(double *u, double *du, double *w, double *dw, EnzymeCkptConfig *c)"
                   " {\n  __enzyme_autodiff((void *)f, enzyme_dup, u, du, enzyme_dup, w, dw,"
                   " enzyme_const, (int64_t)3, enzyme_const, c);\n}\n")
    with pytest.raises(EnzymeCallError) as err:
        lower(compile_source(src, "-O1"))
    line = _CHECKPOINT.count("\n") + 2
    assert f"ckpt.c:{line}" in str(err.value) and expected in str(err.value)


@pytest.mark.parametrize("opt", ["-O0", "-O1"])
def test_checkpointed_steps_may_pass_arguments_to_functions_that_only_read_them(tmp_path, opt):
    """A step passing an unmarked argument to a function that only reads it is not refused
    (unoptimised code has no readonly attributes: what the callee does decides)."""
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "ckpt.c"
    src.write_text(_CHECKPOINT + "double f(double *u, double *w, EnzymeCkptConfig *c) {\n"
                   "  __enzyme_checkpoint_while((void *)reads, enzyme_scheme, "
                   "&EnzymeCkptStoreAll, c,\n  enzyme_checkpoint_region, u, 8, u, w);\n"
                   "  return u[0];\n}\n"
                   "void g(double *u, double *du, double *w, double *dw, EnzymeCkptConfig *c)"
                   " {\n  __enzyme_autodiff((void *)f, enzyme_dup, u, du, enzyme_dup, w, dw,"
                   " enzyme_const, c);\n}\n")
    assert "@pyzyme.checkpoint_while.rev.reads" in lower(compile_source(src, opt))


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_forward_mode_over_a_checkpointed_gradient_is_refused(tmp_path, opt):
    """Forward mode over a gradient through a checkpointed loop (a Hessian-vector product)
    would differentiate the schedule's snapshots: an error at the outer call naming the
    loop's sweep, not derivatives through inlined scheme code."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "ckpt.c"
    src.write_text(_CHECKPOINT + "double __enzyme_fwddiff(void *, ...);\n"
                   "static double f(double *u, double *w, EnzymeCkptConfig *c) {\n"
                   "  __enzyme_checkpoint_while((void *)reads, enzyme_scheme, "
                   "&EnzymeCkptStoreAll, c,\n  enzyme_checkpoint_region, u, 8, u, w);\n"
                   "  return u[0] * u[0];\n}\n"
                   "__attribute__((noinline)) static void g(double *u, double *du, double *w,"
                   " EnzymeCkptConfig *c) {\n  __enzyme_autodiff((void *)f, enzyme_dup, u, du,"
                   " enzyme_const, w, enzyme_const, c);\n}\n"
                   "void h(double *u, double *v, double *du, double *dv, double *w,"
                   " EnzymeCkptConfig *c) {\n  __enzyme_fwddiff((void *)g, enzyme_dup, u, v,"
                   " enzyme_dup, du, dv, enzyme_const, w, enzyme_const, c);\n}\n")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, opt))
    line = _CHECKPOINT.count("\n") + 11  # the __enzyme_fwddiff call
    assert f"ckpt.c:{line}" in str(err.value)
    assert "forward mode through the reverse-mode derivative of a checkpointed loop" \
        in str(err.value) and "pyzyme.checkpoint_while.aug.reads" in str(err.value)


_FIXED_POINT = """#include <enzyme/fixed_point.h>
extern int enzyme_dup, enzyme_const, enzyme_scheme;
void __enzyme_autodiff(void *, ...);
static int step(int64_t i, double *u, double *p) { u[0] = 0.5 * u[0] + p[0]; return i < 40; }
static void none(int64_t i, double *u, double *p) { u[0] = 0.5 * u[0] + p[0]; }
static int count(int64_t i, long *u, double *p) { u[0] += 1; return u[0] < 9; }
static int unread(int64_t i, double *u, double *p) { (void)u; p[0] *= 0.5; return 0; }
"""


@pytest.mark.parametrize("body, expected", [
    ("__enzyme_fixed_point((void *)step, enzyme_fp_reduction, 1e-20, u, p);",
     "needs the state it iterates"),
    ("__enzyme_fixed_point((void *)step, enzyme_fp_state, u, 8, u);",
     "passes 1 arguments to @step, which takes 2"),
    ("__enzyme_fixed_point((void *)none, enzyme_fp_state, u, 8, u, p);",
     "must return whether to iterate again"),
    ("__enzyme_fixed_point((void *)count, enzyme_fp_state, (long *)u, 8, (long *)u, p);",
     "must hold doubles or floats"),
    ("__enzyme_fixed_point((void *)unread, enzyme_fp_state, u, 8, u, p);",
     "sees no float access"),
    ("__enzyme_fixed_point((void *)step, enzyme_fp_state, u, 8, enzyme_scheme, 0, u, p);",
     "does not read enzyme_scheme"),
    ("__enzyme_fixed_point((void *)step, enzyme_fp_state, u, 8, enzyme_fp_control, 0.5, u, p);",
     "enzyme_fp_control takes a function"),
    ("__enzyme_fixed_point((void *)step, enzyme_fp_state, u, 8, enzyme_fp_max_iters, 2.0, u,"
     " p);", "enzyme_fp_max_iters takes an integer"),
])
def test_fixed_points_that_do_not_read_as_enzymes_are_refused(tmp_path, body, expected):
    """A fixed-point iteration pyzyme cannot iterate the derivative of (no state, a state
    of no floats, a step that does not say when to stop), or that does not read as Enzyme's,
    is an error at its line, not a derivative of the wrong iteration."""
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.enzyme_calls import EnzymeCallError
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "fp.c"
    src.write_text(_FIXED_POINT + "double f(double *u, double *p) {\n  " + body +
                   "\n  return u[0];\n}\n"
                   "void g(double *u, double *du, double *p, double *dp) {\n"
                   "  __enzyme_autodiff((void *)f, enzyme_dup, u, du, enzyme_dup, p, dp);\n}\n")
    with pytest.raises(EnzymeCallError) as err:
        lower(compile_source(src, "-O1"))
    assert "fp.c:9" in str(err.value) and expected in str(err.value)


def test_marked_fixed_point_loops_become_fixed_point_steps():
    """Each loop of fixed_point_markers.c marked by __enzyme_set_fixed_point (whose values its
    run checks) is outlined into a step run by pyzyme's fixed-point iteration, before -O2 can
    unroll it; the same loops unmarked stay loops of their functions."""
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    text = lower(compile_source(PROGRAMS / "fixed_point_markers.c", "-O2"), opt_level=None)
    names = {line.split("@")[1].split("(")[0] for line in text.splitlines()
             if line.startswith("define")}
    marked = ("counted_fp", "tested_fp", "limited", "nested_fp")
    assert {n for n in names if re.fullmatch(r"\w+\.fixed_point\.step", n)
            and not n.startswith(("diffe_", "fwddiffe_"))} == {
        f"{name}.fixed_point.step" for name in marked}
    # Their adjoints (and counted_fp's tangent) are the step's, iterated.
    assert {f"diffe_{name}.fixed_point.step" for name in marked} <= names
    assert "fwddiffe_counted_fp.fixed_point.step" in names
    assert "__enzyme_set_fixed_point" not in text


_MARKED = """#include <enzyme/fixed_point.h>
#define FP(s) __enzyme_set_fixed_point(1e-20, (int64_t)-1, (void *)0, s, (int64_t)8)
double f(double *u, double *p, double tol, int (*ctl)(double *, double *)) {
  long n = 0;
  %s
  return u[0] + n;
}
"""


@pytest.mark.parametrize("loop, expected", [
    ("while (n < 9) { FP(u); if (u[0] > 3) break; u[0] = 0.5 * u[0] + p[0]; n++; }",
     "leaves other than by its test"),
    ("FP(u); while (n < 9) { u[0] = 0.5 * u[0] + p[0]; n++; }", "outside any loop"),
    ("while (n < 9) { FP(u); FP(p); u[0] = 0.5 * u[0] + p[0]; n++; }",
     "marked more than once"),
    ("while (n < 9) { __enzyme_set_fixed_point(tol, -1, 0, u, 8); tol *= 2; n++; }",
     "arguments the loop computes"),
    ("while (n < 9) { __enzyme_set_fixed_point(1e-20, -1, 0); u[0] *= 0.5; n++; }",
     "without its state"),
    ("while (FP(u), n < 9) { u[0] = 0.5 * u[0] + p[0]; n++; }", "tested after its marker"),
    ("while (n < 9) { __enzyme_set_fixed_point(1e-20, -1, (void *)ctl, u, 8); n++; }",
     "control function pyzyme cannot tell"),
    ("for (;;) { FP(u); u[0] = 0.5 * u[0] + p[0]; if (++n > 9) break; }",
     "tested after its marker"),
])
def test_marked_fixed_point_loops_pyzyme_cannot_outline_are_refused(tmp_path, loop, expected):
    """A loop marked from inside that pyzyme cannot outline into a step (left by break, a
    marker outside a loop, in its test, before the loop's test in the body, or twice,
    arguments the loop computes, a control function known only at run time) is an error at the marker's line, never the loop
    differentiated as if unmarked."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source

    src = tmp_path / "marked.c"
    src.write_text(_MARKED.replace("%s", loop))
    with pytest.raises(UnsupportedError) as err:
        compile_source(src, "-O1")
    assert "marked.c:5" in str(err.value) and expected in str(err.value)
    assert "__enzyme_set_fixed_point" in str(err.value)


def test_fixed_point_passing_an_active_value_to_its_step_is_refused(tmp_path):
    """Reverse mode iterates the step's adjoint through memory; an active double the call
    passes by value would need its adjoint summed over the rounds: refused, naming the step."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "fpvalue.c"
    src.write_text("#include <enzyme/fixed_point.h>\n#include <math.h>\n"
                   "extern int enzyme_dup;\ndouble __enzyme_autodiff(void *, ...);\n"
                   "__attribute__((noinline)) static int step(int64_t i, double *u, double a) {\n"
                   "  double n = 0.5 * u[0] + a; int go = fabs(n - u[0]) > 1e-14; u[0] = n;\n"
                   "  return go; }\n"
                   "double f(double *u, double a) {\n"
                   "  __enzyme_fixed_point((void *)step, enzyme_fp_state, u, 8, u, a * a);\n"
                   "  return u[0]; }\n"
                   "double g(double *u, double *du, double a) {\n"
                   "  return __enzyme_autodiff((void *)f, enzyme_dup, u, du, a); }\n")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O1"))
    assert "by value" in str(err.value) and "@step" in str(err.value)


def test_enzyme_shadow_is_refused_where_it_cannot_be_passed(tmp_path):
    """A global with an enzyme_shadow is passed to the functions using it as a hidden
    parameter; when one of them is called through a pointer, it cannot be: an error naming
    the global, not a derivative that leaves the shadow at zero."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "shadowed.c"
    src.write_text("double dscale = 0;\n"
                   "__attribute__((enzyme_shadow(dscale))) double scale = 2.0;\n"
                   "__attribute__((noinline)) double f(double x) { return scale * x * x; }\n"
                   "double g(double x) { double (*volatile p)(double) = f; return p(x); }\n"
                   "double __enzyme_autodiff(void *, double);\n"
                   "double dg(double x) { return __enzyme_autodiff((void *)g, x); }\n")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O2"))
    assert "@scale" in str(err.value) and "enzyme_shadow" in str(err.value)
    assert "address is taken" in str(err.value)


@pytest.mark.parametrize("source, expected", [
    # Enzyme calls a logging hook the program defines; pyzyme would not: refused.
    ("int calls; void enzymeLogValue(double v, const char *op, const char *callee,\n"
     " const char *mod, const char *fn, unsigned b, unsigned i) { calls++; }\n",
     "enzymeLogValue"),
    ("double __enzyme_error_estimate(double, ...);\n"
     "double e(double x) { return __enzyme_error_estimate(x * x, 0.0); }\n",
     "__enzyme_error_estimate"),
])
def test_enzyme_features_pyzyme_lacks_are_refused(tmp_path, source, expected):
    """Features of Enzyme a program relies on and pyzyme does not provide are errors naming
    them, not programs that build and then miss their effect."""
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.enzyme_calls import EnzymeCallError
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "feature.c"
    src.write_text("double __enzyme_autodiff(void *, ...);\n" + source +
                   "double sq(double x) { return x * x; }\n"
                   "double dsq(double x) { return __enzyme_autodiff((void *)sq, x); }\n")
    with pytest.raises(EnzymeCallError) as err:
        lower(compile_source(src, "-O1"))
    assert expected in str(err.value)


@pytest.mark.parametrize("source, expected", [
    # The derivative would call the callee's reverse with the tape of a call that threw.
    ("#include <stdexcept>\n"
     "struct Count { long *n; ~Count() { ++*n; } };\n"
     "double *at(double *a, long i, long n, long *k) {\n"
     "  Count c{k};\n"
     "  if (i >= n) throw std::out_of_range(\"at\");\n"
     "  return i ? at(a + 1, i - 1, n - 1, k) : a; }\n"
     "double f(double *a, long i, long *k) {\n"
     "  try { double *p = at(a, i, 2, k); return *p * *p; } catch (...) { return 0; } }\n"
     "extern int enzyme_const;\n"
     "void df(double *a, double *da, long i, long *k) {\n"
     "  __enzyme_autodiff((void *)f, a, da, enzyme_const, i, enzyme_const, k); }\n",
     "catches an exception"),
    # A struct returned through memory has no seed in reverse mode.
    ("struct Big { double a, b, c; };\n"
     "Big f(double x) { return Big{x, 2 * x, x * x}; }\n"
     "void df(double x) { __enzyme_autodiff((void *)f, x); }\n", "forward mode only"),
])
def test_cxx_constructs_reverse_mode_lacks_are_refused(tmp_path, source, expected):
    """An exception caught inside the differentiated function (an invoke whose landing pad
    goes on), and a function returning a struct through memory, are refused in reverse mode
    naming what, not differentiated wrong."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "construct.cpp"
    src.write_text('extern "C" void __enzyme_autodiff(void *, ...);\n' + source)
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O1"))
    assert expected in str(err.value)


def test_callee_copy_seeded_only_where_all_calls_agree(tmp_path):
    """A callee's type analysis is seeded with what all its calls know of an argument (its
    one analysis serves every derivative of it): called on doubles and on integers, its
    copy's bytes are unknown, and the copy is refused, not moved back as doubles."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "mixed.c"
    src.write_text(
        "#include <stdlib.h>\n#include <string.h>\n"
        "void __enzyme_autodiff(void *, ...);\n"
        "static void *moved(void *b, int n, int k) {\n"
        "  if (k > 1) b = moved(b, n, k - 1);\n"
        "  void *f = malloc(n * 8); memcpy(f, b, n * 8); free(b); return f; }\n"
        "double cubes(const double *x, int n) {\n"
        "  double *sq = malloc(n * sizeof(double));\n"
        "  for (int i = 0; i < n; i++) sq[i] = x[i] * x[i];\n"
        "  sq = moved(sq, n, n / 2);\n"
        "  long *c = malloc(n * sizeof(long)); for (long i = 0; i < n; i++) c[i] = i * i;\n"
        "  c = moved(c, n, 3);\n"
        "  double s = 0; for (int i = 0; i < n; i++) s += sq[i] * x[i] * c[i];\n"
        "  free(sq); free(c); return s; }\n"
        "void d(const double *x, double *dx, int n) { __enzyme_autodiff((void *)cubes, x, dx, n); }\n")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O1"))
    assert "moved copies memory" in str(err.value)


def test_changed_global_callee_stops_the_derivative(tmp_path):
    """A derivative that calls the library function a global pointer held initially
    (global_callee.c) stops, naming the global and the function, once the program has
    pointed it elsewhere: it would not be the derivative of the code that runs."""
    src = tmp_path / "changed.c"
    src.write_text((PROGRAMS / "global_callee.c").read_text().replace(
        "int main(void) {\n", "int main(void) {\n  shape = cos;\n"))
    exe = tmp_path / "program"
    build = subprocess.run([sys.executable, "-m", "pyzyme", "cc", str(src), "-I",
                            str(PROGRAMS), "-O1", "-o", str(exe)],
                           capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "@shape is no longer @sin" in proc.stderr and "weighted" in proc.stderr


_EXTERNAL_BLAS = """extern int enzyme_dup, enzyme_const;
double cblas_ddot(int n, const double *x, int incx, const double *y, int incy);
void dgemv_(const char *t, const int *m, const int *n, const double *alpha, const double *a,
            const int *lda, const double *x, const int *incx, const double *beta, double *y,
            const int *incy);
double clamp_norm(const double *x);
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double dot(const double *x, const double *y) {
  return cblas_ddot(3, x, 1, y, 1);
}
void apply(const double *a, const double *x, double *y) {
  int three = 3, one = 1;
  double alpha = 1, beta = 0;
  dgemv_("N", &three, &three, &alpha, a, &three, x, &one, &beta, y, &one);
}
double other(const double *x) {
  return clamp_norm(x);
}
"""

# One call site per program, so that the error is that site's.
_EXTERNAL_SITES = {
    "dot_grad": "double dot_grad(double *x, double *dx, double *y, double *dy) {\n"
                "  return __enzyme_autodiff((void *)dot, enzyme_dup, x, dx, enzyme_dup, y, dy);"
                "\n}\n",
    "apply_tangent": "void apply_tangent(double *a, double *da, double *x, double *y, "
                     "double *dy) {\n  __enzyme_fwddiff((void *)apply, enzyme_dup, a, da, "
                     "enzyme_const, x, enzyme_dup, y, dy);\n}\n",
    "other_grad": "double other_grad(double *x, double *dx) {\n"
                  "  return __enzyme_autodiff((void *)other, enzyme_dup, x, dx);\n}\n",
}


@pytest.mark.parametrize("keep, line, wanted", [
    ("dot_grad", 11, ("cblas_ddot, BLAS ddot (CBLAS interface), has no derivative",
                      "__enzyme_register_gradient_cblas_ddot")),
    ("apply_tangent", 16, ("dgemv_, BLAS dgemv (Fortran interface), has no derivative",
                           "reference BLAS")),
    ("other_grad", 19, ("no derivative for a call to clamp_norm in other",
                        "__attribute__((enzyme_inactive))")),
])
def test_call_without_a_body_is_refused_naming_its_line(tmp_path, keep, line, wanted):
    """A call, with a derivative to pass on, of a function the program declares but does not
    define (a BLAS it links) is refused naming the C line of the call, a BLAS or LAPACK
    routine as such, and advice for C (the advice was for Numba's @njit functions, and the
    only line named was that of __enzyme_autodiff)."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "external.c"
    src.write_text(_EXTERNAL_BLAS + _EXTERNAL_SITES[keep])
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O1"))
    message = str(err.value)
    assert message.startswith(f"external.c:{line}: "), message
    for part in wanted:
        assert part in message, message
    assert "@njit" not in message


# MPI's C interface as a program sees it through <mpi.h>, declared here so that the test needs
# no MPI installed (the symbols are what pyzyme reads).
_MPI_SUM = """typedef struct mpi_comm *MPI_Comm;
typedef struct mpi_type *MPI_Datatype;
typedef struct mpi_op *MPI_Op;
extern struct mpi_comm world;
extern struct mpi_type dbl;
extern struct mpi_op sum;
int MPI_Allreduce(const void *send, void *recv, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c);
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

double global_square(double x) {
  double local = x * x, total;
  MPI_Allreduce(&local, &total, 1, &dbl, &sum, &world);
  return total;
}
double grad(double x) { return __enzyme_autodiff((void *)global_square, x); }
double tangent(double x) { return __enzyme_fwddiff((void *)global_square, x, 1.0); }
"""


@pytest.mark.parametrize("keep", ["grad", "tangent"])
def test_mpi_call_is_refused_naming_the_routine_and_its_line(tmp_path, keep):
    """An MPI call carrying a derivative is refused as an MPI routine, naming its C line, with
    advice that fits MPI: the generic advice (compile its source with the program, declare it
    enzyme_inactive) would have dropped the derivative it carries between ranks."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "allreduce.c"
    drop = "tangent" if keep == "grad" else "grad"
    src.write_text("\n".join(line for line in _MPI_SUM.splitlines()
                             if not line.startswith(f"double {drop}(")) + "\n")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O1"))
    message = str(err.value)
    assert message.startswith("allreduce.c:13: MPI_Allreduce, an MPI routine, has no "
                              "derivative"), message
    assert "__enzyme_register_gradient_MPI_Allreduce" in message
    assert "compile MPI_Allreduce's source" not in message
    assert "would drop the derivatives" in message


_OPENMP_SQUARES = """extern int enzyme_dup, enzyme_const;
double __enzyme_autodiff(void *, ...);
double __enzyme_fwddiff(void *, ...);

void square_all(double *a, double scale, int n) {
#pragma omp parallel for
  for (int i = 0; i < n; i++)
    a[i] *= scale * a[i];
}
void grad(double *a, double *da) {
  __enzyme_autodiff((void *)square_all, enzyme_dup, a, da, enzyme_const, 2.0, enzyme_const, 4);
}
void tangent(double *a, double *da) {
  __enzyme_fwddiff((void *)square_all, enzyme_dup, a, da, enzyme_const, 2.0, enzyme_const, 4);
}
"""


@pytest.mark.parametrize("keep", ["grad", "tangent"])
def test_openmp_parallel_region_is_refused_naming_its_line(tmp_path, keep):
    """Built with -fopenmp, a parallel loop in differentiated code is a call of
    __kmpc_fork_call with the outlined body: it is refused as an OpenMP parallel region at the
    pragma's line, with -fopenmp to drop (it was refused as a call of __kmpc_fork_call, with
    advice to compile its source or declare it inactive)."""
    from pyzyme.errors import FrontendError, UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "squares.c"
    drop = "tangent" if keep == "grad" else "grad"
    lines = _OPENMP_SQUARES.splitlines()
    k = lines.index(next(line for line in lines if line.startswith(f"void {drop}(")))
    src.write_text("\n".join(lines[:k] + lines[k + 3:]) + "\n")
    try:
        text = compile_source(src, "-O1", ["-fopenmp"])
    except FrontendError as err:  # pragma: no cover - a clang without OpenMP
        pytest.skip(f"zig's clang cannot compile -fopenmp here: {err}")
    if "__kmpc_fork_call" not in text:  # pragma: no cover
        pytest.skip("zig's clang ignored -fopenmp (no __kmpc_fork_call in its IR)")
    with pytest.raises(UnsupportedError) as err:
        lower(text)
    message = str(err.value)
    assert message.startswith("squares.c:6: an OpenMP parallel region in @square_all"), message
    assert "OpenMP parallel regions are not differentiated" in message
    assert "build without -fopenmp" in message


_LOGGING_BLAS = """extern int enzyme_dup;
double __enzyme_autodiff(void *, ...);
const double *seen[8];
int nseen;
__attribute__((noinline)) double cblas_ddot(int n, const double *x, int incx,
                                            const double *y, int incy) {
  seen[nseen++ & 7] = x;
  return 0;
}
double dot(const double *x, const double *y) {
  return cblas_ddot(3, x, 1, y, 1);
}
double dot_grad(double *x, double *dx, double *y, double *dy) {
  return __enzyme_autodiff((void *)dot, enzyme_dup, x, dx, enzyme_dup, y, dy);
}
"""


def test_refusal_in_a_blas_body_names_the_routine_and_its_call(tmp_path):
    """Reverse mode differentiates the body a program gives a CBLAS routine (Enzyme would
    use its rule for the name); a refusal there starts with the C line calling the routine,
    names it as BLAS and says no reverse rule exists (it named the caller, with a hint about
    runtime activity)."""
    from pyzyme.errors import PyzymeError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "logging.c"
    src.write_text(_LOGGING_BLAS)
    with pytest.raises(PyzymeError) as err:
        lower(compile_source(src, "-O1"))
    message = str(err.value)
    assert message.startswith("logging.c:11: cblas_ddot, BLAS ddot (CBLAS interface): pyzyme "
                              "has no reverse-mode rule for it"), message
    assert "(at logging.c:7)" in message, message
    assert "__enzyme_register_gradient_cblas_ddot" in err.value.hint


def test_stack_buffer_given_back_per_iteration_is_refused(tmp_path):
    """A variable-length array in a loop holding active values: the stack is given back at
    the end of each iteration (llvm.stackrestore), so its shadow could not last until the
    reverse sweep; refused, naming it, rather than read after it is gone."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "vla_loop.c"
    src.write_text("double __enzyme_autodiff(void *, ...);\n"
                   "double f(const double *x, int n) {\n"
                   "  double s = 0;\n"
                   "  for (int r = 1; r <= 3; r++) {\n"
                   "    double w[n];\n"
                   "    for (int i = 0; i < n; i++) w[i] = x[i] * r;\n"
                   "    for (int i = 0; i < n; i++) s += w[i] * x[i];\n"
                   "  }\n"
                   "  return s;\n"
                   "}\n"
                   "void df(const double *x, double *dx, int n) {\n"
                   "  __enzyme_autodiff((void *)f, x, dx, n);\n"
                   "}\n")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O2"))
    assert "vla_loop.c:12" in str(err.value)
    assert "variable-size stack buffer" in str(err.value) and "stackrestore" in str(err.value)


def test_inline_assembly_is_named(tmp_path):
    """Inline assembly other than a fused multiply-add, handed an active value, is refused
    as inline assembly (it was called an indirect call through a function pointer)."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "asm.c"
    src.write_text("double __enzyme_autodiff(void *, ...);\n"
                   "double f(double x) {\n"
                   "  double y;\n"
                   "  __asm__(\"vsqrtsd %1, %1, %0\" : \"=x\"(y) : \"x\"(x));\n"
                   "  return y;\n"
                   "}\n"
                   "double df(double x) { return __enzyme_autodiff((void *)f, x); }\n")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O2"))
    assert "inline assembly" in str(err.value) and "vsqrtsd" in str(err.value)
    assert "asm.c:7" in str(err.value)


def test_call_through_a_pointer_given_active_heap_memory_is_still_refused(tmp_path):
    """Memory the function allocates is passed through an unknown call as it is only when
    nothing active is ever stored into it (inert_objects.cpp): one holding an active value
    keeps the refusal, since the call may move that value where no derivative follows."""
    from pyzyme.errors import UnsupportedError
    from pyzyme.frontends.c.driver import compile_source
    from pyzyme.frontends.c.lower import lower

    src = tmp_path / "active_heap.c"
    src.write_text("#include <stdlib.h>\n"
                   "double __enzyme_autodiff(void *, ...);\n"
                   "typedef void (*shift)(double *);\n"
                   "double g(double x, shift f) {\n"
                   "  double *p = malloc(16);\n  p[0] = x * x;\n  f(p);\n"
                   "  double r = p[1];\n  free(p);\n  return r;\n}\n"
                   "extern int enzyme_const;\n"
                   "double dg(double x, shift f) {\n"
                   "  return __enzyme_autodiff((void *)g, x, enzyme_const, f);\n}\n")
    with pytest.raises(UnsupportedError) as err:
        lower(compile_source(src, "-O1"))
    assert "indirect call" in str(err.value) or "function pointer" in str(err.value)
