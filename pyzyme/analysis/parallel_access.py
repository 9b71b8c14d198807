"""Memory the iterations of a parallel loop own: arrays no two iterations touch at one address.

The body of a parallel loop (:class:`~pyzyme.rules.spec.ParallelFor`) runs its iterations on
several threads, and its reverse sweep adds adjoints into shadow memory: atomically, unless no
other iteration can reach the same address. This analysis proves that for the common case, an
array every access of which goes to ``base + a*i + c``, where ``i`` is the loop's index (an
induction variable stepping by one from a start the schedule gives: the schedule's rows split
the iteration space, so each ``i`` runs once), ``base`` and ``a`` (a constant) are the same for
all the accesses, and the bytes ``[c, c + size)`` they touch fit in one stride ``|a|``: then
iteration ``i`` owns ``[base + a*i + min c, base + a*i + |a|)``. Other terms of an address must
be invariant (defined in the body's entry block: its arguments, sizes and strides). Arrays
reached through different slots of the argument array are taken not to overlap, which the
caller must know (pyzyme asks only when the arrays of the call are distinct).

An array whose pointer is passed to a call, stored, merged by a phi or a select, or cast to an
integer is not owned: its accesses cannot all be seen.

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''
... define void @body(ptr %x, ptr %y, ptr %sched, i64 %n) {
... entry:
...   %start = load i64, ptr %sched
...   br label %loop
... loop:
...   %i = phi i64 [ %start, %entry ], [ %i1, %loop ]
...   %px = getelementptr double, ptr %x, i64 %i
...   %v = load double, ptr %px
...   %j = add i64 %i, 1
...   %py = getelementptr double, ptr %y, i64 %j
...   %w = load double, ptr %py
...   %py0 = getelementptr double, ptr %y, i64 %i
...   store double %v, ptr %py0
...   %i1 = add i64 %i, 1
...   %more = icmp slt i64 %i1, %n
...   br i1 %more, label %loop, label %exit
... exit:
...   ret void
... }''')
>>> fn = m.get_function("body")
>>> owned = owned_arrays(fn, [fn.args[2]])
>>> print(owned)
owned by one iteration of @body: %x (8*%i)
>>> owned.owns(fn.blocks[1].instructions[1].pointer), fn.args[1] in owned.roots
(True, False)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pyzyme.analysis.layout import field_offset, sizeof
from pyzyme.analysis.loops import analyze_loops
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantInt, Value

__all__ = ["OwnedArrays", "owned_arrays"]


@dataclass(frozen=True)
class _Address:
    """``root + const + sum(coef * atom)``, in bytes."""

    root: Value
    const: int
    terms: tuple  # ((atom, coef), ...), sorted by the atom's id


@dataclass
class OwnedArrays:
    """The roots (base pointers) of the arrays of ``function`` one iteration owns, each with
    the index it is owned by and the stride."""

    function: object
    roots: dict = field(default_factory=dict)   # root -> (index phi, stride)
    wraps: object = None                        # select -> whether it is always 0

    def owns(self, pointer: Value) -> bool:
        """Whether ``pointer`` points into an array one iteration owns."""
        address = _address(pointer, self.wraps)
        return address is not None and address.root in self.roots

    def __str__(self) -> str:
        parts = [f"{_ref(root)} ({stride}*{_ref(phi)})"
                 for root, (phi, stride) in self.roots.items()]
        return (f"owned by one iteration of {self.function.ref}: "
                + (", ".join(parts) if parts else "nothing"))


def _ref(value: Value) -> str:
    return getattr(value, "ref", str(value))


def owned_arrays(fn, schedule: Iterable[Value], nonnegative: bool = False) -> OwnedArrays:
    """The arrays of parallel loop body ``fn`` that one iteration owns; ``schedule`` are the
    pointers to its schedule (the loop indices start at values loaded through them and step
    up to the last one it gives). With ``nonnegative`` (the schedule's indices are), Numba's
    wrap-around of a negative index ``i + d`` (``select (i + d < 0), n, 0``) is 0 for every
    ``d >= 0``."""
    result = OwnedArrays(fn)
    indices = _schedule_indices(fn, set(schedule))
    if not indices:
        return result
    result.wraps = _no_wrap(indices) if nonnegative else None
    entry = fn.blocks[0] if fn.blocks else None
    accesses: dict = {}
    escaped: set = set()
    for block in fn.blocks:
        for inst in block.instructions:
            for pointer, size in _accessed(inst):
                address = _address(pointer, result.wraps)
                if address is None:
                    continue
                accesses.setdefault(address.root, []).append((address, size))
            for op in _escaping(inst):
                address = _address(op, result.wraps)
                if address is not None:
                    escaped.add(address.root)
    for root, found in accesses.items():
        if root in escaped:
            continue
        owner = _owner(found, indices, entry)
        if owner is not None:
            result.roots[root] = owner
    return result


def _schedule_indices(fn, schedule: set) -> set:
    """Induction variables stepping by one from a start loaded through a schedule pointer."""
    found = set()
    for loop in analyze_loops(fn).loops:
        for iv in loop.inductions:
            start = iv.start
            if abs(iv.step) == 1 and isinstance(start, I.Load):
                address = _address(start.pointer)
                if address is not None and address.root in schedule:
                    found.add(iv.phi)
    return found


def _accessed(inst) -> list:
    if isinstance(inst, I.Load):
        return [(inst.pointer, sizeof(inst.type))]
    if isinstance(inst, I.Store):
        return [(inst.operands[1], sizeof(inst.operands[0].type))]
    return []


def _escaping(inst) -> list:
    """Pointers ``inst`` lets go where this analysis cannot follow them."""
    if isinstance(inst, I.Store):
        return [inst.operands[0]] if inst.operands[0].type.is_pointer else []
    if isinstance(inst, I.CallBase):
        callee = inst.called_function
        if callee is not None and callee.name.startswith(("llvm.lifetime",
                                                          "llvm.experimental.noalias")):
            return []
        return [a for a in inst.args if a.type.is_pointer]
    if inst.opcode in ("phi", "select", "ptrtoint", "atomicrmw", "cmpxchg"):
        return [op for op in inst.operands if op.type.is_pointer]
    return []


def _owner(found: list, indices: set, entry):
    """``(index, stride)`` where every address of ``found`` is ``a*index + c`` plus the same
    invariant terms, the same ``a`` for all, and their bytes fit in one stride."""
    first = found[0][0]
    index = None
    for atom, coef in first.terms:
        if atom in indices:
            if index is not None:
                return None
            index, stride = atom, coef
    if index is None or stride == 0:
        return None
    rest = tuple((a, c) for a, c in first.terms if a is not index)
    if not all(isinstance(a, Value) and _invariant(a, entry) for a, _ in rest):
        return None
    low = min(address.const for address, _ in found)
    high = max(address.const + size for address, size in found)
    if high - low > abs(stride):
        return None
    for address, _ in found:
        if address.terms != first.terms:
            return None
    return index, stride


def _invariant(value: Value, entry) -> bool:
    parent = getattr(value, "parent", None)
    return not isinstance(value, I.Instruction) or parent is entry


# -- addresses as linear forms ---------------------------------------------------------------
def _no_wrap(indices: set):
    """Whether a select is Numba's wrap-around of ``i + d`` (``d >= 0``, ``i`` an index of
    ``indices``, which are non-negative): ``select (x < 0), n, 0`` or ``select (x > -1), 0,
    n``, always 0."""
    def always_zero(select) -> bool:
        cond, a, b = select.operands
        if not (isinstance(cond, I.Compare) and cond.opcode == "icmp"):
            return False
        x, bound = cond.operands
        if not isinstance(bound, ConstantInt):
            return False
        if (cond.predicate, bound.signed) == ("slt", 0):
            zero = b
        elif (cond.predicate, bound.signed) == ("sgt", -1):
            zero = a
        else:
            return False
        if not (isinstance(zero, ConstantInt) and zero.value == 0):
            return False
        form = _linear(x)
        return form is not None and form[0] >= 0 and len(form[1]) == 1 \
            and next(iter(form[1].items())) in {(i, 1) for i in indices}
    return always_zero


def _address(pointer: Value, wraps=None, depth: int = 16) -> _Address | None:
    terms: dict = {}
    const = 0
    while isinstance(pointer, I.GetElementPtr) and depth > 0:
        depth -= 1
        base, *indices = pointer.operands
        ty = pointer.source_type
        for k, index in enumerate(indices):
            if k == 0:
                scale = sizeof(ty)
            elif isinstance(ty, (T.ArrayType, T.VectorType)):
                ty = ty.element
                scale = sizeof(ty)
            else:  # a struct field: a constant index
                if not isinstance(index, ConstantInt):
                    return None
                offset, ty = field_offset(ty, [index.value])
                const += offset
                continue
            form = _linear(index, wraps=wraps)
            if form is None:
                return None
            c, ts = form
            const += scale * c
            for atom, coef in ts.items():
                terms[atom] = terms.get(atom, 0) + scale * coef
        pointer = base
    terms = {a: c for a, c in terms.items() if c != 0}
    return _Address(pointer, const, tuple(sorted(terms.items(), key=lambda t: id(t[0]))))


def _linear(value: Value, depth: int = 12, wraps=None):
    """``(const, {atom: coef})`` with ``value == const + sum(coef * atom)`` (a product of two
    unknowns is an atom of its own); a select ``wraps`` says is always 0 is 0."""
    if isinstance(value, ConstantInt):
        return value.signed, {}
    if wraps is not None and isinstance(value, I.Select) and wraps(value):
        return 0, {}
    if depth == 0 or not isinstance(value, I.Instruction):
        return 0, {value: 1}
    op = value.opcode
    if op in ("sext", "zext", "trunc"):
        return _linear(value.operands[0], depth - 1, wraps)
    if op in ("add", "sub"):
        a, b = (_linear(v, depth - 1, wraps) for v in value.operands)
        sign = 1 if op == "add" else -1
        terms = dict(a[1])
        for atom, coef in b[1].items():
            terms[atom] = terms.get(atom, 0) + sign * coef
        return a[0] + sign * b[0], terms
    if op in ("mul", "shl"):
        x, y = value.operands
        if op == "mul" and isinstance(x, ConstantInt):
            x, y = y, x
        if isinstance(y, ConstantInt):
            factor = y.value if op == "mul" else 1 << y.value
            c, ts = _linear(x, depth - 1, wraps)
            return c * factor, {atom: coef * factor for atom, coef in ts.items()}
    return 0, {value: 1}
