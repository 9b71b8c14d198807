"""``python -m pyzyme demo`` runs and shows a captured function's IR and its round trip."""

import io

from pyzyme.cli import demo


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
