"""The README's example runs and gives what its comments say."""

import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.skipif(not README.exists(), reason="README.md is not installed with the package")
def test_readme_example():
    text = README.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    value, derivative = scope["autodiff"](scope["Forward"], scope["taylor_exp"],
                                          scope["Duplicated"], scope["Duplicated"](1.5, 1.0),
                                          scope["Const"](20))
    assert (value, derivative) == pytest.approx((np.exp(1.5), np.exp(1.5)), rel=1e-9)
    assert "4.4816890703380645, 4.481689070338046" in text
    p = scope["descend"](np.zeros(2), np.linspace(0, 1, 20), 0.01, 2000)
    np.testing.assert_allclose(p, [0.85365031, 0.03082361], rtol=1e-6)


@pytest.mark.skipif(not README.exists(), reason="README.md is not installed with the package")
def test_readme_reverse_example():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    exec(compile(blocks[1], "README.md", "exec"), scope)
    result = scope["autodiff"](scope["Reverse"], scope["taylor_log"], scope["Active"],
                               scope["Active"](0.5), scope["Const"](10**6))
    assert result == ((pytest.approx(2.0, rel=1e-12), None),)
    p, d = np.array([1.0, 0.5]), np.linspace(0, 1, 20)
    h = 1e-6
    fd = [(scope["loss"](p + h * e, d) - scope["loss"](p - h * e, d)) / (2 * h)
          for e in np.eye(2)]
    np.testing.assert_allclose(scope["g"](p, d), fd, rtol=1e-6)
    assert scope["value"] == pytest.approx(scope["loss"](p, d), rel=1e-14)
    assert scope["ratio"] == 2.0
    np.testing.assert_allclose(scope["dp"], fd, rtol=1e-6)
    assert scope["sweeps"](np.array([2.2]), np.zeros(1), 3.3) == (None, pytest.approx(2.2))
    np.testing.assert_allclose(scope["hvp"](lambda q: np.sum(q ** 4), np.array([1.0, 2.0]),
                                            np.array([1.0, 0.0])), [12.0, 0.0])
    assert scope["result"] == pytest.approx(7.26)
    np.testing.assert_allclose(scope["dA"], [3.3])


@pytest.mark.skipif(not README.exists(), reason="README.md is not installed with the package")
def test_readme_custom_rules_example():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    block = next(b for b in blocks if "rules.forward" in b)
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    exec(compile(blocks[1], "README.md", "exec"), scope)
    exec(compile(block, "README.md", "exec"), scope)
    autodiff, Active, Const = scope["autodiff"], scope["Active"], scope["Const"]
    softplus = scope["softplus"]
    assert autodiff(scope["Reverse"], lambda x: 2.0 * softplus(x), Active(800.0)) == ((2.0,),)
    assert autodiff(scope["Forward"], scope["softplus"], scope["Duplicated"],
                    scope["Duplicated"](800.0, 1.0)) == (800.0, 1.0)
    assert autodiff(scope["Reverse"], scope["traced"], Active(2.0), Const(np.zeros(1))) == \
        ((pytest.approx(12.0), None),)
    zero = scope["make_zero"]({"w": np.ones(3), "b": (1.5, 2)})
    assert zero["b"] == (0.0, 0) and not zero["w"].any()
    from pyzyme.testing import test_reverse
    test_reverse(scope["traced"], Active, 2.0, Const(np.zeros(1)))


@pytest.mark.skipif(not README.exists(), reason="README.md is not installed with the package")
def test_readme_reflection_example():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    block = next(b for b in blocks if "code_llvm" in b)
    scope: dict = {}
    for code in (blocks[0], blocks[1], block):
        exec(compile(code, "README.md", "exec"), scope)
    assert "define" in scope["text"] and "diffe" in scope["text"]


@pytest.mark.skipif(not README.exists(), reason="README.md is not installed with the package")
def test_readme_structures_example():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    block = next(b for b in blocks if "sumlist" in b)
    scope: dict = {}
    exec(compile(block, "README.md", "exec"), scope)
    g = scope["gradient"](scope["Reverse"], scope["only_f"],
                          scope["Params"](2.0, np.array([3.0]), "str"))
    assert type(g) is scope["Params"] and g.a == 3.0 and g.c == "str"
    np.testing.assert_array_equal(g.b, [2.0])
    assert (scope["shadow"].val, scope["shadow"].next.val) == (4.0, 2.0)
    assert scope["shadow"].next.next is None


@pytest.mark.skipif(not README.exists(), reason="README.md is not installed with the package")
def test_readme_explain_command(monkeypatch, capsys):
    """The README's ``pyzyme explain`` line, run as written from the checkout's root."""
    import shlex

    from pyzyme.cli import main

    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    line = next(ln for b in blocks for ln in b.splitlines() if ln.startswith("pyzyme explain "))
    words = shlex.split(line.split("#")[0])
    assert words[0] == "pyzyme" and "--args" in words
    monkeypatch.chdir(README.parent)
    assert main(words[1:]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith("taylor_log(float64, int64) -> float64  (")
    assert "reverse-mode activity: x active, n const; result active" in out
    assert re.search(r"call double @llvm\.pow\.f64\(double %arg\.x, .*active +line \d+", out)
