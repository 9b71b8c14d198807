"""Reflection: the LLVM IR pyzyme generates for a derivative.

``code_llvm(mode, f, ret_activity, *args)`` takes what :func:`~pyzyme.autodiff` (or, for split
modes, :func:`~pyzyme.autodiff_thunk`) takes, builds (or finds in the cache) that derivative, and
returns its module as LLVM IR text: the derivative's entry point in Numba's calling convention
and the generated functions it calls, before LLVM optimizes them. ``optimized=True`` gives the
module after LLVM's optimization instead.

Examples
--------
>>> from pyzyme import Active, Reverse
>>> text = code_llvm(Reverse, lambda x: x * x, Active, Active(3.0))
>>> "define internal" in text and "@diffe" in text
True
"""

from __future__ import annotations

from pyzyme.api import annotations as A
from pyzyme.api.args.marshal import ForwardArg, ReverseArg, batch_width, distinct
from pyzyme.api.dispatchers import dispatcher_of
from pyzyme.api.modes import Mode
from pyzyme.api.plans import forward_plan, reverse_plan
from pyzyme.api.thunks import autodiff_thunk
from pyzyme.errors import UnsupportedError
from pyzyme.runtime import compile_module

__all__ = ["code_llvm"]


def code_llvm(mode: Mode, f, *args, optimized: bool = False) -> str:
    """The LLVM IR of ``f``'s derivative in ``mode`` for these annotated arguments.

    Parameters
    ----------
    mode
        ``Forward``, ``ForwardWithPrimal``, ``Reverse``, ``ReverseWithPrimal``,
        ``ReverseSplitWithPrimal`` or ``ReverseSplitNoPrimal``.
    f
        An ``@njit`` function or a plain Python function (compiled with ``numba.njit``).
    *args
        ``ret_activity`` (an annotation class, optional as in :func:`~pyzyme.autodiff`), then
        the annotated example arguments (``Active(2.0)``, ``Duplicated(x, dx)``, ``Const(n)``;
        a plain value is ``Const``). Only their types and activities matter: nothing is run.
    optimized
        ``False`` (default): the module pyzyme generated, before LLVM optimizes it. ``True``:
        the module after LLVM's optimization (what becomes machine code; the generated
        functions are usually inlined into the entry point).

    Returns
    -------
    str
        The module as LLVM IR text: ``f``'s native function and what pyzyme generated from
        it. Forward mode: the derivative itself is the entry point ``__pyzyme_fwd_...``.
        Reverse mode: ``diffe<native name>`` and the entry ``__pyzyme_rev_...`` around it.
        Split modes: ``augmented_<native name>`` and ``reverse_<native name>``, with the
        entries ``__pyzyme_split_..._aug``, ``_rev``, ``_discard`` and ``_bytes``.

    Raises
    ------
    UnsupportedError
        For a mode or activity :func:`~pyzyme.autodiff` does not support either.

    Examples
    --------
    >>> from pyzyme import Duplicated, Forward
    >>> text = code_llvm(Forward, lambda x: x * x, Duplicated, Duplicated(3.0, 1.0))
    >>> print(text[text.index("define i32 @__pyzyme_fwd_"):].split("{")[1].split("}")[0])
    <BLANKLINE>
    B0:
      %"retptr'" = getelementptr inbounds i8, ptr %retptr, i64 8
      %.5 = fmul double %arg.x, %arg.x
      %0 = fadd double %arg.x, %arg.x
      %".5'" = fmul double %0, %"arg.x'"
      store double %.5, ptr %retptr, align 8
      store double %".5'", ptr %"retptr'", align 8
      ret i32 0
    <BLANKLINE>
    >>> opt = code_llvm(Forward, lambda x: x * x, Duplicated(3.0, 1.0), optimized=True)
    >>> print(next(ln for ln in opt.splitlines() if "fadd" in ln).strip())  # then one fmul
    %0 = fadd double %arg.x, %arg.x
    """
    if not isinstance(mode, Mode):
        raise TypeError(f"code_llvm's first argument must be a mode (Forward, Reverse, ...), "
                        f"got {mode!r}")
    ret_activity = None
    if args and isinstance(args[0], type) and issubclass(args[0], A.Annotation):
        ret_activity, args = args[0], args[1:]
    anns = [A.annotate(a) for a in args]
    if mode.is_forward:
        text = _forward_text(f, ret_activity, anns)
    elif mode.split:
        forward, _ = autodiff_thunk(mode, f, *([ret_activity] if ret_activity else []), *anns)
        text = forward.plans.first.ir_text   # the build a call with these arguments runs
    elif mode.holomorphic:
        raise UnsupportedError(f"{mode} mode is not implemented yet; use Reverse or "
                               f"ReverseWithPrimal")
    else:
        text = _reverse_text(mode, f, ret_activity, anns)
    if optimized:
        return compile_module(text).optimized_ir  # the plan compiled this text: cached
    return text


def _forward_text(f, ret_activity, anns) -> str:
    width = batch_width(anns, ret_activity)
    calls = [ForwardArg(a, {}, i) for i, a in enumerate(anns)]
    if ret_activity is None:
        ret_activity = A.Duplicated if width == 1 else A.BatchDuplicated
    if ret_activity is A.Active:
        raise UnsupportedError("Active is a reverse-mode return activity; use Duplicated in "
                               "forward mode")
    plan = forward_plan(dispatcher_of(f), [c.numba_type for c in calls],
                        [bool(c.shadows) for c in calls], ret_activity, width,
                        distinct=distinct(calls))
    return plan.ir_text


def _reverse_text(mode: Mode, f, ret_activity, anns) -> str:
    calls = [ReverseArg(a, {}, i) for i, a in enumerate(anns)]
    plan = reverse_plan(dispatcher_of(f), [c.numba_type for c in calls],
                        [c.kind for c in calls], ret_activity, distinct(calls),
                        need_primal=mode.with_primal)   # the function autodiff would call
    return plan.ir_text
