"""Calls that copy or fill memory (:class:`~pyzyme.rules.spec.Memory`: ``llvm.memcpy``,
``llvm.memmove``, ``llvm.memset``), in both modes.

- forward mode: the same call on the shadows (a fill of the shadow with zeros where the source
  has none);
- reverse mode: a copy of floats moves the destination's adjoints back to the source
  (``src_bar[i] += dst_bar[i]; dst_bar[i] = 0``), in the order that is right where the two
  overlap; a copy of integers or pointers is made on the shadows in the forward sweep (the
  shadow's structure mirrors the primal's); a fill with constants drops the adjoints it
  overwrites. What the bytes are comes from type analysis.
"""

from __future__ import annotations

from pyzyme.analysis.layout import sizeof
from pyzyme.analysis.overwrite import list_block_of, underlying_object
from pyzyme.diff.memory_calls import memset_zero, with_args
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import (
    ConstantInt, ConstantString, GlobalVariable, const_int, const_null,
)
from pyzyme.rules import spec

__all__ = ["forward_mode", "augmented", "reverse"]


def forward_mode(cx, inst: I.Call, row: spec.Memory) -> None:
    """Forward mode: the call, then the same on the shadows (zeros where the source has
    none)."""
    new = cx.clone(inst)
    b = cx.builder
    dest = inst.args[row.pointer_args[0]]
    dshadow = cx.derivs.get(dest)
    src = inst.args[row.pointer_args[1]] if len(row.pointer_args) > 1 else None
    sshadow = cx.derivs.get(src) if src is not None else None
    if dshadow is None:
        if sshadow is not None:
            raise ActivityError(f"{cx.where} copies active memory into memory that has no "
                                f"shadow: {inst}",
                                hint="pass the destination buffer as Duplicated",
                                docs="sharp-bits.html#temporary-storage")
        return
    length, volatile = new.args[2], new.args[3]
    for k in range(cx.width):
        if sshadow is not None:
            b.insert(with_args(new, [dshadow[k], sshadow[k], length, volatile]))
        else:
            memset_zero(cx.module, b, dshadow[k], length, volatile)


# -- reverse mode ------------------------------------------------------------------------------
def augmented(cx, inst: I.Call, row: spec.Memory) -> None:
    """Reverse mode's forward sweep: the call, and what its reverse needs to know of it."""
    new = cx.clone(inst)
    # memset writes constants: its reverse clears the shadow (see reverse()).
    if "memset" not in inst.called_function.name and any(
            a in cx.activity.varied for a in inst.args if a.type.is_pointer):
        _forward_copy(cx, inst, new)
    elif "memset" in inst.called_function.name and inst.args[0] in cx.shadows:
        _forward_fill(cx, inst, new)


def reverse(cx, inst: I.Call, row: spec.Memory) -> None:
    """The reverse sweep: the adjoints the copy moved go back, those a fill overwrote are
    dropped."""
    if inst.args[0] not in cx.shadows:
        return
    length = cx.primal(inst.args[2])
    if cx.copies.get(inst) == "unused slots":
        pass  # no adjoint there (see _forward_fill)
    elif "memset" in inst.called_function.name or cx.copies.get(inst) == "constant":
        # The bytes written are constants: whatever adjoint was there is dropped.
        memset_zero(cx.module, cx.rb, cx.shadow(inst.args[0]), length)
    elif cx.copies.get(inst) is not None:
        _reverse_copy(cx, inst, cx.copies[inst], length)


def _copied_kinds(cx, inst: I.Call) -> set:
    """What type analysis finds in the bytes a copy moves (``Float@double``, ``Integer``,
    ``Pointer``, ...), at either end."""
    types = cx.types()
    length = inst.args[2]
    found, copied = set(), set()
    for pointer in inst.args[:2]:
        tree = types.tree(pointer).data0()
        # The bytes copied themselves; deeper entries describe memory they point to, which
        # the copy does not move (a struct holding a float* copies a pointer, not floats).
        found.update(str(ct) for path, ct in tree if len(path) == 1)
        if isinstance(length, ConstantInt):  # the bytes past the copy are not moved
            copied.update(str(ct) for path, ct in tree.shift(0, length.value) if len(path) == 1)
    return copied or found


def _copied_type(cx, inst: I.Call):
    """What a copy moves, from type analysis: a float type (adjoints move back), None for
    integers and pointers (the shadow is copied like the primal), else an error."""
    found = _copied_kinds(cx, inst)
    floats = {t for t in found if t.startswith("Float@")}
    if floats and len(found) == 1:
        kind = floats.pop()[len("Float@"):]
        return {"double": T.double, "float": T.float}.get(kind) or _unknown_copy(cx, inst, found)
    if not floats and found and found <= {"Integer", "Pointer", "Anything"}:
        return None
    return _unknown_copy(cx, inst, found)


def _unknown_copy(cx, inst, found):
    raise UnsupportedError(
        f"{cx.where} copies memory whose contents type analysis finds to be "
        f"{sorted(found) or 'unknown'}; reverse mode needs to know which bytes are floats: "
        f"{inst}", hint="copy the array element by element, or report this function")


def _constant_bytes(pointer) -> bool:
    """Whether ``pointer`` points into a constant global holding only numbers (Numba's
    constant arrays, ``c"..."``): what is copied from it carries no derivative, whatever its
    type."""
    obj = underlying_object(pointer)
    return isinstance(obj, GlobalVariable) and obj.is_constant and \
        isinstance(obj.initializer, ConstantString)


def _forward_copy(cx, inst: I.Call, new: I.Call) -> None:
    dst, src = inst.args[0], inst.args[1]
    if _constant_bytes(src):
        cx.copies[inst] = "constant"  # its reverse clears the destination's adjoint
        return
    elty = _copied_type(cx, inst)
    cx.copies[inst] = elty
    if dst not in cx.shadows:
        if src in cx.shadows and elty is not None:
            raise ActivityError(f"{cx.where} copies active memory into memory that has no "
                                f"shadow: {inst}", hint="pass the destination as Duplicated",
                                docs="sharp-bits.html#temporary-storage")
        return
    if elty is None:  # pointers and integers: the shadow structure follows the primal
        source = cx.shadows.get(src)
        if source is None:
            # From memory without a shadow (a constant global's sizes): the shadow takes the
            # integers as they are, from the primal; a pointer copied there would have no
            # shadow to stand for it (a copy from null, undefined behaviour, before).
            if "Pointer" in _copied_kinds(cx, inst):
                raise UnsupportedError(
                    f"{cx.where} copies pointers from memory that has no shadow into memory "
                    f"that has one, so their derivatives would have nowhere to go: {inst}",
                    hint="pass the memory copied from as Duplicated (enzyme_dup)")
            source = new.args[1]
        args = list(new.args)
        args[0], args[1] = cx.shadows[dst], source
        cx.fb.insert(with_args(new, args))


def _forward_fill(cx, inst: I.Call, new: I.Call) -> None:
    """Zeros written into a list's block: Numba clears the slots past the list's end that
    way (when it allocates or grows the block, and where an item was removed), so that its
    destructor finds no stale references there. The same on the shadow, whose destructor
    (run once the reverse sweep is done) reads the shadow's references; the reverse then has
    nothing to clear, as no item is read from those slots before one is stored there again.
    Clearing them in the reverse sweep would drop the shadow references stored there later."""
    value = inst.args[1]
    if getattr(value, "value", None) != 0 or list_block_of(inst.args[0]) is None:
        return
    args = list(new.args)
    args[0] = cx.shadows[inst.args[0]]
    cx.fb.insert(with_args(new, args))
    cx.copies[inst] = "unused slots"


def _reverse_copy(cx, inst: I.Call, elty, length) -> None:
    """``src_bar[i] += dst_bar[i]; dst_bar[i] = 0`` over the copied elements. Where the two
    overlap (``memmove``: a list's items shifted by ``del`` or ``insert``), the elements go
    in the order that reads each ``dst_bar[i]`` before it receives a source's adjoint: down
    from the last when the destination is below the source."""
    b = cx.rb
    dst = cx.shadow(inst.args[0])
    src = cx.shadow(inst.args[1]) if inst.args[1] in cx.shadows else None
    size = sizeof(elty)
    count = b.udiv(length, const_int(length.type, size))
    down = None
    if src is not None and "memmove" in inst.called_function.name:
        down = b.icmp("ult", dst, src)
    fn = cx.rev
    head = b.block
    loop, done = fn.append_block("copy.adjoint"), fn.append_block("copy.adjoint.done")
    b.cbranch(b.icmp("eq", count, const_int(count.type, 0)), done, loop)
    b.position_at_end(loop)
    i = b.phi(count.type, name="k")
    i.add_incoming(const_int(count.type, 0), head)
    k = i
    if down is not None:
        last = b.sub(count, const_int(count.type, 1))
        k = b.select(down, b.sub(last, i), i)
    pd = b.gep(elty, dst, [k])
    d = b.load(elty, pd)
    b.store(const_null(elty), pd)
    if src is not None:
        ps = b.gep(elty, src, [k])
        if cx.sig.shared_adjoints and not cx.private(inst.args[1]):
            cx.shared_add(inst.args[1], ps, elty, d)  # other threads may read the source
        else:
            b.store(b.fadd(b.load(elty, ps), d), ps)
    nxt = b.add(i, const_int(count.type, 1))
    i.add_incoming(nxt, b.block)  # shared_add may have split the body
    b.cbranch(b.icmp("ult", nxt, count), loop, done)
    b.position_at_end(done)
