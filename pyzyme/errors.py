"""Every exception pyzyme raises, and the context they carry.

Errors name what was being done when they happened (the operation, the function, the
Python source line when there is one) and say what the user can do about it. Context is
attached on the way out by :func:`error_context`, so deep code raises plainly and the
layers above add what they know.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

#: Where pyzyme's documentation site is published (``make docs`` builds it into
#: docs/_build/html). Errors that a page explains end with ``see {DOCS_URL}/<page>#<anchor>``;
#: tests/test_docs_links.py checks that every such page and anchor exists in docs/.
DOCS_URL = "https://pyzyme.readthedocs.io/en/latest"


class PyzymeError(Exception):
    """Base class of every error pyzyme raises.

    ``context`` holds ``(what, detail)`` pairs added by :func:`error_context`, innermost first;
    ``docs``, when a page of the documentation explains the error, its place in the site
    (``"sharp-bits.html#temporary-storage"``), which the message ends with as a link.
    """

    def __init__(self, message: str, *, hint: str | None = None,
                 docs: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.docs = docs
        self.context: list[tuple[str, str]] = []

    @property
    def docs_url(self) -> str | None:
        """The address of the documentation that explains this error, if a page does."""
        return f"{DOCS_URL}/{self.docs}" if self.docs else None

    def __str__(self) -> str:
        lines = [self.message]
        lines += [f"  in {what}: {detail}" for what, detail in self.context]
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        if self.docs:
            lines.append(f"  see {self.docs_url}")
        return "\n".join(lines)


class ParseError(PyzymeError):
    """LLVM IR text that pyzyme cannot read, with the line, column and a caret excerpt."""

    def __init__(self, message: str, text: str, offset: int) -> None:
        line_no = text.count("\n", 0, offset) + 1
        start = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        end = len(text) if end < 0 else end
        self.line = line_no
        self.column = offset - start + 1
        source_line = text[start:end]
        self.excerpt = f"{source_line}\n{' ' * (offset - start)}^"
        super().__init__(f"line {self.line}, column {self.column}: {message}\n{self.excerpt}")


class VerifyError(PyzymeError):
    """A module that LLVM's verifier (or pyzyme's own checks) rejects."""


class IRTypeError(PyzymeError):
    """An instruction built with operands of the wrong types."""


class UnsupportedError(PyzymeError):
    """An operation, call or type that pyzyme has no derivative for."""


class ActivityError(PyzymeError):
    """An active value would be lost, e.g. stored into memory passed as ``Const``."""


class ArgumentTypeError(PyzymeError, TypeError):
    """An argument of the wrong kind for a pyzyme call (a string where a float array is
    differentiated, an annotation where a value is expected): a ``TypeError`` too, as Python
    users expect. The message names the argument (:func:`argument_name`)."""


class ArgumentValueError(PyzymeError, ValueError):
    """An argument of the right kind with a wrong value (a shadow whose shape differs from its
    primal's, an ``argnums`` out of range): a ``ValueError`` too. The message names the
    argument (:func:`argument_name`)."""


def argument_name(names, position: int) -> str:
    """How messages name argument ``position`` of a function whose parameters are ``names``
    (None when unknown).

    Examples
    --------
    >>> argument_name(["x", "y"], 1)
    "argument 'y' (position 1)"
    >>> argument_name(None, 2)
    'argument 2'
    """
    if names and 0 <= position < len(names):
        return f"argument {names[position]!r} (position {position})"
    return f"argument {position}"


class ArgumentName:
    """:func:`argument_name` worked out only when a message is written (``str`` or an
    f-string), so calls that raise nothing never look up the parameter names. ``names`` is
    a sequence of names, None, or a callable returning one of them."""

    __slots__ = ("_names", "_position")

    def __init__(self, names, position: int) -> None:
        self._names, self._position = names, position

    def __str__(self) -> str:
        names = self._names() if callable(self._names) else self._names
        return argument_name(names, self._position)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class RecursionDepthError(PyzymeError, RecursionError):
    """A derivative of a recursive function recursed deeper than the stack it runs on allows.

    Raised by the derivative's native code when it runs out of stack (instead of crashing the
    process); it names the function and the depth reached.
    """


class TapeBudgetError(PyzymeError, MemoryError):
    """A reverse-mode derivative built under ``tape_budget`` cannot keep within it: one
    iteration of a checkpointed loop needs more memory than the budget.

    Raised by the derivative's native code when it sees the sizes of the loop's state; it
    says how many bytes one iteration needs.
    """


class TypeAnalysisError(PyzymeError):
    """Type analysis found a conflict (a byte both float and integer) or cannot decide a type
    that differentiation needs."""


class RuleError(PyzymeError):
    """A user's derivative rule (``pyzyme.rules``) does not compile, or returns the wrong
    thing."""


class CaptureError(PyzymeError):
    """The IR of a function could not be captured from its frontend."""


class FrontendError(PyzymeError):
    """A frontend (the C/C++ compiler behind :mod:`pyzyme.frontends.c.clang`) produced no IR.

    ``stderr`` holds the compiler's diagnostics when there are any.
    """

    def __init__(self, message: str, *, hint: str | None = None, stderr: str = "") -> None:
        super().__init__(message, hint=hint)
        self.stderr = stderr


@contextlib.contextmanager
def error_context(what: str, detail: str | Callable[[], str]) -> Iterator[None]:
    """Add ``(what, detail)`` to any :class:`PyzymeError` passing through; a callable
    ``detail`` is called only then (a context entered once per instruction need not print
    every instruction).

    Examples
    --------
    >>> try:
    ...     with error_context("function", "@f"):
    ...         raise UnsupportedError("no rule for @g")
    ... except UnsupportedError as e:
    ...     print(e)
    no rule for @g
      in function: @f
    """
    try:
        yield
    except PyzymeError as err:
        err.context.append((what, detail() if callable(detail) else detail))
        raise
