"""Floats copied through integers, made float copies before reverse-mode differentiation.

LLVM turns a small ``memcpy`` into an integer load and store of its width: Numba's
``flatten``/``reshape`` of a one-element array of doubles copies the element as ``i64``::

    %v = load i64, ptr %src, align 1
    store i64 %v, ptr %dst, align 1

Forward mode is indifferent (the same integer copy moves the tangent's bits in the shadow).
Reverse mode is not: the adjoint of ``dst`` has to be added into ``src``'s, which an integer
cannot say. Where type analysis proves that the loaded bits are a float of the integer's
width, and the integer is only stored, :func:`floats_as_floats` makes the pair a float load
and float stores. LLVM's loads and stores move bits unchanged whatever their type, so the
primal computes exactly what it did; the derivative now sees a float copy, whose adjoint it
knows. What type analysis cannot prove stays an integer: :func:`reads_integers` then says
whether it is known to copy integers (shadow memory mirrors them) or may copy a float's bits.
Then forward mode copies the shadow's bits where the copy reads memory that has a shadow (a
``char *`` loop moves the tangent with the float) and refuses it where that memory has none;
reverse mode, which cannot add an integer's worth of adjoint, refuses it; both name the copy.
(Forward mode used to mirror the primal's bits into the shadow, a silently wrong tangent.)

Examples
--------
>>> from pyzyme.ir import parse_module
>>> from pyzyme.analysis.type_analysis import analyze_types
>>> m = parse_module('''
... define i64 @f(ptr %a, ptr %b, ptr %n, ptr %c) {
...   store double 1.0, ptr %a
...   %v = load i64, ptr %a, align 1
...   store i64 %v, ptr %b, align 1
...   %k = load i64, ptr %n
...   store i64 %k, ptr %c
...   %m = add i64 %k, 1
...   ret i64 %m
... }''')
>>> f = m.get_function("f")
>>> floats_as_floats(f, analyze_types(f))
1
>>> print(f)
define i64 @f(ptr %a, ptr %b, ptr %n, ptr %c) {
  store double 1.0, ptr %a
  %v = load double, ptr %a, align 1
  store double %v, ptr %b, align 1
  %k = load i64, ptr %n
  store i64 %k, ptr %c
  %m = add i64 %k, 1
  ret i64 %m
}
"""

from __future__ import annotations

from collections.abc import Callable

from pyzyme.analysis.activity import contains_type
from pyzyme.analysis.layout import gep_offset, scalar_at
from pyzyme.analysis.overwrite import identified_object, may_alias, underlying_objects
from pyzyme.analysis.tbaa import access_kind
from pyzyme.errors import UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.names import readable
from pyzyme.ir.opcodes import ADDRESS_DERIVING, WHOLE_MERGES
from pyzyme.ir.values import GlobalVariable

__all__ = ["candidates", "float_pointers", "floats_as_floats",
           "refuse_punned_reads", "reads_integers", "refusal", "stored_as_integers"]

# The float type each integer width may be carrying (x86_fp80 and fp128 are never moved
# through an integer of their width by the code we see).
_FLOAT_OF_WIDTH = {16: T.half, 32: T.float, 64: T.double}

# Type-based alias tags name the integer type; the float access must not keep them.
_DROPPED_METADATA = ("tbaa", "tbaa.struct")


def candidates(fn) -> list[I.Load]:
    """The integer loads of ``fn`` that may be float copies: plain loads of a float's width
    whose every use stores the loaded value or reads it as that float (a ``bitcast``, where
    LLVM forwarded a float load from the copy; cheap, no type analysis)."""
    return [inst for inst in fn.instructions()
            if isinstance(inst, I.Load) and inst.type.is_int
            and inst.type.width in _FLOAT_OF_WIDTH and not inst.volatile
            and inst.ordering is None and inst.users
            and all(_stores_it(use, inst) or _reads_as_float(use, inst)
                    for use in inst.users)]


def floats_as_floats(fn, types, loads: list[I.Load] | None = None) -> int:
    """Rewrite, in place, the loads of ``candidates(fn)`` (or ``loads``) that type analysis
    ``types`` proves to read a float of their width into float loads, and their stores into
    float stores. Returns how many loads were rewritten; ``types`` answers for the new loads
    as it did for the old (nothing else changed type)."""
    done = 0
    for load in candidates(fn) if loads is None else loads:
        float_type = _FLOAT_OF_WIDTH[load.type.width]
        kind = types.tree(load).lookup(0)
        if not kind.is_float or kind.float_type != str(float_type):
            continue
        copy = I.Load(float_type, load.pointer, load.align)
        copy.metadata = [(k, v) for k, v in load.metadata if k not in _DROPPED_METADATA]
        block = load.parent
        block.insert(block.instructions.index(load), copy)
        copy.name = load.name
        load.name = ""
        for use in list(load.users):
            if _reads_as_float(use, load):
                use.replace_all_uses_with(copy)
                use.erase()
            else:
                use.metadata = [(k, v) for k, v in use.metadata if k not in _DROPPED_METADATA]
        load.replace_all_uses_with(copy)
        load.erase()
        types.trees[copy] = types.trees.pop(load)
        done += 1
    return done


def _reads_as_float(use, load: I.Load) -> bool:
    return isinstance(use, I.Instruction) and use.opcode == "bitcast" \
        and use.type == _FLOAT_OF_WIDTH[load.type.width]


def _stores_it(use, load: I.Load) -> bool:
    return isinstance(use, I.Store) and use.value is load and use.pointer is not load \
        and not use.volatile and use.ordering is None


def reads_integers(load: I.Load, types, floats: Callable[[], list]) -> bool:
    """Whether integer ``load`` reads an integer (so a shadow may mirror it), not the bits of a
    float: type analysis ``types`` says so (None: it failed), or clang's type tag on it, or its
    address is typed as integer data, or it reads a constant without floats, or memory the
    function made and copied no bits into (:func:`_kept_here`) where no float access of the
    function (``floats()``: their pointers, see :func:`float_pointers`) may touch it. Memory
    that came from elsewhere may hold floats the function never names: a ``char *`` copy
    loop's caller passes it arrays of doubles."""
    if types is not None:
        kind = types.tree(load).lookup(0)
        if kind.kind in ("Integer", "Pointer"):
            return True
        if kind.is_float:
            return False
    typed = _addressed_as_integers(load)
    if typed is not None:
        return typed
    objects = underlying_objects(load.pointer)
    if not objects or not all(_kept_here(o) or _constant_integers(o) for o in objects):
        return False
    return all(map(_constant_integers, objects)) or \
        not any(may_alias(load.pointer, p) for p in floats())


def stored_as_integers(store: I.Store) -> bool:
    """Whether integer ``store`` writes where integers live, whatever its value was read
    from: its type tag or its address says so (an element of an ``i64`` array: a tape of
    integers)."""
    return _addressed_as_integers(store) is True


def _addressed_as_integers(access) -> bool | None:
    """What the load or store ``access`` says of the memory it touches: True (integers or
    pointers), False (floats) or None (nothing): clang's type tag, the declared type of a
    typed stack slot's field, or the element type its address is computed in."""
    tagged = access_kind(access)  # C/C++: the type the source reads there
    if tagged is not None:
        return tagged != "float"
    declared = _slot_scalar(access.pointer)  # a field of a typed stack slot
    if declared is not None and (declared.is_int or declared.is_pointer):
        return True
    if declared is not None and declared.is_float:
        return False
    step = access.pointer
    while isinstance(step, I.GetElementPtr):  # the addressing names the element type
        if step.source_type != T.i8:
            return True if not _has_float(step.source_type) else None
        step = step.pointer
    return None


def _constant_integers(obj) -> bool:
    """Whether ``obj`` is a constant global holding no floats (a string's text)."""
    return isinstance(obj, GlobalVariable) and obj.is_constant and \
        obj.value_type is not None and not _has_float(obj.value_type)


def _kept_here(obj) -> bool:
    """Whether ``obj`` is a stack slot or an allocation of its function into which no integer
    loaded from memory is stored (that may be a float's bits): every float ever in it is
    stored by an access :func:`float_pointers` lists, or by a call it is handed (MPI's
    request handles), where type analysis would have seen a float. Memory from elsewhere (an
    argument, a global) may hold floats the function never names."""
    if not (isinstance(obj, I.Alloca) or identified_object(obj)) or \
            not isinstance(obj, I.Instruction):
        return False
    work, seen = [obj], set()
    while work:
        value = work.pop()
        if value in seen:
            continue
        seen.add(value)
        for use in value.users:
            if isinstance(use, I.Store) and use.value is not value:
                if isinstance(use.value, I.Load) and not _has_float(use.value.type):
                    return False
            elif isinstance(use, I.Instruction) and (
                    use.opcode in ADDRESS_DERIVING or use.opcode in WHOLE_MERGES):
                work.append(use)
    return True


def refusal(where: str, inst: I.Instruction) -> UnsupportedError:
    """The error for ``inst`` (in ``where``): a store of an integer that may hold a float's
    bits, or a float read from such an integer (:func:`refuse_punned_reads`)."""
    if isinstance(inst, I.Store):
        return UnsupportedError(
            f"{where} copies memory that may hold floats through an integer of type "
            f"{inst.value.type}: {inst}",
            hint="type analysis could not tell whether the copy moves floats or integers: "
                 "copy floats as floats (as floating-point values, or with an array copy or "
                 "memcpy, whose derivatives pyzyme knows), or report this function")
    return UnsupportedError(
        f"{where} reads a float from the bits of an integer loaded from memory that carries "
        f"derivatives, and uses the integer too: {inst}",
        hint="please report this function (the float's derivative would be lost)")


def refuse_punned_reads(fn, varied) -> None:
    """Raise :func:`refusal` for the first ``bitcast`` of ``fn`` that reads as a float an
    integer loaded from memory in ``varied`` (a load :func:`floats_as_floats` left: the
    integer has other uses). The float would have no derivative, where the memory may hold
    one."""
    for inst in fn.instructions():
        if inst.opcode == "bitcast" and inst.type.is_float \
                and isinstance(inst.operands[0], I.Load) and inst.operands[0].type.is_int \
                and inst.operands[0].pointer in varied:
            raise refusal(readable(fn.name), inst)


def float_pointers(fn) -> list:
    """The pointers through which ``fn`` loads or stores floats."""
    return [i.pointer for i in fn.instructions()
            if isinstance(i, (I.Load, I.Store)) and _has_float(
                i.type if isinstance(i, I.Load) else i.operands[0].type)]


def _slot_scalar(pointer):
    """The scalar type a stack slot declares at the constant offset ``pointer`` has into it
    (None: not a slot, a variable offset, or no scalar starts there)."""
    offset = 0
    while isinstance(pointer, I.GetElementPtr):
        step, stride = gep_offset(pointer)
        if stride:
            return None
        offset += step
        pointer = pointer.pointer
    if not isinstance(pointer, I.Alloca) or pointer.count is not None:
        return None
    return scalar_at(pointer.allocated_type, offset)


def _has_float(ty) -> bool:
    return contains_type(ty, lambda t: t.is_float)
