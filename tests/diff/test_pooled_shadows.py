"""Shadows of large temporaries from the tape pool (pyzyme.diff.tape.pooled_shadows): the
allocator's MemInfos, their reuse by a later call, and gradients equal to those of shadows
from NRT, on repeated calls, from several threads and in ``prange`` bodies."""

from __future__ import annotations

import ctypes
import math
import threading

import numba
import numpy as np
import pytest
from numba.core.runtime import _nrt_python

import pyzyme
from pyzyme.diff.calls import allocation, resize
from pyzyme.diff.tape import pool
from pyzyme.diff.tape.pooled_shadows import POOLED_BYTES, RELEASE_NAME, shadow_alloc
from pyzyme.ir import IRBuilder, Module, types as T
from pyzyme.runtime import compile_module

BIG = 2 * POOLED_BYTES // 8        # doubles: temporaries whose shadows come from the pool
_release = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_nrt_python.c_helpers["MemInfo_release"])


def _allocator(name: str):
    """``alloc(size, align)`` (a MemInfo from ``pyzyme.shadow_alloc``) and ``held()`` (the
    bytes its pool keeps) of a module of their own."""
    m = Module(name)
    fn = m.add_function(f"{name}_alloc", T.FunctionType(T.ptr, [T.i64, T.i32]))
    b = IRBuilder(fn.append_block("entry"))
    b.ret(b.call(shadow_alloc(m), list(fn.args)))
    held = m.add_function(f"{name}_held", T.FunctionType(T.i64, []))
    b = IRBuilder(held.append_block("entry"))
    b.ret(b.load(T.i64, m.get_global("pyzyme.tape_pool_bytes")))
    compiled = compile_module(str(m), name=name)
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    return (ctypes.CFUNCTYPE(vp, i64, ctypes.c_int32)(compiled.address(f"{name}_alloc")),
            ctypes.CFUNCTYPE(i64)(compiled.address(f"{name}_held")))


@pytest.fixture(scope="module")
def alloc():
    return _allocator("pooled_shadow_test")


def _fields(mi):
    """A MemInfo's (refct, dtor, dtor_info, data, size)."""
    return tuple(ctypes.c_uint64.from_address(mi + 8 * k).value for k in range(5))


def test_a_released_shadow_block_serves_the_next_one(alloc):
    new, held = alloc
    nbytes = 3 * POOLED_BYTES
    mi = new(nbytes, 32)
    refct, _, _, data, size = _fields(mi)
    assert (refct, size, data % 32) == (1, nbytes, 0)
    ctypes.memset(data, 0x5A, nbytes)     # all of it is the caller's
    before = held()
    _release(mi)                          # the count falls to zero: the block goes to the pool
    kept = held() - before
    assert nbytes < kept <= 2 * (nbytes + 64)
    again = new(nbytes - 1000, 64)        # same size class: the same block, realigned
    assert held() == before
    data2 = _fields(again)[3]
    assert data2 % 64 == 0 and abs(data2 - data) < 64
    _release(again)
    assert held() - before == kept


def test_small_or_oddly_aligned_shadows_are_nrts_own(alloc):
    new, held = alloc
    before = held()
    for nbytes, align in ((POOLED_BYTES - 8, 32), (4 * POOLED_BYTES, 48)):
        mi = new(nbytes, align)
        _, dtor, _, data, size = _fields(mi)
        assert size == nbytes and data % align == 0
        assert data - mi < 256 + align    # NRT's MemInfo and its data in one block
        _release(mi)
    assert held() == before


def test_blocks_past_the_byte_bound_go_back_to_the_c_library(monkeypatch):
    monkeypatch.setattr(pool, "RETAINED_BYTES", 1 << 20)    # two blocks of 512 KiB
    new, held = _allocator("pooled_shadow_bound")
    blocks = [new(300_000, 32) for _ in range(3)]
    data = {_fields(mi)[3] for mi in blocks}
    for mi in blocks:
        _release(mi)
    assert held() == 1 << 20                 # the third went back
    again = [new(300_000, 32) for _ in range(3)]
    assert held() == 0
    assert len({_fields(mi)[3] for mi in again} & data) >= 2
    for mi in again:
        _release(mi)


def test_threads_never_share_a_block(alloc):
    new, _ = alloc
    errors = []

    def work(k):
        for r in range(50):
            nbytes = POOLED_BYTES * (1 + (k + r) % 3)
            mi = new(nbytes, 32)
            data = _fields(mi)[3]
            ctypes.memset(data, k, nbytes)           # ctypes lets go of the GIL here
            if ctypes.string_at(data, nbytes) != bytes([k]) * nbytes:
                errors.append((k, r))
            _release(mi)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# -- reverse derivatives -------------------------------------------------------------------
def _chain(x):
    """Two large temporaries (one np.empty, one np.zeros) and a recurrence through them."""
    n = x.shape[0]
    t = np.empty(n)
    u = np.zeros(n)
    for i in range(n):
        t[i] = math.sin(x[i]) * x[i]
    for i in range(1, n):
        u[i] = 0.5 * u[i - 1] + t[i] * x[i - 1]
    return u.sum() + (t * t).sum() / n


pooled_chain, nrt_chain = numba.njit(_chain), numba.njit(_chain)


def _without_pool(f):
    """``pyzyme.grad(f)`` built with every shadow from NRT (as before the pool served them)."""
    saved, allocation._POOLED_ALIGN = allocation._POOLED_ALIGN, {}
    try:
        g = pyzyme.grad(f)
        g(np.ones(3))
    finally:
        allocation._POOLED_ALIGN = saved
    return g


def test_gradients_equal_those_of_nrt_shadows_on_every_call():
    assert RELEASE_NAME in pyzyme.code_llvm(pyzyme.Reverse, pooled_chain, pyzyme.Active,
                                            pyzyme.Duplicated(np.ones(3), np.zeros(3)))
    ref, g = _without_pool(nrt_chain), pyzyme.grad(pooled_chain)
    rng = np.random.default_rng(5)
    for n in (BIG, BIG // 3, 2 * BIG, BIG):     # blocks reused across sizes: zeroed again
        x = rng.uniform(0.1, 1.0, n)
        first, expected = g(x), ref(x)
        np.testing.assert_array_equal(first, expected)
        np.testing.assert_array_equal(g(x), first)
    v = rng.standard_normal(x.shape[0])       # and the other mode
    _, tangent = pyzyme.jvp(pooled_chain, (x,), (v,))
    assert first @ v == pytest.approx(tangent, rel=1e-11)


_chain_inner = numba.njit(nogil=True)(_chain)
_d_chain = pyzyme.grad(_chain_inner)


@numba.njit(nogil=True)
def _gradient_nogil(x):
    return _d_chain(x)



@numba.njit
def list_of_temporaries(x, n):
    """Large temporaries kept in a list that grows: the list's resizes keep their old blocks
    (pyzyme.diff.calls.resize) in the same derivative as pooled shadows."""
    ys = []
    for i in range(n):
        ys.append(x * (i + 1.0))
    s = 0.0
    for y in ys:
        s += np.sum(y * y) * x[0]
    return s


def test_pooled_shadows_in_a_growing_list():
    # The pool's destructor and the list's release of an old block were one symbol: whichever
    # the module made first served both, and the list's old blocks went to tape_free (SIGSEGV).
    x = np.linspace(0.5, 1.5, BIG)
    n = 3
    k = sum((i + 1.0) ** 2 for i in range(n))
    expected = 2 * k * x[0] * x
    expected[0] += k * (x @ x)
    for _ in range(2):                       # the second call takes its shadows from the pool
        dx = np.zeros_like(x)
        pyzyme.autodiff(pyzyme.Reverse, list_of_temporaries, pyzyme.Active,
                        pyzyme.Duplicated(x, dx), pyzyme.Const(n))
        np.testing.assert_allclose(dx, expected, rtol=1e-12)


@pytest.mark.parametrize("pool_first", (True, False))
def test_the_pools_destructor_is_not_the_lists_release(pool_first):
    m = Module("destructors")
    made = [lambda: shadow_alloc(m), lambda: resize.release_function(m)]
    for make in made if pool_first else made[::-1]:
        make()
    lists = resize.release_function(m)
    assert m.get_function(RELEASE_NAME) is not lists
    assert "pyzyme.tape_free" in str(m.get_function(RELEASE_NAME))
    assert "NRT_Free" in str(lists) and "tape_free" not in str(lists)

def test_threads_calling_the_gradient_at_once():
    rng = np.random.default_rng(7)
    xs = [rng.uniform(0.1, 1.0, BIG + 17 * k) for k in range(4)]
    serial = [_gradient_nogil(x) for x in xs]
    found = [None] * len(xs)

    def work(k):
        found[k] = [_gradient_nogil(xs[k]) for _ in range(5)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(found, serial):
        for g in got:
            np.testing.assert_array_equal(g, want)


def _rows(x):
    out = np.zeros(x.shape[0])
    for i in numba.prange(x.shape[0]):
        t = np.empty(x.shape[1])      # a large temporary per iteration, its shadow too
        for j in range(x.shape[1]):
            t[j] = math.sin(x[i, j]) * x[i, j]
        s = 0.0
        for j in range(x.shape[1]):
            s += t[j] * x[i, j - 1]
        out[i] = s
    return out.sum()


def test_prange_bodies_take_shadows_from_the_pool_at_once():
    x = np.random.default_rng(9).uniform(0.1, 1.0, (6, BIG))
    parallel = pyzyme.grad(numba.njit(parallel=True)(_rows))
    serial = pyzyme.grad(numba.njit(_rows))(x)
    for _ in range(3):
        np.testing.assert_allclose(parallel(x), serial, rtol=1e-13)


def test_hessian_vector_products_over_pooled_shadows():
    # Forward mode over the gradient meets pyzyme.shadow_alloc as an allocation (its row).
    f = numba.njit(_chain)
    rng = np.random.default_rng(1)
    x, v = rng.uniform(0.1, 1.0, BIG), rng.standard_normal(BIG)
    h = pyzyme.hvp(f, x, v)
    np.testing.assert_array_equal(pyzyme.hvp(f, x, v), h)
    g, e = pyzyme.grad(f), 1e-6
    np.testing.assert_allclose(h, (g(x + e * v) - g(x - e * v)) / (2 * e), rtol=1e-6,
                               atol=1e-6 * np.abs(h).max())


_CUBES = """
declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare void @NRT_MemInfo_call_dtor(ptr)

define double @pooled_cubes(ptr %x, i64 %n) {
entry:
  %bytes = shl i64 %n, 3
  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %bytes, i32 32)
  %slot = getelementptr i8, ptr %mi, i64 24
  %t = load ptr, ptr %slot
  br label %fill
fill:
  %i = phi i64 [ 0, %entry ], [ %i1, %fill ]
  %px = getelementptr double, ptr %x, i64 %i
  %v = load double, ptr %px
  %sq = fmul double %v, %v
  %pt = getelementptr double, ptr %t, i64 %i
  store double %sq, ptr %pt
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, %n
  br i1 %more, label %fill, label %sum
sum:
  %j = phi i64 [ 0, %fill ], [ %j1, %sum ]
  %s = phi double [ 0.0, %fill ], [ %s1, %sum ]
  %qt = getelementptr double, ptr %t, i64 %j
  %w = load double, ptr %qt
  %qx = getelementptr double, ptr %x, i64 %j
  %u = load double, ptr %qx
  %p = fmul double %w, %u
  %s1 = fadd double %s, %p
  %j1 = add i64 %j, 1
  %again = icmp slt i64 %j1, %n
  br i1 %again, label %sum, label %done
done:
  call void @NRT_MemInfo_call_dtor(ptr %mi)
  ret double %s1
}

define i64 @pooled_cubes_held() {
  %held = load i64, ptr @pyzyme.tape_pool_bytes
  ret i64 %held
}
"""


def test_the_second_call_takes_the_shadow_from_the_pool():
    # sum(x^3) through a temporary x^2 that NRT allocates and frees: the derivative's shadow
    # of it goes back to the pool after the first call and serves the second.
    from pyzyme.llvm import differentiate

    pooled_chain(np.ones(2))                 # Numba's runtime started
    declared, body = _CUBES.rsplit("define i64 @pooled_cubes_held", 1)
    text = differentiate(declared, "pooled_cubes", "reverse", ["dup", "const"])
    compiled = compile_module(text + "define i64 @pooled_cubes_held" + body, name="pooled_cubes")
    vp, i64, f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    diffe = ctypes.CFUNCTYPE(f64, vp, i64, vp, f64)(compiled.address("diffe_pooled_cubes"))
    held = ctypes.CFUNCTYPE(i64)(compiled.address("pooled_cubes_held"))
    x = np.linspace(0.5, 1.5, BIG)
    dx = np.zeros_like(x)
    assert diffe(x.ctypes.data, x.size, dx.ctypes.data, 1.0) == pytest.approx((x ** 3).sum())
    kept = held()
    assert kept >= x.nbytes                  # the shadow's block, back in the pool
    diffe(x.ctypes.data, x.size, dx.ctypes.data, 1.0)
    assert held() == kept                    # taken again, not a second block
    np.testing.assert_allclose(dx, 2 * 3 * x ** 2, rtol=1e-14)
