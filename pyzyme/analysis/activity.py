"""Activity analysis: which values of a function carry derivatives.

A value is *varied* when it can depend on an active input: a float computed from one, a pointer
into memory that has a shadow (so loads through it read tangents), an aggregate holding either.
Integers never carry derivatives, by rule; so neither do comparisons, addresses computed as
integers, or floats converted from integers. Values that are not varied get no derivative code.
A pointer made back from such an address (:mod:`pyzyme.analysis.int_address`) is varied when
the pointer it was computed from is.

This is Enzyme's activity analysis: the forward half (does the value depend on an active
input?) always, the backward half (can it reach an active output?) when ``return_active`` is
given, as reverse mode gives it; a value is active when both hold.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''define double @f(double %x, double %c, i64 %n) {
... entry:
...   %a = fmul double %x, %c
...   %b = sitofp i64 %n to double
...   %s = fadd double %a, %b
...   %k = fadd double %c, %b
...   ret double %s
... }''')
>>> act = analyze_activity(m.get_function("f"), [Activity.ACTIVE, Activity.CONST, Activity.CONST])
>>> print(act)
activity of @f
  arg %x: active
  arg %c: const
  arg %n: const
  %a = fmul double %x, %c: active
  %b = sitofp i64 %n to double: const
  %s = fadd double %a, %b: active
  %k = fadd double %c, %b: const
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyzyme import naming
from pyzyme.analysis.cfg import reverse_post_order
from pyzyme.analysis.int_address import ADDRESS_ARITHMETIC, address_source
from pyzyme.analysis.overwrite import written_pointers
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import (ADDRESS_DERIVING, FROM_INTEGER, INTEGER_RESULT, MERGES, PURE,
                               READ_MODIFY_WRITE, WHOLE_MERGES)
from pyzyme.ir.values import (ConstantFP, ConstantInt, Null, Poison, Undef, Value,
                              ZeroInitializer)
from pyzyme.progress import timed

__all__ = ["Activity", "ActivityResult", "analyze_activity", "can_carry_derivative",
           "contains_type", "receives_varied"]


class Activity(enum.Enum):
    """How an argument takes part in differentiation (Enzyme's annotations, one enum)."""

    CONST = "const"
    ACTIVE = "active"            # a value with a tangent (forward) or adjoint (reverse)
    DUPLICATED = "duplicated"    # a pointer with a shadow


def contains_type(ty: T.Type, leaf: Callable[[T.Type], bool]) -> bool:
    """Whether ``ty``, or any element of it (arrays and structs, recursively), satisfies
    ``leaf``; vectors answer by their element type."""
    if leaf(ty):
        return True
    if isinstance(ty, T.ArrayType):
        return contains_type(ty.element, leaf)
    if isinstance(ty, (T.StructType, T.IdentifiedStructType)) and ty.elements is not None:
        return any(contains_type(e, leaf) for e in ty.elements)
    return False


def can_carry_derivative(ty: T.Type) -> bool:
    """Floats, pointers, and vectors or aggregates containing them; never integers."""
    if ty.is_float or ty.is_pointer:
        return True
    if not ty.is_aggregate:  # an integer or vector of them, void, a label: asked a million
        return False         # times over a large reverse module's activity analyses
    return contains_type(ty, _float_or_pointer)


def _float_or_pointer(ty: T.Type) -> bool:
    return ty.is_float or ty.is_pointer


def _is_bytes(ty: T.Type) -> bool:
    """``i8`` or an array of them: a stack buffer whose type says nothing of what it holds
    (``alloca(n)``, ``char buf[N]``, a struct slot LLVM retyped as bytes); what is written
    into it decides whether it has a shadow."""
    while isinstance(ty, T.ArrayType):
        ty = ty.element
    return ty.is_int and ty.width == 8


# Opcodes whose result is computed from its operands' values alone (pure ones, and phis, which
# pick one): the result is varied when any operand is, unless an integer stands between them
# (integers carry no derivative: comparisons, integer casts, floats made from integers).
_FLOWS = frozenset(op for op in PURE | MERGES if op not in INTEGER_RESULT | FROM_INTEGER)

CallPolicy = Callable[[I.CallBase, Callable[[Value], bool]], bool]


@dataclass
class ActivityResult:
    """The varied values of ``function`` (arguments and instructions), and, when the analysis
    was asked about outputs, the ``useful`` ones: those that can influence an active output.
    A value is active when it is varied and (if usefulness was computed) useful."""

    function: object
    varied: set = field(default_factory=set)
    useful: set | None = None

    def is_varied(self, value: Value) -> bool:
        return value in self.varied

    def is_active(self, value: Value) -> bool:
        return value in self.varied and (self.useful is None or value in self.useful)

    def __str__(self) -> str:
        fn = self.function
        lines = [f"activity of {fn.ref}"]
        for arg in fn.args:
            lines.append(f"  arg {arg.ref if arg.name else '%' + str(arg.index)}: "
                         f"{'active' if self.is_active(arg) else 'const'}")
        for inst in fn.instructions():
            if inst.has_result:
                text = f"{inst.ref if inst.name else '%?'} = {inst}"
                lines.append(f"  {text}: {'active' if self.is_active(inst) else 'const'}")
        return "\n".join(lines)


@timed("analyses")
def analyze_activity(fn, params: Sequence[Activity],
                     call_policy: CallPolicy | None = None,
                     allocation_policy: Callable[[I.Instruction], bool] | None = None,
                     *, return_active: bool | None = None,
                     may_allocate: Callable[[I.CallBase], bool] | None = None,
                     skip_blocks: frozenset = frozenset(),
                     constant_reloads: bool = False) -> ActivityResult:
    """Which values of ``fn`` carry derivatives, given the activity of each parameter.

    Parameters
    ----------
    fn
        A function with a body.
    params
        One :class:`Activity` per parameter; ``ACTIVE`` and ``DUPLICATED`` seed the analysis.
    call_policy
        ``(call, is_varied) -> bool``: whether a call's result is varied. The default says a
        call's result is varied when any of its arguments is.
    allocation_policy
        ``(inst) -> bool``: whether an ``alloca`` gets a shadow. The default gives one to a
        stack slot that can hold floats or pointers and into which a varied value may be
        written (a slot holding only copies of constant arguments has none, so pointers
        loaded back from it carry no derivative).
    may_allocate
        ``(call) -> bool``: whether a call handed the address of a stack slot may store a
        fresh allocation there (which has a shadow, so the slot needs one). The default says
        any call may.
    return_active
        When given, also compute which varied values can reach an active output (reverse mode
        needs both halves): the returned value when ``return_active``, and whatever is stored
        into, or passed with, memory that has a shadow.
    skip_blocks
        Blocks whose instructions carry no derivative and whose uses of values count for
        nothing (reverse mode's error-only blocks: no reverse sweep runs after them).
    constant_reloads
        ``fn`` is a reverse-mode derivative's part whose constants are constant here too:
        its loads marked :data:`~pyzyme.naming.CONSTANT_RELOAD` (a value the forward sweep
        kept that no active input changed) are not varied, though the tape they read is.
    """
    result = ActivityResult(fn)
    varied = result.varied
    for arg, act in zip(fn.args, params):
        if act is not Activity.CONST and can_carry_derivative(arg.type):
            varied.add(arg)
    if not varied:
        if return_active is not None:
            result.useful = set()
        return result
    is_varied = varied.__contains__
    order = [inst for block in reverse_post_order(fn) if block not in skip_blocks
             for inst in block.instructions]
    changed = True
    while changed:
        changed = False
        for inst in order:
            if inst in varied or not can_carry_derivative(inst.type):
                continue
            if _is_varied(inst, is_varied, call_policy, allocation_policy, may_allocate,
                          skip_blocks, constant_reloads):
                varied.add(inst)
                changed = True
    if return_active is not None:
        result.useful = _useful(order, varied, return_active)
    return result


def _useful(order: Sequence[I.Instruction], varied: set, return_active: bool) -> set:
    """Varied values that can influence an active output, found backwards from the outputs.

    Memory is treated as one region per shadow: anything stored into shadowed memory is an
    output (Duplicated memory is read back by the caller; a later load may read it), so every
    varied value stored there is useful. That is conservative, never wrong.
    """
    useful: set = set()
    work: list = []

    def mark(value) -> None:
        if value in varied and value not in useful:
            useful.add(value)
            work.append(value)

    for inst in order:
        op = inst.opcode
        if op == "ret":
            if return_active and inst.operands:
                mark(inst.operands[0])
        elif op in ("store", "atomicrmw"):
            value, pointer = (inst.operands if op == "store" else inst.operands[::-1])
            if pointer in varied and value in varied:
                mark(value)
                mark(pointer)
        elif isinstance(inst, I.CallBase):
            # A call that is handed shadowed memory may write outputs through it.
            if any(a in varied and a.type.is_pointer for a in inst.args):
                for a in inst.args:
                    mark(a)
    while work:
        value = work.pop()
        if not isinstance(value, I.Instruction):
            continue
        if isinstance(value, I.CallBase):
            operands = value.args
        elif value.opcode == "store":
            operands = ()
        elif value.opcode == "inttoptr":
            operands = (address_source(value.operands[0]),)
        else:
            operands = value.operands
        for operand in operands:
            mark(operand)
    return useful


def receives_varied(allocation: I.CallBase, is_varied, may_allocate=None,
                    skip_blocks: frozenset = frozenset()) -> bool:
    """Whether a varied value may be written into the memory heap allocation ``allocation``
    returns, or into memory a pointer loaded from it points to (a list's data block), as
    into a stack slot (:func:`_receives_varied`); the pointers into that memory (loaded from
    it, merged by phis and selects, returned by a call handed one) do not count as varied
    values themselves, so the answer holds whether or not ``allocation`` is varied."""
    return _receives_varied(allocation, is_varied, may_allocate, skip_blocks, heap=True)


def _pointers_into(root: I.Instruction, skip_blocks: frozenset) -> set:
    """``root`` and the pointers into the memory it reaches: computed from it, loaded from
    that memory, merged with it by phis and selects, returned by calls handed one."""
    found: set = set()
    work = [root]
    while work:
        pointer = work.pop()
        if pointer in found:
            continue
        found.add(pointer)
        for user in pointer.users:
            if user.parent in skip_blocks:
                continue
            op = user.opcode
            if (op in ADDRESS_DERIVING and user.operands[0] is pointer) or op in WHOLE_MERGES or (
                    (op == "load" or isinstance(user, I.CallBase)) and user.type.is_pointer):
                work.append(user)
            elif op == "ptrtoint":
                work.extend(_rebased(user, pointer))
    return found


def _rebased(address: I.Instruction, pointer: Value) -> list:
    """The pointers made back (``inttoptr``) from integer ``address`` of ``pointer`` moved by
    arithmetic (:mod:`pyzyme.analysis.int_address`)."""
    found, work, seen = [], [address], set()
    while work:
        value = work.pop()
        for user in value.users:
            if user in seen:
                continue
            seen.add(user)
            if user.opcode == "inttoptr" and address_source(value) is pointer:
                found.append(user)
            elif user.opcode in ADDRESS_ARITHMETIC and user.type.is_int:
                work.append(user)
    return found


def _receives_varied(slot: I.Instruction, is_varied, may_allocate=None,
                     skip_blocks: frozenset = frozenset(), heap: bool = False) -> bool:
    """Whether a varied value may be written into stack slot ``slot``: stored through an
    address into it (or an integer loaded from varied memory: the bytes of a float, for all
    this analysis knows), or by a call handed such an address alongside a varied argument or (for
    a slot holding pointers) a call that may allocate. An address that escapes (stored,
    merged by a phi, cast to an integer) counts as written; with ``heap``, see
    :func:`receives_varied`."""
    holds_pointers = heap or contains_type(slot.allocated_type, lambda t: t.is_pointer)
    own = _pointers_into(slot, skip_blocks) if heap else frozenset()
    work, seen = (list(own) if heap else [slot]), set()

    def carries(value) -> bool:  # a varied value, not a pointer into the memory itself
        return value not in own and is_varied(value)

    def copies(value) -> bool:  # bits read from varied memory: a float's, for all we know
        return isinstance(value, I.Load) and not can_carry_derivative(value.type) \
            and carries(value.pointer)

    while work:
        address = work.pop()
        if address in seen:
            continue
        seen.add(address)
        for user in address.users:
            if user.parent in skip_blocks:
                continue
            op = user.opcode
            if op in ADDRESS_DERIVING:
                if user.operands[0] is address:
                    work.append(user)
            elif op == "store":
                value, pointer = user.operands
                if value is address or (pointer is address and (carries(value)
                                                                 or copies(value))):
                    return True
            elif op in ("load", "icmp") or (heap and op in WHOLE_MERGES):
                continue  # with ``heap``, pointers into the memory are visited in their turn
            elif isinstance(user, I.CallBase):
                # A call that only reads the slot (BLAS operands and scalars, a copy's
                # source, lifetime markers) writes nothing into it.
                if not any(w is address for w in written_pointers(user)):
                    continue
                if _stores_only_constants(user, address):
                    continue
                if _exception_record(user, address):
                    continue
                if any(carries(a) for a in user.args):
                    return True
                # A callee may put a fresh allocation (which has a shadow) in a slot that
                # holds pointers: Numba's np.empty, when not inlined, fills its result slot.
                if holds_pointers and (may_allocate is None or may_allocate(user)):
                    return True
            elif op in READ_MODIFY_WRITE:
                if any(carries(v) for v in user.operands[1:]):
                    return True
            else:
                return True  # phi, select, ptrtoint, ...: followed no further
    return False


_PLAIN_CONSTANTS = (ConstantInt, ConstantFP, Null, Undef, Poison, ZeroInitializer)


def _exception_record(call: I.CallBase, address: Value) -> bool:
    """Whether ``call`` gets ``address`` only as a Numba function's exception record (its
    second parameter, ``excinfo``, of a function returning a status, alone or with the tape
    of an augmented primal): what it stores there is the exception's information, read only
    on the way to raising it, never a derivative (a parallel loop's body reads it back when a
    function it calls raises, and merges it with Numba's constant records: with a shadow,
    that merge was refused as runtime activity, in reverse mode and in forward mode over the
    augmented body, a Hessian-vector product)."""
    callee = call.called_function
    if callee is None or len(callee.args) < 2 or len(call.args) != len(callee.args):
        return False
    status = callee.return_type
    if isinstance(status, T.StructType) and status.elements:
        status = status.elements[0]
    if not status.is_int or not naming.takes_status_params(callee):
        return False
    return [k for k, a in enumerate(call.args) if a is address] == [1]


def _stores_only_constants(call: I.CallBase, address: Value) -> bool:
    """Whether ``call``, to a function whose body is here, writes through each parameter
    it gets ``address`` as nothing but constants: the callee reads the slot (no pointers: one
    read out may meet active memory in a phi, and then needs the slot's shadow), stores
    constants into it, derives addresses from it and nothing else (a reverse sweep's entry hands its
    inner function the seed's slot, which the sweep reads and zeroes; forward mode over it,
    a Hessian-vector product, gave the seed and every adjoint read from it a tangent, zero)."""
    callee = call.called_function
    if callee is None or callee.is_declaration or len(call.args) != len(callee.args):
        return False
    work = [p for p, a in zip(callee.args, call.args) if a is address]
    seen: set = set()
    while work:
        pointer = work.pop()
        if pointer in seen:
            continue
        seen.add(pointer)
        for user in pointer.users:
            op = user.opcode
            if op in ADDRESS_DERIVING and user.operands[0] is pointer:
                work.append(user)
            elif op == "store":
                value = user.operands[0]
                if value is pointer or not isinstance(value, _PLAIN_CONSTANTS):
                    return False    # a constant expression may hold a global's address
            elif op == "load":
                if contains_type(user.type, lambda t: t.is_pointer):
                    return False    # a pointer read out may be merged with active memory
            elif op != "icmp":
                return False    # passed on, merged, cast, written in place: not followed
    return True


def _is_varied(inst: I.Instruction, is_varied, call_policy, allocation_policy,
               may_allocate=None, skip_blocks: frozenset = frozenset(),
               constant_reloads: bool = False) -> bool:
    op = inst.opcode
    if op in _FLOWS:
        return any(is_varied(v) for v in inst.operands)
    if op == "load":
        return is_varied(inst.operands[0]) and not (constant_reloads and any(
            kind == naming.CONSTANT_RELOAD for kind, _ in inst.metadata))
    if op == "alloca":
        if allocation_policy is not None:
            return allocation_policy(inst)
        return (can_carry_derivative(inst.allocated_type) or _is_bytes(inst.allocated_type)) \
            and _receives_varied(inst, is_varied, may_allocate, skip_blocks)
    if op in ("call", "invoke"):
        if call_policy is not None:
            return call_policy(inst, is_varied)
        return any(is_varied(v) for v in inst.args)
    if op in READ_MODIFY_WRITE:
        return is_varied(inst.operands[0])
    if op == "inttoptr":  # an address rounded through an integer points where its source does
        source = address_source(inst.operands[0])
        return source is not None and is_varied(source)
    return False  # sitofp, other inttoptr, va_arg, landingpad, ...: nothing flows in
