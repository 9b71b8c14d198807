"""Derivatives of plain LLVM functions (C, C++, any language), from pyzyme's generators.

The Numba path knows each argument's meaning from Numba's signature; a plain LLVM function has
only its LLVM types. As Enzyme does for C, each parameter's :class:`Activity` is given (or
spelled as Enzyme's markers name it: ``"const"``, ``"active"``, ``"dup"``, ``"dupnoneed"``, read
by :func:`to_activity`) or defaulted from the type (Enzyme's ``whatType``): a pointer is
duplicated, a float is active, an integer is constant. Type analysis
is seeded from the LLVM types alone (integers are integers), and deduces what memory holds
from the loads and stores of the function.

The functions generated, in the module holding the primal:

- forward, width N: ``(params..., N derivatives of each non-const param...) -> {ret, d1..dN}``;
- combined reverse: ``(params..., shadows..., dret?) -> {ret?, adjoints of active params}``;
- split reverse: ``augmented(params, shadows) -> {ret?, tape}`` and
  ``reverse(params, shadows, dret?, i1 discard, tape) -> {adjoints}``.

Examples
--------
>>> from pyzyme import ir
>>> m = ir.parse_module('''define double @sq(double %x) {
...   %y = fmul double %x, %x
...   ret double %y
... }''')
>>> d = Derivatives(m)
>>> print(d.combined(m.get_function("sq"), ["active"]).function_type)
{ double, double } (double, double)
>>> print(d.forward(m.get_function("sq"), ["dup"], width=2).function_type)
{ double, double, double } (double, double, double)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pyzyme import ir
from pyzyme.analysis.activity import Activity
from pyzyme.analysis.typetree import INTEGER, TypeTree
from pyzyme.analysis.type_analysis import ENZYME_HINTS
from pyzyme.errors import UnsupportedError

__all__ = ["KINDS", "Derivatives", "default_activity", "to_activity", "to_activities",
           "type_seeds"]

#: Activities as Enzyme's markers spell them (``enzyme_out`` is ``"active"``; pyzyme treats
#: ``dupnoneed`` as ``dup``): read only at the edge, by :func:`to_activity`.
KINDS = {"const": Activity.CONST, "active": Activity.ACTIVE, "out": Activity.ACTIVE,
         "dup": Activity.DUPLICATED, "duplicated": Activity.DUPLICATED,
         "dupnoneed": Activity.DUPLICATED}


def _is_floaty(ty: ir.Type) -> bool:
    """A float, a vector of floats, or an aggregate made only of floats."""
    if ty.is_float:
        return True
    if isinstance(ty, ir.VectorType):
        return ty.element.is_float
    if isinstance(ty, ir.ArrayType):
        return _is_floaty(ty.element)
    if isinstance(ty, (ir.StructType, ir.IdentifiedStructType)) and ty.elements:
        return all(_is_floaty(e) for e in ty.elements)
    return False


def default_activity(ty: ir.Type, forward: bool) -> Activity:
    """Enzyme's default activity of an argument of LLVM type ``ty`` (in forward mode a float
    is duplicated: followed by its tangent).

    >>> default_activity(ir.double, forward=False), default_activity(ir.double, forward=True)
    (<Activity.ACTIVE: 'active'>, <Activity.DUPLICATED: 'duplicated'>)
    >>> default_activity(ir.ptr, forward=False), default_activity(ir.i32, forward=False)
    (<Activity.DUPLICATED: 'duplicated'>, <Activity.CONST: 'const'>)
    """
    if ty.is_pointer:
        return Activity.DUPLICATED
    if _is_floaty(ty):
        return Activity.DUPLICATED if forward else Activity.ACTIVE
    return Activity.CONST


#: pyzyme's annotation classes, by name (this layer does not import the API that defines them).
_ANNOTATIONS = {"Active": Activity.ACTIVE, "Const": Activity.CONST,
                "Duplicated": Activity.DUPLICATED, "DuplicatedNoNeed": Activity.DUPLICATED,
                "BatchDuplicated": Activity.DUPLICATED,
                "BatchDuplicatedNoNeed": Activity.DUPLICATED}


def to_activity(kind) -> Activity:
    """The :class:`Activity` of a kind given as one, as a pyzyme annotation class
    (``Active``, ``Const``, ``Duplicated``, ``DuplicatedNoNeed``) or as Enzyme spells it
    (:data:`KINDS`).

    >>> to_activity("dupnoneed"), to_activity(Activity.CONST)
    (<Activity.DUPLICATED: 'duplicated'>, <Activity.CONST: 'const'>)
    """
    if isinstance(kind, Activity):
        return kind
    found = _ANNOTATIONS.get(kind.__name__) if isinstance(kind, type) else KINDS.get(kind)
    if found is None:
        raise UnsupportedError(f"unknown argument kind {getattr(kind, '__name__', kind)!r}",
                               hint=f"use one of {sorted(KINDS)}")
    return found


def to_activities(fn, kinds: Sequence | None, forward: bool) -> tuple[Activity, ...]:
    """One :class:`Activity` per parameter of ``fn``: ``kinds`` (None: Enzyme's defaults),
    checked against the parameters' types."""
    params = fn.function_type.params
    if kinds is None:
        kinds = [default_activity(t, forward) for t in params]
    acts = [to_activity(k) for k in kinds]
    if len(acts) != len(params):
        raise UnsupportedError(
            f"{fn.ref} has {len(params)} parameters, but {len(acts)} argument kinds were given")
    out = []
    for i, (act, ty) in enumerate(zip(acts, params)):
        if act is Activity.ACTIVE and not _is_floaty(ty):
            raise UnsupportedError(
                f"parameter {i} of {fn.ref} is {ty}: only floats (and aggregates of floats) can "
                f"be active", hint="pass pointers as dup and integers as const")
        if act is Activity.DUPLICATED and not ty.is_pointer:
            if forward and _is_floaty(ty):
                act = Activity.ACTIVE  # a float followed by its tangent
            else:
                raise UnsupportedError(
                    f"parameter {i} of {fn.ref} is {ty}: only pointers have shadows in reverse "
                    f"mode", hint="pass floats as active (enzyme_out) and integers as const")
        out.append(act)
    return tuple(out)


def type_seeds(fn) -> dict[int, TypeTree]:
    """What the LLVM types say of ``fn``'s parameters beyond the analysis' own defaults: an
    integer parameter holds an integer (Enzyme seeds C functions the same way)."""
    return {i: TypeTree({(-1,): INTEGER}) for i, t in enumerate(fn.function_type.params)
            if t.is_int and not t.is_vector}


# C library functions that never carry derivatives (Enzyme knows the same ones): output,
# clocks, random numbers, process exit, comparisons of strings and bytes (clang makes a
# std::string's == a bcmp), and the size query of the realloc expansion
# (pyzyme.frontends.ad_copy.expand_realloc).
C_INACTIVE = ("printf", "fprintf", "puts", "putchar", "fputs", "fputc", "fflush", "fwrite",
              "sprintf", "snprintf", "perror", "time", "clock", "clock_gettime", "gettimeofday",
              "rand", "srand", "random", "srandom", "abort", "exit", "__assert_fail",
              "malloc_usable_size", "getenv", "strlen", "strcmp", "strncmp", "memcmp",
              "bcmp")


# The C++ standard library's streams, locales, strings and hashing (the library's compiled
# functions, and the inline templates around them): they format, parse and move characters
# and integers, never derivatives. Enzyme treats them as inactive too.
_CXX_INACTIVE_CLASSES = (
    "ios_base", "basic_ios", "basic_ostream", "basic_istream", "basic_iostream",
    "basic_streambuf", "basic_filebuf", "basic_stringbuf", "basic_stringstream",
    "basic_istringstream", "basic_ostringstream", "basic_ifstream", "basic_ofstream",
    "basic_fstream", "basic_string", "ostreambuf_iterator", "istreambuf_iterator", "locale",
    "ctype", "codecvt", "num_put", "num_get",
    "numpunct", "__put_character_sequence", "__next_prime", "__hash_memory",
    "__murmur2_or_cityhash", "__libcpp_verbose_abort", "__throw_", "__shared_count",
    "__shared_weak_count")
# What follows ``_Z`` before the name of an entity of namespace std: a thunk's offsets, the
# nested name's qualifiers, ``St``, libc++'s inline namespace (``3__1``).
_CXX_STD = re.compile(r"_Z(?:T[hv](?:n?\d+_)+)?(N[rVKRO]*)?St(?:3__\d)?")
# What opens a bracket that ``E`` closes in a mangled name: template arguments, nested names,
# literals, expressions, packs.
_OPENS = frozenset("INLXJ")
# Tokens holding a number: substitutions (S_, S0_), template parameters (T_, T1_), vector
# types (Dv4_).
_NUMBERED = re.compile(r"[ST][0-9A-Z]*_|Dv\d+_")


def cxx_library_inactive(name: str) -> bool:
    """Whether ``name`` (a mangled C++ function) is a stream, locale, string or hashing
    function of the standard library: inactive, as Enzyme has it.

    The class a member function belongs to decides, not its template arguments (a hash
    table keyed by strings holds doubles: ``unordered_map<string, double>::operator[]`` is
    active). A function of namespace std that is no member is inactive when its name is
    listed, or when a stream or locale class is among its parameter types (``getline``,
    ``endl``); an operator, when any listed class is (a string's ``==``, a stream's ``<<``).

    >>> cxx_library_inactive("_ZNKSt3__18ios_base6getlocEv")
    True
    >>> cxx_library_inactive("_ZNSt3__16vectorIdNS_9allocatorIdEEE9push_backERKd")
    False
    >>> cxx_library_inactive("_ZNSt3__113unordered_mapINS_12basic_stringIcNS_11char_traitsIcEE"
    ...                      "NS_9allocatorIcEEEEdNS_4hashIS6_EENS_8equal_toIS6_EENS4_INS_4pair"
    ...                      "IKS6_dEEEEEixEOS6_")
    False
    """
    m = _CXX_STD.match(name)
    if m is None:
        return False
    at = m.end()
    rest = name[at:]
    if not rest[:1].isdigit():  # an operator (or a constructor of std itself): its types
        return any(c in rest for c in _CXX_INACTIVE_CLASSES)
    first, at = _source_name(name, at)
    if any(first == c or (c.endswith("_") and first.startswith(c))
           for c in _CXX_INACTIVE_CLASSES):
        return True
    while at >= 0 and name.startswith("B", at):  # ABI tags
        _, at = _source_name(name, at + 1)
    if at >= 0 and name.startswith("I", at):
        at = _skip_bracket(name, at)
    if at < 0:
        return False  # a name not understood: not inactive
    if m.group(1) is not None and not name.startswith("E", at):
        # A member of another class: inactive only when it throws (vector's
        # __throw_length_error).
        return _source_name(name, at)[0].startswith("__throw_")
    return any(c in name[at:] for c in _CXX_INACTIVE_CLASSES if c != "basic_string")


def _source_name(name: str, at: int) -> tuple[str, int]:
    """The ``<length><identifier>`` at ``at`` and where it ends (``('', -1)`` if none)."""
    digits = re.match(r"\d+", name[at:])
    if digits is None:
        return "", -1
    start = at + digits.end()
    end = start + int(digits.group(0))
    return name[start:end], end if end <= len(name) else -1


def _skip_bracket(name: str, at: int) -> int:
    """Where the bracket opened at ``at`` (``I...E``) ends; identifiers inside are skipped
    whole (their letters are no brackets). -1 if it does not end."""
    depth = 0
    while 0 <= at < len(name):
        c = name[at]
        if c.isdigit():
            _, at = _source_name(name, at)
            continue
        token = _NUMBERED.match(name, at)  # S0_, T1_, Dv2_: numbers, not identifiers
        if token is not None:
            at = token.end()
            continue
        if c == "L" and name[at + 1:at + 2].islower():  # a literal: L, type, number, E
            end = name.find("E", at)
            at = -1 if end < 0 else end + 1
            continue
        if c in _OPENS:
            depth += 1
        elif c == "E":
            depth -= 1
            if depth == 0:
                return at + 1
        at += 1
    return -1


def c_rules(module=None, inactive=(), like=None, registered=None, inactive_globals=(),
            allocation_like=None, rows=()):
    """pyzyme's rule table plus the C library's inactive functions, the functions named in
    ``inactive``, the global variables named in ``inactive_globals`` (stores into them drop
    the stored value's derivative), a row for each function in ``like`` (``{"mylog": "log"}``: differentiated
    by the row of ``log``), a :class:`~pyzyme.rules.spec.Registered` row for each function in
    ``registered`` (derivatives the module registers: see
    :class:`~pyzyme.frontends.c.registrations.Registrations`), an allocation row for each
    allocator in ``allocation_like`` (and a row freeing shadows for its deallocator), the
    ``rows`` given (a runtime's functions) and, when ``module`` is given, the
    UBSan handlers it declares (a debug build with sanitizers reports errors through them;
    they carry no derivative).

    >>> rules = c_rules(like={"mylog": "log"}, inactive=["trace"])
    >>> rules.lookup("mylog").names, rules.lookup("trace").kind
    (('mylog',), 'libm')
    """
    import dataclasses

    from pyzyme.rules import default_rules
    from pyzyme.rules.spec import Allocation, Inactive, Mirror, Registered
    from pyzyme.rules.table import RuleTable

    table = RuleTable(default_rules().rows())
    if table.lookup("aligned_alloc") is None:  # posix_memalign becomes it (frontends.ad_copy)
        table.add(Allocation(("aligned_alloc",), "libm", size_args=(1,)))
    for name, reg in (registered or {}).items():
        if table.lookup(name) is not None:
            raise UnsupportedError(f"{reg['source']}: @{name} already has a derivative in "
                                   f"pyzyme's rule table; its registration would replace it")
        table.add(Registered((name,), "custom", forward=reg.get("forward"),
                             augmented=reg.get("augmented"), reverse=reg.get("reverse"),
                             source=reg["source"]))
    for row in rows:
        table.add(row)
    for name, reg in (allocation_like or {}).items():
        table.add(Allocation((name,), "custom", size_args=(reg["size_arg"],)))
        if reg.get("free"):
            table.add(Mirror((reg["free"],), "custom", pointer_args=(reg["free_pointer"],),
                             releases=True))
    names = list(C_INACTIVE) + list(inactive)
    if module is not None:
        names += [f.name for f in module.functions if cxx_library_inactive(f.name) or (
            f.is_declaration and f.name.startswith("__ubsan_"))]
    for name, target in (like or {}).items():
        row = table.lookup(target)
        if row is None:
            raise UnsupportedError(f"__enzyme_function_like: pyzyme has no derivative of "
                                   f"{target!r} to give {name!r}")
        table.add(dataclasses.replace(row, names=(name,)))
    hints = [n for n in ENZYME_HINTS if table.lookup(n) is None]
    if hints:  # read by type analysis; no effect on values, removed once derivatives exist
        table.add(Inactive(tuple(hints), "libm", reason="Enzyme's type hints: what memory "
                           "holds", writes=()))
    names = [n for n in dict.fromkeys(names) if table.lookup(n) is None]
    if names:
        table.add(Inactive(tuple(names), "libm", reason="C library function without a "
                           "derivative (output, clocks, random numbers, sanitizers)"))
    if inactive_globals:
        table.add(Inactive(tuple(inactive_globals), "custom", reason="global variable declared "
                           "inactive: what is stored there carries no derivative"))
    return table.freeze()


class Derivatives:
    """The generators of one module, memoized: a split pair asked for by two call sites (an
    augmented forward pass and its reverse pass) is the same pair.

    Parameters
    ----------
    module
        The module holding the primal functions; derivatives are added to it.
    rules
        The rule table; by default :func:`c_rules` of the module.
    options
        The :class:`~pyzyme.settings.Options` derivatives are generated under (Enzyme's
        ``enzyme_runtime_activity`` is ``Options(runtime_activity=True)``).
    later_round
        Whether a later round differentiates the generated code (a nested derivative).
    """

    def __init__(self, module, rules=None, options=None, later_round: bool = False) -> None:
        from pyzyme.diff.forward.generator import ForwardGenerator
        from pyzyme.diff.reverse.generator import ReverseGenerator

        self.module = module
        self.rules = rules if rules is not None else c_rules(module)
        self._forward = ForwardGenerator(module, self.rules, options)
        self._reverse = ReverseGenerator(module, self.rules, options, later_round)

    def forward(self, fn, kinds: Sequence | None = None, width: int = 1, name=None):
        """The forward derivative of ``fn`` with ``width`` tangents per non-const argument."""
        from pyzyme.diff.forward.generator import ForwardSignature

        acts = to_activities(fn, kinds, forward=True)
        return self._forward.derivative(fn, ForwardSignature.standard(fn, acts, width), name)

    def _reverse_sig(self, fn, kinds, return_active, split: bool):
        from pyzyme.diff.reverse.generator import ReverseSignature

        acts = to_activities(fn, kinds, forward=False)
        if return_active is None:
            return_active = _is_floaty(fn.return_type)
        if return_active and not _is_floaty(fn.return_type):
            raise UnsupportedError(f"{fn.ref} returns {fn.return_type}, which cannot be active")
        self._reverse.type_seeds.setdefault(fn, type_seeds(fn))
        # A split pair's caller runs on between the two halves and may write what the
        # arguments point to; a combined derivative is one call.
        return ReverseSignature(acts, return_active=bool(return_active),
                                memory_stable=not split, split=split)

    def combined(self, fn, kinds: Sequence | None = None, return_active: bool | None = None,
                 name=None):
        """The combined reverse derivative of ``fn`` (the result's seed is its last
        parameter when ``return_active``; by default a float result is active)."""
        return self._reverse.derivative(fn, self._reverse_sig(fn, kinds, return_active, False),
                                        name)

    def split(self, fn, kinds: Sequence | None = None, return_active: bool | None = None):
        """The :class:`~pyzyme.diff.reverse.generator.SplitPair` of ``fn``."""
        return self._reverse.derivative(fn, self._reverse_sig(fn, kinds, return_active, True))
