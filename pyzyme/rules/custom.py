"""Custom derivative rules for ``@njit`` functions: pyzyme's EnzymeRules.

A rule replaces pyzyme's own derivative of one function wherever the function is called, in
the differentiated function or in anything it calls:

``forward(f)``
    ``rule(config, x, dx, y, dy, ...) -> (primal, tangent)``: every argument of ``f`` is followed
    by its tangent (``None`` where the argument carries none at this call). With
    ``config.width > 1`` a tangent is a tuple of ``width`` tangents, and so is the returned one.
``augmented_primal(f)``
    ``rule(config, x, dx, y, dy, ...) -> (primal, shadow, tape)``: the forward sweep of reverse
    mode. ``shadow`` is the shadow of an array result (``None`` for a float result); ``tape`` is
    any value (a float, a tuple, an array, ``None``) that the reverse rule receives.
``reverse(f)``
    ``rule(config, dret, tape, x, dx, y, dy, ...) -> (dx_0, dy_0, ...)``: ``dret`` is the
    adjoint of a float result (``None`` otherwise); returns one entry per argument of ``f``, the
    derivative of each float argument (anything, ``None`` or ``0.0``, for the others; a lone
    float when ``f`` has one argument), and adds into the shadows of array arguments.
``inactive(f)``, ``inactive_noinline(f)``
    ``f`` never carries a derivative (logging, random numbers, counters): its calls are made,
    and nothing flows through them. ``inactive_noinline`` also keeps ``f`` from being inlined
    into the compiled derivative.

``config`` is a :class:`Config`: ``needs_primal`` (the caller uses the result),
``needs_shadow`` (the result carries a derivative), ``width`` (tangents per argument) and
``overwritten`` (per argument: its memory may be written between the two sweeps, so a reverse
rule that reads it must save what it needs in its tape). The rule functions are compiled with
Numba (plain functions are ``njit``-ed) and called natively from the derivative.

Registering a rule invalidates every derivative compiled before it (pyzyme's caches key on
:attr:`Registry.generation`); ``@njit`` code that already embeds a ``grad`` keeps the one it
was compiled with.

Examples
--------
>>> import numba, numpy as np
>>> from pyzyme import rules
>>> @numba.njit
... def softplus(x):
...     return np.log1p(np.exp(x))
>>> @rules.forward(softplus)
... def softplus_fwd(config, x, dx):
...     return softplus(x), dx / (1.0 + np.exp(-x))
>>> rules.REGISTRY.rules_of(softplus).forward is softplus_fwd
True
"""

from __future__ import annotations

import threading
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pyzyme.errors import PyzymeError

__all__ = ["Config", "FunctionRules", "Registry", "REGISTRY", "forward", "augmented_primal",
           "reverse", "inactive", "inactive_noinline", "checkpoint"]

Config = namedtuple("Config", "needs_primal needs_shadow width overwritten")
Config.__doc__ = """What a rule is asked to compute (EnzymeRules' ``config``).

``needs_primal``: the caller uses the result; ``needs_shadow``: the result carries a
derivative; ``width``: tangents per argument; ``overwritten``: per argument of the function,
whether its memory may be written before the reverse rule runs."""

RULE_KINDS = ("forward", "augmented_primal", "reverse")


@dataclass(frozen=True)
class FunctionRules:
    """The rules registered for one ``@njit`` function."""

    function: Any
    forward: Callable | None = None
    augmented_primal: Callable | None = None
    reverse: Callable | None = None
    inactive: bool = False
    noinline: bool = False
    checkpoint: bool = False   # recomputed in the reverse sweep instead of taped

    def __str__(self) -> str:
        name = getattr(getattr(self.function, "py_func", self.function), "__qualname__", "?")
        if self.checkpoint:
            return f"{name}: checkpointed"
        if self.inactive:
            return f"{name}: inactive{' (noinline)' if self.noinline else ''}"
        given = [k for k in RULE_KINDS if getattr(self, k) is not None]
        return f"{name}: {', '.join(given)}"


@dataclass
class Registry:
    """Every function with user rules, process-wide (as a Julia method table is).

    This is, with the capture hook's registry, the only mutable state pyzyme keeps for the
    process; the generators never read it: the API layer turns it into a rule table passed to
    them. ``generation`` counts registrations, so caches keyed on it drop stale derivatives.
    """

    by_function: dict = field(default_factory=dict)
    generation: int = 0
    # A leaf lock: held only to read or replace entries, never while taking another lock.
    lock: threading.Lock = field(default_factory=threading.Lock)

    def rules_of(self, f) -> FunctionRules | None:
        """The rules of ``f``, or None."""
        return self.by_function.get(f)

    def update(self, f, **changes) -> None:
        _require_dispatcher(f)
        with self.lock:
            old = self.by_function.get(f) or FunctionRules(f)
            new = replace(old, **changes)
            if new.inactive and any(getattr(new, k) is not None for k in RULE_KINDS):
                raise PyzymeError(f"{new} was marked inactive and given derivative rules; a "
                                  f"function is either inactive or has rules")
            self.by_function[f] = new
            self.generation += 1

    def functions(self) -> list:
        with self.lock:
            return list(self.by_function.values())

    def __str__(self) -> str:
        lines = [f"custom rules (generation {self.generation})"]
        lines += [f"  {r}" for r in self.functions()]
        return "\n".join(lines)


REGISTRY = Registry()


def _require_dispatcher(f) -> None:
    # A rule attaches to the function Numba calls; a plain Python function is never called from
    # nopython code, so a rule for it could never apply.
    if not (hasattr(f, "py_func") and hasattr(f, "overloads")):
        raise TypeError(f"rules attach to @numba.njit functions; {f!r} is not one (decorate it "
                        f"with @numba.njit first)")


def _rule_decorator(kind: str, f):
    _require_dispatcher(f)

    def register(rule: Callable) -> Callable:
        if not callable(rule):
            raise TypeError(f"a {kind} rule must be a function, got {rule!r}")
        REGISTRY.update(f, **{kind: rule})
        return rule

    return register


def forward(f) -> Callable[[Callable], Callable]:
    """Decorator: register the forward-mode rule of ``@njit`` function ``f``.

    The rule is ``rule(config, x, dx, ...) -> (primal, tangent)``; see the module docstring.
    """
    return _rule_decorator("forward", f)


def augmented_primal(f) -> Callable[[Callable], Callable]:
    """Decorator: register the augmented forward pass of ``f``'s reverse-mode rule.

    The rule is ``rule(config, x, dx, ...) -> (primal, shadow, tape)``.
    """
    return _rule_decorator("augmented_primal", f)


def reverse(f) -> Callable[[Callable], Callable]:
    """Decorator: register the reverse pass of ``f``'s reverse-mode rule.

    The rule is ``rule(config, dret, tape, x, dx, ...) -> (derivative per argument)``.
    """
    return _rule_decorator("reverse", f)


def inactive(f):
    """Mark ``@njit`` function ``f`` as never carrying a derivative; returns ``f``."""
    REGISTRY.update(f, inactive=True)
    return f


def inactive_noinline(f):
    """As :func:`inactive`, and ``f`` is never inlined into the derivative; returns ``f``."""
    REGISTRY.update(f, inactive=True, noinline=True)
    return f


def checkpoint(f):
    """Mark ``@njit`` function ``f`` so that reverse mode recomputes each call of it in the
    reverse sweep instead of taping what the call computes (as ``jax.checkpoint``): the
    derivative keeps a snapshot of the memory the call writes (and reads, where later code
    changes it) and the call's inputs, runs the call untaped in the forward sweep, and runs
    its forward and reverse passes together in the reverse sweep. Returns ``f``."""
    REGISTRY.update(f, checkpoint=True)
    return f
