"""Enzyme's checkpointing annotations on ``for`` loops, as checkpointed loops of pyzyme's own.

Enzyme's clang plugin reads ``#pragma enzyme checkpoint("binomial", 2)``,
``[[enzyme::checkpoint(...)]]``, ``__attribute__((enzyme_checkpoint(...)))`` and
``[[enzyme_checkpointing_enable(...)]]`` on a ``for`` loop: the loop's reverse sweep then
recomputes iterations from snapshots instead of taping them. Clang alone drops them, so
``pyzyme cc`` does the plugin's part in two steps:

1. :func:`mark`: in the preprocessed source, each annotation becomes a call statement
   ``__pyzyme_checkpoint_loop(scheme, snapshots);`` just before its loop;
2. :func:`outline`: in the module clang makes before optimising it (variables still in stack
   slots), the loop after each such call becomes a step function of its own, and the loop a
   ``__enzyme_checkpoint_for`` call of it (:mod:`~pyzyme.frontends.c.checkpoint_calls`). The
   step's index is the loop's counter; the stack slots the body writes and the memory it
   writes through pointers sized by their ``malloc`` (or ``__enzyme_ptr_size_hint(ptr, bytes,
   0)``) are the snapshot's regions; the slots it only reads are passed by value; the slots
   only the body uses are the step's own.

A loop pyzyme cannot outline so (one that leaves early, whose counter does not go up by one, or
that writes memory whose size it cannot tell) is refused at the annotation's line.
"""

from __future__ import annotations

import re
from pathlib import Path

from pyzyme import ir, naming
from pyzyme.analysis.overwrite import underlying_object
from pyzyme.errors import UnsupportedError
from pyzyme.frontends.c.clang import preprocess
from pyzyme.frontends.c.enzyme_calls import through_locals
from pyzyme.frontends.c.loop_outline import LoopOutliner, calls_of, slot_bytes
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantInt, const_int, const_null
from pyzyme.rules import default_rules
from pyzyme.rules.spec import Allocation

__all__ = ["MARKER", "SCHEME_FUNCTION", "mark", "outline"]

#: The call :func:`mark` writes before an annotated loop: ``MARKER(scheme, snapshots)``.
MARKER = "__pyzyme_checkpoint_loop"
#: ``const EnzymeCheckpointScheme *SCHEME_FUNCTION(int scheme)`` in pyzyme's
#: ``<enzyme/checkpoint.h>``: 1 periodic, 2 binomial (Revolve), 3 store-all.
SCHEME_FUNCTION = "pyzyme_checkpoint_scheme"
_SCHEMES = {"binomial": 2, "revolve": 2, "periodic": 1, "regular": 1, "store_all": 3}
_SIZE_HINT = "__enzyme_ptr_size_hint"
_ENTRY = "__enzyme_checkpoint_for"

_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+enzyme[ \t]+checkpoint\b"
                     r"(?P<args>[ \t]*\([^\n]*\))?[ \t]*$", re.M)
_ATTRIBUTE = re.compile(
    r"(?:\[\[\s*enzyme(?:::|_)(?:checkpoint|checkpointing_enable)\b(?P<a>\s*\([^()]*\))?\s*\]\]"
    r"|__attribute__\s*\(\(\s*enzyme_(?:checkpoint|checkpointing_enable)\b"
    r"(?P<b>\s*\([^()]*\))?\s*\)\))")
_LINE_MARKER = re.compile(r'^#\s*(\d+)\s+"([^"]*)"', re.M)


# -- 1. the source -------------------------------------------------------------------------
def mark(path: Path, lang: str, flags) -> str | None:
    """The preprocessed source of ``path`` with each checkpointing annotation as a call of
    :data:`MARKER`; None when it has none.

    Raises
    ------
    UnsupportedError
        An annotation not on a ``for`` loop, or naming a scheme pyzyme does not have.
    """
    raw = Path(path).read_text(errors="replace")
    if "enzyme" not in raw or "checkpoint" not in raw:
        return None
    text = preprocess(path, lang, flags)
    out, last = [], 0
    found = sorted([(m, True) for m in _PRAGMA.finditer(text)]
                   + [(m, False) for m in _ATTRIBUTE.finditer(text)],
                   key=lambda item: item[0].start())
    for m, pragma in found:
        where = _where(text, m.start())
        args = m.group("args") if pragma else (m.group("a") or m.group("b"))
        scheme, snapshots = _scheme(args, where)
        rest = text[m.end():]
        following = re.match(r"(?:\s|^#[^\n]*\n)*", rest, re.M).end()
        if not rest[following:].startswith("for"):
            raise UnsupportedError(f"{where}: Enzyme's checkpoint annotation is on something "
                                   f"other than a for loop", hint="put it on a for loop")
        before = text[:m.start()].rstrip()
        if not pragma and before and before[-1] not in ";{}:":
            raise UnsupportedError(f"{where}: pyzyme reads a checkpoint annotation only on a "
                                   f"loop that is a statement of a block of its own",
                                   hint="put braces around the loop")
        out += [text[last:m.start()], f"{MARKER}({scheme}, {snapshots});"]
        last = m.end()
    if not out:
        return None
    out.append(text[last:])
    return (f'#ifdef __cplusplus\nextern "C"\n#endif\nvoid {MARKER}(int, long);\n'
            + "".join(out))


def _where(text: str, pos: int) -> str:
    """``file:line`` of offset ``pos`` of preprocessed ``text``, by its line markers."""
    line, name, start = 1, "?", 0
    for m in _LINE_MARKER.finditer(text, 0, pos):
        line, name, start = int(m.group(1)), m.group(2), m.end()
    return f"{Path(name).name}:{line + text.count(chr(10), start, pos) - 1}"


def _scheme(args: str | None, where: str) -> tuple[int, int]:
    """(scheme, snapshots) of an annotation's arguments; -1: the default (the square root
    of the number of steps)."""
    items = [a.strip() for a in (args or "").strip().strip("()").split(",") if a.strip()]
    name = items[0].strip('"') if items and items[0].startswith('"') else "binomial"
    count = items[1] if len(items) > 1 else (items[0] if items and items[0].isdigit()
                                             else "-1")
    if name not in _SCHEMES:
        raise UnsupportedError(f"{where}: unknown checkpointing scheme {name!r}",
                               hint=f"use one of {', '.join(sorted(_SCHEMES))}")
    try:
        return _SCHEMES[name], int(count)
    except ValueError:
        raise UnsupportedError(f"{where}: the number of snapshots of a checkpoint annotation "
                               f"must be an integer literal, not {count!r}") from None


# -- 2. the module -------------------------------------------------------------------------
def outline(text: str) -> str:
    """``text`` (clang's module before optimisation) with the loop after each call of
    :data:`MARKER` outlined into a step function and run by ``__enzyme_checkpoint_for``.

    Raises
    ------
    UnsupportedError
        A loop pyzyme cannot outline (named by its line, with what to do).
    """
    if MARKER not in text and _SIZE_HINT not in text:
        return text
    module = ir.parse_module(text)
    marker = module.get_function(MARKER)
    for call in calls_of(module, MARKER):
        _Outliner(module, call).run()
    # Size hints tell the snapshots' sizes; nothing else reads them.
    for fn in (marker, module.get_function(_SIZE_HINT)):
        if fn is None:
            continue
        for user in list(fn.users):
            user.erase()
        module.remove(fn)
    return str(module)


class _Outliner(LoopOutliner):
    """The loop after one marker call, outlined."""

    def __init__(self, module, call: I.Call) -> None:
        super().__init__(module, call, "checkpointed loop")

    def run(self) -> None:
        self.use(self.loop_after_call(hint="put the annotation right before a for loop"))
        header, body, exit_ = self._shape(self.loop)
        iv, bound, pred = self._counter(header)
        self.check_live_outs()
        slots = self.slots(own=[iv])
        step = self._step(header, body, iv, slots)
        self._replace(header, exit_, iv, bound, pred, step, slots)

    # -- reading the loop ------------------------------------------------------------------
    def _shape(self, loop):
        header = loop.header
        term = header.terminator
        exits = {s for b in loop.blocks for s in b.successors if s not in self.blocks}
        if not isinstance(term, I.Branch) or not term.is_conditional or len(exits) != 1 \
                or len(loop.latches) != 1 or loop.preheader is None:
            raise self.refuse("leaves other than by its condition (break, return, goto) or "
                              "has no single back edge", hint="write it as a counted for "
                              "loop without early exits")
        _, taken, other = term.operands
        if taken not in self.blocks or other in self.blocks:
            raise self.refuse("has a condition pyzyme cannot read",
                              hint="write it as for (i = start; i < n; i++)")
        if other.phis:
            raise self.refuse("passes values out in registers", hint="compile without "
                              "optimisation of the loop (this is clang's own module)")
        return header, taken, other

    def _counter(self, header):
        cond = header.terminator.operands[0]
        if not (isinstance(cond, I.Compare) and cond.predicate in ("slt", "sle", "ult", "ule",
                                                                   "ne")):
            raise self.refuse("has a condition pyzyme cannot read",
                              hint="write it as for (i = start; i < n; i++)")
        counter, bound = (_uncast(v) for v in cond.operands)
        iv = counter.pointer if isinstance(counter, I.Load) else None
        if not isinstance(iv, I.Alloca):
            raise self.refuse("has a counter pyzyme cannot find",
                              hint="write it as for (i = start; i < n; i++)")
        stores = [u for u in iv.users if isinstance(u, I.Store) and u.parent in self.blocks]
        ok = len(stores) == 1 and stores[0].pointer is iv
        if ok:
            inc = stores[0].value
            ok = isinstance(inc, I.BinaryOp) and inc.opcode == "add" and (
                isinstance(inc.operands[1], ConstantInt) and inc.operands[1].value == 1
                and isinstance(inc.operands[0], I.Load) and inc.operands[0].pointer is iv)
        if not ok:
            raise self.refuse("has a counter that does not go up by one each iteration",
                              hint="write it as for (i = start; i < n; i++)")
        if self.defined_inside(bound) and not (
                isinstance(bound, I.Load) and not self.written_inside(bound.pointer)):
            raise self.refuse("has a bound that changes in the loop",
                              hint="compute the bound before the loop")
        return iv, cond.operands[1], cond.predicate

    # -- the step ------------------------------------------------------------------------------
    def _step(self, header, body, iv, slots):
        params = [("i", T.i64)]
        for v in slots["written"] + slots["pointers"]:
            params.append((v.name or "slot", T.ptr))
        for v in slots["values"]:
            params.append((v.name or "value",
                           v.allocated_type if isinstance(v, I.Alloca) else v.type))
        step = self.new_step(naming.checkpoint_step(self.fn.name), T.void, params)
        mapping: dict = {}
        b = IRBuilder(step.append_block("entry"))
        self.own_slots(b, slots["own"], mapping)
        index = step.args[0]
        b.store(index if iv.allocated_type == T.i64 else b.trunc(index, iv.allocated_type),
                mapping[iv])
        args = iter(step.args[1:])
        for v in slots["written"] + slots["pointers"]:
            mapping[v] = next(args)
        loaded = {}
        for v in slots["values"]:
            (loaded if isinstance(v, I.Alloca) else mapping)[v] = next(args)
        # Each call runs the body once: the header's test is the driver's.
        self.copy_blocks(step, mapping, header, {
            header: lambda bb, term: bb.br(mapping[body]),
            self.loop.latches[0]: lambda bb, term: bb.ret_void()}, loaded)
        return step

    # -- the caller ----------------------------------------------------------------------------
    def _replace(self, header, exit_, iv, bound, pred, step, slots) -> None:
        module = self.module
        scheme_fn = module.get_function(SCHEME_FUNCTION)
        if scheme_fn is None or scheme_fn.is_declaration:
            raise self.refuse("needs pyzyme's <enzyme/checkpoint.h>",
                              hint="#include <enzyme/checkpoint.h> in this file")
        pre = self.loop.preheader
        b = IRBuilder()
        b.position_before(pre.terminator)
        start = b.load(iv.allocated_type, iv, name="ckpt.start")
        end = self.materialize(b, bound)
        signed = pred in ("slt", "sle", "ne")
        start64, end64 = (v if v.type == T.i64 else (b.sext if signed else b.zext)(v, T.i64)
                          for v in (start, end))
        count = b.sub(end64, start64, name="ckpt.count")
        if pred in ("sle", "ule"):
            count = b.add(count, const_int(T.i64, 1))
        count = b.select(b.icmp("sgt", count, const_int(T.i64, 0)), count,
                         const_int(T.i64, 0), name="ckpt.steps")
        scheme_id, snapshots = (int(a.value) for a in self.call.args)
        if snapshots <= 0:  # the square root of the number of steps, at least one
            root = b.fptosi(b.call(module.declare("llvm.sqrt.f64",
                                                  T.FunctionType(T.double, [T.double])),
                                   [b.sitofp(count, T.double)]), T.i64)
            snaps = b.select(b.icmp("sgt", root, const_int(T.i64, 1)), root,
                             const_int(T.i64, 1))
        else:
            snaps = const_int(T.i64, snapshots)
        config = b.entry_alloca(T.ArrayType(5, T.i64), name="ckpt.config")
        for k, value in enumerate((snaps, const_int(T.i64, 0), const_null(T.ptr),
                                   const_int(T.i64, 0), const_null(T.ptr))):
            b.store(value, b.gep(T.i8, config, [const_int(T.i64, 8 * k)]), 8)
        scheme = b.call(scheme_fn, [const_int(scheme_fn.function_type.params[0], scheme_id)],
                        name="ckpt.scheme")
        regions = [(v, const_int(T.i64, slot_bytes(v))) for v in slots["written"]]
        values = [b.load(v.allocated_type, v) if isinstance(v, I.Alloca) else v
                  for v in slots["values"]]
        for v, value in zip(slots["values"], values):
            if value.type.is_pointer and self._written_through(v):
                regions.append((value, self._size(b, v, value)))
        entry = module.declare(_ENTRY, T.FunctionType(T.void, [T.ptr, T.i64, T.i64],
                                                      var_arg=True))
        args = [step, start64, count, self.marker_global("enzyme_scheme"), scheme, config]
        for pointer, size in regions:
            args += [self.marker_global("enzyme_checkpoint_region"), pointer, size]
        args += slots["written"] + slots["pointers"] + values
        b.call(entry, args, function_type=entry.function_type)
        last = b.add(start64, count)
        b.store(last if iv.allocated_type == T.i64 else b.trunc(last, iv.allocated_type), iv)
        pre.terminator.replace_uses_of(header, exit_)
        self.remove_loop()

    def _written_through(self, value) -> bool:
        """Whether the loop writes through the pointer ``value`` is, or a stack slot
        ``value`` holds."""
        if not isinstance(value, I.Alloca):
            return self.written_inside(value)
        return any(_loaded_from(underlying_object(p)) is value for _, p in self.writes())

    def _size(self, b: IRBuilder, slot, value):
        """The bytes the pointer in ``slot`` (loaded as ``value``) points to: a size hint
        for it, else its allocation's constant size."""
        origin = _stored(slot)
        for hint in calls_of(self.module, _SIZE_HINT):
            if hint.function is self.fn and _stored(hint.args[0]) is origin \
                    and isinstance(hint.args[1], ConstantInt):
                return const_int(T.i64, hint.args[1].value)
        callee = origin.called_function if isinstance(origin, I.Call) else None
        row = default_rules().lookup(callee.name, "call") if callee is not None else None
        if isinstance(row, Allocation) and all(isinstance(origin.args[k], ConstantInt)
                                               for k in row.size_args):
            n = 1
            for k in row.size_args:  # malloc's size, calloc's count times size
                n *= origin.args[k].value
            return const_int(T.i64, n)
        raise self.refuse(f"writes through {getattr(slot, 'name', '') or 'a pointer'}, whose "
                          f"size pyzyme cannot tell for its snapshots",
                          hint=f"call {_SIZE_HINT}(pointer, bytes, 0) before the loop")


def _uncast(value):
    while isinstance(value, I.Cast) and value.opcode in ("sext", "zext", "trunc"):
        value = value.operands[0]
    return value


def _loaded_from(obj):
    """The stack slot pointer ``obj`` was loaded from, or None."""
    return obj.pointer if isinstance(obj, I.Load) and isinstance(obj.pointer, I.Alloca) \
        else None


def _stored(value):
    """What a stack slot holds (the one value stored into it), or ``value`` itself."""
    if isinstance(value, I.Alloca):
        stores = [u for u in value.users if isinstance(u, I.Store) and u.pointer is value]
        return stores[0].value if len(stores) == 1 else value
    return through_locals(value)
