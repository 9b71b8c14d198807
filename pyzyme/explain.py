"""``pyzyme explain``: what pyzyme sees in a Numba function, instruction by instruction.

For one compiled signature of an ``@njit`` function, :func:`explain` captures the LLVM IR pyzyme
differentiates (:func:`pyzyme.frontends.numba.capture`) and reports, for each instruction of its
native function:

- the instruction, as pyzyme prints it (the names are those of the captured module, the ones
  :func:`pyzyme.code_llvm` shows in the derivative);
- its activity in reverse mode: ``active`` when it carries a derivative that can reach the
  result (or memory with a shadow), else ``const``. Float arguments are ``Active``, arrays of
  floats ``Duplicated``, everything else (and the arguments named in ``const``) ``Const``; the
  result is active when it holds floats. A void instruction (a store, a call) is ``active``
  when one of its operands is;
- its type tree from type analysis, seeded from Numba's calling convention
  (``{[-1]:Float@double}``: a double; ``{[-1]:Pointer, [-1,-1]:Float@double}``: a pointer to
  doubles);
- the Python line it comes from. Numba attaches source locations only when it compiles with
  ``debug=True``, so :func:`explain` compiles a debug copy of the function too and matches its
  instructions to the captured ones (same code, other names); code inlined from other functions
  gets the line of the call in ``f``.

Examples
--------
>>> import numba
>>> @numba.njit
... def poly(x, c):
...     s = 0.0
...     for i in range(x.shape[0]):
...         s += c * x[i] * x[i]
...     return s
>>> report = explain(poly, (numba.float64[::1], numba.float64))
>>> row = next(r for r in report.rows if r.inst.opcode == "fadd")
>>> row.activity, str(row.tree), row.line       # line 5 of the example: s += ...
('active', '{[-1]:Float@double}', 5)
>>> print(report.title.split("  (")[0])
poly(array(float64, 1d, C), float64) -> float64
>>> print(row)                                              # doctest: +NORMALIZE_WHITESPACE
%.218 = fadd double %s.2.087, %.216  active  line 5  {[-1]:Float@double}
"""

from __future__ import annotations

import difflib
import linecache
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field

from pyzyme.analysis.typetree import TypeTree

__all__ = ["Explanation", "Row", "explain"]

_WIDTH = 64   # the instruction column; longer instructions push the rest of their row right


@dataclass
class Row:
    """One instruction (or argument) of the report."""

    block: str            # the label of its block ("" for arguments)
    text: str             # as pyzyme prints it, without metadata
    activity: str         # "active" / "const" (arguments: "active" / "duplicated" / "const")
    tree: TypeTree | None  # None for void instructions
    line: int | None      # the Python source line, where Numba gives it
    inst: object = None   # the pyzyme.ir instruction or argument

    def format(self, width: int = _WIDTH, *, lines: bool = True) -> str:
        """The row's text padded to ``width``, its activity, ``line N`` (when ``lines``),
        its type tree."""
        tree = "" if self.tree is None else str(self.tree)
        if not lines:
            return f"{self.text:<{width}}  {self.activity:<10}  {tree}".rstrip()
        line = f"line {self.line}" if self.line is not None else ""
        return f"{self.text:<{width}}  {self.activity:<6}  {line:<9} {tree}".rstrip()

    def __str__(self) -> str:
        return self.format(0)


@dataclass
class Explanation:
    """:func:`explain`'s report: print it, or read its :attr:`rows`."""

    title: str                 # "f(types) -> type  (file:line)"
    symbol: str                # the native function's name in the captured module
    activities: str            # "x duplicated, c active; result active"
    args: list[Row] = field(default_factory=list)    # one per native parameter
    rows: list[Row] = field(default_factory=list)    # one per instruction, in block order
    source: dict[int, str] = field(default_factory=dict)  # line -> Python text, as referenced
    note: str = ""             # why there are no line numbers, when there are none

    def __str__(self) -> str:
        width = min(_WIDTH, max((len(r.text) for r in self.rows), default=0))
        arg_width = max((len(r.text) for r in self.args), default=0)
        out = [self.title, f"native function @{self.symbol}",
               f"reverse-mode activity: {self.activities}", "",
               "arguments (parameter, seed activity, type tree):"]
        out += ["  " + r.format(arg_width, lines=False) for r in self.args]
        out += ["", "instructions (instruction, activity, Python line, type tree):"]
        block = None
        for r in self.rows:
            if r.block != block:
                block = r.block
                out.append(f"{block}:")
            out.append("  " + r.format(width))
        if self.source:
            out += ["", "Python source:"]
            out += [f"  {n:>4}  {text}" for n, text in sorted(self.source.items())]
        if self.note:
            out += ["", self.note]
        return "\n".join(out)


def explain(f, args, *, const: Iterable[str] = (), lines: bool = True) -> Explanation:
    """Report the instructions of ``f`` compiled for ``args``: activity, type tree, source line.

    Parameters
    ----------
    f
        An ``@njit`` function or a plain Python function (compiled with ``numba.njit``).
    args
        The argument types, as :func:`~pyzyme.frontends.numba.capture` takes them: a tuple of
        Numba types, a signature string (``"(float64[::1], float64)"``) or a tuple of example
        values.
    const
        Names of arguments to treat as ``Const`` although they hold floats.
    lines
        Compile a debug copy to find Python source lines (``False`` skips that).

    Returns
    -------
    Explanation
        ``str()`` of it is the printed report (see the module's docstring).
    """
    from pyzyme import ir
    from pyzyme.analysis.activity import Activity, analyze_activity
    from pyzyme.analysis.type_analysis import analyze_types
    from pyzyme.frontends.numba.typeseeds import seed_from_abi
    from pyzyme.frontends.numba.derive.reverse import native_activities
    from pyzyme.diff.calls.dispatch import call_result_varied, may_allocate
    from pyzyme.frontends.numba import capture
    from pyzyme.ir.names import label_def
    from pyzyme.api.plans import current_rules
    from pyzyme.ir.printer import _slots  # the printer's numbering of unnamed values

    rules = current_rules()  # with the user's: a function marked inactive shows as such
    cap = capture(f, args, keep_calls=getattr(rules, "keeps_call", None))
    abi = cap.abi
    const = set(const)
    unknown = const - {a.name for a in abi.args}
    if unknown:
        raise ValueError(f"{abi.function} has no argument named {', '.join(sorted(unknown))}; "
                         f"its arguments are {', '.join(a.name for a in abi.args)}")
    kinds = [_kind(arg) if arg.name not in const else Activity.CONST for arg in abi.args]
    fields = abi.result.fields
    return_active = any(fl.llvm_type in ("double", "float") for fl in fields)
    carries = abi.result.kind != "none" and any(
        fl.llvm_type in ("double", "float", "ptr") for fl in fields)
    acts = native_activities(abi, kinds, carries)

    module = ir.parse_module(cap.text)
    native = module.get_function(cap.symbol)
    types_ = analyze_types(native, seed_from_abi(abi))
    activity = analyze_activity(native, acts, lambda c, v: call_result_varied(rules, c, v),
                                return_active=return_active,
                                may_allocate=lambda c: may_allocate(rules, c))

    slots = _slots(native)

    def ref(v) -> str:
        n = slots.get(v)
        return v.ref if n is None else f"%{n}"

    line_of: dict = {}
    note = ""
    if lines:
        line_of, note = _source_lines(cap, native)

    fields_by_index = {p.index: p.field for p in abi.native_params}
    fields_by_index.update({0: "retptr", 1: "excinfo"})
    args_rows = [Row("", f"{ref(a)}  ({fields_by_index.get(i, '?')})",
                     acts[i].value if isinstance(acts[i], Activity) else str(acts[i]),
                     types_.tree(a), None, a)
                 for i, a in enumerate(native.args)]
    rows = []
    for block in native.blocks:
        label = label_def(block.name) if block.name else f"{slots.get(block, '?')}:"
        for inst in block.instructions:
            body = inst.body(ref)
            if inst.has_result:
                text, tree = f"{ref(inst)} = {body}", types_.tree(inst)
                active = activity.is_active(inst)
            else:
                text, tree = body, None
                active = any(activity.is_active(op) for op in inst.operands)
            rows.append(Row(label[:-1], text, "active" if active else "const", tree,
                            line_of.get(inst), inst))

    py = getattr(cap.dispatcher, "py_func", None)
    code = getattr(py, "__code__", None)
    where = f"  ({code.co_filename}:{code.co_firstlineno})" if code else ""
    source = {}
    if code is not None:
        for n in sorted({r.line for r in rows if r.line is not None}):
            source[n] = linecache.getline(code.co_filename, n).rstrip()
    named = ", ".join(f"{a.name} {k.value}" for a, k in zip(abi.args, kinds))
    sig = cap.signature
    others = [fn.ref for fn in module.functions if not fn.is_declaration and fn is not native]
    if others:
        shown = ", ".join(others)
        note = "\n".join(filter(None, [note, f"not shown: the module's other functions, "
                                            f"{shown}"]))
    return Explanation(
        title=f"{abi.function}({', '.join(map(str, sig.args))}) -> {sig.return_type}{where}",
        symbol=cap.symbol,
        activities=f"{named or 'no arguments'}; result {'active' if return_active else 'const'}",
        args=args_rows, rows=rows, source=source, note=note)


def _kind(arg) -> Activity:
    """The default activity of a Python argument: floats (and tuples of floats) Active,
    arrays of floats Duplicated, anything else Const."""
    from numba.core import types

    from pyzyme.analysis.activity import Activity

    ty = arg.numba_type
    if arg.params and all(p.llvm_type in ("double", "float") for p in arg.params):
        return Activity.ACTIVE
    if isinstance(ty, types.Array) and isinstance(ty.dtype, (types.Float, types.Complex)):
        return Activity.DUPLICATED
    return Activity.CONST


_LOCATION = re.compile(r"^!(\d+) = (?:distinct )?!DILocation\((.*)\)\s*$")
_FIELD = re.compile(r"\b(line|inlinedAt): (!?\d+)")


def _source_lines(cap, native) -> tuple[dict, str]:
    """Python lines of ``native``'s instructions, from a debug compile of the same function:
    ``({instruction: line}, note)``; the note says why lines are missing, if they are."""
    import numba

    from pyzyme import ir
    from pyzyme.frontends.numba import capture

    dispatcher = cap.dispatcher
    options = {k: v for k, v in dispatcher.targetoptions.items()
               if k not in ("cache", "nopython", "debug")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            debug_copy = numba.njit(debug=True, **options)(dispatcher.py_func)
            dcap = capture(debug_copy, tuple(cap.signature.args))
        dmodule = ir.parse_module(dcap.text)
    except Exception as err:  # noqa: BLE001 - lines are a courtesy; the report stands without
        return {}, f"no Python lines: Numba's debug compile failed ({err})"
    dfn = dmodule.get_function(dcap.symbol)
    locations = {}
    for kind, text in dmodule.extra_lines:
        m = _LOCATION.match(text) if kind == "metadata" else None
        if m:
            fields = dict(_FIELD.findall(m.group(2)))
            locations["!" + m.group(1)] = (int(fields.get("line", 0)), fields.get("inlinedAt"))

    def line(inst) -> int | None:
        ref = dict(inst.metadata).get("dbg")
        seen = set()
        while ref in locations and ref not in seen:  # inlined code: the call's line in f
            seen.add(ref)
            n, outer = locations[ref]
            if outer is None:
                return n or None
            ref = outer
        return None

    ours = list(native.instructions())
    theirs = list(dfn.instructions())
    key = lambda i: (i.opcode, str(i.type))  # noqa: E731 - same code, other names
    matcher = difflib.SequenceMatcher(None, [key(i) for i in ours], [key(i) for i in theirs],
                                      autojunk=False)
    out = {}
    for a, b, n in matcher.get_matching_blocks():
        for k in range(n):
            got = line(theirs[b + k])
            if got is not None:
                out[ours[a + k]] = got
    note = "" if out else "no Python lines: Numba's debug compile gave no locations"
    return out, note
