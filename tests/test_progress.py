"""Feedback while compiling: the ``pyzyme`` logger's stage timings, ``set_verbose`` and
``PYZYME_VERBOSE``, and the one-line notice on stderr when a first call is slow."""

import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np
import pytest

import pyzyme
from pyzyme import progress

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def quiet():
    """Back to the defaults (not verbose, notice after 2 s) after the test."""
    yield
    pyzyme.set_verbose(False)


def _fresh_function():
    """A new @njit function each call, so that its derivative is built in the test."""
    @numba.njit
    def springs(u, c):
        e = 0.0
        for i in range(u.shape[0] - 1):
            d = u[i + 1] - u[i]
            e += c * d * d + np.cos(u[i])
        return e
    return springs


def test_build_logs_each_stage(caplog, quiet):
    f = _fresh_function()
    u = np.linspace(0.0, 1.0, 6)
    with caplog.at_level(logging.INFO, logger="pyzyme"):
        began = time.perf_counter()
        g = pyzyme.grad(f)(u, 3.0)
        wall = time.perf_counter() - began
    h = 1e-6
    fd = [(f(u + h * e, 3.0) - f(u - h * e, 3.0)) / (2 * h) for e in np.eye(u.size)]
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    built = [r.getMessage() for r in caplog.records
             if r.name == "pyzyme" and r.getMessage().startswith("built ")]
    assert len(built) == 1, built
    line = built[0]
    assert ".springs (" in line and "test_progress.py:" in line
    m = re.search(r" in ([\d.]+) (ms|s) \((.*)\)$", line)
    assert m, line

    def secs(value, unit):
        return float(value) * (1e-3 if unit == "ms" else 1.0)
    total = secs(m.group(1), m.group(2))
    seconds = {}
    for part in m.group(3).split(", "):
        name, value, unit = part.rsplit(" ", 2)
        seconds[name] = secs(value, unit)
    for stage in ("capture", "analyses", "transform", "LLVM optimization", "compile"):
        assert stage in seconds, line
    assert 0 < total <= wall + 0.01
    # each figure rounded to 1 ms or 10 ms: the stages add up to the total within that
    assert sum(seconds.values()) == pytest.approx(total, abs=0.05)


def test_stages_count_each_second_once():
    """A stage inside another counts in the inner one only: the two add up to the outer
    block's time, however long the sleeps take on a loaded machine."""
    with progress.build("a test build") as record:
        began = time.perf_counter()
        with progress.stage("transform"):
            time.sleep(0.02)
            with progress.stage("analyses"):
                time.sleep(0.03)
        outer = time.perf_counter() - began
    assert record.stages["analyses"] >= 0.03 and record.stages["transform"] >= 0.02
    assert record.stages["transform"] + record.stages["analyses"] == pytest.approx(outer,
                                                                                   abs=2e-3)
    assert record.stages["transform"] < outer - 0.03


def test_set_verbose_prints_to_stderr(capsys, quiet):
    pyzyme.set_verbose(True)
    f = _fresh_function()
    pyzyme.grad(f)(np.linspace(0.0, 1.0, 4), 2.0)
    err = capsys.readouterr().err
    assert "pyzyme: building the reverse derivative of _fresh_function.<locals>.springs" in err
    assert re.search(r"pyzyme: built the reverse derivative of \S*springs .* in [\d.]+ m?s "
                     r"\(capture ", err), err
    pyzyme.set_verbose(False)
    pyzyme.grad(_fresh_function())(np.linspace(0.0, 1.0, 4), 2.0)
    assert "pyzyme: built" not in capsys.readouterr().err


def test_slow_first_call_notice(capsys, quiet):
    pyzyme.set_verbose(False, notice_after=0.0)   # every build counts as slow
    f = _fresh_function()
    pyzyme.grad(f)(np.linspace(0.0, 1.0, 4), 2.0)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("pyzyme: compiling")]
    assert len(lines) == 1, err
    assert re.fullmatch(r"pyzyme: compiling the reverse derivative of \S*springs \(.*\) for its "
                        r"first call \(later calls reuse it\) \.\.\. done in [\d.]+ m?s "
                        r"\(capture .*\)\.", lines[0]), lines[0]
    pyzyme.grad(f)(np.linspace(0.0, 1.0, 4), 2.0)   # built: no notice
    assert capsys.readouterr().err == ""


def test_notice_off(capsys, quiet):
    pyzyme.set_verbose(False, notice_after=None)
    pyzyme.grad(_fresh_function())(np.linspace(0.0, 1.0, 4), 2.0)
    assert capsys.readouterr().err == ""


def test_notice_if_slow(capsys, quiet, monkeypatch):
    pyzyme.set_verbose(False, notice_after=0.01)
    with progress.notice_if_slow("pyzyme cc: clang is compiling f.c"):
        time.sleep(0.2)
    assert re.fullmatch(r"pyzyme cc: clang is compiling f\.c \.\.\. done in [\d.]+ m?s\.\n",
                        capsys.readouterr().err)
    pyzyme.set_verbose(False, notice_after=30.0)
    with progress.notice_if_slow("pyzyme cc: quick"):
        pass
    assert capsys.readouterr().err == ""
    pyzyme.set_verbose(False, notice_after=0.01)
    monkeypatch.setenv("PYZYME_NOTICE", "0")
    with progress.notice_if_slow("pyzyme cc: clang is compiling f.c"):
        time.sleep(0.05)
    assert capsys.readouterr().err == ""


def test_set_verbose_rejects_negative_threshold():
    with pytest.raises(ValueError, match="notice_after"):
        pyzyme.set_verbose(True, notice_after=-1)


def test_pyzyme_verbose_environment_variable():
    code = ("import logging, pyzyme; "
            "print(logging.getLogger('pyzyme').getEffectiveLevel() == logging.DEBUG)")
    for value, expected in (("1", "True"), ("0", "False")):
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env={"PYZYME_VERBOSE": value,
                                                           "PATH": "/usr/bin:/bin"})
        assert proc.stdout.strip() == expected, proc.stderr
