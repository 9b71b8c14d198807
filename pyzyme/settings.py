"""Options that change the code of a derivative, in one frozen value.

The code generators (:mod:`pyzyme.diff`) take an :class:`Options` as an argument and read no
global state. The API layer holds the one process default that ``set_runtime_activity``
changes, snapshots it (:func:`current`) when it looks a derivative up, and keys its cache on the
snapshot: a derivative compiled under one setting is never returned under another.

Examples
--------
>>> import pyzyme
>>> current().runtime_activity
False
>>> pyzyme.set_runtime_activity(True)
>>> current()
Options(runtime_activity=True, distribute_loops=True, interchange_loops=True, \
split_loops=True, version_strides=True, rebase_views=True, mirror_lanes=True, \
reassociate_adjoints=True, strong_zero=True, recursion_stack=268435456, tape_budget=None, \
flush_subnormals=False)
>>> pyzyme.set_runtime_activity(False)
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace

__all__ = ["Options", "current", "options", "set_options", "set_runtime_activity", "using"]


@dataclass(frozen=True)
class Options:
    """What a derivative is generated under.

    Parameters
    ----------
    runtime_activity
        Enzyme's ``runtimeActivity``: a pointer whose activity is known only at run time (a
        merge of memory that has a shadow with memory that has none, e.g.
        ``a = x if flag else c`` with ``x`` Duplicated and ``c`` Const) gets its primal as
        shadow where it has none, and the loads, stores and reference counts that go through
        it check at run time whether its shadow is its primal (then no derivative is read or
        written). Off, pyzyme raises :class:`~pyzyme.ActivityError` for such a pointer instead.
        As in Enzyme, a derivative stored through such a pointer on a run where it is Const
        memory is dropped: temporaries that carry derivatives must still be Duplicated.
    distribute_loops
        Split a reverse loop whose accumulations into memory depend on one another from one
        iteration to the next (a stencil's adjoint) into one loop per accumulation, behind a
        run-time check that the arrays do not overlap (:mod:`pyzyme.transforms.distribute`): the
        results are bitwise the same (with ``reassociate_adjoints`` off) and the loops
        vectorize. In forward mode, run the tangents of a one-block loop that need none of the
        primal's values (a linear stencil's) in a copy of the loop after it
        (:mod:`pyzyme.diff.forward.fission`): half the arrays streamed per loop. On by
        default; off to compare.
    interchange_loops
        Before differentiating a function (either mode), turn a loop nest that keeps a sum in
        a register over its inner loop and strides through memory there (a triple-loop matrix
        multiply) so that its inner loop runs along rows, the sums kept in their cells
        (:mod:`pyzyme.transforms.interchange`): bitwise the same primal results (and derivatives,
        where each array is read at one place), every sweep contiguous. Only calls whose
        arrays do not overlap qualify. On by default; off to compare.
    split_loops
        Before differentiating a function (either mode) and the body of each parallel loop, run
        a loop that skips one index (``for j in range(n): if j != i: ...``) as two loops
        without the test, over the indices before and after it
        (:mod:`pyzyme.transforms.index_split`): the same iterations in the same order (bitwise
        the same results), and bodies that vectorize without masks. On by default; off to
        compare.
    version_strides
        Before differentiating a function (either mode, a parallel loop's body too), give it a
        second version for the row length its loops suggest of a 2-D array whose rows they
        read a few columns at a time (``pos[j, 0]``, ``pos[j, 1]``, ``pos[j, 2]`` of an
        ``(n, 3)`` array), run where the array's rows have that length
        (:mod:`pyzyme.transforms.stride_versions`): with the row length a constant, LLVM can
        vectorize the reverse loop that adds into those rows, which it cannot prove safe for a
        length known only at run time. Bitwise the same results; the code to differentiate
        and compile is twice as large. On by default; off to compare.
    rebase_views
        Before a reverse-mode derivative, give a parallel loop whose body reads several
        slices of one array (``w[:-2, 1:-1] + w[2:, 1:-1] + ...``) a copy of its body that
        reads them as one array at constant offsets, launched where a test before the launch
        finds them so (:mod:`pyzyme.transforms.view_bases`): the reverse sweep then adds into
        the cells each iteration owns without atomics. The same results; twice the code for
        such a loop. On by default; off to compare.
    mirror_lanes
        After LLVM's optimization, rewrite a vector loop that walks memory downwards (a reverse
        sweep's loops run backwards) with its lanes kept in memory order, where that takes fewer
        permutations (:mod:`pyzyme.runtime.mirrored_lanes`): the reversal LLVM puts after each
        load and before each store vanishes. The same values, lane for lane. On by default;
        off to compare.
    reassociate_adjoints
        Let LLVM add up the contributions to one adjoint in any order (``reassoc`` on the sums
        that accumulate them, :func:`pyzyme.diff.reverse.adjoints.sum_flags`), as XLA's
        reductions do, so that the reverse of a vectorized loop that scatters a value (``y +=
        a * x``) vectorizes as the reduction it becomes (``x_bar += dot(a, y_bar)``). The
        primal's own arithmetic keeps its order. On by default; off, the adjoints are summed
        exactly in the reverse sweep's order, so derivatives built under other options (or
        for other active arguments) agree bitwise where their sums run in the same order.
    strong_zero
        A zero adjoint or tangent contributes nothing, even through an infinite or NaN partial:
        the derivative of ``sqrt`` at 0 in a branch that was not taken (its adjoint is zero)
        does not turn the whole gradient into NaN, as ``0 * inf`` would (Enzyme's strong zero;
        JAX users write the "double where" for this). Only products whose partial can be
        non-finite for finite inputs are guarded (:mod:`pyzyme.analysis.finite`), with a
        compare and a select. On by default; off, derivative arithmetic is plain IEEE.
    recursion_stack
        Bytes of stack (a power of two, at least 1 MiB) that a derivative reaching a recursive
        function runs on: a stack of its own, reserved when first needed and committed only as
        it is used (:mod:`pyzyme.diff.side_stack`), because such a derivative's frames are
        larger than the primal's (it keeps adjoints and tape pointers beside the primal's
        values) and the thread's own stack (8 MiB by default on Linux) would overflow at
        depths the primal reaches. Recursion deeper than it allows raises
        :class:`~pyzyme.RecursionDepthError`. Default 256 MiB: 32 times Linux's default
        stack.
    tape_budget
        Bytes (None: no limit) that a reverse-mode derivative may hold for its sweeps: the
        outermost counted loops of the function are checkpointed
        (:mod:`pyzyme.transforms.checkpoint_loops`): the reverse sweep keeps snapshots of
        their carried state as many as the budget allows, on Revolve's binomial schedule, and
        recomputes the steps between them instead of taping every step. A derivative whose
        single loop iteration needs more than the budget raises
        :class:`~pyzyme.TapeBudgetError` saying how much one iteration needs.
    flush_subnormals
        Run the derivative with the calling thread's x86 floating-point unit flushing
        subnormal numbers (magnitudes below 2.2e-308 in double precision) to zero, results and
        operands alike (MXCSR's FTZ and DAZ bits, set on entry and restored on return:
        :mod:`pyzyme.diff.float_env`), as JAX does on CPUs. Arithmetic on subnormals takes a
        microcode assist of about 150 cycles per operation, and reverse mode meets them where
        the primal does not: a softmax weight that underflows to a subnormal scales every
        adjoint of its term (GradBench's gmm at D = 64: 2.1-2.7x the primal with it, 3.6-4.5x
        without). Off by default, since it changes results: a value that would be subnormal
        is zero, in the derivative's own run of the primal's code too (``log`` of it is
        ``-inf``). Threads of a parallel region and other platforms keep IEEE arithmetic.
    """

    runtime_activity: bool = False
    distribute_loops: bool = True
    interchange_loops: bool = True
    split_loops: bool = True
    version_strides: bool = True
    rebase_views: bool = True
    mirror_lanes: bool = True
    reassociate_adjoints: bool = True
    strong_zero: bool = True
    recursion_stack: int = 256 << 20
    tape_budget: int | None = None
    flush_subnormals: bool = False

    def __post_init__(self) -> None:
        budget = self.tape_budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                                   or budget <= 0):
            raise ValueError(f"tape_budget must be a positive number of bytes or None; "
                             f"got {budget!r}")
        n = self.recursion_stack
        if not isinstance(n, int) or n < 1 << 20 or n & (n - 1):
            raise ValueError(f"recursion_stack must be a power of two of at least 1 MiB "
                             f"(1 << 20 bytes); got {n!r}")

    @property
    def tag(self) -> str:
        """Text that tells derivatives built under these options apart (added to the inputs
        of generated symbol names); empty for the defaults, so their names do not change."""
        return "" if self == Options() else repr(self)


# The process default (set_runtime_activity), and the snapshot a build in progress runs under.
# _lock is a leaf: nothing else is taken while it is held, so it cannot deadlock.
_lock = threading.Lock()
_default = [Options()]
_active: contextvars.ContextVar[Options | None] = contextvars.ContextVar("pyzyme_options",
                                                                        default=None)


def current() -> Options:
    """The options a derivative built now gets: those pinned by :func:`using`, else the
    process default."""
    pinned = _active.get()
    return pinned if pinned is not None else _default[0]


@contextlib.contextmanager
def using(options: Options) -> Iterator[Options]:
    """Pin ``options`` for the current thread (or task) while a derivative is built, so a
    concurrent ``set_runtime_activity`` cannot change it half way through."""
    token = _active.set(options)
    try:
        yield options
    finally:
        _active.reset(token)


def _changed(base: Options, settings: dict) -> Options:
    """``base`` with ``settings`` (fields of :class:`Options`) changed, each checked."""
    fields = Options.__dataclass_fields__
    changes = {}
    for name, value in settings.items():
        if name not in fields:
            raise TypeError(f"no option {name!r}; the options are {', '.join(sorted(fields))}")
        if isinstance(fields[name].default, bool):
            if not isinstance(value, (bool, int)):
                raise TypeError(f"option {name} takes True or False, got {value!r}")
            value = bool(value)
        changes[name] = value
    return replace(base, **changes)


@contextlib.contextmanager
def options(**settings) -> Iterator[Options]:
    """Build the derivatives asked for inside the ``with`` block under ``settings`` (fields
    of :class:`Options`, the others as they are now), for the current thread (or task).

    Derivatives are cached under the options they were built with, so a derivative asked for
    inside the block is built (or found) under the block's options, one asked for after it
    under the options then in force.

    Examples
    --------
    >>> import pyzyme
    >>> with pyzyme.options(tape_budget=16 << 20) as opts:
    ...     opts.tape_budget
    16777216
    >>> pyzyme.settings.current().tape_budget is None
    True
    """
    with using(_changed(current(), settings)) as pinned:
        yield pinned


def set_runtime_activity(flag: bool = True) -> None:
    """Turn run-time activity checks on or off for derivatives built from now on (default
    off); derivatives built under the other setting stay cached under it.

    Parameters
    ----------
    flag
        True: a pointer whose shadow may be its primal at run time gets that shadow, and the
        derivative loads and stores through it check ``shadow == primal`` first (Enzyme's
        ``runtimeActivity``; a little slower). False: such a pointer raises
        :class:`~pyzyme.ActivityError` when the derivative is built.

    Examples
    --------
    >>> import numpy as np, pyzyme
    >>> def pick(x, c, flag):
    ...     a = x if flag else c
    ...     return a[0] * a[0] + x[1]
    >>> x, dx = np.array([3.0, 1.0]), np.zeros(2)
    >>> pyzyme.set_runtime_activity(True)
    >>> pyzyme.autodiff(pyzyme.Reverse, pick, pyzyme.Duplicated(x, dx),
    ...                 pyzyme.Const(np.array([5.0, 0.0])), pyzyme.Const(True))
    ((None, None, None),)
    >>> dx
    array([6., 1.])
    >>> pyzyme.set_runtime_activity(False)
    """
    if not isinstance(flag, (bool, int)):
        raise TypeError(f"set_runtime_activity takes True or False, got {flag!r}")
    with _lock:
        _default[0] = replace(_default[0], runtime_activity=bool(flag))


def set_options(**settings) -> None:
    """Change the options derivatives built from now on are generated under (the fields of
    :class:`Options`); derivatives built under other settings stay cached under them.

    Parameters
    ----------
    **settings
        ``strong_zero``, ``runtime_activity``, ``distribute_loops``, ``interchange_loops``,
        ``split_loops``, ``version_strides``, ``rebase_views``, ``mirror_lanes``,
        ``reassociate_adjoints``, ``flush_subnormals``: True or False; ``recursion_stack``:
        bytes (a power of two); ``tape_budget``: bytes, or None for no limit.

    Examples
    --------
    >>> import math, pyzyme
    >>> def f(x):
    ...     r = math.sqrt(x)
    ...     return r if x > 1.0 else 0.0
    >>> pyzyme.autodiff(pyzyme.Reverse, f, pyzyme.Active(0.0))   # the sqrt branch not taken
    ((0.0,),)
    >>> pyzyme.set_options(strong_zero=False)
    >>> pyzyme.autodiff(pyzyme.Reverse, f, pyzyme.Active(0.0))   # 0 * inf by IEEE rules
    ((nan,),)
    >>> pyzyme.set_options(strong_zero=True)
    """
    with _lock:
        _default[0] = _changed(_default[0], settings)
