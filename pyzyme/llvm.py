"""Differentiate LLVM IR directly: any language whose compiler writes LLVM IR.

:func:`differentiate` adds the derivative of one function to a module and returns the module's
text; :func:`compile` JIT-compiles that and returns a ctypes function. The argument kinds are
Enzyme's: ``"const"``, ``"active"`` (a float whose adjoint is returned, reverse mode),
``"dup"`` (a pointer followed by its shadow; in forward mode a float followed by its tangent)
and ``"dupnoneed"``; without them, Enzyme's defaults (a pointer is ``"dup"``, a float
``"active"`` in reverse and ``"dup"`` in forward mode, an integer ``"const"``).

The derivatives' signatures (``fn`` taking ``P...``, returning ``R``):

``mode="forward"``, ``width=N``
    ``fwddiffe_fn(P..., N tangents of each non-const P...) -> {R, dR_1, ..., dR_N}``
``mode="reverse"``
    ``diffe_fn(P..., shadows of the dup P..., dR if R is active) -> {R, adjoints of the
    active P...}`` (just ``R`` when no argument is active)
``mode="split"``
    ``augmented_fn(P..., shadows...) -> {R, tape}`` (the tape alone for a void ``fn``) and
    ``diffe_fn(P..., shadows..., dR?, i1 0, tape) -> {adjoints}``

Examples
--------
>>> text = '''define double @f(double %x, ptr %p) {
...   %v = load double, ptr %p
...   %y = fmul double %x, %v
...   ret double %y
... }'''
>>> grad = compile(text, "f", "reverse", ["active", "dup"])
>>> import ctypes
>>> v, dv = ctypes.c_double(3.0), ctypes.c_double(0.0)
>>> out = grad(2.0, ctypes.byref(v), ctypes.byref(dv), 1.0)
>>> out.f0, out.f1, dv.value          # f, df/dx, df/dv
(6.0, 3.0, 2.0)
>>> tangent = compile(text, "f", "forward", ["dup", "const"])
>>> tangent(2.0, ctypes.byref(v), 1.0).f1
3.0
"""

from __future__ import annotations

import hashlib
import ctypes
from collections.abc import Sequence
from typing import Literal, NamedTuple

from pyzyme import ir, pipeline
from pyzyme.errors import UnsupportedError

__all__ = ["differentiate", "compile", "SplitFunctions"]

Mode = Literal["forward", "reverse", "split"]


class SplitFunctions(NamedTuple):
    """The two halves of a split derivative, as ctypes functions."""

    augmented: object
    reverse: object


def _derive(module_text: str, function: str, mode: Mode, activities, width: int,
            return_activity, name: str | None, opt_level: int | None):
    """The linked module text and ``{entry name: its FunctionType}``."""
    from pyzyme.frontends.ad_copy import rename_global, link_into, promote_local_globals
    from pyzyme.frontends.c.lower import copy_with_rules
    from pyzyme.frontends.llvm_ad import Derivatives

    if mode not in ("forward", "reverse", "split"):
        raise UnsupportedError(f"unknown mode {mode!r}", hint='use "forward", "reverse" or '
                                                                 '"split"')
    if width != 1 and mode != "forward":
        raise UnsupportedError("width > 1 is supported in forward mode only")
    program = ir.parse_module(module_text)
    fn = program.get_function(function)
    if fn is None or fn.is_declaration:
        raise UnsupportedError(f"the module defines no function @{function}")
    promote_local_globals(program, "pz" + hashlib.sha256(module_text.encode()).hexdigest()[:8])
    copy, rules = copy_with_rules(program, [function])
    derivs = Derivatives(copy, rules)
    primal = copy.get_function(function)
    if return_activity not in (None, "active", "const"):
        raise UnsupportedError(f"unknown return activity {return_activity!r}",
                               hint='use "active" or "const"')
    ret_active = None if return_activity is None else return_activity == "active"
    base = {"forward": "fwddiffe", "reverse": "diffe", "split": "diffe"}[mode]
    wanted = [name or f"{base}_{function}"]

    def generate():
        if mode == "forward":
            return [derivs.forward(primal, activities, width)]
        if mode == "reverse":
            return [derivs.combined(primal, activities, ret_active)]
        pair = derivs.split(primal, activities, ret_active)
        return [pair.augmented, pair.reverse]

    # The pipeline's first step; then the entries are linked into the program (link_into)
    # instead of compiled as a module of their own.
    made = pipeline.generate(generate, f"@{function} in {mode} mode")
    if mode == "split":
        wanted = [f"augmented_{function}" if name is None else f"{name}_augmented", wanted[0]]
    entries = {}
    for generated, new in zip(made, wanted):
        if program.get_global(new) is not None:
            raise UnsupportedError(f"the module already has a @{new}", hint="pass name=...")
        if copy.get_global(new) is not None and copy.get_global(new) is not generated:
            rename_global(copy, copy.get_global(new), copy.unique_global_name(new + ".old"))
        rename_global(copy, generated, new)
        generated.linkage = "external"
        entries[new] = generated.function_type
    return link_into(str(program), copy, entries, opt_level=opt_level), entries


def differentiate(module_text: str, function: str, mode: Mode = "reverse",
                  activities: Sequence | None = None, *, width: int = 1,
                  return_activity: str | None = None, name: str | None = None,
                  opt_level: int | None = 2) -> str:
    """The module ``module_text`` with the derivative of ``function`` added.

    Parameters
    ----------
    module_text
        LLVM IR text (LLVM 22 syntax), e.g. from ``clang -S -emit-llvm``.
    function
        The name of the function to differentiate (no ``@``).
    mode
        ``"forward"``, ``"reverse"`` (combined) or ``"split"``.
    activities
        One kind per parameter (``"const"``, ``"active"``, ``"dup"``, ``"dupnoneed"``, or
        pyzyme's annotation classes); None for Enzyme's defaults.
    width
        Tangents per argument in forward mode.
    return_activity
        ``"active"`` or ``"const"`` for the result in reverse mode (default: active when it
        is a float).
    name
        The derivative's name (default ``fwddiffe_F`` or ``diffe_F``; in split mode the
        augmented forward pass is ``augmented_F``).
    opt_level
        Optimisation level of the generated code (None: left as generated).

    Returns
    -------
    str
        The module, with the derivative as an external function.

    Examples
    --------
    >>> out = differentiate("define double @sq(double %x) {\\n  %y = fmul double %x, %x\\n"
    ...                     "  ret double %y\\n}", "sq")
    >>> "define { double, double } @diffe_sq(double" in out
    True
    """
    text, _ = _derive(module_text, function, mode, activities, width, return_activity, name,
                      opt_level)
    return text


def compile(module_text: str, function: str, mode: Mode = "reverse",  # noqa: A001
            activities: Sequence | None = None, *, width: int = 1,
            return_activity: str | None = None, opt_level: int = 2):
    """The derivative of ``function`` as a ctypes function (:class:`SplitFunctions` in split
    mode), JIT-compiled with the module in an engine of its own.

    Arguments are passed as ctypes passes them: floats as Python floats, pointers as
    ``ctypes.byref(...)``, addresses (``array.ctypes.data``) or ``c_void_p``; a struct result
    comes back as a ``ctypes.Structure`` with fields ``f0, f1, ...``. See the module docstring
    for the signatures and an example.
    """
    from pyzyme.runtime.standalone import Program, ctype_of

    text, entries = _derive(module_text, function, mode, activities, width, return_activity,
                            None, opt_level)
    text += "".join(_c_abi_wrapper(n, t) for n, t in entries.items() if _by_memory(t.ret))
    program = Program(text, name=f"derivative of @{function}", opt_level=0)
    made = []
    for n, t in entries.items():
        params = [ctype_of(p) for p in t.params]
        if not _by_memory(t.ret):
            made.append(program.function(n, ctype_of(t.ret), params))
            continue
        made.append(_returning(program.function(f"{n}.c", None, [ctypes.c_void_p, *params]),
                               ctype_of(t.ret)))
    return SplitFunctions(*made) if mode == "split" else made[0]


def _by_memory(ty) -> bool:
    """Whether C returns ``ty`` through a hidden pointer (x86-64: aggregates over 16 bytes),
    where LLVM returns a first-class aggregate in registers: such entries get a wrapper."""
    from pyzyme.analysis.layout import sizeof

    return isinstance(ty, (ir.StructType, ir.ArrayType)) and sizeof(ty) > 16


def _c_abi_wrapper(name: str, fnty) -> str:
    params = ", ".join(f"{t} %a{i}" for i, t in enumerate(fnty.params))
    args = ", ".join(f"{t} %a{i}" for i, t in enumerate(fnty.params))
    return (f"\ndefine void @{name}.c(ptr %out{', ' + params if params else ''}) {{\n"
            f"  %r = call {fnty.ret} @{name}({args})\n  store {fnty.ret} %r, ptr %out\n"
            f"  ret void\n}}\n")


def _returning(fn, restype):
    """``fn(out, *args)`` as a function of ``args`` returning what it wrote to ``out``."""
    def call(*args):
        out = restype()
        fn(ctypes.byref(out), *args)
        return out
    return call

