"""``pyzyme explain``: each instruction of a Numba function with its activity, type tree and
Python line, from Python and from the command line."""

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

from pyzyme.cli import main, parse_arg_types
from pyzyme.explain import explain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@numba.njit
def accumulate(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += c * x[i] * x[i]
    return s


FIRST = accumulate.py_func.__code__.co_firstlineno  # the decorator's line
LOOP, BODY, RETURN = FIRST + 3, FIRST + 4, FIRST + 5


def _row(report, pattern: str) -> str:
    """The printed instruction line containing ``pattern`` (exactly one)."""
    lines = [ln for ln in str(report).splitlines() if pattern in ln]
    assert len(lines) == 1, (pattern, lines)
    return lines[0]


@pytest.fixture(scope="module")
def report():
    return explain(accumulate, (numba.float64[::1], numba.float64))


def test_header(report):
    text = str(report)
    first = text.splitlines()[0]
    assert first.startswith("accumulate(array(float64, 1d, C), float64) -> float64  (")
    assert f"test_explain.py:{FIRST})" in first
    assert "reverse-mode activity: x duplicated, c active; result active" in text


def test_arguments(report):
    assert _row(report, "(x.data)").split()[2:] == ["duplicated", "{[-1]:Pointer,",
                                                    "[-1,-1]:Float@double}"]
    assert _row(report, "(c)").split()[2:] == ["active", "{[-1]:Float@double}"]
    assert _row(report, "  (x.shape[0])").split()[2:] == ["const", "{[-1]:Integer}"]


def test_instructions(report):
    fmuls = [ln.split() for ln in str(report).splitlines() if " = fmul double " in ln]
    assert len(fmuls) == 2
    for fields in fmuls:
        assert fields[-4:] == ["active", "line", str(BODY), "{[-1]:Float@double}"]
    fadd = _row(report, " = fadd double ").split()
    assert fadd[-4:] == ["active", "line", str(BODY), "{[-1]:Float@double}"]
    # the loop counter: an integer phi and its increment, constant
    counter = [ln.split() for ln in str(report).splitlines() if " = phi i64 " in ln]
    assert counter and all(f[-2:] == ["const", "{[-1]:Integer}"] for f in counter)
    step = _row(report, " = add nuw nsw i64 ").split()
    assert step[-4:] == ["const", "line", str(LOOP), "{[-1]:Integer}"]
    # the accumulator's phi is active; a store of an active value is active (no tree: void)
    assert _row(report, " = phi double [ %").split()[-2:] == ["active", "{[-1]:Float@double}"]
    assert _row(report, "store double").split()[-3:] == ["active", "line", str(RETURN)]
    assert _row(report, "ret i32 0").split()[-3:] == ["const", "line", str(RETURN)]


def test_rows_and_source(report):
    by_opcode = {r.inst.opcode: r for r in report.rows}
    assert by_opcode["load"].activity == "active" and by_opcode["load"].line == BODY
    assert str(by_opcode["load"].tree) == "{[-1]:Float@double}"
    assert report.source[BODY].strip() == "s += c * x[i] * x[i]"
    assert f"{BODY:>6}          s += c * x[i] * x[i]" in str(report)


def test_const_argument_and_no_lines():
    report = explain(accumulate, (np.ones(3), 2.0), const=["c"], lines=False)
    assert "x duplicated, c const" in report.activities
    assert _row(report, "(c)").split()[2] == "const"
    assert all(r.line is None for r in report.rows)
    # c is constant now, but x[i] * x[i] still is active
    assert _row(report, " = fadd double ").split()[-2] == "active"
    with pytest.raises(ValueError, match="no argument named d"):
        explain(accumulate, (np.ones(3), 2.0), const=["d"])


def test_integer_arguments_and_inlined_calls():
    @numba.njit
    def helper(a, k):
        return np.cos(a) * k

    @numba.njit
    def outer(a, n):
        t = 0.0
        for k in range(n):
            t += helper(a * k, 2.0)
        return t

    report = explain(outer, (numba.float64, numba.int64))
    assert "a active, n const" in report.activities
    cos = next(r for r in report.rows if "@llvm.cos.f64" in r.text)
    # inlined from helper: the line is that of the call in outer
    first = outer.py_func.__code__.co_firstlineno
    assert cos.activity == "active" and cos.line == first + 4
    assert report.source[first + 4].strip() == "t += helper(a * k, 2.0)"


def test_parse_arg_types():
    assert parse_arg_types("float64[::1], int64") == (numba.float64[::1], numba.int64)
    assert parse_arg_types("float64") == (numba.float64,)
    assert parse_arg_types("float64(float64[:, ::1])") == (numba.float64[:, ::1],)
    assert parse_arg_types(" ") == ()


SOURCE = textwrap.dedent("""\
    import numba
    import numpy as np


    @numba.njit
    def f(x, c):
        s = 0.0
        for i in range(x.shape[0]):
            s += c * x[i] * x[i]
        return s


    def plain(a, b):
        return a * b + 1.0


    f(np.ones(3), 2.0)

    if __name__ == "__main__":
        raise SystemExit("the main block must not run")
    """)


def _run(tmp_path, *args):
    (tmp_path / "tmp_explain_target.py").write_text(SOURCE)
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "pyzyme", "explain", *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)


def test_cli_end_to_end(tmp_path):
    out = _run(tmp_path, "tmp_explain_target.py:f", "--args", "float64[:], float64")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("f(array(float64, 1d, A), float64) -> float64  (")
    fadd = next(ln for ln in text.splitlines() if " = fadd double " in ln).split()
    assert fadd[-4:] == ["active", "line", "9", "{[-1]:Float@double}"]
    assert "     9          s += c * x[i] * x[i]" in text


def test_cli_defaults_and_errors(tmp_path):
    # no --args: the signature the module compiled (f(np.ones(3), 2.0): a C array)
    out = _run(tmp_path, "tmp_explain_target.py:f")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("f(array(float64, 1d, C), float64) -> float64")
    out = _run(tmp_path, "tmp_explain_target.py:plain")
    assert out.returncode == 2 and "pass them, e.g. --args" in out.stderr
    out = _run(tmp_path, "tmp_explain_target.py:plain", "--args", "float64, float64",
               "--const", "b")
    assert out.returncode == 0, out.stderr
    assert "a active, b const; result active" in out.stdout
    assert "    14      return a * b + 1.0" in out.stdout
    out = _run(tmp_path, "tmp_explain_target.py:nothing")
    assert out.returncode == 2 and "defines no 'nothing'" in out.stderr


def test_cli_in_process(tmp_path, capsys):
    (tmp_path / "tmp_explain_inproc.py").write_text(SOURCE)
    assert main(["explain", f"{tmp_path}/tmp_explain_inproc.py:f", "--args", "(float64[::1], "
                 "float64)"]) == 0
    assert "reverse-mode activity: x duplicated, c active" in capsys.readouterr().out
    assert main(["explain", "no_colon.py"]) == 2
    assert main(["explain", f"{tmp_path}/missing.py:f"]) == 2
    assert main(["explain", f"{tmp_path}/tmp_explain_inproc.py:f", "--args", "flot64"]) == 2
    err = capsys.readouterr().err
    assert "expected FILE.py:FUNCTION" in err and "no such file" in err
    assert "cannot read --args 'flot64'" in err
