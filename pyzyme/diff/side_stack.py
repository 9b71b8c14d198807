"""Derivatives of recursive functions run on a stack of their own, and say when it runs out.

A derivative's frame is larger than its primal's: besides the primal's values it keeps
adjoints, shadow pointers and tape pointers, saved across the recursive call. For
``f(x, n) = sin(f(x, n - 1)) * 0.5 + x`` Numba's primal takes 32 bytes of stack a level; its
augmented forward sweep takes 80, its reverse sweep 96, its forward-mode derivative 80, so at a
depth of 100,000, which the primal runs on Linux's 8 MiB main stack, reverse mode overflowed
that stack and killed the process. The tape itself is already on the heap (each level's
augmented call returns its tape block); what grows is the chain of native frames, which only
turning the recursion into a loop would remove.

So every function of a derivative's module from which a call cycle can be reached (its entry
points, externally visible) runs on a *side stack*: :func:`install` moves the entry's body to
``<entry>.body`` and makes the entry a wrapper that calls it on one of :data:`SLOTS` stacks of
``stack_bytes`` each (``Options.recursion_stack``), switching with the C library's
``makecontext``/``swapcontext``. The stacks are carved from one arena that the module reserves
when first called (``mmap`` with ``MAP_NORESERVE``: a page costs memory only once the recursion
touches it), each with :data:`GUARD` bytes of inaccessible pages at its bottom. A wrapper
called on one of the module's side stacks already (an entry reached from inside the recursion)
calls its body directly; one that finds no free stack (more than :data:`SLOTS` threads in the
derivative at once) or no arena (``mmap`` refused) does too, on the thread's own stack, as
before.

Every generated function in a call cycle gets a guard (the primal's own functions keep the
attributes LLVM gave them, which a guard would contradict: they get the room, not the check):
on entry it counts its depth in its stack's
header and checks that more than :data:`MARGIN` bytes remain above the guard pages (room for
what it calls that is not guarded: the C library, the tape pool, libm); below that it stops
the recursion by switching straight back to the wrapper (``setcontext``), which raises
:class:`~pyzyme.RecursionDepthError` naming the function, the depth and what to do (Numba's
status -1, with the Python error set). The frames left behind on the abandoned stack never
return: their tapes and shadow allocations are not freed (on an error path only). Stacks are aligned to their size, so a guard finds its stack's header from
the stack pointer alone, without thread-local storage (which MCJIT cannot allocate); a
function running on none of this module's stacks (a parallel region's worker thread) skips
the check.

Each stack's header also holds a tape arena (:mod:`pyzyme.diff.tape.arena`): the generated
functions in a cycle take the tape blocks they make (``pyzyme.tape_realloc(null, n)``) from the
arena of the stack they run on, which outlives the wrapper's run (the next run on the stack
cuts from the chunk it left, from its start again once the chunk's blocks are all freed).

The cost: a call of a wrapper pays three signal-mask system calls (``getcontext``,
``swapcontext`` and the switch back; 1.3 us a call measured in a virtual machine, where system
calls are slow); a recursive call pays a few instructions and no stack. Modules without
call cycles, and platforms where :func:`pyzyme.runtime.target.side_stacks` is false, are left
as they are.
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.analysis.call_graph import call_graph, on_cycles
from pyzyme.diff.tape import arena as tape_arena
from pyzyme.diff.tape.pool import REALLOC_NAME, tape_realloc
from pyzyme.ir import IRBuilder, instructions as I, types as T
from pyzyme.ir.names import readable
from pyzyme.ir.values import (ConstantInt, Null, ZeroInitializer, const_c_string,
                              const_int, const_null)
from pyzyme.runtime.target import RECURSION_ERROR_SYMBOL, side_stacks

__all__ = ["install", "SLOTS", "GUARD", "MARGIN"]

#: Side stacks per module: threads that can be inside its derivative at once, each on its own.
SLOTS = 16
#: Inaccessible bytes at the bottom of each side stack: an overflow the guard misses faults.
GUARD = 64 << 10
#: Bytes a guarded function needs left above the guard pages to go on (one frame of its own
#: and what it calls that is not guarded).
MARGIN = 256 << 10
#: Bytes at the top of each side stack for its header: depth, name, and two ``ucontext_t``.
HEADER = 32 << 10
_CONTEXT = 8 << 10           # glibc's ucontext_t: 968 bytes on x86-64, 4560 on AArch64
_BACK, _SIDE = 64, 64 + _CONTEXT  # where the two contexts start in the header
_LINK, _SS_SP, _SS_SIZE = 8, 16, 32  # uc_link, uc_stack.ss_sp, uc_stack.ss_size
# The header's first fields: depth (i64), the guarded function's name (ptr), overflowed (i64);
# each run of a wrapper sets them afresh. After them, the stack's tape arena, which outlives
# the runs (pyzyme.diff.tape.arena: its chunk is kept for the next derivative run here).
_HEAD = T.StructType([T.i64, T.ptr, T.i64])
_ARENA_STATE = 24
assert _ARENA_STATE + tape_arena.STATE_BYTES <= _BACK
_STATE = T.StructType([T.ptr, T.ArrayType(SLOTS, T.i32)])  # arena, slot taken
_ARENA, _TEXT = naming.SIDE_STACK, naming.SIDE_STACK_TEXT
_RUN, _ENTER, _LEAVE = naming.SIDE_STACK_RUN, naming.SIDE_STACK_ENTER, naming.SIDE_STACK_LEAVE
_RESERVE, _OVERFLOW = naming.SIDE_STACK_RESERVE, naming.SIDE_STACK_OVERFLOW
_MESSAGE = ("the derivative of %s recursed %zd calls deep, beyond the %zd MiB stack that "
            "pyzyme runs derivatives of recursive functions on\n"
            "  hint: write the recursion as a loop (pyzyme keeps a loop's tape on the heap), or "
            "build the derivative under pyzyme.settings.using(pyzyme.settings.Options("
            "recursion_stack=NBYTES)) with a larger power of two")
# Linux's mmap flags, the same on x86-64 and AArch64.
_PROT_RW, _MAP_FLAGS = 3, 0x02 | 0x20 | 0x4000  # MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE


def install(module, stack_bytes: int) -> list:
    """Run the entry points of ``module`` that reach a call cycle on side stacks of
    ``stack_bytes`` (a power of two), and guard every function in a cycle; returns the entry
    points wrapped. A module without cycles, or a platform without side stacks, is unchanged.

    An entry point returning ``i32`` is taken to follow Numba's convention (0 for success, -1
    with a Python error set), and reports an overflow so; one returning ``void`` (split mode's
    ``discard``, which frees a tape) gives no sign of it: its work is abandoned. One returning
    anything else would have no way to tell, and is left on the thread's stack.
    """
    callees = call_graph(module)
    cyclic = on_cycles(callees)
    if not cyclic or not side_stacks():
        return []
    reaching = _reaching(callees, cyclic)
    entries = [fn for fn in module.functions
               if not fn.is_declaration and fn.linkage == "external" and fn in reaching
               and fn.function_type.ret in (T.i32, T.void)]
    for entry in entries:
        body = _wrap(module, entry, stack_bytes)
        if entry in cyclic:
            cyclic.add(body)
    for fn in list(module.functions):  # in the module's order: the same text every time
        # (not the wrappers, which kept the entries' names)
        if fn in cyclic and fn not in entries and _may_guard(fn):
            _guard(module, fn, stack_bytes)
            _tapes_from_the_arena(module, fn, stack_bytes)
    return entries


def _may_guard(fn) -> bool:
    """Whether ``fn`` declares no function attributes, which a guard could break (it writes
    memory and may not return): the generated derivatives. The primal's own functions carry
    LLVM's (``memory(argmem: write)``, ``willreturn``); running on a side stack, they get the
    room it gives but no check, as on the thread's own stack."""
    return "#" not in fn.suffix and not any(
        word.startswith(("memory(", "readnone", "readonly", "writeonly", "willreturn"))
        for word in fn.suffix.split())


# -- the call graph --------------------------------------------------------------------------
def _reaching(graph: dict, targets: set) -> set:
    """The functions from which one of ``targets`` can be called (``targets`` included)."""
    callers: dict = {}
    for fn, out in graph.items():
        for callee in out:
            callers.setdefault(callee, set()).add(fn)
    seen, todo = set(targets), list(targets)
    while todo:
        for caller in callers.get(todo.pop(), ()):
            if caller not in seen:
                seen.add(caller)
                todo.append(caller)
    return seen


# -- entry points ----------------------------------------------------------------------------
def _wrap(module, entry, stack_bytes: int):
    """Move ``entry``'s body to an internal ``<entry>.body`` (its calls inside the module
    follow it) and make ``entry`` call it on a side stack; returns the body."""
    body = module.add_function(module.unique_global_name(f"{entry.name}.body"),
                               entry.function_type, prefix="internal", suffix=entry.suffix)
    entry.replace_all_uses_with(body)
    body.blocks, entry.blocks = entry.blocks, []
    for block in body.blocks:
        block.parent = body
    for old, new in zip(entry.args, body.args):
        new.name, new.attrs = old.name, old.attrs
        old.replace_all_uses_with(new)
    body._taken = entry._taken = None
    entry.suffix = ""

    params = list(entry.function_type.params)
    ret = entry.function_type.ret
    frame_type = T.StructType(([] if ret == T.void else [ret]) + params)
    first = 0 if ret == T.void else 1

    # The function the side stack starts in: the arguments and the result in a frame.
    thunk = module.add_function(module.unique_global_name(f"{entry.name}.on_side_stack"),
                                T.FunctionType(T.void, [T.ptr]), prefix="internal")
    frame = thunk.args[0]
    frame.name = "frame"
    b = IRBuilder(thunk.append_block("entry"))
    args = [b.load(ty, _field(b, frame_type, frame, first + i)) for i, ty in enumerate(params)]
    result = b.call(body, args)
    if ret != T.void:
        b.store(result, _field(b, frame_type, frame, 0))
    b.ret_void()

    b = IRBuilder(entry.append_block("entry"))
    slot = b.alloca(frame_type, name="frame")
    for i, arg in enumerate(entry.args):
        b.store(arg, _field(b, frame_type, slot, first + i))
    how = b.call(_run(module, stack_bytes),
                 [thunk, slot, const_int(T.i1, int(ret != T.void))], name="ran")
    ran, direct, overflowed = (entry.append_block(n) for n in ("ran", "direct", "overflowed"))
    b.switch(how, direct, [(const_int(T.i32, 0), ran), (const_int(T.i32, 2), overflowed)])
    b.position_at_end(ran)
    _return(b, ret, lambda: b.load(ret, _field(b, frame_type, slot, 0)))
    b.position_at_end(direct)
    result = b.call(body, list(entry.args))
    _return(b, ret, lambda: result)
    b.position_at_end(overflowed)  # Numba's status for "a Python error is set"
    _return(b, ret, lambda: const_int(T.i32, -1))
    return body


def _return(b: IRBuilder, ret, value) -> None:
    if ret == T.void:
        b.ret_void()
    else:
        b.ret(value())


def _field(b: IRBuilder, ty, pointer, k: int):
    return b.gep(ty, pointer, [const_int(T.i32, 0), const_int(T.i32, k)])


# -- guards ----------------------------------------------------------------------------------
def _guard(module, fn, stack_bytes: int) -> None:
    """Count ``fn``'s depth on its side stack, and stop the recursion there when the stack is
    nearly used up."""
    # The name of the user's function: a derivative's name ends in its primal's.
    name = _c_string(module, readable(fn.name[fn.name.find("_Z"):] if "_Z" in fn.name
                                      else fn.name))
    entry = _hoist_allocas(fn)
    b = IRBuilder(entry)
    b.position_before(next(i for i in entry.instructions if not isinstance(i, I.Alloca)))
    b.call(_enter(module, stack_bytes), [name])
    leave = _leave(module, stack_bytes)
    for block in fn.blocks:
        if isinstance(block.terminator, I.Ret):
            b.position_before(block.terminator)
            b.call(leave, [])


def _tapes_from_the_arena(module, fn, stack_bytes: int) -> None:
    """Take ``fn``'s new tape blocks (``pyzyme.tape_realloc(null, n)``) from its stack's tape
    arena: a recursion allocates one or two at every call, all alive until the reverse sweep
    (:mod:`pyzyme.diff.tape.arena`)."""
    b = IRBuilder()
    for inst in [i for i in fn.instructions() if isinstance(i, I.CallBase)]:
        callee = inst.called_function
        if callee is None or callee.name != REALLOC_NAME or \
                not isinstance(inst.args[0], Null):
            continue
        b.position_before(inst)
        block = b.call(_arena_alloc(module, stack_bytes), [inst.args[1]])
        inst.replace_all_uses_with(block)
        name = inst.name
        inst.erase()
        block.name = name


def _arena_alloc(module, stack_bytes: int):
    """``ptr pyzyme.tape_arena(i64 bytes)``: ``bytes`` from the tape arena of the side stack
    it runs on, or from the tape pool on none (a parallel region's worker thread)."""
    fn = module.get_function(naming.TAPE_ARENA)
    if fn is not None:
        return fn
    fn = module.add_function(naming.TAPE_ARENA, T.FunctionType(T.ptr, [T.i64]),
                             prefix="internal")
    nbytes = fn.args[0]
    nbytes.name = "bytes"
    entry, found, elsewhere = (fn.append_block(n) for n in ("entry", "found", "elsewhere"))
    b = IRBuilder(entry)
    header, _ = _stack_header(b, module, stack_bytes, found, elsewhere)
    b.position_at_end(found)
    state = b.gep(T.i8, header, [const_int(T.i64, _ARENA_STATE)], name="state")
    b.ret(b.call(tape_arena.take(module), [state, nbytes], name="block"))
    b.position_at_end(elsewhere)
    b.ret(b.call(tape_realloc(module), [const_null(T.ptr), nbytes], name="block"))
    return fn


def _hoist_allocas(fn):
    """Move ``fn``'s fixed-size stack slots that are made once a call (in no loop) to the top
    of its entry block, and return that block.

    The generators put the primal's slots in its first block, after their own entry block;
    LLVM merges the two, and the slots are part of the fixed frame. The guard's branches would
    keep them apart, and a slot outside the entry block is allocated at run time (a frame
    pointer and a stack adjustment): the augmented sweep's frame measured 145 bytes, not 80."""
    entry = fn.blocks[0]
    cyclic = on_cycles({block: block.successors for block in fn.blocks})
    at = 0
    for block in fn.blocks[1:]:
        if block in cyclic:
            continue
        for inst in list(block.instructions):
            if isinstance(inst, I.Alloca) and (inst.count is None or
                                               isinstance(inst.count, ConstantInt)):
                block.instructions.remove(inst)
                entry.instructions.insert(at, inst)
                inst.parent = entry
                at += 1
    return entry


def _stack_header(b: IRBuilder, module, stack_bytes: int, found, elsewhere):
    """Branch to ``found`` on one of the module's side stacks, else to ``elsewhere``; returns
    ``(header, bytes left above the bottom)`` for ``found``."""
    arena = b.insert(I.Load(T.ptr, _state(module), 8, ordering="monotonic"), name="arena")
    stacksave = module.declare("llvm.stacksave.p0", T.FunctionType(T.ptr, []))
    sp = b.ptrtoint(b.call(stacksave, []), T.i64, name="sp")
    offset = b.sub(sp, b.ptrtoint(arena, T.i64), name="offset")
    inside = b.and_(b.icmp("ne", arena, const_null(T.ptr)),
                    b.icmp("ult", offset, const_int(T.i64, _span(stack_bytes))))
    mask = stack_bytes - 1
    left = b.and_(offset, const_int(T.i64, mask), name="left")
    top = b.add(b.and_(offset, const_int(T.i64, ~mask & (2**64 - 1))),
                const_int(T.i64, stack_bytes - HEADER))
    header = b.gep(T.i8, arena, [top], name="header")
    b.cbranch(inside, found, elsewhere)
    return header, left


def _c_string(module, text: str):
    """A private constant holding ``text`` as a C string (one per text in a module)."""
    string = const_c_string(text)
    for gv in module.globals:
        if gv.name.startswith(_TEXT) and getattr(gv.initializer, "text", None) == string.text:
            return gv
    return module.add_global(module.unique_global_name(_TEXT), string.type, string,
                             is_constant=True, prefix="private unnamed_addr")


def _state(module):
    state = module.get_global(_ARENA)
    if state is None:
        state = module.add_global(_ARENA, _STATE, ZeroInitializer(_STATE), prefix="internal")
    return state


def _span(stack_bytes: int) -> int:
    return SLOTS * stack_bytes


def _enter(module, stack_bytes: int):
    """``void enter(ptr name)``: on one of the module's side stacks, one level deeper, or a
    switch back to the wrapper that started it when it is nearly used up; elsewhere
    nothing."""
    fn = module.get_function(_ENTER)
    if fn is not None:
        return fn
    fn = module.add_function(_ENTER, T.FunctionType(T.void, [T.ptr]), prefix="internal",
                             suffix="alwaysinline")
    name = fn.args[0]
    name.name = "name"
    entry, check, over, count, done = (fn.append_block(n) for n in (
        "entry", "check", "over", "count", "done"))
    b = IRBuilder(entry)
    header, left = _stack_header(b, module, stack_bytes, check, done)
    b.position_at_end(check)
    b.cbranch(b.icmp("ult", left, const_int(T.i64, GUARD + MARGIN)), over, count)
    b.position_at_end(over)
    b.call(_overflow(module), [header, name])
    b.unreachable()
    b.position_at_end(count)
    depth = b.load(T.i64, header, 8, name="depth")
    b.store(b.add(depth, const_int(T.i64, 1)), header, 8)
    b.br(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _leave(module, stack_bytes: int):
    """``void leave()``: on one of the module's side stacks, one level less deep. (The header
    is found again rather than kept from ``enter``: kept, it would take a register or a slot
    in every frame of the recursion.)"""
    fn = module.get_function(_LEAVE)
    if fn is not None:
        return fn
    fn = module.add_function(_LEAVE, T.FunctionType(T.void, []), prefix="internal",
                             suffix="alwaysinline")
    entry, count, done = (fn.append_block(n) for n in ("entry", "count", "done"))
    b = IRBuilder(entry)
    header, _ = _stack_header(b, module, stack_bytes, count, done)
    b.position_at_end(count)
    depth = b.load(T.i64, header, 8, name="depth")
    b.store(b.sub(depth, const_int(T.i64, 1)), header, 8)
    b.br(done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _overflow(module):
    """``void overflow(ptr header, ptr name)``: record who ran out of stack and switch back to
    the wrapper that started the side stack."""
    fn = module.get_function(_OVERFLOW)
    if fn is not None:
        return fn
    fn = module.add_function(_OVERFLOW, T.FunctionType(T.void, [T.ptr, T.ptr]),
                             prefix="internal", suffix="noinline cold noreturn")
    header, name = fn.args
    header.name, name.name = "header", "name"
    b = IRBuilder(fn.append_block("entry"))
    b.store(name, _field(b, _HEAD, header, 1), 8)
    b.store(const_int(T.i64, 1), _field(b, _HEAD, header, 2), 8)
    setcontext = module.declare("setcontext", T.FunctionType(T.i32, [T.ptr]))
    b.call(setcontext, [b.gep(T.i8, header, [const_int(T.i64, _BACK)])])
    b.unreachable()
    return fn


# -- the switch ------------------------------------------------------------------------------
def _reserve(module, stack_bytes: int):
    """``ptr reserve()``: the module's arena (reserved by the first caller, aligned to
    ``stack_bytes``, guard pages protected), or null when the system refuses it."""
    fn = module.get_function(_RESERVE)
    if fn is not None:
        return fn
    fn = module.add_function(_RESERVE, T.FunctionType(T.ptr, []), prefix="internal",
                             suffix="noinline cold")
    blocks = ("entry", "mapped", "guards", "publish", "lost", "failed", "done")
    entry, mapped, guards, publish, lost, failed, done = (fn.append_block(n) for n in blocks)
    b = IRBuilder(entry)
    state = _state(module)
    size = _span(stack_bytes) + stack_bytes  # room to align the arena to stack_bytes
    mmap = module.declare("mmap", T.FunctionType(T.ptr, [T.ptr, T.i64, T.i32, T.i32, T.i32,
                                                          T.i64]))
    region = b.call(mmap, [const_null(T.ptr), const_int(T.i64, size), const_int(T.i32, _PROT_RW),
                           const_int(T.i32, _MAP_FLAGS), const_int(T.i32, -1),
                           const_int(T.i64, 0)], name="region")
    start = b.ptrtoint(region, T.i64)
    b.cbranch(b.icmp("eq", start, const_int(T.i64, -1)), failed, mapped)  # MAP_FAILED

    b.position_at_end(mapped)
    mask = stack_bytes - 1
    aligned = b.and_(b.add(start, const_int(T.i64, mask)),
                     const_int(T.i64, ~mask & (2**64 - 1)))
    arena = b.gep(T.i8, region, [b.sub(aligned, start)], name="arena")
    b.br(guards)

    # The bottom GUARD bytes of every stack: inaccessible.
    b.position_at_end(guards)
    k = b.phi(T.i64, name="k")
    k.add_incoming(const_int(T.i64, 0), mapped)
    mprotect = module.declare("mprotect", T.FunctionType(T.i32, [T.ptr, T.i64, T.i32]))
    bottom = b.gep(T.i8, arena, [b.mul(k, const_int(T.i64, stack_bytes))])
    b.call(mprotect, [bottom, const_int(T.i64, GUARD), const_int(T.i32, 0)])
    nxt = b.add(k, const_int(T.i64, 1))
    k.add_incoming(nxt, guards)
    b.cbranch(b.icmp("ult", nxt, const_int(T.i64, SLOTS)), guards, publish)

    b.position_at_end(publish)
    pair = b.cmpxchg(_field(b, _STATE, state, 0), const_null(T.ptr), arena, "acq_rel",
                     "acquire")
    b.cbranch(b.extractvalue(pair, 1), done, lost)
    b.position_at_end(lost)  # another thread reserved one first: use that one
    winner = b.extractvalue(pair, 0, name="winner")
    munmap = module.declare("munmap", T.FunctionType(T.i32, [T.ptr, T.i64]))
    b.call(munmap, [region, const_int(T.i64, size)])
    b.br(done)
    b.position_at_end(failed)
    b.br(done)

    b.position_at_end(done)
    result = b.phi(T.ptr, name="result")
    result.add_incoming(arena, publish)
    result.add_incoming(winner, lost)
    result.add_incoming(const_null(T.ptr), failed)
    b.ret(result)
    return fn


def _run(module, stack_bytes: int):
    """``i32 run(ptr thunk, ptr frame, i1 report)``: ``thunk(frame)`` on a free side stack of
    the module; 0 when it returned, 2 when it ran out of stack (with ``report``, the Python
    error is set), 1 when it did not run (already on one of the module's side stacks, none
    free, or no arena): then the caller calls its body itself."""
    fn = module.get_function(_RUN)
    if fn is not None:
        return fn
    fn = module.add_function(_RUN, T.FunctionType(T.i32, [T.ptr, T.ptr, T.i1]),
                             prefix="internal", suffix="noinline")
    thunk, frame, report = fn.args
    thunk.name, frame.name, report.name = "thunk", "frame", "report"
    names = ("entry", "reserve", "have", "where", "find", "next", "got", "finished",
             "overflowed", "raise", "released", "direct")
    (entry, reserve, have, where, find, nxt, got, finished, overflowed, raise_, released,
     direct) = (fn.append_block(n) for n in names)
    state = _state(module)
    b = IRBuilder(entry)
    known = b.insert(I.Load(T.ptr, state, 8, ordering="acquire"), name="known")
    b.cbranch(b.icmp("eq", known, const_null(T.ptr)), reserve, have)
    b.position_at_end(reserve)
    reserved = b.call(_reserve(module, stack_bytes), [], name="reserved")
    b.br(have)

    b.position_at_end(have)
    arena = b.phi(T.ptr, name="arena")
    arena.add_incoming(known, entry)
    arena.add_incoming(reserved, reserve)
    b.cbranch(b.icmp("eq", arena, const_null(T.ptr)), direct, where)

    b.position_at_end(where)  # already on one of them: no second switch
    stacksave = module.declare("llvm.stacksave.p0", T.FunctionType(T.ptr, []))
    sp = b.ptrtoint(b.call(stacksave, []), T.i64)
    offset = b.sub(sp, b.ptrtoint(arena, T.i64))
    b.cbranch(b.icmp("ult", offset, const_int(T.i64, _span(stack_bytes))), direct, find)

    b.position_at_end(find)
    k = b.phi(T.i64, name="k")
    k.add_incoming(const_int(T.i64, 0), where)
    taken = b.gep(_STATE, state, [const_int(T.i32, 0), const_int(T.i32, 1), k], name="taken")
    pair = b.cmpxchg(taken, const_int(T.i32, 0), const_int(T.i32, 1), "acquire", "monotonic")
    b.cbranch(b.extractvalue(pair, 1), got, nxt)
    b.position_at_end(nxt)
    k1 = b.add(k, const_int(T.i64, 1))
    k.add_incoming(k1, nxt)
    b.cbranch(b.icmp("ult", k1, const_int(T.i64, SLOTS)), find, direct)

    b.position_at_end(got)
    base = b.gep(T.i8, arena, [b.mul(k, const_int(T.i64, stack_bytes))], name="base")
    header = b.gep(T.i8, base, [const_int(T.i64, stack_bytes - HEADER)], name="header")
    b.store(ZeroInitializer(_HEAD), header, 8)
    tape_arena.rewind(b, b.gep(T.i8, header, [const_int(T.i64, _ARENA_STATE)]))
    back = b.gep(T.i8, header, [const_int(T.i64, _BACK)], name="back")
    side = b.gep(T.i8, header, [const_int(T.i64, _SIDE)], name="side")
    getcontext = module.declare("getcontext", T.FunctionType(T.i32, [T.ptr]))
    b.call(getcontext, [side])
    b.store(base, b.gep(T.i8, side, [const_int(T.i64, _SS_SP)]), 8)
    b.store(const_int(T.i64, stack_bytes - HEADER), b.gep(T.i8, side, [const_int(T.i64,
                                                                              _SS_SIZE)]), 8)
    b.store(back, b.gep(T.i8, side, [const_int(T.i64, _LINK)]), 8)
    makecontext = module.declare("makecontext", T.FunctionType(T.void, [T.ptr, T.ptr, T.i32],
                                                               var_arg=True))
    b.call(makecontext, [side, thunk, const_int(T.i32, 1), frame])
    swapcontext = module.declare("swapcontext", T.FunctionType(T.i32, [T.ptr, T.ptr]))
    b.call(swapcontext, [back, side])
    # Back here when the thunk returned (uc_link) or a guard gave up (setcontext).
    over = b.load(T.i64, _field(b, _HEAD, header, 2), 8, name="over")
    b.cbranch(b.icmp("ne", over, const_int(T.i64, 0)), overflowed, finished)

    b.position_at_end(finished)
    b.atomicrmw("xchg", taken, const_int(T.i32, 0), "release")
    b.ret(const_int(T.i32, 0))

    b.position_at_end(overflowed)
    b.cbranch(report, raise_, released)
    b.position_at_end(raise_)
    _raise(module, b, header, stack_bytes)
    b.br(released)
    b.position_at_end(released)
    b.atomicrmw("xchg", taken, const_int(T.i32, 0), "release")
    b.ret(const_int(T.i32, 2))

    b.position_at_end(direct)
    b.ret(const_int(T.i32, 1))
    return fn


def _raise(module, b: IRBuilder, header, stack_bytes: int) -> None:
    """Set :class:`~pyzyme.RecursionDepthError` as the Python error, from the header of the
    stack that ran out (the GIL taken for it, whether the caller held it or not)."""
    fmt = _c_string(module, _MESSAGE)
    cls = module.get_global(RECURSION_ERROR_SYMBOL)
    if cls is None:
        cls = module.add_global(RECURSION_ERROR_SYMBOL, T.i8, None, prefix="external")
    ensure = module.declare("PyGILState_Ensure", T.FunctionType(T.i32, []))
    release = module.declare("PyGILState_Release", T.FunctionType(T.void, [T.i32]))
    fmt_fn = module.declare("PyErr_Format", T.FunctionType(T.ptr, [T.ptr, T.ptr], var_arg=True))
    name = b.load(T.ptr, _field(b, _HEAD, header, 1), 8, name="who")
    depth = b.load(T.i64, header, 8, name="depth")
    gil = b.call(ensure, [], name="gil")
    b.call(fmt_fn, [cls, fmt, name, depth, const_int(T.i64, stack_bytes >> 20)])
    b.call(release, [gil])
