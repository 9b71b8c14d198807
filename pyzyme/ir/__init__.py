"""pyzyme's own model of LLVM IR: types, values, instructions, modules, builder, parser, printer.

Examples
--------
>>> from pyzyme import ir
>>> m = ir.Module("demo")
>>> f = m.add_function("twice", ir.FunctionType(ir.double, [ir.double]))
>>> b = ir.IRBuilder(f.append_block("entry"))
>>> b.ret(b.fmul(f.args[0], ir.const_float(ir.double, 2.0)))  # doctest: +ELLIPSIS
<Ret ...>
>>> print(f)
define double @twice(double %0) {
entry:
  %1 = fmul double %0, 2.000000e+00
  ret double %1
}
>>> ir.verify(m)
"""

from pyzyme.ir.builder import IRBuilder
from pyzyme.ir.instructions import (
    AtomicRMW, Alloca, BinaryOp, Branch, Call, CallBase, CallBr, Cast, CmpXchg, Compare,
    ExtractElement,
    ExtractValue, Fence, Freeze, GetElementPtr, IndirectBr, InsertElement, InsertValue,
    Instruction, Invoke, LandingPad, Load, Phi, Resume, Ret, Select, ShuffleVector, Store,
    Switch, Unreachable, UnaryOp, VAArg, CatchSwitch, FuncletPad, CatchRet,
    CleanupRet,
)
from pyzyme.ir.module import BasicBlock, Function, Module
from pyzyme.ir.parser import parse_module, parse_type
from pyzyme.ir.types import (
    ArrayType, FloatType, FunctionType, IdentifiedStructType, IntType, PointerType, StructType,
    Type, VectorType, double, float, half, i1, i8, i16, i32, i64, i128, label, metadata, ptr,
    token, void, x86_fp80,
)
from pyzyme.ir.values import (
    Argument, Constant, ConstantAggregate, ConstantExpr, ConstantFP, ConstantInt, GlobalAlias,
    GlobalValue, GlobalVariable, Null, Poison, Undef, Value, ZeroInitializer, const_float,
    const_int, const_null,
)
from pyzyme.ir.verify import verify

__all__ = [name for name in dir() if not name.startswith("_")]
