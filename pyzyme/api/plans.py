"""Compiled derivatives (plans), built once and kept: in memory, and on disk where Numba's
cache is.

Compiled derivatives are kept per (function, argument types, activities, mode, width, options)
in one process-wide :class:`DerivativeCache`, so the second call of a derivative costs what a call
of an ``@njit`` function costs. Reverse and forward derivatives of a function made with
``@njit(cache=True)`` are also kept on disk beside Numba's cache of it
(:mod:`pyzyme.runtime.disk_cache`, keyed as :mod:`pyzyme.frontends.numba.persist` explains), so
another process loads their object code instead of capturing, differentiating and compiling.

The builders (:mod:`pyzyme.frontends.numba.derive`) take the result's activity as an
:class:`~pyzyme.analysis.activity.Activity`; the keys here keep the annotation class the user
gave, as they always have (the disk key spells it by name).
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from typing import Any

from numba.core.compiler_lock import global_compiler_lock

from pyzyme import progress, settings
from pyzyme.analysis.activity import Activity
from pyzyme.api import annotations as A
from pyzyme.api.custom_rules import rule_table
from pyzyme.api.dispatchers import where
from pyzyme.frontends.numba import persist
from pyzyme.frontends.numba.derive.forward import build_forward
from pyzyme.frontends.numba.derive.hvp import build_hvp
from pyzyme.frontends.numba.derive.reverse import build_reverse, roles
from pyzyme.frontends.numba.derive.split import build_split
from pyzyme.rules import default_rules
from pyzyme.rules.custom import REGISTRY
from pyzyme.runtime.disk_cache import DiskCache
from pyzyme.runtime.jit import compile_key

__all__ = ["DerivativeCache", "CACHE", "current_rules", "forward_plan", "reverse_plan",
           "split_plan", "hvp_plan"]


class DerivativeCache:
    """Compiled derivatives by key; one instance serves the process (MCJIT keeps all code
    for the life of the process anyway, so there is nothing to evict).

    Every key gets the current :class:`~pyzyme.settings.Options` added, and the build runs with
    that snapshot pinned (:func:`pyzyme.settings.using`), so a derivative built under one
    setting of ``set_runtime_activity`` is never returned under the other.
    """

    def __init__(self) -> None:
        self._plans: dict[tuple, Any] = {}
        # Calls of plain arguments, ready to make: per (options, rules' generation), the calls
        # by key. ``_state`` is the last state looked up and its calls, one tuple so that
        # threads under different options replace it whole: a call from Python then hashes
        # neither the options nor the generation (half of what the lookup cost).
        self._calls: dict[tuple, dict] = {}
        self._state: tuple = (None, -1, {})
        self.disk = DiskCache()

    def _current_calls(self) -> dict:
        opts, generation = settings.current(), REGISTRY.generation
        state = self._state
        if state[0] is opts and state[1] == generation:
            return state[2]
        calls = self._calls.setdefault((opts, generation), {})
        self._state = (opts, generation, calls)
        return calls

    def call(self, key: tuple):
        """The call remembered under ``key`` (see :func:`pyzyme.autodiff`) for the current
        options and rules, or None."""
        state = self._state   # _current_calls, inline: this runs on every call from Python
        if state[0] is settings.current() and state[1] == REGISTRY.generation:
            return state[2].get(key)
        return self._current_calls().get(key)

    def remember_call(self, key: tuple, call) -> None:
        self._current_calls()[key] = call

    def get(self, key: tuple, build):
        # A derivative is stale once a rule is registered after it was built, and is another
        # derivative under other options (runtime activity).
        opts = settings.current()
        key = (*key, opts, REGISTRY.generation)
        plan = self._plans.get(key)
        if plan is None:
            # Builds are serialized by Numba's global compiler lock, not by a lock of
            # pyzyme's. Every build waits for Numba's lock (capture compiles the primal,
            # compile_module loads the derivative), and Numba holds it while it types a call
            # of jacfwd(f), or of grad(f) in @njit code, whose typer asks this cache for a
            # derivative: a lock of pyzyme's would be taken before Numba's by one thread and
            # after it by another, and both would wait for good. Building outside any lock
            # and keeping the first result would be no faster (a build holds Numba's lock for
            # most of its time). Numba's lock is reentrant, so a typer reached from inside a
            # build (a function calling grad(g) captured for its own derivative) goes on.
            with global_compiler_lock:
                plan = self._plans.get(key)
                if plan is None:
                    with settings.using(opts), progress.build(_describe(key)), \
                            _heap_frozen():
                        plan = self._plans[key] = build()
        return plan

    def __len__(self) -> int:
        return len(self._plans)


CACHE = DerivativeCache()
_FROZEN = [0]   # builds in progress (one inside another: a callee's derivative)


@contextlib.contextmanager
def _heap_frozen():
    """While a derivative builds, the objects that were alive before it (Numba's, NumPy's,
    earlier derivatives') are left out of the cycle collector's passes (``gc.freeze``): a
    build allocates hundreds of thousands of IR objects, enough to set off a full collection,
    which walked the whole heap to free nothing of it (0.06-0.12 s of GMM's 1 s reverse
    build). What the build itself leaves as garbage is still collected."""
    if _FROZEN[0] == 0:
        gc.freeze()
    _FROZEN[0] += 1
    try:
        yield
    finally:
        _FROZEN[0] -= 1
        if _FROZEN[0] == 0:
            gc.unfreeze()


def current_rules():
    """pyzyme's rule table with the user's rules (:mod:`pyzyme.rules.custom`) in front."""
    return rule_table(default_rules(), REGISTRY)


def _describe(key: tuple) -> str:
    """What the plan under ``key`` is, for the progress log: ``"the reverse derivative of f
    (f.py:3)"``."""
    kind = {"hvp": "Hessian-vector product", "split": "split reverse derivative"}.get(
        key[0], f"{key[0]} derivative")
    return f"the {kind} of {where(key[1])}"


def _result_activity(ret_activity) -> Activity | None:
    """The builders' word for a reverse-mode result annotation (None: deduce it)."""
    return {None: None, A.Active: Activity.ACTIVE, A.Const: Activity.CONST}.get(
        ret_activity, Activity.DUPLICATED)


def forward_plan(dispatcher, primal_types, shadowed, ret_activity, width: int,
                 need_primal: bool = True, distinct: bool = False):
    """The compiled forward derivative of ``dispatcher`` for these types and activities
    (without ``need_primal``, a float primal result it returns is zero; ``distinct``: no two
    arrays of the call share memory)."""
    key = ("forward", dispatcher, tuple(primal_types), tuple(shadowed), ret_activity, width,
           need_primal) + (("distinct",) if distinct else ())
    result = Activity.CONST if ret_activity is A.Const else Activity.DUPLICATED
    return CACHE.get(key, lambda: _persisted(
        dispatcher, primal_types, key,
        lambda: build_forward(dispatcher, primal_types, shadowed, result, width,
                              current_rules(), need_primal, distinct, where(dispatcher))))


def reverse_plan(dispatcher, primal_types, kinds, ret_activity, distinct: bool,
                 need_primal: bool = True):
    """The compiled reverse derivative of ``dispatcher`` for these types and activities
    (without ``need_primal``, the primal result it returns is zero)."""
    kinds = roles(kinds)
    key = ("reverse", dispatcher, tuple(primal_types), kinds, ret_activity, distinct,
           need_primal)
    return CACHE.get(key, lambda: _persisted(
        dispatcher, primal_types, key,
        lambda: build_reverse(dispatcher, primal_types, kinds, _result_activity(ret_activity),
                              distinct, current_rules(), need_primal, where(dispatcher))))


def split_plan(dispatcher, primal_types: tuple, kinds: tuple, ret_activity,
               distinct: bool = False):
    """The compiled split reverse-mode derivative of ``dispatcher`` (its augmented primal and
    reverse sweep) for these types and activities (``distinct``: no two arrays of either
    call share memory)."""
    key = ("split", dispatcher, primal_types, kinds, ret_activity) + \
        (("distinct",) if distinct else ())
    return CACHE.get(key, lambda: _persisted(dispatcher, primal_types, key, lambda: build_split(
        dispatcher, primal_types, kinds, _result_activity(ret_activity), current_rules(),
        where(dispatcher), distinct)))


def hvp_plan(dispatcher, xtype, const_types=(), workspaces=()):
    """The compiled Hessian-vector product of ``dispatcher`` (an array argument of type
    ``xtype``, then constant arguments of ``const_types``, those at ``workspaces`` arrays it
    writes; a float result)."""
    const_types, workspaces = tuple(const_types), tuple(workspaces)
    key = ("hvp", dispatcher, xtype, const_types) + ((workspaces,) if workspaces else ())
    return CACHE.get(key, lambda: _persisted(
        dispatcher, (xtype, *const_types), key, lambda: build_hvp(
            dispatcher, xtype, current_rules(), where(dispatcher), const_types, workspaces)))


def _persisted(dispatcher, primal_types, key: tuple, build):
    """``build()``, or the plan it made in an earlier process when ``dispatcher`` was made
    with ``cache=True`` (Numba's switch for its own cache; without it nothing touches the
    disk). ``key`` is the plan's in-memory key (mode, types, activities, ...): all of it but
    the dispatcher goes into the disk key, written the same way in every process.

    The key holds no identity of custom rules: while any user rule is registered (they may apply
    to a callee, and a rule's code is not part of the function's identity) the disk is not
    used.
    """
    location = persist.cache_location(dispatcher)
    if location is None or _user_rules() or persist.process_bound(dispatcher, primal_types):
        return build()
    disk = CACHE.disk
    what = _stable(tuple(k for k in key if k is not dispatcher))
    try:
        disk_key = "\n".join([disk.environment(),
                              persist.function_identity(dispatcher, primal_types),
                              repr(what), repr(settings.current())])
        fingerprint = persist.ir_fingerprint(dispatcher, primal_types)
    except Exception as err:  # noqa: BLE001  (e.g. closure values Numba cannot pickle)
        warnings.warn(f"pyzyme cannot key the derivative of {dispatcher.py_func.__qualname__} "
                      f"for its disk cache ({err}); it is kept in memory only",
                      RuntimeWarning, stacklevel=2)
        return build()
    path = disk.path(*location, disk_key)
    payload = disk.load(path, disk_key)
    if payload is not None:
        plan = _loaded_plan(payload, fingerprint)
        if plan is not None:
            return plan
        disk.reject()
    plan = build()
    if persist.process_bound(dispatcher, primal_types):   # compiled by build() just now
        return plan
    try:
        fingerprint = fingerprint or persist.ir_fingerprint(dispatcher, primal_types)
        payload = (persist.plan_state(plan), fingerprint)
    except Exception as err:  # noqa: BLE001  (the derivative works; only storing it failed)
        warnings.warn(f"pyzyme could not store the derivative of "
                      f"{dispatcher.py_func.__qualname__} in its disk cache: {err}",
                      RuntimeWarning, stacklevel=2)
        return plan
    disk.store(path, disk_key, payload, dumps=persist.state_bytes)
    return plan


def _user_rules() -> bool:
    """Whether rules registered by the user exist. pyzyme's own (``stop_gradient``'s,
    registered as pyzyme is imported) are part of pyzyme's version, which the disk key holds:
    counted, they kept every derivative off the disk."""
    return any(not getattr(getattr(r.function, "py_func", r.function), "__module__",
                           "").startswith("pyzyme.")
               for r in REGISTRY.functions())


def _stable(value):
    """``value`` (a plan's in-memory key) as text that does not depend on the process:
    annotation classes by name, Numba types and plain values by ``repr``."""
    if isinstance(value, tuple):
        return tuple(_stable(v) for v in value)
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def _loaded_plan(payload, fingerprint: str | None):
    """The plan stored in ``payload``, its wrapper loaded; None if it cannot be used: made
    from other primal IR than this process has, or code that would not load here."""
    try:
        state, stored_fingerprint = payload
        if fingerprint is not None and stored_fingerprint not in (None, fingerprint):
            return None
        text = next(data for name, _, data in state[1] if name == "ir_text")
        return persist.rebuild_plan(state, compile_key(text))
    except Exception:  # noqa: BLE001  (an entry that does not load is rebuilt, never trusted)
        return None
