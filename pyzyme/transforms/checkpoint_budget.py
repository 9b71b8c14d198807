"""The tape budget at run time, shared by the checkpointed loops of one call.

Each checkpointed loop's snapshots live from its forward sweep to its reverse sweep, and every
forward sweep of a call comes before every reverse sweep: the snapshots of all the loops of a
function are held at once, so the loops share the budget. How much each needs is known only
at run time (the sizes of its regions, its trip count, whether it runs at all, whether a loop
that may run plain does), so the share is decided then: the function's entry block holds a
counter of the bytes still free (:func:`free_counter`); a checkpointed loop, where it starts,
checks that one iteration fits what is free (:func:`check_fits`, else
:class:`~pyzyme.TapeBudgetError`) and takes for its schedule what is free divided among the
loop nests still to come, leaving each short loop after it (which may run plain) one
iteration's worth, and at least what one iteration needs (:func:`take_share`); what its
schedule does not hold until its reverse sweep stays free (:func:`give_back_unused`). A loop
run plain takes its tape. The reverse sweeps run in the opposite order, each after those of
the loops after it: what a loop needs only then (the tape of one step's derivative) need not
be taken, and nothing is given back (no forward sweep follows).
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_c_string, const_int
from pyzyme.runtime.target import TAPE_BUDGET_ERROR_SYMBOL
from pyzyme.transforms import revolve

__all__ = ["free_counter", "check_fits", "take_share", "give_back_unused", "iteration_need",
           "need_parts"]


def _i64(n: int):
    return const_int(T.i64, n)


def free_counter(fn, budget: int):
    """An i64 slot in ``fn``'s entry block holding the bytes of ``budget`` still free, set to
    all of it there."""
    entry = fn.blocks[0]
    b = IRBuilder()
    at = next(i for i in entry.instructions if not isinstance(i, I.Alloca))
    b.position_before(at)
    slot = b.alloca(T.i64, name="ckpt.free")
    b.store(_i64(budget), slot)
    return slot


def iteration_need(b: IRBuilder, total, copies: int, reserve: int, tape=None):
    """The bytes one iteration of a checkpointed loop needs, its state ``total`` bytes: the
    driver's two copies, one snapshot and ``reserve`` for the tape of the step's own
    derivative, each of the state and its tangents (``copies``), and the scheme's words.
    ``tape``: the bytes that tape takes (its tangents' too), where known at run time; then
    the need holds it, at least ``reserve`` states."""
    words = _i64(revolve.STATE_WORDS * 8 + revolve.SNAPSHOT_OVERHEAD)
    if tape is None:
        return b.add(b.mul(total, _i64((3 + reserve) * copies)), words, name="ckpt.need")
    kept = b.mul(total, _i64(reserve * copies))
    kept = b.select(b.icmp("sgt", tape, kept), tape, kept)
    return b.add(b.add(b.mul(total, _i64(3 * copies)), kept), words, name="ckpt.need")


def need_parts(copies: int, reserve: int, taped: bool) -> str:
    """What :func:`iteration_need` is made of, for TapeBudgetError; ``taped``: with the tape
    of the step's derivative known at run time."""
    state = "its state" if copies == 1 else (
        "its state and its tangent" if copies == 2 else f"its state and its {copies - 1} tangents")
    if taped:
        return (f"{state}, 3 times: the driver's two copies and one snapshot; and what one "
                f"iteration's derivative tapes, at least {reserve} times {state}")
    return (f"{state}, {3 + reserve} times: the driver's two copies, one snapshot, and "
            f"{reserve} for the tape of the step's own derivative")


def check_fits(module, fn, b: IRBuilder, need, free, where: str, parts: str,
               first: bool) -> IRBuilder:
    """Past the check that one iteration's ``need`` bytes fit the ``free`` ones: else ``fn``
    returns Numba's status -1 with TapeBudgetError naming the loop (``where``) and what one
    iteration holds (``parts``); ``first``: no loop before it holds part of the budget."""
    over = fn.append_block(fn.unique_name("ckpt.over"))
    ok = fn.append_block(fn.unique_name("ckpt.fits"))
    b.cbranch(b.icmp("ugt", need, free), over, ok)
    ob = IRBuilder(over)
    left = "tape_budget (%lld bytes)" if first else (
        "what tape_budget leaves it (%lld bytes; the checkpointed loops before it hold the "
        "rest until their reverse sweeps)")
    text = (f"{where.replace('%', '%%')}: one iteration of this checkpointed loop needs %lld "
            f"bytes ({parts.replace('%', '%%')}), more than {left}; raise tape_budget to at "
            f"least that, or build without it")
    message = module.add_global(module.unique_global_name("pyzyme.ckpt.message"),
                                T.ArrayType(len(text.encode()) + 1, T.i8),
                                const_c_string(text), is_constant=True, prefix="private")
    ob.call(_raiser(module), [message, need, free])
    ob.ret(const_int(fn.function_type.ret, -1))
    return IRBuilder(ok)


def take_share(b: IRBuilder, counter, need, heavy: int, light: int):
    """The bytes a checkpointed loop's schedule may use: what is free (``counter``), less
    one iteration's ``need`` for each of the ``light`` loops after it that may run plain
    (the array expressions after a time loop: a short tape, or a checkpoint of their own),
    divided with the ``heavy`` ones after it (always checkpointed: a loop nest); at least
    ``need`` (which fits)."""
    free = b.load(T.i64, counter, name="ckpt.free.now")
    rest = b.sub(free, b.mul(need, _i64(light)))
    share = b.sdiv(rest, _i64(1 + heavy))
    return b.select(b.icmp("slt", share, need), need, share, name="ckpt.share")


def give_back_unused(b: IRBuilder, counter, share, total, steps, reserve, chunk) -> None:
    """Take from ``counter`` what a schedule under ``share`` bytes holds from its forward
    sweep to its reverse sweep, its state ``total`` bytes over ``steps`` steps (-1: a while
    loop's) of ``chunk`` iterations: the snapshots the scheme gets (:func:`revolve.snapshots`)
    and the driver's two states, allocated together, and the scheme's words. The ``reserve``
    states for the tape of the step's derivative are taken only while its reverse sweep runs,
    after the reverse sweeps of the loops after it (which give all theirs back): they stay
    free."""
    s = revolve.snapshots_ir(b, share, reserve, total, steps, chunk)
    held = b.add(b.mul(b.add(s, _i64(2)), total),
                 b.mul(b.add(s, _i64(revolve.STATE_WORDS)), _i64(8)), name="ckpt.held")
    b.store(b.sub(b.load(T.i64, counter), held), counter)


def _raiser(module):
    """``void raise(ptr format, i64 need, i64 budget)``: TapeBudgetError set as the Python
    error (the GIL taken for it)."""
    fn = module.get_function(naming.CHECKPOINT_BUDGET_ERROR)
    if fn is not None:
        return fn
    fn = module.add_function(naming.CHECKPOINT_BUDGET_ERROR,
                             T.FunctionType(T.void, [T.ptr, T.i64, T.i64]),
                             prefix="internal", suffix="noinline cold")
    cls = module.get_global(TAPE_BUDGET_ERROR_SYMBOL) or module.add_global(
        TAPE_BUDGET_ERROR_SYMBOL, T.i8, None, prefix="external")
    b = IRBuilder(fn.append_block("entry"))
    gil = b.call(module.declare("PyGILState_Ensure", T.FunctionType(T.i32, [])), [])
    b.call(module.declare("PyErr_Format",
                          T.FunctionType(T.ptr, [T.ptr, T.ptr], var_arg=True)),
           [cls, *fn.args])
    b.call(module.declare("PyGILState_Release", T.FunctionType(T.void, [T.i32])), [gil])
    b.ret_void()
    return fn
