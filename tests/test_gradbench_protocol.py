"""GradBench's tool protocol (``python -m pyzyme.gradbench``): what an eval sends, what the
tool must answer (one JSON object per line, the message's id, outputs and per-run timings)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from pyzyme.gradbench.protocol import Function, Session, to_json


def _ask(session, **message):
    return session.answer({"id": 7, **message})


def test_tool_process_answers_each_line():
    messages = [
        {"id": 0, "kind": "start", "eval": "hello"},
        {"id": 1, "kind": "define", "module": "hello"},
        {"id": 2, "kind": "evaluate", "module": "hello", "function": "square", "input": 1.5},
        {"id": 3, "kind": "evaluate", "module": "hello", "function": "double", "input": 2.25},
        {"id": 4, "kind": "analysis", "of": 3, "valid": True},
    ]
    text = "".join(json.dumps(m) + "\n" for m in messages)
    out = subprocess.run([sys.executable, "-m", "pyzyme.gradbench"], input=text,
                         capture_output=True, text=True, timeout=300, check=True)
    answers = [json.loads(line) for line in out.stdout.splitlines()]
    assert [a["id"] for a in answers] == [0, 1, 2, 3, 4]
    assert answers[0]["tool"] == "pyzyme" and answers[1]["success"]
    assert answers[2]["output"] == 2.25 and answers[3]["output"] == 4.5
    assert answers[4] == {"id": 4}


def test_runs_meet_min_runs_and_warm_up_first():
    session = Session()
    assert _ask(session, kind="define", module="hello")["success"]
    fn = session.modules["hello"]["double"]
    calls = []
    session.modules["hello"] = {"double": Function(lambda i: i["x"], lambda x: calls.append(x)
                                                   or fn.run(x), float)}
    out = _ask(session, kind="evaluate", module="hello", function="double",
               input={"x": 3.0, "min_runs": 4, "min_seconds": 0})
    names = [t["name"] for t in out["timings"]]
    assert names == ["warmup"] + ["evaluate"] * 4 and len(calls) == 5
    assert out["output"] == 6.0


def test_failures_are_answers_not_crashes():
    session = Session()
    assert not _ask(session, kind="define", module="nonesuch")["success"]
    assert not _ask(session, kind="evaluate", module="hello", function="double",
                    input=1.0)["success"]          # not defined yet
    session.modules["m"] = {
        "boom": Function(float, lambda x: 1.0 / 0.0, float),
        "inf": Function(float, lambda x: np.array([x, np.inf]), to_json),
    }
    boom = _ask(session, kind="evaluate", module="m", function="boom", input=1.0)
    assert not boom["success"] and "ZeroDivisionError" in boom["error"]
    inf = _ask(session, kind="evaluate", module="m", function="inf", input=1.0)
    assert not inf["success"] and "non-finite" in inf["error"]
    assert _ask(session, kind="something-new") == {"id": 7}


@pytest.mark.parametrize("value, expected", [
    (np.arange(3.0), [0.0, 1.0, 2.0]),
    ({"a": np.float64(2.0), "b": (np.int64(1), [np.ones(1)])}, {"a": 2.0, "b": [1, [[1.0]]]}),
])
def test_to_json(value, expected):
    assert to_json(value) == expected
    json.dumps(to_json(value))
