"""IRBuilder: well-typed code verifies and runs; ill-typed code is refused as it is built."""

import ctypes

import llvmlite.binding as llvm
import numpy as np
import pytest

from conftest import llvm_normalize
from pyzyme import IRTypeError, ir


def build_sum_of_squares() -> ir.Module:
    """double sumsq(ptr x, i64 n): a loop with phis, geps, loads and a call to an intrinsic."""
    m = ir.Module("built")
    fnty = ir.FunctionType(ir.double, [ir.ptr, ir.i64])
    f = m.add_function("sumsq", fnty)
    sqrt = m.add_function("llvm.sqrt.f64", ir.FunctionType(ir.double, [ir.double]))
    x, n = f.args
    x.name, n.name = "x", "n"
    entry, loop, done = f.append_block("entry"), f.append_block("loop"), f.append_block("exit")
    b = ir.IRBuilder(entry)
    zero = ir.const_int(ir.i64, 0)
    b.cbranch(b.icmp("sgt", n, zero, name="nonempty"), loop, done)
    b.position_at_end(loop)
    i = b.phi(ir.i64, name="i")
    acc = b.phi(ir.double, name="acc")
    p = b.gep(ir.double, x, [i], flags=("inbounds",), name="p")
    xi = b.load(ir.double, p, align=8, name="xi")
    acc2 = b.fadd(acc, b.fmul(xi, xi, name="sq"), name="acc")
    i2 = b.add(i, ir.const_int(ir.i64, 1), flags=("nuw", "nsw"), name="i")
    i.add_incoming(zero, entry)
    i.add_incoming(i2, loop)
    acc.add_incoming(ir.const_float(ir.double, 0.0), entry)
    acc.add_incoming(acc2, loop)
    b.cbranch(b.icmp("slt", i2, n), loop, done)
    b.position_at_end(done)
    r = b.phi(ir.double, name="r")
    r.add_incoming(ir.const_float(ir.double, 0.0), entry)
    r.add_incoming(acc2, loop)
    b.ret(b.call(sqrt, [r], tail="tail", name="norm"))
    return m


def test_built_function_verifies_and_runs():
    m = build_sum_of_squares()
    text = str(m)
    llvm_normalize(text)
    assert "%i.1 = add nuw nsw i64 %i, 1" in text
    assert "%acc.1 = fadd double %acc, %sq" in text
    assert str(ir.parse_module(text)) == text
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = llvm.Target.from_default_triple().create_target_machine()
    ee = llvm.create_mcjit_compiler(llvm.parse_assembly(text), tm)
    ee.finalize_object()
    fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)(
        ee.get_function_address("sumsq"))
    data = np.array([3.0, 4.0, 12.0])
    assert fn(data.ctypes.data, 3) == pytest.approx(13.0)
    assert fn(data.ctypes.data, 0) == 0.0


def test_use_lists_follow_the_builder():
    m = build_sum_of_squares()
    f = m.get_function("sumsq")
    insts = {i.name: i for i in f.instructions() if i.name}
    assert [u.name for u in insts["acc.1"].users] == ["acc", "r"]
    assert sorted(u.opcode for u in f.args[1].users) == ["icmp", "icmp"]
    assert [b.name for b in f.blocks[2].predecessors] == ["entry", "loop"]
    assert m.get_function("llvm.sqrt.f64").users[0].name == "norm"


def _fresh():
    m = ir.Module()
    f = m.add_function("f", ir.FunctionType(ir.double, [ir.double, ir.i32, ir.ptr]))
    b = ir.IRBuilder(f.append_block("entry"))
    return m, f, b


ILL_TYPED = [
    ("fadd i32", lambda f, b: b.fadd(f.args[1], f.args[1]), "fadd: needs floating operands"),
    ("add double", lambda f, b: b.add(f.args[0], f.args[0]), "add: needs integer operands"),
    ("mixed", lambda f, b: b.fmul(f.args[0], f.args[1]), "operand types differ"),
    ("icmp double", lambda f, b: b.icmp("slt", f.args[0], f.args[0]), "integers or pointers"),
    ("fcmp pred", lambda f, b: b.fcmp("slt", f.args[0], f.args[0]), "unknown predicate"),
    ("trunc up", lambda f, b: b.trunc(f.args[1], ir.i64), "cannot cast i32 to i64"),
    ("bitcast size", lambda f, b: b.bitcast(f.args[0], ir.i32), "cannot cast double to i32"),
    ("load from int", lambda f, b: b.load(ir.double, f.args[1]), "needs a pointer operand"),
    ("store to double", lambda f, b: b.store(f.args[0], f.args[0]), "needs a pointer"),
    ("gep on int", lambda f, b: b.gep(ir.double, f.args[1], []), "needs a pointer base"),
    ("gep float index", lambda f, b: b.gep(ir.double, f.args[2], [f.args[0]]),
     "indices must be integers"),
    ("select arms", lambda f, b: b.select(ir.const_int(ir.i1, 1), f.args[0], f.args[1]),
     "arm types differ"),
    ("select cond", lambda f, b: b.select(f.args[1], f.args[0], f.args[0]),
     "condition must be i1"),
    ("br cond", lambda f, b: b.cbranch(f.args[1], f.entry, f.entry), "condition must be i1"),
    ("ret type", lambda f, b: b.ret(f.args[1]), "returns double, not i32"),
    ("phi incoming", lambda f, b: ir.Phi(ir.double).add_incoming(f.args[1], f.entry),
     "incoming i32 value in a phi of double"),
    ("call arity", lambda f, b: b.call(f, [f.args[0]]), "takes 3 arguments, given 1"),
    ("call arg type", lambda f, b: b.call(f, [f.args[1], f.args[1], f.args[2]]),
     "argument 0 of @f is i32, expected double"),
    ("extractvalue", lambda f, b: b.extractvalue(f.args[0], 0), "cannot index into double"),
    ("insertvalue", lambda f, b: b.insertvalue(
        ir.Undef(ir.StructType([ir.double, ir.i64])), f.args[0], 1), "inserting double where i64"),
    ("extractelement", lambda f, b: b.extractelement(f.args[0], f.args[1]), "needs a vector"),
    ("fneg int", lambda f, b: b.fneg(f.args[1]), "needs a floating operand"),
]


@pytest.mark.parametrize("case,build,message", ILL_TYPED, ids=[c[0] for c in ILL_TYPED])
def test_ill_typed_instructions_are_refused(case, build, message):
    m, f, b = _fresh()
    before = len(f.entry.instructions)
    with pytest.raises(IRTypeError, match=message):
        build(f, b)
    assert len(f.entry.instructions) == before  # nothing half-built was inserted


def test_unique_names_and_unnamed_numbering():
    m, f, b = _fresh()
    x = f.args[0]
    a = b.fadd(x, x, name="t")
    c = b.fadd(a, x, name="t")
    d = b.fadd(c, x)
    b.ret(b.fmul(d, x, name="t"))
    text = str(f)
    assert "%t = fadd double %0, %0" in text
    assert "%t.1 = fadd double %t, %0" in text
    assert "%3 = fadd double %t.1, %0" in text  # args are %0..%2, so the first unnamed result is %3
    assert "%t.2 = fmul double %3, %0" in text
    llvm_normalize(str(m))


def test_constants_print_as_llvm_does():
    assert ir.const_float(ir.double, 0.1).ref == "1.000000e-01"  # "%e" reads back exactly
    assert ir.const_float(ir.double, 1 / 3).ref == "0x3FD5555555555555"
    assert ir.const_float(ir.double, -2.5).ref == "-2.500000e+00"
    assert ir.const_float(ir.float, 0.1).ref == "0x3FB99999A0000000"
    assert ir.const_float(ir.double, float("inf")).ref == "0x7FF0000000000000"
    assert ir.const_int(ir.i8, 255).ref == "-1"
    assert ir.const_int(ir.i1, 1).ref == "true"
    assert ir.const_null(ir.ptr).ref == "null"
    assert ir.const_null(ir.ArrayType(2, ir.double)).ref == "zeroinitializer"
    m = ir.Module()
    f = m.add_function("c", ir.FunctionType(ir.double, []))
    b = ir.IRBuilder(f.append_block("entry"))
    values = [0.1, 1 / 3, -0.0, 1e300, 2.2250738585072014e-308, float("nan"), float("-inf"),
              123456.789]
    acc = ir.const_float(ir.double, 0.0)
    for v in values:
        acc = b.fadd(acc, ir.const_float(ir.double, v))
    b.ret(acc)
    ours = str(m).split("define", 1)[1]
    theirs = llvm_normalize(str(m)).split("define", 1)[1]
    assert ours == theirs  # LLVM spells every constant as pyzyme does


def test_subnormal_constants_keep_their_value_through_llvm():
    m = ir.Module()
    f = m.add_function("c", ir.FunctionType(ir.double, []))
    ir.IRBuilder(f.append_block("entry")).ret(ir.const_float(ir.double, 5e-324))
    back = ir.parse_module(llvm_normalize(str(m)))
    assert back.get_function("c").entry.instructions[0].value.value == 5e-324
