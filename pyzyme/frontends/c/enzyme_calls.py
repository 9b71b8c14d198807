"""Enzyme's C/C++ calling convention: the ``__enzyme_*`` call sites of a module, read.

A C program asks for a derivative by calling an undefined variadic function::

    double __enzyme_autodiff(void *, ...);
    int enzyme_dup, enzyme_const, enzyme_out;
    ... __enzyme_autodiff((void *)f, enzyme_dup, x, dx, enzyme_const, n, y) ...

The first argument is the function to differentiate; the rest are its arguments, each optionally
preceded by a *marker*: the value (or address) of a global named ``enzyme_*``, or in IR written
by other frontends a ``metadata !"enzyme_*"`` operand. :func:`find_call_sites` reads every such
call into a :class:`CallSite` the way Enzyme does (``handleArguments`` in its ``Enzyme.cpp``):

- without a marker, a pointer is duplicated (followed by its shadow), a float is active in
  reverse mode and followed by its tangent in forward mode, an integer is constant;
- ``enzyme_dup``/``enzyme_dupnoneed`` take the value and then its shadow (``width`` of them),
  ``enzyme_dupv STRIDE`` one shadow base whose lanes are ``STRIDE`` bytes apart;
  ``enzyme_out`` makes a float active, ``enzyme_const`` makes anything constant;
- ``enzyme_width N`` asks for N tangents per argument (vector forward mode);
- ``enzyme_context CTX``: the globals the function uses take their shadows from the context
  CTX made by ``__enzyme_context(width)`` (:mod:`~pyzyme.frontends.c.shadow_contexts`), which
  also sets the width when it is a constant;
- ``enzyme_const_return``/``enzyme_active_return``/``enzyme_dup_return`` set the result's kind,
  ``enzyme_primal_return`` asks for the primal result too;
- split mode: ``enzyme_tape PTR`` gives where the tape is kept, ``enzyme_allocated SIZE`` how
  many bytes PTR has; otherwise ``__enzyme_augmentfwd`` returns the tape and
  ``__enzyme_reverse`` takes the result's seed and then the tape after the arguments.

``__enzyme_virtualreverse(f)``, which asks for the shadow of a function pointer, is read by
:mod:`~pyzyme.frontends.c.virtual_shadows`; what a module declares about its functions through
Enzyme's globals (custom derivatives, inactive functions, ...) by
:mod:`~pyzyme.frontends.c.registrations`.

Errors name the call site (``file.c:12`` from debug information when the module has it), the
marker, and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyzyme import ir
from pyzyme.analysis.activity import Activity
from pyzyme.analysis.layout import sizeof
from pyzyme.errors import UnsupportedError
from pyzyme.frontends.llvm_ad import _is_floaty, default_activity
from pyzyme.ir import instructions as I
from pyzyme.ir.debug_info import DebugInfo
from pyzyme.ir.debug_info import source_location as debug_location
from pyzyme.ir.values import ConstantExpr, ConstantInt, GlobalVariable, MetadataValue

__all__ = ["ENTRY_POINTS", "CONTEXT_NEW", "GRADIENT_LOG", "CallSite", "Arg", "EnzymeCallError",
           "gradient_log",
           "find_call_sites", "marker", "source_location", "show", "through_locals"]

#: Substrings of the names of Enzyme's entry points (C++ mangles them), and their modes.
ENTRY_POINTS = (
    ("__enzyme_autodiff", "reverse"),
    ("__enzyme_fwddiff", "forward"),
    ("__enzyme_augmentfwd", "augment"),
    ("__enzyme_augmentsize", "size"),
    ("__enzyme_reverse", "gradient"),
    ("__enzyme_batch", "batch"),
)
# Entry points of Enzyme that pyzyme does not provide, and why.
_NOT_PROVIDED = {
    "__enzyme_fwdsplit": "split forward mode is not supported; use __enzyme_fwddiff",
    "__enzyme_todense": "sparse-to-dense conversions are not supported",
    "__enzyme_truncate": "floating-point truncation is not supported",
    "__enzyme_trace": "probabilistic programming is not supported",
    "__enzyme_condition": "probabilistic programming is not supported",
    "__enzyme_error_estimate": "floating-point error estimation is not supported",
    "__enzyme_set_fixed_point": "fixed-point loops marked from inside are read only from "
                                "the C or C++ source pyzyme cc compiles, not from LLVM IR "
                                "(compile the source with pyzyme cc, or pass one iteration as "
                                "the step function of __enzyme_fixed_point)",
}
#: What ``__enzyme_context(width)`` becomes (:mod:`~pyzyme.frontends.c.shadow_contexts`): the
#: runtime function making a context, whose width a call site taking the context reads.
CONTEXT_NEW = "__pyzyme_ctx_new"
#: Functions a program defines for Enzyme to call while it differentiates (its logging hooks).
_HOOKS = ("enzymeLogValue", "enzymeLogError", "enzymeLogRound")
#: The logging hook pyzyme calls (:class:`~pyzyme.rules.spec.GradientLog`): with the adjoint of
#: each floating-point result, in the reverse sweep.
GRADIENT_LOG = "enzymeLogGrad"
# Activities by the marker that precedes an argument (dupnoneed: a dup whose primal value the
# caller does not need afterwards, which pyzyme does not exploit) or that sets the result's.
_ARG_MARKERS = {"enzyme_dup": Activity.DUPLICATED, "enzyme_dupnoneed": Activity.DUPLICATED,
                "enzyme_out": Activity.ACTIVE, "enzyme_const": Activity.CONST,
                "enzyme_dupv": Activity.DUPLICATED, "enzyme_dupnoneedv": Activity.DUPLICATED}
_RETURN_MARKERS = {"enzyme_const_return": Activity.CONST,
                   "enzyme_active_return": Activity.ACTIVE,
                   "enzyme_dup_return": Activity.DUPLICATED}
_MANGLED_MARKER = re.compile(r"\d+(enzyme_[a-z0-9_]+)E$")


class EnzymeCallError(UnsupportedError):
    """A ``__enzyme_*`` call pyzyme cannot read: a wrong marker, too few or too many
    arguments, a function it cannot find. The message starts with the call site."""


@dataclass
class Arg:
    """One parameter of the differentiated function, as the call passes it: ``value`` and
    ``shadows`` are positions in the call's argument list; with ``stride`` (``enzyme_dupv``)
    ``shadows`` holds one base pointer and lane k is ``stride * k`` bytes after it. In
    ``__enzyme_batch`` an argument is ``CONST`` (``enzyme_scalar``: one value for every lane)
    or ``DUPLICATED`` (``enzyme_vector``: lane 0's value, then one in ``shadows`` per lane)."""

    param: int
    kind: Activity
    value: int
    shadows: tuple[int, ...] = ()
    stride: int | None = None
    #: A piece of a struct passed by value (``pyzyme_byval``): ``value`` and ``shadows`` are
    #: the struct's addresses, and the parameter is loaded from this byte offset.
    offset: int | None = None


@dataclass
class CallSite:
    """One ``__enzyme_*`` call, read. Positions (``sret``, ``dret``, ``tape``, ...) index the
    call's argument list; ``kept`` lists those passed on to the generated function."""

    call: object
    entry: str
    mode: str
    function: object
    where: str
    width: int = 1
    args: list[Arg] = field(default_factory=list)
    ret: Activity = Activity.CONST
    primal_return: bool = False
    sret: int | None = None
    #: The function's own struct-return parameter (forward mode: the call passes no value
    #: for it; the result and its tangent are the call's own result).
    result_param: int | None = None
    dret: int | None = None
    tape: int | None = None
    tape_is_pointer: bool = False
    allocated: int | None = None
    nofree: bool = False
    runtime_activity: bool = False
    context: int | None = None
    vtable: tuple | None = None
    size_kinds: list[Activity] = field(default_factory=list)

    @property
    def kinds(self) -> list[Activity]:
        return [a.kind for a in self.args]

    @property
    def kept(self) -> list[int]:
        """Call argument positions the generated function takes, in order."""
        out = [] if self.sret is None else [self.sret]
        for a in self.args:
            out.append(a.value)
            out += list(a.shadows)
            if a.stride is not None:
                out.append(a.stride)
        out += [p for p in (self.dret, self.tape, self.context) if p is not None]
        return sorted(set(out))  # the pieces of a struct share its addresses

    def error(self, message: str, hint: str | None = None) -> EnzymeCallError:
        return EnzymeCallError(f"{self.where}: {message}", hint=hint)


def marker(value) -> str | None:
    """The Enzyme marker ``value`` stands for (``"enzyme_dup"``), or None.

    >>> g = ir.GlobalVariable("enzyme_dup", ir.i32)
    >>> marker(I.Load(ir.i32, g)), marker(g), marker(MetadataValue('!"enzyme_out"'))
    ('enzyme_dup', 'enzyme_dup', 'enzyme_out')
    >>> marker(ir.const_int(ir.i32, 0)) is None
    True
    """
    value = through_locals(value)
    if isinstance(value, (I.Load, I.Cast)) and value.operands:
        value = value.operands[0]
    if isinstance(value, ConstantExpr) and value.operands:
        value = value.operands[0]
    if isinstance(value, GlobalVariable):
        name = value.name
        if name.startswith(("enzyme_", "pyzyme_")):
            return name
        m = _MANGLED_MARKER.search(name)
        return m.group(1) if m else None
    if isinstance(value, MetadataValue):
        m = re.fullmatch(r'!"(enzyme_[A-Za-z0-9_]+)"', value.text.strip())
        return m.group(1) if m else None
    return None


def through_locals(value):
    """``value`` with unoptimised code's detours taken out: a load from a stack slot stored
    once is the value stored (at -O0 each parameter of an inlined helper, such as those of
    ``<enzyme/enzyme>``, passes through such a slot)."""
    for _ in range(64):
        if not (isinstance(value, I.Load) and isinstance(value.pointer, I.Alloca)):
            return value
        stores = [u for u in value.pointer.users if isinstance(u, I.Store)]
        if len(stores) != 1 or stores[0].pointer is not value.pointer:
            return value
        value = stores[0].value
    return value


def entry_mode(name: str) -> str | None:
    """The mode of the Enzyme entry point ``name`` (mangled or not), or None."""
    for key, mode in ENTRY_POINTS:
        if key in name:
            return mode
    return None


# ------------------------------------------------------------------------ source locations
# The headers pyzyme cc puts on the include path (<enzyme/enzyme>...): a location inside one
# is reported where the user's code called it.
_SHIPPED_HEADER = re.compile(r"pyzyme[/\\]frontends[/\\]include[/\\]")


def source_location(module, inst) -> str:
    """``file.c:LINE`` of ``inst`` from the module's debug information, or the module's
    source file and the function when there is none."""
    found = debug_location(module, inst, _SHIPPED_HEADER)
    if found is not None:
        return found
    fn = inst.function.name if inst.parent is not None else "?"
    return f"{module.source_filename or module.name or '<module>'} (in @{fn})"


# ------------------------------------------------------------------------ reading calls
def _function_of(value, depth: int = 2):
    """The function a call passes as its first argument (through casts and an -O0 local, or
    returned by a call of a function that always returns it: at -O0, a lambda's conversion
    to a function pointer)."""
    value = through_locals(value)
    if isinstance(value, ConstantExpr) and value.operands:
        value = value.operands[0]
    value = through_locals(value)
    callee = value.called_function if isinstance(value, I.Call) else None
    if depth and callee is not None and not callee.is_declaration:
        found = {_function_of(r.value, depth - 1) for r in callee.instructions()
                 if isinstance(r, I.Ret) and r.value is not None}
        return found.pop() if len(found) == 1 else None
    return value if isinstance(value, ir.Function) else None


def gradient_log(module) -> str | None:
    """The name of the program's ``enzymeLogGrad`` (C or C++ spelling), if it defines one."""
    h = GRADIENT_LOG
    fn = next((f for f in module.functions if not f.is_declaration and (
        f.name == h or f.name.startswith(f"_Z{len(h)}{h}"))), None)
    return fn.name if fn is not None else None


def find_call_sites(module) -> list[CallSite]:
    """Every ``__enzyme_*`` call of ``module``, read (see the module docstring).

    Raises
    ------
    EnzymeCallError
        For a call that cannot be read, naming its source location.
    """
    debug = DebugInfo(module)
    for fn in module.functions:
        hook = next((h for h in _HOOKS if fn.name in (h, f"_Z{len(h)}{h}") or
                     fn.name.startswith(f"_Z{len(h)}{h}")), None)  # C or C++ spelling
        if hook is not None and not fn.is_declaration:
            raise EnzymeCallError(f"{debug.default}: the program defines {hook}, a logging hook "
                                  f"of Enzyme's; pyzyme does not call it",
                                  hint=f"remove {hook}, or rename it if it is not meant for "
                                       f"Enzyme")
    sites = []
    for fn in module.functions:
        for inst in list(fn.instructions()):
            if not isinstance(inst, I.CallBase) or inst.called_function is None:
                continue
            name = inst.called_function.name
            if "__enzyme_" not in name:
                continue
            where = debug.location(inst, _SHIPPED_HEADER) or \
                f"{debug.default} (in @{fn.name})"
            for key, why in _NOT_PROVIDED.items():
                if key in name:
                    raise EnzymeCallError(f"{where}: {key}: {why}")
            mode = entry_mode(name)
            if mode is None:
                continue
            sites.append(_read(inst, name, mode, where))
    return sites


def _read(call, name: str, mode: str, where: str) -> CallSite:
    args = call.args
    sret = 0 if args and "sret" in (call.arg_attrs[0] or "") else None
    first = 0 if sret is None else 1
    if len(args) <= first:
        raise EnzymeCallError(f"{where}: {name} needs the function to differentiate as its "
                              f"first argument")
    fn = _function_of(args[first])
    if fn is None:
        raise EnzymeCallError(f"{where}: the first argument of {name} is not a function "
                              f"pyzyme can find ({show(args[first])})",
                              hint="pass the function itself, e.g. (void*)f")
    site = CallSite(call, name, mode, fn, where, sret=sret)
    if fn.is_declaration:
        raise site.error(f"{fn.ref} has no body in this module to differentiate",
                         hint="define it in the same translation unit")
    site.result_param = next((i for i, a in enumerate(fn.args) if "sret" in a.attrs), None)
    if site.result_param is not None and mode != "forward":
        raise site.error(f"{fn.ref} returns a struct through memory (sret), which pyzyme "
                         f"differentiates in forward mode only",
                         hint="return it through a pointer argument instead")
    if mode == "batch":
        return _read_batch(site, args, first + 1)
    forward = mode == "forward"
    # A struct returned through memory has a tangent unless the call says otherwise.
    if site.result_param is not None:
        site.ret = Activity.DUPLICATED
    else:
        site.ret = Activity.CONST if fn.return_type == ir.void else \
            default_activity(fn.return_type, forward)
    for v in args[first + 1:]:
        m = marker(v)
        if m in _RETURN_MARKERS:
            site.ret = _RETURN_MARKERS[m]
        elif m == "enzyme_primal_return":
            site.primal_return = True
        elif m == "enzyme_noret":
            raise site.error("enzyme_noret is not supported")
    if site.primal_return and mode not in ("reverse", "forward"):
        raise site.error("enzyme_primal_return is only available in __enzyme_autodiff and "
                         "__enzyme_fwddiff")
    _read_width(site, args, first + 1)
    _read_args(site, args, first + 1)
    return site


def show(value) -> str:
    """``value`` as its function prints it (unnamed values by their number)."""
    from pyzyme.ir.printer import _slots

    try:
        return value.ref
    except ValueError:
        fn = getattr(value, "function", None)
        slot = _slots(fn).get(value) if fn is not None else None
        return f"%{slot}" if slot is not None else f"a {value.type} value"


def _const_int(site: CallSite, args, i: int, what: str) -> int:
    value = through_locals(args[i]) if i < len(args) else None
    if not isinstance(value, ConstantInt):
        got = show(args[i]) if i < len(args) else "nothing"
        raise site.error(f"{what} must be followed by a constant integer, got {got}")
    return value.value


def _read_width(site: CallSite, args, start: int) -> None:
    seen = False
    context_width = None
    for i in range(start, len(args)):
        m = marker(args[i])
        if m == "enzyme_width":
            if seen:
                raise site.error("enzyme_width is given twice")
            site.width = _const_int(site, args, i + 1, "enzyme_width")
            seen = True
        elif m == "enzyme_context" and i + 1 < len(args):
            context_width = _context_width(args[i + 1])
    if context_width is not None:  # Enzyme: as many lanes as the context has
        if seen and context_width != site.width:
            raise site.error(f"enzyme_width {site.width}, but the context passed after "
                             f"enzyme_context has width {context_width}")
        site.width = context_width
    if site.width < 1:
        raise site.error(f"enzyme_width must be at least 1, got {site.width}")
    if site.width > 1 and site.mode not in ("forward", "batch"):
        if context_width is None:
            raise site.error("enzyme_width > 1 is supported in __enzyme_fwddiff and "
                             "__enzyme_batch only")
        raise site.error(f"the context passed after enzyme_context has width {site.width}; "
                         f"contexts of width > 1 are supported in __enzyme_fwddiff only",
                         hint="make the context with __enzyme_context(1)")


def _context_width(value) -> int | None:
    """The width of the context ``value`` when it is made by ``__enzyme_context`` with a
    constant width (through unoptimised code's stack slots); None when it cannot be told
    here (the derivative then checks the context's width when it runs)."""
    value = through_locals(value)
    if isinstance(value, I.Call) and value.called_function is not None and \
            value.called_function.name == CONTEXT_NEW and \
            isinstance(value.args[0], ConstantInt):
        return value.args[0].value
    return None


def _read_args(site: CallSite, args, start: int) -> None:
    fn, params = site.function, site.function.function_type.params
    forward = site.mode == "forward"
    param, i, n = 0, start, len(args)
    while i < n:
        m = marker(args[i])
        kind, marked, stride, skip, size = None, None, None, False, None
        while m is not None:
            if m == "pyzyme_byval":  # <enzyme/enzyme>: a struct by value, by address
                size = _const_int(site, args, i + 1, m)
                i += 1
            elif m in _ARG_MARKERS:
                kind, marked = _ARG_MARKERS[m], m
                if m.endswith("v"):
                    i += 1
                    if i >= n or not args[i].type.is_int:
                        raise site.error(f"{m} must be followed by an integer stride in bytes")
                    stride = i
            elif m == "enzyme_allocated":
                # The size of the caller's tape buffer; checked when it is a constant.
                if i + 1 >= n or not args[i + 1].type.is_int:
                    raise site.error("enzyme_allocated must be followed by the tape's size")
                size = args[i + 1]
                site.allocated = size.value if isinstance(size, ConstantInt) else None
                i, skip = i + 1, True
            elif m == "enzyme_tape":
                if i + 1 >= n:
                    raise site.error("enzyme_tape must be followed by the tape's address")
                site.tape, site.tape_is_pointer = i + 1, True
                i, skip = i + 1, True
            elif m == "enzyme_width":
                i, skip = i + 1, True
            elif m == "enzyme_context":
                if i + 1 >= n or not args[i + 1].type.is_pointer:
                    raise site.error("enzyme_context must be followed by a context "
                                     "(void *, from __enzyme_context)")
                if site.context is not None:
                    raise site.error("enzyme_context is given twice")
                site.context = i + 1
                i, skip = i + 1, True
            elif m == "enzyme_nofree":
                site.nofree = skip = True
            elif m == "enzyme_runtime_activity":
                site.runtime_activity = skip = True
            elif m in ("enzyme_strong_zero",) or m in _RETURN_MARKERS or \
                    m == "enzyme_primal_return":
                skip = True
            elif m in ("enzyme_not_overwritten", "enzyme_nocache"):
                # A promise about the argument that follows (it is not overwritten between
                # the passes, so Enzyme need not cache it): pyzyme finds what is overwritten
                # and caches that, which the promise does not change.
                pass
            else:
                raise site.error(f"unknown marker {m}",
                                 hint="markers are enzyme_dup, enzyme_dupnoneed, enzyme_out, "
                                      "enzyme_const, enzyme_width, enzyme_tape, "
                                      "enzyme_allocated, enzyme_primal_return, "
                                      "enzyme_const_return, enzyme_active_return, ...")
            if skip:
                break
            if site.mode == "size":
                site.size_kinds.append(kind)
                skip = True
                break
            i += 1
            if i >= n:
                raise site.error(f"{m} is the last argument: it must be followed by the "
                                 f"argument it marks")
            m = marker(args[i])
        if skip:
            i += 1
            continue
        if param == site.result_param:
            param += 1  # passed by the call as its own result
        if param >= len(params):
            _extra_argument(site, args, i)
            i += 1
            continue
        if size is not None:
            i, param = _read_struct(site, args, i, param, kind or Activity.CONST, marked,
                                    size)
            continue
        ty = params[param]
        if kind is None and ty.is_pointer and site.width == 1 and stride is None and \
                i + 1 < n and not args[i + 1].type.is_pointer:
            # Unmarked, and what follows cannot be its shadow: a constant (Enzyme reads
            # ``f(x, dx, &n, m)`` so, with ``int *`` n).
            kind = Activity.CONST
        kind = kind or default_activity(ty, forward)
        _check_kind(site, param, kind, marked or "enzyme_dup", ty)
        arg = Arg(param, kind, i, stride=stride)
        if kind is Activity.DUPLICATED:
            lanes = 1 if stride is not None else site.width
            if i + lanes >= n:
                raise site.error(
                    f"argument {param} of {fn.ref} ({ty}) is {marked or 'duplicated'}, but the "
                    f"call ends before its shadow",
                    hint="a duplicated argument is followed by its shadow (its tangent, in "
                         "forward mode)")
            arg.shadows = tuple(range(i + 1, i + 1 + lanes))
            i += lanes
        site.args.append(arg)
        param += 1
        i += 1
    if site.mode == "size":
        return
    if param == site.result_param:
        param += 1
    if param < len(params):
        own = len(params) - (site.result_param is not None)
        raise site.error(f"{fn.ref} takes {own} arguments, the call passes {len(site.args)}")
    if site.mode == "gradient" and site.tape is None:
        raise site.error("__enzyme_reverse needs the tape: after the arguments (and the "
                         "result's seed), or with enzyme_tape")
    if site.allocated is not None and site.allocated < 8:
        raise site.error(f"enzyme_allocated {site.allocated}: pyzyme's tape is one pointer "
                         f"(8 bytes); allocate at least 8 (__enzyme_augmentsize says 8)")


def _read_struct(site: CallSite, args, i: int, param: int, kind: Activity,
                 marked: str | None, size: int):
    """A struct of ``size`` bytes passed by value, given by its address at ``i`` (and its
    shadows' after it): the parameters the C ABI made of it, from ``param`` on. Each is one
    piece of the struct (an eightbyte on x86-64, loaded from its offset), or the whole of it
    (``byval``: the address itself). Returns where the call and the parameters go on."""
    fn, params = site.function, site.function.function_type.params
    lanes = site.width if kind is Activity.DUPLICATED else 0
    if i + lanes >= len(args) or any(not args[j].type.is_pointer
                                     for j in range(i, i + lanes + 1)):
        raise site.error(f"pyzyme_byval: the {size}-byte struct passed by value as argument "
                         f"{param} of {fn.ref} must be followed by its address"
                         f"{' and its shadow' if lanes else ''}")
    shadows = tuple(range(i + 1, i + 1 + lanes))
    pieces, offset = [], 0
    if "byval" in fn.args[param].attrs:
        pieces = [(param, None)]
    while not pieces or (pieces[-1][1] is not None and offset < size):
        p = param + len(pieces)
        if p >= len(params) or "byval" in fn.args[p].attrs:
            raise site.error(f"a {size}-byte struct passed by value as argument {param} of "
                             f"{fn.ref} does not match its parameters",
                             hint="pass the struct by reference or pointer")
        pieces.append((p, offset))
        offset = (offset + sizeof(params[p]) + 7) // 8 * 8
    for p, off in pieces:
        ty = params[p]
        if lanes and not (ty.is_pointer or _is_floaty(ty)):
            raise site.error(f"a struct passed by value as argument {param} of {fn.ref} is "
                             f"{marked or 'duplicated'}, but the C ABI passes part of it as {ty}, which may "
                             f"hold float bits", hint="pass the struct by reference or pointer")
        _check_kind(site, p, kind, marked or "enzyme_dup", ty)
        site.args.append(Arg(p, kind, i, shadows if lanes else (), offset=off))
    return i + 1 + lanes, param + len(pieces)


def _extra_argument(site: CallSite, args, i: int) -> None:
    """An argument after the function's own: the seed and the tape of ``__enzyme_reverse``."""
    if site.mode == "gradient":
        if site.ret is Activity.ACTIVE and site.dret is None:
            site.dret = i
            return
        if site.tape is None:
            site.tape = i
            return
    fn = site.function
    raise site.error(f"too many arguments: {fn.ref} takes {len(fn.function_type.params)}, "
                     f"and {show(args[i])} is one more")


def _check_kind(site: CallSite, param: int, kind: Activity, marked: str, ty) -> None:
    """Refuse ``kind`` (given by marker ``marked``, or the type's default) for type ``ty``."""
    what = f"argument {param} of {site.function.ref} ({ty})"
    if kind is Activity.ACTIVE and not _is_floaty(ty):
        raise site.error(f"{what} is marked enzyme_out, but only floats can be active",
                         hint="pointers are enzyme_dup, integers enzyme_const")
    if kind is Activity.DUPLICATED and not ty.is_pointer and not (
            site.mode == "forward" and _is_floaty(ty)):
        raise site.error(f"{what} is marked {marked.rstrip('v')}, but only pointers have "
                         f"shadows in reverse mode",
                         hint="floats are enzyme_out, integers enzyme_const")


def _read_batch(site: CallSite, args, start: int) -> CallSite:
    """``__enzyme_batch``: each argument ``enzyme_scalar`` (one value for every lane) or
    ``enzyme_vector`` (one value per lane, the default when the width is above 1)."""
    _read_width(site, args, start)
    params = site.function.function_type.params
    param, i, n = 0, start, len(args)
    while i < n:
        m = marker(args[i])
        if m == "enzyme_width":
            i += 2
            continue
        vector = site.width > 1
        if m in ("enzyme_scalar", "enzyme_vector"):
            vector = m == "enzyme_vector"
            i += 1
        elif m is not None:
            raise site.error(f"unknown marker {m} in __enzyme_batch",
                             hint="use enzyme_width, enzyme_scalar and enzyme_vector")
        if param >= len(params):
            raise site.error(f"too many arguments for {site.function.ref}")
        kind = Activity.DUPLICATED if vector else Activity.CONST
        lanes = site.width if vector else 1
        if i + lanes > n:
            raise site.error(f"argument {param} of {site.function.ref} is a vector of "
                             f"{site.width} values; the call ends before them")
        site.args.append(Arg(param, kind, i, tuple(range(i + 1, i + lanes))))
        param += 1
        i += lanes
    if param < len(params):
        raise site.error(f"{site.function.ref} takes {len(params)} arguments, the call "
                         f"passes {param}")
    return site
