"""What Enzyme's clang plugin does to a module before clang optimises it.

Enzyme runs inside clang. Before the ``-O`` pipeline, it marks the functions a module tells it
about (custom derivatives, ``__enzyme_inactivefn`` and ``enzyme_inactive`` functions,
``__enzyme_function_like`` ones) so that inlining cannot dissolve them into their callers:
once ``log1p_like(x)`` is inlined, nothing says its caller's ``2 * x`` is "log1p", and the
derivative is that of the code, not of the registration. ``pyzyme cc`` runs clang as a separate
program, so it asks clang for the module before any optimisation
(``-Xclang -disable-llvm-passes``), marks those functions ``noinline`` here, and then runs
clang's pipeline itself (:func:`pyzyme.runtime.passes.clang_pipeline`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyzyme import ir
from pyzyme.frontends.ad_copy import noinline_suffix
from pyzyme.frontends.c.registrations import find_registrations

__all__ = ["FRONTEND_ONLY", "preserve_registered", "optimize"]

#: Flags that stop clang after its front end: the caller then runs :func:`optimize`.
FRONTEND_ONLY = ("-Xclang", "-disable-llvm-passes")


def registered_functions(module: ir.Module) -> list[str]:
    """The defined functions of ``module`` that its registrations name and that must stay
    calls: inactive, function-like, custom derivatives and their primal functions,
    allocators and deallocators."""
    reg = find_registrations(module)
    names = [*reg.inactive, *reg.like, *reg.registered, *reg.rule_functions]
    return [n for n in dict.fromkeys(names)
            if (fn := module.get_function(n)) is not None and not fn.is_declaration]


def preserve_registered(text: str) -> str:
    """``text`` with the functions its registrations name marked ``noinline``.

    Examples
    --------
    >>> text = '''define double @mylog(double %x) {
    ...   ret double %x
    ... }
    ... @__enzyme_function_like = global [2 x ptr] [ptr @mylog, ptr @.name]
    ... @.name = private constant [4 x i8] c"log\\\\00"'''
    >>> "noinline" in preserve_registered(text)
    True
    """
    module = ir.parse_module(text)
    names = registered_functions(module)
    if not names:
        return text
    for name in names:
        fn = module.get_function(name)
        fn.suffix = noinline_suffix(fn.suffix)
    return str(module)


def optimize(text: str, level: int, flags: Sequence[str] = ()) -> str:
    """``text`` optimised at ``-O<level>`` (1-3) as clang would have, honouring
    ``-fno-unroll-loops``/``-funroll-loops`` among ``flags``."""
    from pyzyme.runtime import passes
    from pyzyme.runtime.modules import parse

    unroll = None
    for flag in flags:
        if flag in ("-funroll-loops", "-fno-unroll-loops"):
            unroll = flag == "-funroll-loops"
    module = parse(text, what="program module")
    passes.clang_pipeline(module, level, unroll_loops=unroll)
    return str(module)
