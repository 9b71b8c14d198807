"""GradBench's tool protocol: one JSON message per line in, one answer per line out.

The eval sends ``start``, ``define`` (which eval), then ``evaluate`` messages (a function name
and its input) and ``analysis`` messages (its verdict on an output); each answer carries the
message's ``id``. An ``evaluate`` answer holds the output and one ``evaluate`` timing per run:
the function runs at least ``min_runs`` times and until the runs add up to ``min_seconds``.
Numba compiles on a function's first call, so that call runs first, untimed, and is reported
under the name ``warmup``, which GradBench's statistics leave out (as its Julia tools do).

Examples
--------
>>> import json
>>> session = Session()
>>> session.answer({"id": 0, "kind": "define", "module": "hello"})["success"]
True
>>> out = session.answer({"id": 1, "kind": "evaluate", "module": "hello", "function": "double",
...                       "input": 2.5})
>>> out["output"], [t["name"] for t in out["timings"]]
(5.0, ['warmup', 'evaluate'])
>>> session.answer({"id": 2, "kind": "define", "module": "no-such-eval"})["success"]
False
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyzyme.gradbench.evals import EVALS

__all__ = ["Function", "Session", "main", "to_json"]

TOOL = "pyzyme"


@dataclass(frozen=True)
class Function:
    """One function of an eval: how its JSON input becomes arguments (untimed), the timed
    call, and how its result becomes the JSON output (untimed)."""

    prepare: Callable[[Any], Any]
    run: Callable[..., Any]
    output: Callable[[Any], Any]
    #: whether ``prepare`` returns a tuple of arguments (False: a single one)
    spread: bool = False

    def arguments(self, input: Any) -> tuple:
        args = self.prepare(input)
        return tuple(args) if self.spread else (args,)

    def evaluate(self, input: Any) -> Any:
        """The JSON output for ``input``, untimed (tests and validation)."""
        return self.output(self.run(*self.arguments(input)))


def to_json(value: Any) -> Any:
    """``value`` with NumPy arrays and scalars turned into lists and Python numbers."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _runs(function: Function, args: tuple, min_runs: int, min_seconds: float):
    """The result of the last run and the timings: a ``warmup`` run, then ``evaluate`` runs."""
    start = time.perf_counter_ns()
    result = function.run(*args)
    timings = [{"name": "warmup", "nanoseconds": time.perf_counter_ns() - start}]
    total, count = 0, 0
    while count < min_runs or total < min_seconds * 1e9:
        start = time.perf_counter_ns()
        result = function.run(*args)
        elapsed = time.perf_counter_ns() - start
        timings.append({"name": "evaluate", "nanoseconds": elapsed})
        total += elapsed
        count += 1
    return result, timings


@dataclass
class Session:
    """What the tool knows between messages: the evals defined so far."""

    modules: dict = field(default_factory=dict)   # eval name -> its FUNCTIONS

    def answer(self, message: dict) -> dict:
        """The answer to one message of the eval."""
        kind = message.get("kind")
        ident = {"id": message.get("id")}
        if kind == "start":
            return {**ident, "tool": TOOL}
        if kind == "define":
            return {**ident, **self._define(message.get("module"))}
        if kind == "evaluate":
            return {**ident, **self._evaluate(message)}
        return ident

    def _define(self, module: str) -> dict:
        if module not in EVALS:
            return {"success": False, "error": f"pyzyme does not implement the {module!r} eval"}
        start = time.perf_counter_ns()
        self.modules[module] = importlib.import_module(EVALS[module]).FUNCTIONS
        return {"success": True,
                "timings": [{"name": "define", "nanoseconds": time.perf_counter_ns() - start}]}

    def _evaluate(self, message: dict) -> dict:
        functions = self.modules.get(message.get("module"))
        name = message.get("function")
        if functions is None or name not in functions:
            return {"success": False, "error": f"no function {name!r} in module "
                                               f"{message.get('module')!r}"}
        function, input = functions[name], message.get("input")
        runs = input if isinstance(input, dict) else {}
        try:
            args = function.arguments(input)
            result, timings = _runs(function, args, int(runs.get("min_runs", 1)),
                                    float(runs.get("min_seconds", 0.0)))
            output = to_json(function.output(result))
        except Exception as e:     # the eval goes on with its next input
            return {"success": False,
                    "error": "".join(traceback.format_exception_only(type(e), e)).strip()}
        if not _finite(output):
            return {"success": False, "error": f"{name} gave a non-finite number"}
        return {"success": True, "output": output, "timings": timings}


def serve(lines: Iterable[str], write: Callable[[str], None], session: Session | None = None
          ) -> None:
    """Answer each message in ``lines`` with one line through ``write``."""
    session = session or Session()
    for line in lines:
        if line.strip():
            write(json.dumps(session.answer(json.loads(line)), allow_nan=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    """The tool process: messages on stdin, answers on stdout."""
    parser = argparse.ArgumentParser(
        prog="python -m pyzyme.gradbench",
        description="pyzyme as a GradBench tool: answers an eval's messages on stdin.")
    parser.add_argument("--multithreaded", action="store_true",
                        help="let Numba use every core (default: one thread, as GradBench's "
                             "published figures)")
    options = parser.parse_args(argv)
    if not options.multithreaded:
        import numba
        numba.set_num_threads(1)

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    serve(sys.stdin, write)
    return 0
