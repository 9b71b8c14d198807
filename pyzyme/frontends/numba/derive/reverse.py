"""Reverse-mode derivatives of ``@njit`` functions, compiled and callable like them.

For ``f(a, x)`` with ``a`` Duplicated and ``x`` Active, the derivative is a native function in
Numba's calling convention for the signature ``Tuple(R, float64)(A, X, A[, float64 dret])``:
the primal arguments, the shadow of each Duplicated one (its adjoints accumulate there), the
seed of an Active result, returning the primal result followed by the adjoint of each Active
argument. It is a small wrapper, written here in IR, around the combined function that
:mod:`pyzyme.diff.reverse.generator` makes of ``f``'s captured native function, compiled by
:mod:`pyzyme.pipeline`. The wrapper gives the primal's result slot (``retptr``) a shadow
holding the seed, so the result's store in the primal is where the reverse sweep starts: no
special case for results.

When no two array arguments share memory (checked at call time), a second derivative is made in
which array data is ``noalias``: loads of inputs are then known not to be overwritten, so the
reverse sweep reloads them instead of caching them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from numba.core import types

from pyzyme import ir, pipeline, settings
from pyzyme.analysis.activity import Activity
from pyzyme.analysis.layout import field_offset, sizeof
from pyzyme.diff.reverse.generator import ReverseGenerator, ReverseSignature
from pyzyme.errors import ActivityError, UnsupportedError
from pyzyme.frontends.numba import capture, njit_callable, pre_ad
from pyzyme.frontends.numba.abi import llvm_str
from pyzyme.frontends.numba.derive.forward import differentiable
from pyzyme.frontends.numba.source_lines import (add_source_line, outer_loop_lines,
                                                 where_defined)
from pyzyme.frontends.numba.typeseeds import (axis_extents_from_abi, extents_from_abi,
                                              seed_from_abi, shape_extents_from_abi)
from pyzyme.frontends.numba.written import arrays_needing_shadows, written_arguments
from pyzyme.ir import IRBuilder, types as T
from pyzyme.ir.values import Undef, const_int, const_null
from pyzyme import naming
from pyzyme.diff.calls import checkpoint
from pyzyme.ir.names import readable
from pyzyme.naming import symbol_name
from pyzyme.rules import default_rules
from pyzyme.transforms.checkpoint_calls import checkpoint_calls
from pyzyme.transforms.checkpoint_callees import callee_extents, checkpoint_callee_loops
from pyzyme.transforms.checkpoint_loops import checkpoint_loops

__all__ = ["ReversePlan", "ReverseModule", "build_reverse", "reverse_module", "prepare",
           "generate", "native_activities", "activity_name", "adjoint_types", "value_type",
           "Entry", "seed_params", "roles"]

ACTIVE, DUPLICATED, CONST = Activity.ACTIVE, Activity.DUPLICATED, Activity.CONST


def roles(kinds: Sequence) -> tuple[Activity, ...]:
    """Each argument's role as an :class:`Activity` (given as one, or as its value:
    ``"active"``, ``"duplicated"``, ``"const"``)."""
    return tuple(Activity(k) for k in kinds)


@dataclass(frozen=True)
class ReversePlan:
    """What a compiled reverse derivative takes and gives back."""

    function: object            # the njit dispatcher of the derivative
    kinds: tuple[Activity, ...]  # per argument: ACTIVE, DUPLICATED or CONST
    returns_primal: bool        # the result tuple starts with the primal result
    seeded: bool                # the derivative takes the result's seed as its last argument
    restype: object             # the Numba type of the primal result
    symbol: str
    ir_text: str                # the derivative's module before optimization
    tape: str                   # the printed tape layout
    writes_arrays: bool = True  # the primal may write the data of an array argument


def native_activities(abi, kinds: Sequence, result_carries: bool) -> list[Activity]:
    """The activity of each native parameter of ``abi``'s function (``retptr`` and the
    exception slot first) for arguments of ``kinds`` (:class:`Activity` members, or their
    values); ``result_carries``: the result slot holds what carries a derivative."""
    n = 2 + sum(len(a.params) for a in abi.args)
    acts = [Activity.CONST] * n
    for arg, kind in zip(abi.args, roles(kinds)):
        if kind == CONST:
            continue
        if kind == ACTIVE:
            floats = [p for p in arg.params if p.llvm_type in ("double", "float")]
            if not floats or len(floats) != len(arg.params):
                raise UnsupportedError(
                    f"argument {arg.name!r} of {abi.function} is {arg.numba_type}; Active is "
                    f"for floats and tuples of floats (pass arrays as Duplicated)")
            for p in floats:
                acts[p.index] = Activity.ACTIVE
            continue
        diff = differentiable(arg)
        if not diff:
            raise UnsupportedError(
                f"argument {arg.name!r} of {abi.function} is {arg.numba_type}, which carries "
                f"no derivative; pass it as Const")
        for index in diff:
            ty = next(p.llvm_type for p in arg.params if p.index == index)
            if ty != "ptr":
                raise UnsupportedError(
                    f"argument {arg.name!r} of {abi.function} is {arg.numba_type}; in reverse "
                    f"mode pass floats as Active and arrays as Duplicated")
            acts[index] = Activity.DUPLICATED
    if result_carries:
        acts[0] = Activity.DUPLICATED
    return acts


def value_type(numba_type) -> T.Type:
    """The IR type Numba's data model gives a value of ``numba_type``."""
    from numba.core.registry import cpu_target

    # llvmlite still prints typed pointers (a jitclass result is {i8*, {...}*})
    return ir.parse_type(llvm_str(cpu_target.target_context.get_value_type(numba_type)))


@dataclass
class ReverseModule:
    """A reverse derivative as IR, before compilation: ``module`` holds the entry ``symbol``,
    in Numba's convention, taking ``args`` and returning ``restype``."""

    module: object
    symbol: str
    args: list
    restype: object
    primal_restype: object
    seeded: bool
    abi: object
    tape: str
    writes_arrays: bool


def build_reverse(f, primal_types: Sequence[types.Type], kinds: Sequence,
                  ret_activity: Activity | None, distinct: bool, rules,
                  need_primal: bool = True, where: str | None = None) -> ReversePlan:
    """Capture ``f`` for ``primal_types`` and compile its reverse derivative.

    ``kinds`` gives each argument's role (an :class:`Activity`, or its value);
    ``ret_activity`` is ``Activity.ACTIVE``, ``Activity.CONST`` or None (deduced from the
    result type); ``distinct`` says no two array arguments (or shadows) overlap in memory.
    Without ``need_primal`` the primal result's place in the returned tuple holds zero, so
    that LLVM can delete what only the primal result needed (``x ** i`` in a Taylor term
    whose adjoint uses ``x ** (i - 1)``). ``where`` names the user's function in errors.
    """
    kinds = roles(kinds)
    rm = reverse_module(f, primal_types, kinds, ret_activity, distinct, rules, need_primal,
                        where)
    built = pipeline.finish(
        rm.module, [rm.symbol], rules=rules, name=f"pyzyme_rev_{rm.abi.function}",
        wrap=lambda compiled: njit_callable(compiled, rm.symbol, rm.restype(*rm.args),
                                            arg_names=[f"a{i}" for i in range(len(rm.args))]))
    return ReversePlan(built.wrapped, tuple(kinds), rm.primal_restype != types.none,
                       rm.seeded, rm.primal_restype, rm.symbol, built.text, rm.tape,
                       rm.writes_arrays)


def prepare(f, primal_types, kinds: Sequence[Activity], ret_activity: Activity | None,
            distinct: bool, rules=None, split: bool = False, tangents: int = 0):
    """Capture ``f`` and read off the activity of each native parameter: ``(capture, ABI map,
    module, native function, activities, return activity)``. Calls of functions with user
    rules in ``rules`` stay calls. Under a tape budget the outermost loops are checkpointed
    (:mod:`pyzyme.transforms.checkpoint_loops`; ``split``: for a split pair, whose caller may
    change the arguments between the thunks; ``tangents``: the directions forward mode will
    take through the derivative, whose tangents the budget holds too)."""
    cap = capture(f, primal_types, keep_calls=getattr(rules, "keeps_call", None))
    abi = cap.abi
    fields = abi.result.fields
    floats = any(fl.llvm_type in ("double", "float") for fl in fields)
    if ret_activity is None:
        ret_activity = Activity.ACTIVE if floats else Activity.CONST
    if ret_activity is Activity.ACTIVE and not floats:
        if abi.result.kind in ("jitclass", "array", "record"):
            raise UnsupportedError(
                f"{abi.function} returns {abi.result.numba_type}; reverse mode seeds float "
                f"results (and tuples of floats): return a float computed from it, or use "
                f"Const as the return activity")
        raise UnsupportedError(f"{abi.function} returns {abi.result.numba_type}, which carries "
                               f"no derivative; use Const as the return activity")
    if ret_activity not in (Activity.ACTIVE, Activity.CONST):
        raise UnsupportedError(f"{activity_name(ret_activity)} results are not supported in "
                               f"reverse mode yet; use Active or Const")
    carries = abi.result.kind != "none" and any(
        fl.llvm_type in ("double", "float", "ptr") for fl in fields)
    acts = native_activities(abi, kinds, carries)
    module = ir.parse_module(cap.text)
    native = module.get_function(cap.symbol)
    pre_ad.ready(module, native, abi, distinct, settings.current())
    budget = settings.current().tape_budget
    checkpointed = getattr(rules, "checkpointed", None)
    if checkpointed is not None:
        name = where_defined(f)
        checkpoint_calls(module, native, checkpointed, budget, extents_from_abi(abi),
                         lambda callee: f"a call of {callee} (marked pyzyme.checkpoint) in "
                                        f"{name}", stable=not split,
                         opaque=[p.index for arg in abi.args for p in arg.params
                                 if p.field.endswith((".meminfo", ".parent"))])
    if budget is not None:
        lines = outer_loop_lines(f)
        name = where_defined(f)
        growth, own, calls, callee_growth = _tape_growth(cap, abi, distinct, acts, rules)
        extents = callee_extents(module, native, shape_extents_from_abi(abi))  # unrewritten
        checkpoint_loops(module, native, budget, extents_from_abi(abi),
                         lambda k, total: _loop_where(lines, name, k, total), growth,
                         stable=not split, tangents=tangents)
        done = checkpoint_callee_loops(module, native, own, callee_growth, budget, extents,
                                       name, stable=not split, tangents=tangents)
        _refuse_growing_callees(native, _calling(own - done, calls), name)
    return cap, abi, module, native, acts, ret_activity


def _tape_growth(cap, abi, distinct: bool, acts, rules) -> tuple:
    """How the unbudgeted derivative's tape grows with each loop (by header name): the bytes
    it caches per iteration of that loop, and whether loops inside it cache too (then how much
    an iteration keeps depends on their trip counts). Found by generating that derivative
    once, on a copy of the captured function: the loops whose tape does not grow need no
    checkpoints, and those whose per-iteration tape is known are checkpointed only when their
    trip count would take it over the budget. Returns that, the functions whose tape grows
    with a loop of their own and the call graph (:func:`_growing_functions`), and the same
    growth for the loops of each callee (by its name)."""
    module = ir.parse_module(cap.text)
    native = module.get_function(cap.symbol)
    pre_ad.ready(module, native, abi, distinct, settings.current())
    gen = ReverseGenerator(module, rules, settings.current())
    gen.type_seeds[native] = seed_from_abi(abi)
    gen.array_extents[native] = extents_from_abi(abi)
    gen.axis_extents[native] = axis_extents_from_abi(abi)
    tape = gen.tapes[gen.derivative(native, ReverseSignature(tuple(acts), status_return=True))]
    own, calls = _growing_functions(module, gen.tapes.values())
    # The callees' loops the same way, by function (a callee's loops are checkpointed where
    # it is called outside the loops of its caller); a function differentiated for several
    # activities, by the most any of its derivatives keeps.
    callees: dict = {}
    for other in gen.tapes.values():
        if other is tape:
            continue
        for header, (size, nested, inner) in _loop_growth(other).items():
            mine = callees.setdefault(header.parent.name, {})
            old = mine.get(header.name, (0, False, ()))
            mine[header.name] = (max(old[0], size), old[1] or nested,
                                 _most(old[2], inner))
    return ({header.name: v for header, v in _loop_growth(tape).items()}, own, calls,
            callees)


def _loop_growth(tape) -> dict:
    """``{loop header: (bytes an iteration caches, whether loops inside it cache too, those
    loops)}`` of the loops of one derivative's ``tape``: the loops inside as ``((header name,
    bytes an iteration of it caches), ...)``, None where some of what an iteration keeps is
    kept otherwise (a value repeated over an inner loop's iterations)."""
    growth: dict = {}
    for loop, state in tape.loops.items():
        growth[loop.header] = [sum(sizeof(c.type) for c in state.caches), False, {}]
    for loop in tape.loops:
        size = growth.get(loop.header, [0])[0]
        parent = loop.parent
        while parent is not None and size:
            entry = growth.setdefault(parent.header, [0, False, {}])
            entry[1] = True
            entry[2][loop.header.name] = size
            parent = parent.parent
    for (inner, outer), rep in tape.repeats.items():
        if rep.caches:
            growth.setdefault(outer.header, [0, False, {}])[1] = True
            while outer is not None:
                if outer.header in growth:
                    growth[outer.header][2] = None
                outer = outer.parent
    return {header: (v[0], v[1], None if v[2] is None else tuple(sorted(v[2].items())))
            for header, v in growth.items()}


def _most(one, other):
    """The inner loops' bytes of two derivatives of a function, by loop, the most of each
    (None where either is None)."""
    if one is None or other is None:
        return None
    most = dict(one)
    for name, size in other:
        most[name] = max(size, most.get(name, 0))
    return tuple(sorted(most.items()))


def _growing_functions(module, tapes) -> tuple[set, dict]:
    """Names of the functions whose derivative's tape grows with a loop of their own, and
    the call graph (by name)."""
    own = {loop.header.parent.name for tape in tapes for loop, state in tape.loops.items()
           if state.caches}
    own |= {outer.header.parent.name for tape in tapes
            for (_, outer), rep in tape.repeats.items() if rep.caches}
    calls = {fn.name: {i.called_function.name for i in fn.instructions()
                       if isinstance(i, ir.instructions.CallBase) and i.called_function
                       is not None} for fn in module.functions if not fn.is_declaration}
    return own, calls


def _calling(own: set, calls: dict) -> set:
    """``own`` and the functions that call one of them, directly or not."""
    growing, changed = set(own), True
    while changed:
        changed = False
        for name, callees in calls.items():
            if name not in growing and callees & growing:
                growing.add(name)
                changed = True
    return growing


def _refuse_growing_callees(native, growing: set, name: str) -> None:
    """Under a tape budget, a call (outside the loops checkpointed) of a function whose tape
    grows with a loop of its own: pyzyme checkpoints the loops of the function it
    differentiates, not those of what it calls, so that tape could pass the budget."""
    for inst in native.instructions():
        callee = inst.called_function if isinstance(inst, ir.instructions.CallBase) else None
        if callee is not None and not callee.is_declaration and callee.name in growing:
            raise UnsupportedError(
                f"{name} calls {readable(callee.name)}, whose reverse-mode tape grows with a "
                f"loop of its own: under tape_budget pyzyme checkpoints the loops of the "
                f"function it differentiates, not those of the functions it calls",
                hint="differentiate the function with the loop itself, or write the loop in "
                     f"{name}; or build without tape_budget")


def _loop_where(lines: list, name: str, k: int, total: int) -> str:
    """The k-th of ``total`` outermost loops LLVM kept in ``name``, by its Python line when
    the function has as many outermost loops in its source (NumPy calls add loops of their
    own, and then the source lines are the candidates)."""
    if total == len(lines):
        return f"the loop at {lines[k]} (in {name})"
    if lines:
        return f"loop {k + 1} of {total} in {name} (its loops are at {', '.join(lines)})"
    return f"loop {k + 1} of {total} in {name}"


def generate(cap, module, native, sig: ReverseSignature, rules, primal_types, what: str):
    """The generator and ``native``'s derivative for ``sig`` (type analysis seeded from the
    ABI), generated under :func:`pyzyme.pipeline.generate` (``what`` names the function and
    mode); an UnsupportedError gets the Python line of the call it names."""
    gen = ReverseGenerator(module, rules, settings.current())
    gen.type_seeds[native] = seed_from_abi(cap.abi)
    gen.array_extents[native] = extents_from_abi(cap.abi)
    gen.axis_extents[native] = axis_extents_from_abi(cap.abi)
    derivative = pipeline.generate(lambda: gen.derivative(native, sig), what,
                                   lambda err: add_source_line(err, cap.dispatcher,
                                                               primal_types))
    _expand_checkpointed(module)
    return gen, derivative


def _expand_checkpointed(module) -> None:
    """Calls of checkpointed loops (made under a tape budget) that the derivative left in
    the primal code it keeps, replaced by the loops themselves."""
    for name in (naming.CHECKPOINT_FOR, naming.CHECKPOINT_WHILE):
        loop = module.get_function(name)
        if loop is None:
            continue
        row = default_rules().lookup(name, "call")
        for call in [u for u in loop.users if isinstance(u, ir.instructions.CallBase)]:
            args = row.step_args(call)
            driver = checkpoint.primal_driver(module, call.args[row.step],
                                              [a.type for a in args], row)
            b = IRBuilder()
            b.position_before(call)
            b.call(driver, [call.args[row.start], call.args[row.count], *args])
            call.erase()
        if not loop.users:
            module.remove(loop)


def activity_name(activity: Activity) -> str:
    """How the API spells ``activity`` (``Active``): symbols and messages keep that name."""
    return activity.name.title()


def adjoint_types(abi, kinds: Sequence[Activity]) -> list:
    """The Numba types of the adjoints of the Active arguments, in order."""
    return [arg.numba_type for arg, kind in zip(abi.args, kinds) if kind == ACTIVE]


def reverse_module(f, primal_types: Sequence[types.Type], kinds: Sequence,
                   ret_activity: Activity | None, distinct: bool, rules,
                   need_primal: bool = True, where: str | None = None,
                   tangents: int = 0) -> ReverseModule:
    """The IR of :func:`build_reverse`'s derivative, not yet compiled (``tangents``: the
    directions forward mode will take through it, as :func:`prepare`'s)."""
    primal_types, kinds = tuple(primal_types), roles(kinds)
    cap, abi, module, native, acts, ret_activity = prepare(f, primal_types, kinds,
                                                           ret_activity, distinct, rules,
                                                           tangents=tangents)
    sig = ReverseSignature(tuple(acts), status_return=True, result_unread=not need_primal)
    symbol = symbol_name("rev", cap.text, repr((sig, [k.value for k in kinds], distinct,
                                                activity_name(ret_activity), need_primal,
                                                tangents))
                         + settings.current().tag)
    try:
        gen, rev = generate(cap, module, native, sig, rules, primal_types,
                            f"{where or where_defined(f)} in reverse mode")
    except ActivityError as err:
        # What the JAX-style layer may retry with zero shadows (pyzyme.api.workspaces)
        written = written_arguments(abi, lambda i: native.args[i].attrs)
        err.workspaces = arrays_needing_shadows(
            abi, native, written, [k == CONST for k in kinds], getattr(err, "merged", None))
        raise
    restype = abi.signature.return_type
    adj_types = adjoint_types(abi, kinds)
    elements = ([restype] if restype != types.none else []) + adj_types
    entry_restype = types.Tuple(elements) if elements else types.none
    seeded = ret_activity is Activity.ACTIVE
    shadow_types = [t for t, k in zip(primal_types, kinds) if k == DUPLICATED]
    _wrapper(module, native, rev, abi, kinds, acts, entry_restype, elements, restype, seeded,
             symbol, need_primal)
    args = list(primal_types) + shadow_types + ([restype] if seeded else [])
    return ReverseModule(module, symbol, args, entry_restype, restype, seeded, abi,
                         str(gen.tapes[rev]), _writes_arrays(abi, native))


def _writes_arrays(abi, native) -> bool:
    """Whether ``native`` may write the data of one of its array arguments (LLVM's function
    attributes, inferred when Numba's IR was optimized, say ``readonly`` where it cannot)."""
    return any(
        not {"readonly", "readnone"} & set(native.args[p.index].attrs.split())
        for arg in abi.args for p in arg.params
        if p.field.endswith(".data") and isinstance(p.numba_type, types.CPointer))


class Entry:
    """A derivative's entry point in Numba's convention, written around a generated function:
    ``i32 symbol(retptr, excinfo, <f's parameters>, <shadow parameters>, <extra>)``."""

    def __init__(self, module, native, abi, kinds, restype, symbol: str, extra=()) -> None:
        self.native, self.abi, self.kinds = native, abi, kinds
        self.params = list(native.function_type.params)
        shadow_params: list[T.Type] = []
        for arg, kind in zip(abi.args, kinds):
            if kind == DUPLICATED:
                shadow_params += [ir.parse_type(p.llvm_type) for p in arg.params]
        self.nshadow = len(shadow_params)
        self.fn = module.add_function(symbol, T.FunctionType(
            T.i32, self.params + shadow_params + [ty for _, ty in extra]))
        names = [a.name for a in native.args]
        names += [f"{native.args[p.index].name}'" for arg, kind in zip(abi.args, kinds)
                  if kind == DUPLICATED for p in arg.params]
        for a, name in zip(self.fn.args, names + [name for name, _ in extra]):
            a.name = name
        self.b = IRBuilder(self.fn.append_block("entry"))
        # Typed slots (not bytes), so that forward mode over the entry (hvp) sees floats.
        self.slot_ty = value_type(restype) if restype != types.none else T.ptr
        self.restype = restype

    @property
    def extra(self) -> list:
        return self.fn.args[len(self.params) + self.nshadow:]

    def seed_value(self, first: int):
        """The seed of the result, built from the entry's parameters ``first, first+1, ...``
        (Numba passes a tuple argument flattened into its leaves). Returns the value and the
        index of the next parameter."""
        ty = self.slot_ty
        leaves = _leaf_types(ty)
        args = self.fn.args[first:first + len(leaves)]
        if len(leaves) == 1 and leaves[0] is ty:
            return args[0], first + 1
        value = Undef(ty)
        for path, arg in zip(_leaf_paths(ty), args):
            value = self.b.insertvalue(value, arg, path)
        return value, first + len(leaves)

    def slot(self, name: str, value=None):
        b = self.b
        slot = b.alloca(self.slot_ty, align=16, name=name)
        b.store(value if value is not None else const_null(self.slot_ty), slot, 16)
        return slot

    def call_args(self, result, seed, acts) -> list:
        """The generated function's arguments: ``result`` for retptr (``seed`` its shadow),
        the entry's own parameters, then the shadows of the Duplicated parameters."""
        args = self.fn.args
        shadow_of: dict[int, object] = {0: seed}
        k = len(self.params)
        for arg, kind in zip(self.abi.args, self.kinds):
            if kind != DUPLICATED:
                continue
            for p in arg.params:
                shadow_of[p.index] = args[k]
                k += 1
        out = [result, args[1]] + list(args[2:len(self.params)])
        return out + [shadow_of[i] for i, act in enumerate(acts) if act is Activity.DUPLICATED]

    def store_results(self, entry_restype, primal, adjoints, acts, first: int,
                      tail=(), primal_needed: bool = True) -> None:
        """Write ``(primal?, adjoint per Active argument..., *tail)`` to retptr; the adjoints
        are fields ``first, first+1, ...`` of struct ``adjoints`` (None: there are none).
        A primal not ``primal_needed`` is written as zero (its computation can then go)."""
        b = self.b
        ty = value_type(entry_restype)
        retptr = self.fn.args[0]

        def field(position):
            return b.gep(ty, retptr, [const_int(T.i64, 0), const_int(T.i32, position)])

        position = 0
        if primal is not None:
            _, rty = field_offset(ty, [0])
            b.store(b.load(rty, primal, 16) if primal_needed else const_null(rty), field(0))
            position = 1
        k = first
        for arg, kind in zip(self.abi.args, self.kinds):
            if kind != ACTIVE or adjoints is None:
                continue
            floats = [p for p in arg.params if acts[p.index] is Activity.ACTIVE]
            if len(floats) == 1 and not isinstance(arg.numba_type, types.BaseTuple):
                b.store(b.extractvalue(adjoints, k), field(position))
            else:
                _, tty = field_offset(ty, [position])
                agg = Undef(tty)
                for j in range(len(floats)):
                    agg = b.insertvalue(agg, b.extractvalue(adjoints, k + j), j)
                b.store(agg, field(position))
            k += len(floats)
            position += 1
        for value in tail:
            b.store(value, field(position))
            position += 1


def seed_params(restype) -> list:
    """The entry parameters carrying the seed of a ``restype`` result, flattened as Numba
    passes tuples: ``[("dret", double)]`` or ``[("dret.0", double), ("dret.1", double)]``."""
    leaves = _leaf_types(value_type(restype))
    if len(leaves) == 1:
        return [("dret", leaves[0])]
    return [(f"dret.{i}", ty) for i, ty in enumerate(leaves)]


def _leaf_types(ty) -> list:
    if isinstance(ty, (T.StructType, T.ArrayType)):
        elements = [ty.element] * ty.count if isinstance(ty, T.ArrayType) else ty.elements
        return [leaf for e in elements for leaf in _leaf_types(e)]
    return [ty]


def _leaf_paths(ty, prefix=()) -> list:
    if isinstance(ty, (T.StructType, T.ArrayType)):
        elements = [ty.element] * ty.count if isinstance(ty, T.ArrayType) else ty.elements
        return [p for i, e in enumerate(elements) for p in _leaf_paths(e, prefix + (i,))]
    return [list(prefix)]


def _wrapper(module, native, rev, abi, kinds, acts, entry_restype, elements, restype,
             seeded: bool, symbol: str, need_primal: bool = True) -> None:
    """``symbol``: the derivative in Numba's convention, calling the combined function."""
    e = Entry(module, native, abi, kinds, restype, symbol, seed_params(restype) if seeded else [])
    result = e.slot("result")
    seed = e.slot("seed", e.seed_value(len(e.params) + e.nshadow)[0] if seeded else None)
    out = e.b.call(rev, e.call_args(result, seed, acts))
    n_adj = sum(act is Activity.ACTIVE for act in acts)
    status = e.b.extractvalue(out, 0) if n_adj else out
    if elements:
        e.store_results(entry_restype, result if restype != types.none else None, out, acts, 1,
                        primal_needed=need_primal)
    e.b.ret(status)
