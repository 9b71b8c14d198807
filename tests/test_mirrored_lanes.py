"""Vector loops walking memory downwards, rewritten with their lanes in memory order
(pyzyme.runtime.mirrored_lanes): fewer permutations, the same values.

Each hand-written loop below is what LLVM's vectorizer makes of a loop counting down: loads
reversed into iteration order, a recurrence spliced across vectors, stores reversed back. The
values are checked against the same computation done lane by lane in Python floats, in the
loop's own order of operations (no fast-math flag lets LLVM reorder them, so they are exact),
compiled as written (level 0) and through Numba's pipeline (level 3).
"""

from __future__ import annotations

import ctypes
import re

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

import pyzyme
from pyzyme.ir import instructions as I
from pyzyme.ir import parse_module
from pyzyme.runtime import compile_module
from pyzyme.runtime.mirrored_lanes import mirror_loops, reverses_lanes

REVERSED = "<4 x i32> <i32 3, i32 2, i32 1, i32 0>"

WALK = """
declare double @llvm.vector.reduce.fadd.v4f64(double, <4 x double>)

define void @NAME(ptr %x, ptr %y, ptr %out, i64 %n, double %p0) {
entry:
  %init = insertelement <4 x double> poison, double %p0, i64 3
  br label %loop
loop:
  %i = phi i64 [ %n, %entry ], [ %j, %loop ]
  %acc = phi <4 x double> [ zeroinitializer, %entry ], [ %acc2, %loop ]
  %rec = phi <4 x double> [ %init, %entry ], [ %r, %loop ]
  %j = sub i64 %i, 4
  %px = getelementptr double, ptr %x, i64 %j
  %v = load <4 x double>, ptr %px, align 8
  %r = shufflevector <4 x double> %v, <4 x double> poison, REVERSED
  %prev = shufflevector <4 x double> %rec, <4 x double> %r, <4 x i32> <i32 3, i32 4, i32 5, i32 6>
  %d = fsub <4 x double> %r, %prev
  %m = fmul <4 x double> %d, %d
  %acc2 = fadd <4 x double> %acc, %m
  %py = getelementptr double, ptr %y, i64 %j
  %s = shufflevector <4 x double> %d, <4 x double> poison, REVERSED
  store <4 x double> %s, ptr %py, align 8
  %c = icmp eq i64 %j, 0
  br i1 %c, label %exit, label %loop
exit:
  %red = call double @llvm.vector.reduce.fadd.v4f64(double 0.0, <4 x double> %acc2)
  store double %red, ptr %out
  %last = extractelement <4 x double> %r, i64 3
  %po = getelementptr double, ptr %out, i64 1
  store double %last, ptr %po
  ret void
}
"""


def _walk(name: str, *, load: str | None = None) -> str:
    text = WALK.replace("NAME", name).replace("REVERSED", REVERSED)
    if load is not None:
        text = text.replace("load <4 x double>, ptr %px, align 8", load)
        text = "declare <4 x double> @llvm.masked.load.v4f64.p0(ptr, i32, <4 x i1>, " \
               "<4 x double>)\n" + text
    return text


def _walk_expected(x: np.ndarray, p0: float):
    """The loop's values, scalar by scalar in its order: element ``k`` counts down from
    ``n - 1``, each minus the one before it (``p0`` first); lane ``l`` of a vector at ``j``
    holds element ``j + 3 - l``, and the sum runs over each lane's squares, then the lanes."""
    n = len(x)
    y = np.empty(n)
    prev = p0
    for k in range(n - 1, -1, -1):
        y[k] = x[k] - prev
        prev = x[k]
    acc = [0.0] * 4
    for j in range(n - 4, -1, -4):
        for lane in range(4):
            d = y[j + 3 - lane]
            acc[lane] = acc[lane] + d * d
    red = 0.0
    for lane in range(4):
        red = red + acc[lane]
    return y, red, x[0]


def _loop_shuffles(module) -> list[str]:
    """The shuffles inside the one-block loops of a pyzyme.ir module."""
    return [str(inst) for fn in module.functions for block in fn.blocks
            if block in block.successors
            for inst in block.instructions if isinstance(inst, I.ShuffleVector)]


def test_a_descending_loop_keeps_only_its_splice():
    m = parse_module(_walk("walk_ir"))
    assert len(_loop_shuffles(m)) == 3
    assert mirror_loops(m) == 1
    shuffles = _loop_shuffles(m)
    assert len(shuffles) == 1 and "<i32 5, i32 6, i32 7, i32 0>" in shuffles[0], shuffles
    llvm.parse_assembly(str(m)).verify()


@pytest.mark.parametrize("opt", [0, 3])
def test_a_mirrored_loop_computes_the_same_values(opt):
    name = f"walk_values_{opt}"
    compiled = compile_module(_walk(name), opt=opt)
    assert not any(reverses_lanes(s) for s in _loop_shuffles(parse_module(compiled.optimized_ir)))
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_int64, ctypes.c_double)(compiled.address(name))
    rng = np.random.default_rng(opt)
    for n in (4, 8, 64):
        x = rng.standard_normal(n)
        y, out = np.zeros(n), np.zeros(2)
        fn(x.ctypes.data, y.ctypes.data, out.ctypes.data, n, 0.375)
        want_y, want_red, want_last = _walk_expected(x, 0.375)
        np.testing.assert_array_equal(y, want_y)
        assert out[0] == want_red and out[1] == want_last


def test_a_loop_with_a_vector_operation_it_does_not_know_is_left_alone():
    masked = ("call <4 x double> @llvm.masked.load.v4f64.p0(ptr %px, i32 8, "
              "<4 x i1> splat (i1 true), <4 x double> poison)")
    m = parse_module(_walk("walk_masked", load=masked))
    before = str(m)
    assert mirror_loops(m) == 0
    assert str(m) == before


ORDERED = """
declare double @llvm.vector.reduce.fadd.v4f64(double, <4 x double>)

define double @NAME(ptr %x, ptr %y, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %n, %entry ], [ %j, %loop ]
  %sum = phi double [ 0.0, %entry ], [ %sum2, %loop ]
  %j = sub i64 %i, 4
  %px = getelementptr double, ptr %x, i64 %j
  %v = load <4 x double>, ptr %px, align 8
  %r = shufflevector <4 x double> %v, <4 x double> poison, REVERSED
  %sum2 = call double @llvm.vector.reduce.fadd.v4f64(double %sum, <4 x double> %r)
  %d = fmul <4 x double> %r, splat (double 3.0)
  %s = shufflevector <4 x double> %d, <4 x double> poison, REVERSED
  %py = getelementptr double, ptr %y, i64 %j
  store <4 x double> %s, ptr %py, align 8
  %c = icmp eq i64 %j, 0
  br i1 %c, label %exit, label %loop
exit:
  ret double %sum2
}
"""


@pytest.mark.parametrize("opt", [0, 3])
def test_an_ordered_sum_keeps_its_order(opt):
    """A sum without ``reassoc`` adds the lanes in iteration order: mirrored, it is given them
    reversed back (one permutation where the loop had two)."""
    name = f"ordered_{opt}"
    text = ORDERED.replace("NAME", name).replace("REVERSED", REVERSED)
    m = parse_module(text)
    assert mirror_loops(m) == 1 and len(_loop_shuffles(m)) == 1
    compiled = compile_module(text, opt=opt)
    fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_int64)(compiled.address(name))
    x = np.random.default_rng(5).standard_normal(32) * 10.0 ** np.arange(-16, 16)
    y = np.zeros(32)
    total = fn(x.ctypes.data, y.ctypes.data, 32)
    want = 0.0
    for k in range(31, -1, -1):
        want = want + x[k]
    assert total == want
    np.testing.assert_array_equal(y, x * 3.0)


@numba.njit
def _weighted_root_sum(a, b):
    # sqrt, one instruction, is computed again in the reverse loop (a library call such as
    # exp would be kept on the tape, and a loop of elementwise arithmetic alone loses its
    # reversed lanes to LLVM's own folding with mirror_lanes off too).
    s = 0.0
    for i in range(a.shape[0]):
        s += np.sqrt(a[i] * a[i] + 1.0) * b[i] + a[i] * a[i]
    return s


def test_a_reverse_sweep_runs_its_vector_loops_in_memory_order():
    """The reverse of an elementwise sum runs its loop downwards; vectorized, its loops
    permute no lanes, and the gradient is the closed form's."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(1003), rng.standard_normal(1003)
    da, db = np.zeros_like(a), np.zeros_like(b)
    pyzyme.autodiff(pyzyme.Reverse, _weighted_root_sum, pyzyme.Active,
                    pyzyme.Duplicated(a, da), pyzyme.Duplicated(b, db))
    np.testing.assert_allclose(da, a / np.sqrt(a * a + 1) * b + 2 * a, rtol=1e-14)
    np.testing.assert_allclose(db, np.sqrt(a * a + 1), rtol=1e-14)
    text = pyzyme.code_llvm(pyzyme.Reverse, _weighted_root_sum, pyzyme.Active,
                            pyzyme.Duplicated(a, da), pyzyme.Duplicated(b, db), optimized=True)
    module = parse_module(text)
    loops = [block for fn in module.functions for block in fn.blocks
             if block in block.successors
             and any(re.search(r"<\d+ x double>", str(i)) for i in block.instructions)]
    assert loops, "the reverse loop was not vectorized"
    assert not any(reverses_lanes(s) for s in _loop_shuffles(module))


def test_mirror_lanes_off_keeps_the_vectorizers_lane_order():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(517), rng.standard_normal(517)
    args = (pyzyme.Active, pyzyme.Duplicated(a, np.zeros_like(a)),
            pyzyme.Duplicated(b, np.zeros_like(b)))
    with pyzyme.options(mirror_lanes=False):
        text = pyzyme.code_llvm(pyzyme.Reverse, _weighted_root_sum, *args, optimized=True)
        pyzyme.autodiff(pyzyme.Reverse, _weighted_root_sum, *args)
    assert any(reverses_lanes(s) for s in _loop_shuffles(parse_module(text)))
    np.testing.assert_allclose(args[1].dval, a / np.sqrt(a * a + 1) * b + 2 * a, rtol=1e-14)


CROSSED = """
define void @NAME(ptr %x, ptr %y, ptr %z, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %n, %entry ], [ %j, %loop ]
  %j = sub i64 %i, 4
  %px = getelementptr double, ptr %x, i64 %j
  %vx = load <4 x double>, ptr %px, align 8
  %r = shufflevector <4 x double> %vx, <4 x double> poison, REVERSED
  %py = getelementptr double, ptr %y, i64 %j
  %vy = load <4 x double>, ptr %py, align 8
  %s = fmul <4 x double> %r, %vy
  %t = shufflevector <4 x double> %s, <4 x double> poison, REVERSED
  %pz = getelementptr double, ptr %z, i64 %j
  store <4 x double> %t, ptr %pz, align 8
  %c = icmp eq i64 %j, 0
  br i1 %c, label %exit, label %loop
exit:
  ret void
}
"""


@pytest.mark.parametrize("opt", [0, 3])
def test_a_load_that_meets_reversed_lanes_is_reversed_itself(opt):
    """``x`` reversed times ``y`` as loaded, stored reversed back: mirrored, the product and
    the store need no permutation and ``y`` needs one (two before)."""
    name = f"crossed_{opt}"
    text = CROSSED.replace("NAME", name).replace("REVERSED", REVERSED)
    m = parse_module(text)
    assert mirror_loops(m) == 1
    shuffles = _loop_shuffles(m)
    assert len(shuffles) == 1 and "%vy" in shuffles[0], shuffles
    compiled = compile_module(text, opt=opt)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_int64)(compiled.address(name))
    rng = np.random.default_rng(6)
    x, y, z = rng.standard_normal(16), rng.standard_normal(16), np.zeros(16)
    fn(x.ctypes.data, y.ctypes.data, z.ctypes.data, 16)
    want = np.concatenate([x[j:j + 4] * y[j:j + 4][::-1] for j in range(0, 16, 4)])
    np.testing.assert_array_equal(z, want)


def _random_loop(name: str, rng) -> str:
    """A loop counting down four lanes at a time over three inputs and two outputs: loads
    reversed or not, arithmetic, comparisons and selects, reversals, a recurrence spliced
    across vectors, a lane moved from one vector to another, stores of values reversed or not,
    and values used after the loop."""
    v4 = "<4 x double>"
    body, pool, count = [], [], [0]

    def fresh():
        count[0] += 1
        return f"%v{count[0]}"

    def emit(text):
        out = fresh()
        body.append(f"  {out} = {text}")
        pool.append(out)
        return out

    for k in range(3):
        body.append(f"  %p{k} = getelementptr double, ptr %x{k}, i64 %j")
        loaded = emit(f"load {v4}, ptr %p{k}, align 8")
        if rng.random() < 0.7:
            emit(f"shufflevector {v4} {loaded}, {v4} poison, {REVERSED}")
    for _ in range(int(rng.integers(4, 10))):
        a, b = rng.choice(pool, 2)
        pick = rng.random()
        if pick < 0.45:
            op = rng.choice(["fadd", "fsub", "fmul"])
            emit(f"{op} {v4} {a}, {b}")
        elif pick < 0.6:
            emit(f"fmul {v4} {a}, <double 1.0, double 2.0, double 3.0, double 4.0>")
        elif pick < 0.75:
            emit(f"shufflevector {v4} {a}, {v4} poison, {REVERSED}")
        elif pick < 0.83:
            emit(f"shufflevector {v4} %rec, {v4} {a}, <4 x i32> <i32 3, i32 4, i32 5, i32 6>")
        elif pick < 0.92:
            lane = fresh()
            body.append(f"  {lane} = extractelement {v4} {a}, i64 {rng.integers(4)}")
            emit(f"insertelement {v4} {b}, double {lane}, i64 {rng.integers(4)}")
        else:
            c = fresh()
            body.append(f"  {c} = fcmp olt {v4} {a}, {b}")
            emit(f"select <4 x i1> {c}, {v4} {a}, {v4} {b}")
    sums = []                   # each lane of every value reaches memory, as a scalar sum
    for value in list(pool):
        for lane in range(4):
            element = fresh()
            body.append(f"  {element} = extractelement {v4} {value}, i64 {lane}")
            sums.append(element)
    total = "0.0"
    for element in sums:
        out = fresh()
        body.append(f"  {out} = fadd double {total}, {element}")
        total = out
    body.append("  %t = getelementptr double, ptr %z2, i64 %j")
    body.append(f"  store double {total}, ptr %t")
    for k in range(2):
        value = rng.choice(pool)
        if rng.random() < 0.6:
            value = emit(f"shufflevector {v4} {value}, {v4} poison, {REVERSED}")
        body.append(f"  %q{k} = getelementptr double, ptr %z{k}, i64 %j")
        body.append(f"  store {v4} {value}, ptr %q{k}, align 8")
    carried, after = rng.choice(pool), rng.choice(pool)
    return f"""
define void @{name}(ptr %x0, ptr %x1, ptr %x2, ptr %z0, ptr %z1, ptr %z2, ptr %out, i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ %n, %entry ], [ %j, %loop ]
  %rec = phi {v4} [ <double 0.5, double 1.5, double 2.5, double 3.5>, %entry ], [ {carried}, %loop ]
  %j = sub i64 %i, 4
{chr(10).join(body)}
  %c = icmp eq i64 %j, 0
  br i1 %c, label %exit, label %loop
exit:
  %e0 = extractelement {v4} {carried}, i64 0
  %e3 = extractelement {v4} {after}, i64 3
  %s = fadd double %e0, %e3
  store double %s, ptr %out
  %o1 = getelementptr double, ptr %out, i64 1
  store {v4} {after}, ptr %o1, align 8
  ret void
}}
"""


@pytest.mark.parametrize("seed", range(12))
def test_random_loops_compute_the_same_mirrored_or_not(seed):
    """Random loops compiled with and without the rewrite store the same bits (each lane's
    arithmetic is the same IEEE operations in both, and no flag lets LLVM reorder them)."""
    rng = np.random.default_rng(seed)
    rewritten = 0
    for k in range(6):
        opt = (0, 3)[k % 2]
        text = _random_loop("NAME", rng)
        rewritten += mirror_loops(parse_module(text))
        runs = []
        for mirror in (False, True):
            name = f"random_{seed}_{k}_{int(mirror)}"
            compiled = compile_module(text.replace("NAME", name), opt=opt, mirror_lanes=mirror)
            fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 7, ctypes.c_int64)(
                compiled.address(name))
            data = np.random.default_rng(seed * 100 + k).standard_normal((3, 24))
            z, out = np.zeros((3, 24)), np.zeros(5)
            fn(*(row.ctypes.data for row in data), *(row.ctypes.data for row in z),
               out.ctypes.data, 24)
            runs.append((z, out))
        np.testing.assert_array_equal(runs[0][0], runs[1][0])
        np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert rewritten > 0
