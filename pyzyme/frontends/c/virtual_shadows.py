"""Enzyme's ``__enzyme_virtualreverse``: shadows of function pointers and of vtables.

Reverse mode calls a function through a pointer by calling the derivative the pointer's
shadow holds (:mod:`pyzyme.diff.calls.indirect`): the address of ``{augmented, reverse}``.
A C or C++ program makes such shadows with ``__enzyme_virtualreverse``::

    d_s.fn = __enzyme_virtualreverse((void *)square);       // the shadow of s.fn = square
    *(void **)d_obj = __enzyme_virtualreverse(*(void **)d_obj);  // a shadow object's vtable

Given a function, the call returns the address of a pair for it; given the address of a
vtable (known when the program is compiled: the optimizer folds an object's vtable pointer at
-O2), it returns the same address in a shadow vtable whose functions are pairs. A pair is
made with every pointer argument duplicated and every float argument (and result) active;
for a function pyzyme cannot differentiate so (a vtable's destructor that frees memory, one
taking a struct by value...) the pair's functions stop the program with a message naming
the call and the reason, should the derivatives ever call it.
"""

from __future__ import annotations

from pyzyme import ir
from pyzyme.analysis.activity import Activity
from pyzyme.analysis.layout import field_offset, sizeof
from pyzyme.diff.calls.indirect import augmented_type, reverse_type, unsupported
from pyzyme.errors import PyzymeError
from pyzyme.frontends.c.enzyme_calls import (CallSite, EnzymeCallError, show,
                                             source_location, through_locals)
from pyzyme.frontends.c.shadow_contexts import c_string
from pyzyme.frontends.llvm_ad import Derivatives
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import Function
from pyzyme.ir.opcodes import ADDRESS_CASTS
from pyzyme.ir.values import (ConstantAggregate, ConstantExpr, ConstantInt, GlobalVariable,
                              Undef, const_int, const_null)

__all__ = ["API", "find_sites", "build_virtual", "targets"]

API = "__enzyme_virtualreverse"


# ------------------------------------------------------------------------------ reading
def find_sites(module) -> list[CallSite]:
    """The ``__enzyme_virtualreverse`` calls of ``module`` (C++ mangles the name), each read
    into a :class:`~pyzyme.frontends.c.enzyme_calls.CallSite` of mode ``"virtual"``:
    ``function`` is the function given (a vtable's first function with a body) and
    ``vtable`` the vtable's global and the byte offset of the address given.

    Raises
    ------
    EnzymeCallError
        For a call whose argument is neither, naming its line.
    """
    sites = []
    if not any(API in f.name for f in module.functions if f.is_declaration):
        return sites
    for fn in module.functions:
        for call in fn.instructions():
            callee = call.called_function if isinstance(call, I.CallBase) else None
            if callee is not None and API in callee.name:
                sites.append(_read(call, source_location(module, call)))
    return sites


def _read(call, where: str) -> CallSite:
    args = call.args
    if len(args) != 1 or not args[0].type.is_pointer or not call.type.is_pointer:
        raise EnzymeCallError(f"{where}: {API} takes one pointer, a function or the address "
                              f"of a vtable, and returns one")
    value = through_locals(args[0])
    fn = _stripped(value)
    if isinstance(fn, Function):
        if fn.is_declaration:
            raise EnzymeCallError(f"{where}: {fn.ref} has no body in this module to "
                                  f"differentiate", hint="define it in the same file")
        return CallSite(call, API, "virtual", fn, where)
    table = _constant_address(value)
    functions = _functions(table[0].initializer) if table is not None else []
    if not functions:
        raise EnzymeCallError(
            f"{where}: the argument of {API} is neither a function nor the address of a "
            f"vtable of this module ({show(value)})",
            hint="pass the function itself; an object's vtable pointer read from memory is "
                 "known only when the optimizer folds the read (clang -O2)")
    site = CallSite(call, API, "virtual", functions[0], where)
    site.vtable = table
    return site


def _stripped(value):
    while isinstance(value, ConstantExpr) and value.opcode in ADDRESS_CASTS:
        value = value.operands[0]
    return value


def _constant_address(value):
    """(global, byte offset) of a constant address into a constant global variable with an
    initializer, or None."""
    offset = 0
    while isinstance(value, ConstantExpr):
        if value.opcode == "getelementptr":
            indices = value.operands[1:]
            if not all(isinstance(i, ConstantInt) for i in indices):
                return None
            if indices:
                offset += indices[0].value * sizeof(value.source_type) + field_offset(
                    value.source_type, [i.value for i in indices[1:]])[0]
        elif value.opcode not in ADDRESS_CASTS:
            return None
        value = value.operands[0]
    if isinstance(value, GlobalVariable) and value.is_constant and \
            value.initializer is not None:
        return value, offset
    return None


def _functions(constant) -> list:
    """The functions with bodies in an aggregate constant, in order, each once."""
    found = []

    def visit(value):
        for e in getattr(value, "elements", None) or ():
            visit(e)
        value = _stripped(value)
        if isinstance(value, Function) and not value.is_declaration and value not in found:
            found.append(value)

    visit(constant)
    return found


def targets(site) -> list[str]:
    """The functions whose derivatives ``site`` (an ``__enzyme_virtualreverse`` call) needs:
    its function, or those of its vtable that have bodies."""
    if site.vtable is None:
        return [site.function.name]
    return [f.name for f in _functions(site.vtable[0].initializer)]


# ------------------------------------------------------------------------------ building

def build_virtual(site, copy, derivs, name: str, takers=frozenset(), pairs=None):
    """Add to ``copy`` (the AD copy) the function ``name`` returning the shadow ``site`` (an
    ``__enzyme_virtualreverse`` call) asks for. ``takers``: the functions that take globals
    as trailing parameters (:func:`~pyzyme.frontends.c.global_shadows.thread_globals`): their
    types are no longer those of the calls; ``pairs``: the pairs made so far, by function."""
    pairs = {} if pairs is None else pairs

    def pair(fn):
        if fn.name not in pairs:
            pairs[fn.name] = _pair(copy, derivs, fn, site.where, takers)
        return pairs[fn.name]

    if site.vtable is None:
        target, offset = pair(site.function), 0
    else:
        table, offset = site.vtable
        target = copy.add_global(copy.unique_global_name(f"{table.name}.pzshadow"),
                                 table.value_type, _shadow_constant(table.initializer, pair),
                                 is_constant=True, prefix="private")
    fn = copy.add_function(name, T.FunctionType(site.call.type, []))
    b = IRBuilder(fn.append_block("entry"))
    address = b.gep(T.i8, target, [const_int(T.i64, offset)]) if offset else target
    b.ret(address)
    return fn


def _shadow_constant(value, pair):
    """A vtable's initializer with each function replaced by its pair, other entries zero
    (offsets and type information, which derivatives do not read)."""
    elements = getattr(value, "elements", None)
    if elements is not None:
        return ConstantAggregate(value.type, [_shadow_constant(e, pair) for e in elements])
    inner = _stripped(value)
    if isinstance(inner, Function):
        return pair(inner)
    return const_null(value.type)


def _pair(copy, derivs, fn, where: str, takers):
    """The global ``{augmented, reverse}`` of ``fn`` (a function of the program)."""
    fnty = fn.function_type
    primal = copy.get_function(fn.name)
    why = unsupported(fnty)
    if why is None and (primal is None or primal.is_declaration):
        why = "it has no body to differentiate"
    if why is None and fn.name in takers:
        why = "it uses global variables that need shadows"
    if why is None:
        why = _refusal(copy, derivs, primal)
    functions = _wrappers(copy, derivs, primal) if why is None else None
    if functions is None:
        message = (f"{where}: __enzyme_virtualreverse: pyzyme has no derivative of "
                   f"{fn.ref}: {why}")
        functions = [_stop(copy, fnty, kind, message) for kind in ("augmented", "reverse")]
    ty = T.ArrayType(2, T.ptr)
    return copy.add_global(copy.unique_global_name(f"{fn.name}.pzpair"), ty,
                           ConstantAggregate(ty, functions), is_constant=True, prefix="private")


def _refusal(copy, derivs, primal) -> str | None:
    """Why pyzyme cannot make ``primal``'s pair, or None. Tried on a scratch copy of the
    module: a derivative that fails half-way leaves unfinished functions behind."""
    scratch = ir.parse_module(str(copy))
    try:
        _wrappers(scratch, Derivatives(scratch, derivs.rules), scratch.get_function(primal.name))
    except PyzymeError as err:
        return str(err).splitlines()[0]
    return None


def _wrappers(copy, derivs, primal):
    """The pair's functions: pyzyme's split derivative of ``primal`` in the pair's
    convention (:mod:`pyzyme.diff.calls.indirect`)."""
    fnty = primal.function_type
    params = fnty.params
    kinds = [Activity.DUPLICATED if t.is_pointer else Activity.ACTIVE if t.is_float
             else Activity.CONST for t in params]
    split = derivs.split(primal, kinds, return_active=fnty.ret.is_float)

    def unpack(fn):
        primals, shadows, it = [], [], iter(fn.args)
        for ty in params:
            primals.append(next(it))
            if ty.is_pointer:
                shadows.append(next(it))
        return primals, shadows, list(it)

    aug = copy.add_function(copy.unique_global_name(f"{primal.name}.pzaugmented"),
                            augmented_type(fnty), prefix="internal")
    b = IRBuilder(aug.append_block("entry"))
    primals, shadows, _ = unpack(aug)
    out = b.call(split.augmented, primals + shadows)
    if fnty.ret == T.void:
        b.ret(out)
    else:
        result = b.insertvalue(Undef(aug.return_type), b.extractvalue(out, 1), 0)
        b.ret(b.insertvalue(result, b.extractvalue(out, 0), 1))

    rev = copy.add_function(copy.unique_global_name(f"{primal.name}.pzreverse"),
                            reverse_type(fnty), prefix="internal")
    b = IRBuilder(rev.append_block("entry"))
    primals, shadows, rest = unpack(rev)
    out = b.call(split.reverse, primals + shadows + rest[:-1] + [const_int(T.i1, 0), rest[-1]])
    n = sum(t.is_float for t in params)
    if n == 0:
        b.ret_void()
    elif n == 1:
        b.ret(b.extractvalue(out, 0))
    else:
        result = Undef(rev.return_type)
        for k in range(n):
            result = b.insertvalue(result, b.extractvalue(out, k), k)
        b.ret(result)
    return [aug, rev]


def _stop(copy, fnty, kind: str, message: str):
    """A function of the pair's type that writes ``message`` and aborts."""
    ty = (augmented_type(fnty) if kind == "augmented" else reverse_type(fnty)) \
        if unsupported(fnty) is None else T.FunctionType(T.void, [])
    fn = copy.add_function(copy.unique_global_name("__pyzyme_virtual.stop"), ty,
                           prefix="internal")
    b = IRBuilder(fn.append_block("entry"))
    text = f"pyzyme: {message}\n"
    write = copy.declare("write", T.FunctionType(T.i64, [T.i32, T.ptr, T.i64]))
    b.call(write, [const_int(T.i32, 2), c_string(copy, text, "__pyzyme_virtual.message"),
                   const_int(T.i64, len(text.encode()))])
    b.call(copy.declare("abort", T.FunctionType(T.void, [])), [])
    b.unreachable()
    return fn
