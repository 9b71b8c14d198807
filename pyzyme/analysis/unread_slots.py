"""Memory a parallel loop's body writes whose primal contents no part of a derivative reads.

Numba's parallel reductions (``s += ...`` in a prange loop) give each thread a slot of a
reduction array the launching function allocates: the body loads its thread's slot, adds its
row's terms and stores the sum back; after the launch the launching function adds the slots
up into the result. In a reverse derivative that does not return the primal result, the sum
is needed by no one: the adjoint of a sum is a broadcast, so the reverse sweep never reads a
slot's value, and the result it flows into is not returned. Yet the body's forward sweep,
launched through a function pointer, is opaque to LLVM: it keeps computing the sum (in
Lennard-Jones, every pair's energy: the whole primal) to store it. This module finds such
memory, so that the forward sweep can leave those stores out:

- :func:`unread_after_launch` (the launching function): memory it allocated, passed to the
  launch, whose every read has a value only *linear* operations carry on (sums, differences,
  negations, merges, products and quotients by inactive values: partials that do not read
  it) to stores into a result nothing reads, and which nothing else touches (no call is
  handed it, its address is stored nowhere but into one slot of the launch's argument array);
- :func:`unread_stores` (the body): the stores into memory read from such a slot, where the
  body reads that memory only into values that linear operations carry to those stores.

Values carried only by linear operations are not needed by the reverse sweep of those
operations; a derivative whose reverse sweep needs them anyway (a product with an active
value, a comparison, a call) is refused here, and the stores are kept.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @body(ptr %args) {
... entry:
...   %slot = load ptr, ptr %args
...   %old = load double, ptr %slot
...   %new = fadd double %old, 1.0
...   store double %new, ptr %slot
...   ret void
... }''')
>>> body = m.get_function("body")
>>> slot = body.blocks[0].instructions[0]
>>> print(len(unread_stores([slot], lambda v: False)))
1
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pyzyme.analysis.overwrite import fresh_object, meminfo_of, refcount_call, underlying_object
from pyzyme.ir import instructions as I
from pyzyme.ir.opcodes import ADDRESS_CASTS

__all__ = ["linear_only", "unread_after_launch", "unread_stores"]

#: Operations whose partials are constants: they need none of their operands' values.
_SUMS = frozenset({"fadd", "fsub", "fneg", "phi"})
#: Calls that touch memory without reading its floats (markers, a fill).
_NO_READS = ("llvm.lifetime.", "llvm.memset.", "llvm.dbg.", "llvm.assume",
             "llvm.experimental.noalias")


def linear_only(values: Iterable, store_ok: Callable[[I.Store], bool],
                active: Callable[[object], bool]) -> bool:
    """Whether ``values`` (floats) reach only operations that need none of them in a
    reverse sweep: sums, differences, negations, phis, the chosen values of selects,
    products by (and quotients over) values not ``active``, and stores ``store_ok``
    accepts, each result reaching only such operations in turn."""
    seen: set = set()
    work = list(values)
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        for user in v.users:
            op = user.opcode
            if isinstance(user, I.Store):
                if user.operands[0] is v and user.operands[1] is not v and store_ok(user):
                    continue
                return False
            if op in _SUMS or (op == "select" and user.operands[0] is not v):
                work.append(user)
            elif op == "fmul" and all(o is v or not active(o) for o in user.operands) \
                    and user.operands[0] is not user.operands[1]:
                work.append(user)       # scaled by a constant: d/dv reads the constant
            elif op == "fdiv" and user.operands[0] is v and user.operands[1] is not v \
                    and not active(user.operands[1]):
                work.append(user)
            else:
                return False
    return True


def unread_after_launch(fn, launch: I.CallBase, pointer, args_array,
                        active: Callable[[object], bool], result=None) -> bool:
    """Whether the memory at ``pointer``, which ``fn`` passes to ``launch`` in the argument
    array ``args_array`` (its stack slot), has primal contents nothing in a derivative of
    ``fn`` needs: ``fn`` allocated it (a MemInfo's data block, or an allocation) and its
    address goes nowhere but into loads, stores into it, fills, reference counts and one
    slot of ``args_array`` (so no other pointer reaches it), and each of its reads reaches only
    linear operations (:func:`linear_only`) and stores into ``result`` (a parameter whose
    memory no one reads: the result of a derivative that does not return the primal; None:
    there is none), which ``fn`` only writes."""
    if not pointer.type.is_pointer:
        return False
    obj = underlying_object(pointer)
    owner = meminfo_of(obj)
    if owner is None and not fresh_object(obj):
        return False
    reads = _reads_of(owner if owner is not None else obj, owner is not None,
                      underlying_object(args_array), launch)
    if reads is None:
        return False
    if result is not None and _reads_of(result, False, None, None) != []:
        result = None

    def into_result(store: I.Store) -> bool:
        return result is not None and underlying_object(store.operands[1]) is result
    return linear_only(reads, into_result, active)


def _reads_of(root, meminfo: bool, args_array, launch) -> list | None:
    """The float loads of the memory at ``root`` (with ``meminfo``: a MemInfo, its data
    block read through the pointers loaded from it), following its address through address
    arithmetic and merges; None where the address escapes: handed to a call other than a
    fill, a marker or a reference count, stored anywhere but into one slot of ``args_array``
    (its data block only), or put to any other use."""
    reads, handed = [], 0
    work, seen = [(root, meminfo)], set()
    while work:
        p, header = work.pop()
        if p in seen:
            continue
        seen.add(p)
        for user in p.users:
            if user is launch:
                return None
            if isinstance(user, (I.GetElementPtr, I.Phi)) or user.opcode == "select" or (
                    user.opcode in ADDRESS_CASTS and user.type.is_pointer):
                if user.opcode == "select" and user.operands[0] is p:
                    return None
                if isinstance(user, I.GetElementPtr) and user.operands[0] is not p:
                    return None
                work.append((user, header))
            elif isinstance(user, I.Load):
                if header:      # the MemInfo's fields: its data pointer, counts
                    if user.type.is_pointer:
                        work.append((user, False))
                    elif not user.type.is_int:
                        return None
                elif user.type.is_float:
                    reads.append(user)
                else:
                    return None
            elif isinstance(user, I.Store):
                if user.operands[1] is p and user.operands[0] is not p:
                    continue    # a write
                if header or args_array is None \
                        or underlying_object(user.operands[1]) is not args_array:
                    return None
                handed += 1     # into one slot only: the body reads it through that one
                if handed > 1:
                    return None
            elif user.opcode == "icmp":
                continue        # a null test
            elif isinstance(user, I.CallBase):
                callee = user.called_function
                name = callee.name if callee is not None else ""
                if name.startswith(_NO_READS) or (header and refcount_call(user)):
                    continue
                return None
            else:
                return None
    return reads


def unread_stores(slots: Iterable, active: Callable[[object], bool]) -> list | None:
    """The stores into the memory at the pointers ``slots`` (read from the slots of a
    body's argument array whose contents the launching function does not read:
    :func:`unread_after_launch`), where the body reads that memory only into values that
    reach nothing but linear operations (:func:`linear_only`) and those stores; None where
    it reads it otherwise, or the pointers go anywhere but to loads and stores (a call)."""
    loads, stores = [], []
    work, seen = list(slots), set()
    while work:
        p = work.pop()
        if p in seen:
            continue
        seen.add(p)
        for user in p.users:
            if (isinstance(user, I.GetElementPtr) or user.opcode in ADDRESS_CASTS) \
                    and user.operands[0] is p and user.type.is_pointer:
                work.append(user)
            elif isinstance(user, I.Load) and user.pointer is p:
                if not user.type.is_float:
                    return None
                loads.append(user)
            elif isinstance(user, I.Store) and user.operands[1] is p \
                    and user.operands[0] is not p:
                stores.append(user)
            else:
                return None
    kept = set(stores)
    if not linear_only(loads, kept.__contains__, active):
        return None
    return stores
