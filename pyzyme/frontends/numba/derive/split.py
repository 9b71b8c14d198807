"""Split reverse mode for ``@njit`` functions: the augmented primal and the reverse function
as separate compiled entry points, with the tape between them.

:mod:`pyzyme.diff.reverse.generator` emits the pair from the same generator as the combined
derivative. Here each half gets an entry in Numba's convention, and :mod:`pyzyme.pipeline`
compiles them in one module:

- ``augmented(args..., shadows...) -> (primal result?, tape address)``;
- ``reverse(args..., shadows..., seed?, tape address) -> (adjoints of Active arguments)``;

and a C function ``discard(tape address)`` frees a tape that is never used. Between the two
calls the caller may change what the arguments hold (the seed example overwrites ``A[0]``):
the pair is generated with ``memory_stable=False``, so every value read from argument memory
that the reverse sweep needs travels on the tape.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

from numba.core import types

from pyzyme import pipeline, settings
from pyzyme.analysis.activity import Activity
from pyzyme.diff.reverse.generator import ReverseSignature
from pyzyme.frontends.numba import njit_callable
from pyzyme.frontends.numba.derive.reverse import (
    DUPLICATED,
    Entry,
    activity_name,
    adjoint_types,
    generate,
    prepare,
    roles,
    seed_params,
)
from pyzyme.frontends.numba.source_lines import where_defined
from pyzyme.ir import IRBuilder, types as T
from pyzyme.ir.values import Undef, const_int
from pyzyme.naming import symbol_name

__all__ = ["SplitPlan", "build_split"]


@dataclass(frozen=True)
class SplitPlan:
    """The compiled halves of a split derivative and what they take."""

    augmented: object          # njit dispatcher: (args, shadows) -> (primal?, tape address)
    reverse: object            # njit dispatcher: (args, shadows, seed?, tape) -> adjoints
    discard: object            # ctypes function: frees an unused tape
    nbytes: object             # ctypes function: the bytes a tape holds, caches included
    kinds: tuple[Activity, ...]
    primal_types: tuple
    restype: object            # the primal result's Numba type
    seeded: bool
    tape_layout: str
    ir_text: str
    compiled: object = None    # the CompiledModule holding the entries (njit code links it)
    discard_symbol: str = ""   # the name of ``discard`` in it: ``void (i64 tape address)``


def build_split(f, primal_types: Sequence[types.Type], kinds: Sequence,
                ret_activity: Activity | None, rules, where: str | None = None,
                distinct: bool = False) -> SplitPlan:
    """Capture ``f`` and compile its split reverse-mode derivative (``kinds``,
    ``ret_activity`` and ``distinct`` as for
    :func:`~pyzyme.frontends.numba.derive.reverse.build_reverse`; ``distinct`` holds for the
    augmented primal's call and the reverse sweep's alike)."""
    primal_types, kinds = tuple(primal_types), roles(kinds)
    cap, abi, module, native, acts, ret_activity = prepare(f, primal_types, kinds,
                                                           ret_activity, distinct, rules,
                                                           split=True)
    sig = ReverseSignature(tuple(acts), status_return=True, memory_stable=False, split=True)
    gen, pair = generate(cap, module, native, sig, rules, primal_types,
                         f"{where or where_defined(f)} in split reverse mode")
    restype = abi.signature.return_type
    seeded = ret_activity is Activity.ACTIVE
    base = symbol_name("split", cap.text,
                       repr((sig, tuple(k.value for k in kinds), activity_name(ret_activity),
                             distinct))
                       + settings.current().tag)
    names = {"aug": f"{base}_aug", "rev": f"{base}_rev", "discard": f"{base}_discard",
             "bytes": f"{base}_bytes"}
    aug_restype = types.Tuple(([restype] if restype != types.none else []) + [types.uintp])
    adj = adjoint_types(abi, kinds)
    rev_restype = types.Tuple(adj) if adj else types.none

    # augmented: run the primal, keep the tape.
    e = Entry(module, native, abi, kinds, restype, names["aug"])
    result = e.slot("result")
    scratch = e.slot("result.shadow")  # pointers stored in the result are mirrored here
    out = e.b.call(pair.augmented, e.call_args(result, scratch, acts))
    tape = e.b.ptrtoint(e.b.extractvalue(out, 1), T.i64)
    e.store_results(aug_restype, result if restype != types.none else None, None, acts, 0,
                    tail=[tape])
    e.b.ret(e.b.extractvalue(out, 0))

    # reverse: the seed in the result's shadow, then the reverse sweep over the tape.
    extra = (seed_params(restype) if seeded else []) + [("tape", T.i64)]
    e = Entry(module, native, abi, kinds, restype, names["rev"], extra)
    result = e.slot("result")
    seed = e.slot("seed", e.seed_value(len(e.params) + e.nshadow)[0] if seeded else None)
    pointer = e.b.inttoptr(e.extra[-1], T.ptr)
    out = e.b.call(pair.reverse, e.call_args(result, seed, acts) + [const_int(T.i1, 0),
                                                                      pointer])
    if adj:
        e.store_results(rev_restype, None, out, acts, 0)
    e.b.ret(const_int(T.i32, 0))

    # discard: free a tape whose reverse sweep never comes.
    fn = module.add_function(names["discard"], T.FunctionType(T.void, [T.i64]))
    b = IRBuilder(fn.append_block("entry"))
    params = pair.reverse.function_type.params
    b.call(pair.reverse, [Undef(t) for t in params[:-2]]
           + [const_int(T.i1, 1), b.inttoptr(fn.args[0], T.ptr)])
    b.ret_void()

    # bytes: what a tape holds, its block and the caches and stacks hanging off it.
    fn = module.add_function(names["bytes"], T.FunctionType(T.i64, [T.i64]))
    b = IRBuilder(fn.append_block("entry"))
    b.ret(b.call(pair.nbytes, [b.inttoptr(fn.args[0], T.ptr)]))

    shadow_types = [t for t, k in zip(primal_types, kinds) if k == DUPLICATED]
    args = list(primal_types) + shadow_types
    rev_args = args + ([restype] if seeded else []) + [types.uintp]

    def wrap(compiled):
        augmented = njit_callable(compiled, names["aug"], aug_restype(*args),
                                  arg_names=[f"a{i}" for i in range(len(args))])
        reverse = njit_callable(compiled, names["rev"], rev_restype(*rev_args),
                                arg_names=[f"a{i}" for i in range(len(rev_args))])
        discard = ctypes.CFUNCTYPE(None, ctypes.c_uint64)(compiled.address(names["discard"]))
        nbytes = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint64)(
            compiled.address(names["bytes"]))
        discard._keep = nbytes._keep = compiled  # the code lives as long as they are used
        return augmented, reverse, discard, nbytes

    built = pipeline.finish(module, names.values(), rules=rules,
                            name=f"pyzyme_split_{abi.function}", wrap=wrap)
    augmented, reverse, discard, nbytes = built.wrapped
    layout = gen.tapes[pair.reverse]
    return SplitPlan(augmented, reverse, discard, nbytes, tuple(kinds), primal_types, restype,
                     seeded, str(layout), built.text, built.compiled, names["discard"])
