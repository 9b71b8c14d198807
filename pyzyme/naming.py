"""Every name pyzyme gives to generated functions, values and compiled symbols, in one place.

Function names follow Enzyme's (``fwddiffe_f``), so generated IR reads like Enzyme's output.
Value names derive from the primal value's name, so a tangent is easy to find next to its primal.

Examples
--------
>>> forward_function("f", 1), forward_function("f", 4)
('fwddiffe_f', 'fwddiffe4_f')
>>> tangent("acc", 0, 1), tangent("acc", 2, 4), tangent("", 0, 1)
("acc'", "acc'2", '')
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

__all__ = ["symbol_name", "linked_original", "forward_function", "tangent", "tangent_loop",
           "shadow_param", "partial", "reverse_function",
           "augmented_function", "shadow", "adjoint", "seed", "iteration", "reverse_block",
           "came_from", "loop_entry", "loop_start", "rule_value", "distributed_check",
           "distributed_part", "distributed_reset", "fused_block",
           "stride_version", "stride_test", "views_rebased", "views", "capacity_hint", "sum_base",
           "repeated", "repeat_base", "moved", "parallel_body",
           "PARALLEL_BODY", "PARALLEL_CONSTANT", "PARALLEL_DISCARD", "CHECKPOINT_FOR",
           "CHECKPOINT_WHILE",
           "CHECKPOINT_BUDGET_ERROR",
           "checkpoint_driver", "is_checkpoint_sweep", "checkpoint_step", "FIXED_POINT",
           "fixed_point_driver", "fixed_point_step", "framework_op", "HELPERS",
           "DIGAMMA", "POW_LESS1", "INT_POWER", "INT_POWER_PAIR", "ZERO_REMAINDER",
           "MATH_HELPERS",
           "zero_remainder", "STATUS_PARAMS", "takes_status_params"]


def forward_function(primal: str, width: int) -> str:
    """The forward-mode derivative of function ``primal`` at batch ``width``."""
    return f"fwddiffe{'' if width == 1 else width}_{primal}"


def tangent(primal: str, lane: int, width: int) -> str:
    """The tangent (or shadow) of value ``primal`` in batch lane ``lane``; unnamed stays so."""
    if not primal:
        return ""
    return f"{primal}'" if width == 1 else f"{primal}'{lane}"


def tangent_loop(block: str) -> str:
    """The copy of one-block loop ``block`` of a forward derivative that runs its tangents
    after it (:mod:`pyzyme.diff.forward.fission`)."""
    return f"{block or 'loop'}.tangents"


def shadow_param(primal: str, lane: int, width: int) -> str:
    """The parameter carrying the shadow or tangent of parameter ``primal``."""
    return tangent(primal or "arg", lane, width)


def partial(primal: str, operand: int) -> str:
    """The partial derivative of value ``primal`` with respect to operand ``operand``."""
    return f"{primal}.d{operand}" if primal else ""


def reverse_function(primal: str, split: bool = False) -> str:
    """The reverse-mode derivative of ``primal``: combined (Enzyme's ``diffe``) or the reverse
    half of a split pair."""
    return f"{'reverse' if split else 'diffe'}_{primal}"


def augmented_function(primal: str) -> str:
    """The augmented primal of ``primal``: runs it and returns its tape."""
    return f"augmented_{primal}"


def shadow(primal: str) -> str:
    """The shadow of pointer ``primal`` in reverse mode."""
    return f"{primal}'" if primal else ""


def adjoint(primal: str) -> str:
    """The adjoint of value ``primal`` (Enzyme's ``'de`` suffix)."""
    return f"{primal}'de" if primal else ""


def seed() -> str:
    """The parameter holding the seed of an active result."""
    return "dret"


def iteration(block: str) -> str:
    """The forward sweep's iteration number of the loop headed by ``block``."""
    return f"{block or 'loop'}.iter"


def reverse_block(block: str) -> str:
    """The reverse-sweep block of primal block ``block``."""
    return f"invert{'.' + block if block else ''}"


def came_from(block: str) -> str:
    """The recorded number of the predecessor that entered ``block``."""
    return f"{block or 'block'}.from"


def loop_entry(header: str) -> str:
    """The forward block on an edge entering the loop headed by ``header``."""
    return f"{header or 'loop'}.enter"


def loop_start(header: str) -> str:
    """The loop counter's value when the current run of the loop began."""
    return f"{header or 'loop'}.start"


def distributed_check(block: str) -> str:
    """The block before a distributed loop that tests its arrays for overlap."""
    return f"{block or 'loop'}.distribute"


def distributed_part(block: str, k: int) -> str:
    """Loop ``k`` of the loops that loop ``block`` was distributed into."""
    return f"{block or 'loop'}.part{k}"


def distributed_reset(block: str, k: int) -> str:
    """The block that resets the counter before loop ``k`` of a distributed loop."""
    return f"{block or 'loop'}.reset{k}"


def fused_block(block: str, part: str) -> str:
    """A block of loop ``block`` fused with shifts: ``part`` is ``first`` (peeled first
    iterations), ``loop`` or ``last`` (peeled last iterations)."""
    return f"{block or 'loop'}.fused.{part}"


def interchanged(block: str, part: str) -> str:
    """A block of the nest headed by ``block``, interchanged before differentiation:
    ``part`` is ``init`` (the sums' cells set to their starting values), ``outer``, ``inner``
    or ``latch`` (of the interchanged loops)."""
    return f"{block or 'loop'}.interchange.{part}"


def index_split(block: str, part: str) -> str:
    """A block of a loop split around the index its header skips, before differentiation
    (:mod:`pyzyme.transforms.index_split`): ``part`` is ``check``, ``enter``, ``between`` or
    ``after`` (blocks around the copies), or ``first`` / ``second`` (the copies of the
    loop's block ``block``)."""
    return f"{block or 'loop'}.skip.{part}"


def stride_version(block: str, columns: Sequence[int] | None) -> str:
    """A block of a function versioned on its arrays' row strides before differentiation
    (:mod:`pyzyme.transforms.stride_versions`): block ``block``'s copy in the version where
    the strides are the constants ``columns``; with None, the block holding what followed the
    test in the entry block ``block``, where the original version starts. With ``block``
    empty, the suffix that names the copies.

    >>> stride_version("loop", [3]), stride_version("loop", [3, 4])
    ('loop.stride3', 'loop.stride3x4')
    >>> stride_version("entry", None), stride_version("", [3])
    ('entry.rest', '.stride3')
    """
    if columns is None:
        return f"{block}.rest"
    return f"{block}.stride{'x'.join(map(str, columns))}"


def views_rebased(function: str) -> str:
    """The copy of parallel loop body ``function`` in which the views of one array are moved
    from one pointer (:mod:`pyzyme.transforms.view_bases`).

    >>> views_rebased("__gufunc__.f")
    '__gufunc__.f.views'
    """
    return f"{function}.views"


def views(part: str) -> str:
    """A value or block :mod:`pyzyme.transforms.view_bases` makes: ``apart`` (the test that
    the views are where the copy puts them), ``rebased`` and ``as.written`` (the blocks
    launching the copy and the body), ``rows`` and ``stride`` (a row's length in elements and
    in bytes, in the copy), ``slotK`` (slot ``K``'s view moved from its group's first).

    >>> views("apart"), views("slot3")
    ('views.apart', 'views.slot3')
    """
    return f"views.{part}"


def stride_test(columns: Sequence[int]) -> str:
    """The test that row strides are the constants ``columns`` (one compare per stride, and
    the ``and`` of several), the last of which chooses the version of a function
    (:mod:`pyzyme.transforms.stride_versions`); a function whose entry block ends in a branch
    on one is versioned already. Every such name starts with ``stride_test([])``.

    >>> stride_test([3]), stride_test([3, 4]), stride_test([])
    ('stride.is3', 'stride.is3x4', 'stride.is')
    """
    return f"stride.is{'x'.join(map(str, columns))}"


def capacity_hint(function: str, header: str) -> str:
    """The global remembering the largest capacity the caches of loop ``header`` in
    ``function`` reached (:meth:`pyzyme.diff.tape.cache.TapeCache.grow`)."""
    return f"pyzyme.hint.{function}.{header or 'loop'}"


def sum_base(inner: str, outer: str) -> str:
    """The counter of loop ``inner`` when a run of the loop ``outer`` around it began (a
    :class:`pyzyme.diff.reverse.inductions.CountedSum` counts from there)."""
    return f"{inner or 'loop'}.count.at.{outer or 'loop'}"


def repeated(inner: str, outer: str) -> str:
    """Loop ``inner`` counted within one iteration of loop ``outer``: names the capacity of
    the caches that hold one iteration's worth
    (:meth:`pyzyme.diff.tape.cache.TapeCache.repeated`), its hint, and the blocks growing
    them."""
    return f"{inner or 'loop'}.in.{outer or 'loop'}"


def repeat_base(inner: str, outer: str) -> str:
    """The counter of loop ``inner`` as each iteration of loop ``outer`` began."""
    return f"{inner or 'loop'}.count.each.{outer or 'loop'}"


def zero_remainder(remainder: str) -> str:
    """The signed zero of Python's ``x % y`` where the remainder ``remainder`` is zero, given
    the remainder's derivative (:mod:`pyzyme.transforms.zero_remainder`)."""
    return f"{remainder or 'remainder'}.zero"


def int_power(block: str) -> str:
    """The block that replaces the binary-exponentiation loop ``block`` by a call
    (:mod:`pyzyme.transforms.int_power`)."""
    return f"{block or 'loop'}.int_power"


def rule_value(part: str) -> str:
    """A value read from (or made for) a user rule's call: ``part`` is ``result`` (its result
    slot), ``status``, ``primal``, ``tangent``, ``shadow``, ``tape``, ``dret``, ``adjoint``
    or ``ref`` (a reference to release)."""
    return f"rule.{part}"


def moved(primal: str, part: str) -> str:
    """A value of the shadow where call ``primal`` moves a list's block
    (:mod:`pyzyme.diff.calls.resize`): ``part`` is ``old`` (the shadow's old block),
    ``size`` (its size) or ``new`` (the block it moved to)."""
    return f"{tangent(primal or 'block', 0, 1)}.{part}"


#: The metadata kind marking a reverse sweep's read of a value its forward sweep kept (from
#: the tape or a loop cache) that no active input changes: forward mode over the derivative
#: (hvp) gives it no tangent, though the tape it comes from has a shadow.
CONSTANT_RELOAD = "pyzyme.constant"

#: The metadata kind marking a reverse sweep's test that a loop's adjoints are all zero, so
#: that a run of its reverse is skipped (:mod:`pyzyme.diff.reverse.quiet`): forward mode over
#: the derivative (hvp) skips only where their tangents are zero too.
ZERO_ADJOINT_TEST = "pyzyme.zero_adjoint"

PARALLEL_BODY = "pyzyme.parfor."
#: The identity through which a parallel loop's derivative passes the arrays that carry no
#: derivative (an inactive rule row in pyzyme.rules.runtime says so).
PARALLEL_CONSTANT = "pyzyme.parfor.constant"
#: A reverse launch block's rows' tapes discarded (a split tape dropped unused).
PARALLEL_DISCARD = "pyzyme.parfor.discard"


def parallel_body(body: str, sweep: str) -> str:
    """What the worker threads of a parallel loop's derivative run, for outlined loop body
    ``body``: ``sweep`` is ``fwd`` (forward mode), ``aug`` (reverse mode's forward sweep) or
    ``rev`` (its reverse sweep). Each starts with :data:`PARALLEL_BODY`."""
    return f"{PARALLEL_BODY}{sweep}.{body}"


#: A checkpointed loop, ``for j in [0, n): step(start + j, args...)``, as the frontends write it
#: (``__enzyme_checkpoint_for``): its rule row (pyzyme.rules.runtime) says where each operand is.
CHECKPOINT_FOR = "pyzyme.checkpoint_for"
#: A checkpointed while loop, ``i = 0; while (step(i++, args...));``
#: (``__enzyme_checkpoint_while``), its operands laid out as :data:`CHECKPOINT_FOR`'s with
#: ``start`` 0 and ``n`` -1.
CHECKPOINT_WHILE = "pyzyme.checkpoint_while"


#: Sets :class:`~pyzyme.TapeBudgetError` for a loop checkpointed under a tape budget whose
#: iteration does not fit it (:mod:`pyzyme.transforms.checkpoint_loops`); inactive.
CHECKPOINT_BUDGET_ERROR = "pyzyme.checkpoint.over_budget"


def checkpoint_driver(step: str, sweep: str, loop: str = CHECKPOINT_FOR) -> str:
    """What runs a checkpointed loop (``loop``: :data:`CHECKPOINT_FOR` or
    :data:`CHECKPOINT_WHILE`) of ``step`` (:mod:`pyzyme.diff.calls.checkpoint`): ``sweep`` is
    ``primal`` (the loop as it is), ``fwd`` (forward mode), ``aug`` (reverse mode's forward
    sweep: snapshots, the steps untaped) or ``rev`` (its reverse sweep); ``aug.fwd`` and
    ``rev.fwd`` are forward mode over those two (hvp)."""
    return f"{loop}.{sweep}.{step}"


def is_checkpoint_sweep(name: str) -> bool:
    """Whether ``name`` is a reverse-mode sweep of a checkpointed loop (``aug`` or ``rev``,
    or forward mode over one)."""
    return any(name.startswith(f"{loop}.{sweep}.") for loop in (CHECKPOINT_FOR, CHECKPOINT_WHILE)
               for sweep in ("aug", "rev"))


def checkpoint_step(function: str) -> str:
    """One iteration of a checkpointed loop of ``function``, outlined as the loop's step
    (:mod:`pyzyme.frontends.c.loop_annotations`, :mod:`pyzyme.transforms.checkpoint_loops`)."""
    return f"{function}.checkpointed.step"


def fixed_point_step(function: str) -> str:
    """One iteration of a fixed-point loop of ``function`` marked from inside, outlined as the
    loop's step (:mod:`pyzyme.frontends.c.fixed_point_markers`)."""
    return f"{function}.fixed_point.step"


#: A fixed-point iteration, ``i = 0; while (step(i++, args...));``, as the frontends write it
#: (``__enzyme_fixed_point``): its rule row (pyzyme.rules.runtime) says where each operand is.
FIXED_POINT = "pyzyme.fixed_point"


def fixed_point_driver(step: str, sweep: str) -> str:
    """What runs a fixed-point iteration of ``step`` (:mod:`pyzyme.diff.calls.fixed_point`):
    ``sweep`` is ``primal`` (the loop as it is), ``fwd`` (forward mode: the loop, then the
    tangent iterated), ``aug`` (reverse mode's forward sweep: the loop and a snapshot of the
    state it ends in) or ``rev`` (its reverse sweep: the adjoint iterated)."""
    return f"{FIXED_POINT}.{sweep}.{step}"


# Symbols of compiled code.
#
# Symbol names of the code pyzyme compiles.
#
# Numba's own names carry a per-process counter (``B2v1``), so they cannot be used to find code
# again across processes. pyzyme names each compiled function after what it is and a hash of what
# it was built from; equal inputs give equal names in every process, which is what an on-disk cache
# and the JIT's one-definition-per-symbol rule both need.

PREFIX = "__pyzyme"


def linked_original(name: str) -> str:
    """The name a function had before LLVM's linker renamed it ``NAME.N`` (two modules that
    each define an internal ``NAME`` meet in one: each copy keeps its code); ``name`` itself
    otherwise.

    >>> linked_original("pyzyme.tape_realloc.1"), linked_original("NRT_incref")
    ('pyzyme.tape_realloc', 'NRT_incref')
    """
    base, dot, suffix = name.rpartition(".")
    return base if dot and suffix.isdigit() else name


def takes_status_params(function) -> bool:
    """Whether ``function`` (anything with ``args`` that have names) starts with Numba's
    :data:`STATUS_PARAMS`, its exception record second (names as a linker may number them).

    >>> from types import SimpleNamespace as N
    >>> takes_status_params(N(args=[N(name="retptr.1"), N(name="excinfo.2"), N(name="x")]))
    True
    """
    return tuple(linked_original(a.name) for a in function.args[:2]) == STATUS_PARAMS


def symbol_name(kind: str, *inputs: str) -> str:
    """The symbol of a compiled function of ``kind`` built from ``inputs`` (IR text, activity...).

    Parameters
    ----------
    kind
        A short word saying what the function is (``"fwd"``, ``"rev"``, ``"copy"``); letters,
        digits and underscores only.
    inputs
        Everything the function's code depends on, as strings.

    Examples
    --------
    >>> symbol_name("fwd", "define double @f(double %x) ...", "Duplicated")
    '__pyzyme_fwd_69b67f0904c84fe14eae'
    >>> symbol_name("fwd", "a", "b") != symbol_name("fwd", "ab")
    True
    """
    if not re.fullmatch(r"[A-Za-z0-9_]+", kind):
        raise ValueError(f"symbol kind must be letters, digits and underscores; got {kind!r}")
    digest = hashlib.sha256()
    for part in inputs:
        # Length-prefix each part so ("a", "b") and ("ab",) differ.
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return f"{PREFIX}_{kind}_{digest.hexdigest()[:20]}"


def framework_op(function: str, part: str, *inputs: str) -> str:
    """The name of the operation ``part`` (``primal``, ``vjp``, ``hvp``) that a framework
    bridge (:mod:`pyzyme.torch`) registers for the user's function ``function``: the function's
    name, letters, digits and underscores only, then a hash of ``inputs`` (what makes this
    registration different from every other in the process: a framework refuses a name twice).

    Examples
    --------
    >>> framework_op("Model.<locals>.diffuse", "vjp", "module", "0")
    'Model_locals_diffuse_vjp_4beb3407fab4'
    >>> framework_op("<lambda>", "primal", "a") != framework_op("<lambda>", "primal", "b")
    True
    """
    if not re.fullmatch(r"[a-z]+", part):
        raise ValueError(f"operation part must be lowercase letters; got {part!r}")
    stem = re.sub(r"\W+", "_", function).strip("_")[:40] or "f"
    if stem[0].isdigit():
        stem = "f" + stem
    return f"{stem}_{part}_{symbol_name(part, *inputs)[-12:]}"


# -- helpers: defined once in a module, found again by name -----------------------------------
# A helper is made the first time a module needs it and found again by its name, so a second
# helper given a taken name would silently get the first one's body (the tape pool's shadow
# destructor, once named as the list resize's release, was handed its blocks): each one's
# symbol is here, and HELPERS holds no name twice.
#: The tape pool (pyzyme.diff.tape.pool): its slots, the bytes they hold, its three functions.
TAPE_POOL, TAPE_POOL_BYTES = "pyzyme.tape_pool", "pyzyme.tape_pool_bytes"
TAPE_REALLOC, TAPE_CAPACITY, TAPE_FREE = ("pyzyme.tape_realloc", "pyzyme.tape_capacity",
                                          "pyzyme.tape_free")
#: What the pool says on standard error before it aborts, where the C library has no block.
OUT_OF_MEMORY_TEXT = "pyzyme.tape_pool.out_of_memory"
#: The tape arena (pyzyme.diff.tape.arena): an allocation from the side stack's arena, its
#: fast path and a new chunk.
TAPE_ARENA, TAPE_ARENA_TAKE, TAPE_ARENA_REFILL = ("pyzyme.tape_arena", "pyzyme.tape_arena.take",
                                                  "pyzyme.tape_arena.refill")
#: Shadows of temporaries from the tape pool, and the destructor giving them back
#: (pyzyme.diff.tape.pooled_shadows).
SHADOW_ALLOC, POOLED_SHADOW_RELEASE = "pyzyme.shadow_alloc", "pyzyme.pooled_shadow_release"
#: A shadow list's growth, and the release of the block it outgrew (pyzyme.diff.calls.resize).
SHADOW_REGROW, SHADOW_RELEASE = "pyzyme.shadow_regrow", "pyzyme.shadow_release"
#: A value pushed on a stack tape (pyzyme.diff.tape.cache), a release deferred to the end of
#: the reverse sweep (pyzyme.diff.tape.releases).
TAPE_PUSH, DEFER_RELEASE = "pyzyme.push", "pyzyme.defer_release"
#: The check of an indirect call's (function, derivative) pair (pyzyme.diff.calls.indirect).
INDIRECT_PAIR = "pyzyme.indirect_pair"
#: The side stacks' state, their messages and their functions (pyzyme.diff.side_stack).
SIDE_STACK, SIDE_STACK_TEXT = "pyzyme.side_stack", "pyzyme.side_stack.text"
SIDE_STACK_RUN, SIDE_STACK_ENTER, SIDE_STACK_LEAVE = ("pyzyme.side_stack.run",
                                                      "pyzyme.side_stack.enter",
                                                      "pyzyme.side_stack.leave")
SIDE_STACK_RESERVE, SIDE_STACK_OVERFLOW = ("pyzyme.side_stack.reserve",
                                           "pyzyme.side_stack.overflow")
#: The check that a global still holds the callee it was differentiated with, and its
#: messages (pyzyme.frontends.global_callees).
EXPECT_CALLEE, CALLEE_TEXT = "pyzyme.expect_callee", "pyzyme.callee_text"
#: The first two parameters of a function in Numba's calling convention, as Numba names them:
#: the memory its result goes to, and its exception record (pyzyme.frontends.numba.abi).
STATUS_PARAMS = ("retptr", "excinfo")
#: pyzyme's own maths, defined in IR where a module calls it (pyzyme.rules.mathlib): the
#: digamma function, pow(x, y - 1) from pow(x, y), Numba's x ** n, the signed zero Python's
#: x % y gives where the remainder is zero (pyzyme.transforms.zero_remainder); each one's
#: float variant is its name with "f" after it.
DIGAMMA, POW_LESS1, INT_POWER = "pyzyme.digamma", "pyzyme.pow_less1", "pyzyme.int_power"
#: ``{x ** n, x ** (n - 1)}`` by one binary exponentiation (pyzyme.rules.mathlib).
INT_POWER_PAIR = "pyzyme.int_power_pair"
ZERO_REMAINDER = "pyzyme.zero_remainder"
MATH_HELPERS = tuple(name + suffix
                     for name in (DIGAMMA, POW_LESS1, INT_POWER, INT_POWER_PAIR,
                                  ZERO_REMAINDER)
                     for suffix in ("", "f"))

HELPERS = (TAPE_POOL, TAPE_POOL_BYTES, TAPE_REALLOC, TAPE_CAPACITY, TAPE_FREE,
           OUT_OF_MEMORY_TEXT, TAPE_ARENA,
           TAPE_ARENA_TAKE, TAPE_ARENA_REFILL, SHADOW_ALLOC,
           POOLED_SHADOW_RELEASE, SHADOW_REGROW, SHADOW_RELEASE, TAPE_PUSH, DEFER_RELEASE,
           INDIRECT_PAIR, SIDE_STACK, SIDE_STACK_TEXT, SIDE_STACK_RUN, SIDE_STACK_ENTER,
           SIDE_STACK_LEAVE, SIDE_STACK_RESERVE, SIDE_STACK_OVERFLOW, EXPECT_CALLEE, CALLEE_TEXT,
           CHECKPOINT_BUDGET_ERROR, *MATH_HELPERS)
"""Every helper's symbol (no name twice).

>>> len(set(HELPERS)) == len(HELPERS)
True
"""
