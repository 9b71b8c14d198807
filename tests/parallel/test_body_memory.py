"""What a parallel loop's body may assume of the memory its launch hands it
(pyzyme.transforms.parallel_body.apart_slots): the arrays in its argument slots exist before
it runs and are neither its scratch arrays, nor the launcher's own arrays, nor the constant
exception info its raising path passes to the interpreter. Loads of those arrays are then
read again by the body's reverse instead of kept on its tape (benchmarks/parallel.py's P3,
ADBench's GMM with scratch arrays allocated in the body, kept every load of its inputs), and
are no source of non-finite values for strong zero's versions (P3 guarded 8 partials and
tested 16 values). Then: the gradient of such a kernel, at 1, 2 and 4 threads."""

import math
import re

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse, autodiff, ir
from pyzyme.analysis.finite import nonfinite_values
from pyzyme.analysis.overwrite import analyze_overwrites
from pyzyme.rules import default_rules
from pyzyme.transforms.parallel_body import apart_slots
from tests.known_bugs import numba_compiles

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)

# A split body as pyzyme.transforms.parallel_body.split_arguments makes it: slot 0 (an input
# array, read through cargs), slot 1 (the reduction slot); a MemInfo's data as scratch; the
# raising path of Numba's gufunc wrapper (its exception info a constant global: a call through
# the function pointer it holds, numba_unpickle, numba_do_raise).
BODY = """
@buf = private unnamed_addr constant [4 x i8] c"abcd"
@info = private constant { ptr, i32, ptr, ptr, i32 } { ptr @buf, i32 4, ptr null, ptr null, i32 0 }

define void @body(ptr %args, ptr %dims, ptr %steps, ptr %data, ptr %cargs, i1 %shared) {
entry:
  %xp = load ptr, ptr %cargs, align 8
  %sp.a = getelementptr i8, ptr %args, i64 8
  %sp = load ptr, ptr %sp.a, align 8
  %n = load i64, ptr %dims, align 8
  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 8, i32 32)
  %none = icmp eq ptr %mi, null
  br i1 %none, label %raise, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %acc1, %loop ]
  %dp = getelementptr i8, ptr %mi, i64 24
  %d = load ptr, ptr %dp, align 8
  %xi.p = getelementptr double, ptr %xp, i64 %i
  %xi = load double, ptr %xi.p, align 8
  %sq = fmul double %xi, %xi
  store double %sq, ptr %d, align 8
  %t = load double, ptr %d, align 8
  %acc1 = fadd double %acc, %t
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  store double %acc1, ptr %sp, align 8
  ret void
raise:
  %e = load { ptr, i32, ptr, ptr, i32 }, ptr @info, align 8
  %bytes = extractvalue { ptr, i32, ptr, ptr, i32 } %e, 0
  %state = extractvalue { ptr, i32, ptr, ptr, i32 } %e, 2
  %build = extractvalue { ptr, i32, ptr, ptr, i32 } %e, 3
  %made = call ptr %build(ptr %state)
  %exc = call ptr @numba_unpickle(ptr %bytes, i32 4, ptr %state)
  call void @numba_do_raise(ptr %exc)
  ret void
}
declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare ptr @numba_unpickle(ptr, i32, ptr)
declare void @numba_do_raise(ptr)
"""


def _body():
    fn = ir.parse_module(BODY).get_function("body")
    loads = {i.name: i for i in fn.instructions() if i.opcode == "load"}
    return fn, loads


@pytest.mark.parametrize("distinct", [False, True])
def test_loads_of_launch_arrays_are_not_overwritten_by_the_bodys_own_writes(distinct):
    """The input's load is overwritten by nothing the body writes but the reduction slot,
    and by that only where the launch's arrays may overlap: not by the store into the scratch
    array, nor by the raising path's calls. The scratch array's load is (by the store of the
    next iteration). Without what the launch says, every write may hit the input."""
    fn, loads = _body()
    facts = analyze_overwrites(fn, apart_slots(fn, distinct))
    writer = facts.overwritten_by[loads["xi"]]
    if distinct:
        assert writer is None
    else:
        assert writer.opcode == "store" and writer.operands[1].name == "sp"
    assert facts.is_overwritten(loads["t"])
    assert analyze_overwrites(fn).overwritten_by[loads["xi"]].opcode == "store"
    assert analyze_overwrites(fn).overwritten_by[loads["xi"]].operands[1].name == "d"


def test_the_raising_path_makes_no_load_of_a_launch_array_non_finite():
    """Calls handed only link-time objects (the constant exception info) store into those
    alone: the input's load, and the product of it, stay finite (no guard, no test for
    strong zero); without the launch's facts a callee handed a pointer stores anywhere."""
    fn, loads = _body()
    found = nonfinite_values(fn, default_rules(), apart=apart_slots(fn, False))
    assert loads["xi"] not in found and loads["t"] not in found
    assert loads["xi"] in nonfinite_values(fn, default_rules())


def gmm_like(alphas, means, x):
    """A log-sum-exp over components per point, the points a prange reduction, the scratch
    arrays allocated in the body (benchmarks/parallel.py's P3, smaller)."""
    k, d = means.shape
    total = 0.0
    for ix in prange(x.shape[0]):
        xc = np.empty(d)
        main = np.empty(k)
        for ik in range(k):
            sq = 0.0
            for j in range(d):
                xc[j] = x[ix, j] - means[ik, j]
                sq += xc[j] * xc[j]
            main[ik] = alphas[ik] - 0.5 * sq
        mx = main[0]
        for ik in range(1, k):
            if main[ik] > mx:
                mx = main[ik]
        se = 0.0
        for ik in range(k):
            se += math.exp(main[ik] - mx)
        total += math.log(se) + mx
    return total


PAR = numba.njit(parallel=True)(gmm_like)
SER = numba.njit(gmm_like)


@pytest.fixture
def par():
    """PAR, where Numba can compile it (known_bugs)."""
    numba_compiles(PAR, np.zeros(4), np.zeros((4, 3)), np.zeros((9, 3)))
    return PAR


def _gradient(f, args):
    shadows = [np.zeros_like(a) for a in args[:2]]
    autodiff(Reverse, f, Active, *[Duplicated(a, s) for a, s in zip(args, shadows)],
             Duplicated(args[2], np.zeros_like(args[2])))
    return shadows


def test_gmm_like_body_matches_the_serial_gradient(par):
    """The gradient in alphas and means against the serial function's and central
    differences, at 1, 2 and 4 threads (repeated where threads share)."""
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(4), rng.standard_normal((4, 3)), rng.standard_normal((29, 3))]
    expect = _gradient(SER, args)
    for which, flat in ((0, 1), (1, 5), (1, 10)):
        at = np.unravel_index(flat, args[which].shape)
        keep, eps = args[which][at], 1e-6
        args[which][at] = keep + eps
        up = SER(*args)
        args[which][at] = keep - eps
        down = SER(*args)
        args[which][at] = keep
        assert expect[which][at] == pytest.approx((up - down) / (2 * eps), rel=1e-6)
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            for _ in range(3 if threads > 1 else 1):
                for got, want in zip(_gradient(PAR, args), expect):
                    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_gmm_like_hvp_with_the_other_arrays_held_constant(par):
    """Forward over reverse of the same body in ``means``, ``alphas`` and the points held
    constant (handed to the loop: what the body's reverse reads of them comes back from its
    tape, marked constant), against the serial function's hvp and differences of the
    gradient, at 1, 2 and 4 threads."""
    rng = np.random.default_rng(8)
    alphas, means, x = (rng.standard_normal(4), rng.standard_normal((4, 3)),
                        rng.standard_normal((29, 3)))
    v = rng.standard_normal(means.shape)

    def in_means(f):
        def g(m, a, pts):
            return f(a, m, pts)
        return numba.njit(g)
    par, ser = in_means(PAR), in_means(SER)
    expect = pyzyme.hvp(ser, means, v, alphas, x)

    def grad(m):
        d = np.zeros_like(m)
        autodiff(Reverse, ser, Active, Duplicated(m, d), Const(alphas), Const(x))
        return d
    eps = 1e-6
    fd = (grad(means + eps * v) - grad(means - eps * v)) / (2 * eps)
    np.testing.assert_allclose(expect, fd, rtol=1e-6, atol=1e-8)
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            for _ in range(3 if threads > 1 else 1):
                np.testing.assert_allclose(pyzyme.hvp(par, means, v, alphas, x), expect,
                                           rtol=1e-11, atol=1e-13)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def _scope_lists(module_text: str) -> dict:
    """``{"!N": [scope names]}`` of the module's scope-list metadata nodes."""
    names = dict(re.findall(r'^(![0-9]+) = distinct !\{![0-9]+, ![0-9]+, !"([^"]*)"\}',
                            module_text, re.M))
    lists = {}
    for node, members in re.findall(r'^(![0-9]+) = !\{((?:![0-9]+(?:, )?)+)\}', module_text,
                                    re.M):
        lists[node] = [names.get(m, m) for m in members.split(", ")]
    return lists


def test_the_bodys_reverse_tells_llvm_launch_arrays_are_not_its_allocations(par):
    """In the split pair the reverse function reads the addresses of the body's scratch
    arrays (and their shadows) from the tape, where LLVM no longer sees them fresh: the
    accesses of the launch's arrays (no scope of their own) are declared not to alias those
    allocations, so LLVM keeps adjoint sums in registers (P3's triangle loop stored and
    reloaded one per iteration, and zeroed and restored an adjoint it never changed)."""
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(4), rng.standard_normal((4, 3)), rng.standard_normal((9, 3))]
    text = pyzyme.code_llvm(Reverse, PAR, Active,
                            *[Duplicated(a, np.zeros_like(a)) for a in args])
    lists = _scope_lists(text)
    body = re.search(r"^define internal void @reverse___gufunc__.*?^}", text, re.M | re.S)
    assert body is not None
    outside = [line for line in body.group(0).splitlines()
               if re.search(r"\b(load|store)\b", line) and _launch_side(line, lists)
               and (m := re.search(r"!noalias (![0-9]+)", line))
               and any(s.startswith("memory of") for s in lists.get(m.group(1), ()))]
    assert outside, "no access of a launch array is declared apart from the allocations"


def _launch_side(line: str, lists: dict) -> str | None:
    """The side of the launch an access is declared on ("launch arrays", "launch shadows"),
    "" where it has no scope of its own; None where its scope is another's."""
    m = re.search(r"!alias.scope (![0-9]+)", line)
    if m is None:
        return ""
    scopes = lists.get(m.group(1), ())
    return scopes[0] if len(scopes) == 1 and scopes[0].startswith("launch ") else None


def _sides(text: str) -> dict:
    """``{side: [(access line, scopes it is declared apart from)]}`` of the accesses in the
    body's reverse function declared on a side of the launch."""
    lists = _scope_lists(text)
    body = re.search(r"^define internal void @reverse___gufunc__.*?^}", text, re.M | re.S)
    assert body is not None
    found: dict = {}
    for line in body.group(0).splitlines():
        if re.search(r"\b(load|store)\b", line) and _launch_side(line, lists):
            m = re.search(r"!noalias (![0-9]+)", line)
            found.setdefault(_launch_side(line, lists), []).append(
                (line, lists.get(m.group(1), ()) if m else ()))
    return found


def test_the_bodys_reverse_tells_llvm_adds_into_shadows_leave_the_arrays_alone(par):
    """No shadow the launch hands the body is memory of an array it hands it: the body's
    reverse puts reads of the arrays and adds into their shadows in two scopes, each declared
    apart from the other, so that LLVM keeps loads of the arrays that do not change in a loop
    (``x[ix, j] - means[ik, j]``, an extent checked for a negative index) out of the loop
    instead of loading them again after every add (P3's triangle loop did)."""
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(4), rng.standard_normal((4, 3)), rng.standard_normal((9, 3))]
    sides = _sides(pyzyme.code_llvm(Reverse, PAR, Active,
                                    *[Duplicated(a, np.zeros_like(a)) for a in args]))
    assert set(sides) == {"launch arrays", "launch shadows"}
    for side, other in (("launch arrays", "launch shadows"),
                        ("launch shadows", "launch arrays")):
        for line, apart in sides[side]:
            assert other in apart and "tape" in apart, line
    stores = [line for line, _ in sides["launch shadows"] if " store " in f" {line.strip()}"]
    assert stores, "no add into a shadow of a launch array is in the shadows' scope"


def picked(w, x, y, flag):
    """A prange loop over ``w``, and an array chosen at run time read in serial code: under
    runtime activity its shadow may be the array itself."""
    a = x if flag else y
    t = 0.0
    for i in range(a.shape[0]):
        t += a[i] * a[i]
    s = 0.0
    for i in prange(w.shape[0]):
        s += w[i] * w[i]
    return t * s


def picked_loop(w, x, y, flag):
    """The array chosen at run time is the prange loop's."""
    a = x if flag else y
    t = 0.0
    for i in prange(a.shape[0]):
        t += w[i % w.shape[0]] * a[i] * a[i]
    return t


def _picked_gradients(f, args, flag):
    w, x, y = (a.copy() for a in args)
    dw, dx = np.zeros_like(w), np.zeros_like(x)
    with pyzyme.options(runtime_activity=True):
        autodiff(Reverse, f, Active, Duplicated(w, dw), Duplicated(x, dx), Const(y),
                 Const(flag))
    return dw, dx


def test_under_runtime_activity_the_sides_of_a_launch_are_not_told_apart():
    """Where runtime activity decides some shadows, the arrays and the shadows a launch hands
    its body share no claim (a shadow may be its primal), and the gradient stays the serial
    one's."""
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(5), rng.standard_normal(4), rng.standard_normal(4)]
    par, ser = numba.njit(parallel=True)(picked), numba.njit(picked)
    with pyzyme.options(runtime_activity=True):
        text = pyzyme.code_llvm(Reverse, par, Active, *[Duplicated(a, np.zeros_like(a))
                                                        for a in args[:2]],
                                Const(args[2]), Const(False))
    assert _sides(text) == {}
    for flag in (True, False):
        for got, want in zip(_picked_gradients(par, args, flag),
                             _picked_gradients(ser, args, flag)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_a_prange_loop_over_an_array_of_runtime_activity_is_refused(mode):
    """Its shadow is the caller's ``Const`` array itself where the choice falls on it: the
    body added adjoints into that array (reverse) and read its values as tangents (forward,
    3.56 for 1.41), where serial code tests each access. Refused, naming prange and the
    loop's line; the caller's arrays are left as they were."""
    rng = np.random.default_rng(3)
    w, x, y = rng.random(3), rng.random(7), rng.random(7)
    keep = y.copy()
    par = numba.njit(parallel=True)(picked_loop)
    line = picked_loop.__code__.co_firstlineno + 4  # the prange loop's
    with pyzyme.options(runtime_activity=True), \
            pytest.raises(pyzyme.UnsupportedError, match="prange") as err:
        if mode == "forward":
            autodiff(Forward, par, Duplicated(w, np.ones(3)), Duplicated(x, np.zeros(7)),
                     Const(y), Const(False))
        else:
            autodiff(Reverse, par, Active, Duplicated(w, np.zeros(3)),
                     Duplicated(x, np.zeros(7)), Const(y), Const(False))
    assert "known only at run time" in str(err.value)
    assert f"test_body_memory.py:{line}" in str(err.value)
    np.testing.assert_array_equal(y, keep)
