"""The command line: ``python -m pyzyme demo`` shows a gradient, checked, timed and used; the
files ``opt``, ``cc``, ``run`` and ``explain`` read (bitcode, or what they refuse by name);
``--help`` and ``--version``."""

import ctypes
import io
import struct
import subprocess
import sys

import pytest

from pyzyme.cli import demo, main


def test_demo_fits_one_screen(tmp_path):
    """``pyzyme demo``: the user's code and the grad call, the gradient next to central
    differences (checked here against differences of our own), the times, and the plot it
    writes, in at most 40 lines."""
    import re

    import numpy as np

    from pyzyme import _png
    from pyzyme.demo import loss

    out = io.StringIO()
    plot = tmp_path / "fit.png"
    assert demo(out, str(plot)) == 0
    text = out.getvalue()
    lines = text.splitlines()
    assert len(lines) <= 40, text
    assert "    @numba.njit" in lines
    assert any(ln.startswith("    def loss(p, t, y):") for ln in lines)
    assert any(ln.startswith("    grad_loss = pyzyme.grad(loss)") for ln in lines)

    def numbers(prefix):
        line = next(ln for ln in lines if ln.startswith(prefix))
        inside = line.split("[", 1)[1].split("]", 1)[0]
        return np.array([float(v) for v in inside.split(",")])
    g, fd = numbers("    pyzyme.grad  "), numbers("    central differences  [")
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 10.0, 400)
    y = np.exp(-0.3 * t) * np.cos(2.0 * t) + 0.05 * rng.standard_normal(t.size)
    p, h = np.array([0.6, 0.1, 1.7]), 1e-6
    ours = [(loss(p + h * e, t, y) - loss(p - h * e, t, y)) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(g, ours, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(fd, ours, rtol=1e-9, atol=1e-12)
    for prefix in ("    loss(p, t, y)  ", "    grad_loss(p, t, y)  ", "    central differences  ",
                   "    first call of grad_loss  "):
        assert any(re.match(re.escape(prefix) + r" *[\d.]+ (us|ms|s)\b", ln) for ln in lines), \
            prefix
    fitted = numbers("    fit(p, t, y, ")
    np.testing.assert_allclose(fitted, [1.0, 0.3, 2.0], atol=0.03)
    assert f"{plot}" in text
    width, height, pixels = _png.read(str(plot))
    assert (width, height) == (640, 360)
    colours = {c for row in pixels for c in row}
    assert {_png.RED, _png.BLUE, _png.GREY} <= colours


def test_demo_command_line(tmp_path, capsys):
    """``pyzyme demo --plot PATH``, as ``make demo`` runs it (``python -m pyzyme demo``)."""
    assert main(["demo", "--plot", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "grad_loss = pyzyme.grad(loss)" in capsys.readouterr().out


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


def test_version(capsys):
    import llvmlite
    import numba

    import pyzyme

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == (
        f"pyzyme {pyzyme.__version__} (numba {numba.__version__}, llvmlite "
        f"{llvmlite.__version__}, Python {sys.version.split()[0]})")


@pytest.mark.parametrize("argv", [["--help"], ["explain", "--help"], ["opt", "--help"],
                                  ["demo", "--help"], ["cc", "--help"], ["run", "--help"]])
def test_help_reads_as_plain_text(argv, capsys):
    """No reStructuredText markup, and each paragraph of prose ends a sentence (a description
    cut at its first line ended with a comma)."""
    import re

    try:
        assert main(argv) == 0
    except SystemExit as e:
        assert e.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: pyzyme")
    for markup in ("``", ":mod:", ":func:", ":class:", "\n.. "):
        assert markup not in text, (markup, text)
    prose = [p for p in text.split("\n\n")[1:]
             if not p.startswith(("usage", "positional", "options", "arguments", "examples",
                                  "example", "  "))]
    assert prose, text
    for paragraph in prose:
        assert re.search(r"[.)]$", paragraph.strip()), paragraph


def test_cc_help_explains_its_options(capsys):
    assert main(["cc", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("-o OUTPUT", "-O0 ... -O3", "-shared", "-Wl,", "-I DIR", "FILE..."):
        assert option in text, option
    assert "pip install 'pyzyme[c]'" in text
    assert main(["cc"]) == 2
    assert "pyzyme cc --help" in capsys.readouterr().err
