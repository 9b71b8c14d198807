"""LLVM pass pipelines, run through llvmlite's new pass manager on Numba's target machine.

Two pipelines matter to AD:

``ad_friendly`` (before differentiation)
    LLVM's O2 with loop unrolling, loop vectorization, SLP vectorization and interleaving off.
    Inlining, SROA, instcombine, GVN, LICM and loop canonicalization all run, so the primal is as
    simple as optimization can make it; but a loop stays one loop over scalars, whose derivative
    is one loop over scalars (Numba's O3 unrolls a matmul's inner loop 8x and vectorizes
    ``np.exp`` to ``<4 x double>``, which would multiply the derivative code and its tape).
``optimize`` (after differentiation)
    The full pipeline at a chosen level, with the vectorization Numba itself uses, so derivative
    code is optimized like Numba's own.
"""

from __future__ import annotations

from collections.abc import Iterable

import llvmlite.binding as llvm
from numba.core import config as numba_config

from pyzyme.ir import parse_module
from pyzyme.runtime import mirrored_lanes, target
from pyzyme.runtime.modules import internalize_all_but, parse
from pyzyme.runtime.raising_blocks import mark_raising_stores
from pyzyme.runtime.sunk_refcounts import unsink_refcounts


def _run(module: llvm.ModuleRef, pto: llvm.PipelineTuningOptions) -> None:
    pb = llvm.create_pass_builder(target.target_machine(), pto)
    pb.getModulePassManager().run(module, pb)


def ad_friendly(module: llvm.ModuleRef, *, inline_small: bool = False) -> llvm.ModuleRef:
    """Optimize ``module`` for differentiation: O2 without unrolling or vectorization. Returns
    the optimized module (``module`` itself, or a new one where raising blocks were marked).

    ``inline_small``: mark the small functions to inline (:func:`inline_small_functions`)
    between the two rounds, so that each is simplified once, on its own, before its copies are
    made: marked before the first round, its unsimplified body was copied into every call site
    and simplified there (ht's residuals: 4,265 instructions grew to 14,246 for O1 to work
    through, 3.1 s of CPU; marked after it, both rounds take 0.9 s).

    Numba's reference-count pruning runs as well: inlining brings ``NRT_incref``/``NRT_decref``
    pairs into one function where they cancel. It runs after a first O1 round too, because O2's
    jump threading and loop rotation split the blocks of a pair apart before pruning could see
    them (an array allocated, filled in a loop and summed keeps two pairs otherwise). Before
    each, the raising blocks whose mark inlining lost are marked again
    (:mod:`~pyzyme.runtime.raising_blocks`): without, an array argument's pairs survive in any
    function with an inlined callee that can raise, and its derivative mirrors them onto the
    shadow.

    Examples
    --------
    >>> from pyzyme.runtime.modules import parse
    >>> m = parse('''define double @f(double %x) {
    ...   %p = alloca double
    ...   store double %x, ptr %p
    ...   %y = load double, ptr %p
    ...   ret double %y
    ... }''')
    >>> m = ad_friendly(m)
    >>> "alloca" in str(m)
    False
    """
    for level in (1, 2):
        _run(module, _no_unroll_no_vectorize(level))
        module = _prune_refcounts(module)
        if inline_small and level == 1:
            inline_small_functions(module)
    cleanup = llvm.create_new_module_pass_manager()
    cleanup.add_simplify_cfg_pass()
    cleanup.add_global_dead_code_eliminate_pass()
    cleanup.add_strip_dead_prototype_pass()
    cleanup.run(module, _plain_pass_builder())
    return module


#: A function of at most this many instructions is inlined into its callers before
#: differentiation whatever LLVM's cost model says (its O2 threshold, 225, leaves a 200-line
#: helper a call: an LSTM layer, a stencil update), where the copies add at most
#: :data:`INLINE_GROWTH` instructions. A call that stays a call costs its derivative a tape of
#: its own per call (allocated, filled, freed) and what alias analysis loses at the boundary;
#: inlined, the helper's values are taped per iteration of the caller's loop. (llvmlite 0.50
#: keeps only the low 8 bits of ``PipelineTuningOptions.inlining_threshold``, so the
#: threshold cannot simply be raised.)
INLINE_LIMIT = 800
INLINE_GROWTH = 8000


def inline_small_functions(module: llvm.ModuleRef) -> list[str]:
    """Mark ``alwaysinline`` the functions of ``module`` small enough to inline before
    differentiation (:data:`INLINE_LIMIT`): defined here, not ``noinline`` (calls that must
    stay calls), not recursive, and not copied into so many call sites that the module grows
    by more than :data:`INLINE_GROWTH` instructions. Returns their names.

    Examples
    --------
    >>> from pyzyme.runtime.modules import parse
    >>> m = parse('''define internal double @sq(double %x) {
    ...   %y = fmul double %x, %x
    ...   ret double %y
    ... }
    ... define internal double @down(double %x) {
    ...   %y = call double @down(double %x)
    ...   ret double %y
    ... }
    ... define double @f(double %x) {
    ...   %a = call double @sq(double %x)
    ...   %b = call double @down(double %a)
    ...   ret double %b
    ... }''')
    >>> inline_small_functions(m)
    ['sq']
    """
    defined = {fn.name: fn for fn in module.functions if not fn.is_declaration}
    size: dict = {}
    calls: dict = {name: set() for name in defined}
    sites: dict = dict.fromkeys(defined, 0)
    for name, fn in defined.items():
        count = 0
        for block in fn.blocks:
            for inst in block.instructions:
                count += 1
                if inst.opcode in ("call", "invoke"):
                    callee = list(inst.operands)[-1].name
                    if callee in defined:
                        calls[name].add(callee)
                        sites[callee] += 1
        size[name] = count

    def recursive(name: str) -> bool:
        work, seen = list(calls[name]), set()
        while work:
            callee = work.pop()
            if callee == name:
                return True
            if callee not in seen:
                seen.add(callee)
                work.extend(calls[callee])
        return False

    marked = []
    for name, fn in defined.items():
        attributes = " ".join(str(a) for a in fn.attributes)
        if not sites[name] or "noinline" in attributes or "alwaysinline" in attributes:
            continue
        if size[name] > INLINE_LIMIT or size[name] * (sites[name] - 1) > INLINE_GROWTH:
            continue
        if recursive(name):
            continue
        fn.add_function_attribute("alwaysinline")
        marked.append(name)
    return marked


def _no_unroll_no_vectorize(level: int) -> llvm.PipelineTuningOptions:
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_unrolling = False
    pto.loop_vectorization = False
    pto.slp_vectorization = False
    pto.loop_interleaving = False
    return pto


def _prune_refcounts(module: llvm.ModuleRef) -> llvm.ModuleRef:
    """Run Numba's reference-count pruning on ``module`` (parsed again first where raising
    blocks had to be marked or count calls sunk into a join moved back,
    :mod:`~pyzyme.runtime.sunk_refcounts`); returns the pruned module."""
    text = str(module)
    marked = mark_raising_stores(unsink_refcounts(text))
    if marked != text:
        module = parse(marked, what="module with its raising blocks marked")
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_refprune_pass(llvm.RefPruneSubpasses.ALL)
    mpm.run(module, _plain_pass_builder())
    return module


def _plain_pass_builder() -> llvm.PassBuilder:
    """A pass builder for running hand-picked passes (its own pipeline is not used)."""
    return llvm.create_pass_builder(target.target_machine(), llvm.create_pipeline_tuning_options(0))


def optimize(module: llvm.ModuleRef, level: int = 3) -> None:
    """Optimize ``module`` in place at ``level`` (0-3), vectorizing as Numba is configured to.

    Level 0 only runs the always-inliner; levels 1-3 are LLVM's default pipelines.
    """
    if level not in (0, 1, 2, 3):
        raise ValueError(f"optimization level must be 0, 1, 2 or 3; got {level!r}")
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = bool(numba_config.LOOP_VECTORIZE) and level > 1
    pto.slp_vectorization = bool(numba_config.SLP_VECTORIZE) and level > 1
    _run(module, pto)


def lanes_in_memory_order(module: llvm.ModuleRef) -> llvm.ModuleRef:
    """``module`` (optimized) with its vector loops that walk memory downwards rewritten to keep
    their lanes in memory order (:mod:`~pyzyme.runtime.mirrored_lanes`), then instcombine
    folding the reversals left at their entries and exits; ``module`` itself where it has none.

    Examples
    --------
    >>> from pyzyme.runtime.modules import parse
    >>> m = parse("define double @f(double %x) {\\n  ret double %x\\n}")
    >>> lanes_in_memory_order(m) is m
    True
    """
    text = str(module)
    if not mirrored_lanes.loops_reverse_lanes(text):
        return module
    ir = parse_module(text)
    if not mirrored_lanes.mirror_loops(ir):
        return module
    out = parse(str(ir), what="module with its lanes mirrored")
    fold = llvm.create_new_module_pass_manager()
    fold.add_instruction_combine_pass()
    fold.run(out, _plain_pass_builder())
    return out


def clang_pipeline(module: llvm.ModuleRef, level: int, *,
                   unroll_loops: bool | None = None) -> None:
    """Optimize ``module`` in place as ``clang -O<level> -fno-vectorize -fno-slp-vectorize``
    optimizes what its front end emits: LLVM's default pipeline at ``level``, unrolling and
    interleaving loops from -O2 as clang does unless ``unroll_loops`` says otherwise
    (``-f[no-]unroll-loops``), and never vectorizing (the C driver's ``AD_FLAGS``).
    """
    if level not in (1, 2, 3):
        raise ValueError(f"optimization level must be 1, 2 or 3; got {level!r}")
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    unroll = level > 1 if unroll_loops is None else unroll_loops
    pto.loop_unrolling = unroll
    pto.loop_interleaving = unroll
    pto.loop_vectorization = False
    pto.slp_vectorization = False
    _run(module, pto)


def strip_to(
    module: llvm.ModuleRef, keep: Iterable[str], *, keep_globals=lambda name: False
) -> None:
    """Delete the functions and globals of ``module`` not reachable from those named in ``keep``.

    Examples
    --------
    >>> from pyzyme.runtime.modules import parse
    >>> m = parse("define void @a() {\\n ret void\\n}\\ndefine void @b() {\\n ret void\\n}")
    >>> strip_to(m, ["a"])
    >>> [f.name for f in m.functions]
    ['a']
    """
    internalize_all_but(module, keep, keep_globals=keep_globals)
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_global_dead_code_eliminate_pass()
    mpm.add_strip_dead_prototype_pass()
    mpm.run(module, _plain_pass_builder())
