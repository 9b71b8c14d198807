"""Memory that only ever holds a raised exception's information.

Numba raises an exception whose arguments are known only at run time (LAPACK's
``LinAlgError`` with the failing call's ``info``, a ``ValueError`` formatted from an index) by
allocating a record (:data:`RECORD_FIELDS`: the pickled class, its size, the arguments, a
function that unwraps them, a flag) and a block for the arguments, storing the arguments into
it, and handing the record to its caller through ``excinfo``. Nothing reads that memory except
the code that raises, so it carries no derivative, whatever is stored into it: an argument can
be an array the function computed (solve's factorized copy of an active matrix), and were the
record given a shadow for it, a parallel loop's body, which merges the record with Numba's
constant records on its way to raising, would be refused as runtime activity.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... declare ptr @NRT_Allocate(i64)
... define i32 @f(ptr %retptr, ptr %excinfo, ptr %x) {
... entry:
...   %args = call ptr @NRT_Allocate(i64 16)
...   store ptr %x, ptr %args
...   %record = call ptr @NRT_Allocate(i64 40)
...   %slot = getelementptr i8, ptr %record, i64 16
...   store ptr %args, ptr %slot
...   store ptr %record, ptr %excinfo
...   ret i32 1
... }''')
>>> fn = m.get_function("f")
>>> [raised_only(i) for i in fn.instructions() if i.name in ("args", "record")]
[True, True]
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.analysis.overwrite import rule_row, underlying_object
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.opcodes import ADDRESS_DERIVING, MERGES
from pyzyme.ir.values import Argument, Value
from pyzyme.rules import spec

__all__ = ["RECORD_FIELDS", "raised_only"]

#: The fields of Numba's exception record, in order (``numba.core.callconv``'s
#: ``excinfo_t``): pickled bytes, their length, the arguments, their unwrapping function, and
#: whether the arguments are dynamic.
RECORD_FIELDS = ("ptr", "i32", "ptr", "ptr", "i32")


def raised_only(allocation: I.Instruction, skip_blocks: frozenset = frozenset()) -> bool:
    """Whether the memory ``allocation`` returns is only an exception record or part of one:
    every pointer into it (computed from it, merged by phis and selects) is only written
    through, compared, freed, read back whole as a record (:data:`RECORD_FIELDS`), or stored
    into the function's ``excinfo`` or into other such memory. Uses in ``skip_blocks``
    (error-only blocks) do not count."""
    return _raised_only(allocation, skip_blocks, set())


def _raised_only(root: Value, skip_blocks: frozenset, visiting: set) -> bool:
    if root in visiting:
        return True  # assumed while it is being decided: the record stores its arguments' block
    visiting.add(root)
    work, seen = [root], set()
    while work:
        pointer = work.pop()
        if pointer in seen:
            continue
        seen.add(pointer)
        for user in pointer.users:
            if user.parent in skip_blocks:
                continue
            op = user.opcode
            if (op in ADDRESS_DERIVING and user.operands[0] is pointer) or op in MERGES:
                work.append(user)
            elif op == "store":
                value, address = user.operands
                if value is pointer and not _record_slot(address, skip_blocks, visiting):
                    return False
            elif op == "load":
                if not _is_record(user.type):
                    return False
            elif op == "icmp":
                continue
            elif isinstance(user, I.CallBase):
                if not _releases(user):
                    return False
            else:
                return False
    return True


def _releases(call: I.CallBase) -> bool:
    """Whether ``call`` frees what it is passed (nothing a derivative sees): a release by
    rule, or a reverse-mode derivative's deferral of one to the end of its reverse sweep
    (code forward mode differentiates again, as ``hvp`` does)."""
    row = rule_row(call)
    if isinstance(row, spec.Mirror) and row.releases:
        return True
    callee = call.called_function
    return callee is not None and callee.name == naming.DEFER_RELEASE


def _record_slot(address: Value, skip_blocks: frozenset, visiting: set) -> bool:
    """Whether a pointer stored at ``address`` becomes part of an exception: ``address`` is
    the function's ``excinfo``, or points into memory that is itself :func:`raised_only`."""
    address = underlying_object(address)
    if isinstance(address, Argument):
        fn = address.function
        return naming.takes_status_params(fn) and address is fn.args[1]
    return isinstance(rule_row(address), spec.Allocation) and \
        _raised_only(address, skip_blocks, visiting)


def _is_record(ty: T.Type) -> bool:
    return isinstance(ty, T.StructType) and tuple(str(e) for e in ty.elements) == RECORD_FIELDS
