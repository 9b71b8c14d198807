"""What a C module declares about its functions through Enzyme's globals, read.

Enzyme's convention: a global whose name starts with ``__enzyme_register_gradient``,
``__enzyme_register_derivative``, ``__enzyme_inactivefn``, ``__enzyme_function_like``,
``__enzyme_allocation_like`` (and ``llvm.global.annotations`` for pyzyme's spelling of the
clang attributes) lists functions and what they are. :func:`find_registrations` reads them all
into one :class:`Registrations`; the call sites themselves are read by
:mod:`~pyzyme.frontends.c.enzyme_calls`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme import ir
from pyzyme.frontends.c.enzyme_calls import EnzymeCallError, show
from pyzyme.ir.values import ConstantExpr, ConstantInt, GlobalVariable, Null

__all__ = ["Registrations", "find_registrations"]


@dataclass
class Registrations:
    """What a module declares about its functions through Enzyme's globals:

    - ``void *__enzyme_inactivefn[] = {(void *)f, ...};``: calls of ``f`` carry no
      derivative (``inactive``);
    - ``void *__enzyme_function_like[2] = {(void *)mylog, "log"};``: ``mylog`` is
      differentiated as the C library's ``log`` (``like``);
    - ``void *__enzyme_register_gradient_f[3] = {(void *)f, (void *)aug, (void *)rev};`` and
      ``void *__enzyme_register_derivative_f[2] = {(void *)f, (void *)fwd};``: ``f``'s
      derivatives are those functions (``registered``: ``{"f": {"augmented": "aug",
      "reverse": "rev", "forward": "fwd", "source": "@__enzyme_register_gradient_f"}}``;
      see :mod:`pyzyme.diff.calls.registered` for their conventions);
    - Enzyme's attributes, which reach the IR as annotations (``pyzyme cc`` spells them
      so: ``pyzyme/frontends/c/include/pyzyme_enzyme_attributes.h``):
      ``__attribute__((enzyme_inactive))`` on a function (``inactive``) or a global variable
      (``inactive_globals``), ``enzyme_function_like("log1p")`` (``like``),
      ``enzyme_shadow(g_shadow)`` on a global (``shadows``: global -> its shadow);
    - ``void *__enzyme_allocation_like[4] = {(void *)alloc, (void *)1, (void *)"2,-1",
      (void *)dealloc};``: ``alloc`` allocates memory of the size its argument 1 gives (its
      shadow comes from another call of it), which ``dealloc(alloc's argument 2, the
      memory)`` frees (``allocation_like``: ``{"alloc": {"size_arg": 1, "free": "dealloc",
      "free_pointer": 1, "source": ...}}``).
    """

    inactive: list[str] = field(default_factory=list)
    like: dict[str, str] = field(default_factory=dict)
    registered: dict[str, dict] = field(default_factory=dict)
    inactive_globals: list[str] = field(default_factory=list)
    shadows: dict[str, str] = field(default_factory=dict)
    allocation_like: dict[str, dict] = field(default_factory=dict)

    @property
    def rule_functions(self) -> list[str]:
        """The functions the registrations name: ruled functions and their derivatives,
        allocators and their deallocators."""
        out = []
        for name, reg in self.registered.items():
            out += [name] + [reg[k] for k in ("forward", "augmented", "reverse") if reg.get(k)]
        for name, reg in self.allocation_like.items():
            out += [name] + ([reg["free"]] if reg.get("free") else [])
        return list(dict.fromkeys(out))


def _elements(gv) -> list:
    init = gv.initializer
    return list(getattr(init, "elements", None) or ([init] if init is not None else []))


def _c_string(value) -> str | None:
    init = getattr(value, "initializer", None)
    text = getattr(init, "text", None)
    return text.split("\\00")[0] if text is not None else None


def _strip(value):
    while isinstance(value, ConstantExpr) and value.operands:
        value = value.operands[0]
    return value


# Enzyme's registration globals: how many functions each lists, and what they are.
_REGISTER = (("__enzyme_register_gradient", ("primal", "augmented", "reverse"),
              "{(void *)f, (void *)augmented_f, (void *)reverse_f}"),
             ("__enzyme_register_derivative", ("primal", "forward"),
              "{(void *)f, (void *)forward_f}"),
             ("__enzyme_register_splitderivative", ("primal", "augmented", "splitderivative"),
              "{(void *)f, (void *)augmented_f, (void *)derivative_f}"))


def _read_registration(gv, where: str, roles, shape: str, out: Registrations) -> None:
    items = [_strip(e) for e in _elements(gv)]
    fns = items[:len(roles)]
    if gv.initializer is None or len(items) != len(roles) or \
            not all(isinstance(f, ir.Function) for f in fns):
        got = ", ".join(show(e) if not isinstance(e, ir.Function) else e.ref for e in items)
        raise EnzymeCallError(
            f"{where}: {gv.ref} must be {shape}: {len(roles)} functions, got "
            f"{{{got or 'nothing'}}}",
            hint="list the function first, then its derivatives, each cast to (void *); "
                 "Enzyme's byref_ arguments are not supported")
    primal = fns[0].name
    reg = out.registered.setdefault(primal, {"source": ""})
    for role, fn in zip(roles[1:], fns[1:]):
        if role == "splitderivative":
            continue  # only __enzyme_fwdsplit uses it, which pyzyme does not provide
        if reg.get(role) not in (None, fn.name):
            raise EnzymeCallError(f"{where}: {gv.ref} registers a second {role} function "
                                  f"for {fns[0].ref} ({fn.ref}, after @{reg[role]})")
        reg[role] = fn.name
    reg["source"] = " and ".join(filter(None, [reg["source"], f"{where}: {gv.ref}"]))


def find_registrations(module) -> Registrations:
    """The :class:`Registrations` of ``module``.

    Raises
    ------
    EnzymeCallError
        For a malformed registration, naming its global.
    """
    out = Registrations()
    where = module.source_filename or module.name or "<module>"
    for gv in module.globals:
        name = gv.name
        found = next((r for r in _REGISTER if r[0] in name), None)
        if found is not None:
            _read_registration(gv, where, found[1], found[2], out)
        elif name.startswith("__enzyme_inactivefn"):
            for e in _elements(gv):
                e = _strip(e)
                if isinstance(e, ir.Function):
                    out.inactive.append(e.name)
        elif name.startswith("__enzyme_allocation_like"):
            _read_allocation_like(gv, where, out)
        elif name.startswith("__enzyme_function_like"):
            items = _elements(gv)
            fn = items[0] if items else None
            like = _c_string(items[1]) if len(items) > 1 else None
            if not isinstance(fn, ir.Function) or not like:
                raise EnzymeCallError(f"{where}: {name} must be {{(void *)function, "
                                      f"\"name\"}}")
            out.like[fn.name] = like
    annotations = module.get_global("llvm.global.annotations")
    if annotations is not None:
        for entry in _elements(annotations):
            _read_annotation(entry, out)
    for primal, reg in out.registered.items():
        if "augmented" in reg and primal in out.inactive:
            raise EnzymeCallError(f"{reg['source']} registers a gradient for @{primal}, which "
                                  f"__enzyme_inactivefn declares inactive")
    return out


def _read_allocation_like(gv, where: str, out: Registrations) -> None:
    """``{(void *)alloc, (void *)SIZE_ARG, (void *)"DEALLOC_ARGS", (void *)dealloc}``:
    DEALLOC_ARGS lists, for each argument of ``dealloc``, the argument of ``alloc`` passed
    there, or -1 for the memory itself."""
    items = [_strip(e) for e in _elements(gv)]
    shape = (f"{where}: {gv.name} must be {{(void *)alloc, (void *)size_argument, "
             f"(void *)\"deallocator arguments\", (void *)dealloc}}")
    if len(items) != 4 or not isinstance(items[0], ir.Function) or \
            not isinstance(items[1], (ConstantInt, Null)):
        raise EnzymeCallError(shape)
    alloc, size_arg = items[0], getattr(items[1], "value", 0)  # (void *)0 is null
    if not 0 <= size_arg < len(alloc.function_type.params) or \
            not alloc.function_type.params[size_arg].is_int:
        raise EnzymeCallError(f"{where}: {gv.name}: argument {size_arg} of {alloc.ref} is not "
                              f"an integer size")
    reg = {"size_arg": size_arg, "source": f"@{gv.name}"}
    if isinstance(items[3], ir.Function):
        spec = _c_string(items[2]) or ""
        try:
            roles = [int(t) for t in spec.split(",") if t.strip()]
        except ValueError:
            raise EnzymeCallError(f"{shape}; the deallocator's arguments are not "
                                  f"{spec!r}") from None
        if roles.count(-1) != 1 or len(roles) != len(items[3].function_type.params):
            raise EnzymeCallError(f"{shape}: {spec!r} must name each argument of "
                                  f"{items[3].ref}, one of them the memory (-1)")
        reg.update(free=items[3].name, free_pointer=roles.index(-1))
    out.allocation_like[alloc.name] = reg


# Enzyme's attributes as pyzyme_enzyme_attributes.h spells them, and what they carry.
_HINT_ANNOTATIONS = ("enzyme_no_escaping_allocation", "enzyme_notypeanalysis")


def _read_annotation(entry, out: Registrations) -> None:
    """One ``{ptr @decl, ptr @"text", ptr @file, i32 line, ptr @args}`` of
    ``@llvm.global.annotations``: an Enzyme attribute, recorded in ``out``."""
    fields = list(getattr(entry, "elements", None) or ())
    if len(fields) < 4:
        return
    decl, text = _strip(fields[0]), _c_string(_strip(fields[1]))
    if text is None or not text.startswith("enzyme_"):
        return
    file = _c_string(_strip(fields[2])) or "<module>"
    line = getattr(fields[3], "value", "?")
    where = f"{file}:{line}"
    name, _, value = text.partition(":")
    is_fn = isinstance(decl, ir.Function)
    if name in ("enzyme_inactive", "enzyme_inactive_noblock") and is_fn:
        out.inactive.append(decl.name)
    elif name == "enzyme_inactive" and isinstance(decl, GlobalVariable):
        out.inactive_globals.append(decl.name)
    elif name == "enzyme_function_like" and is_fn and value:
        out.like[decl.name] = value
    elif name == "enzyme_shadow" and isinstance(decl, GlobalVariable):
        args = list(getattr(getattr(_strip(fields[4]), "initializer", None), "elements", None)
                    or ()) if len(fields) > 4 else []
        shadow = _strip(args[0]) if args else None
        if not isinstance(shadow, GlobalVariable):
            raise EnzymeCallError(f"{where}: enzyme_shadow of {decl.ref} must name a global "
                                  f"variable")
        out.shadows[decl.name] = shadow.name
    elif name in _HINT_ANNOTATIONS:
        pass  # facts pyzyme's own analyses establish
    else:
        raise EnzymeCallError(f"{where}: the Enzyme attribute {name} on {decl.ref} is not "
                              f"supported", hint="pyzyme reads enzyme_inactive, "
                              "enzyme_inactive_noblock, enzyme_function_like and enzyme_shadow")
