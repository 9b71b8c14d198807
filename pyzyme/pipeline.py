"""The one build sequence a derivative goes through, from generated IR to code a frontend calls.

1. **generate** under error context: the frontend's generator calls run inside
   ``error_context("differentiating", what)``, so every :class:`~pyzyme.PyzymeError` names the
   function and mode; the frontend may add to an :class:`~pyzyme.UnsupportedError` on its way
   out (Numba's frontend adds the Python line of the call);
2. **release inlining**: functions that capture kept ``noinline`` only so that the generators
   would see their calls (those with user rules) may be inlined by the final optimization;
   and the derivative's ``x ** n`` and ``x ** (n - 1)`` share one loop of squarings
   (:func:`pyzyme.transforms.int_power.pair`);
3. **internalize**: only the entry points stay visible outside the module, so LLVM may inline
   and delete everything else;
4. **side stacks**: entry points that reach a call cycle run on stacks of their own
   (:mod:`pyzyme.diff.side_stack`), and under ``Options.flush_subnormals`` they run with
   subnormal numbers flushed to zero (:mod:`pyzyme.diff.float_env`);
5. **print** the module: the text compiled, kept for reflection and the disk cache;
6. **compile** it (:func:`pyzyme.runtime.compile_module`);
7. **wrap** the compiled code for the frontend (Numba: ``@njit`` callables of the entries).

:func:`build` runs them all; :func:`generate` and :func:`finish` are its two halves, for a
builder that generates a module first and compiles it later (``hvp`` differentiates the reverse
module again before compiling it). The Numba builders (:mod:`pyzyme.frontends.numba.derive`)
go through here, and nothing else compiles a derivative for Numba.

The C path (:mod:`pyzyme.llvm`, and ``pyzyme opt``/``cc`` through
:mod:`pyzyme.frontends.c.lower`) does not call :func:`finish`: its derivatives are linked into
the user's program (:func:`pyzyme.frontends.ad_copy.link_into`), not compiled as a module of
their own, and so, step by step:

1. :mod:`pyzyme.llvm` generates through :func:`generate` (``"@f in reverse mode"``); the C
   lowering names the ``__enzyme_*`` call site instead (``in the call at: f.c:12
   (__enzyme_autodiff)``, which says the function and the mode), rewording the errors of that
   site on their way out, so its errors keep their one context;
2. release inlining releases nothing there: the C rule table (``c_rules``) answers no
   ``releases_inlining``; the functions its AD copy keeps as calls (inactive, registered,
   function-like, the C++ library's) stay calls in the linked program;
3. internalize is ``link_into``'s :func:`pyzyme.runtime.passes.strip_to`, on the LLVM module:
   every definition but the entries internal, global variables too (the AD copy holds copies
   of the program's, which must not clash with the originals), the unused ones deleted;
4. no side stacks: a side stack reports an overflow through Numba's status code with a Python
   error set (:class:`~pyzyme.RecursionDepthError`), a channel C callers do not have; a C
   derivative recurses on the caller's stack, as Enzyme's does;
5. the text printed is the AD copy, which ``link_into`` parses again;
6. the program with its derivatives is compiled by clang (``pyzyme cc``) or by
   :class:`pyzyme.runtime.standalone.Program` (:func:`pyzyme.llvm.compile`), not here;
7. nothing is wrapped for Numba.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyzyme import settings
from pyzyme.diff import float_env, side_stack
from pyzyme.progress import stage
from pyzyme.errors import UnsupportedError, error_context
from pyzyme.runtime import compile_module
from pyzyme.transforms import int_power

__all__ = ["Built", "build", "generate", "finish", "release_inlining", "internalize"]

T = TypeVar("T")


@dataclass(frozen=True)
class Built:
    """A compiled derivative module: its ``text`` as compiled (before LLVM optimizes it), the
    ``compiled`` module, and what the frontend's ``wrap`` made of it."""

    text: str
    compiled: Any
    wrapped: Any


def generate(make: Callable[[], T], what: str,
             on_error: Callable[[UnsupportedError], None] | None = None) -> T:
    """Step 1: ``make()`` (the generator calls) with every error naming ``what`` (``"f
    (file.py:3) in reverse mode"``); ``on_error`` may add to an UnsupportedError before it
    propagates."""
    try:
        with error_context("differentiating", what), stage("transform"):
            return make()
    except UnsupportedError as err:
        if on_error is not None:
            on_error(err)
        raise


def finish(module, entries: Iterable[str], *, rules, name: str,
           wrap: Callable[[Any], Any]) -> Built:
    """Steps 2 to 7 for ``module``, whose functions ``entries`` (by name) are its entry points:
    release inlining, internalize, side stacks (and subnormals flushed, where the options ask),
    print, compile (as ``name``), ``wrap``."""
    entries = set(entries)
    with stage("transform"):
        release_inlining(module, rules)
        int_power.pair(module)
        internalize(module, entries)
        side_stack.install(module, settings.current().recursion_stack)
        if settings.current().flush_subnormals:
            float_env.install(module, entries)
        text = str(module)
    compiled = compile_module(text, name=name)
    with stage("compile"):  # Numba compiles the wrapper, the derivative's machine code with it
        wrapped = wrap(compiled)
    return Built(text, compiled, wrapped)


def build(module, make: Callable[[], Iterable[str]], *, what: str, rules, name: str,
          wrap: Callable[[Any], Any],
          on_error: Callable[[UnsupportedError], None] | None = None) -> Built:
    """The whole sequence: ``make()`` generates into ``module`` and returns the names of its
    entry points (:func:`generate`), then :func:`finish`."""
    entries = generate(make, what, on_error)
    return finish(module, entries, rules=rules, name=name, wrap=wrap)


def internalize(module, entries: Iterable[str]) -> None:
    """Give the functions ``module`` defines internal linkage, but ``entries`` external."""
    entries = set(entries)
    for fn in module.functions:
        if not fn.is_declaration:
            fn.linkage = "external" if fn.name in entries else "internal"


def release_inlining(module, rules) -> None:
    """Let the final optimization inline the functions of ``module`` that the rule table says
    were kept ``noinline`` only so that the generators would see their calls (a table
    answering ``releases_inlining(name)``; others release nothing). LLVM keeps the attribute
    in a group shared with other functions, so such a function gets a copy of its group
    without it."""
    released = getattr(rules, "releases_inlining", None)
    if released is None:
        return
    groups = {}
    for k, (section, text) in enumerate(module.extra_lines):
        m = _GROUP.match(text) if section == "attributes" else None
        if m:
            groups[m.group(1)] = (k, m.group(2))
    copies: dict[str, str] = {}
    for fn in module.functions:
        if fn.is_declaration or not released(fn.name):
            continue
        words = [w for w in fn.suffix.split() if w != "noinline"]
        for i, w in enumerate(words):
            if w.startswith("#") and w[1:] in groups and "noinline" in groups[w[1:]][1].split():
                if w not in copies:
                    body = " ".join(a for a in groups[w[1:]][1].split() if a != "noinline")
                    copies[w] = ""
                    if body:  # an empty group is not valid IR: then no group at all
                        new = str(1 + max(int(g) for g in groups))
                        module.extra_lines.append(("attributes",
                                                   f"attributes #{new} = {{ {body} }}"))
                        groups[new] = (len(module.extra_lines) - 1, body)
                        copies[w] = f"#{new}"
                words[i] = copies[w]
        fn.suffix = " ".join(w for w in words if w)


_GROUP = re.compile(r"^attributes #(\d+) = \{ (.*) \}$")
