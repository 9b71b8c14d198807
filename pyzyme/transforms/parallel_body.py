"""The body of a parallel loop, with the arguments that carry no derivative read apart.

A parallel loop's body takes its arrays as one ``char **args`` (see
:class:`~pyzyme.rules.spec.ParallelFor`), some of which carry derivatives (the caller's
``Duplicated`` arrays, its reduction slots) and some not (the schedule, ``Const`` arrays). An
activity of the whole ``args`` would give every one a shadow, and accumulate adjoints into
memory that has none. :func:`split_arguments` copies the body with one more parameter,
``cargs``: the same array, from which the copy reads the inactive slots, so activity analysis
of the copy sees those pointers come from a constant parameter.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @body(ptr %args, ptr %dims, ptr %steps, ptr %data) {
... entry:
...   %p1 = getelementptr i8, ptr %args, i64 8
...   %a = load ptr, ptr %args
...   %b = load ptr, ptr %p1
...   %x = load double, ptr %b
...   store double %x, ptr %a
...   ret void
... }''')
>>> body = split_arguments(m, m.get_function("body"), frozenset({1}))
>>> print(str(body).split("entry:")[1].split("store")[0].strip())
%p1 = getelementptr i8, ptr %args, i64 8
  %a = load ptr, ptr %args
  %p1.c = getelementptr i8, ptr %cargs, i64 8
  %b = load ptr, ptr %p1.c
  %x = load double, ptr %b
"""

from __future__ import annotations

from pyzyme.analysis.overwrite import fresh_object, link_time_object
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir.builder import resolve_later_operands
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import Value, const_int
from pyzyme.rules import default_rules, spec

__all__ = ["split_arguments", "argument_slots", "slot_loads", "apart_slots", "launch_row",
           "CARGS", "SHARED"]

_WORD = 8
#: The split body's parameters after the body's own four (args, dims, steps, data).
CARGS = 4    # the argument array again, for the slots carrying no derivative
SHARED = 5   # i1: whether other threads run other rows at the same time


def launch_row(inst):
    """The :class:`~pyzyme.rules.spec.ParallelFor` row of ``inst``, a launch of a parallel
    loop; else None."""
    callee = inst.called_function if isinstance(inst, I.CallBase) else None
    row = default_rules().lookup(callee.name, "call") if callee is not None else None
    return row if isinstance(row, spec.ParallelFor) else None


def argument_slots(args: Value, launch=None, word: bool = False) -> dict | None:
    """The loads (or stores) of the ``ptr`` slots of the array at ``args`` by slot index:
    ``{k: [instruction, ...]}``; None where the array is used any other way than by call
    ``launch`` or another call of its callee (its address passed on, a slot at an offset
    known only at run time). With
    ``word``, the slots are ``i64`` ones (``dims``, ``steps``), and other uses are ignored."""
    slots: dict = {}
    work = [(args, 0)]
    while work:
        pointer, offset = work.pop()
        for user in pointer.users:
            if isinstance(user, I.GetElementPtr) and user.operands[0] is pointer:
                step = _constant_offset(user)
                if step is None:
                    return None
                work.append((user, offset + step))
            elif isinstance(user, I.Load) and user.pointer is pointer:
                slots.setdefault(offset // _WORD, []).append(user)
            elif isinstance(user, I.Store) and user.operands[1] is pointer \
                    and user.operands[0] is not pointer:
                slots.setdefault(offset // _WORD, []).append(user)
            elif user is launch or (
                    isinstance(user, I.CallBase) and user.called_function is not None
                    and (user.called_function.name.startswith("llvm.lifetime")
                         or (launch is not None
                             and user.called_function is launch.called_function))):
                continue  # another launch may reuse the array (a loop unrolled)
            elif not word:
                return None
    return slots


def slot_loads(body) -> dict:
    """For a split body: ``{load: k}``, each pointer it reads from slot ``k`` of its argument
    array (``args`` or ``cargs``)."""
    slot_of = {}
    for args in body.args[0], body.args[CARGS]:
        for k, uses in (argument_slots(args) or {}).items():
            for use in uses:
                if isinstance(use, I.Load):
                    slot_of[use] = k
    return slot_of


def apart_slots(body, distinct: bool):
    """For a split body: ``apart(a, b)``, whether objects ``a`` and ``b`` do not overlap as
    the body's launch makes them. The launcher fills the argument array (``args``, read
    again as ``cargs``) with arrays that exist at run time before the body runs, and the body
    never writes the array; so a pointer read from one of its slots is apart from:

    - memory the body allocates (a stack slot, an allocation, a MemInfo's data);
    - the launcher's own arrays the body takes as parameters (``args``, ``dims``, ``steps``);
    - link-time objects (:func:`~pyzyme.analysis.overwrite.link_time_object`: globals, and
      what a constant global holds, as Numba's exception info and its pickled arguments,
      which the path raising an error passes to the interpreter), from which the first two
      are apart too;
    - with ``distinct`` (the launch passed distinct arrays), pointers read from other slots.

    Examples
    --------
    >>> from pyzyme.ir import parse_module
    >>> m = parse_module('''
    ... @info = private constant { ptr, i32 } { ptr null, i32 0 }
    ... define void @body(ptr %args, ptr %dims, ptr %steps, ptr %data) {
    ... entry:
    ...   %p1 = getelementptr i8, ptr %args, i64 8
    ...   %a = load ptr, ptr %args
    ...   %b = load ptr, ptr %p1
    ...   %t = alloca double
    ...   %i = load { ptr, i32 }, ptr @info
    ...   %e = extractvalue { ptr, i32 } %i, 0
    ...   ret void
    ... }''')
    >>> body = split_arguments(m, m.get_function("body"), frozenset({1}))
    >>> a, b, t, e = [i for i in body.blocks[0].instructions if i.name in ("a", "b", "t", "e")]
    >>> dims, data = body.args[1], body.args[3]
    >>> pairs = ((a, b), (a, t), (t, e), (e, b), (a, dims), (dims, e), (a, data), (data, e))
    >>> [apart_slots(body, False)(x, y) for x, y in pairs]
    [False, True, True, True, True, True, False, False]
    >>> [apart_slots(body, True)(x, y) for x, y in pairs][:2]
    [True, True]
    """
    slot_of = slot_loads(body)
    if any(isinstance(use, I.Store) for args in (body.args[0], body.args[CARGS])
           for uses in (argument_slots(args) or {}).values() for use in uses):
        slot_of = {}  # a slot the body writes may hold what the body allocated
    launcher = {body.args[k] for k in (0, 1, 2, CARGS)}

    def apart(a, b) -> bool:
        ka, kb = slot_of.get(a), slot_of.get(b)
        if ka is not None and kb is not None:
            return distinct and ka != kb
        if link_time_object(a) or link_time_object(b):
            other = b if link_time_object(a) else a
            return other in slot_of or other in launcher or fresh_object(other)
        if ka is not None or kb is not None:
            other = b if ka is not None else a
            return other in launcher or fresh_object(other)
        return False
    return apart


def _constant_offset(gep: I.GetElementPtr) -> int | None:
    indices = gep.operands[1:]
    if len(indices) != 1 or not isinstance(getattr(indices[0], "value", None), int):
        return None
    size = {"i8": 1, "ptr": _WORD, "i64": _WORD}.get(str(gep.source_type))
    return None if size is None else indices[0].value * size


def split_arguments(module, body, inactive: frozenset, broadcast: frozenset = frozenset()):
    """A copy of ``body`` (``void (ptr args, ptr dims, ptr steps, ptr data)``) taking a fifth
    parameter ``cargs``, from which it reads the slots ``inactive`` of ``args``, and a sixth,
    ``i1 shared``, which it does not read (its derivatives do: whether other threads run
    other rows at the same time); made once per body and set of slots. The outer steps of the slots ``broadcast`` (``steps[k]``: the
    launcher passes those arguments whole to every row) read as 0, so each such argument's
    address is the same in every row where the analyses can see it.

    Raises
    ------
    UnsupportedError
        Where the body reads ``args`` other than slot by slot at constant offsets.
    """
    slots = argument_slots(body.args[0])
    if slots is None:
        raise UnsupportedError(
            f"the parallel loop body {body.ref} reads its argument array in a way pyzyme "
            f"cannot follow", hint="write the loop with range instead of numba.prange")
    name = f"{body.name}.split" + "".join(f".{k}" for k in sorted(inactive)) \
        + ("" if not broadcast else ".b" + "".join(f".{k}" for k in sorted(broadcast)))
    made = module.get_function(name)
    if made is not None:
        return made
    fnty = body.function_type
    new = module.add_function(name,
                              T.FunctionType(fnty.ret, [*fnty.params, T.ptr, T.i1]),
                              prefix="internal", suffix=body.suffix)
    mapping: dict = {}
    for old, arg in zip(body.args, new.args):
        arg.name = old.name
        mapping[old] = arg
    cargs = new.args[-2]
    cargs.name = "cargs"
    new.args[-1].name = "shared"
    redirected = {inst for k in inactive for inst in slots.get(k, ())}
    steps = argument_slots(body.args[2], word=True) or {}
    zeroed = {inst for k in broadcast for inst in steps.get(k, ())
              if isinstance(inst, I.Load)}
    for block in body.blocks:
        mapping[block] = new.append_block(block.name)
    copies = []
    for block in body.blocks:
        b = IRBuilder(mapping[block])
        for inst in block.instructions:
            if inst in zeroed:
                mapping[inst] = const_int(inst.type, 0)
                continue
            ops = [mapping.get(op, op) for op in inst.operands]
            if inst in redirected and isinstance(inst, I.Load):
                ops[0] = _rebased(b, inst.pointer, body.args[0], cargs)
            copy = b.insert_copy(inst, mapping, ops)
            mapping[inst] = copy
            copies.append(copy)
    resolve_later_operands(copies, mapping)
    return new


def _rebased(b: IRBuilder, pointer: Value, args: Value, cargs: Value) -> Value:
    """``pointer`` (``args`` moved by constant geps) moved the same way from ``cargs``."""
    if pointer is args:
        return cargs
    base = _rebased(b, pointer.operands[0], args, cargs)
    name = f"{pointer.name}.c" if pointer.name else ""
    return b.insert(pointer.copy_with([base, *pointer.operands[1:]]), name)
