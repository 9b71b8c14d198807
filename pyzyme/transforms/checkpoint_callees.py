"""Time loops in the functions a differentiated function calls, checkpointed under a tape
budget as its own are (:mod:`pyzyme.transforms.checkpoint_loops`).

A function the differentiated one calls without LLVM inlining it (a recursive one, one kept
apart) may hold the long loop. Its loops are rewritten in place, in the callee, where its
call is not inside a loop of its caller that is checkpointed already (there the callee's
tape is that of one step: nested loops are taped, the outer one checkpointed). A checkpointed
loop needs the bytes of the memory it writes: a callee's array parameters get them from its
call sites (:func:`callee_extents`), where the caller passes the data pointer of an array
whose extent it knows together with the parameters that give that extent.
"""

from __future__ import annotations

from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.names import readable
from pyzyme.ir.values import Argument, const_int, const_null
from pyzyme.transforms.checkpoint_loops import checkpoint_loops

__all__ = ["callee_extents", "checkpoint_callee_loops", "called"]


def called(fn) -> list:
    """The functions with a body that ``fn`` calls directly, in order."""
    out: dict = {}
    for inst in fn.instructions():
        callee = inst.called_function if isinstance(inst, I.CallBase) else None
        if callee is not None and not callee.is_declaration:
            out[callee] = None
    return list(out)


def _site_extents(site: I.CallBase, caller_extents: dict) -> dict:
    """What call ``site`` says of its callee's extents: ``{param: (params...)}`` where it
    passes a data pointer of its caller's whose extent is known, with the parameters that
    give it."""
    caller = site.parent.parent
    args = list(site.args)
    found = {}
    for p, a in enumerate(args):
        if not (isinstance(a, Argument) and a.function is caller and a.index in caller_extents):
            continue
        where = []
        for e in caller_extents[a.index]:
            if not isinstance(e, int):
                where.append(e)  # a constant (the item size)
            elif caller.args[e] in args:
                where.append(args.index(caller.args[e]))
            else:
                break
        else:
            found[p] = tuple(where)
    return found


def _passed_on(value, param) -> bool:
    """Whether ``value`` is ``param`` (or LLVM's ``freeze`` of it)."""
    if isinstance(value, I.Instruction) and value.opcode == "freeze":
        value = value.operands[0]
    return value is param


def callee_extents(module, fn, extents: dict) -> dict:
    """``{function name: extents}`` (as :func:`checkpoint_loops` takes them: parameter
    indices, or constants) for ``fn`` (``extents``) and the functions it calls, directly or
    not: a parameter's extent is known where every call site agrees on it (a recursive call
    passing the parameters on as they came agrees)."""
    known = {fn.name: dict(extents)}
    changed = True
    while changed:
        changed = False
        for g in module.functions:
            if g.is_declaration or g.name in known:
                continue
            sites = [u for u in g.users if isinstance(u, I.CallBase) and u.called_function is g]
            outer = [s for s in sites if s.parent.parent is not g]
            if not outer or any(s.parent.parent.name not in known for s in outer):
                continue  # not called, or not all its callers' extents known yet
            agreed = None
            for site in outer:
                found = _site_extents(site, known[site.parent.parent.name])
                agreed = found if agreed is None else {
                    p: v for p, v in agreed.items() if found.get(p) == v}
            for site in sites:
                if site.parent.parent is g:  # recursion: the same parameters passed on
                    agreed = {p: v for p, v in agreed.items()
                              if all(_passed_on(site.args[q], g.args[q]) for q in (p, *v)
                                     if isinstance(q, int))}
            known[g.name] = agreed
            changed = True
    return known


def checkpoint_callee_loops(module, fn, own: set, growth: dict, budget: int, extents: dict,
                            caller: str, stable: bool = True, tangents: int = 0) -> set:
    """Checkpoint the loops of the functions ``fn`` calls (directly or not, outside loops
    checkpointed already) whose reverse-mode tape grows with a loop of their own (``own``,
    by name); ``growth`` and ``extents`` by function name as :func:`checkpoint_loops` takes
    them for one function; ``caller`` names ``fn`` in errors. Returns the names of the
    functions whose loops were rewritten."""
    done: set = set()
    seen: set = set()
    work = called(fn)
    while work:
        g = work.pop(0)
        if g.name in seen or g is fn:
            continue
        seen.add(g.name)
        if g.name in own:
            try:
                checkpoint_loops(module, g, budget, extents.get(g.name, {}),
                                 lambda k, total, g=g: (
                                     f"loop {k + 1} of {total} in {readable(g.name)} (called "
                                     f"from {caller})"),
                                 growth.get(g.name, {}), stable=stable, tangents=tangents)
            except UnsupportedError as err:
                # What a callee's loop lacks may be what its callers do not pass on.
                err.hint = (f"{err.hint}; or differentiate {readable(g.name)} itself, which "
                            f"sees its arguments whole")
                raise
            done.add(g.name)
        work += called(g)
    if done:
        _budget_errors_reach_the_caller(fn)
    return done


def _budget_errors_reach_the_caller(fn) -> None:
    """A callee over the budget returns status -1 with the Python error set (TapeBudgetError),
    but its callers, optimized before, pass any nonzero status on as a user exception (1)
    with the exception record their callee left: none (null), which only such a callee
    leaves. ``fn`` returns -1 there, as Numba's caller expects of a Python error."""
    b = IRBuilder()
    for inst in [i for i in fn.instructions() if isinstance(i, I.Ret) and i.operands]:
        status = inst.operands[0]
        b.position_before(inst)
        record = b.load(T.ptr, fn.args[1], 8, name="ckpt.excinfo")
        # (a select, not an and: the record is read where the status is 0 too, unset)
        failed = b.select(b.icmp("ne", status, const_int(status.type, 0)),
                          b.icmp("eq", record, const_null(T.ptr)), const_int(T.i1, 0))
        inst.set_operand(0, b.select(failed, const_int(status.type, -1), status,
                                     name="ckpt.status"))
