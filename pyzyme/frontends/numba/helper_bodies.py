"""IR bodies for Numba's C helpers that pyzyme differentiates by their code.

Numba lowers ``z ** w`` of complex numbers (other than ``w == 2``, which it multiplies out) to a
call of its C helper ``numba_cpow(a, b, out)`` (``numba_cpowf`` for complex64), which calls
CPython's ``_Py_c_pow``. A C helper has no IR for pyzyme to differentiate, and its operands and
result travel through memory, which a rule row (scalar operands, scalar result) cannot
describe. So a captured module that calls one gets the helper's algorithm written here in IR,
built from libm calls that have rules (``hypot``, ``pow``, ``atan2``, ``exp``, ``log``, ``cos``,
``sin``); the derivative is then that of the code, as for any callee.

The body follows ``_Py_c_pow`` (CPython 3.11, Objects/complexobject.c) step by step, so the
primal gives the values Numba's helper gives (up to the sign of a zero imaginary part, for a
real exponent), with two changes made for the derivatives:

- ``log|a| * Im b`` is added to the phase (and ``exp(arg(a) * Im b)`` divided out of the
  length) also when ``Im b == 0``, where it is exactly 0 (1): the derivative with respect to
  ``Im b`` is then kept at real exponents.
- ``b == 0`` answers 1 before looking at ``a`` only where ``a`` is not finite; otherwise the
  general formula gives exactly 1 and keeps the derivative ``log(a)`` with respect to ``b``.

At ``a == 0`` the result is a constant (0, or NaN for ``Re b < 0`` or ``Im b != 0``), so the
derivative there is 0, which is the limit for ``Re b > 1``; for ``b == 1`` the result is ``a``
itself (derivative 1). For ``0 < Re b < 1`` the function has no derivative at 0.

Examples
--------
>>> "define void @numba_cpow(" in helper_body("numba_cpow")
True
>>> helper_body("sin") is None
True
"""

from __future__ import annotations

import llvmlite.binding as llvm

from pyzyme.runtime import modules

__all__ = ["HELPERS", "helper_body", "link_helper_bodies"]

_NAN = "0x7FF8000000000000"

_LIBM = """declare double @hypot(double, double)
declare double @pow(double, double)
declare double @atan2(double, double)
declare double @exp(double)
declare double @log(double)
declare double @cos(double)
declare double @sin(double)
"""


def _cpow(name: str, elem: str, size: int) -> str:
    """``void name(ptr a, ptr b, ptr out)`` on ``{elem, elem}`` complex numbers."""
    ext = (lambda v, src: f"  {v} = fpext float {src} to double") if elem == "float" else None

    def load(v: str, ptr: str, offset: int) -> list[str]:
        lines = []
        src = f"{ptr}.{offset}"
        if offset:
            lines.append(f"  {src} = getelementptr inbounds i8, ptr {ptr}, i64 {offset}")
        else:
            src = ptr
        raw = v if ext is None else f"{v}.raw"
        lines.append(f"  {raw} = load {elem}, ptr {src}, align {size}")
        if ext is not None:
            lines.append(ext(v, raw))
        return lines

    def store(v: str, offset: int) -> list[str]:
        lines = []
        dst = "%out" if not offset else "%out.im"
        if offset:
            lines.append(f"  %out.im = getelementptr inbounds i8, ptr %out, i64 {offset}")
        if ext is None:
            lines.append(f"  store double {v}, ptr {dst}, align {size}")
        else:
            lines += [f"  {v}.t = fptrunc double {v} to float",
                      f"  store float {v}.t, ptr {dst}, align {size}"]
        return lines

    body = [f"define void @{name}(ptr %a, ptr %b, ptr %out) {{", "entry:"]
    body += load("%ar", "%a", 0) + load("%ai", "%a", size) + load("%br", "%b", 0)
    body += load("%bi", "%b", size)
    body += [
        "  %ar0 = fcmp oeq double %ar, 0.0",
        "  %ai0 = fcmp oeq double %ai, 0.0",
        "  %a0 = and i1 %ar0, %ai0",
        "  %br0 = fcmp oeq double %br, 0.0",
        "  %bi0 = fcmp oeq double %bi, 0.0",
        "  %b0 = and i1 %br0, %bi0",
        "  br i1 %a0, label %zero, label %nonzero",
        "zero:",
        "  %bneg = fcmp olt double %br, 0.0",
        "  %bimag = fcmp une double %bi, 0.0",
        "  %edom = or i1 %bneg, %bimag",
        "  %br1 = fcmp oeq double %br, 1.0",
        "  %b1 = and i1 %br1, %bi0",
        "  %idr = fadd double %ar, 0.0",
        "  %idi = fadd double %ai, 0.0",
        "  %zr1 = select i1 %b1, double %idr, double 0.0",
        "  %zi1 = select i1 %b1, double %idi, double 0.0",
        f"  %zr2 = select i1 %edom, double {_NAN}, double %zr1",
        f"  %zi2 = select i1 %edom, double {_NAN}, double %zi1",
        "  %zr = select i1 %b0, double 1.0, double %zr2",
        "  %zi = select i1 %b0, double 0.0, double %zi2",
        "  br label %done",
        "nonzero:",
        "  %arf = fsub double %ar, %ar",
        "  %aif = fsub double %ai, %ai",
        "  %arfin = fcmp oeq double %arf, 0.0",
        "  %aifin = fcmp oeq double %aif, 0.0",
        "  %afin = and i1 %arfin, %aifin",
        "  %ainf = xor i1 %afin, true",
        "  %unit = and i1 %b0, %ainf",
        "  br i1 %unit, label %done, label %general",
        "general:",
        "  %vabs = call double @hypot(double %ar, double %ai)",
        "  %len0 = call double @pow(double %vabs, double %br)",
        "  %at = call double @atan2(double %ai, double %ar)",
        "  %ph0 = fmul double %at, %br",
        "  %atbi = fmul double %at, %bi",
        "  %eat = call double @exp(double %atbi)",
        "  %len1 = fdiv double %len0, %eat",
        "  %lg = call double @log(double %vabs)",
        "  %bilg = fmul double %bi, %lg",
        "  %ph1 = fadd double %ph0, %bilg",
        "  %lgd = fsub double %lg, %lg",
        "  %lgfin = fcmp oeq double %lgd, 0.0",
        "  %lginf = xor i1 %lgfin, true",
        "  %skip = and i1 %bi0, %lginf",
        "  %len = select i1 %skip, double %len0, double %len1",
        "  %ph = select i1 %skip, double %ph0, double %ph1",
        "  %cph = call double @cos(double %ph)",
        "  %sph = call double @sin(double %ph)",
        "  %gr = fmul double %len, %cph",
        "  %gi0 = fmul double %len, %sph",
        "  %gi1 = fadd double %gi0, 0.0",
        "  %gi = select i1 %b0, double %gi1, double %gi0",
        "  br label %done",
        "done:",
        "  %rr = phi double [ %zr, %zero ], [ 1.0, %nonzero ], [ %gr, %general ]",
        "  %ri = phi double [ %zi, %zero ], [ 0.0, %nonzero ], [ %gi, %general ]",
    ]
    body += store("%rr", 0) + store("%ri", size)
    body += ["  ret void", "}", ""]
    return "\n".join(body)


#: The helpers with a body here: name -> (element type, its size in bytes).
HELPERS: dict[str, tuple[str, int]] = {"numba_cpow": ("double", 8), "numba_cpowf": ("float", 4)}


def helper_body(name: str) -> str | None:
    """The IR module text defining helper ``name``, or None if pyzyme has no body for it."""
    if name not in HELPERS:
        return None
    elem, size = HELPERS[name]
    return _LIBM + "\n" + _cpow(name, elem, size)


def link_helper_bodies(module: llvm.ModuleRef) -> list[str]:
    """Define, in ``module``, each helper of :data:`HELPERS` it declares; returns their names.

    Call before the module is internalized and optimized, so that the bodies are inlined.
    """
    declared = [fn.name for fn in module.functions if fn.is_declaration and fn.name in HELPERS]
    for name in declared:
        module.link_in(modules.parse(helper_body(name), what=f"pyzyme's body of {name}"))
    return declared
