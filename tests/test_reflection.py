"""``pyzyme.code_llvm``: the IR of a derivative, as text, in each mode."""

import re

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import (
    Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse, ReverseSplitNoPrimal,
    ReverseSplitWithPrimal, ReverseWithPrimal, UnsupportedError, autodiff, code_llvm, ir,
)


@numba.njit
def weighted(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += c * x[i] * x[i]
    return s


def _defines(text: str) -> list[str]:
    return re.findall(r"^define [^@]*@\"?([^\"(]+)", text, re.M)


def _parses(text: str) -> None:
    module = ir.parse_module(text)
    assert any(not fn.is_declaration for fn in module.functions)


def test_exported():
    assert pyzyme.code_llvm is code_llvm and "code_llvm" in pyzyme.__all__


def test_forward():
    x = np.arange(3.0)
    text = code_llvm(Forward, weighted, Duplicated, Duplicated(x, np.ones(3)), Const(2.0))
    names = _defines(text)
    entry = [n for n in names if n.startswith("__pyzyme_fwd_")]
    assert len(entry) == 1
    # the derivative takes the shadow of x's data, named after the primal with a prime
    assert "%\"arg.x.4'\"" in text
    _parses(text)
    # the same plan autodiff uses: the cache holds it, so the derivative is not built twice
    assert code_llvm(Forward, weighted, Duplicated, Duplicated(x, np.ones(3)), 2.0) == text
    (dy,) = autodiff(Forward, weighted, pyzyme.DuplicatedNoNeed, Duplicated(x, np.ones(3)),
                     Const(2.0))
    assert dy == pytest.approx(2 * 2.0 * x.sum())
    with_primal = code_llvm(ForwardWithPrimal, weighted, Duplicated(x, np.ones(3)), 2.0)
    assert with_primal == text


def test_reverse():
    x = np.arange(3.0)
    text = code_llvm(Reverse, weighted, Active, Duplicated(x, np.zeros(3)), Active(2.0))
    names = _defines(text)
    assert any(n.startswith("diffe") for n in names)
    assert any(n.startswith("__pyzyme_rev_") for n in names)
    assert re.search(r"^define internal \{[^}]*\} @\"?diffe", text, re.M)
    _parses(text)
    # Reverse shows what autodiff(Reverse) compiles: the primal result is not computed for
    # its own sake there, so the module differs from ReverseWithPrimal's, with the same parts
    with_primal = code_llvm(ReverseWithPrimal, weighted, Active, Duplicated(x, np.zeros(3)),
                            Active(2.0))
    _parses(with_primal)
    assert with_primal != text and len(_defines(with_primal)) == len(names)


def test_split():
    x = np.arange(3.0)
    text = code_llvm(ReverseSplitWithPrimal, weighted, Active, Duplicated(x, np.zeros(3)),
                     Active(2.0))
    names = _defines(text)
    assert any(n.startswith("augmented_") for n in names)
    assert any(n.startswith("reverse_") for n in names)
    for part in ("_aug", "_rev", "_discard"):
        assert any(n.startswith("__pyzyme_split_") and n.endswith(part) for n in names)
    _parses(text)
    no_primal = code_llvm(ReverseSplitNoPrimal, weighted, Active, Duplicated(x, np.zeros(3)),
                          Active(2.0))
    assert "augmented_" in no_primal


def test_optimized():
    x = np.arange(3.0)
    raw = code_llvm(Reverse, weighted, Active, Duplicated(x, np.zeros(3)), Active(2.0))
    opt = code_llvm(Reverse, weighted, Active, Duplicated(x, np.zeros(3)), Active(2.0),
                    optimized=True)
    assert opt != raw
    entry = next(n for n in _defines(raw) if n.startswith("__pyzyme_rev_"))
    assert entry in _defines(opt)
    _parses(opt)


def test_plain_python_function_and_errors():
    text = code_llvm(Reverse, lambda a: a * a, Active(3.0))  # return activity left out
    assert "diffe" in text
    with pytest.raises(TypeError, match="mode"):
        code_llvm("Reverse", weighted, Active(1.0))
    with pytest.raises(UnsupportedError, match="forward mode"):
        code_llvm(Forward, lambda a: a, Active, Duplicated(1.0, 1.0))
    with pytest.raises(UnsupportedError):
        code_llvm(pyzyme.ReverseHolomorphic, lambda a: a, Active(1.0))
