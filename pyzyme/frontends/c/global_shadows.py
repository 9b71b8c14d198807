"""Global variables that differentiated C/C++ code uses actively: shadows as hidden arguments.

pyzyme carries derivatives through memory it is handed with a shadow (an ``enzyme_dup``
pointer) or allocates itself; a global variable has no shadow, so an active value stored into
one (a file-scope scratch array a helper fills, then another reads) was refused. Enzyme gives
such globals shadows. In the AD copy, this module turns them into memory pyzyme is handed: each
function that uses one of them, or calls a function that does, takes the globals' addresses as
trailing parameters (its callers pass them on), and the adapter of a call site
(:mod:`~pyzyme.frontends.c.adapters`) passes each global with its shadow, as one more
``enzyme_dup`` argument.

Which globals, and which shadow:

- a global declared ``__attribute__((enzyme_shadow(s)))`` wherever the code uses it: its shadow
  is ``s``, which the program seeds and reads (reverse mode adds the derivative with respect to
  the global into it);
- a mutable global holding floats and no pointers that the code writes (stores into it, or
  hands its address to a call): its shadow is a global of the generated code, zeroed at the
  start of each derivative call: derivatives are taken with respect to the call's arguments,
  so the value a global holds on entry counts as a constant.

- with Enzyme's contexts (:mod:`~pyzyme.frontends.c.shadow_contexts`), any global holding
  floats or pointers that the code uses, when a call site passes ``enzyme_context`` (its
  shadows are the context's) or the program asks for the global's default shadows
  (``__enzyme_shadow(&g, width, lane)``: a call without a context uses those).

Otherwise a global the code only reads keeps no shadow (it is a constant of the derivative):
call sites pass it as a constant. When a function that would need the parameters cannot be
given them (its address is taken, it is variadic, it must stay a call of its own), nothing is
threaded: a store into a global without a shadow is then refused where it is differentiated,
and a global whose shadow ``enzyme_shadow`` or a context gives is refused here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyzyme import naming
from pyzyme.analysis.activity import contains_type
from pyzyme.analysis.layout import sizeof
from pyzyme.errors import UnsupportedError
from pyzyme.frontends.c.shadow_contexts import carries_derivatives
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import Function
from pyzyme.ir.values import (Argument, ConstantAggregate, ConstantExpr, ConstantSplat,
                              GlobalAlias, GlobalVariable, OpaqueConstant, ZeroInitializer)

__all__ = ["Hidden", "thread_globals", "globals_used"]


@dataclass(frozen=True)
class Hidden:
    """A global passed as a trailing parameter: ``name`` and its shadow ``shadow`` (globals
    of the AD copy; None: it has a shadow only in contexts); ``zeroed``: the shadow is zeroed
    when a derivative call starts; ``queried``: the program asks for its default shadows."""

    name: str
    shadow: str | None
    zeroed: bool
    queried: bool = False

    @property
    def declared(self) -> bool:
        """Its shadow is the one ``enzyme_shadow`` names."""
        return self.shadow is not None and not self.zeroed

    def size(self, module) -> int:
        return sizeof(module.get_global(self.name).value_type)


def thread_globals(copy, shadows: dict[str, str], inactive_globals=(), keep=(), *,
                   contexts: bool = False, queried=frozenset()):
    """Give the functions of ``copy`` (the AD copy) that use globals needing shadows those
    globals as trailing parameters (see the module docstring).

    Parameters
    ----------
    copy
        The AD copy; changed in place.
    shadows
        ``enzyme_shadow`` declarations: global -> its shadow global.
    inactive_globals
        Globals declared ``enzyme_inactive``: their memory carries no derivative.
    keep
        Functions that must stay calls as they are (inactive, registered, library ones).
    contexts
        Whether a call site passes ``enzyme_context``.
    queried
        The globals whose default shadows the program asks for (None: it may ask for any).

    Returns
    -------
    (list of Hidden, set of function names)
        The globals, in parameter order, and the functions that take them.

    Raises
    ------
    UnsupportedError
        When the code uses a global whose shadow ``enzyme_shadow`` or a context gives but
        cannot take it as a parameter.
    """
    keep = set(keep)
    functions = [f for f in copy.functions if not f.is_declaration]
    uses = {f: globals_used(f) for f in functions if f.name not in keep}
    writes: dict = {}  # each global used, in order: whether some function may write it
    for used in uses.values():
        for gv, w in used.items():
            writes[gv] = writes.get(gv, False) or w
    written = {gv for gv, w in writes.items()
               if w and gv.name not in shadows and _needs_shadow(gv, inactive_globals)}
    wanted = [gv for gv in writes if gv.name in shadows or gv in written or (
        (contexts or queried is None or gv.name in queried) and _in_contexts(gv, inactive_globals))]
    if not wanted:
        return [], set()
    takers = _callers_closure(functions, {f for f, used in uses.items()
                                          if any(g in used for g in wanted)})
    problem = _cannot_extend(copy, takers, keep, wanted)
    if problem is not None:
        user = next((g for g in wanted if g.name in shadows), None)
        if user is not None:
            raise UnsupportedError(
                f"the differentiated code uses the global @{user.name}, whose shadow "
                f"enzyme_shadow names (@{shadows[user.name]}), but pyzyme cannot pass it to "
                f"{problem}", hint="pass the value as an argument of the differentiated "
                                   "function (enzyme_dup with a shadow pointer) instead")
        user = next((g for g in wanted if g not in written), None)
        if user is not None:
            raise UnsupportedError(
                f"the differentiated code uses the global @{user.name}, whose shadow "
                f"{'a context' if contexts else 'the default context'} gives "
                f"(__enzyme_shadow), but pyzyme cannot pass it to {problem}",
                hint="pass the value as an argument of the differentiated function "
                     "(enzyme_dup with a shadow pointer) instead")
        return [], set()
    hidden = []
    for gv in wanted:
        asked = queried is None or gv.name in queried
        if gv.name in shadows:
            if copy.get_global(shadows[gv.name]) is None:  # the copy kept only what it uses
                copy.add_global(shadows[gv.name], gv.value_type, prefix="external")
            hidden.append(Hidden(gv.name, shadows[gv.name], zeroed=False))
        elif gv in written:
            shadow = copy.add_global(copy.unique_global_name(f"{gv.name}.pzshadow"),
                                     gv.value_type, ZeroInitializer(gv.value_type),
                                     prefix="internal", suffix=", align 16")
            hidden.append(Hidden(gv.name, shadow.name, zeroed=True, queried=asked))
        else:
            hidden.append(Hidden(gv.name, None, zeroed=False, queried=asked))
    for fn in takers:
        _add_params(fn, wanted)
    for fn in takers:
        for inst in list(fn.instructions()):
            if isinstance(inst, I.CallBase) and inst.called_function in takers:
                callee = inst.called_function
                inst.append_args(fn.args[-len(wanted):], callee.function_type)
            elif _step_of(inst) in takers:  # a loop over a step passes its step's on
                b = IRBuilder()
                b.position_before(inst)
                b.call(inst.callee, [*inst.args, *fn.args[-len(wanted):]],
                       function_type=inst.function_type)
                inst.erase()
    return hidden, {f.name for f in takers}


# ------------------------------------------------------------------------------ finding
def _needs_shadow(gv, inactive_globals) -> bool:
    """A mutable global of the program holding floats and no pointers (its shadow is then
    a plain zeroed copy of its type)."""
    ty = gv.value_type
    return (isinstance(gv, GlobalVariable) and not gv.is_constant and ty is not None
            and gv.name not in inactive_globals and not gv.name.startswith(("enzyme_",
                                                                           "__enzyme", "llvm."))
            and contains_type(ty, lambda t: t.is_float)
            and not contains_type(ty, lambda t: t.is_pointer))


def _in_contexts(gv, inactive_globals) -> bool:
    """A mutable global whose shadows contexts hold (floats or pointers, not inactive)."""
    return carries_derivatives(gv) and not gv.is_constant and gv.name not in inactive_globals


def globals_used(fn) -> dict:
    """The global variables ``fn`` uses, each with whether it may write them (any use but a
    load's address, through getelementptr)."""
    used: dict = {}
    for inst in fn.instructions():
        for index, op in enumerate(inst.operands):
            for gv, direct in _globals_in(op):
                read = isinstance(inst, I.Load) and index == 0 or (
                    direct and _only_loaded_through(inst, gv))
                used[gv] = used.get(gv, False) or not read
    return used


def _globals_in(value, depth: int = 0):
    """(global, whether it is ``value`` itself) for each global variable in ``value``."""
    if isinstance(value, GlobalVariable):
        yield value, depth == 0
    elif isinstance(value, ConstantExpr) and depth < 16:
        for op in value.operands:
            yield from _globals_in(op, depth + 1)


def _only_loaded_through(inst, gv) -> bool:
    """Whether ``inst``, a getelementptr on ``gv``, leads only to loads."""
    if not (isinstance(inst, I.GetElementPtr) and inst.operands[0] is gv):
        return False
    work, seen = [inst], set()
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        for user in v.users:
            if isinstance(user, I.Load):
                continue
            if isinstance(user, I.GetElementPtr) and user.operands[0] is v:
                work.append(user)
                continue
            return False
    return True


_STEP_LOOPS = (naming.CHECKPOINT_FOR, naming.CHECKPOINT_WHILE, naming.FIXED_POINT)


def _step_of(inst):
    """The step function of a checkpointed loop's or a fixed-point iteration's call (which
    calls it), or None."""
    callee = inst.called_function if isinstance(inst, I.CallBase) else None
    if callee is None or callee.name not in _STEP_LOOPS or not inst.args:
        return None
    return inst.args[0] if isinstance(inst.args[0], Function) else None


def _runs(inst) -> list:
    """The functions a call runs: its callee, and a checkpointed loop's step."""
    callee = inst.called_function if isinstance(inst, I.CallBase) else None
    step = _step_of(inst)
    return [f for f in (callee, step) if f is not None]


def _callers_closure(functions, users: set) -> set:
    """``users`` and every function calling one of them, transitively."""
    callers: dict = {}
    for fn in functions:
        for inst in fn.instructions():
            for callee in _runs(inst):
                callers.setdefault(callee, set()).add(fn)
    found, work = set(users), list(users)
    while work:
        for caller in callers.get(work.pop(), ()):
            if caller not in found:
                found.add(caller)
                work.append(caller)
    return found


def _cannot_extend(copy, takers: set, keep: set, wanted) -> str | None:
    """Why the functions ``takers`` cannot all take more parameters, or None."""
    for fn in takers:
        if fn.name in keep:
            return f"@{fn.name}, which must stay a call of its own"
        if fn.function_type.var_arg:
            return f"the variadic function @{fn.name}"
    for fn in copy.functions:
        for inst in fn.instructions():
            for index, op in enumerate(inst.operands):
                if isinstance(inst, I.CallBase) and (index == 0 or op is _step_of(inst)):
                    continue
                for f in _functions_in(op):
                    if f in takers:
                        return f"@{f.name}, whose address is taken in @{fn.name}"
            if isinstance(inst, I.CallBase) and inst.called_function in takers and \
                    inst.function_type != inst.called_function.function_type:
                return f"@{inst.called_function.name}, called with another type"
            for op in inst.operands:
                for gv, _ in _globals_in(op):
                    if gv in wanted and not _materializable(op):
                        return f"@{fn.name}, which uses @{gv.name}'s address in a constant"
    refs = {re.escape(f.ref) for f in takers}
    pattern = re.compile(rf"(?:{'|'.join(refs)})(?![\w.$-])")
    for gv in copy.globals:
        if gv.initializer is not None and pattern.search(_text(gv.initializer)):
            return f"a function whose address the global @{gv.name} holds"
    for alias in getattr(copy, "aliases", ()):
        if isinstance(alias, GlobalAlias) and pattern.search(alias.text):
            return f"a function the alias @{alias.name} names"
    return None


def _functions_in(value, depth: int = 0):
    if isinstance(value, Function):
        yield value
    elif isinstance(value, ConstantExpr) and depth < 16:
        for op in value.operands:
            yield from _functions_in(op, depth + 1)
    elif isinstance(value, ConstantAggregate) and depth < 16:
        for e in value.elements:
            yield from _functions_in(e, depth + 1)


def _text(value) -> str:
    if isinstance(value, (ConstantAggregate, ConstantExpr, ConstantSplat, OpaqueConstant)):
        return value.ref
    return ""


def _materializable(value) -> bool:
    """A global itself, or getelementptrs on one: what :func:`_rebuild` turns into
    instructions."""
    if isinstance(value, GlobalVariable) or not isinstance(value, ConstantExpr):
        return True
    return value.opcode == "getelementptr" and _materializable(value.operands[0]) and all(
        not any(True for _ in _globals_in(op)) for op in value.operands[1:])


# ---------------------------------------------------------------------------- rewriting
def _add_params(fn, wanted) -> None:
    """``fn`` taking the addresses of ``wanted`` as trailing parameters, used in its body
    instead of the globals."""
    ft = fn.function_type
    fn.function_type = T.FunctionType(ft.ret, [*ft.params, *([T.ptr] * len(wanted))])
    params = {}
    for gv in wanted:
        arg = Argument(fn, T.ptr, len(fn.args), fn.unique_name(f"{gv.name}.addr"))
        fn.args.append(arg)
        params[gv] = arg
    for inst in list(fn.instructions()):
        for index, op in enumerate(list(inst.operands)):
            if not any(gv in params for gv, _ in _globals_in(op)):
                continue
            b = IRBuilder()
            if isinstance(inst, I.Phi):
                b.position_before(inst.incoming[index][1].terminator)
            else:
                b.position_before(inst)
            inst.set_operand(index, _rebuild(op, params, b))


def _rebuild(value, params: dict, b):
    """``value`` with the globals in ``params`` replaced by their parameters: constant
    getelementptrs on them become instructions at ``b``."""
    if isinstance(value, GlobalVariable):
        return params.get(value, value)
    if isinstance(value, ConstantExpr) and value.opcode == "getelementptr":
        base = _rebuild(value.operands[0], params, b)
        flags = tuple(f for f in value.flags if f in ("inbounds", "nuw", "nusw"))
        return b.gep(value.source_type, base, list(value.operands[1:]), flags)
    return value
