"""Feedback while pyzyme compiles: stage timings on the ``pyzyme`` logger, and a one-line
notice on stderr when something a user waits for is slow.

A derivative's first call captures the function (Numba compiles it), runs the analyses,
writes the derivative (the transform), lets LLVM optimize it and generates machine code:
one to several seconds that would otherwise pass in silence. Each layer marks its part with
:func:`stage` (this module is below every layer, so any may); the API layer wraps a whole build
in :func:`build`, which adds up the stages (each second counted once, in the innermost stage
that was running) and logs one summary line. Nothing is printed unless asked:

- :func:`set_verbose` (``pyzyme.set_verbose(True)``, or ``PYZYME_VERBOSE=1`` in the
  environment) sends the ``pyzyme`` logger's records to stderr: each build as it starts
  (DEBUG) and its summary with the time of each stage when it ends (INFO); the logger is the
  standard library's ``logging.getLogger("pyzyme")``, so an application's own logging
  configuration works too;
- a build (or a tool run, :func:`notice_if_slow`) still running after ``notice_after`` seconds
  (2 by default) writes one line to stderr saying what it is doing, finished by its time when
  it ends; ``set_verbose(notice_after=None)`` or ``PYZYME_NOTICE=0`` turns this off.

Examples
--------
>>> with build("the reverse derivative of f") as record:
...     with stage("capture"):
...         pass
>>> sorted(record.stages)
['capture']
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["STAGES", "logger", "set_verbose", "stage", "timed", "build", "notice_if_slow",
           "Record"]

F = TypeVar("F", bound=Callable)

#: The stages of a derivative's build, in the order they run.
STAGES = ("capture", "analyses", "transform", "LLVM optimization", "compile")

logger = logging.getLogger("pyzyme")
logger.addHandler(logging.NullHandler())  # a library's records go nowhere until asked for


@dataclass
class _Settings:
    notice_after: float | None = 2.0
    handler: logging.Handler | None = None


_SETTINGS = _Settings()
_local = threading.local()  # per thread: the records of the builds running, innermost last


@dataclass
class Record:
    """One build: what it makes, its stages' seconds (exclusive: a stage inside another
    counts only in the inner one), and when it began."""

    what: str
    began: float = field(default_factory=time.perf_counter)
    stages: dict[str, float] = field(default_factory=dict)

    def summary(self, total: float) -> str:
        """``"1.23 s (capture 0.40 s, transform 30 ms, ...)"``: the stages in pipeline
        order, then the rest (nested builds, wrapping) when it is worth a mention."""
        order = [s for s in STAGES if s in self.stages]
        order += sorted(s for s in self.stages if s not in STAGES)
        parts = [f"{s} {_seconds(self.stages[s])}" for s in order]
        rest = total - sum(self.stages.values())
        if rest >= 0.01:
            parts.append(f"other {_seconds(rest)}")
        return _seconds(total) + (f" ({', '.join(parts)})" if parts else "")


def _seconds(t: float) -> str:
    """``"0.84 s"``, or ``"12 ms"`` below a tenth of a second."""
    return f"{t * 1e3:.0f} ms" if t < 0.1 else f"{t:.2f} s"


def set_verbose(verbose: bool = True, *, notice_after: float | None = 2.0) -> None:
    """Show what pyzyme is compiling, and how long each stage takes.

    Parameters
    ----------
    verbose
        True: the ``pyzyme`` logger's records go to stderr at DEBUG level, one line per stage
        of each derivative built (capture, analyses, transform, LLVM optimization, compile)
        and a summary per derivative. False: back to silence (the logger's level unset).
    notice_after
        Seconds after which a derivative still compiling (or ``pyzyme cc``'s clang still
        running) says so on stderr in one line; None turns that notice off.

    Examples
    --------
    >>> set_verbose(True)
    >>> logger.getEffectiveLevel() == logging.DEBUG
    True
    >>> set_verbose(False)
    """
    if notice_after is not None and notice_after < 0:
        raise ValueError(f"notice_after must be a number of seconds or None; got "
                         f"{notice_after!r}")
    _SETTINGS.notice_after = notice_after
    if verbose:
        if _SETTINGS.handler is None:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            _SETTINGS.handler = handler
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    else:
        if _SETTINGS.handler is not None:
            logger.removeHandler(_SETTINGS.handler)
            _SETTINGS.handler = None
        logger.setLevel(logging.NOTSET)


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage ``name`` of the build running in this thread (logged with the
    build's summary), or on its own at DEBUG level outside any build. Time spent in a stage
    nested inside it is the nested stage's only."""
    stack = _stack()
    frame = [name, 0.0]  # the stage, and the seconds of stages nested in it
    stack.append(frame)
    began = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - began
        stack.pop()
        own = elapsed - frame[1]
        for outer in reversed(stack):
            if isinstance(outer, Record):
                outer.stages[name] = outer.stages.get(name, 0.0) + own
                break
        if stack and not isinstance(stack[-1], Record):
            stack[-1][1] += elapsed
        if not any(isinstance(f, Record) for f in stack) and logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: %.3f s", name, elapsed)  # inside a build, its summary says it


def timed(name: str) -> Callable[[F], F]:
    """A decorator: each call of the function is stage ``name`` (see :func:`stage`)."""
    def decorate(function: F) -> F:
        @functools.wraps(function)
        def timed_call(*args, **kwargs):
            with stage(name):
                return function(*args, **kwargs)
        return timed_call  # type: ignore[return-value]
    return decorate


@contextlib.contextmanager
def build(what: str) -> Iterator[Record]:
    """A derivative's whole build (``what``: ``"the reverse derivative of f (f.py:3)"``): its
    stages added up and logged in one INFO line when it ends; if it is the outermost build and
    runs past the notice threshold, one line on stderr says what is being compiled."""
    stack = _stack()
    record = Record(what)
    outermost = not any(isinstance(f, Record) for f in stack)
    stack.append(record)
    logger.debug("building %s", what)
    notice = None
    if outermost and not logger.isEnabledFor(logging.INFO):  # verbose: the log says it
        notice = _Notice(f"pyzyme: compiling {what} for its first call (later calls reuse it)")
        notice.__enter__()
    failed = True
    try:
        yield record
        failed = False
    finally:
        stack.pop()
        total = time.perf_counter() - record.began
        if stack and not isinstance(stack[-1], Record):
            stack[-1][1] += total  # a build inside a stage of an outer build is not that stage
        summary = record.summary(total)
        if notice is not None:
            notice.detail = summary
            notice.__exit__(RuntimeError if failed else None, None, None)
        logger.info("%s %s in %s", "failed to build" if failed else "built", what, summary)


def notice_if_slow(what: str) -> contextlib.AbstractContextManager:
    """A context: if its block runs longer than the notice threshold, one line on stderr says
    ``what`` is going on (``"pyzyme cc: clang is compiling f.c"``), ended by the time taken."""
    return _Notice(what)


class _Notice:
    """A timer that writes ``message...`` to stderr once the threshold passes, and `` done in
    N s.`` on the same line when the block ends."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.detail: str | None = None
        self._shown = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __enter__(self):
        after = _notice_after()
        self._began = time.perf_counter()
        if after is not None:
            self._timer = threading.Timer(after, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _show(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._shown = True
                _write(f"{self.message} ...")

    def __exit__(self, *exc) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._shown:
                took = self.detail or _seconds(time.perf_counter() - self._began)
                _write(f" {'failed after' if exc[0] else 'done in'} {took}.\n")


def _write(text: str) -> None:
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr (pythonw), or it was closed
        pass


def _notice_after() -> float | None:
    if os.environ.get("PYZYME_NOTICE", "").strip() in ("0", "false", "off", "no"):
        return None
    return _SETTINGS.notice_after


if os.environ.get("PYZYME_VERBOSE", "").strip() not in ("", "0", "false", "off", "no"):
    set_verbose(True)
