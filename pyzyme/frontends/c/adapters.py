"""The functions that replace ``__enzyme_*`` calls: adapters from Enzyme's calling convention
to pyzyme's generated derivatives.

A call site passes its values in Enzyme's order (each argument followed by its shadows, the seed
and tape at the end, markers in between) and expects Enzyme's result (the adjoints of the active
arguments, as a struct when there are several; the tangent; the tape). pyzyme's derivatives take
the primal arguments first and the shadows after them (:mod:`pyzyme.frontends.llvm_ad`). The
adapter, built in the AD copy of the module, takes exactly the call's kept values, converts
them (a ``float`` promoted to ``double`` by a variadic call is truncated back), calls the
derivative and returns what the call's type asks for: LLVM inlines it away.

Results are delivered the way Enzyme's ``ReplaceOriginalCall`` does: the value itself when the
types agree; the values laid out as a C struct and read back as the call's type when the sizes
agree (this covers the x86-64 ABI's ways of returning small structs: ``{double, double}``,
``<2 x float>``, ``{<2 x float>, float}``...); written to the struct-return pointer of a call
that has one; otherwise the first value when it has the call's type.
"""

from __future__ import annotations

import dataclasses

from pyzyme import ir
from pyzyme.analysis.activity import Activity, can_carry_derivative
from pyzyme.analysis.layout import sizeof
from pyzyme.frontends.c.enzyme_calls import Arg, CallSite
from pyzyme.frontends.c.shadow_contexts import RUNTIME, c_string
from pyzyme.ir import IRBuilder
from pyzyme.ir import types as T
from pyzyme.ir.values import ConstantAggregate, Undef, const_float, const_int

__all__ = ["build_adapter", "tape_size"]

#: What ``__enzyme_augmentsize`` answers: pyzyme's tape is one pointer to a heap block.
TAPE_BYTES = 8


def tape_size(site: CallSite) -> int:
    """The bytes a caller must allocate for the tape of ``site``'s function."""
    return TAPE_BYTES


def build_adapter(site: CallSite, copy, derivs, name: str, hidden=(), table=None):
    """Add to ``copy`` (the AD copy) the function ``name`` that does what ``site`` asks,
    taking the call's kept arguments and returning the call's type. ``hidden``: the globals
    the function takes as trailing parameters
    (:func:`~pyzyme.frontends.c.global_shadows.thread_globals`), passed with their shadows;
    ``table``: the name of the module's table of globals, for the shadows contexts hold
    (:mod:`~pyzyme.frontends.c.shadow_contexts`)."""
    call = site.call
    params = [call.args[p].type for p in site.kept]
    ret = call.type if site.sret is None else T.void
    fn = copy.add_function(name, T.FunctionType(ret, params))
    b = IRBuilder(fn.append_block("entry"))
    values = dict(zip(site.kept, fn.args))
    primal = copy.get_function(site.function.name)
    if primal is None or primal.is_declaration:
        raise site.error(f"{site.function.ref} was optimised away before differentiation")
    if hidden:
        site = _with_hidden(site, hidden, values, copy, b, table)
    a = _Adapter(site, b, values, primal)
    elements = {"reverse": a.reverse, "forward": a.forward, "augment": a.augment,
                "gradient": a.gradient, "batch": a.batch}[site.mode](derivs)
    a.deliver(elements, ret)
    return fn


def _with_hidden(site: CallSite, hidden, values: dict, copy, b, table) -> CallSite:
    """``site`` passing, after its own arguments, each global of ``hidden`` with its shadows
    (``enzyme_dup``; a batch passes the global to every lane): those of the context the call
    passes after ``enzyme_context``, else the shadow ``enzyme_shadow`` declares, else the
    default context's when the program asks for them, else pyzyme's own shadow of a global
    the code writes; any other global is passed as a constant. pyzyme's own shadows start
    at zero: they are zeroed here, where a derivative call starts (the second half of a split
    derivative goes on with what the first left)."""
    extra, first = [], len(site.args)
    context = default = None
    if site.context is not None and site.mode != "batch":
        context = values[site.context]
        where = c_string(copy, f"{site.where}: {site.entry}", "__pyzyme_ctx.where")
        _runtime_call(copy, b, "check", [context, const_int(T.i32, site.width), where])
    for i, h in enumerate(hidden):
        values[("global", i)] = gv = copy.get_global(h.name)
        if site.mode == "batch":
            extra.append(Arg(first + i, Activity.CONST, ("global", i)))  # every lane's
            continue
        source = context
        if h.declared or (context is None and not h.queried):
            source = None
        elif context is None:
            if default is None:
                default = _runtime_call(copy, b, "default", [const_int(T.i32, site.width),
                                                              _table(copy, table)])
            source = default
        if source is not None:
            lanes = []
            for lane in range(site.width):
                values[("shadow", i, lane)] = _runtime_call(
                    copy, b, "shadow", [source, gv, const_int(T.i32, lane), _table(copy, table)])
                lanes.append(("shadow", i, lane))
        elif h.declared or h.zeroed:
            if site.width > 1:
                raise site.error(f"{site.function.ref} uses the global @{h.name}, which "
                                 f"needs a shadow; pyzyme gives it one shadow, not one per "
                                 f"lane of a vector derivative",
                                 hint="pass enzyme_context with a context of this width, or "
                                      "the global's memory as an argument (enzyme_dupv)")
            values[("shadow", i)] = copy.get_global(h.shadow)
            lanes = [("shadow", i)]
            if h.zeroed and site.mode != "gradient":
                fnty = T.FunctionType(T.void, [T.ptr, T.i8, T.i64, T.i1])
                b.call(copy.declare("llvm.memset.p0.i64", fnty),
                       [values[("shadow", i)], const_int(T.i8, 0),
                        const_int(T.i64, h.size(copy)), const_int(T.i1, 0)])
        else:
            extra.append(Arg(first + i, Activity.CONST, ("global", i)))
            continue
        extra.append(Arg(first + i, Activity.DUPLICATED, ("global", i), tuple(lanes)))
    return dataclasses.replace(site, args=[*site.args, *extra])


def _runtime_call(copy, b, key: str, args):
    name, fnty = RUNTIME[key]
    return b.call(copy.declare(name, fnty), args)


def _table(copy, name: str | None):
    if name is None:
        raise ValueError("a call uses contexts of global shadows, but the module has no table")
    return copy.get_global(name) or copy.add_global(name, T.StructType([T.i64, T.ptr]),
                                                    is_constant=True, prefix="external")


class _Adapter:
    def __init__(self, site: CallSite, b: IRBuilder, values: dict, primal) -> None:
        self.site, self.b, self.values, self.primal = site, b, values, primal
        self.params = primal.function_type.params

    # -- arguments -----------------------------------------------------------------------
    def convert(self, value, ty, what: str):
        """``value`` as type ``ty``: C's default promotions undone, pointers as integers."""
        b, vt = self.b, value.type
        if vt == ty:
            return value
        if vt.is_float and ty.is_float:
            return b.fptrunc(value, ty) if sizeof(vt) > sizeof(ty) else b.fpext(value, ty)
        if vt.is_int and ty.is_int:
            return b.trunc(value, ty) if vt.width > ty.width else b.sext(value, ty)
        if vt.is_int and ty.is_pointer:
            return b.inttoptr(value, ty)
        if vt.is_pointer and ty.is_int:
            return b.ptrtoint(value, ty)
        raise self.site.error(f"{what} is passed as {vt}; {self.site.function.ref} takes {ty}")

    def primals(self) -> list:
        return [self.passed(a, a.value, f"argument {a.param}") for a in self.site.args]

    def passed(self, arg, position: int, what: str):
        """What the call passes at ``position`` for ``arg``: the value itself, or (a piece of
        a struct passed by value) the piece loaded from its address."""
        ty = self.params[arg.param]
        value = self.values[position]
        if arg.offset is None:
            return self.convert(value, ty, what)
        piece = self.b.gep(T.i8, value, [const_int(T.i64, arg.offset)])
        return self.b.load(ty, piece, 1)

    def lane_shadow(self, arg, lane: int):
        ty = self.params[arg.param]
        if arg.stride is None:
            return self.passed(arg, arg.shadows[lane], f"the shadow of argument {arg.param}")
        base = self.values[arg.shadows[0]]
        offset = self.b.mul(self.convert(self.values[arg.stride], T.i64, "the stride"),
                            const_int(T.i64, lane))
        return self.b.gep(T.i8, base, [offset])

    def shadows(self) -> list:
        return [self.lane_shadow(a, 0) for a in self.site.args
                if a.kind is Activity.DUPLICATED]

    def seed(self):
        ret = self.primal.return_type
        if self.site.dret is not None:
            return self.convert(self.values[self.site.dret], ret, "the seed of the result")
        return _ones(ret)

    def tape(self):
        site, b = self.site, self.b
        value = self.values[site.tape]
        if site.tape_is_pointer:
            return b.load(T.ptr, self.convert(value, T.ptr, "enzyme_tape"), 8)
        return self.convert(value, T.ptr, "the tape")

    def kinds(self) -> list[Activity]:
        return self.site.kinds

    # -- modes ---------------------------------------------------------------------------
    def reverse(self, derivs) -> list:
        site, b = self.site, self.b
        active_ret = site.ret is Activity.ACTIVE
        dfn = derivs.combined(self.primal, self.kinds(), active_ret)
        args = self.primals() + self.shadows() + ([self.seed()] if active_ret else [])
        out = b.call(dfn, args)
        has_ret = self.primal.return_type != T.void
        n_adj = sum(k is Activity.ACTIVE for k in self.kinds())
        if not n_adj:
            return [out] if site.primal_return and has_ret else []
        fields = [b.extractvalue(out, i) for i in range(int(has_ret) + n_adj)]
        return (fields[:1] if site.primal_return and has_ret else []) + fields[int(has_ret):]

    def forward(self, derivs) -> list | None:
        site, b = self.site, self.b
        if site.result_param is not None:
            self._forward_sret(derivs)
            return None
        width = site.width
        dfn = derivs.forward(self.primal, self.kinds(), width)
        lanes = []
        for a in site.args:
            if a.kind is not Activity.CONST:
                lanes += [self.lane_shadow(a, k) for k in range(width)]
        out = b.call(dfn, self.primals() + lanes)
        ret = self.primal.return_type
        if ret == T.void:
            if site.primal_return:
                raise site.error(f"enzyme_primal_return: {self.primal.ref} returns void")
            return []
        if not can_carry_derivative(ret):  # an integer result has no tangent
            return [out] if site.primal_return else []
        fields = [b.extractvalue(out, i) for i in range(width + 1)]
        tangents = fields[1:] if site.ret is not Activity.CONST else []
        return (fields[:1] if site.primal_return else []) + tangents

    def _forward_sret(self, derivs) -> None:
        """A function returning a struct through memory: its result parameter is
        duplicated, the call's own result holding the tangent (the result, then the tangent,
        with enzyme_primal_return; the result alone with enzyme_const_return); what the call
        does not want goes to a slot of the adapter's."""
        site, b = self.site, self.b
        k = site.result_param
        what = f"{self.primal.ref} returns a struct through memory"
        if site.width != 1:
            raise site.error(f"{what}: vector forward mode (enzyme_width) is not supported "
                             f"for it")
        if site.sret is None:
            raise site.error(f"{what}, but the call does not: declare the __enzyme_fwddiff "
                             f"call returning that struct")
        module = site.call.function.module
        rty = _sret_type(self.primal.args[k].attrs, self.primal.module)
        got = _sret_type(site.call.arg_attrs[site.sret], module)
        if rty is None or got is None:
            raise site.error(f"{what} of a type pyzyme cannot read")
        size, buffer = sizeof(rty), self.values[site.sret]
        wanted = [site.primal_return, site.ret is not Activity.CONST]
        if sizeof(got) != size * sum(wanted) or (all(wanted) and _second_field(got) is None):
            asked = [n for n, w in zip(("the result", "its tangent"), wanted) if w]
            raise site.error(f"{what} ({size} bytes); the call asks for "
                             f"{' and '.join(asked) or 'nothing'}, but returns {got} "
                             f"({sizeof(got)} bytes)")
        slots = []
        for want in wanted:
            if want:
                offset = _second_field(got) if slots and slots[0][1] else 0
                slots.append((b.gep(T.i8, buffer, [const_int(T.i64, offset)]), True))
            else:  # not wanted: a slot of the adapter's (a tangent's zeroed)
                slot = b.alloca(rty, align=16)
                fnty = T.FunctionType(T.void, [T.ptr, T.i8, T.i64, T.i1])
                b.call(self.primal.module.declare("llvm.memset.p0.i64", fnty),
                       [slot, const_int(T.i8, 0), const_int(T.i64, size), const_int(T.i1, 0)])
                slots.append((slot, False))
        (primal, _), (tangent, _) = slots
        kinds, primals, lanes = list(self.kinds()), self.primals(), []
        kinds.insert(k, Activity.DUPLICATED)
        primals.insert(k, primal)
        for a in sorted([*site.args, None], key=lambda a: k if a is None else a.param):
            if a is None:
                lanes.append(tangent)
            elif a.kind is not Activity.CONST:
                lanes.append(self.lane_shadow(a, 0))
        b.call(derivs.forward(self.primal, kinds, 1), primals + lanes)

    def augment(self, derivs) -> list:
        site, b = self.site, self.b
        pair = derivs.split(self.primal, self.kinds(), site.ret is Activity.ACTIVE)
        out = b.call(pair.augmented, self.primals() + self.shadows())
        if self.primal.return_type == T.void:
            tape, primal = out, []
        else:
            tape, primal = b.extractvalue(out, 1), [b.extractvalue(out, 0)]
        if site.tape_is_pointer:
            b.store(tape, self.convert(self.values[site.tape], T.ptr, "enzyme_tape"), 8)
            return primal
        return [tape] + primal

    def gradient(self, derivs) -> list:
        site, b = self.site, self.b
        if site.nofree:
            raise site.error("enzyme_nofree is not supported: the reverse pass frees its tape",
                             hint="call __enzyme_augmentfwd again before each __enzyme_reverse")
        active_ret = site.ret is Activity.ACTIVE
        pair = derivs.split(self.primal, self.kinds(), active_ret)
        args = self.primals() + self.shadows() + ([self.seed()] if active_ret else [])
        out = b.call(pair.reverse, args + [const_int(T.i1, 0), self.tape()])
        n_adj = sum(k is Activity.ACTIVE for k in self.kinds())
        return [b.extractvalue(out, i) for i in range(n_adj)]

    def batch(self, derivs) -> list:
        site, b = self.site, self.b
        results = []
        for lane in range(site.width):
            args = []
            for a in site.args:
                position = a.value if a.kind is Activity.CONST or lane == 0 \
                    else a.shadows[lane - 1]
                args.append(self.convert(self.values[position], self.params[a.param],
                                         f"argument {a.param}"))
            out = b.call(self.primal, args)
            if self.primal.return_type != T.void:
                results.append(out)
        return results

    # -- the result ----------------------------------------------------------------------
    def deliver(self, elements: list | None, ret) -> None:
        site, b = self.site, self.b
        if elements is None:  # written by the derivative itself
            b.ret_void()
            return
        if site.sret is not None:
            layout = _sret_type(site.call.arg_attrs[site.sret], site.call.function.module)
            self._store_struct(elements, self.values[site.sret], layout)
            b.ret_void()
            return
        if ret == T.void:
            b.ret_void()
            return
        if not elements:
            b.ret(Undef(ret))
            return
        if len(elements) == 1 and elements[0].type == ret:
            b.ret(elements[0])
            return
        layout = T.StructType([e.type for e in elements])
        if sizeof(layout) == sizeof(ret):  # the same bytes, as the call's type
            slot = b.alloca(layout, align=16)
            self._store_struct(elements, slot, layout)
            b.ret(b.load(ret, slot, 16))
            return
        if elements[0].type == ret:  # Enzyme gives the first value to a call that wants one
            b.ret(elements[0])
            return
        raise self._mismatch(elements, ret)

    def _store_struct(self, elements: list, pointer, layout) -> None:
        b = self.b
        fields = _leaf_fields(layout)
        if layout is None or [t for _, t in fields] != [e.type for e in elements]:
            expected = ", ".join(str(e.type) for e in elements) or "nothing"
            raise self.site.error(f"the call returns its result through memory as {layout}, "
                                  f"but the derivative gives {{ {expected} }}")
        for (offset, _), value in zip(fields, elements):
            b.store(value, b.gep(T.i8, pointer, [const_int(T.i64, offset)]))

    def _mismatch(self, elements, ret):
        got = ", ".join(str(e.type) for e in elements)
        return self.site.error(
            f"the call is declared to return {ret}, but {self.site.entry} gives {{ {got} }} "
            f"here", hint="declare the __enzyme_* function with a struct return type holding "
                          "one field per value (the derivatives of the active arguments, in "
                          "order)")


def _leaf_fields(ty) -> list[tuple[int, object]]:
    """(byte offset, type) of every scalar leaf of ``ty``, in order."""
    from pyzyme.analysis.layout import field_offset

    if ty is None:
        return []
    if isinstance(ty, (T.StructType, T.IdentifiedStructType, T.ArrayType)):
        n = ty.count if isinstance(ty, T.ArrayType) else len(ty.elements)
        out = []
        for i in range(n):
            off, sub = field_offset(ty, [i])
            out += [(off + o, t) for o, t in _leaf_fields(sub)]
        return out
    return [(0, ty)]


def _second_field(ty) -> int | None:
    """The byte offset of the second of the two fields of struct ``ty`` (the tangent, where
    a call returns a result and its tangent), or None."""
    from pyzyme.analysis.layout import field_offset

    if isinstance(ty, (T.StructType, T.IdentifiedStructType)) and len(ty.elements) == 2:
        return field_offset(ty, [1])[0]
    return None


def _sret_type(attrs: str, module):
    """The type in ``sret(<type>)`` of an argument's attribute text (a named struct is
    ``module``'s)."""
    import re

    m = re.search(r"sret\((.*)\)", attrs)
    if not m:
        return None
    text, depth = m.group(1), 0
    for i, ch in enumerate(text):
        depth += ch in "({[<"
        depth -= ch in ")}]>"
        if depth < 0:
            text = text[:i]
            break
    text = text.strip()
    if text.startswith("%"):
        return module.struct_types.get(text[1:].strip('"'))
    return ir.parse_type(text)


def _ones(ty):
    """The seed 1.0 of a float result (of each float of an aggregate)."""
    if ty.is_float:
        return const_float(ty, 1.0)
    if isinstance(ty, (T.StructType, T.ArrayType)):
        elements = [ty.element] * ty.count if isinstance(ty, T.ArrayType) else ty.elements
        return ConstantAggregate(ty, [_ones(e) for e in elements])
    raise TypeError(f"no seed for {ty}")
