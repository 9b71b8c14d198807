"""Derivatives of ``@njit(parallel=True)`` code (issue 22): each function of the corpus
(tests/parallel/kernels.py) compiled with ``parallel=True`` is differentiated in reverse and
forward mode at 1, 2 and 4 threads (4 on 2 cores oversubscribes on purpose: races show up
more), and checked against central differences of the same function compiled without
``parallel=True``. Split mode, batch forward mode, a gradient inside a jitted loop and repeated
runs of the racy shapes (stencil, scatter) follow; then the refusals, and what the generated code
is (atomics only where iterations may share an address)."""

import gc

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import (
    Active, BatchDuplicated, Const, Duplicated, Forward, Reverse, ReverseSplitWithPrimal,
    autodiff, autodiff_thunk,
)

from tests.known_bugs import numba_compiles

from . import kernels as K

THREADS = tuple(t for t in (1, 2, 4) if t <= numba.config.NUMBA_NUM_THREADS)
N = 23
RNG = np.random.default_rng(22)


def _inputs():
    x, w = RNG.random(N), RNG.random(N)
    idx = RNG.integers(0, 5, N)
    return {
        "reduce_sum": [("d", x), ("c", w)],
        "reduce_two_in_one": [("d", x)],
        "reduce_product": [("d", x)],
        "reduce_max": [("d", x), ("d", w)],
        "reduce_min": [("d", x)],
        "reduce_with_index": [("d", x)],
        "elementwise": [("d", x), ("d", np.zeros(N))],
        "stencil": [("d", x), ("d", np.zeros(N))],
        "gather": [("d", x[:5].copy()), ("d", w), ("c", idx), ("d", np.zeros(N))],
        "gather_reduce": [("d", x), ("d", w[:5].copy()), ("c", idx)],
        "rows": [("d", RNG.random((7, 5))), ("d", RNG.random(5))],
        "array_expression": [("d", x), ("d", w)],
        "array_assign": [("d", x), ("d", w), ("d", np.zeros(N))],
        "array_methods": [("d", x), ("c", w)],
        "time_loop": [("d", x), ("d", np.zeros(N))],
        "time_loop_reduction": [("d", x), ("d", w)],
        "swapped_grids": [("d", x)],
        "two_loops": [("d", x), ("d", w)],
        "allocation_in_body": [("d", x)],
        "branches": [("d", x)],
        "select_in_body": [("d", x)],
        "calls_njit": [("d", x), ("d", w)],
        "lennard_jones": [("d", RNG.random((9, 2)) * 3)],
        "stencil_2d": [("d", RNG.random((6, 7))), ("d", np.zeros((6, 7)))],
        "volume": [("d", RNG.random((4, 3, 5)))],
        "softmax_rows": [("d", RNG.random((5, 4))), ("d", np.zeros((5, 4)))],
        "overwritten_after": [("d", x), ("d", w)],
        "scatter_add": [("d", x), ("d", w), ("c", RNG.permutation(N)), ("d", RNG.random(N))],
        "dot_of_temporaries": [("d", x), ("d", w)],
        "pair_energy": [("d", RNG.random((9, 2)) * 3), ("c", 1.1)],
        "numba_stencil": [("d", RNG.standard_normal((16, 16))),
                          ("d", RNG.standard_normal((16, 16))), ("d", np.zeros((16, 16)))],
    }


INPUTS = _inputs()


def _parfor_in_callee():
    """A prange loop in a callee: the parallel function calls a parallel helper."""
    def helper(x):
        s = 0.0
        for i in numba.prange(x.shape[0]):
            s += np.exp(-x[i] * x[i])
        return s
    par_helper, ser_helper = numba.njit(parallel=True)(helper), numba.njit(helper)

    def make(h):
        def outer(x):
            return h(x) * h(x[::2].copy()) + x[0]
        return outer
    return (numba.njit(parallel=True)(make(par_helper)), numba.njit(make(ser_helper)),
            [("d", RNG.random(N))])


_COMPILED: dict = {}


def compiled(name):
    """``(parallel, serial, inputs)`` for a corpus function, compiled once."""
    if name not in _COMPILED:
        if name == "parfor_in_callee":
            _COMPILED[name] = _parfor_in_callee()
        else:
            fn = getattr(K, name)
            _COMPILED[name] = (numba.njit(parallel=True)(fn), numba.njit(fn), INPUTS[name])
    numba_compiles(_COMPILED[name][0], *[v for _, v in _COMPILED[name][2]])
    return _COMPILED[name]


def _copy(a):
    return a.copy() if isinstance(a, np.ndarray) else a


def _floats(a) -> bool:
    return np.issubdtype(np.asarray(a).dtype, np.floating)


def central_differences(f, args, k, eps=1e-6):
    """df/d(args[k]) of the serial function, element by element."""
    base = [_copy(a) for _, a in args]
    g = np.zeros_like(base[k])
    for j in np.ndindex(base[k].shape):
        vals = []
        for sign in (1, -1):
            moved = [_copy(a) for a in base]
            moved[k][j] += sign * eps
            vals.append(f(*moved))
        g[j] = (vals[0] - vals[1]) / (2 * eps)
    return g


def reverse_shadows(f, args):
    anns, shadows = [], []
    for kind, a in args:
        a = _copy(a)
        if kind == "d":
            shadows.append(np.zeros_like(a))
            anns.append(Duplicated(a, shadows[-1]))
        else:
            shadows.append(None)
            anns.append(Const(a))
    autodiff(Reverse, f, Active, *anns)
    return shadows


def forward_tangent(f, args, seeds):
    anns = [Duplicated(_copy(a), seeds[k].copy()) if kind == "d" else Const(_copy(a))
            for k, (kind, a) in enumerate(args)]
    return autodiff(Forward, f, Duplicated, *anns)


CORPUS = sorted(INPUTS) + ["parfor_in_callee"]


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_against_serial_differences(name):
    par, ser, args = compiled(name)
    refs = {k: central_differences(ser, args, k) for k, (kind, a) in enumerate(args)
            if kind == "d" and _floats(a)}
    seeds = {k: RNG.standard_normal(np.shape(a)) for k, (_, a) in enumerate(args)}
    primal = ser(*[_copy(a) for _, a in args])
    for threads in THREADS:
        numba.set_num_threads(threads)
        shadows = reverse_shadows(par, args)
        for k, ref in refs.items():
            np.testing.assert_allclose(shadows[k], ref, rtol=1e-5, atol=1e-6,
                                       err_msg=f"reverse, argument {k}, {threads} threads")
        value, tangent = forward_tangent(par, args, seeds)
        assert value == pytest.approx(primal, rel=1e-9)
        expect = sum(np.sum(ref * seeds[k]) for k, ref in refs.items())
        assert tangent == pytest.approx(expect, rel=1e-5, abs=1e-7), f"{threads} threads"
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.parametrize("name", ["stencil", "swapped_grids", "gather", "gather_reduce", "lennard_jones",
                                  "scatter_add", "numba_stencil"])
def test_shared_adjoints_lose_no_update(name):
    """Iterations on different threads add into the same adjoints (a stencil's neighbours, a
    gather's repeated indices): run many times at the most threads, every result the same up
    to the order of the sums."""
    par, ser, args = compiled(name)
    numba.set_num_threads(max(THREADS))
    first = reverse_shadows(par, args)
    for _ in range(40):
        again = reverse_shadows(par, args)
        for a, b in zip(first, again):
            if a is not None:
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_split_mode_keeps_each_rows_tape():
    par, ser, args = compiled("two_loops")
    x, w = (a.copy() for _, a in args)
    ref = central_differences(ser, args, 0)
    for threads in THREADS:
        numba.set_num_threads(threads)
        dx, dw = np.zeros_like(x), np.zeros_like(w)
        fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, par, Active, Duplicated(x, dx),
                                  Duplicated(w, dw))
        tape, result, _ = fwd(Duplicated(x, dx), Duplicated(w, dw))
        assert result == pytest.approx(ser(x, w), rel=1e-12)
        rev(Duplicated(x, dx), Duplicated(w, dw), 1.0, tape)
        np.testing.assert_allclose(dx, ref, rtol=1e-5, atol=1e-7)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_a_dropped_split_tape_releases_each_rows_memory(nrt_stats):
    """A tape dropped without its reverse call: each row's tape, and the temporaries its
    body keeps for the reverse sweep, are released (they leaked: 2 NRT arrays a row)."""
    par, _, args = compiled("allocation_in_body")
    x = args[0][1].copy()
    dx = np.zeros_like(x)
    fwd, _ = autodiff_thunk(ReverseSplitWithPrimal, par, Active, Duplicated(x, dx))
    for threads in THREADS:
        numba.set_num_threads(threads)
        fwd(Duplicated(x, dx))
        gc.collect()
        before = nrt_stats()
        for _ in range(5):
            tape, _, _ = fwd(Duplicated(x, dx))
            del tape
        gc.collect()
        after = nrt_stats()
        assert after.alloc - before.alloc == after.free - before.free, f"{threads} threads"
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_batch_forward_gives_each_lane_its_tangent():
    par, ser, args = compiled("stencil")
    x = args[0][1].copy()
    ref = central_differences(ser, args, 0)
    lanes = tuple(np.eye(N)[j] for j in (0, 5, 11))
    zeros = tuple(np.zeros(N) for _ in lanes)
    _, tangents = autodiff(Forward, par, BatchDuplicated, BatchDuplicated(x, lanes),
                           BatchDuplicated(np.zeros(N), zeros))
    np.testing.assert_allclose(tangents, ref[[0, 5, 11]], rtol=1e-5, atol=1e-7)


def test_gradient_inside_a_jitted_loop():
    par, ser, args = compiled("calls_njit")
    w = args[1][1].copy()
    g = pyzyme.grad(par)

    @numba.njit
    def descend(x, w, steps):
        for _ in range(steps):
            x = x - 0.1 * g(x, w)
        return x

    x0 = args[0][1].copy()
    expect = x0.copy()
    for _ in range(3):
        expect = expect - 0.1 * central_differences(ser, [("d", expect), ("c", w)], 0)
    np.testing.assert_allclose(descend(x0.copy(), w, 3), expect, rtol=1e-5, atol=1e-7)


# -- what the derivative code is -------------------------------------------------------------
def _reverse_ir(name):
    """The reverse's IR, its body in one version as to its row strides (each version made by
    :mod:`pyzyme.transforms.stride_versions` has the same adds as the other)."""
    par, _, args = compiled(name)
    anns = [Duplicated(_copy(a), np.zeros_like(a)) if kind == "d" else Const(_copy(a))
            for kind, a in args]
    with pyzyme.options(version_strides=False):
        return pyzyme.code_llvm(Reverse, par, Active, *anns)


def _atomics(ir: str) -> int:
    """``atomicrmw fadd`` in one version of the reverse body: a body whose strong-zero guards
    are covered comes in two (pyzyme.diff.reverse.versions; the copy's blocks end in
    ``.finite``), each with the same adds."""
    counts = {False: 0, True: 0}
    copy = False
    for line in ir.splitlines():
        head = line.split(";", 1)[0].rstrip()
        if head.startswith("define"):
            copy = False
        elif head.endswith(":") and not head.startswith((" ", "\t")):
            copy = head[:-1].strip('"').endswith(".finite")
        counts[copy] += line.count("atomicrmw fadd")
    return max(counts.values())


def test_iterations_owning_their_elements_add_without_atomics():
    """``s += w[i] * sin(x[i])``: each iteration alone reads x[i], so its adjoint is a plain
    add; only the per-thread reduction slot's adjoint, once per chunk, might be shared."""
    ir = _reverse_ir("reduce_sum")
    assert "pyzyme.parfor.rev." in ir
    assert _atomics(ir) <= 1


def test_neighbours_add_atomically_only_near_their_rows_ends():
    """``x[i - 1] - 2 x[i] + x[i + 1]`` for i from 1: iterations share x's elements with
    their neighbours only, so an add is atomic only within one index of a row's ends."""
    ir = _reverse_ir("stencil")
    assert "atomicrmw fadd" in ir and "row.edge" in ir


def test_rows_of_a_2d_array_are_owned():
    """``out[i, j]`` from ``u[i - 1, j]``, ``u[i + 1, j]``, ...: each iteration writes its own
    row and reads its neighbours' (an address ``8 * ((i + d) * m + j)``, m the run-time row
    length): adds are atomic only near the rows' ends or where the column leaves the row."""
    ir = _reverse_ir("stencil_2d")
    assert "row.edge" in ir and "row.outside" in ir


def test_grids_a_time_loop_swaps_are_told_apart():
    """``v, w = w, v`` after each step: the stencil reads one grid and writes the other, two
    allocations the loop's phis exchange, never the same one; so each iteration owns the
    element of w it writes and adds its adjoint without an atomic (5 atomics before, when
    the two grids could have been one array), and v's neighbours are added atomically only
    near the rows' ends (the schedule's start set in the loop, not the 0 the entry stores)."""
    ir = _reverse_ir("swapped_grids")
    assert 0 < _atomics(ir) <= 4 and "row.edge" in ir


def test_arrays_every_iteration_reads_get_a_copy_per_task():
    """Lennard-Jones: every iteration reads every position, so their adjoints go into a
    copy per reverse task, summed after the launch, not an atomic add per pair."""
    ir = _reverse_ir("lennard_jones")
    assert "@calloc" in ir and "private.sum" in ir
    assert _atomics(ir) <= 1  # the reduction slot's, once per row


def test_split_thunks_on_arrays_apart_give_each_task_a_copy():
    """The split pair, made and called on arrays that share no memory, is built as
    ``autodiff`` builds for such calls: Lennard-Jones' positions get a copy per reverse task,
    as in combined mode. (Built for arrays that might overlap, each pair's adjoint was an
    atomic add into the positions' shadow: at 2 threads the reverse sweep of a GMM took 10x
    its time at 1.)"""
    par, ser, args = compiled("lennard_jones")
    pos = args[0][1].copy()
    ir, combined = (pyzyme.code_llvm(mode, par, Active, Duplicated(pos, np.zeros_like(pos)))
                    for mode in (ReverseSplitWithPrimal, Reverse))
    assert "@calloc" in ir and "private.sum" in ir
    # the reduction slot's, once per row, as in combined mode (52 adds of the pairs before)
    assert ir.count("atomicrmw fadd") == combined.count("atomicrmw fadd") <= 4
    ref = central_differences(ser, args, 0)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, par, Active,
                              Duplicated(pos, np.zeros_like(pos)))
    for threads in THREADS:
        numba.set_num_threads(threads)
        dpos = np.zeros_like(pos)
        tape, result, _ = fwd(Duplicated(pos, dpos))
        assert result == pytest.approx(ser(pos), rel=1e-12)
        rev(Duplicated(pos, dpos), 1.0, tape)
        np.testing.assert_allclose(dpos, ref, rtol=1e-5, atol=1e-7)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_serial_code_has_no_atomics():
    _, ser, args = compiled("stencil")
    anns = [Duplicated(_copy(a), np.zeros_like(a)) for _, a in args]
    assert "atomicrmw fadd" not in pyzyme.code_llvm(Reverse, ser, Active, *anns)


# -- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["reduce_two_in_one", "stencil", "two_loops",
                                  "time_loop_reduction", "rows", "parfor_in_callee"])
def test_hvp_matches_the_serial_functions(name):
    """Forward over reverse: the launches of the reverse sweep are themselves launched by
    forward mode, their launch blocks with shadows."""
    par, ser, args = compiled(name)
    rest = [_copy(a) for _, a in args[1:]]
    x = args[0][1].copy()
    v = RNG.standard_normal(x.shape)

    def at(f):
        env = {"f": f, **{f"a{j}": a for j, a in enumerate(rest)}}
        copies = ", ".join(f"a{j}.copy()" for j in range(len(rest)))
        exec(f"def g(x):\n    return f(x.copy(){', ' if rest else ''}{copies})", env)
        return env["g"]
    expect = pyzyme.hvp(at(ser), x, v)
    for threads in THREADS:
        numba.set_num_threads(threads)
        np.testing.assert_allclose(pyzyme.hvp(at(par), x, v), expect, rtol=1e-9, atol=1e-12)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.parametrize("name", ["pair_energy", "gather_reduce", "array_methods",
                                  "scatter_add", "stencil_2d", "time_loop", "softmax_rows"])
def test_hvp_with_the_other_arguments_held_constant(name):
    """The other arguments passed as hvp's constants (a float the loop is handed, an index
    array, a float array the loop reads; an output array the loop writes, which hvp gives a
    shadow of its own: pyzyme.api.workspaces), not folded into a closure: against the serial
    function's hvp."""
    par, ser, args = compiled(name)
    x, rest = args[0][1].copy(), [_copy(a) for _, a in args[1:]]
    v = RNG.standard_normal(x.shape)
    expect = pyzyme.hvp(ser, x, v, *rest)
    try:
        for threads in THREADS:
            numba.set_num_threads(threads)
            np.testing.assert_allclose(pyzyme.hvp(par, x, v, *rest), expect, rtol=1e-9,
                                       atol=1e-12)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


# -- shapes found on other people's code -------------------------------------------------------
@numba.njit(parallel=True)
def slice_then_prange(u):
    v = np.zeros_like(u)
    v[:, :] = u                       # a 2-D parfor: its steps outnumber its dims
    s = 0.0
    for i in numba.prange(u.shape[0]):
        for j in range(u.shape[1]):
            s += v[i, j] * v[i, j]
    return s


@numba.njit(parallel=True)
def copies_in_prange(u):
    v = np.zeros_like(u)
    for i in numba.prange(u.shape[0]):
        v[i] = u[i]                   # LLVM makes the body a memcpy: types from the caller
    s = 0.0
    for i in range(u.shape[0]):
        s += v[i] * v[i] * (i + 1)
    return s


@numba.njit(parallel=True)
def unrolled_launches(u, w):
    total = 0.0
    for _ in range(2):                # unrolled: two launches share one argument array
        s = 0.0
        for i in numba.prange(u.shape[0]):
            s += u[i] * w[i]
        for i in range(u.shape[0]):
            u[i] = u[i] * (1.0 + 0.01 * s)
        total += s
    return total


@numba.njit(parallel=True)
def slab_update(a, c, out):
    # Numba launches this parfor through a wrapper of its own (.kernel.<n>), which capture
    # inlines: the launch must see which arrays its caller put in the argument array.
    out[:, :, :] = a[1:, :, :] - c[:, :, :] * a[:-1, :, :]
    return np.sum(out * out)


def test_a_launch_in_numbas_wrapper():
    rng = np.random.default_rng(5)
    a, c = rng.random((5, 4, 3)), rng.random((4, 4, 3))
    serial = numba.njit(slab_update.py_func)
    da = np.zeros_like(a)
    autodiff(Reverse, slab_update, Active, Duplicated(a.copy(), da), Const(c),
             Duplicated(np.zeros((4, 4, 3)), np.zeros((4, 4, 3))))
    ref = central_differences(lambda x: serial(x, c, np.zeros((4, 4, 3))), [("d", a)], 0)
    np.testing.assert_allclose(da, ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("f, shape, weights", [
    (slice_then_prange, (6, 5), None),
    (copies_in_prange, (7,), None),
    (unrolled_launches, (9,), RNG.random(9)),
])
def test_shapes_of_published_kernels(f, shape, weights):
    u = RNG.random(shape)
    extra = () if weights is None else (weights,)
    serial = numba.njit(f.py_func)

    def value(x):
        return serial(x.copy(), *extra)
    du = np.zeros_like(u)
    anns = [Duplicated(u.copy(), du)] + [Const(e) for e in extra]
    autodiff(Reverse, f, Active, *anns)
    ref = central_differences(lambda x: value(x), [("d", u)], 0)
    np.testing.assert_allclose(du, ref, rtol=1e-5, atol=1e-7)


def test_one_thread_adds_without_atomics_at_run_time():
    """The reverse body branches on whether other threads run: at one thread its atomic
    adds are not reached (the same gradient either way)."""
    ir = _reverse_ir("stencil")
    assert "adjoint.shared" in ir and "adjoint.own" in ir
    par, ser, args = compiled("stencil")
    numba.set_num_threads(1)
    one = reverse_shadows(par, args)
    numba.set_num_threads(max(THREADS))
    many = reverse_shadows(par, args)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    np.testing.assert_allclose(one[0], many[0], rtol=1e-12, atol=1e-14)


def test_an_active_scalar_reaching_every_iteration():
    """An Active scalar passed to the body through a stack slot: its adjoint, added by every
    pair on every thread, is the serial one."""
    par, ser, args = compiled("pair_energy")
    pos = args[0][1]
    eps = 1e-6
    expect = (ser(pos, 1.1 + eps) - ser(pos, 1.1 - eps)) / (2 * eps)
    for threads in THREADS:
        numba.set_num_threads(threads)
        for _ in range(5):
            dpos = np.zeros_like(pos)
            (d,) = autodiff(Reverse, par, Active, Duplicated(pos.copy(), dpos), Active(1.1))
            assert d[1] == pytest.approx(expect, rel=1e-6)
            np.testing.assert_allclose(dpos, central_differences(ser, args, 0), rtol=1e-5,
                                       atol=1e-6)
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
