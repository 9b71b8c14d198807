"""README.md's examples run and give what their comments show (``# -> VALUE``, checked by
tests.doc_blocks.run_block); the blocks the README's first two define are run once for the
module, and the others build on them as a reader would."""

import re

import numpy as np
import pytest

from tests.doc_blocks import README, readme_block, run_block


@pytest.fixture(scope="module")
def basics():
    scope = run_block(readme_block("def taylor_exp"))
    return run_block(readme_block("def taylor_log"), scope)


def test_readme_example(basics):
    scope = basics
    value, derivative = scope["autodiff"](scope["Forward"], scope["taylor_exp"],
                                          scope["Duplicated"], scope["Duplicated"](1.5, 1.0),
                                          scope["Const"](20))
    assert (value, derivative) == pytest.approx((np.exp(1.5), np.exp(1.5)), rel=1e-9)
    p = scope["descend"](np.zeros(2), np.linspace(0, 1, 20), 0.01, 2000)
    np.testing.assert_allclose(p, [0.85365031, 0.03082361], rtol=1e-6)


def test_readme_reverse_example(basics):
    scope = basics
    p, d = np.array([1.0, 0.5]), np.linspace(0, 1, 20)
    h = 1e-6
    fd = [(scope["loss"](p + h * e, d) - scope["loss"](p - h * e, d)) / (2 * h)
          for e in np.eye(2)]
    np.testing.assert_allclose(scope["g"](p, d), fd, rtol=1e-6)
    assert scope["value"] == pytest.approx(scope["loss"](p, d), rel=1e-14)
    assert scope["ratio"] == 2.0
    np.testing.assert_allclose(scope["dp"], fd, rtol=1e-6)
    assert scope["result"] == pytest.approx(7.26)
    np.testing.assert_allclose(scope["dA"], [3.3])


def test_readme_custom_rules_example(basics):
    scope = run_block(readme_block("rules.forward"), dict(basics))
    from pyzyme.testing import test_reverse
    test_reverse(scope["traced"], scope["Active"], 2.0, scope["Const"](np.zeros(1)))


def test_readme_reflection_example(basics):
    scope = run_block(readme_block("code_llvm"), dict(basics))
    assert "define" in scope["text"] and "diffe" in scope["text"]


def test_readme_structures_example():
    scope = run_block(readme_block("sumlist"))
    np.testing.assert_array_equal(scope["shadow"].next.val, 2.0)
    assert scope["shadow"].next.next is None


def test_readme_parallel_example():
    scope = run_block(readme_block("numba.prange"))
    u, h = np.array([0.0, 1.0, 4.0, 9.0]), 1e-6
    fd = [(scope["smoothness"](u + h * e) - scope["smoothness"](u - h * e)) / (2 * h)
          for e in np.eye(4)]
    np.testing.assert_allclose(scope["gradient"](scope["Reverse"], scope["smoothness"], u), fd,
                               rtol=1e-6)


def test_readme_tape_budget_example():
    """The checkpointed heat loop, run as written but for 400 steps under 64 KiB (the README's
    10**6 steps take seconds; its tape would still be 9.6 MB here, so the loop is checkpointed):
    the gradient of u and of c is the one without a budget (tests/reverse/test_checkpoint_budget.py
    tests the schedules themselves)."""
    code = readme_block("tape_budget=16 << 20")
    assert "Const(10**6)" in code and "16 << 20" in code
    scope = run_block(code.replace("10**6", "400").replace("16 << 20", "1 << 16"))
    heat, autodiff = scope["heat"], scope["autodiff"]
    u, du = np.sin(np.linspace(0, 3, 1000)), np.zeros(1000)
    (_, dc, _), = autodiff(scope["Reverse"], heat, scope["Duplicated"](u, du),
                           scope["Active"](0.2), scope["Const"](400))
    np.testing.assert_allclose(scope["du"], du, rtol=1e-12, atol=1e-300)
    u, bdu = np.sin(np.linspace(0, 3, 1000)), np.zeros(1000)
    with scope["pyzyme"].options(tape_budget=1 << 16):
        (_, bdc, _), = autodiff(scope["Reverse"], heat, scope["Duplicated"](u, bdu),
                                scope["Active"](0.2), scope["Const"](400))
    assert bdc == pytest.approx(dc, rel=1e-12)


def test_readme_explain_command(monkeypatch, capsys):
    """The README's ``pyzyme explain`` line, run as written from the checkout's root."""
    import shlex

    from pyzyme.cli import main

    block = readme_block("pyzyme explain ", "sh")
    line = next(ln for ln in block.splitlines() if ln.startswith("pyzyme explain "))
    words = shlex.split(line.split("#")[0])
    assert words[0] == "pyzyme" and "--args" in words
    monkeypatch.chdir(README.parent)
    assert main(words[1:]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith("taylor_log(float64, int64) -> float64  (")
    assert "reverse-mode activity: x active, n const; result active" in out
    assert re.search(r"call double @llvm\.pow\.f64\(double %arg\.x, .*active +line \d+", out)


def test_readme_version_command(capsys):
    """``pyzyme --version``, which the README says prints pyzyme's, Numba's, llvmlite's and
    Python's versions."""
    import platform

    import llvmlite
    import numba

    import pyzyme
    from pyzyme.cli import main

    assert "`pyzyme --version` prints pyzyme's version with" in README.read_text()
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code in (0, None)
    out = capsys.readouterr().out
    for version in (pyzyme.__version__, numba.__version__, llvmlite.__version__,
                    platform.python_version()):
        assert version in out
