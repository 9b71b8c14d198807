"""Binomial checkpointing (Revolve) as IR that pyzyme generates: a scheme a compiled derivative
runs with no Python and no C compiler on the path.

Griewank & Walther (Revolve, ACM TOMS 2000): with ``s`` snapshots, ``l`` steps can be
reversed running each step forward at most ``t`` times, ``t`` the least with
``beta(s, t) = C(s + t, s) >= l``, and the fewest forward steps any schedule with ``s``
snapshots needs is ``t*l - beta(s + 1, t - 1)``. A schedule reaching that count stores the
state at the start of the range, runs ``m`` steps forward, reverses the last ``l - m`` steps
with one snapshot fewer and then the first ``m`` with all of them; it does so exactly when
``max(l - beta(s-1, t), beta(s, t-2)) <= m <= min(beta(s, t-1), l - beta(s-1, t-1))``
(the two parts then need ``t`` and ``t - 1`` runs a step, and Pascal's rule adds their counts
up to the optimum). The scheme takes the upper end.

The scheme is written as the state machine Enzyme's ``EnzymeCheckpointScheme`` protocol asks
for (``init``, ``next_action``, ``store``, ``restore``, ``finalize``; the driver that carries
the actions out is :mod:`pyzyme.diff.calls.checkpoint`): its state is the range still to be
reversed (``capo`` .. ``fine``), the stack of slots in use with the step each holds, and
whether the working state is the one at ``capo`` (after a turn it is not: the step's
derivative ran it forward). :class:`Schedule` runs the same machine in Python, to print a
schedule and count its steps (and to test the IR against). A step of the scheme may be a chunk
of a loop's iterations, taped when differentiated (:func:`chunking`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

from pyzyme.ir import IRBuilder
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantAggregate, const_float, const_int, const_null

__all__ = ["Schedule", "snapshots", "snapshots_ir", "scheme", "chunking", "SNAPSHOT_OVERHEAD",
           "STATE_WORDS", "CACHE_WINDOW", "CHUNK_TAPE", "CHUNK_PART"]

# Actions (EnzymeCkptAction.flag) and the scheme struct's layout (<enzyme/checkpoint.h>).
_STORE, _RESTORE, _FORWARD, _FIRSTUTURN, _UTURN, _DONE = 1, 2, 3, 4, 5, 7
_SCHEME = T.StructType([T.i32] + [T.ptr] * 9)
# The state: i64 words, then one word a slot (the step it holds).
(_N, _S, _BYTES, _CAPO, _FINE, _CHECK, _VALID, _FIRST, _STORAGE, _FORWARDS, _TURNS,
 _STORES, _RESTORES, _GAP) = range(14)
STATE_WORDS = 14
#: Bytes a snapshot slot costs beyond the state it holds (the step it records).
SNAPSHOT_OVERHEAD = 8


def allowed(budget: int, state_bytes: int, steps: int, reserve: int) -> int:
    """The snapshots ``budget`` bytes hold when a snapshot is ``state_bytes``: what is left
    after the driver's two slots and ``reserve`` states (what one step's derivative keeps), at
    most one a step (``steps`` -1: not known yet, a while loop); 0 when not even one fits."""
    room = budget - (2 + reserve) * state_bytes - STATE_WORDS * 8
    s = room // (state_bytes + SNAPSHOT_OVERHEAD) if room > 0 else 0
    if steps >= 0:
        s = min(s, steps)
    return max(s, 1) if room >= state_bytes + SNAPSHOT_OVERHEAD else 0


# -- how many of them to use: a cost model ---------------------------------------------------
# Revolve counts step runs only, as if a snapshot cost nothing; a snapshot costs a copy in
# (store) and one out (restore), about one of each a step. A state of kilobytes that a step
# runs through in L1 cache (a stencil: 8 KB in 0.32 us) is copied in 0.15 us while the
# snapshots stay within a core's cache, and in 0.55-1.0 us once they do not (measured on a
# 2.8 GHz Xeon with 1.25 MiB of L2): 2048 snapshots of 8 KB made a 16 MiB gradient 9.4x the
# primal where 256 of them (2 MiB, each step run 2.7 times against 2.0) made it 7.0x. So of
# the snapshots the budget allows, the scheme uses only as many as CACHE_WINDOW holds when
# that costs less: per step, its runs of a step (each costing as much as touching its state's
# bytes and STEP_FIXED more) plus a store and a restore (each COPY_NEAR or COPY_FAR of that).
#: Snapshot storage of at most this many bytes stays in a core's cache (L2: 1-2 MiB).
CACHE_WINDOW = 2 << 20
#: The two-level schedule's ranges take this part of CACHE_WINDOW where the budget holds the
#: snapshots at the top level that this takes (all of it otherwise): the fewer steps a range,
#: the fewer runs of a step too, and the less of the cache they take (in place at 16 MiB:
#: 6.1x the primal with ranges of 65 steps, 6.6x with ranges of 261).
HOT_PART = 4
#: A step costs as much as touching its state and this many bytes besides (a call, a loop's
#: setup, work a small state's step does: Lotka-Volterra's RK4 step of a 40-byte state takes
#: 25 ns, as long as the stencil takes for some 600 bytes).
STEP_FIXED = 512
#: A copy of a state, per byte, against a step's touching it: within the cache, beyond it.
COPY_NEAR, COPY_FAR = 0.5, 2.0


#: A chunk's tape (the steps a step of the scheme runs, taped: see :func:`chunking`) stays
#: within CHUNK_TAPE bytes and a CHUNK_PART-th of the budget.
CHUNK_TAPE, CHUNK_PART = CACHE_WINDOW, 4


def chunking(budget: int, state_bytes: int, steps: int, reserve: int,
             tape: int = 0) -> tuple[int, int]:
    """``(chunk, reserve)``: how many iterations a step of the scheme runs, and the states
    reserved for the tape of its derivative. Each iteration's derivative costs some 3.6 of its
    primal runs (a stencil's) where an untaped run costs 1: a schedule that runs a step twice
    untaped before differentiating it cannot come near 4x the primal. So the scheme's steps are
    *chunks* of consecutive iterations, each differentiated as a loop with the ordinary tape
    (run forward once taped, then reversed from its tape, all in cache), the snapshots at
    chunk boundaries only. A chunk's tape is ``tape`` bytes an iteration (the unbudgeted
    derivative's estimate; at least ``reserve`` states, what one step's derivative is reserved
    today) and stays within CHUNK_TAPE and a CHUNK_PART-th of ``budget``; a while loop's
    (``steps`` -1) chunk is 1 iteration. The reserve is what the chunk's tape takes, in
    states, at least ``reserve``. The compiled loop computes the same
    (:mod:`pyzyme.transforms.checkpoint_chunks`)."""
    per = max(tape, reserve * state_bytes, 1)
    chunk = max(min(CHUNK_TAPE, budget // CHUNK_PART) // per, 1)
    chunk = 1 if steps < 0 else min(chunk, max(steps, 1))
    return chunk, max(reserve, -(-chunk * per // max(state_bytes, 1)))


def _forward_runs(snaps: int, steps: int) -> int:
    """Revolve's fewest runs of a step with ``snaps`` snapshots: ``t*l - beta(s + 1, t - 1)``."""
    t, beta = 0, 1
    while beta < steps:
        t += 1
        beta = beta * (snaps + t) // t
    return t * steps - beta * t // (snaps + 1)


def _cost(snaps: int, state_bytes: int, steps: int, chunk: int = 1) -> float:
    """The cost model's time of a schedule (in bytes a step touches), its steps chunks of
    ``chunk`` iterations."""
    near = snaps * (state_bytes + SNAPSHOT_OVERHEAD) <= CACHE_WINDOW
    copies = float(2 * steps) * float(state_bytes) * (COPY_NEAR if near else COPY_FAR)
    return float(_forward_runs(snaps, steps)) * float(chunk * (state_bytes + STEP_FIXED)) \
        + copies


def _cached(state_bytes: int) -> int:
    return CACHE_WINDOW // (state_bytes + SNAPSHOT_OVERHEAD)


def _two_level_runs(hot: int, steps: int) -> int:
    """Step runs of the two-level schedule: a snapshot every ``hot`` steps in the forward
    sweep, each range of ``hot`` steps then run once more, storing every state."""
    return steps - 1 + (steps - 2) // hot * (hot - 1)


def plan(budget: int, state_bytes: int, steps: int, reserve: int,
         chunk: int = 1) -> tuple[int, int]:
    """``(snapshots, hot)``: the snapshots a schedule of ``steps`` steps uses under ``budget``
    bytes when a snapshot is ``state_bytes``, and the length of the ranges it reverses within
    the cache (0: Revolve's binomial schedule over all of them). Of three schedules, the
    one the cost model finds fastest: Revolve's with the snapshots the budget allows
    (:func:`allowed`), Revolve's with those :data:`CACHE_WINDOW` holds, and (where the budget
    allows it) a two-level one: a snapshot every ``hot`` steps (as many as the cache holds),
    then each range of ``hot`` steps reversed storing every state, each step run twice with
    every copy but the top level's from the cache. A while loop's (``steps`` -1) is the first.
    A step of the scheme runs ``chunk`` iterations (:func:`chunking`). The compiled scheme
    computes the same (:func:`snapshots_ir`)."""
    s = allowed(budget, state_bytes, steps, reserve)
    few = _cached(state_bytes)
    if steps < 0 or few >= s or few < 2:
        return s, 0
    best, chosen = _cost(s, state_bytes, steps, chunk), (s, 0)
    cost = _cost(few, state_bytes, steps, chunk)
    if cost < best:
        best, chosen = cost, (few, 0)
    hot = max(CACHE_WINDOW // HOT_PART // (state_bytes + SNAPSHOT_OVERHEAD), 2)
    if (steps - 2) // hot + hot + 1 > s:
        hot = few  # fewer snapshots at the top level
    top = (steps - 2) // hot
    if top + hot + 1 <= s:
        runs = _two_level_runs(hot, steps)
        cost = float(runs) * float(chunk * (state_bytes + STEP_FIXED)) + float(
            2 * steps) * float(state_bytes) * COPY_NEAR + float(2 * top) * float(
            state_bytes) * COPY_FAR
        if cost < best:
            chosen = (top + hot + 1, hot)
    return chosen


def snapshots(budget: int, state_bytes: int, steps: int, reserve: int, chunk: int = 1) -> int:
    """The snapshots of :func:`plan`; 0 when not even one fits."""
    return plan(budget, state_bytes, steps, reserve, chunk)[0]


def _split(length: int, snaps: int) -> int:
    """Steps to run before the next snapshot (``snaps`` >= 2, ``length`` >= 2)."""
    t, beta = 0, 1
    while beta < length:
        t += 1
        beta = beta * (snaps + t) // t
    upper = beta * t // (snaps + t)                 # beta(s, t-1)
    right = upper * snaps // (snaps + t - 1)        # beta(s-1, t-1)
    return min(upper, length - right)


@dataclass(frozen=True)
class Schedule:
    """Revolve's schedule for ``steps`` steps with ``snapshots`` slots, as the compiled scheme
    runs it: ``forward`` steps run untaped (besides the ``steps`` differentiated), ``stores``
    snapshots taken, ``restores`` made. ``online``: a while loop's, whose number of steps the
    scheme learns only when the loop ends. With ``chunk`` > 1 each of its steps is a chunk of
    that many of the loop's ``iterations`` (:func:`chunking`), and ``forward`` counts
    iterations.

    Examples
    --------
    >>> print(Schedule(1000, 10))
    binomial checkpointing (Revolve): 1000 steps, 10 snapshots, each step run forward at most \
4 times; 3637 untaped step runs (recomputation factor 3.64), 715 stores, 999 restores
    """

    steps: int
    snapshots: int
    online: bool = False  # the number of steps known only when the loop ends
    allowed: int = 0      # the snapshots the budget allowed, where the cost model used fewer
    hot: int = 0          # the two-level schedule's ranges (plan); 0: Revolve's
    chunk: int = 1        # iterations a step runs (chunking)
    iterations: int = 0   # the loop's, where chunk > 1

    @classmethod
    def under(cls, budget: int, state_bytes: int, steps: int, reserve: int,
              tape: int = 0) -> "Schedule":
        """The schedule the compiled scheme runs for ``steps`` iterations (known at the loop's
        entry) under ``budget`` bytes, a snapshot ``state_bytes``, ``reserve`` states for
        an iteration's derivative and ``tape`` bytes its tape takes (:func:`chunking`,
        :func:`snapshots`).

        Examples
        --------
        >>> print(Schedule.under(16 << 20, 8000, 100_000, 3))
        binomial checkpointing (Revolve): 100000 steps in 1150 chunks of 87 (each chunk \
differentiated from a tape of its own), 1150 snapshots, each chunk run forward at most 1 \
time; 100000 untaped step runs (recomputation factor 1.00), 1149 stores, 1149 restores
        """
        chunk, reserve = chunking(budget, state_bytes, steps, reserve, tape)
        n = -(-steps // chunk)
        s, hot = plan(budget, state_bytes, n, reserve, chunk)
        most = allowed(budget, state_bytes, n, reserve)
        return cls(n, s, allowed=most if most > s else 0, hot=hot, chunk=chunk,
                   iterations=steps if chunk > 1 else 0)

    def _span(self, a: int, b: int) -> int:
        """Iterations in the steps ``a`` to ``b``."""
        if self.chunk == 1:
            return b - a
        return min(b * self.chunk, self.iterations) - min(a * self.chunk, self.iterations)

    def _run(self) -> tuple[int, int, int]:
        capo, fine, check, valid = 0, self.steps, -1, True
        held = [0] * max(self.snapshots, 1)
        forward = stores = restores = 0
        if self.online:
            gap = 1
            while capo < self.steps:
                if (check < 0 or held[check] != capo) and capo % gap == 0:
                    if check + 1 >= self.snapshots:
                        kept = [p for p in held[:check + 1] if p % (2 * gap) == 0]
                        held[:len(kept)], check, gap = kept, len(kept) - 1, 2 * gap
                    if capo % gap == 0 and check + 1 < self.snapshots:
                        check += 1
                        held[check], stores = capo, stores + 1
                        continue
                to = min((capo // gap + 1) * gap, self.steps)
                capo, forward = to, forward + to - capo
            valid = False
        while fine > 0:
            if not valid:
                capo, valid, restores = held[check], True, restores + 1
            elif fine - capo == 1:
                fine, valid = fine - 1, False
                if check >= 0 and held[check] == fine:
                    check -= 1
            elif check < 0 or held[check] != capo:
                check += 1
                held[check], stores = capo, stores + 1
            else:
                left = self.snapshots - check
                m = fine - capo - 1 if left == 1 else _split(fine - capo, left)
                if self.hot and fine - capo > self.hot + 1:
                    m = self.hot  # the two-level schedule's top level
                capo, forward = capo + m, forward + self._span(capo, capo + m)
        return forward, stores, restores

    @property
    def repetitions(self) -> int:
        """``t``: the most times a step runs forward."""
        t = 0
        while comb(self.snapshots + t, t) < self.steps:
            t += 1
        return t

    @property
    def forward(self) -> int:
        """Steps (iterations) the scheme's FORWARD actions run (the forward sweep's
        included)."""
        return self._run()[0]

    def _untaped(self, forward: int) -> int:
        # and the last step, run at the first turn to leave the state the loop ends with
        return forward + self._span(self.steps - 1, self.steps)

    @property
    def factor(self) -> float:
        """The recomputation factor: untaped runs of an iteration, on average (1.0 when every
        state is stored); the forward sweep's own runs included, as the step run at the first
        turn (to leave the state the loop ends with), the steps' derivatives not."""
        n = self.iterations or self.steps
        return self._untaped(self.forward) / n if self.steps else 1.0

    def __str__(self) -> str:
        forward, stores, restores = self._run()
        kind = "online checkpointing, then binomial" if self.online else \
            "two-level checkpointing" if self.hot else "binomial checkpointing (Revolve)"
        unit, head = "step", f"{self.steps} steps"
        if self.chunk > 1:
            unit, head = "chunk", (f"{self.iterations} steps in {self.steps} chunks of "
                                   f"{self.chunk} (each chunk differentiated from a tape of "
                                   f"its own)")
        t = self.repetitions
        bound = "" if self.online else \
            f", each {unit} run forward at most {t} time{'s' * (t != 1)}"
        if self.hot:
            bound = (f", one every {self.hot} {unit}s, then each range of {self.hot} reversed "
                     f"storing every state (each {unit} run forward at most 2 times)")
        fewer = "" if not self.allowed else (
            f" (the budget allows {self.allowed}; {CACHE_WINDOW >> 20} MiB of snapshots stay in "
            f"cache)")
        return (f"{kind}: {head}, {self.snapshots} snapshots{fewer}{bound}; "
                f"{self._untaped(forward)} untaped step runs (recomputation factor "
                f"{self.factor:.2f}), {stores} stores, {restores} restores")


# -- the scheme as IR ------------------------------------------------------------------------
def _i64(n: int):
    return const_int(T.i64, n)


class _State:
    """Loads and stores of the scheme's state words at ``b``."""

    def __init__(self, b: IRBuilder, state) -> None:
        self.b, self.state = b, state

    def at(self, word):
        word = _i64(word) if isinstance(word, int) else word
        return self.b.gep(T.i64, self.state, [word])

    def get(self, word, name: str = ""):
        return self.b.load(T.i64, self.at(word), 8, name=name)

    def set(self, word, value) -> None:
        self.b.store(value, self.at(word), 8)

    def bump(self, word, by) -> None:
        self.set(word, self.b.add(self.get(word), by))

    def slot(self, index):
        return self.b.add(index, _i64(STATE_WORDS))


def _act(b: IRBuilder, out, flag: int, iteration, start, slot) -> None:
    b.store(const_int(T.i32, flag), out, 8)
    for k, v in ((1, iteration), (2, start), (3, slot)):
        b.store(v, b.gep(T.i8, out, [_i64(8 * k)]), 8)
    b.ret_void()


def snapshots_ir(b: IRBuilder, budget, reserve, nbytes, steps, chunk, hot=None):
    """:func:`plan` in IR (i64 values): the snapshots, and ``hot`` stored where ``hot`` (a
    pointer to an i64) is given; a call of the module's function for it."""
    module = b.block.parent.module
    fn = module.get_function(_SNAPSHOTS) or _snapshots_fn(module)
    return b.call(fn, [budget, reserve, nbytes, steps, chunk,
                       const_null(T.ptr) if hot is None else hot])


_SNAPSHOTS = "pyzyme.revolve.snapshots"


def _snapshots_fn(module):
    """``i64 snapshots(budget, reserve, nbytes, steps, chunk, ptr hot)``: :func:`plan`, with the
    same operations on doubles (no fast-math: the same results as Python's floats)."""
    fn = module.add_function(_SNAPSHOTS, T.FunctionType(T.i64, [T.i64] * 5 + [T.ptr]),
                             prefix="internal")
    budget, reserve, nbytes, steps, chunk, hot_out = fn.args
    entry, model, done = (fn.append_block(k) for k in ("entry", "model", "done"))
    b = IRBuilder(entry)
    used = b.add(b.mul(b.add(reserve, _i64(2)), nbytes), _i64(STATE_WORDS * 8))
    room = b.sub(budget, used)
    s = b.sdiv(room, b.add(nbytes, _i64(SNAPSHOT_OVERHEAD)))
    s = b.select(b.icmp("slt", room, _i64(0)), _i64(0), s)
    capped = b.and_(b.icmp("sge", steps, _i64(0)), b.icmp("slt", steps, s))
    s = b.select(capped, steps, s)
    s = b.select(b.icmp("slt", s, _i64(1)), _i64(1), s, name="allowed")
    few = b.sdiv(_i64(CACHE_WINDOW), b.add(nbytes, _i64(SNAPSHOT_OVERHEAD)), name="few")
    plain = b.or_(b.or_(b.icmp("slt", steps, _i64(0)), b.icmp("sge", few, s)),
                  b.icmp("slt", few, _i64(2)))
    b.cbranch(plain, done, model)
    b.position_at_end(model)
    all_cost = _cost_ir(fn, b, s, nbytes, steps, chunk)
    few_cost = _cost_ir(fn, b, few, nbytes, steps, chunk)
    fewer = b.fcmp("olt", few_cost, all_cost)
    best = b.select(fewer, few_cost, all_cost)
    chosen = b.select(fewer, few, s)
    f64 = T.double
    part = b.sdiv(_i64(CACHE_WINDOW // HOT_PART), b.add(nbytes, _i64(SNAPSHOT_OVERHEAD)))
    part = b.select(b.icmp("slt", part, _i64(2)), _i64(2), part)
    over = b.icmp("sgt", b.add(b.add(b.sdiv(b.sub(steps, _i64(2)), part), part), _i64(1)), s)
    ranges = b.select(over, few, part, name="ranges")
    top = b.sdiv(b.sub(steps, _i64(2)), ranges, name="top")
    two = b.add(b.add(top, ranges), _i64(1))
    runs = b.add(b.sub(steps, _i64(1)), b.mul(top, b.sub(ranges, _i64(1))))
    size = b.sitofp(nbytes, f64)
    two_cost = b.fadd(
        b.fadd(b.fmul(b.sitofp(runs, f64),
                      b.sitofp(b.mul(chunk, b.add(nbytes, _i64(STEP_FIXED))), f64)),
               b.fmul(b.fmul(b.sitofp(b.mul(steps, _i64(2)), f64), size),
                      const_float(f64, COPY_NEAR))),
        b.fmul(b.fmul(b.sitofp(b.mul(top, _i64(2)), f64), size), const_float(f64, COPY_FAR)))
    levels = b.and_(b.icmp("sle", two, s), b.fcmp("olt", two_cost, best), name="two.level")
    chosen = b.select(levels, two, chosen)
    hot = b.select(levels, ranges, _i64(0))
    b.br(done)
    last = b.block
    b.position_at_end(done)
    out = b.phi(T.i64, name="snapshots")
    out.add_incoming(s, entry)
    out.add_incoming(chosen, last)
    hot_phi = b.phi(T.i64, name="hot")
    hot_phi.add_incoming(_i64(0), entry)
    hot_phi.add_incoming(hot, last)
    store, after = fn.append_block("store.hot"), fn.append_block("out")
    b.cbranch(b.icmp("ne", hot_out, const_null(T.ptr)), store, after)
    b.position_at_end(store)
    b.store(hot_phi, hot_out, 8)
    b.br(after)
    b.position_at_end(after)
    b.ret(out)
    return fn


def _cost_ir(fn, b: IRBuilder, snaps, nbytes, steps, chunk):
    """:func:`_cost` at ``b`` (which it leaves at a block of its own after a loop)."""
    start = b.block
    grow, after = fn.append_block("grow"), fn.append_block("grown")
    b.cbranch(b.icmp("slt", _i64(1), steps), grow, after)
    b.position_at_end(grow)  # t and beta(s, t), the least t with beta >= steps
    t, beta = b.phi(T.i64, name="t"), b.phi(T.i64, name="beta")
    t.add_incoming(_i64(0), start)
    beta.add_incoming(_i64(1), start)
    t1 = b.add(t, _i64(1))
    beta1 = b.udiv(b.mul(beta, b.add(snaps, t1)), t1)
    t.add_incoming(t1, grow)
    beta.add_incoming(beta1, grow)
    b.cbranch(b.icmp("slt", beta1, steps), grow, after)
    b.position_at_end(after)
    tt, bb = b.phi(T.i64, name="t.final"), b.phi(T.i64, name="beta.final")
    for phi, first, looped in ((tt, _i64(0), t1), (bb, _i64(1), beta1)):
        phi.add_incoming(first, start)
        phi.add_incoming(looped, grow)
    runs = b.sub(b.mul(tt, steps), b.udiv(b.mul(bb, tt), b.add(snaps, _i64(1))))
    f64 = T.double
    near = b.icmp("sle", b.mul(snaps, b.add(nbytes, _i64(SNAPSHOT_OVERHEAD))),
                  _i64(CACHE_WINDOW))
    per_byte = b.select(near, const_float(f64, COPY_NEAR), const_float(f64, COPY_FAR))
    copies = b.fmul(b.fmul(b.sitofp(b.mul(steps, _i64(2)), f64), b.sitofp(nbytes, f64)),
                    per_byte)
    step = b.sitofp(b.mul(chunk, b.add(nbytes, _i64(STEP_FIXED))), f64)
    return b.fadd(b.fmul(b.sitofp(runs, f64), step), copies)


def _init(module, name: str):
    fn = module.add_function(name, T.FunctionType(T.ptr, [T.ptr, T.i64, T.i64]),
                             prefix="internal")
    data, steps, nbytes = fn.args
    b = IRBuilder(fn.append_block("entry"))
    budget = b.load(T.i64, data, 8, name="budget")
    reserve = b.load(T.i64, b.gep(T.i8, data, [_i64(8)]), 8, name="reserve")
    chunk = b.load(T.i64, b.gep(T.i8, data, [_i64(16)]), 8, name="chunk")
    hot = b.alloca(T.i64, name="hot")
    b.store(_i64(0), hot, 8)
    s = snapshots_ir(b, budget, reserve, nbytes, steps, chunk, hot)
    # _GAP: the online schedule's gap while the number of steps is not known; known at
    # entry, the two-level schedule's ranges (0: Revolve's).
    gap = b.select(b.icmp("slt", steps, _i64(0)), _i64(1), b.load(T.i64, hot, 8))
    malloc = module.declare("malloc", T.FunctionType(T.ptr, [T.i64]))
    state = b.call(malloc, [b.mul(b.add(s, _i64(STATE_WORDS)), _i64(8))], name="state")
    st = _State(b, state)
    storage = b.call(malloc, [b.mul(b.add(s, _i64(2)), nbytes)], name="storage")
    for word, value in ((_N, steps), (_S, s), (_BYTES, nbytes), (_CAPO, _i64(0)),
                        (_FINE, steps), (_CHECK, _i64(-1)), (_VALID, _i64(1)),
                        (_FIRST, _i64(1)), (_FORWARDS, _i64(0)), (_TURNS, _i64(0)),
                        (_STORES, _i64(0)), (_RESTORES, _i64(0)), (_GAP, gap)):
        st.set(word, value)
    b.store(storage, st.at(_STORAGE), 8)
    b.ret(state)
    return fn


def _next(module, name: str):
    fn = module.add_function(name, T.FunctionType(T.void, [T.ptr, T.ptr]), prefix="internal")
    state, out = fn.args
    blocks = {k: fn.append_block(k) for k in (
        "entry", "done", "live", "restore", "valid", "turn", "placed", "store", "advance",
        "quadratic", "binomial", "grow", "split", "forward", "known")}
    b = IRBuilder(blocks["entry"])
    st = _State(b, state)
    b.cbranch(b.icmp("slt", st.get(_N), _i64(0)), _online(module, fn, state, out, name),
              blocks["known"])
    b.position_at_end(blocks["known"])
    fine = st.get(_FINE, "fine")
    b.cbranch(b.icmp("sle", fine, _i64(0)), blocks["done"], blocks["live"])
    b.position_at_end(blocks["done"])
    _act(b, out, _DONE, _i64(0), _i64(0), _i64(0))

    b.position_at_end(blocks["live"])
    b.cbranch(b.icmp("eq", st.get(_VALID), _i64(0)), blocks["restore"], blocks["valid"])
    b.position_at_end(blocks["restore"])  # the working state is lost: back to the top slot
    check = st.get(_CHECK, "check")
    held = st.get(st.slot(check), "held")
    st.set(_CAPO, held)
    st.set(_VALID, _i64(1))
    _act(b, out, _RESTORE, held, held, check)

    b.position_at_end(blocks["valid"])
    capo = st.get(_CAPO, "capo")
    length = b.sub(fine, capo, name="length")
    b.cbranch(b.icmp("eq", length, _i64(1)), blocks["turn"], blocks["placed"])
    b.position_at_end(blocks["turn"])  # the last step of the range: differentiate it
    first = st.get(_FIRST)
    flag = b.select(b.icmp("ne", first, _i64(0)), const_int(T.i32, _FIRSTUTURN),
                    const_int(T.i32, _UTURN))
    st.set(_FIRST, _i64(0))
    st.set(_FINE, capo)
    st.set(_VALID, _i64(0))
    st.bump(_TURNS, _i64(1))
    check = st.get(_CHECK)
    top = st.get(st.slot(b.select(b.icmp("slt", check, _i64(0)), _i64(0), check)))
    done_with = b.and_(b.icmp("sge", check, _i64(0)), b.icmp("eq", top, capo))
    st.set(_CHECK, b.select(done_with, b.sub(check, _i64(1)), check))
    b.store(flag, out, 8)
    for k, v in ((1, fine), (2, capo), (3, _i64(0))):
        b.store(v, b.gep(T.i8, out, [_i64(8 * k)]), 8)
    b.ret_void()

    b.position_at_end(blocks["placed"])  # is the state at capo in the top slot?
    check = st.get(_CHECK, "check")
    top = st.get(st.slot(b.select(b.icmp("slt", check, _i64(0)), _i64(0), check)))
    unsaved = b.or_(b.icmp("slt", check, _i64(0)), b.icmp("ne", top, capo))
    b.cbranch(unsaved, blocks["store"], blocks["advance"])
    b.position_at_end(blocks["store"])
    slot = b.add(check, _i64(1), name="slot")
    st.set(st.slot(slot), capo)
    st.set(_CHECK, slot)
    _act(b, out, _STORE, capo, capo, slot)

    b.position_at_end(blocks["advance"])
    snaps = b.sub(st.get(_S), check, name="snaps")  # the top slot's and the free ones
    b.cbranch(b.icmp("eq", snaps, _i64(1)), blocks["quadratic"], blocks["binomial"])
    b.position_at_end(blocks["quadratic"])  # no free slot: up to the range's last step
    quadratic = b.sub(length, _i64(1))
    b.br(blocks["forward"])

    b.position_at_end(blocks["binomial"])
    b.br(blocks["grow"])
    b.position_at_end(blocks["grow"])  # t and beta(s, t), the least t with beta >= length
    t = b.phi(T.i64, name="t")
    beta = b.phi(T.i64, name="beta")
    t.add_incoming(_i64(0), blocks["binomial"])
    beta.add_incoming(_i64(1), blocks["binomial"])
    t1 = b.add(t, _i64(1))
    beta1 = b.udiv(b.mul(beta, b.add(snaps, t1)), t1)
    t.add_incoming(t1, blocks["grow"])
    beta.add_incoming(beta1, blocks["grow"])
    b.cbranch(b.icmp("slt", beta1, length), blocks["grow"], blocks["split"])
    b.position_at_end(blocks["split"])
    upper = b.udiv(b.mul(beta1, t1), b.add(snaps, t1), name="upper")
    right = b.udiv(b.mul(upper, snaps), b.sub(b.add(snaps, t1), _i64(1)))
    rest = b.sub(length, right)
    binomial = b.select(b.icmp("slt", upper, rest), upper, rest)
    b.br(blocks["forward"])

    b.position_at_end(blocks["forward"])
    m = b.phi(T.i64, name="m")
    m.add_incoming(quadratic, blocks["quadratic"])
    m.add_incoming(binomial, blocks["split"])
    hot = st.get(_GAP, "hot")  # the two-level schedule's top level: a snapshot every hot steps
    top = b.and_(b.icmp("ne", hot, _i64(0)), b.icmp("sgt", length, b.add(hot, _i64(1))))
    m = b.select(top, hot, m)
    to = b.add(capo, m, name="to")
    st.set(_CAPO, to)
    st.bump(_FORWARDS, m)
    _act(b, out, _FORWARD, to, capo, _i64(0))
    return fn


def _online(module, fn, state, out, name: str):
    """The block of ``next`` while the number of steps is not known (a while loop): a
    snapshot every ``gap`` steps; when the slots are full, every other one is let go and the
    gap doubles, so the snapshots stay spread over the steps run so far (after Stumm &
    Walther's online checkpointing, in its simplest form: the binomial schedule takes over
    between them once the loop has ended)."""
    start = fn.append_block("online")
    want, thin, stored, ahead = (fn.append_block(f"online.{k}")
                                 for k in ("want", "thin", "store", "forward"))
    b = IRBuilder(start)
    st = _State(b, state)
    capo = st.get(_CAPO, "capo")
    check = st.get(_CHECK, "check")
    top = st.get(st.slot(b.select(b.icmp("slt", check, _i64(0)), _i64(0), check)))
    unsaved = b.or_(b.icmp("slt", check, _i64(0)), b.icmp("ne", top, capo))
    on_mark = b.icmp("eq", b.urem(capo, st.get(_GAP)), _i64(0))
    b.cbranch(b.and_(unsaved, on_mark), want, ahead)
    b.position_at_end(want)
    full = b.icmp("sge", b.add(check, _i64(1)), st.get(_S))
    b.cbranch(full, thin, stored)
    b.position_at_end(thin)
    b.call(_thin(module, f"{name}.thin"), [state])
    still = b.and_(b.icmp("eq", b.urem(capo, st.get(_GAP)), _i64(0)),
                   b.icmp("slt", b.add(st.get(_CHECK), _i64(1)), st.get(_S)))
    b.cbranch(still, stored, ahead)
    b.position_at_end(stored)
    slot = b.add(st.get(_CHECK), _i64(1), name="slot")
    st.set(st.slot(slot), capo)
    st.set(_CHECK, slot)
    _act(b, out, _STORE, capo, capo, slot)
    b.position_at_end(ahead)  # to the next mark; the driver stops where the loop ends
    gap = st.get(_GAP)
    to = b.mul(b.add(b.udiv(capo, gap), _i64(1)), gap, name="to")
    st.set(_CAPO, to)
    st.bump(_FORWARDS, b.sub(to, capo))
    _act(b, out, _FORWARD, to, capo, _i64(0))
    return start


def _thin(module, name: str):
    """``void thin(state)``: keep the snapshots at multiples of twice the gap (moved down to
    the first slots, in order), and double the gap."""
    fn = module.add_function(name, T.FunctionType(T.void, [T.ptr]), prefix="internal")
    entry, loop, keep, move, kept, done = (fn.append_block(k) for k in (
        "entry", "slot", "keep", "move", "kept", "done"))
    b = IRBuilder(entry)
    st = _State(b, fn.args[0])
    check, gap2 = st.get(_CHECK), b.mul(st.get(_GAP), _i64(2))
    nbytes, storage = st.get(_BYTES), b.load(T.ptr, st.at(_STORAGE), 8)
    b.br(loop)
    b.position_at_end(loop)
    j, w = b.phi(T.i64, name="j"), b.phi(T.i64, name="w")
    j.add_incoming(_i64(0), entry)
    w.add_incoming(_i64(0), entry)
    pos = st.get(st.slot(j))
    next_w = b.add(w, _i64(1))
    b.cbranch(b.icmp("eq", b.urem(pos, gap2), _i64(0)), keep, kept)
    b.position_at_end(keep)
    b.cbranch(b.icmp("ne", j, w), move, kept)
    b.position_at_end(move)
    memcpy = module.declare("llvm.memcpy.p0.p0.i64",
                            T.FunctionType(T.void, [T.ptr, T.ptr, T.i64, T.i1]))
    place = [b.gep(T.i8, storage, [b.mul(b.add(x, _i64(2)), nbytes)]) for x in (w, j)]
    b.call(memcpy, [place[0], place[1], nbytes, const_int(T.i1, 0)])
    st.set(st.slot(w), pos)
    b.br(kept)
    b.position_at_end(kept)
    w1 = b.phi(T.i64, name="w1")
    w1.add_incoming(w, loop)
    w1.add_incoming(next_w, keep)
    w1.add_incoming(next_w, move)
    j1 = b.add(j, _i64(1))
    j.add_incoming(j1, kept)
    w.add_incoming(w1, kept)
    b.cbranch(b.icmp("sle", j1, check), loop, done)
    b.position_at_end(done)
    st.set(_CHECK, b.sub(w1, _i64(1)))
    st.set(_GAP, gap2)
    b.ret_void()
    return fn


def _set_nsteps(module, name: str):
    """``void set_nsteps(state, n)``: the loop ended after ``n`` steps; the state the driver
    holds is the one after them, so the reverse part starts by restoring a snapshot."""
    fn = module.add_function(name, T.FunctionType(T.void, [T.ptr, T.i64]), prefix="internal")
    b = IRBuilder(fn.append_block("entry"))
    st = _State(b, fn.args[0])
    n = fn.args[1]
    st.bump(_FORWARDS, b.sub(n, st.get(_CAPO)))  # the last FORWARD stopped at n
    for word, value in ((_N, n), (_FINE, n), (_CAPO, n), (_VALID, _i64(0)), (_GAP, _i64(0))):
        st.set(word, value)
    b.ret_void()
    return fn


def _copy(module, name: str, restore: bool):
    """``store`` (or ``restore``): the regions to (from) the slot's place in the storage."""
    fn = module.add_function(name, T.FunctionType(T.void, [T.ptr, T.i64, T.i64, T.ptr, T.i64]),
                             prefix="internal")
    state, slot, _step, regions, count = fn.args
    entry, loop, done = (fn.append_block(n) for n in ("entry", "region", "copied"))
    b = IRBuilder(entry)
    st = _State(b, state)
    nbytes = st.get(_BYTES)
    storage = b.load(T.ptr, st.at(_STORAGE), 8)
    place = b.gep(T.i8, storage, [b.mul(b.add(slot, _i64(2)), nbytes)], name="place")
    st.bump(_RESTORES if restore else _STORES, _i64(1))
    b.cbranch(b.icmp("sgt", count, _i64(0)), loop, done)
    b.position_at_end(loop)
    k = b.phi(T.i64, name="k")
    offset = b.phi(T.i64, name="offset")
    k.add_incoming(_i64(0), entry)
    offset.add_incoming(_i64(0), entry)
    region = b.gep(T.i8, regions, [b.mul(k, _i64(24))])
    pointer = b.load(T.ptr, region, 8)
    size = b.load(T.i64, b.gep(T.i8, region, [_i64(8)]), 8)
    saved = b.gep(T.i8, place, [offset])
    memcpy = module.declare("llvm.memcpy.p0.p0.i64",
                            T.FunctionType(T.void, [T.ptr, T.ptr, T.i64, T.i1]))
    dst, src = (pointer, saved) if restore else (saved, pointer)
    b.call(memcpy, [dst, src, size, const_int(T.i1, 0)])
    k1 = b.add(k, _i64(1))
    k.add_incoming(k1, loop)
    offset.add_incoming(b.add(offset, size), loop)
    b.cbranch(b.icmp("slt", k1, count), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _finalize(module, name: str):
    fn = module.add_function(name, T.FunctionType(T.void, [T.ptr]), prefix="internal")
    b = IRBuilder(fn.append_block("entry"))
    free = module.declare("free", T.FunctionType(T.void, [T.ptr]))
    b.call(free, [b.load(T.ptr, b.gep(T.i64, fn.args[0], [_i64(_STORAGE)]), 8)])
    b.call(free, [fn.args[0]])
    b.ret_void()
    return fn


def scheme(module, prefix: str = "pyzyme.revolve"):
    """The Revolve scheme of ``module`` (made once): a constant ``EnzymeCheckpointScheme``
    whose functions are defined in the module. Its ``data`` is three i64: the budget in bytes,
    the states one step's derivative is reserved and the iterations a step runs (see
    :func:`plan`)."""
    found = module.get_global(prefix)
    if found is not None:
        return found
    fns = [_init(module, f"{prefix}.init"), _next(module, f"{prefix}.next"),
           _copy(module, f"{prefix}.store", False), _copy(module, f"{prefix}.restore", True),
           _set_nsteps(module, f"{prefix}.set_nsteps"), _finalize(module, f"{prefix}.finalize"),
           None, None, None]
    value = ConstantAggregate(_SCHEME, [const_int(T.i32, 1)]
                              + [fn if fn is not None else const_null(T.ptr) for fn in fns])
    return module.add_global(prefix, _SCHEME, value, is_constant=True, prefix="internal")
