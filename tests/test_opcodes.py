"""The opcode table (pyzyme.ir.opcodes): one row per opcode the parser reads, its facts agreeing
with the instruction classes, with each other, and with the rule rows that say which opcodes
carry derivatives."""

from pyzyme.analysis.activity import analyze_activity, Activity
from pyzyme.ir import instructions as I
from pyzyme.ir import opcodes as O
from pyzyme.ir import parse_module
from pyzyme.ir.parse_instructions import _DISPATCH
from pyzyme.rules import default_rules
from pyzyme.rules.spec import Inactive, Linear, Partials

# Words the parser dispatches on that are call prefixes, not opcodes.
_CALL_PREFIXES = {"tail", "musttail", "notail"}


def test_every_opcode_the_parser_reads_has_one_row():
    assert set(_DISPATCH) - _CALL_PREFIXES == set(O.OPCODES)


def test_families_agree_with_the_instruction_classes():
    assert O.INT_BINOPS == {n for n, o in O.OPCODES.items() if o.group == "int"}
    assert len(O.INT_BINOPS) == 13 and len(O.FLOAT_BINOPS) == 5 and len(O.CASTS) == 14
    assert I.INT_BINOPS is O.INT_BINOPS and I.CASTS is O.CASTS
    assert O.TERMINATORS == {"br", "switch", "indirectbr", "ret", "unreachable", "resume",
                             "catchswitch", "catchret", "cleanupret", "invoke", "callbr"}


def test_facts_imply_each_other():
    # a merge picks among its operands: structural; structural values are pure, but a phi
    assert O.MERGES <= O.STRUCTURAL
    assert O.STRUCTURAL - O.PURE == {"phi"}
    assert O.SPECULATABLE == O.PURE - {"udiv", "sdiv", "urem", "srem"}
    assert all(O.OPCODES[n].memory == "none" for n in O.PURE)
    assert O.EXITS <= O.TERMINATORS
    assert not O.INTEGER_RESULT & O.FROM_INTEGER
    # an address is derived only by a pure structural step; its casts keep their bits
    assert O.ADDRESS_DERIVING <= O.STRUCTURAL & O.PURE
    assert O.ADDRESS_CASTS == O.ADDRESS_DERIVING & O.CASTS <= O.SAME_BITS
    assert O.WHOLE_MERGES == {"phi", "select"} and O.WHOLE_MERGES <= O.MERGES
    assert O.READ_MODIFY_WRITE <= O.READ_WRITE == {"atomicrmw", "cmpxchg", "fence", "va_arg"}
    assert O.COMMUTATIVE <= O.PURE and not O.COMMUTATIVE & {"sub", "fsub", "fdiv", "shl"}


def test_rule_rows_agree_with_the_table():
    """An opcode a row calls inactive has an integer result or an integer operand; one with
    partials or a linear row has neither, and is pure."""
    rows = [r for r in default_rules().rows() if r.kind == "opcode"]
    for row in rows:
        for name in row.names:
            facts = O.OPCODES[name]
            integer = facts.integer_result or facts.from_integer
            assert integer == isinstance(row, Inactive), name
            if isinstance(row, (Partials, Linear)):
                assert facts.pure, name


def test_activity_flows_through_every_float_and_structural_opcode():
    # one fact each way: fptrunc (a float cast) carries activity, fptosi (integer result)
    # and sitofp of its integer back do not, nor the integer compare
    m = parse_module("""define double @f(double %x, <2 x double> %v) {
      %a = fptrunc double %x to float
      %b = fpext float %a to double
      %i = fptosi double %b to i64
      %c = sitofp i64 %i to double
      %e = insertelement <2 x double> %v, double %b, i32 0
      %s = shufflevector <2 x double> %e, <2 x double> %v, <2 x i32> <i32 0, i32 3>
      %g = extractelement <2 x double> %s, i32 0
      %r = fadd double %g, %c
      ret double %r
    }""")
    fn = m.get_function("f")
    act = analyze_activity(fn, [Activity.ACTIVE, Activity.CONST])
    varied = {i.name for i in fn.instructions() if act.is_varied(i)}
    assert varied == {"a", "b", "e", "s", "g", "r"}
