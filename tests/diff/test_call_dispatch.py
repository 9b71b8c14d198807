"""Calls go through one table keyed by the kind of the callee's rule row
(:mod:`pyzyme.diff.calls.dispatch`): a kind it has no handler for is an error naming the kind
and the call, in every mode, never a derivative silently left out."""

from dataclasses import dataclass

import pytest

from pyzyme import UnsupportedError
from pyzyme.analysis.activity import Activity
from pyzyme.diff.calls.dispatch import RULES
from pyzyme.diff.forward.generator import ForwardGenerator, ForwardSignature
from pyzyme.diff.reverse.generator import ReverseGenerator, ReverseSignature
from pyzyme.ir import parse_module
from pyzyme.rules import default_rules, spec
from pyzyme.rules.table import RuleTable

SOURCE = """define double @f(double %x) {
entry:
  %y = call double @g(double %x)
  %z = fmul double %y, %x
  ret double %z
}
declare double @g(double)
"""


@dataclass(frozen=True)
class Unheard(spec.Row):
    """A kind of row no handler knows."""


def _rules(row) -> RuleTable:
    table = RuleTable(default_rules().rows())
    table.add(row)
    return table


def _forward(rules):
    m = parse_module(SOURCE)
    fn = m.get_function("f")
    return ForwardGenerator(m, rules).derivative(
        fn, ForwardSignature.standard(fn, [Activity.ACTIVE]))


def _reverse(rules):
    m = parse_module(SOURCE)
    return ReverseGenerator(m, rules).derivative(
        m.get_function("f"), ReverseSignature((Activity.ACTIVE,), return_active=True))


@pytest.mark.parametrize("mode", [_forward, _reverse], ids=["forward", "reverse"])
def test_a_row_kind_without_handlers_is_named(mode):
    with pytest.raises(UnsupportedError, match=r"f calls @g, whose rule is a Unheard row"):
        mode(_rules(Unheard(("g",), "custom")))


def test_a_call_with_a_linear_row_has_no_reverse_and_says_so():
    # Forward mode makes the same call on the tangent; reverse mode would need its transpose.
    linear = spec.Linear(("g",), "custom", transpose="fptrunc")
    assert 'call double @g(double %"x\'")' in str(_forward(_rules(linear)))
    with pytest.raises(UnsupportedError, match=r"Linear row, and reverse mode \(forward "
                                               r"sweep\) has no handler for Linear rows"):
        _reverse(_rules(linear))


def test_every_kind_of_row_has_a_forward_handler():
    kinds = {getattr(spec, name) for name in spec.__all__}
    rows = {k for k in kinds if isinstance(k, type) and issubclass(k, spec.Row)} - {spec.Row}
    assert rows <= set(RULES)
    assert all(RULES[k].forward is not None for k in rows)
