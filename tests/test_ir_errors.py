"""Malformed text raises ParseError with line, column and caret; nothing else escapes."""

import llvmlite.binding as llvm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyzyme import ParseError, VerifyError, ir

GOOD = """define double @f(double %x, i64 %n) {
entry:
  %c = icmp sgt i64 %n, 0
  br i1 %c, label %loop, label %exit

loop:
  %i = phi i64 [ 0, %entry ], [ %j, %loop ]
  %a = phi double [ %x, %entry ], [ %b, %loop ]
  %b = fmul double %a, %x
  %j = add i64 %i, 1
  %d = icmp slt i64 %j, %n
  br i1 %d, label %loop, label %exit

exit:
  %r = phi double [ %x, %entry ], [ %b, %loop ]
  ret double %r
}
"""

# (replacement of one line of GOOD, expected words in the message, line, column)
BAD = [
    ("  %b = fmul double %a, %x", "  %b = fmul i32 %a, %x", "%a is double but used as i32", 9, 17),
    ("  %j = add i64 %i, 1", "  %j = add double %i, 1", "%i is i64 but used as double", 10, 19),
    ("  %j = add i64 %i, 1", "  %j = add double 1.0, 2.0", "add: needs integer operands", 10, 3),
    ("  %j = add i64 %i, 1", "  %j = add i64 %i 1", "expected ','", 10, 19),
    ("  %j = add i64 %i, 1", "  %j = frobnicate i64 %i, 1", "unknown instruction", 10, 8),
    ("  %j = add i64 %i, 1", "  %j = add i64 %zz, 1", "undefined value %zz", 10, 16),
    ("  br i1 %d, label %loop, label %exit", "  br i1 %d, label %loop, label %nowhere",
     "undefined label", 12, 32),
    ("  ret double %r", "  ret double %c", "%c is i1 but used as double", 16, 14),
    ("  %d = icmp slt i64 %j, %n", "  %d = icmp slt i64 %j, %n ?", "unexpected character", 11,
     28),
    ("  %b = fmul double %a, %x", "  %b = fmul double* %a, %x", "typed pointers", 9, 19),
    ("  %j = add i64 %i, 1", "  %i = add i64 %i, 1", "redefinition of %i", 10, 3),
    ("  %j = add i64 %i, 1", "  %j = load double, ptr @nowhere", "undefined global", 10, 25),
    ("  %b = fmul double %a, %x", "  %b = fmul double %a, 1", "", 9, 0),
]


@pytest.mark.parametrize("old,new,words,line,column", BAD,
                         ids=[b[1].strip()[:30] for b in BAD])
def test_malformed_text_reports_where(old, new, words, line, column):
    text = GOOD.replace(old, new)
    assert text != GOOD
    if not words:  # a control: the replacement is valid and parses
        ir.parse_module(text)
        return
    with pytest.raises(ParseError) as info:
        ir.parse_module(text)
    err = info.value
    assert words in str(err)
    assert (err.line, err.column) == (line, column), str(err)
    source_line, caret = err.excerpt.splitlines()
    assert source_line == text.splitlines()[line - 1]
    assert caret == " " * (column - 1) + "^"


def test_truncated_module():
    with pytest.raises(ParseError, match="missing '}'"):
        ir.parse_module(GOOD[:-3])


def test_top_level_garbage():
    with pytest.raises(ParseError, match="at top level") as info:
        ir.parse_module("target triple = \"x\"\nbanana\n")
    assert info.value.line == 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_text_never_escapes_as_another_exception(data):
    """Deleting, duplicating or replacing a span of valid IR gives a module or a ParseError."""
    text = GOOD
    start = data.draw(st.integers(0, len(text) - 1))
    length = data.draw(st.integers(0, 12))
    insert = data.draw(st.sampled_from(["", "%", "@x", "(", ")", "[", "]", "{", "}", ",", "\n",
                                        "i32", "0x", '"', "!", "label", "<2 x", "double 1.5"]))
    mutated = text[:start] + insert + text[start + length:]
    try:
        ir.parse_module(mutated)
    except ParseError as err:
        assert err.line >= 1 and err.column >= 1


def test_verify_reports_llvm_message():
    m = ir.parse_module(GOOD.replace("  %b = fmul double %a, %x\n", "") .replace(
        "  %j = add i64 %i, 1", "  %j = add i64 %i, 1\n  %b = fmul double %a, %x"))
    ir.verify(m)  # moved within its block: still valid
    bad = ir.parse_module(GOOD.replace("[ %b, %loop ]\n  ret", "[ %i, %loop ]\n  ret")
                          .replace("phi double [ %x, %entry ], [ %i, %loop ]",
                                   "phi double [ %x, %entry ], [ %x, %loop ]"))
    ir.verify(bad)
    text = str(ir.parse_module(GOOD)).replace("br i1 %c, label %loop, label %exit",
                                              "br i1 %c, label %loop, label %loop")
    with pytest.raises(VerifyError, match="PHI"):
        ir.verify(text)


def test_llvm_agrees_on_good_text():
    assert llvm.parse_assembly(str(ir.parse_module(GOOD))).verify() is None


def test_verify_survives_broken_debug_info():
    """LLVM aborts the process on a broken module with debug info; verify must not."""
    text = str(ir.parse_module(GOOD)).replace(
        "br i1 %c, label %loop, label %exit", "br i1 %c, label %loop, label %loop")
    text += ('\n!llvm.module.flags = !{!0}\n!0 = !{i32 2, !"Debug Info Version", i32 3}\n')
    with pytest.raises(VerifyError, match="PHI"):
        ir.verify(text)


def test_constants_may_span_lines():
    m = ir.parse_module("@t = global [3 x i64] [\n  i64 1,\n  i64 2,\n  i64 3\n]\n")
    assert m.get_global("t").initializer.ref == "[i64 1, i64 2, i64 3]"


def test_indented_definitions_parse_as_llvm_parses_them():
    """Leading blanks before ``define``, ``declare`` and a global are allowed, as in LLVM
    (they used to make a function look defined twice)."""
    text = "  @g = global double 1.0\n  declare double @h(double)\n" + "\n".join(
        "    " + line for line in GOOD.splitlines())
    assert llvm.parse_assembly(text).verify() is None
    m = ir.parse_module(text)
    assert m.get_global("g") is not None and m.get_function("h").is_declaration
    assert str(m) == str(ir.parse_module(text.replace("\n    ", "\n").lstrip()))
