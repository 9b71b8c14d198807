"""The command line: ``python -m pyzyme demo`` shows a captured function's IR and its round trip;
the files ``opt``, ``cc``, ``run`` and ``explain`` read (bitcode, or what they refuse by name)."""

import ctypes
import io
import struct
import subprocess
import sys

import pytest

from pyzyme.cli import demo, main


def test_demo_shows_ir_and_round_trip():
    out = io.StringIO()
    assert demo(out) == 0
    text = out.getvalue()
    assert "define noundef range(i32 0, 2) i32 @" in text or "define noundef i32 @" in text
    assert text.count("fixed point: True") == 2
    assert "LLVM verifies the printed module" in text
    assert "arg 1 v: array(float64, 1d, C) [array]" in text
    assert "taylor_exp(1.5, 20) = 4.48168907033806" in text


def test_demo_shows_a_forward_derivative():
    out = io.StringIO()
    demo(out)
    text = out.getvalue()
    assert "== forward mode" in text
    line = next(ln for ln in text.splitlines() if "d/dx taylor_exp(x, 20) at x = 1.5:" in ln)
    assert abs(float(line.rsplit(":", 1)[1]) - 4.481689070338) < 1e-9
    assert "define i32 @__pyzyme_fwd_" in text
    assert "%\".148'\" = fdiv double %\"arg.x'\"" in text or "fdiv double %\"arg.x'\"" in text


# -- files the subcommands read: bitcode, and what is neither bitcode nor IR text ----------------
CUBE = """
double cube(double x) { return x * x * x; }
double __enzyme_autodiff(void *, ...);
double dcube(double x) { return __enzyme_autodiff((void *)cube, x); }
int main(void) { return (int)dcube(2.0); }
"""


@pytest.fixture(scope="module")
def cube_ir(tmp_path_factory):
    """``CUBE`` as bitcode (``clang -c -emit-llvm``) and as IR text (``-S``), by ziglang's
    clang."""
    from pyzyme.frontends.c.driver import AD_FLAGS
    from pyzyme.frontends.c.clang import ziglang_available

    if not ziglang_available():
        pytest.skip("needs the 'ziglang' package")
    folder = tmp_path_factory.mktemp("cube")
    (folder / "cube.c").write_text(CUBE)
    out = {}
    for kind, flag in (("bc", "-c"), ("ll", "-S")):
        out[kind] = folder / f"cube.{kind}"
        proc = subprocess.run([sys.executable, "-m", "ziglang", "cc", "-O2", *AD_FLAGS, flag,
                               "-emit-llvm", "cube.c", "-o", out[kind].name], cwd=folder,
                              capture_output=True, text=True, check=False, timeout=300)
        assert proc.returncode == 0, proc.stderr
    assert out["bc"].read_bytes()[:4] == b"BC\xc0\xde"
    return out


def _dcube(path) -> float:
    """``dcube(2.0)`` of the module ``pyzyme opt`` wrote to ``path``, JIT-compiled."""
    from pyzyme.runtime.standalone import Program

    text = path.read_text()
    assert "__enzyme_autodiff" not in text
    return Program(text, name=str(path)).function("dcube", ctypes.c_double,
                                                  [ctypes.c_double])(2.0)


def test_opt_reads_bitcode(cube_ir, tmp_path, capsys):
    from_bc, from_ll = tmp_path / "from_bc.ll", tmp_path / "from_ll.ll"
    assert main(["opt", str(cube_ir["bc"]), "-o", str(from_bc)]) == 0, capsys.readouterr().err
    assert main(["opt", str(cube_ir["ll"]), "-o", str(from_ll)]) == 0, capsys.readouterr().err
    assert _dcube(from_bc) == _dcube(from_ll) == 12.0  # 3 x**2, exact
    # Bitcode inside the wrapper header Apple's tools write is bitcode too.
    bc = cube_ir["bc"].read_bytes()
    wrapped = tmp_path / "wrapped.bc"
    wrapped.write_bytes(struct.pack("<5I", 0x0B17C0DE, 0, 20, len(bc), 0x01000007) + bc)
    assert main(["opt", str(wrapped), "-o", str(tmp_path / "w.ll")]) == 0
    assert _dcube(tmp_path / "w.ll") == 12.0


def test_run_and_cc_read_bitcode(cube_ir, tmp_path):
    assert main(["run", str(cube_ir["bc"])]) == 12  # main returns (int)dcube(2.0)
    exe = tmp_path / "cube"
    assert main(["cc", str(cube_ir["bc"]), "-O2", "-o", str(exe)]) == 0
    assert subprocess.run([str(exe)], check=False, timeout=60).returncode == 12


@pytest.mark.parametrize("content, where, what", [
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\xa0", "1:11",
     "neither LLVM IR text nor LLVM bitcode (byte 0xa0 is not UTF-8"),
    (b"; text\n\n  \xc0\xde\x17\x0b", "3:3", "neither LLVM IR text nor LLVM bitcode"),
    (b"define i32 @f(i32 %x) {\n  %y = add i32 %x, 1\n  ret i64 %y\n}\n", "3:11",
     "'%y' defined with type 'i32' but expected 'i64'"),
    (b"define double @f(double %x) {\n  ret double %z\n}\n", "2:14",
     "use of undefined value '%z'"),
], ids=["binary", "binary on line 3", "wrong type", "undefined value"])
def test_opt_names_the_file_line_and_column(tmp_path, capsys, content, where, what):
    path = tmp_path / "input.ll"
    path.write_bytes(content)
    assert main(["opt", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"pyzyme opt: error: {path}:{where}: {what}"), err
    assert "<string>" not in err and "Traceback" not in err
    # the same report from pyzyme run and pyzyme cc, which read .ll files too
    assert main(["run", str(path)]) == 1
    assert f"{path}:{where}: {what}" in capsys.readouterr().err


def test_opt_refuses_malformed_bitcode_and_missing_files(tmp_path, capsys):
    bad = tmp_path / "bad.bc"
    bad.write_bytes(b"BC\xc0\xde" + bytes(range(40)))
    assert main(["opt", str(bad)]) == 1
    assert capsys.readouterr().err.startswith(f"pyzyme opt: error: {bad}: malformed LLVM "
                                              f"bitcode")
    assert main(["opt", str(tmp_path / "missing.bc")]) == 2
    assert f"no such file: {tmp_path / 'missing.bc'}" in capsys.readouterr().err
    assert main(["opt", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.ll")]) == 1
    assert f"no such file: {tmp_path / 'missing.ll'}" in capsys.readouterr().err


@pytest.mark.parametrize("source, where, what", [
    ("def f(x):\n    return x *\n", ":2:15", "invalid syntax"),
    ("import math\n\nmath.sqrt(-1.0)\n", ":3:1", "ValueError: math domain error"),
    (b"\x00\xa0binary", ":1:", "source code"),
], ids=["syntax error", "raises on import", "binary"])
def test_explain_names_the_file_line_and_column(tmp_path, capsys, source, where, what):
    path = tmp_path / "tmp_cli_target.py"
    (path.write_bytes if isinstance(source, bytes) else path.write_text)(source)
    assert main(["explain", f"{path}:f"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pyzyme explain: error: {path}{where}"), err
    assert what in err and "Traceback" not in err


def test_cc_without_ziglang_names_the_extra(tmp_path, monkeypatch, capsys):
    from pyzyme.frontends.c import clang

    monkeypatch.setattr(clang, "ziglang_available", lambda: False)
    (tmp_path / "square.c").write_text(CUBE)
    for command in ("cc", "run"):
        assert main([command, str(tmp_path / "square.c"), "-o", str(tmp_path / "sq")]) == 1
        err = capsys.readouterr().err
        assert f"pyzyme {command}: error:" in err and "ziglang is not installed" in err
        assert "pip install 'pyzyme[c]'" in err
    assert not (tmp_path / "sq").exists()


def test_cc_says_what_clang_is_doing_when_slow(tmp_path, capsys):
    """Past the notice threshold (0 s here: every run counts as slow), ``pyzyme cc`` says
    that clang is compiling, then linking, each line ended by its time."""
    import re

    import pyzyme
    from pyzyme.frontends.c.clang import ziglang_available

    if not ziglang_available():
        pytest.skip("needs the 'ziglang' package")
    (tmp_path / "cube.c").write_text(CUBE)
    pyzyme.set_verbose(False, notice_after=0.0)
    try:
        assert main(["cc", str(tmp_path / "cube.c"), "-O2", "-o", str(tmp_path / "cube")]) == 0
    finally:
        pyzyme.set_verbose(False)
    err = capsys.readouterr().err
    assert re.search(r"^pyzyme: clang is compiling cube\.c \(.*\) \.\.\. done in [\d.]+ m?s\.$",
                     err, re.M), err
    assert re.search(r"^pyzyme: clang is linking .*cube \(.*\) \.\.\. done in [\d.]+ m?s\.$",
                     err, re.M), err
    assert subprocess.run([str(tmp_path / "cube")], check=False).returncode == 12
