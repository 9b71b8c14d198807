"""Every construct pyzyme.ir models survives parse -> print, and LLVM agrees with the result."""

from pathlib import Path

import pytest

from conftest import assert_same_text, llvm_normalize
from pyzyme import ir

HERE = Path(__file__).parent / "ir"


@pytest.fixture(scope="module")
def feature_text() -> str:
    return llvm_normalize((HERE / "every_feature.ll").read_text())


def test_round_trip_is_identical_to_llvm(feature_text):
    printed = str(ir.parse_module(feature_text))
    assert_same_text(feature_text, llvm_normalize(printed), "LLVM's reading of pyzyme's print")
    assert_same_text(printed, str(ir.parse_module(printed)), "second round trip")


def test_every_opcode_is_parsed_into_its_class(feature_text):
    m = ir.parse_module(feature_text)
    seen = {type(i).__name__ for f in m.functions for i in f.instructions()}
    expected = {"BinaryOp", "UnaryOp", "Compare", "Cast", "Select", "Phi", "Freeze", "Alloca",
                "Load", "Store", "GetElementPtr", "ExtractValue", "InsertValue",
                "ExtractElement", "InsertElement", "ShuffleVector", "Call", "Invoke", "Branch",
                "Switch", "IndirectBr", "Ret", "Unreachable", "Resume", "LandingPad",
                "AtomicRMW", "CmpXchg", "Fence", "VAArg"}
    assert expected <= seen, expected - seen


def test_structured_fields(feature_text):
    m = ir.parse_module(feature_text)
    loops = m.get_function("loops")
    insts = {i.name: i for i in loops.instructions() if i.name}
    assert insts["gep"].flags == ("inbounds", "nuw")
    assert insts["gep"].source_type == ir.double
    assert insts["x"].align == 8 and insts["x"].metadata == [("tbaa", "!3")]
    assert insts["acc"].flags == ("fast",)
    assert [b.name for b in insts["res"].blocks] == ["entry", "latch", "loop"]
    switch = next(i for i in loops.instructions() if i.opcode == "switch")
    assert [(c.value, b.name) for c, b in switch.cases] == [(3, "three"), (5, "exit")]
    memory = m.get_function("memory")
    rmw = next(i for i in memory.instructions() if i.opcode == "atomicrmw")
    assert (rmw.operation, rmw.ordering, rmw.align) == ("add", "monotonic", 8)
    load = next(i for i in memory.instructions() if i.opcode == "load")
    assert load.ordering == "seq_cst"
    calls = m.get_function("calls")
    printf = next(i for i in calls.instructions() if i.name == "p")
    assert printf.function_type.var_arg and printf.called_function.name == "printf"
    assert printf.arg_attrs == ["noundef", "noundef"]
    assert m.get_global("quoted name").initializer.value == 7
    assert m.get_function("quoted fn").args[0].attrs == "byval(%struct.pair) align 8"
    assert m.struct_types["struct.node"].elements[1] is m.struct_types["struct.pair"]


def test_use_lists(feature_text):
    m = ir.parse_module(feature_text)
    loops = m.get_function("loops")
    insts = {i.name: i for i in loops.instructions() if i.name}
    assert sorted(u.name for u in insts["inc"].users) == ["done", "i", "res"]
    n = loops.args[1]
    assert sorted(u.name for u in n.users) == ["cmp", "done"]
    latch = next(b for b in loops.blocks if b.name == "latch")
    assert sorted(b.name for b in latch.predecessors) == ["loop", "three"]
    helper = m.get_function("helper")
    assert {u.parent.parent.name for u in helper.users} == {"calls"}
    assert len(helper.users) == 3


def test_replace_all_uses_and_erase(feature_text):
    m = ir.parse_module(feature_text)
    arith = m.get_function("arith")
    insts = {i.name: i for i in arith.instructions() if i.name}
    a = arith.args[0]
    n_a = len(a.users)
    insts["i13"].replace_all_uses_with(ir.const_int(ir.i64, 0))
    assert not insts["i13"].users
    insts["i13"].erase()
    assert insts["i13"] not in list(arith.instructions())
    assert insts["c1"].operands[0].ref == "0"
    insts["s"].replace_all_uses_with(a)
    assert len(a.users) == n_a + 1
    ir.verify(m)


def test_a_list_broken_over_lines_parses_as_one_line():
    # LLVM allows a line break wherever a space may go; clang and hand-written IR break long
    # parameter and argument lists. Inside parentheses and brackets a line break ends nothing.
    broken = (
        "define double @f(double %x,\n"
        "                 double %y) {\n"
        "entry:\n"
        "  %z = call double @g(double %x,   ; a comment between\n"
        "\n"
        "                      double %y)\n"
        "  %v = insertvalue [2 x double] [double 0.0,\n"
        "                                 double 1.0], double %z, 1\n"
        "  ret double %z\n"
        "}\n"
        "declare double @g(double, double)\n")
    flat = ("define double @f(double %x, double %y) {\n"
            "entry:\n"
            "  %z = call double @g(double %x, double %y)\n"
            "  %v = insertvalue [2 x double] [double 0.0, double 1.0], double %z, 1\n"
            "  ret double %z\n"
            "}\n"
            "declare double @g(double, double)\n")
    assert str(ir.parse_module(broken)) == str(ir.parse_module(flat))
    assert_same_text(llvm_normalize(str(ir.parse_module(broken))), llvm_normalize(broken))
