"""``pyzyme opt``: replace every ``__enzyme_*`` call of a module by a generated derivative.

The steps, as Enzyme's LLVM pass takes them:

1. read the call sites (:mod:`~pyzyme.frontends.c.enzyme_calls`);
2. make the AD copy of the module (:mod:`~pyzyme.frontends.ad_copy`): optimised for AD
   whatever the program's own optimisation level;
3. in the copy, one adapter per call site (:mod:`~pyzyme.frontends.c.adapters`) around the
   derivative pyzyme generates (:mod:`~pyzyme.frontends.llvm_ad`);
4. in the program, each call replaced by a call of its adapter, the markers' loads deleted
   (``extern int enzyme_dup;`` then needs no definition) and ``__augmentsize`` answered;
5. the copy, reduced to the adapters and what they use and optimised, linked into the program.

A derivative of a function that itself asks for one (``__enzyme_fwddiff`` of a function calling
``__enzyme_autodiff``: forward over reverse) is built from the inside out: each round lowers
the calls whose functions reach no other call, and the next round differentiates the code it
generated.

Examples
--------
>>> text = '''define double @sq(double %x) {
...   %y = fmul double %x, %x
...   ret double %y
... }
... define double @dsq(double %x) {
...   %d = call double (ptr, ...) @__enzyme_autodiff(ptr @sq, double %x)
...   ret double %d
... }
... declare double @__enzyme_autodiff(ptr, ...)'''
>>> out = lower(text)
>>> "__enzyme_autodiff" in out
False
"""

from __future__ import annotations

import hashlib
import re

from pyzyme import ir
from pyzyme.analysis.type_analysis import ENZYME_HINTS
from pyzyme.diff.tape.pool import CAPACITY_NAME
from pyzyme.errors import ActivityError, PyzymeError, UnsupportedError
from pyzyme.frontends.ad_copy import ad_copy, forget_edge, link_into, promote_local_globals
from pyzyme.frontends.c import (checkpoint_calls, fixed_point_calls, shadow_contexts,
                                virtual_shadows)
from pyzyme.frontends.c.cblas_rows import FORWARD_MODES, cblas_rows
from pyzyme.frontends.c.adapters import build_adapter, tape_size
from pyzyme.frontends.c.enzyme_calls import (find_call_sites, gradient_log, marker,
                                             source_location)
from pyzyme.frontends.c.global_shadows import thread_globals
from pyzyme.frontends.c.registrations import find_registrations
from pyzyme.frontends.llvm_ad import Derivatives, c_rules, cxx_library_inactive
from pyzyme.frontends.c.unknown_calls import reword_blas_body, reword_unknown_call
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ZeroInitializer, const_int
from pyzyme.rules.table import RuleTable
from pyzyme.settings import Options
from pyzyme.rules.spec import GradientLog

__all__ = ["lower", "copy_with_rules"]

# Enzyme's type hints (``__enzyme_double(p, bytes)``): read by type analysis, then removed.
_HINTS = tuple(ENZYME_HINTS)
# ``__enzyme_iter(n, step)``: n, plus step for each derivative taken of the code calling it.
_ITER = "__enzyme_iter"


def lower(module_text: str, *, opt_level: int | None = 2) -> str:
    """``module_text`` with every ``__enzyme_*`` call replaced by its derivative.

    Parameters
    ----------
    module_text
        LLVM IR as LLVM 22 prints it (e.g. from :func:`pyzyme.frontends.c.clang.compile_to_ir`).
    opt_level
        The level the generated code is optimised at before it is linked in (None: not at
        all); the program's own code is left as it was compiled.

    Raises
    ------
    EnzymeCallError
        A call site that cannot be read (the message starts with its ``file:line``).
    UnsupportedError
        A function that cannot be differentiated (its call site is named in the context).
    """
    text = fixed_point_calls.rewrite(
        checkpoint_calls.rewrite(shadow_contexts.prepare(module_text)))
    while True:
        program = ir.parse_module(text)
        sites = find_call_sites(program) + virtual_shadows.find_sites(program)
        for site in [s for s in sites if s.mode == "size"]:
            size = const_int(site.call.type, tape_size(site)) if site.call.type.is_int else None
            if size is None:
                raise site.error(f"__enzyme_augmentsize must return an integer, not "
                                 f"{site.call.type}")
            site.call.replace_all_uses_with(size)
            site.call.erase()
        sites = [s for s in sites if s.mode != "size"]
        ready = _innermost(sites)
        if len(ready) == len(sites):
            return fixed_point_calls.expand(checkpoint_calls.expand(
                _lower_sites(program, text, ready, opt_level, last=True)))
        text = _lower_sites(program, text, ready, opt_level, last=False)


def _innermost(sites):
    """The call sites whose function reaches no other call site: nested derivatives
    (``__enzyme_fwddiff`` of a function that calls ``__enzyme_autodiff``) are built from the
    inside out, each round differentiating the code the previous one generated."""
    holders = {s.call.function for s in sites}
    ready = [s for s in sites if not holders & _reachable(s.function)]
    if sites and not ready:
        site = sites[0]
        raise site.error(f"{site.function.ref} calls {site.entry} on itself (through the "
                         f"functions it calls): a derivative cannot contain itself")
    return ready


def _reachable(*fns, stop=frozenset()) -> set:
    """``fns`` and the functions they call directly, transitively (not past ``stop``)."""
    seen, todo = set(fns), list(fns)
    while todo:
        for inst in todo.pop().instructions():
            callee = inst.called_function if isinstance(inst, I.CallBase) else None
            if callee is not None and not callee.is_declaration and callee not in seen \
                    and callee not in stop:
                seen.add(callee)
                todo.append(callee)
    return seen


def _lower_sites(program, text: str, sites, opt_level, last: bool) -> str:
    """``program`` (parsed from ``text``) with ``sites`` replaced by their derivatives; the
    markers are removed on the ``last`` round only, when no call still reads them."""
    if not sites:
        _remove_markers(program)
        return str(program)
    tag = "pz" + hashlib.sha256(text.encode()).hexdigest()[:8]
    promote_local_globals(program, tag)
    targets = list(dict.fromkeys(n for s in sites for n in (
        virtual_shadows.targets(s) if s.mode == "virtual" else [s.function.name])))
    _refuse_runtime_calls(program, sites)
    # Forward mode differentiates CBLAS routines by name, as Enzyme does; they stay calls
    # (in reverse mode too, so that a refusal in their bodies is theirs).
    blas = cblas_rows(program)
    copy, rules, reg, keep = _copy(program, targets, last=last,
                                   also_keep=[r.names[0] for r in blas])
    forward_rules = RuleTable(rules.rows())
    for row in blas:
        if forward_rules.lookup(row.names[0], "call") is None:  # a registration wins
            forward_rules.add(row)
    shadow_contexts.ready_copy(copy)
    # Globals the code writes (or enzyme_shadow names, or contexts hold) become trailing
    # parameters.
    table = shadow_contexts.table_of(program)
    hidden, takers = thread_globals(
        copy, reg.shadows, reg.inactive_globals, keep,
        contexts=any(s.context is not None for s in sites),
        queried=shadow_contexts.queried_globals(program) if table is not None else ())
    derivs: dict[tuple[bool, bool], Derivatives] = {}
    names, pairs = [], {}
    for k, site in enumerate(sites):
        name = f"__pyzyme_{site.mode}.{site.function.name}.{tag}.{k}"
        # enzyme_runtime_activity: this site's own; forward mode: the CBLAS rows
        key = (site.runtime_activity, site.mode in FORWARD_MODES)
        if key not in derivs:
            derivs[key] = Derivatives(copy, forward_rules if key[1] else rules,
                                      Options(runtime_activity=site.runtime_activity),
                                      later_round=not last)
        try:
            if site.mode == "virtual":
                virtual_shadows.build_virtual(site, copy, derivs[key], name, takers, pairs)
            else:
                build_adapter(site, copy, derivs[key], name,
                              hidden if site.function.name in takers else (),
                              table.name if table is not None else None)
        except PyzymeError as err:
            reword_unknown_call(err, program, site)
            if not str(err).startswith(site.where):
                err.context.insert(0, ("the call at", f"{site.where} ({site.entry})"))
            if isinstance(err, ActivityError) and "set_runtime_activity" in (err.hint or ""):
                err.hint = ("pass enzyme_runtime_activity among the call's arguments, so loads "
                            "and stores check at run time whether a pointer's shadow is its "
                            "primal, or pass that argument as enzyme_dup")
            reword_blas_body(err, program, site)
            raise
        _replace_call(program, site, name)
        names.append(name)
    if last:
        _remove_markers(program)
        _remove_hints(copy)
    # Before another round, the generated code is left for that round's AD copy to optimise
    # the AD way (no vectorization, which the outer derivative would have to differentiate).
    return link_into(str(program), copy, names, opt_level=opt_level if last else None)


# The runtime's functions that differentiated code may not call: their derivatives would
# have to act on every shadow of a context, or on the default contexts the program shares.
_NOT_IN_DERIVATIVES = {shadow_contexts.RUNTIME[k][0]: api for k, api in (
    ("zero", "__enzyme_zero_shadows"), ("default_shadow", "__enzyme_shadow(&global, width, "
                                                          "lane)"))}


# Clang -fopenmp outlines a parallel region's body and passes it, with pointers to what it
# captures, to the OpenMP runtime, which runs it on a team of threads. pyzyme differentiates
# neither; the region is refused whatever its arguments' activity, since a captured value
# passed by value (an i64 holding a double) would otherwise read as inactive.
_OPENMP_FORKS = re.compile(r"__kmpc_fork_(call|call_if|teams)|GOMP_parallel\w*")


def _refuse_runtime_calls(program, sites) -> None:
    """Refuse a derivative of code that zeroes a context or reads the default shadows, or
    that starts an OpenMP parallel region."""
    for site in sites:
        for fn in _reachable(site.function):
            if fn.name.startswith("__pyzyme"):  # the runtime, and derivatives built before
                continue
            for inst in fn.instructions():
                callee = inst.called_function if isinstance(inst, I.CallBase) else None
                if callee is not None and _OPENMP_FORKS.fullmatch(callee.name):
                    raise UnsupportedError(
                        f"{source_location(program, inst)}: an OpenMP parallel region in "
                        f"{fn.ref}, which {site.where} differentiates: OpenMP parallel regions "
                        f"are not differentiated by pyzyme (clang -fopenmp runs the region's "
                        f"body on a team of threads through {callee.name})",
                        hint="build without -fopenmp, so that the region runs serially and is "
                             "differentiated as a plain loop, or start the parallel region "
                             "outside the differentiated code")
                api = _NOT_IN_DERIVATIVES.get(callee.name) if callee is not None else None
                if api is not None:
                    raise UnsupportedError(
                        f"{source_location(program, inst)}: {api} in {fn.ref}, which "
                        f"{site.where} differentiates: pyzyme has no derivative of it",
                        hint="call it outside the differentiated code")


def copy_with_rules(program, targets):
    """The AD copy of ``program`` (:func:`~pyzyme.frontends.ad_copy.ad_copy`) for
    differentiating ``targets``, and its rule table: pyzyme's, plus what the program's
    ``__enzyme_inactivefn``/``__enzyme_function_like``/``__enzyme_register_*`` globals say.
    The functions those name (and the registered derivatives) stay calls in the copy, as do
    the C++ library's inactive functions (inlined, their bodies' virtual calls and buffers
    would have to be differentiated). The targets keep their signatures, so a global with
    an ``enzyme_shadow`` that they use is refused."""
    copy, rules, reg, _ = _copy(program, targets)
    shadowed = [g for g in reg.shadows if copy.get_global(g) is not None]
    if shadowed:
        raise UnsupportedError(
            f"the differentiated code uses the global @{shadowed[0]}, whose shadow "
            f"enzyme_shadow names (@{reg.shadows[shadowed[0]]}): pyzyme does not compute "
            f"derivatives with respect to global variables here",
            hint="pass the value as an argument of the differentiated function (enzyme_dup "
                 "with a shadow pointer) instead of through a global")
    return copy, rules


def _copy(program, targets, *, last: bool = True, also_keep=()):
    """:func:`copy_with_rules`' copy and rules, with the registrations and the functions
    kept as calls (and those of ``also_keep``); ``last``: no later round differentiates the
    generated code."""
    reg = find_registrations(program)
    library = [f.name for f in program.functions if cxx_library_inactive(f.name)
               or f.name.startswith(shadow_contexts.RUNTIME_PREFIX)]
    keep = [n for n in [*reg.inactive, *reg.like, *reg.rule_functions, *library, CAPACITY_NAME,
                        *also_keep]
            if n not in targets and program.get_function(n) is not None
            and not program.get_function(n).is_declaration]
    log = gradient_log(program)
    if log is not None:
        keep.append(log)
    copy = ad_copy(_count_iterations(program, targets, keep, last), targets, keep_calls=keep)
    logs = (GradientLog((log,), "custom"),) if log is not None else ()
    return copy, c_rules(copy, reg.inactive, reg.like, reg.registered,
                         inactive_globals=[g for g in reg.inactive_globals
                                           if copy.get_global(g) is not None],
                         allocation_like=reg.allocation_like,
                         rows=(*shadow_contexts.RULES, *logs)), reg, keep


def _iteration_counts(module) -> list:
    """The calls of ``__enzyme_iter(n, step)`` (any spelling) in ``module``."""
    return [inst for fn in module.functions if fn.is_declaration and _ITER in fn.name
            for inst in fn.users
            if isinstance(inst, I.CallBase) and inst.called_function is fn]


def _count_iterations(program, targets, keep, last: bool) -> str:
    """The text of ``program`` for the AD copy, with each ``__enzyme_iter(n, step)`` in the
    functions to differentiate (those ``targets`` reach, not through ``keep``) counting one
    more step: ``__enzyme_iter(n + step, step)``, as Enzyme has it in each function it
    differentiates, so the k-th nested derivative of a truncated series runs k steps further.
    On the ``last`` round the call is its count, ``n + step``; in the program it is ``n``
    (:func:`_remove_markers`)."""
    text = str(program)
    if not _iteration_counts(program):
        return text
    module = ir.parse_module(text)
    differentiated = _reachable(*(module.get_function(t) for t in targets),
                                stop={module.get_function(k) for k in keep})
    for call in _iteration_counts(module):
        if call.function not in differentiated:
            continue
        _drop_debug_records(call.function)
        b = IRBuilder()
        b.position_before(call)
        count, step = call.args[0], call.args[1]
        counted = b.add(count, step)
        if last:
            call.replace_all_uses_with(counted)
            call.erase()
        else:
            call.set_operand(1, counted)  # operand 0 is the callee
    return str(module)


def _replace_call(program, site, name: str) -> None:
    call = site.call
    _drop_debug_records(call.function)
    args = [call.args[p] for p in site.kept]
    ret = call.type if site.sret is None else T.void
    decl = program.add_function(name, T.FunctionType(ret, [a.type for a in args]))
    b = IRBuilder()
    b.position_before(call)
    new = b.call(decl, args)
    new.metadata = [(k, t) for k, t in call.metadata if k == "dbg"]
    if call.type != T.void:
        call.replace_all_uses_with(new if ret != T.void else ir.Undef(call.type))
    if isinstance(call, I.Invoke):  # C++: the derivative does not throw; no unwind edge
        b.br(call.normal_dest)
        forget_edge(call.parent, call.unwind_dest)
    call.erase()


def _drop_debug_records(fn) -> None:
    """Forget the ``#dbg_value`` records of ``fn``: pyzyme carries them as text naming values
    by number, and removing an instruction renumbers the values after it. Line information
    (``!dbg`` attachments) stays."""
    for inst in fn.instructions():
        inst.debug_records = []


def _remove_hints(module) -> None:
    """Delete the calls of Enzyme's type hints (``__enzyme_double(p, bytes)``): type analysis
    has read them; derivatives copy them as calls without a derivative."""
    for fn in module.functions:
        for inst in list(fn.instructions()):
            if isinstance(inst, I.CallBase) and inst.called_function is not None and \
                    inst.called_function.name.startswith(_HINTS) and not inst.users:
                _drop_debug_records(fn)
                inst.erase()


def _remove_markers(program) -> None:
    """Delete what only Enzyme's pass would have read: loads of the ``enzyme_*`` globals,
    type-hint calls, declarations nothing uses; a marker still used (its address stored
    somewhere) gets a weak definition, so ``extern int enzyme_dup;`` links."""
    for call in _iteration_counts(program):
        call.replace_all_uses_with(call.args[0])
        _drop_debug_records(call.function)
        call.erase()
    for fn in program.functions:
        for inst in list(fn.instructions()):
            if isinstance(inst, I.Load) and not inst.users and marker(inst):
                _drop_debug_records(fn)
                inst.erase()
    _remove_hints(program)
    for gv in list(program.globals):
        if marker(gv) and gv.is_declaration:
            if gv.users:
                gv.initializer = ZeroInitializer(gv.value_type)
                gv.prefix = "weak"
            else:
                program.remove(gv)
    for fn in list(program.functions):
        if fn.is_declaration and "__enzyme_" in fn.name and not fn.users:
            program.remove(fn)
