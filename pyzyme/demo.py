"""``pyzyme demo`` (``make demo``): one screen that shows what pyzyme is for.

A user's ``@njit`` loss (the misfit of a damped oscillation to noisy data) is differentiated by
``pyzyme.grad``; the gradient is printed beside central differences, its time beside the
loss's and the differences', the first call's compile time with its stages (the ``pyzyme``
logger, :mod:`pyzyme.progress`); then ``@njit`` code calling the gradient fits the
oscillation's parameters by gradient descent (Adam) and a PNG plot of the data, the first guess
and the fit is written (:mod:`pyzyme._png`: no plotting library needed). The code shown is
this module's own source, so what is printed is what ran.
"""

from __future__ import annotations

import inspect
import logging
import os
import textwrap
import time

import numba
import numpy as np

import pyzyme
from pyzyme import _png, progress

__all__ = ["loss", "fit", "run"]


@numba.njit
def loss(p, t, y):   # mean squared misfit of p[0] * exp(-p[1] t) * cos(p[2] t) to (t, y)
    s = 0.0
    for i in range(t.shape[0]):
        r = p[0] * np.exp(-p[1] * t[i]) * np.cos(p[2] * t[i]) - y[i]
        s += r * r
    return s / t.shape[0]


grad_loss = pyzyme.grad(loss)      # d loss / d p, one reverse sweep; callable in @njit code


@numba.njit
def fit(p, t, y, steps, rate):     # gradient descent (Adam) on p
    m, v = np.zeros_like(p), np.zeros_like(p)
    for k in range(1, steps + 1):
        g = grad_loss(p, t, y)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        p = p - rate * (m / (1 - 0.9 ** k)) / (np.sqrt(v / (1 - 0.999 ** k)) + 1e-8)
    return p


#: The data's parameters, the first guess, and the fit's settings.
TRUE_P = np.array([1.0, 0.3, 2.0])
START_P = np.array([0.6, 0.1, 1.7])
STEPS, RATE, NOISE = 3000, 0.01, 0.05


def run(out, plot_path: str = "pyzyme-demo.png") -> int:
    """Print the demo to ``out`` and write its plot to ``plot_path``; returns 0."""
    def say(text: str = "") -> None:
        print(text, file=out)

    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 10.0, 400)
    y = TRUE_P[0] * np.exp(-TRUE_P[1] * t) * np.cos(TRUE_P[2] * t)
    y = y + NOISE * rng.standard_normal(t.size)
    p = START_P.copy()

    say("pyzyme demo: the gradient of ordinary Numba code, checked, timed and used")
    say()
    say("Your code (pyzyme/demo.py):")
    say(textwrap.indent(_source("loss") + "\n\n" + _source("grad_loss"), "    "))
    say(f"    g = grad_loss(p, t, y)             # p = {_vec(p, 1)}; {t.size} points (t, y)")

    began = time.perf_counter()
    with _stage_summary() as summary:
        g = grad_loss(p, t, y)
    first = time.perf_counter() - began
    fd = _central_differences(p, t, y)
    say()
    say("The gradient, and central differences (h = 1e-6) to check it:")
    say(f"    pyzyme.grad          {_vec(g, 10)}")
    say(f"    central differences  {_vec(fd, 10)}   relative difference "
        f"{np.max(np.abs(g - fd)) / np.max(np.abs(g)):.0e}")

    primal = _per_call(loss, p, t, y)
    gradient = _per_call(grad_loss, p, t, y)
    differences = _per_call(_central_differences, p, t, y)
    say()
    say("Time per call:")
    say(f"    loss(p, t, y)            {_time(primal):>9}")
    say(f"    grad_loss(p, t, y)       {_time(gradient):>9}   {gradient / primal:4.1f} x loss")
    say(f"    central differences      {_time(differences):>9}   "
        f"{differences / primal:4.1f} x loss ({2 * p.size} calls of loss)")
    say(f"    first call of grad_loss  {_time(first):>9}   (compiles the derivative:)")
    say(f"        {summary[0]}")

    say()
    say("Fitting p to the data by gradient descent, in @njit code that calls grad_loss:")
    say(textwrap.indent(_source("fit"), "    "))
    began = time.perf_counter()
    fit(p, t, y, 1, RATE)          # compiled here, so that the time below is the fit's alone
    compiled = time.perf_counter() - began
    began = time.perf_counter()
    fitted = fit(p, t, y, STEPS, RATE)
    took = time.perf_counter() - began
    say(f"    fit(p, t, y, {STEPS}, {RATE}) -> {_vec(fitted, 4)}: {STEPS} gradients in "
        f"{_time(took)} (compiled in {_time(compiled)})")
    say(f"    loss {loss(p, t, y):.4f} at the start, {loss(fitted, t, y):.4f} fitted "
        f"(the noise alone: {NOISE ** 2:.4f}); true p = {_vec(TRUE_P, 1)}")

    _plot(plot_path, t, y, [(START_P, _png.GREY), (fitted, _png.RED)])
    say()
    say(f"Plot (data in blue, the first guess in grey, the fit in red): "
        f"{os.path.abspath(plot_path)}")
    say("More: README.md (forward and reverse modes, Jacobians, Hessians, C and C++ through "
        "pyzyme cc).")
    return 0


def _source(name: str) -> str:
    """The source of this module's top-level ``name``: a function with its decorator, or the
    one line that assigns it."""
    obj = globals()[name]
    if hasattr(obj, "py_func"):
        return inspect.getsource(obj.py_func).rstrip()
    lines = inspect.getsource(inspect.getmodule(run)).splitlines()
    return next(ln for ln in lines if ln.startswith(f"{name} = "))


def _central_differences(p, t, y, h: float = 1e-6):
    """d loss / d p by central differences: two calls of ``loss`` per parameter."""
    g = np.empty_like(p)
    for j in range(p.size):
        e = np.zeros_like(p)
        e[j] = h
        g[j] = (loss(p + e, t, y) - loss(p - e, t, y)) / (2 * h)
    return g


def _per_call(fn, *args) -> float:
    """Seconds per call of ``fn(*args)``: the best of five rounds of about 20 ms each."""
    number, best = 1, float("inf")
    while True:
        began = time.perf_counter()
        for _ in range(number):
            fn(*args)
        elapsed = time.perf_counter() - began
        if elapsed >= 0.02:
            break
        number *= 4 if elapsed < 0.005 else 2
    for _ in range(4):
        began = time.perf_counter()
        for _ in range(number):
            fn(*args)
        best = min(best, time.perf_counter() - began)
    return min(best, elapsed) / number


class _stage_summary:
    """A context that catches the ``pyzyme`` logger's build summaries (INFO) while it runs:
    ``summary[0]`` is the stages of the first build it saw."""

    def __enter__(self):
        self.summary = ["not compiled (already built in this process)"]
        self.handler = _Catch(self.summary)
        self.level = progress.logger.level
        progress.logger.addHandler(self.handler)
        progress.logger.setLevel(logging.INFO)
        return self.summary

    def __exit__(self, *exc) -> None:
        progress.logger.removeHandler(self.handler)
        progress.logger.setLevel(self.level)


class _Catch(logging.Handler):
    def __init__(self, summary: list) -> None:
        super().__init__(logging.INFO)
        self.summary, self.seen = summary, False

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not self.seen and message.startswith("built ") and " in " in message:
            self.seen = True
            stages = message.rsplit(" in ", 1)[1]
            self.summary[0] = stages[stages.find("(") + 1:].rstrip(")") or stages


def _vec(v, digits: int) -> str:
    return "[" + ", ".join(f"{x:.{digits}f}" for x in v) + "]"


def _time(seconds: float) -> str:
    """``"1.24 s"``, ``"56.6 ms"`` or ``"19.8 us"``."""
    if seconds >= 0.1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} us"


def _plot(path: str, t, y, curves) -> None:
    """The data as dots and each ``(p, colour)`` of ``curves`` as a line, in a PNG."""
    image = _png.Canvas(640, 360, (t.min(), t.max()), (y.min() - 0.1, y.max() + 0.1),
                        margin=10)
    for ti, yi in zip(t, y):
        image.dot(ti, yi, _png.BLUE)
    fine = np.linspace(t.min(), t.max(), 1200)
    for p, colour in curves:
        image.line(fine, p[0] * np.exp(-p[1] * fine) * np.cos(p[2] * fine), colour)
    image.save(path)
