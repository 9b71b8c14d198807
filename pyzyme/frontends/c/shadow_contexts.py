"""Enzyme's contexts of global-variable shadows: ``__enzyme_context``, ``__enzyme_shadow``,
``__enzyme_zero_shadows``.

A program asks for derivatives with respect to its global variables through a *context*::

    void *ctx = __enzyme_context(1);                   // width: shadows per global
    double *dg = __enzyme_shadow(ctx, &g, 0);          // g's shadow in ctx, lane 0
    __enzyme_zero_shadows(ctx);                        // every shadow of ctx zeroed
    __enzyme_autodiff(f, enzyme_context, ctx, x);      // f's globals take their shadows there

or, without a context, through each width's default shadows: ``__enzyme_shadow(&g, width,
lane)`` names the shadow a derivative call of that width without ``enzyme_context`` uses for g.
Shadows are made when first asked for: zeroed, except that a global's integers are copied from
it and its pointers point to the shadows of what they point to (another global's, or a zeroed
block as large as the heap block the program allocated).

pyzyme keeps the shadows in a small runtime written in C (``include/pyzyme_shadow_contexts.c``,
compiled once per process and linked into the module). :func:`prepare` readies a module for
it, once, before any derivative is built:

- the calls above become calls of the runtime (:data:`RUNTIME`), each handed the module's
  *table*: its global variables, their sizes and where they hold integers and pointers;
- the program's own allocations and frees (``malloc``, ``aligned_alloc``, ``operator new``,
  ``free``...) and its stores of pointers into globals are reported to the runtime, so that a
  pointer a global holds can be followed to its block (the AD copy drops these reports:
  :func:`ready_copy`).

The derivative of a call with ``enzyme_context`` then takes each global its code uses
(:mod:`~pyzyme.frontends.c.global_shadows`) with the shadows the context gives
(:mod:`~pyzyme.frontends.c.adapters`).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from pyzyme import ir
from pyzyme.analysis.activity import can_carry_derivative, contains_type
from pyzyme.analysis.layout import sizeof, struct_layout
from pyzyme.errors import FrontendError, TypeAnalysisError
from pyzyme.frontends.c.clang import compile_to_ir
from pyzyme.frontends.c.enzyme_calls import (CONTEXT_NEW, EnzymeCallError,
                                             source_location, through_locals)
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantExpr, GlobalVariable, OpaqueConstant, const_c_string
from pyzyme.rules.spec import Allocation

__all__ = ["RUNTIME", "RUNTIME_PREFIX", "RULES", "TABLE_PREFIX", "prepare", "uses_contexts",
           "queried_globals", "ready_copy", "table_of", "fields", "carries_derivatives",
           "c_string"]

_SOURCE = Path(__file__).resolve().parent / "include" / "pyzyme_shadow_contexts.c"
#: The runtime's functions and their types (the table is a ``ptr``).
RUNTIME = {
    "new": (CONTEXT_NEW, T.FunctionType(T.ptr, [T.i32, T.ptr])),
    "default": ("__pyzyme_ctx_default", T.FunctionType(T.ptr, [T.i32, T.ptr])),
    "shadow": ("__pyzyme_ctx_shadow", T.FunctionType(T.ptr, [T.ptr, T.ptr, T.i32, T.ptr])),
    "default_shadow": ("__pyzyme_ctx_default_shadow",
                       T.FunctionType(T.ptr, [T.ptr, T.i32, T.i32, T.ptr])),
    "zero": ("__pyzyme_ctx_zero", T.FunctionType(T.void, [T.ptr, T.ptr])),
    "check": ("__pyzyme_ctx_check", T.FunctionType(T.void, [T.ptr, T.i32, T.ptr])),
    "note_alloc": ("__pyzyme_ctx_note_alloc", T.FunctionType(T.void, [T.ptr, T.i64])),
    "note_free": ("__pyzyme_ctx_note_free", T.FunctionType(T.void, [T.ptr])),
    "note_store": ("__pyzyme_ctx_note_store", T.FunctionType(T.void, [T.ptr, T.ptr])),
}
_REPORTS = tuple(RUNTIME[k][0] for k in ("note_alloc", "note_free", "note_store"))
#: A context made in differentiated code (a derivative taken inside a function differentiated
#: in turn) has another, fresh, context for shadow: it holds the derivatives of the first's
#: shadows (the runtime registers the derivatives of ``__enzyme_shadow`` in C).
RULES = (Allocation((CONTEXT_NEW,), "custom", zeroed=True),)
#: Every symbol of the runtime starts so.
RUNTIME_PREFIX = "__pyzyme_ctx"
TABLE_PREFIX = "__pyzyme_ctx.table."
_ENZYME_API = ("__enzyme_context", "__enzyme_shadow", "__enzyme_zero_shadows")

# Allocators of the program: the argument positions whose product is the block's size.
_ALLOCATORS = {"malloc": (0,), "calloc": (0, 1), "aligned_alloc": (1,), "memalign": (1,),
               "valloc": (0,), "realloc": (1,), "_Znwm": (0,), "_Znam": (0,),
               "_ZnwmRKSt9nothrow_t": (0,), "_ZnamRKSt9nothrow_t": (0,),
               "_ZnwmSt11align_val_t": (0,), "_ZnamSt11align_val_t": (0,)}
_FREES = ("free", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvSt11align_val_t",
          "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t")
# Globals that never carry derivatives though they hold pointers: C's streams, C++'s vtables,
# type information and standard streams, Enzyme's markers and registrations.
_NEVER = ("llvm.", "enzyme_", "__enzyme", "__pyzyme", "_ZTV", "_ZTI", "_ZTS", "_ZTT", "_ZNSt",
          "_ZSt", "stdin", "stdout", "stderr", ".str")
_KEEP, _POINTER = 0, 1


def uses_contexts(text: str) -> bool:
    """Whether the module text calls Enzyme's shadow functions (a quick look at the text)."""
    return any(name in text for name in _ENZYME_API)


def carries_derivatives(gv) -> bool:
    """Whether a shadow of the global ``gv`` can hold derivatives: a variable of the program
    (not one of the names in ``_NEVER``) holding floats or pointers, of a known size."""
    ty = getattr(gv, "value_type", None)
    if not isinstance(gv, GlobalVariable) or ty is None or gv.name.startswith(_NEVER):
        return False
    try:
        sizeof(ty)
    except TypeAnalysisError:
        return False
    return can_carry_derivative(ty)


# ---------------------------------------------------------------------------- preparing
def prepare(module_text: str) -> str:
    """``module_text`` ready for derivatives with respect to its globals (module docstring):
    unchanged when it calls none of Enzyme's shadow functions.

    Raises
    ------
    EnzymeCallError
        A call of ``__enzyme_context``, ``__enzyme_shadow`` or ``__enzyme_zero_shadows``
        that does not match Enzyme's signatures (its source line named).
    """
    if not uses_contexts(module_text):
        return module_text
    module = ir.parse_module(module_text)
    tag = hashlib.sha256(module_text.encode()).hexdigest()[:8]
    # linkonce_odr: the AD copy, which may not keep it, declares it to reach it.
    table = module.add_global(f"{TABLE_PREFIX}{tag}", T.StructType([T.i64, T.ptr]),
                              is_constant=True, prefix="linkonce_odr hidden")
    rewritten = _rewrite_calls(module, table)
    if not rewritten:
        return module_text
    _report_memory(module, table)
    _fill_table(module, table, tag)
    return _with_runtime(str(module))


def _runtime(module, key: str):
    name, fnty = RUNTIME[key]
    return module.declare(name, fnty)


def _forget_debug_records(fn) -> None:
    """Drop ``#dbg_value`` records of ``fn``: pyzyme keeps them as text naming values by
    number, which inserted and removed instructions renumber."""
    for inst in fn.instructions():
        inst.debug_records = []


def _int(b: IRBuilder, value, ty):
    vt = value.type
    if vt == ty or not vt.is_int:
        return value
    return b.trunc(value, ty) if vt.width > ty.width else b.sext(value, ty)


def _rewrite_calls(module, table) -> int:
    """Calls of Enzyme's shadow functions as calls of the runtime; how many."""
    count = 0
    for fn in list(module.functions):
        for call in list(fn.instructions()):
            callee = call.called_function if isinstance(call, I.CallBase) else None
            api = next((n for n in _ENZYME_API if callee is not None and n in callee.name), None)
            if api is None:
                continue
            where = source_location(module, call)
            _forget_debug_records(fn)
            b = IRBuilder()
            b.position_before(call)
            args = list(call.args)
            types = [a.type for a in args]
            if api == "__enzyme_context" and len(args) == 1 and types[0].is_int:
                new = b.call(_runtime(module, "new"), [_int(b, args[0], T.i32), table])
            elif api == "__enzyme_zero_shadows" and len(args) == 1 and types[0].is_pointer:
                new = b.call(_runtime(module, "zero"), [args[0], table])
            elif api == "__enzyme_shadow" and len(args) == 3 and types[0].is_pointer \
                    and types[1].is_pointer and types[2].is_int:
                new = b.call(_runtime(module, "shadow"),
                             [args[0], args[1], _int(b, args[2], T.i32), table])
            elif api == "__enzyme_shadow" and len(args) == 3 and types[0].is_pointer \
                    and types[1].is_int and types[2].is_int:
                new = b.call(_runtime(module, "default_shadow"),
                             [args[0], _int(b, args[1], T.i32), _int(b, args[2], T.i32), table])
            else:
                shapes = {"__enzyme_context": "void *__enzyme_context(int width)",
                          "__enzyme_zero_shadows": "void __enzyme_zero_shadows(void *context)",
                          "__enzyme_shadow": "void *__enzyme_shadow(void *context, void "
                                             "*global, int lane) or void *__enzyme_shadow(void "
                                             "*global, int width, int lane)"}
                got = ", ".join(map(str, types))
                raise EnzymeCallError(f"{where}: {api} is called with ({got}); Enzyme's is "
                                      f"{shapes[api]}")
            new.metadata = [(k, t) for k, t in call.metadata if k == "dbg"]
            if isinstance(call, I.Invoke):
                raise EnzymeCallError(f"{where}: {api} is called where an exception may unwind "
                                      f"to a handler", hint="compile with -fno-exceptions")
            if call.type != T.void:
                call.replace_all_uses_with(new if new.type != T.void else ir.Undef(call.type))
            call.erase()
            count += 1
    for fn in list(module.functions):
        if fn.is_declaration and any(n in fn.name for n in _ENZYME_API) and not fn.users:
            module.remove(fn)
    return count


def _report_memory(module, table) -> None:
    """The program's allocations, frees and stores of pointers into globals, reported to the
    runtime (the derivatives' own are not: :func:`ready_copy`)."""
    for fn in module.functions:
        if fn.is_declaration or fn.name.startswith(RUNTIME_PREFIX):
            continue
        touched = False
        for inst in list(fn.instructions()):
            callee = inst.called_function if isinstance(inst, I.CallBase) else None
            name = callee.name if callee is not None else None
            b = IRBuilder()
            if name in _FREES or name == "realloc":
                b.position_before(inst)
                b.call(_runtime(module, "note_free"), [inst.args[0]])
                touched = True
            if name in _ALLOCATORS and isinstance(inst, I.Call) and inst.type.is_pointer:
                b.position_after(inst)
                size = None
                for k in _ALLOCATORS[name]:
                    n = _int(b, inst.args[k], T.i64)
                    size = n if size is None else b.mul(size, n, name="pz.size")
                b.call(_runtime(module, "note_alloc"), [inst, size])
                touched = True
            elif name == "posix_memalign" and isinstance(inst, I.Call):
                b.position_after(inst)
                block = b.load(T.ptr, inst.args[0], 8, name="pz.block")
                ok = b.icmp("eq", inst, ir.const_int(inst.type, 0), name="pz.ok")
                block = b.select(ok, block, ir.const_null(T.ptr), name="pz.block")
                b.call(_runtime(module, "note_alloc"), [block, _int(b, inst.args[2], T.i64)])
                touched = True
            elif isinstance(inst, I.Store) and contains_type(inst.value.type,
                                                             lambda t: t.is_pointer) \
                    and _global_of(inst.pointer) is not None:
                b.position_after(inst)
                b.call(_runtime(module, "note_store"), [inst.pointer, table])
                touched = True
            elif name is not None and name.startswith(("llvm.memcpy", "llvm.memmove")) \
                    and _global_of(inst.args[0]) is not None:  # a struct assigned
                b.position_after(inst)
                b.call(_runtime(module, "note_store"), [inst.args[0], table])
                touched = True
        if touched:
            _forget_debug_records(fn)


def _global_of(pointer):
    """The global variable ``pointer`` points into (through getelementptrs), or None."""
    for _ in range(64):
        if isinstance(pointer, GlobalVariable):
            return pointer if carries_derivatives(pointer) else None
        if isinstance(pointer, ConstantExpr) and pointer.opcode in ("getelementptr", "bitcast"):
            pointer = pointer.operands[0]
        elif isinstance(pointer, I.GetElementPtr):
            pointer = pointer.operands[0]
        else:
            return None
    return None


def ready_copy(copy) -> None:
    """The AD copy as derivatives use the runtime: without the reports :func:`prepare` added
    (a derivative's blocks and pointers are its own: it stores the shadow of a pointer it
    stores, and a report would point the shadows elsewhere), and with the runtime's functions
    declared only, so that the derivatives call the program's (one state for all) and none is
    inlined into code a later round differentiates."""
    for fn in copy.functions:
        if fn.name.startswith(RUNTIME_PREFIX) and not fn.is_declaration:
            for inst in list(fn.instructions()):
                inst._unlink_operands()
            fn.blocks = []
            fn.prefix = ir.values.with_linkage(fn.prefix, "external")
            continue
        for inst in list(fn.instructions()):
            if isinstance(inst, I.Call) and inst.called_function is not None and \
                    inst.called_function.name in _REPORTS:
                inst.erase()


# --------------------------------------------------------------------------------- table
def fields(ty) -> list[tuple[int, int, int, int, int]]:
    """Where a value of type ``ty`` holds integers (copied into its shadow) and pointers
    (translated): ``(offset, size, count, stride, kind)`` runs, kind 0 for integers and 1
    for a pointer; floats are left out (their shadows start at zero).

    >>> fields(ir.parse_type("{ ptr, i64, [4 x double], [3 x { i32, double }] }"))
    [(0, 8, 1, 8, 1), (8, 8, 1, 8, 0), (48, 4, 3, 16, 0)]
    """
    out = []
    for offset, size, count, stride, kind in _runs(ty):
        last = out[-1] if out else None
        if last and kind == _KEEP == last[4] and last[2] == count == 1 and \
                last[0] + last[1] == offset:
            out[-1] = (last[0], last[1] + size, 1, last[1] + size, _KEEP)
        else:
            out.append((offset, size, count, stride, kind))
    return out


def _runs(ty):
    if ty.is_pointer:
        return [(0, 8, 1, 8, _POINTER)]
    if ty.is_int:
        return [(0, sizeof(ty), 1, sizeof(ty), _KEEP)]
    if isinstance(ty, T.VectorType):
        inner = _runs(ty.element)
        return [(o, s, ty.count, sizeof(ty.element), k) for o, s, _, _, k in inner]
    if isinstance(ty, T.ArrayType):
        inner = fields(ty.element)
        step = sizeof(ty.element)
        if not inner or ty.count == 0:
            return []
        if len(inner) == 1 and inner[0][2] == 1:
            o, s, _, _, k = inner[0]
            if k == _KEEP and s == step:  # integers throughout
                return [(o, s * ty.count, 1, s * ty.count, k)]
            return [(o, s, ty.count, step, k)]
        if ty.count * len(inner) > 4096:
            raise FrontendError(f"a global of type {ty} mixes too many kinds of value for "
                                f"pyzyme's shadows of globals")
        return [(o + i * step, s, c, st, k) for i in range(ty.count)
                for o, s, c, st, k in inner]
    if isinstance(ty, (T.StructType, T.IdentifiedStructType)):
        offsets, _ = struct_layout(ty)
        return [(at + o, s, c, st, k) for at, e in zip(offsets, ty.elements)
                for o, s, c, st, k in fields(e)]
    return []


def c_string(module, text: str, name: str):
    """A new private constant of ``module`` named after ``name``, holding ``text`` as a C
    string."""
    string = const_c_string(text)
    return module.add_global(module.unique_global_name(name), string.type, string,
                             is_constant=True, prefix="private unnamed_addr")


_ENTRY = T.StructType([T.ptr, T.i64, T.ptr, T.ptr, T.i64])  # pz_global of the runtime


def _fill_table(module, table, tag: str) -> None:
    """The table's initializer: each global whose shadow may hold derivatives, or that a
    pointer of one may point into."""
    entries = []
    for k, gv in enumerate(list(module.globals)):
        if gv is table or not carries_derivatives(gv):
            continue
        ty = gv.value_type
        runs = fields(ty)
        name = c_string(module, gv.name, f"__pyzyme_ctx.name.{tag}.{k}")
        field_ty = T.ArrayType(len(runs), T.StructType([T.i64] * 5))
        text = ", ".join(f"{field_ty.element} {{ " + ", ".join(f"i64 {v}" for v in run) + " }"
                         for run in runs)
        layout = module.add_global(f"__pyzyme_ctx.fields.{tag}.{k}", field_ty,
                                   OpaqueConstant(field_ty, f"[{text}]"), is_constant=True,
                                   prefix="private unnamed_addr")
        entries.append(f"{_ENTRY} {{ ptr {gv.ref}, i64 {sizeof(ty)}, ptr {name.ref}, "
                       f"ptr {layout.ref}, i64 {len(runs)} }}")
    entry_ty = _ENTRY
    array_ty = T.ArrayType(len(entries), entry_ty)
    globals_ = module.add_global(f"__pyzyme_ctx.globals.{tag}", array_ty,
                                 OpaqueConstant(array_ty, f"[{', '.join(entries)}]"),
                                 is_constant=True, prefix="private")
    table.initializer = OpaqueConstant(table.value_type,
                                       f"{{ i64 {len(entries)}, ptr {globals_.ref} }}")


def table_of(module):
    """The table :func:`prepare` gave ``module`` (None: it has none)."""
    return next((g for g in module.globals if g.name.startswith(TABLE_PREFIX)), None)


# ------------------------------------------------------------------------------- queries
def queried_globals(module):
    """The globals whose default shadows the program asks for (``__enzyme_shadow(&g, width,
    lane)``): a set of names, or None when one of the addresses is not a global's."""
    fn = module.get_function(RUNTIME["default_shadow"][0])
    found = set()
    for call in (fn.users if fn is not None else ()):
        if not isinstance(call, I.CallBase) or call.called_function is not fn:
            continue
        gv = _global_of(through_locals(call.args[0]))
        if gv is None:
            return None
        found.add(gv.name)
    return found


# ------------------------------------------------------------------------------- runtime
@functools.lru_cache(maxsize=1)
def _runtime_ir() -> str:
    return compile_to_ir(_SOURCE, "c", "-O2", ["-std=c11", "-fno-vectorize",
                                               "-fno-slp-vectorize"])


def _with_runtime(text: str) -> str:
    """``text`` with the runtime linked in."""
    from pyzyme.runtime.modules import parse  # LLVM and Numba: only for such a program

    program = parse(text, what="program module")
    program.link_in(parse(_runtime_ir(), what="pyzyme's runtime of global shadows"))
    return str(program)
