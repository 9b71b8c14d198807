"""The tape of split reverse mode: a Python :class:`Tape`, and inside ``@njit`` code an
NRT-managed, single-use object.

Inside ``@njit`` code a tape is a Numba Runtime MemInfo (reference counted like an array) whose
data is ``{i64 address, i64 live}``: the address the augmented primal returned and whether the
reverse sweep is still to come. Its destructor frees a tape that is dropped unused (it calls the
split plan's ``discard``), so a tape going out of scope in a loop leaks nothing; the reverse
thunk takes the address and clears ``live``, so a second reverse sweep from the same tape raises
:class:`~pyzyme.PyzymeError` instead of reading freed memory.

The tape's Numba type is per split plan (the function, its argument types and activities):
passing one function's tape to another's reverse thunk is a typing error, found when the
``@njit`` code compiles.

A tape moves between Python and ``@njit`` code: returned to Python it becomes a
:class:`Tape` owning the memory; a Python ``Tape`` passed to ``@njit`` code
hands its memory over and is consumed on the Python side (as if passed to a reverse thunk).
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import (
    NativeValue,
    box,
    intrinsic,
    models,
    register_model,
    typeof_impl,
    unbox,
)

from pyzyme.errors import PyzymeError

__all__ = ["Tape", "TapeType", "tape_intrinsics"]

_I64 = ir.IntType(64)
_DATA = ir.LiteralStructType([_I64, _I64])  # address, live


class Tape:
    """What a split forward pass keeps for its reverse pass: opaque, single use.

    It owns its memory: a tape that is never passed to the reverse thunk is freed (with the
    temporaries it keeps alive) when it is collected. ``nbytes`` is the memory it holds: its
    own block, and the loop caches and stacks hanging off it at their capacity (temporaries
    of the function it keeps alive are not counted). Passed to ``@njit`` code, a tape hands its
    memory over and is used; a tape returned from ``@njit`` code takes it over.
    """

    __slots__ = ("_address", "_plan", "nbytes")

    def __init__(self, address: int, plan) -> None:
        self._address = address
        self._plan = plan
        self.nbytes = int(plan.nbytes(address)) if address else 0

    @property
    def plan(self):
        """The split plan whose forward thunk made this tape."""
        return self._plan

    @property
    def consumed(self) -> bool:
        return self._address is None

    def take(self, plan) -> int:
        """The address, for the reverse thunk of ``plan``; this tape is then used."""
        if self._address is None:
            raise PyzymeError("this tape was already used by a reverse pass (or freed); run "
                              "the forward thunk again for a new one")
        if plan is not self._plan:
            raise PyzymeError("this tape comes from another function's (or other argument "
                              "types') forward thunk; pass it to the reverse thunk made with it")
        address, self._address = self._address, None
        return address

    @classmethod
    def _adopt(cls, plan, address: int, live: int) -> Tape:
        """The Python side of a tape returned from ``@njit`` code (its memory moves here)."""
        tape = cls(address if live else 0, plan)
        if not live:
            tape._address = None
        return tape

    def _move_to_njit(self) -> int:
        """The address, for ``@njit`` code taking this tape over; this tape is then used."""
        return self.take(self._plan)

    def free(self) -> None:
        """Release the tape now instead of when it is collected."""
        if self._address is not None:
            address, self._address = self._address, None
            if address:
                self._plan.discard(address)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to free into
            pass

    def __repr__(self) -> str:
        state = "used" if self._address is None else f"{self.nbytes} bytes"
        return f"Tape({state})"


@typeof_impl.register(Tape)
def _typeof_tape(val: Tape, c):
    return TapeType(val._plan)


class TapeType(types.Type):
    """The Numba type of the tapes of one split plan."""

    def __init__(self, plan) -> None:
        self.plan = plan  # keeps the plan, so no other plan gets its id while the type lives
        super().__init__(name=f"pyzyme.Tape(split plan {id(plan):#x})")


@register_model(TapeType)
class _TapeModel(models.OpaqueModel):
    """A MemInfo pointer: Numba increfs and decrefs it as it does an array's."""

    def has_nrt_meminfo(self) -> bool:
        return True

    def get_nrt_meminfo(self, builder, value):
        return value

    def inner_models(self) -> list:
        return []


def _fields(context, builder, meminfo):
    data = builder.bitcast(context.nrt.meminfo_data(builder, meminfo), _DATA.as_pointer())
    return (cgutils.gep_inbounds(builder, data, 0, 0),
            cgutils.gep_inbounds(builder, data, 0, 1))


def _discard(module, plan):
    fnty = ir.FunctionType(ir.VoidType(), [_I64])
    return cgutils.get_or_insert_function(module, fnty, plan.discard_symbol)


def _destructor(module, plan):
    """``void dtor(ptr data, size_t size, ptr info)``: discard a tape never used."""
    voidptr = cgutils.voidptr_t
    fnty = ir.FunctionType(ir.VoidType(), [voidptr, cgutils.intp_t, voidptr])
    fn = cgutils.get_or_insert_function(module, fnty, f"{plan.discard_symbol}.tape_dtor")
    if not fn.is_declaration:
        return fn
    fn.linkage = "linkonce_odr"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    data = b.bitcast(fn.args[0], _DATA.as_pointer())
    address = b.load(cgutils.gep_inbounds(b, data, 0, 0))
    live = b.load(cgutils.gep_inbounds(b, data, 0, 1))
    unused = b.and_(b.icmp_unsigned("!=", live, _I64(0)),
                    b.icmp_unsigned("!=", address, _I64(0)))
    with b.if_then(unused):
        b.call(_discard(module, plan), [address])
    b.ret_void()
    return fn


def _new(context, builder, plan, address):
    """A new tape's MemInfo holding ``address`` (null if it cannot be allocated: ``address``
    is then discarded)."""
    context.active_code_library.add_linking_library(plan.compiled.library)
    dtor = _destructor(builder.module, plan)
    size = context.get_constant(types.uintp, 16)
    meminfo = context.nrt.meminfo_alloc_dtor_unchecked(builder, size, dtor)
    with builder.if_else(cgutils.is_null(builder, meminfo)) as (failed, done):
        with failed:
            builder.call(_discard(builder.module, plan), [address])
        with done:
            slot_address, slot_live = _fields(context, builder, meminfo)
            builder.store(address, slot_address)
            builder.store(_I64(1), slot_live)
    return meminfo


def tape_intrinsics(tape_type: TapeType):
    """``(new, live, take)`` for the tapes of ``tape_type``'s plan, as ``@intrinsic``\\ s:
    ``new(address) -> tape``, ``live(tape) -> bool``, ``take(tape) -> address`` (clearing
    ``live``)."""
    plan = tape_type.plan

    @intrinsic
    def new(typingctx, address):
        def codegen(context, builder, sig, args):
            meminfo = _new(context, builder, plan, args[0])
            with cgutils.if_unlikely(builder, cgutils.is_null(builder, meminfo)):
                context.call_conv.return_user_exc(builder, MemoryError,
                                                  ("cannot allocate a tape",))
            return meminfo

        return tape_type(types.uint64), codegen

    @intrinsic
    def live(typingctx, tape):
        if tape != tape_type:
            return None

        def codegen(context, builder, sig, args):
            _, slot_live = _fields(context, builder, args[0])
            return builder.icmp_unsigned("!=", builder.load(slot_live), _I64(0))

        return types.boolean(tape_type), codegen

    @intrinsic
    def take(typingctx, tape):
        if tape != tape_type:
            return None

        def codegen(context, builder, sig, args):
            slot_address, slot_live = _fields(context, builder, args[0])
            builder.store(_I64(0), slot_live)
            return builder.load(slot_address)

        return types.uint64(tape_type), codegen

    return new, live, take


@box(TapeType)
def _box(ty: TapeType, value, c):
    """A Python ``Tape`` that takes over the tape's memory (the native one is left used)."""
    builder = c.builder
    slot_address, slot_live = _fields(c.context, builder, value)
    address, live = builder.load(slot_address), builder.load(slot_live)
    builder.store(_I64(0), slot_live)
    cls = c.env_manager.read_const(c.env_manager.add_const(Tape))
    plan = c.env_manager.read_const(c.env_manager.add_const(ty.plan))
    args = [c.pyapi.long_from_ulonglong(address), c.pyapi.long_from_ulonglong(live)]
    out = c.pyapi.call_method(cls, "_adopt", [plan, *args])
    for arg in args:
        c.pyapi.decref(arg)
    c.context.nrt.decref(builder, ty, value)
    return out


@unbox(TapeType)
def _unbox(ty: TapeType, obj, c):
    """The tape of a Python ``Tape``, which is consumed (an error if it already is)."""
    builder = c.builder
    meminfo = cgutils.alloca_once_value(builder, cgutils.voidptr_t(None))
    address = c.pyapi.call_method(obj, "_move_to_njit")
    with builder.if_then(cgutils.is_not_null(builder, address), likely=True):
        value = c.pyapi.long_as_ulonglong(address)
        c.pyapi.decref(address)
        new = _new(c.context, builder, ty.plan, value)
        builder.store(new, meminfo)
        with cgutils.if_unlikely(builder, cgutils.is_null(builder, new)):
            c.pyapi.err_set_string("PyExc_MemoryError", "cannot allocate a tape")
    result = builder.load(meminfo)
    return NativeValue(result, is_error=cgutils.is_null(builder, result))
