"""Loop distribution of reverse sweeps (pyzyme.transforms.distribute): plans tested by their printed
form on hand-written loops, rewritten loops run against the original (overlapping arrays
included), and stencil gradients through Numba bitwise equal to undistributed ones."""

import ctypes

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import Active, Const, Duplicated, Reverse
from pyzyme.transforms import distribute
from pyzyme.ir import parse_module
from pyzyme.ir.verify import verify
from pyzyme.naming import symbol_name
from pyzyme.runtime import compile_module
from tests.kernels import on_and_off

# The shape of a reverse sweep's stencil loop: read and zero dw[c], add it into dv[c+1],
# dv[c-1] and dv[c] (in the order the reverse sweep writes them), count down to %end.
STENCIL = """
define void @stencil(ptr %dv, ptr %dw, i64 %n, i64 %end) {
entry:
  %count = alloca i64
  %t.slot = alloca double
  store double 0.0, ptr %t.slot
  store i64 %n, ptr %count
  br label %loop
loop:
  %c = load i64, ptr %count
  %pw = getelementptr double, ptr %dw, i64 %c
  %t = load double, ptr %pw
  store double 0.0, ptr %pw
  %t0 = load double, ptr %t.slot
  %t1 = fadd double %t0, %t
  store double %t1, ptr %t.slot
  %tt = load double, ptr %t.slot
  store double 0.0, ptr %t.slot
  %pv = getelementptr double, ptr %dv, i64 %c
  %hi = getelementptr i8, ptr %pv, i64 8
  %a = load double, ptr %hi
  %a1 = fadd double %a, %tt
  store double %a1, ptr %hi
  %lo = getelementptr i8, ptr %pv, i64 -8
  %b = load double, ptr %lo
  %half = fmul double %tt, 0.5
  %b1 = fadd double %b, %half
  store double %b1, ptr %lo
  %m = load double, ptr %pv
  %third = fmul double %tt, 3.0
  %m1 = fadd double %m, %third
  store double %m1, ptr %pv
  %next = sub i64 %c, 1
  store i64 %next, ptr %count
  %done = icmp eq i64 %next, %end
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""


def _loop(text, name="loop"):
    m = parse_module(text)
    fn = next(f for f in m.functions if not f.is_declaration)
    block = next(b for b in fn.blocks if b.name == name)
    counter = next(i for i in fn.entry.instructions if i.name == "count")
    return m, fn, block, counter


def test_stencil_plan_orders_accumulations_by_offset():
    _, _, block, counter = _loop(STENCIL)
    # Counting down, dv[c-1] is reached first by the lowest offset: -8, then 0, then +8; the
    # zeroing of dw[c] must follow every statement that reads dw[c] first.
    assert str(distribute.plan(block, counter)) == """\
loop %loop: 4 statements, counter %count from its value at entry down to %end + 1
  load  %pw  [%dw + 8*count]  for 1, 2, 3
  store %pw  [%dw + 8*count]  statement 0
  load  %hi  [%dv + 8*count + 8]  for 1
  store %hi  [%dv + 8*count + 8]  statement 1
  load  %lo  [%dv + 8*count - 8]  for 2
  store %lo  [%dv + 8*count - 8]  statement 2
  load  %pv  [%dv + 8*count]  for 3
  store %pv  [%dv + 8*count]  statement 3
  partitions: {2} +0, {3} +1, {1} +2, {0} +0 (one loop, shifted)
  checks: %dw against %dv"""


def test_counting_up_reverses_the_order():
    text = STENCIL.replace("%pv = getelementptr double, ptr %dv, i64 %c",
                           "%neg = sub i64 0, %c\n  %pv = getelementptr double, ptr %dv, i64 %neg")
    _, _, block, counter = _loop(text)
    p = distribute.plan(block, counter)
    # dv is indexed by -count, which goes up: +8 reaches a cell first, -8 last.
    assert "[%dv - 8*count + 8]" in str(p)
    assert (p.partitions, p.shifts) == ([[1], [3], [2], [0]], [0, 1, 2, 0])


# Neighbours six cells away: fusing would peel 12 iterations at each end, so the statements
# get a loop each instead.
WIDE = STENCIL.replace("i64 8\n", "i64 48\n").replace("i64 -8\n", "i64 -48\n")


# Numba's wrap-around of negative indices: dv[c < 0 ? c + n : c]. The plan assumes the
# comparison false throughout (the check tests it at both ends); WRAP10's is true near the end.
WRAP = STENCIL.replace(
    "%pv = getelementptr double, ptr %dv, i64 %c",
    "%neg = icmp slt i64 %c, 0\n  %wrap = select i1 %neg, i64 %n, i64 0\n"
    "  %cw = add i64 %c, %wrap\n  %pv = getelementptr double, ptr %dv, i64 %cw")
WRAP10 = WRAP.replace("icmp slt i64 %c, 0", "icmp slt i64 %c, 10")


def test_wrap_around_is_assumed_away_and_checked():
    _, _, block, counter = _loop(WRAP)
    text = str(distribute.plan(block, counter))
    assert "  store %lo  [%dv + 8*count - 8]  statement 2" in text
    assert text.splitlines()[-1] == "  assumes: %neg false"


def test_far_neighbours_get_one_loop_each():
    _, _, block, counter = _loop(WIDE)
    p = distribute.plan(block, counter)
    assert str(p).splitlines()[-2:] == ["  partitions: {2}, {3}, {1, 0} (one loop each)",
                                        "  checks: %dw against %dv"]


REFUSALS = {
    "call": "the loop calls g",
    "not affine": "the address %hi is not affine in the counter",
    "moving end": "the counter's end changes in the loop",
}


def test_refusal_texts():
    base = STENCIL
    cases = {
        "call": ("declare double @g(double)\n" + base).replace(
            "%third = fmul double %tt, 3.0", "%third = call double @g(double %tt)"),
        "not affine": base.replace(
            "%pv = getelementptr double, ptr %dv, i64 %c",
            "%cc = mul i64 %c, %c\n  %pv = getelementptr double, ptr %dv, i64 %cc"),
        "moving end": base.replace(
            "%done = icmp eq i64 %next, %end",
            "%a.int = fptosi double %a1 to i64\n  %done = icmp eq i64 %next, %a.int"),
    }
    for key, text in cases.items():
        _, _, block, counter = _loop(text)
        assert str(distribute.plan(block, counter)) == \
            f"loop %loop: left as it is ({REFUSALS[key]})", key


def test_dependences_both_ways_share_a_loop():
    # Statement 2 now reads dv[c+1]: statement 1 writes it in the same iteration (1 before 2),
    # statement 2 writes dv[c-1], which statement 1 reads two iterations later (2 before 1).
    # The cycle (and statement 3 between them) makes one partition: the loop stays.
    text = STENCIL.replace("%b = load double, ptr %lo", "%b = load double, ptr %hi")
    _, _, block, counter = _loop(text)
    p = distribute.plan(block, counter)
    assert p.partitions == [[1, 2, 3, 0]]
    assert not distribute.distribute(p)


def _run(fn_text, n, dv, dw, distribute_it):
    m, fn, block, counter = _loop(fn_text)
    if distribute_it:
        assert distribute.distribute(distribute.plan(block, counter))
    verify(m)
    # Named after the IR: the same text compiles once (compile_module's cache), and ids of
    # collected modules come back, which once named a second, different module the same.
    symbol = symbol_name("stencil", str(m))
    cm = compile_module(str(m).replace("@stencil", f"@{symbol}"))
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        cm.address(symbol))
    f(dv.ctypes.data, dw.ctypes.data, n, 1)


@pytest.mark.parametrize("n", [37, 5, 4, 3, 2])
@pytest.mark.parametrize("layout", ["apart", "same array", "overlapping by one"])
@pytest.mark.parametrize("source", [STENCIL, WIDE, WRAP, WRAP10],
                         ids=["fused", "distributed", "wrap", "wrap taken"])
def test_rewritten_loop_runs_like_the_original(source, layout, n):
    # n - 1 iterations: from 3 on the fused loop has a steady part; fewer run the original.
    rng = np.random.default_rng(3)
    start = rng.standard_normal(2 * n + 20)
    results = []
    for distribute_it in (False, True):
        buf = start.copy()
        if layout == "apart":
            dv, dw = buf[6: n + 8], buf[n + 14:]
        elif layout == "same array":
            dv = dw = buf[6: n + 8]
        else:
            dv, dw = buf[6: n + 8], buf[7: n + 9]
        _run(source, n, dv, dw, distribute_it)
        results.append(buf)
    np.testing.assert_array_equal(results[0], results[1])


def test_rewritten_ir():
    m, fn, block, counter = _loop(STENCIL)
    assert distribute.distribute(distribute.plan(block, counter))
    verify(m)
    assert [b.name for b in fn.blocks] == [
        "entry", "loop.distribute", "loop.fused.first", "loop.fused.loop", "loop.fused.last",
        "loop", "exit"]
    fused = next(b for b in fn.blocks if b.name == "loop.fused.loop")
    # Each partition's store once, at its own iteration (count, count - 1, count - 2, count):
    # the first three update one cell, through one address LLVM can see is one.
    stores = [i.operands[1] for i in fused.instructions if i.opcode == "store"]
    cells = [p for p in stores if not p.name.startswith(("t.slot", "count"))]
    assert [p.name.split(".")[0] for p in cells] == ["lo", "lo", "lo", "pw"]
    assert cells[0] is cells[1] is cells[2]
    # Each copy computes what its statement needs: the two scalings once each (every copy
    # of the whole body made 8, which LLVM then deleted).
    assert [i.opcode for i in fused.instructions].count("fmul") == 2
    m, fn, block, counter = _loop(WIDE)
    assert distribute.distribute(distribute.plan(block, counter))
    verify(m)
    assert [b.name for b in fn.blocks] == [
        "entry", "loop.distribute", "loop.part0", "loop.reset1", "loop.part1", "loop.reset2",
        "loop.part2", "loop", "exit"]
    part0 = next(b for b in fn.blocks if b.name == "loop.part0")
    # Its own statement (dv[c-6]), the per-iteration slot and the counter; no other memory.
    assert [i.operands[1].name for i in part0.instructions if i.opcode == "store"] == \
        ["t.slot", "t.slot", "lo.1", "count"]


# ------------------------------------------------------------------------ through Numba

@numba.njit
def diffusion(u, c, steps):
    """Explicit diffusion between fixed ends, then a weighted energy (the benchmarks' K5
    with its update written as a weighted sum of neighbours)."""
    n = u.shape[0]
    v = u.copy()
    w = np.empty_like(u)
    w[0], w[n - 1] = v[0], v[n - 1]
    for _ in range(steps):
        for i in range(1, n - 1):
            w[i] = (1.0 - 2.0 * c) * v[i] + c * (v[i + 1] + v[i - 1])
        v, w = w, v
    s = 0.0
    for i in range(n):
        s += (1.0 + 0.01 * i) * v[i] * v[i]
    return s


@numba.njit
def five_point(out, x, y):
    for i in range(2, x.shape[0] - 2):
        out[i] = x[i - 2] * y[i + 2] + np.sin(x[i + 1]) - x[i - 1] * x[i] + y[i - 2]


@numba.njit
def descending(out, x):
    for i in range(x.shape[0] - 2, 0, -1):
        out[i] = x[i - 1] - 3.0 * x[i + 1] + x[i] * x[i]


def _both_ways(call):
    return on_and_off(call, "distribute_loops")


def test_diffusion_gradient_is_bitwise_the_undistributed_one():
    rng = np.random.default_rng(0)
    u = rng.random(64)

    def grad():
        du = np.zeros_like(u)
        pyzyme.autodiff(Reverse, diffusion, Active, Duplicated(u, du), Const(0.2), Const(30))
        return du
    on, off = _both_ways(grad)
    np.testing.assert_array_equal(on, off)
    h = 1e-6
    e = np.zeros_like(u)
    e[5] = h
    fd = (diffusion(u + e, 0.2, 30) - diffusion(u - e, 0.2, 30)) / (2 * h)
    assert abs(on[5] - fd) < 1e-6 * max(1.0, abs(fd))
    text = pyzyme.code_llvm(Reverse, diffusion, Active, Duplicated(u, np.zeros_like(u)),
                            Const(0.2), Const(30))
    assert ".fused.loop" in text and ".distribute" in text


def test_diffusion_active_coefficient():
    # The adjoint of c sums over every cell: a slot carried across iterations, kept in the
    # one loop that owns it.
    rng = np.random.default_rng(1)
    u = rng.random(40)

    def grad():
        du = np.zeros_like(u)
        (_, dc, _), = pyzyme.autodiff(Reverse, diffusion, Active, Duplicated(u, du),
                                      Active(0.15), Const(12))
        return du, dc
    (du_on, dc_on), (du_off, dc_off) = _both_ways(grad)
    np.testing.assert_array_equal(du_on, du_off)
    assert dc_on == pytest.approx(dc_off, rel=1e-13)
    h = 1e-6
    fd = (diffusion(u, 0.15 + h, 12) - diffusion(u, 0.15 - h, 12)) / (2 * h)
    assert dc_on == pytest.approx(fd, rel=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nonlinear_stencils_match_forward_mode(dtype):
    rng = np.random.default_rng(2)
    x = rng.random(50).astype(dtype)
    y = rng.random(50).astype(dtype)
    seed = rng.random(50).astype(dtype)

    def grad():
        dx, dy = np.zeros_like(x), np.zeros_like(y)
        out, dout = np.zeros_like(x), seed.copy()
        pyzyme.autodiff(Reverse, five_point, Const, Duplicated(out, dout), Duplicated(x, dx),
                        Duplicated(y, dy))
        return dx, dy
    (dx, dy), (dx_off, dy_off) = _both_ways(grad)
    np.testing.assert_array_equal(dx, dx_off)
    np.testing.assert_array_equal(dy, dy_off)
    # <seed, J v> == <J^T seed, v> for a random direction, J^T seed from reverse mode.
    vx, vy = rng.random(50).astype(dtype), rng.random(50).astype(dtype)
    out, dout = np.zeros_like(x), np.zeros_like(x)
    pyzyme.autodiff(pyzyme.Forward, five_point, Const, Duplicated(out, dout),
                    Duplicated(x, vx), Duplicated(y, vy))
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert float(seed @ dout) == pytest.approx(float(dx @ vx + dy @ vy), rel=tol)


def test_descending_loop_and_aliased_arrays():
    rng = np.random.default_rng(4)
    x = rng.random(30)
    seed = rng.random(30)

    def apart():
        dx = np.zeros_like(x)
        pyzyme.autodiff(Reverse, descending, Const, Duplicated(np.zeros_like(x), seed.copy()),
                        Duplicated(x, dx))
        return dx

    def same():   # out is x itself: the shadows overlap, the check picks the original loop
        z, dz = x.copy(), seed.copy()
        pyzyme.autodiff(Reverse, descending, Const, Duplicated(z, dz), Duplicated(z, dz))
        return dz
    for call in (apart, same):
        on, off = _both_ways(call)
        np.testing.assert_array_equal(on, off)
    text = pyzyme.code_llvm(Reverse, descending, Const, Duplicated(x, seed), Duplicated(x, seed))
    assert ".fused.loop" in text


@numba.njit
def diffusion_energy(u):
    return diffusion(u, 0.2, 9) + 0.1 * np.sum(np.sin(u))


def test_hessian_vector_product_through_the_fused_loop():
    # Forward mode over the reverse sweep, whose stencil loop is fused: against central
    # differences of the gradient.
    rng = np.random.default_rng(6)
    u, v = rng.random(30), rng.standard_normal(30)
    hv = pyzyme.hvp(diffusion_energy, u, v)
    h = 1e-5

    def grad(x):
        return pyzyme.gradient(Reverse, diffusion_energy, x)
    fd = (grad(u + h * v) - grad(u - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)
    assert ".fused.loop" in pyzyme.code_llvm(Reverse, diffusion_energy, Active,
                                             Duplicated(u, np.zeros_like(u)))
