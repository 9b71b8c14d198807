"""Enzyme's C++ interface: the C++ programs of ``tests/corpus/enzyme_c``, each built by
``pyzyme cc`` at two of the levels -O0 to -O3 (test_enzyme_c.levels) into an executable (the C++ runtime is not in this process) and run;
each checks its derivatives against analytic ones and returns the number of mismatches.

A file of its own (the C programs are in test_enzyme_c.py) so that the suite's shards build the
two halves of the corpus at the same time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyzyme.frontends.c.clang import ziglang_available
from tests.test_enzyme_c import levels

pytestmark = pytest.mark.skipif(not ziglang_available(), reason="needs the 'ziglang' package")

PROGRAMS = Path(__file__).resolve().parent / "corpus" / "enzyme_c"
CXX_PROGRAMS = sorted(p.name for p in PROGRAMS.glob("*.cpp"))


@pytest.mark.parametrize("name, opt", levels(CXX_PROGRAMS))
def test_cxx_program(tmp_path, name, opt):
    exe = tmp_path / "program"
    # A program may ask for compiler flags on a line "// flags: -fno-exceptions".
    flags = next((line.split(":", 1)[1].split() for line in
                  (PROGRAMS / name).read_text().splitlines() if line.startswith("// flags:")), [])
    build = subprocess.run([sys.executable, "-m", "pyzyme", "cc", str(PROGRAMS / name), opt,
                            *flags, "-o", str(exe)], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    proc = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
