"""The copy of a C/C++ module that is differentiated, and its linking back into the original.

Enzyme differentiates a function after its own pre-processing (mem2reg, SROA, inlining of
callees...), on a clone, whatever optimisation level the program was compiled at: at ``-O0``
clang marks every function ``optnone noinline`` and keeps every local in memory. pyzyme does
the same with a second module, the *AD copy*:

- it is the whole module, with the functions to differentiate (``targets``) kept visible and
  every other definition internal, so LLVM's pre-AD pipeline (:func:`pyzyme.runtime.passes.
  ad_friendly`) inlines callees into them and deletes what they do not use;
- ``optnone``/``noinline`` are dropped, except on functions that must stay calls (those with
  custom derivatives or declared inactive);
- global variables the program may write are *declarations* in the copy, so the derivative
  reads and writes the program's own globals once the copy is linked back; constants stay as
  internal definitions, so loads of them can still be folded;
- debug information is dropped but for the instructions' source lines, which errors name:
  the functions lose their subprograms (generated code has no locations, and LLVM rejects
  calls without one in a function that has a subprogram).

:func:`link_into` then keeps only the named entry points of the copy (internalising the rest,
so its copies of the program's functions cannot clash with the originals) and links it into
the original module with llvmlite.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pyzyme import ir, naming
from pyzyme.diff.tape.pool import CAPACITY_NAME, FREE_NAME, REALLOC_NAME
from pyzyme.errors import FrontendError
from pyzyme.frontends.global_callees import guard_global_callees

__all__ = ["promote_local_globals", "ad_copy", "noinline_suffix", "link_into", "strip_debug_info", "expand_realloc",
           "rename_global", "tape_pool_as_libc", "fma_asm_as_intrinsic"]

_DBG_ATTACHMENT = re.compile(r"\s*!dbg\s+!\d+")
_COMDAT = re.compile(r",?\s*comdat(\(\$[^)]*\))?")
_DROPPED_FN_ATTRS = re.compile(r"\b(optnone|noinline)\b")
# Linkages of definitions that LLVM deletes when nothing in the module uses them.
_DISCARDABLE = ("internal", "private", "linkonce", "linkonce_odr", "weak", "weak_odr",
                "available_externally")


def promote_local_globals(module: ir.Module, tag: str) -> list[str]:
    """Give the program's writable internal globals external (hidden) linkage.

    The AD copy declares the globals it may write; a declaration can only name a global that
    the linker sees, so a ``static double state;`` of the program is renamed
    ``state.<tag>`` and made ``hidden`` external. Returns the new names.

    Examples
    --------
    >>> m = ir.parse_module("@s = internal global double 0.0\\n")
    >>> promote_local_globals(m, "pz")
    ['s.pz']
    >>> print(str(m).strip().splitlines()[-1])
    @s.pz = hidden global double 0.0
    """
    renamed = []
    for gv in module.globals:
        if gv.is_constant or gv.is_declaration or gv.linkage not in ("internal", "private"):
            continue
        new = module.unique_global_name(f"{gv.name}.{tag}")
        rename_global(module, gv, new)
        gv.prefix = " ".join(["hidden", *with_external(gv.prefix).split()])
        renamed.append(new)
    return renamed


def with_external(prefix: str) -> str:
    return ir.values.with_linkage(prefix, "external")


def rename_global(module: ir.Module, value, new: str) -> None:
    """Rename a function or global of ``module`` (its uses print the new name)."""
    # The module indexes its symbols by name; references print the value's current name.
    del module._symbols[value.name]
    value.name = new
    module._symbols[new] = value


def strip_debug_info(module: ir.Module, *, keep_lines: bool = False) -> None:
    """Remove ``!dbg`` attachments and ``#dbg_*`` records from every function of ``module``;
    with ``keep_lines``, keep the instructions' locations (a function without a subprogram
    may carry them, and code generated into it needs none), for errors to name."""
    for fn in module.functions:
        fn.suffix = _DBG_ATTACHMENT.sub("", fn.suffix)
        for inst in fn.instructions():
            if inst.metadata and not keep_lines:
                inst.metadata = [(k, t) for k, t in inst.metadata if k != "dbg"]
            inst.debug_records = []


def ad_copy(module_text: str, targets: Iterable[str], *, keep_calls: Iterable[str] = (),
            optimize: bool = True) -> ir.Module:
    """The AD copy of ``module_text`` (see the module docstring), optimised for AD.

    Parameters
    ----------
    module_text
        The program's module, after :func:`promote_local_globals`.
    targets
        Names of the functions that will be differentiated: they stay visible.
    keep_calls
        Functions that must stay calls (custom derivatives, inactive functions): they keep
        ``noinline`` and stay visible, so the derivative can call them.
    optimize
        Run the pre-AD pipeline (:func:`pyzyme.runtime.passes.ad_friendly`).

    Examples
    --------
    >>> text = '''@g = global double 2.0
    ... define double @f(double %x) noinline optnone {
    ...   %p = alloca double
    ...   store double %x, ptr %p
    ...   %y = load double, ptr %p
    ...   %z = load double, ptr @g
    ...   %r = fmul double %y, %z
    ...   ret double %r
    ... }'''
    >>> m = ad_copy(text, ["f"])
    >>> [inst.opcode for inst in m.get_function("f").instructions()]  # no alloca left
    ['load', 'fmul', 'ret']
    >>> m.get_global("g").is_declaration
    True
    """
    targets, keep_calls = list(targets), list(keep_calls)
    module = ir.parse_module(module_text)
    guard_global_callees(module)  # while the globals still have their initial values
    for name in targets + keep_calls:
        if module.get_function(name) is None or module.get_function(name).is_declaration:
            raise FrontendError(f"the module defines no function @{name}")
    for gv in module.globals:
        if gv.is_declaration:
            continue
        if gv.is_constant:
            gv.prefix = ir.values.with_linkage(gv.prefix, "internal")
            gv.suffix = _COMDAT.sub("", gv.suffix)
        else:
            _declare(gv)
    keep = set(keep_calls)
    visible = set(targets) | keep
    for fn in module.functions:
        if fn.is_declaration:
            continue
        fn.suffix = _DROPPED_FN_ATTRS.sub("", _COMDAT.sub("", fn.suffix)).strip()
        if fn.name in visible and fn.linkage in _DISCARDABLE:
            # A static function, a template instance or an inline function that nothing in
            # the copy calls would be deleted as dead before the derivative is built.
            fn.prefix = ir.values.with_linkage(fn.prefix, "external")
        elif fn.linkage == "available_externally":
            fn.prefix = ir.values.with_linkage(fn.prefix, "internal")
        if fn.name in keep or naming.is_checkpoint_sweep(fn.name):
            # (A checkpointed loop's sweeps in a gradient: forward mode over it refuses them
            # by name, which it could not once they were inlined.)
            fn.suffix = noinline_suffix(fn.suffix)
        for i, arg in enumerate(fn.args):
            if not arg.name:  # clang -O0 leaves them unnamed; derivatives name their shadows
                arg.name = fn.unique_name(f"arg{i}")
    strip_debug_info(module, keep_lines=True)
    tape_pool_as_libc(module)
    expand_realloc(module)
    cxx_allocation_as_malloc(module)
    posix_memalign_as_aligned_alloc(module)
    fma_asm_as_intrinsic(module)
    module.extra_lines = [(section, _without_inlining_attrs(text) if section == "attributes"
                           else text) for section, text in module.extra_lines]
    from pyzyme.runtime import passes
    from pyzyme.runtime.modules import parse

    ref = parse(str(module), what="AD copy of the module")
    passes.strip_to(ref, targets + keep_calls)
    if optimize:
        ref = passes.ad_friendly(ref)
    return ir.parse_module(str(ref))


def noinline_suffix(suffix: str) -> str:
    """A function's ``suffix`` (the text after its parameters) with ``noinline`` among its
    attributes: after ``unnamed_addr``, ``local_unnamed_addr`` and ``addrspace(N)``, which
    LLVM's grammar puts first.

    >>> noinline_suffix("local_unnamed_addr #0 comdat")
    'local_unnamed_addr noinline #0 comdat'
    >>> noinline_suffix("#1")
    'noinline #1'
    """
    words = suffix.split()
    if "noinline" in words:
        return suffix
    at = 0
    while at < len(words) and (words[at] in ("unnamed_addr", "local_unnamed_addr")
                               or words[at].startswith("addrspace(")):
        at += 1
    return " ".join([*words[:at], "noinline", *words[at:]])


def _without_inlining_attrs(group: str) -> str:
    """An ``attributes #N = { ... }`` line without ``optnone``/``noinline``; LLVM rejects an
    empty group, so one left empty holds a string attribute that means nothing."""
    text = _DROPPED_FN_ATTRS.sub("", group)
    return re.sub(r"=\s*\{\s*\}", '= { "pyzyme-none" }', text)


def tape_pool_as_libc(module: ir.Module) -> None:
    """Call ``realloc``/``free`` where code that an earlier round generated (a nested
    derivative) calls its tape pool's ``pyzyme.tape_realloc``/``pyzyme.tape_free``, and
    ``pyzyme.tape_capacity`` where it calls a copy of it (``pyzyme.tape_capacity.3``: rounds
    linked into one module renamed each other's).

    Inlined, the pool's recycled blocks (pointers kept in a global array, which has no
    shadow) would merge with fresh ones in the code differentiated; as C's calls, the tape's
    blocks are allocations pyzyme shadows and frees as any other (and ``realloc`` is then
    expanded). Within the copy each block is allocated and released by the same pair, so
    the pool's header is not needed. ``pyzyme.tape_capacity`` stays a call (its row says it
    is inactive); its copies are the same code.
    """
    ptr = ir.ptr
    targets = {REALLOC_NAME: ("realloc", ir.FunctionType(ptr, [ptr, ir.i64])),
               FREE_NAME: ("free", ir.FunctionType(ir.void, [ptr])),
               CAPACITY_NAME: (CAPACITY_NAME, None)}
    for fn in list(module.functions):
        base = re.sub(r"\.\d+$", "", fn.name)
        if base not in targets or not fn.users or (base == CAPACITY_NAME and (
                fn.name == base or module.get_function(base) is None)):
            continue
        name, ftype = targets[base]
        target = module.get_function(name) or module.declare(name, ftype or fn.function_type)
        for user in list(fn.users):
            if isinstance(user, ir.CallBase) and user.called_function is fn:
                user.set_operand(0, target)


def expand_realloc(module: ir.Module) -> None:
    """Replace ``realloc(p, n)`` by a new block, a copy of the old one and a free.

    Reverse mode cannot grow a block that holds active values in place: adjoints accumulated
    into the old shadow must reach the new one. As a new block, a ``memcpy`` and a ``free``,
    it is three operations pyzyme differentiates (the free of the old block is deferred until
    the reverse sweep is done with it). The bytes copied are the smaller of ``n`` and the old
    block's ``malloc_usable_size``.
    """
    realloc = module.get_function("realloc")
    if realloc is None or not realloc.users:
        return
    i64, ptr = ir.i64, ir.ptr
    malloc = module.declare("malloc", ir.FunctionType(ptr, [i64]))
    free = module.declare("free", ir.FunctionType(ir.void, [ptr]))
    usable = module.declare("malloc_usable_size", ir.FunctionType(i64, [ptr]))
    memcpy = module.declare("llvm.memcpy.p0.p0.i64",
                          ir.FunctionType(ir.void, [ptr, ptr, i64, ir.i1]))
    helper = module.add_function(module.unique_global_name("pyzyme.realloc"),
                                 ir.FunctionType(ptr, [ptr, i64]), prefix="internal")
    p, n = helper.args
    entry, copy, done = (helper.append_block(x) for x in ("entry", "copy", "done"))
    b = ir.IRBuilder(entry)
    new = b.call(malloc, [n], name="new")
    b.cbranch(b.icmp("eq", p, ir.const_null(ptr)), done, copy)
    b.position_at_end(copy)
    old = b.call(usable, [p], name="old")
    size = b.select(b.icmp("ult", old, n), old, n, name="len")
    b.call(memcpy, [new, p, size, ir.const_int(ir.i1, 0)])
    b.call(free, [p])
    b.br(done)
    b.position_at_end(done)
    b.ret(new)
    for user in list(realloc.users):
        if isinstance(user, ir.CallBase) and user.called_function is realloc:
            user.set_operand(0, helper)


def posix_memalign_as_aligned_alloc(module: ir.Module) -> None:
    """``posix_memalign(&p, a, n)`` as ``p = aligned_alloc(a, n rounded up to a)``, which
    returns the block (an allocation pyzyme shadows) instead of storing it through a pointer;
    the call's status is 0 (a failed allocation is not differentiated)."""
    fn = module.get_function("posix_memalign")
    if fn is None or not fn.users:
        return
    i64, ptr = ir.i64, ir.ptr
    aligned = module.declare("aligned_alloc", ir.FunctionType(ptr, [i64, i64]))
    for call in list(fn.users):
        if not isinstance(call, ir.Call) or call.called_function is not fn:
            continue
        out, align, size = call.args
        b = ir.IRBuilder()
        b.position_before(call)
        one = ir.const_int(i64, 1)
        rounded = b.and_(b.add(size, b.sub(align, one)), b.xor(b.sub(align, one),
                                                                ir.const_int(i64, -1)))
        b.store(b.call(aligned, [align, rounded]), out, 8)
        call.replace_all_uses_with(ir.const_int(call.type, 0))
        call.erase()


# C++'s global operator new/delete (Itanium names) and the C calls that implement them.
_CXX_NEW = ("_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t")
_CXX_DELETE = ("_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm")


def cxx_allocation_as_malloc(module: ir.Module) -> None:
    """Call ``malloc``/``free`` where C++ calls the global ``operator new``/``delete``.

    The default operators are ``malloc`` and ``free`` underneath; as such, the blocks get
    shadows and their release waits for the reverse sweep, as C's do. (Only the AD copy is
    changed: a program replacing the global operators keeps them outside derivatives.)
    """
    i64, ptr = ir.i64, ir.ptr
    for name in _CXX_NEW + _CXX_DELETE:
        fn = module.get_function(name)
        if fn is None or not fn.is_declaration or not fn.users:
            continue
        if name in _CXX_NEW:
            target = module.declare("malloc", ir.FunctionType(ptr, [i64]))
        else:
            target = module.declare("free", ir.FunctionType(ir.void, [ptr]))
        for call in list(fn.users):
            if not isinstance(call, ir.CallBase) or call.called_function is not fn:
                continue
            b = ir.IRBuilder()
            b.position_before(call)
            new = b.call(target, call.args[:1])
            if call.type != ir.void:
                call.replace_all_uses_with(new)
            if isinstance(call, ir.Invoke):  # malloc does not throw: no unwind edge
                b.br(call.normal_dest)
                forget_edge(call.parent, call.unwind_dest)
            call.erase()


def forget_edge(block, dest) -> None:
    """Drop ``block``'s incoming values from the phis of ``dest`` (the edge is gone)."""
    for phi in list(dest.phis):
        kept = [(v, b) for v, b in phi.incoming if b is not block]
        new = ir.Phi(phi.type, phi.flags)
        for v, b in kept:
            new.add_incoming(v, b)
        dest.insert(dest.instructions.index(phi), new)
        new.name = phi.name
        phi.name = ""
        phi.replace_all_uses_with(new)
        phi.erase()


# Eigen's AVX multiply-add under clang (PacketMath.h's pmadd): ``res = c; asm("vfmadd231pd
# %[a], %[b], %[c]" : [c] "+x" (res) : [a] "x" (a), [b] "x" (b))``, which LLVM writes as
# ``asm "vfmadd231pd $1, $2, $0", "=x,x,x,0,..."(a, b, c)``: $0 = $2 * $1 + $0, one rounding.
_FMA_ASM = re.compile(r'asm\s+"vfmadd231p([sd])\s+\$1,\s*\$2,\s*\$0",\s*'
                      r'"=x,x,x,0(?:,~\{(?:dirflag|fpsr|flags)\})*"')


def fma_asm_as_intrinsic(module: ir.Module) -> None:
    """Call ``llvm.fma`` where inline assembly is a fused multiply-add (``vfmadd231pd``, as
    Eigen writes its AVX ``pmadd`` for clang): the same value, rounded once, which pyzyme
    differentiates; inline assembly has no derivative. Other assembly is left as it is."""
    for fn in module.functions:
        for call in [i for i in fn.instructions() if isinstance(i, ir.CallBase)]:
            m = _FMA_ASM.match(getattr(call.callee, "text", "") or "")
            ty = call.type
            if m is None or not isinstance(ty, ir.VectorType) or len(call.args) != 3 or \
                    str(ty.element) != ("double" if m.group(1) == "d" else "float") or \
                    any(a.type != ty for a in call.args):
                continue
            fma = module.declare(f"llvm.fma.v{ty.count}{'f64' if m.group(1) == 'd' else 'f32'}",
                                 ir.FunctionType(ty, [ty, ty, ty]))
            b = ir.IRBuilder()
            b.position_before(call)
            call.replace_all_uses_with(b.call(fma, list(call.args)))
            call.erase()


def _declare(gv) -> None:
    """Turn a global variable definition into an external declaration of the same global."""
    keep = [w for w in gv.prefix.split()
            if w.startswith(("thread_local", "addrspace(")) or w == "externally_initialized"]
    gv.initializer = None
    gv.prefix = " ".join(["external", *keep])
    align = re.search(r"align\s+\d+", gv.suffix)
    gv.suffix = f", {align.group(0)}" if align else ""


def link_into(program: str, copy: ir.Module, entries: Iterable[str], *,
              opt_level: int | None = 2) -> str:
    """Link the ``entries`` of ``copy`` (and what they use) into the module text ``program``.

    Everything else in ``copy`` is made internal first, so its copies of the program's
    functions cannot clash with the originals; the result is optimised at ``opt_level``
    (None: not at all) before linking.
    """
    from pyzyme.runtime import passes
    from pyzyme.runtime.modules import parse, verify

    entries = list(entries)
    ref = parse(str(copy), what="generated derivatives")
    passes.strip_to(ref, entries)
    verify(ref, what="generated derivatives")
    if opt_level is not None:
        passes.optimize(ref, opt_level)
    main = parse(program, what="program module")
    try:
        main.link_in(ref)
    except RuntimeError as err:
        raise FrontendError(f"cannot link the derivatives into the program: {err}") from None
    verify(main, what="program with its derivatives")
    return str(main)
