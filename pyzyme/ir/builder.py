"""IRBuilder: create instructions at an insertion point.

Every method checks operand types (through the instruction constructors) before anything is
inserted, and gives the result a name unique in the function when one is asked for; without a
name the result is unnamed and LLVM numbers it when printed.

Examples
--------
>>> from pyzyme import ir
>>> m = ir.Module()
>>> f = m.add_function("axpy", ir.FunctionType(ir.double, [ir.double, ir.double, ir.double]))
>>> b = ir.IRBuilder(f.append_block("entry"))
>>> a, x, y = f.args
>>> r = b.fadd(b.fmul(a, x, name="ax"), y, name="ax")
>>> r.name
'ax.1'
>>> b.fadd(a, ir.const_int(ir.i32, 1))
Traceback (most recent call last):
...
pyzyme.errors.IRTypeError: fadd: operand types differ: double and i32
"""

from __future__ import annotations

from collections.abc import Sequence

from pyzyme.errors import IRTypeError
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import BasicBlock
from pyzyme.ir.values import Constant, ConstantInt, Poison, Value, ZeroInitializer


class IRBuilder:
    """Inserts instructions before ``self.index`` in ``self.block`` (at its end by default)."""

    def __init__(self, block: BasicBlock | None = None) -> None:
        self.block: BasicBlock | None = None
        self.index = 0
        if block is not None:
            self.position_at_end(block)

    # -- positioning --------------------------------------------------------------------
    def position_at_end(self, block: BasicBlock) -> None:
        self.block = block
        self.index = len(block.instructions)

    def position_at_start(self, block: BasicBlock) -> None:
        """Before the first instruction that is not a phi (after a landing pad's
        ``landingpad``, which must come first)."""
        self.block = block
        self.index = len(block.phis)
        if self.index < len(block.instructions) and \
                isinstance(block.instructions[self.index], I.LandingPad):
            self.index += 1

    def position_before(self, inst: I.Instruction) -> None:
        self.block = inst.parent
        self.index = inst.parent.instructions.index(inst)

    def position_after(self, inst: I.Instruction) -> None:
        self.block = inst.parent
        self.index = inst.parent.instructions.index(inst) + 1

    @property
    def function(self):
        return self.block.parent

    def insert(self, inst: I.Instruction, name: str = "") -> I.Instruction:
        """Insert a constructed instruction at the insertion point, naming it uniquely."""
        if self.block is None:
            raise IRTypeError("IRBuilder has no insertion point; call position_at_end first")
        if name and inst.has_result:
            inst.name = self.block.parent.unique_name(name)
        self.block.insert(self.index, inst)
        self.index += 1
        return inst

    def insert_copy(self, inst: I.Instruction, mapping: dict, operands=None, *,
                    debug: bool = True) -> I.Instruction:
        """Insert a copy of ``inst`` (from another function) whose operands are ``operands``
        (default: ``inst``'s, through ``mapping``) and whose phi blocks are their images in
        ``mapping``; without ``debug``, its ``!dbg`` location is dropped (the source
        function's debug scopes are not the new one's). Operands defined later in block
        order are set by :func:`resolve_later_operands` once every copy exists."""
        ops = [mapping.get(op, op) for op in inst.operands] if operands is None else operands
        copy = inst.copy_with(ops, keep_metadata=True)
        if not debug:
            copy.metadata = [(kind, text) for kind, text in copy.metadata if kind != "dbg"]
        if isinstance(copy, I.Phi):
            copy.blocks = [mapping[block] for block in copy.blocks]
        return self.insert(copy, inst.name if inst.has_result else "")

    # -- arithmetic ---------------------------------------------------------------------
    def binop(self, opcode: str, a: Value, b: Value, flags: Sequence[str] = (),
              name: str = "") -> I.BinaryOp:
        return self.insert(I.BinaryOp(opcode, a, b, flags), name)

    def add(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("add", a, b, flags, name)

    def sub(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("sub", a, b, flags, name)

    def mul(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("mul", a, b, flags, name)

    def sdiv(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("sdiv", a, b, flags, name)

    def udiv(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("udiv", a, b, flags, name)

    def srem(self, a: Value, b: Value, name: str = "") -> I.BinaryOp:
        return self.binop("srem", a, b, (), name)

    def urem(self, a: Value, b: Value, name: str = "") -> I.BinaryOp:
        return self.binop("urem", a, b, (), name)

    def shl(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("shl", a, b, flags, name)

    def lshr(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("lshr", a, b, flags, name)

    def ashr(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("ashr", a, b, flags, name)

    def and_(self, a: Value, b: Value, name: str = "") -> I.BinaryOp:
        return self.binop("and", a, b, (), name)

    def or_(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("or", a, b, flags, name)

    def xor(self, a: Value, b: Value, name: str = "") -> I.BinaryOp:
        return self.binop("xor", a, b, (), name)

    def fadd(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("fadd", a, b, flags, name)

    def fsub(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("fsub", a, b, flags, name)

    def fmul(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("fmul", a, b, flags, name)

    def fdiv(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("fdiv", a, b, flags, name)

    def frem(self, a: Value, b: Value, flags: Sequence[str] = (), name: str = "") -> I.BinaryOp:
        return self.binop("frem", a, b, flags, name)

    def fneg(self, a: Value, flags: Sequence[str] = (), name: str = "") -> I.UnaryOp:
        return self.insert(I.UnaryOp("fneg", a, flags), name)

    def icmp(self, predicate: str, a: Value, b: Value, flags: Sequence[str] = (),
             name: str = "") -> I.Compare:
        return self.insert(I.Compare("icmp", predicate, a, b, flags), name)

    def fcmp(self, predicate: str, a: Value, b: Value, flags: Sequence[str] = (),
             name: str = "") -> I.Compare:
        return self.insert(I.Compare("fcmp", predicate, a, b, flags), name)

    def cast(self, opcode: str, value: Value, to: T.Type, flags: Sequence[str] = (),
             name: str = "") -> I.Cast:
        return self.insert(I.Cast(opcode, value, to, flags), name)

    def trunc(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("trunc", v, to, (), name)

    def zext(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("zext", v, to, (), name)

    def sext(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("sext", v, to, (), name)

    def fptrunc(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("fptrunc", v, to, (), name)

    def fpext(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("fpext", v, to, (), name)

    def fptosi(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("fptosi", v, to, (), name)

    def fptoui(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("fptoui", v, to, (), name)

    def sitofp(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("sitofp", v, to, (), name)

    def uitofp(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("uitofp", v, to, (), name)

    def ptrtoint(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("ptrtoint", v, to, (), name)

    def inttoptr(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("inttoptr", v, to, (), name)

    def bitcast(self, v: Value, to: T.Type, name: str = "") -> I.Cast:
        return self.cast("bitcast", v, to, (), name)

    def select(self, cond: Value, a: Value, b: Value, flags: Sequence[str] = (),
               name: str = "") -> I.Select:
        return self.insert(I.Select(cond, a, b, flags), name)

    def phi(self, type: T.Type, flags: Sequence[str] = (), name: str = "") -> I.Phi:  # noqa: A002
        """A phi at the insertion point; add incomings with ``phi.add_incoming(v, block)``."""
        return self.insert(I.Phi(type, flags), name)

    def freeze(self, value: Value, name: str = "") -> I.Freeze:
        return self.insert(I.Freeze(value), name)

    # -- memory -------------------------------------------------------------------------
    def alloca(self, type: T.Type, count: Value | None = None, align: int | None = None,  # noqa: A002
               name: str = "") -> I.Alloca:
        return self.insert(I.Alloca(type, count, align), name)

    def entry_alloca(self, type: T.Type, align: int | None = None,  # noqa: A002
                     name: str = "") -> I.Alloca:
        """A stack slot at the start of the function's entry block (one slot however often
        the code building it runs, as in a loop); this builder keeps its place."""
        entry = self.function.blocks[0]
        slot = I.Alloca(type, None, align)
        if name:
            slot.name = entry.parent.unique_name(name)
        entry.insert(0, slot)
        if self.block is entry:
            self.index += 1
        return slot

    def load(self, type: T.Type, pointer: Value, align: int | None = None,  # noqa: A002
             volatile: bool = False, name: str = "") -> I.Load:
        return self.insert(I.Load(type, pointer, align, volatile), name)

    def store(self, value: Value, pointer: Value, align: int | None = None,
              volatile: bool = False) -> I.Store:
        return self.insert(I.Store(value, pointer, align, volatile))

    def gep(self, source_type: T.Type, pointer: Value, indices: Sequence[Value],
            flags: Sequence[str] = (), name: str = "") -> I.GetElementPtr:
        return self.insert(I.GetElementPtr(source_type, pointer, indices, flags), name)

    def extractvalue(self, aggregate: Value, indices: Sequence[int] | int,
                     name: str = "") -> I.ExtractValue:
        idx = (indices,) if isinstance(indices, int) else tuple(indices)
        return self.insert(I.ExtractValue(aggregate, idx), name)

    def insertvalue(self, aggregate: Value, element: Value, indices: Sequence[int] | int,
                    name: str = "") -> I.InsertValue:
        idx = (indices,) if isinstance(indices, int) else tuple(indices)
        return self.insert(I.InsertValue(aggregate, element, idx), name)

    def extractelement(self, vector: Value, index: Value, name: str = "") -> I.ExtractElement:
        return self.insert(I.ExtractElement(vector, index), name)

    def insertelement(self, vector: Value, element: Value, index: Value,
                      name: str = "") -> I.InsertElement:
        return self.insert(I.InsertElement(vector, element, index), name)

    def shufflevector(self, a: Value, b: Value, mask: Constant,
                      name: str = "") -> I.ShuffleVector:
        return self.insert(I.ShuffleVector(a, b, mask), name)

    def splat(self, value: Value, count: int, name: str = "") -> I.ShuffleVector:
        """``<count x ty>`` with every lane ``value`` (a scalar of type ``ty``)."""
        vector = T.VectorType(count, value.type)
        one = self.insertelement(Poison(vector), value, ConstantInt(T.i32, 0))
        return self.shufflevector(one, Poison(vector),
                                  ZeroInitializer(T.VectorType(count, T.i32)), name)

    def atomicrmw(self, operation: str, pointer: Value, value: Value, ordering: str,
                  name: str = "") -> I.AtomicRMW:
        return self.insert(I.AtomicRMW(operation, pointer, value, ordering), name)

    def cmpxchg(self, pointer: Value, cmp: Value, new: Value, success: str, failure: str,
                name: str = "") -> I.CmpXchg:
        return self.insert(I.CmpXchg(pointer, cmp, new, success, failure), name)

    def fence(self, ordering: str) -> I.Fence:
        return self.insert(I.Fence(ordering))

    def va_arg(self, valist: Value, type: T.Type, name: str = "") -> I.VAArg:  # noqa: A002
        return self.insert(I.VAArg(valist, type), name)

    # -- calls --------------------------------------------------------------------------
    def call(self, callee: Value, args: Sequence[Value],
             function_type: T.FunctionType | None = None, flags: Sequence[str] = (),
             tail: str = "", name: str = "") -> I.Call:
        """Call ``callee`` (a Function, whose type is used, or a pointer with ``function_type``)."""
        fnty = function_type or _function_type_of(callee)
        return self.insert(I.Call(callee, list(args), fnty, flags, tail), name)

    def invoke(self, callee: Value, args: Sequence[Value], normal: BasicBlock,
               unwind: BasicBlock, function_type: T.FunctionType | None = None,
               name: str = "") -> I.Invoke:
        fnty = function_type or _function_type_of(callee)
        return self.insert(I.Invoke(callee, list(args), fnty, normal, unwind), name)

    def landingpad(self, type: T.Type, cleanup: bool = False,  # noqa: A002
                   name: str = "") -> I.LandingPad:
        return self.insert(I.LandingPad(type, cleanup), name)

    # -- terminators --------------------------------------------------------------------
    def br(self, target: BasicBlock) -> I.Branch:
        return self.insert(I.Branch(target))

    def cbranch(self, cond: Value, true_target: BasicBlock,
                false_target: BasicBlock) -> I.Branch:
        return self.insert(I.Branch(true_target, false_target, cond))

    def switch(self, value: Value, default: BasicBlock,
               cases: Sequence[tuple[ConstantInt, BasicBlock]] = ()) -> I.Switch:
        inst = I.Switch(value, default)
        for const, dest in cases:
            inst.add_case(const, dest)
        return self.insert(inst)

    def ret(self, value: Value | None = None) -> I.Ret:
        fn = self.function
        expected = fn.function_type.ret if fn is not None and fn.function_type else None
        got = value.type if value is not None else T.void
        if expected is not None and got != expected:
            raise IRTypeError(f"ret: @{fn.name} returns {expected}, not {got}")
        return self.insert(I.Ret(value))

    def ret_void(self) -> I.Ret:
        return self.ret(None)

    def unreachable(self) -> I.Unreachable:
        return self.insert(I.Unreachable())

    def resume(self, value: Value) -> I.Resume:
        return self.insert(I.Resume(value))


def _function_type_of(callee: Value) -> T.FunctionType:
    fnty = getattr(callee, "function_type", None)
    if fnty is None:
        raise IRTypeError(f"call: the type of {callee.ref} is unknown; pass function_type")
    return fnty


def resolve_later_operands(copies, mapping: dict) -> None:
    """Give the instructions ``copies`` (made by :meth:`IRBuilder.insert_copy`) the images in
    ``mapping`` of operands that were copied after them (phis, loops' back edges)."""
    for inst in copies:
        for i, op in enumerate(inst.operands):
            if op in mapping and mapping[op] is not op:
                inst.set_operand(i, mapping[op])
