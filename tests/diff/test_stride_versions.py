"""Row strides versioned before differentiation (pyzyme.transforms.stride_versions): which
strides hand-written functions are versioned on and which not, the versioned IR through LLVM's
verifier and run against the original (bitwise, on strides that take either version), and
gradients through Numba, serial and parallel, against finite differences, the same functions
on arrays whose rows the constant version does not fit, and bitwise against the function
left in one version."""

import ctypes

import numba
import numpy as np
import pytest
from numba import prange

import pyzyme
from pyzyme import Active, Const, Duplicated, Forward, Reverse
from pyzyme import naming
from pyzyme.ir import parse_module
from pyzyme.naming import symbol_name
from pyzyme.runtime import compile_module
from pyzyme.runtime.modules import parse
from pyzyme.transforms import stride_versions
from pyzyme.transforms.stride_versions import find_strides, version_strides
from tests.kernels import central_gradient, on_and_off
from tests.known_bugs import numba_compiles

# out[j, c] += x[j, c] * w for the columns c, over rows of {stride} elements (out's rows: {orow}).
ROWS = """
define void @rows(ptr noalias %x, ptr noalias %out, i64 %n, i64 %s, i64 %t, ptr %d, double %w) {{
entry:
  {entry}
  br label %loop
loop:
  %j = phi i64 [ 0, %entry ], [ %j1, %loop ]
  {inside}
  %row = mul nsw i64 %j, {stride}
  %px = getelementptr double, ptr %x, i64 %row
  {outrow}
  %po = getelementptr double, ptr %out, i64 {orow}
{columns}
  %j1 = add nuw nsw i64 %j, 1
  %done = icmp eq i64 %j1, %n
  br i1 %done, label %exit, label %loop
exit:
  %last = phi i64 [ %j1, %loop ]
  ret void
}}
"""

COLUMN = """\
  %px{c} = getelementptr i8, ptr %px, i64 {bytes}
  %a{c} = load double, ptr %px{c}
  %po{c} = getelementptr i8, ptr %po, i64 {bytes}
  %b{c} = load double, ptr %po{c}
  %m{c} = fmul double %a{c}, %w
  %r{c} = fadd double %b{c}, %m{c}
  store double %r{c}, ptr %po{c}"""


def _rows(stride="%s", columns=(0, 1, 2), entry="", inside="", two=False):
    """The function, ``two``: out's rows ``%t`` apart, x's ``%s``."""
    text = ROWS.format(stride=stride, entry=entry, inside=inside, columns="\n".join(
        COLUMN.format(c=c, bytes=8 * c) for c in columns),
        outrow="%rowt = mul i64 %j, %t" if two else "", orow="%rowt" if two else "%row")
    module = parse_module(text)
    return module, module.get_function("rows")


def test_rows_read_column_by_column_are_versioned():
    module, fn = _rows()
    assert list(map(str, find_strides(fn))) == ["stride %s: rows of 3 read one by one "
                                                "(9 accesses)"]
    assert version_strides(fn) == 1
    parse(str(module))      # LLVM's verifier
    names = [blk.name for blk in fn.blocks]
    assert names == ["entry", "entry.rest", "loop", "exit",
                     "entry.rest.stride3", "loop.stride3", "exit.stride3"]
    assert f"  %{naming.stride_test([3])} = icmp eq i64 %s, 3\n" in str(fn)
    loop = fn.blocks[2]
    # the original keeps the stride, the copy multiplies by 3; the phis come from the halves
    assert [i for i in loop.instructions if i.opcode == "mul"][0].operands[1] is fn.args[3]
    copy = fn.blocks[5]
    assert [i for i in copy.instructions if i.opcode == "mul"][0].operands[1].value == 3
    assert loop.phis[0].blocks[0] is fn.blocks[1]
    assert copy.phis[0].blocks[0] is fn.blocks[4]
    assert version_strides(fn) == 0      # versioned already


@pytest.mark.parametrize("changes", [
    dict(stride="3"),                              # a constant already
    dict(columns=(0, 9)),                          # ten columns: a loop of its own
    dict(columns=(2,)),                            # one column only
    dict(stride="%u", inside="%u = load i64, ptr %d"),   # not known before the loop
], ids=["constant", "wide", "one-column", "not-dominating"])
def test_no_version(changes):
    module, fn = _rows(**changes)
    before = str(module)
    assert find_strides(fn) == []
    assert version_strides(fn) == 0
    assert str(module) == before


def test_outside_any_loop_no_version():
    module = parse_module("""
define double @f(ptr %x, i64 %s, i64 %i) {
entry:
  %row = mul i64 %i, %s
  %p = getelementptr double, ptr %x, i64 %row
  %a = load double, ptr %p
  %p1 = getelementptr i8, ptr %p, i64 8
  %b = load double, ptr %p1
  %c = fadd double %a, %b
  ret double %c
}""")
    assert version_strides(module.get_function("f")) == 0


def test_too_large_a_function_is_left_alone(monkeypatch):
    _, fn = _rows()
    monkeypatch.setattr(stride_versions, "MAX_INSTRUCTIONS", 20)
    assert version_strides(fn) == 0


def test_stride_loaded_in_the_entry_block():
    # As in a parallel loop's body: the stride is read from dims after other loads; what the
    # entry block computes before its first use of the stride is shared, its allocas stay.
    entry = """%dp = getelementptr i8, ptr %d, i64 24
  %sd = load i64, ptr %dp
  %e = load i64, ptr %d
  %slot = alloca double
  %twice = shl i64 %sd, 1
  %slot2 = alloca i64"""
    module, fn = _rows(stride="%sd", entry=entry)
    assert version_strides(fn) == 1
    parse(str(module))
    first = [i.name for i in fn.entry.instructions]
    assert first == ["dp", "sd", "e", "slot", "slot2", naming.stride_test([3]), ""]
    assert [i.name for i in fn.blocks[1].instructions] == ["twice", ""]
    # the copy of the first use computes with the constant
    twice = next(i for blk in fn.blocks[4:] for i in blk.instructions
                 if i.name.startswith("twice"))
    assert twice.operands[0].value == 3


def test_every_stride_in_one_test():
    # x's rows %s apart (three reads), out's %t (three reads, three writes): one version
    # where both are 3, the other tested first
    module, fn = _rows(two=True)
    assert list(map(str, find_strides(fn))) == [
        "stride %t: rows of 3 read one by one (6 accesses)",
        "stride %s: rows of 3 read one by one (3 accesses)"]
    assert version_strides(fn) == 1
    parse(str(module))
    text = str(fn)
    assert "  %stride.is3 = icmp eq i64 %t, 3\n  %stride.is3.1 = icmp eq i64 %s, 3\n" \
           "  %stride.is3x3 = and i1 %stride.is3, %stride.is3.1\n" \
           "  br i1 %stride.is3x3, label %entry.rest.stride3x3, label %entry.rest\n" in text
    copy = next(blk for blk in fn.blocks if blk.name == "loop.stride3x3")
    assert sorted(i.operands[1].value for i in copy.instructions if i.opcode == "mul") == [3, 3]
    assert version_strides(fn) == 0


def test_a_stride_takes_the_widest_row():
    # rows of x read at columns 0 and 2, rows of out (the same stride) at 0 and 1: 3 columns
    module = parse_module("""
define void @f(ptr noalias %x, ptr noalias %out, i64 %n, i64 %s) {
entry:
  br label %loop
loop:
  %j = phi i64 [ 0, %entry ], [ %j1, %loop ]
  %row = mul i64 %j, %s
  %px = getelementptr double, ptr %x, i64 %row
  %a = load double, ptr %px
  %px2 = getelementptr i8, ptr %px, i64 16
  %b = load double, ptr %px2
  %po = getelementptr double, ptr %out, i64 %row
  store double %a, ptr %po
  %po1 = getelementptr double, ptr %po, i64 1
  store double %b, ptr %po1
  %j1 = add nuw nsw i64 %j, 1
  %done = icmp eq i64 %j1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}""")
    assert list(map(str, find_strides(module.get_function("f")))) == [
        "stride %s: rows of 3 read one by one (4 accesses)"]


def _run(module, n, s, t, x, out):
    symbol = symbol_name("rows", str(module))    # see test_distribute._run
    cm = compile_module(str(module).replace("@rows", f"@{symbol}"))
    f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                         ctypes.c_int64, ctypes.c_void_p, ctypes.c_double)(cm.address(symbol))
    dims = np.zeros(4, np.int64)
    f(x.ctypes.data, out.ctypes.data, n, s, t, dims.ctypes.data, 0.75)


@pytest.mark.parametrize("two", [False, True], ids=["one-stride", "two-strides"])
@pytest.mark.parametrize("s, t", [(3, 3), (4, 3), (3, 4), (1, 1)])
def test_versioned_function_runs_like_the_original(s, t, two):
    # (3, 3) runs the copy, the others the original; 1 overlaps the rows (columns read one by
    # one: the second row's first column is the first row's second), where order matters.
    n = 7
    rng = np.random.default_rng(s * 10 + t)
    size = n * max(s, t) + 3
    x = rng.standard_normal(size)
    results = []
    for versioned in (False, True):
        module, fn = _rows(two=two)
        if versioned:
            assert version_strides(fn) == 1
        out = np.arange(size, dtype=float)
        _run(module, n, s, t, x, out)
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])


# ------------------------------------------------------------------------ through Numba

@numba.njit
def energy(pos, out):
    """Pairs of rows, then each row read and added into column by column."""
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            dz = pos[i, 2] - pos[j, 2]
            e += 1.0 / (1.0 + dx * dx + dy * dy + dz * dz)
    for j in range(n):
        out[j, 0] += pos[j, 1] * pos[j, 2]
        out[j, 1] += pos[j, 2] * pos[j, 0]
        out[j, 2] += pos[j, 0] * pos[j, 1]
    return e


def _loss(pos, out, cot):
    """What the reverse sweep differentiates: the result, plus ``out`` weighted by ``cot``."""
    out = out.copy()
    return energy(pos, out) + float(np.sum(cot * out))


def _reverse(pos, out, cot):
    dpos = np.zeros_like(pos)
    pyzyme.autodiff(Reverse, energy, Active, Duplicated(pos, dpos), Duplicated(out.copy(),
                                                                             cot.copy()))
    return dpos


def _arrays(cols, rng, view=False):
    n = 6
    if view:   # columns 0..2 of an (n, 5) array: rows 5 apart, Numba's layout 'A'
        pos = rng.standard_normal((n, 5))[:, :3]
        out = rng.standard_normal((n, 5))[:, :3]
    else:
        pos, out = rng.standard_normal((n, cols)), rng.standard_normal((n, cols))
    return pos, out, rng.standard_normal(out.shape)


@pytest.mark.parametrize("cols, view", [(3, False), (4, False), (3, True)],
                         ids=["n-by-3", "n-by-4", "strided-view"])
def test_serial_gradients(cols, view):
    rng = np.random.default_rng(cols)
    pos, out, cot = _arrays(cols, rng, view)
    got = _reverse(pos, out, cot)
    fd = central_gradient(lambda p: _loss(p, out, cot), np.ascontiguousarray(pos))
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)
    # forward mode: the tangent of the result and of out along a direction
    tpos = rng.standard_normal(pos.shape)
    o, tout = out.copy(), np.zeros_like(out)
    _, tangent = pyzyme.autodiff(Forward, energy, Duplicated, Duplicated(pos, tpos),
                                 Duplicated(o, tout))
    h = 1e-6
    up, down = out.copy(), out.copy()
    e_up, e_down = energy(pos + h * tpos, up), energy(pos - h * tpos, down)
    assert tangent == pytest.approx((e_up - e_down) / (2 * h), rel=1e-6, abs=1e-8)
    np.testing.assert_allclose(tout, (up - down) / (2 * h), rtol=1e-6, atol=1e-7)
    # each version, and the function in one version, compute the same gradient bitwise
    on, off = on_and_off(lambda: _reverse(pos, out, cot), "version_strides")
    np.testing.assert_array_equal(on, off)


def test_serial_function_is_versioned():
    pos, out, cot = _arrays(3, np.random.default_rng(0))
    for mode, ret in ((Reverse, Active), (Forward, Duplicated)):
        text = pyzyme.code_llvm(mode, energy, ret, Duplicated(pos, pos * 0),
                                Duplicated(out, out * 0))
        assert f"%{naming.stride_test([3])} = icmp eq i64" in text
        assert naming.stride_version("", [3, 3]) + ":" in text     # pos's and out's
    with pyzyme.options(version_strides=False):
        text = pyzyme.code_llvm(Reverse, energy, Active, Duplicated(pos, pos * 0),
                                Duplicated(out, out * 0))
    assert naming.stride_test([]) not in text


@numba.njit
def row_energy(pos):
    """Rows read, never written."""
    e = 0.0
    for j in range(pos.shape[0]):
        e += pos[j, 0] * pos[j, 1] - pos[j, 2] ** 2
    return e


def test_rows_only_read_are_versioned_for_the_reverse_sweep_alone():
    # reverse mode adds into the rows' shadows: a version; forward mode reads tangents as the
    # primal reads rows: none (the copy would double the code for nothing)
    pos = np.random.default_rng(1).standard_normal((5, 3))
    text = pyzyme.code_llvm(Reverse, row_energy, Active, Duplicated(pos, pos * 0))
    assert f"%{naming.stride_test([3])} = icmp eq i64" in text
    text = pyzyme.code_llvm(Forward, row_energy, Duplicated, Duplicated(pos, pos * 0))
    assert naming.stride_test([]) not in text


@numba.njit(parallel=True)
def pair_energy(pos, s2):
    """benchmarks/parallel.py's Lennard-Jones kernel (P2)."""
    n = pos.shape[0]
    e = 0.0
    for i in prange(n):
        xi, yi, zi = pos[i, 0], pos[i, 1], pos[i, 2]
        ei = 0.0
        for j in range(n):
            if j != i:
                dx = xi - pos[j, 0]
                dy = yi - pos[j, 1]
                dz = zi - pos[j, 2]
                q = s2 / (dx * dx + dy * dy + dz * dz)
                q6 = q * q * q
                ei += q6 * q6 - q6
        e += ei
    return 2.0 * e


def test_parallel_gradient():
    rng = np.random.default_rng(5)
    grid = np.array([(a, b, c) for a in range(2) for b in range(2) for c in range(2)], float)
    pos = 1.5 * grid + 0.1 * rng.standard_normal(grid.shape)
    numba_compiles(pair_energy, pos, 1.0)
    fd = central_gradient(lambda p: pair_energy(p, 1.0), pos)
    direction = rng.standard_normal(pos.shape)
    text = pyzyme.code_llvm(Reverse, pair_energy, Active, Duplicated(pos, pos * 0), Const(1.0))
    assert f"%{naming.stride_test([3])} = icmp eq i64" in text    # the body's, from dims
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            dpos = np.zeros_like(pos)
            pyzyme.autodiff(Reverse, pair_energy, Active, Duplicated(pos, dpos), Const(1.0))
            np.testing.assert_allclose(dpos, fd, rtol=1e-6, atol=1e-6,
                                       err_msg=f"{threads} threads")
            _, tangent = pyzyme.autodiff(Forward, pair_energy, Duplicated,
                                         Duplicated(pos, direction), Const(1.0))
            assert tangent == pytest.approx(np.sum(fd * direction), rel=1e-6)
            # rows of 4: the original version
            wide = np.concatenate([pos, rng.standard_normal((8, 1))], axis=1)
            dwide = np.zeros_like(wide)
            pyzyme.autodiff(Reverse, pair_energy, Active, Duplicated(wide, dwide), Const(1.0))
            np.testing.assert_allclose(dwide[:, :3], fd, rtol=1e-6, atol=1e-6)
            assert not dwide[:, 3].any()
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
