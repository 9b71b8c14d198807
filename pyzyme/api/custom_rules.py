"""User rules (:mod:`pyzyme.rules.custom`) as rows of the rule table the generators read.

:func:`rule_table` gives, for one derivative build, pyzyme's own rows plus one row per native
symbol of each ``@njit`` function that has user rules: an
:class:`~pyzyme.rules.spec.Inactive` row for a function marked inactive, a
:class:`~pyzyme.rules.spec.Custom` row otherwise. The Custom row's :class:`CompiledRules`
compiles the user's rule functions with Numba when the generator meets a call (only then are
the activities of its arguments known) and checks what they return, so that a rule returning
the wrong thing is an error naming the rule, never a derivative read from the wrong bytes.

Examples
--------
>>> import numba, numpy as np
>>> from numba.core import types
>>> from pyzyme import rules
>>> from pyzyme.rules import default_rules
>>> @numba.njit
... def cube(x):
...     return x * x * x
>>> @rules.forward(cube)
... def cube_fwd(config, x, dx):
...     return x * x * x, 3.0 * x * x * dx
>>> _ = cube.compile((types.float64,))
>>> table = rule_table(default_rules(), rules.REGISTRY)
>>> row = table.lookup(cube.overloads[(types.float64,)].fndesc.llvm_func_name, "call")
>>> native = row.rules.forward((True,), 1, True)
>>> native.config
Config(needs_primal=True, needs_shadow=True, width=1, overwritten=(False,))
>>> [[f.field for f in e] for e in native.elements]
[['result[0]'], ['result[1]']]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from numba import typeof
from numba.core import types

from pyzyme.api.dispatchers import njit_of
from pyzyme.errors import RuleError, UnsupportedError
from pyzyme.frontends.numba.abi import AbiMap
from pyzyme.rules import spec
from pyzyme.rules.custom import Config, Registry

__all__ = ["rule_table", "UserRuleTable", "CompiledRules", "NativeRule"]


@dataclass(frozen=True)
class NativeRule:
    """One compiled rule function: its native ``symbol``, its ``abi``, the ``config`` it was
    compiled for, and the result fields of each element of what it returns."""

    symbol: str
    abi: AbiMap
    config: Config
    elements: tuple[tuple, ...]
    restype: Any
    lanes: int = 1     # calls per call site: a one-tangent forward rule is called per tangent
    rule: Any = None   # the rule's dispatcher, and the types it was compiled for
    argtypes: tuple = ()


def rule_table(base, registry: Registry) -> UserRuleTable | Any:
    """``base`` with the rows of the functions in ``registry`` in front (``base`` itself when
    there are none)."""
    entries = registry.functions()
    return UserRuleTable(base, entries, registry.generation) if entries else base


class UserRuleTable:
    """A rule table (``lookup``) answering for user-ruled symbols first, then ``base``.

    Symbols are found among the compiled overloads of each ruled function when asked (a
    function compiled while the differentiated one was, for new argument types, is found too).
    """

    def __init__(self, base, entries, generation: int) -> None:
        self.base = base
        self.entries = list(entries)
        self.generation = generation
        self._rows: dict[str, spec.Row] = {}
        self._seen = -1

    def lookup(self, name: str, space: str | None = None):
        if space != "opcode":
            row = self._row(name)
            if row is not None:
                return row
        return self.base.lookup(name, space)

    def keeps_call(self, name: str) -> bool:
        """Whether calls of ``name`` must stay calls (capture asks)."""
        return self._row(name) is not None or self.checkpointed(name)

    def checkpointed(self, name: str) -> bool:
        """Whether ``name`` is a native symbol of a function marked ``pyzyme.checkpoint``,
        whose calls reverse mode recomputes instead of taping."""
        entry = _entry_of(self, name)
        return entry is not None and entry.checkpoint

    def releases_inlining(self, name: str) -> bool:
        """Whether the function ``name``, kept ``noinline`` by capture only so that the
        generators would see its calls, may be inlined once its callers are differentiated
        (:func:`pyzyme.pipeline.release_inlining` asks): every ruled function but those
        marked ``inactive_noinline``."""
        entry = _entry_of(self, name)
        return entry is not None and not entry.noinline

    def rows(self):
        return self.base.rows()

    def _row(self, name: str):
        count = sum(len(e.function.overloads) for e in self.entries)
        if count != self._seen:
            self._seen = count
            for entry in self.entries:
                if entry.checkpoint:
                    continue  # no rule: its body is differentiated, its calls checkpointed
                for argtypes, cres in list(entry.function.overloads.items()):
                    symbol = cres.fndesc.llvm_func_name
                    if symbol not in self._rows:
                        self._rows[symbol] = _make_row(entry, symbol, cres)
        return self._rows.get(name)

    def natives(self) -> list[NativeRule]:
        """The rule functions compiled for this table's derivatives so far."""
        return [n for row in self._rows.values() if isinstance(row, spec.Custom)
                for n in row.rules._compiled.values()]

    def with_rule_bodies(self, module):
        """``module`` (a :class:`pyzyme.ir.Module`) with the bodies of the rule functions it
        calls linked in, so that differentiating it again (``hvp``) goes through them."""
        from pyzyme import ir
        from pyzyme.frontends.numba import capture
        from pyzyme.runtime import modules

        wanted = {}
        for native in self.natives():
            fn = module.get_function(native.symbol)
            if fn is not None and fn.is_declaration:
                wanted[native.symbol] = native
        if not wanted:
            return module
        linked = modules.parse(str(module), what="module calling rule functions")
        for native in wanted.values():
            cap = capture(native.rule, native.argtypes, keep_calls=self.keeps_call)
            part = modules.parse(cap.text, what=f"rule {native.abi.function}")
            linked.link_in(modules.module_for_linking(part))
        return ir.parse_module(str(linked))

    def __str__(self) -> str:
        self._row("")
        lines = [f"user rules (generation {self.generation}) over {len(self.base)} rows"]
        lines += [f"  {sym}: {row.kind} {type(row).__name__}" for sym, row in self._rows.items()]
        return "\n".join(lines)


def _entry_of(table: UserRuleTable, symbol: str):
    for entry in table.entries:
        if any(c.fndesc.llvm_func_name == symbol for c in entry.function.overloads.values()):
            return entry
    return None


def _make_row(entry, symbol: str, cres) -> spec.Row:
    name = entry.function.py_func.__qualname__
    if entry.inactive:
        return spec.Inactive((symbol,), "custom", reason=f"{name} is marked inactive by "
                                                          f"pyzyme.rules")
    abi = AbiMap.from_signature(cres.target_context, name, tuple(cres.fndesc.args),
                                cres.signature)
    return spec.Custom((symbol,), "custom", rules=CompiledRules(entry, abi))


class CompiledRules:
    """The rule functions of one compiled signature of a ruled function, compiled on demand
    for the activities of a call site (what :mod:`pyzyme.diff.calls.custom` asks for)."""

    def __init__(self, entry, abi: AbiMap) -> None:
        self.entry = entry
        self.abi = abi
        self.name = abi.function
        self._compiled: dict[tuple, NativeRule] = {}

    # -- what the generators call --------------------------------------------------------
    def forward(self, shadowed: tuple[bool, ...], width: int, needs_shadow: bool) -> NativeRule:
        """The forward rule for ``width`` tangents per argument. A rule that does not compile
        for tuples of tangents is called once per tangent (``lanes == width``), so a rule
        written for one tangent serves batch mode too."""
        key = ("forward", shadowed, width, needs_shadow)
        if key not in self._compiled:
            try:
                native = self._forward(shadowed, width, needs_shadow)
            except RuleError as batched:
                if width == 1:
                    raise
                try:
                    native = replace(self._forward(shadowed, 1, needs_shadow), lanes=width)
                except RuleError as single:
                    raise RuleError(f"{batched}; called once per tangent instead: "
                                    f"{single}") from single
            self._compiled[key] = native
        return self._compiled[key]

    def _forward(self, shadowed, width: int, needs_shadow: bool) -> NativeRule:
        config = self._config(needs_shadow, width)
        shadows = [self._shadow_type(a, s, width) for a, s in zip(self.abi.args, shadowed)]
        argtypes = [typeof(config)] + _interleave(self._argtypes(), shadows)
        native = self._compile("forward", argtypes, config)
        return self._check_forward(native, width, needs_shadow)

    def augmented(self, shadowed: tuple[bool, ...], needs_shadow: bool) -> NativeRule:
        key = ("augmented_primal", shadowed, needs_shadow)
        if key not in self._compiled:
            config = self._config(needs_shadow, 1)
            shadows = [self._shadow_type(a, s, 1, reverse=True)
                       for a, s in zip(self.abi.args, shadowed)]
            argtypes = [typeof(config)] + _interleave(self._argtypes(), shadows)
            native = self._compile("augmented_primal", argtypes, config)
            self._compiled[key] = self._check_augmented(native, needs_shadow)
        return self._compiled[key]

    def reverse(self, shadowed: tuple[bool, ...], needs_shadow: bool) -> NativeRule:
        key = ("reverse", shadowed, needs_shadow)
        if key not in self._compiled:
            aug = self.augmented(shadowed, needs_shadow)
            config = aug.config
            shadows = [self._shadow_type(a, s, 1, reverse=True)
                       for a, s in zip(self.abi.args, shadowed)]
            restype = self.abi.signature.return_type
            dret = restype if _float_carrying(restype) else types.none
            tape = aug.restype[2]
            argtypes = [typeof(config), dret, tape] + _interleave(self._argtypes(),
                                                                       shadows)
            native = self._compile("reverse", argtypes, config)
            self._compiled[key] = self._check_reverse(native)
        return self._compiled[key]

    # -- building the signatures ---------------------------------------------------------
    def _argtypes(self) -> list:
        return list(self.abi.signature.args)

    def _config(self, needs_shadow: bool, width: int) -> Config:
        # An argument passed in memory may be written between the sweeps; the rule cannot
        # know, so it is told whenever it could be (Enzyme's conservative ``overwritten``).
        overwritten = tuple(any(p.llvm_type == "ptr" for p in a.params) for a in self.abi.args)
        return Config(True, bool(needs_shadow), int(width), overwritten)

    @staticmethod
    def _shadow_type(arg, shadowed: bool, width: int, reverse: bool = False):
        if not shadowed:
            return types.none
        ty = arg.numba_type
        if reverse and not any(p.llvm_type == "ptr" for p in arg.params):
            return types.none  # reverse mode returns a float's derivative; it has no shadow
        return ty if width == 1 else types.UniTuple(ty, width)

    def _compile(self, kind: str, argtypes: list, config: Config) -> NativeRule:
        rule = getattr(self.entry, kind)
        if rule is None:
            mode = "forward" if kind == "forward" else "reverse"
            missing = ("rules.forward" if kind == "forward"
                       else "rules.augmented_primal and rules.reverse")
            raise UnsupportedError(
                f"{self.name} has custom rules but no {kind} rule, which {mode} mode needs",
                hint=f"register {missing} for it (or remove its rules to differentiate its "
                     f"body)")
        disp = njit_of(rule)
        rule_name = disp.py_func.__qualname__
        shown = ", ".join(map(str, argtypes))
        cres = disp.overloads.get(tuple(argtypes))
        if cres is None:
            try:
                disp.compile(tuple(argtypes))
            except Exception as err:  # noqa: BLE001 - Numba's typing errors are many classes
                first = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
                raise RuleError(f"the {kind} rule {rule_name} of {self.name} does not compile "
                                f"for ({shown}): {first}") from err
            cres = disp.overloads[tuple(argtypes)]
        abi = AbiMap.from_signature(cres.target_context, rule_name, tuple(cres.fndesc.args),
                                    cres.signature)
        return NativeRule(cres.fndesc.llvm_func_name, abi, config, (),
                          cres.signature.return_type, rule=disp, argtypes=tuple(argtypes))

    # -- checking what the rules return ---------------------------------------------------
    def _elements(self, native: NativeRule, count: int, kind: str, shape: str) -> list:
        restype = native.restype
        if not isinstance(restype, types.BaseTuple) or len(restype) != count:
            raise RuleError(f"the {kind} rule of {self.name} returns {restype}; it must return "
                            f"{shape}")
        return [_fields_of(native.abi, i) for i in range(count)]

    def _expect(self, got, want, kind: str, what: str) -> None:
        if got != want:
            raise RuleError(f"the {kind} rule of {self.name} returns {got} as {what}; "
                            f"expected {want}")

    def _check_forward(self, native: NativeRule, width: int, needs_shadow: bool) -> NativeRule:
        restype = self.abi.signature.return_type
        if restype == types.none and native.restype == types.none:
            return _with(native, ((), ()))
        elements = self._elements(native, 2, "forward", "(primal, tangent)")
        self._expect(native.restype[0], restype, "forward", "the primal")
        if needs_shadow:
            want = restype if width == 1 else types.UniTuple(restype, width)
            self._expect(native.restype[1], want, "forward", "the tangent")
        return _with(native, elements)

    def _check_augmented(self, native: NativeRule, needs_shadow: bool) -> NativeRule:
        restype = self.abi.signature.return_type
        elements = self._elements(native, 3, "augmented_primal", "(primal, shadow, tape)")
        if restype != types.none:
            self._expect(native.restype[0], restype, "augmented_primal", "the primal")
        if needs_shadow and _pointer_carrying(self.abi):
            self._expect(native.restype[1], restype, "augmented_primal", "the shadow")
        return _with(native, elements)

    def _check_reverse(self, native: NativeRule) -> NativeRule:
        args = self.abi.args
        restype = native.restype
        if len(args) == 1 and not (isinstance(restype, types.BaseTuple) and len(restype) == 1
                                   and args[0].kind != "tuple"):
            entries = [(restype, tuple(native.abi.result.fields))]
        else:
            elements = self._elements(native, len(args), "reverse",
                                      f"a tuple of {len(args)} derivatives, one per argument")
            entries = list(zip(restype, elements))
        out = []
        for arg, (ty, fields) in zip(args, entries):
            floats = [p for p in arg.params if p.llvm_type in ("double", "float")]
            carries = floats and len(floats) == len(arg.params)
            if not carries or ty == types.none:
                if isinstance(ty, types.Array):
                    raise RuleError(
                        f"the reverse rule of {self.name} returns an array for argument "
                        f"{arg.name!r}; add an array's derivative into its shadow and return "
                        f"None in its place")
                out.append(())
                continue
            self._expect(ty, arg.numba_type, "reverse", f"the derivative of {arg.name!r}")
            out.append(tuple(fields))
        return _with(native, tuple(out))


def _with(native: NativeRule, elements) -> NativeRule:
    return replace(native, elements=tuple(map(tuple, elements)))


def _interleave(primals: list, shadows: list) -> list:
    return [t for pair in zip(primals, shadows) for t in pair]


def _fields_of(abi: AbiMap, element: int) -> tuple:
    prefix = f"result[{element}]"
    return tuple(f for f in abi.result.fields if f.field == prefix
                 or f.field.startswith((prefix + "[", prefix + ".")))


def _float_carrying(ty) -> bool:
    if isinstance(ty, types.Float):
        return True
    return isinstance(ty, types.BaseTuple) and len(ty) > 0 and all(
        _float_carrying(t) for t in ty)


def _pointer_carrying(abi: AbiMap) -> bool:
    return any(f.llvm_type == "ptr" for f in abi.result.fields)
