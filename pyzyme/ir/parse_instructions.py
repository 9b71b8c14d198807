"""Parsing of instruction bodies: one method per LLVM instruction family.

A mixin of the module parser (:mod:`pyzyme.ir.parser`), which provides the token helpers
(``type``, ``value``, ``typed_value``, ``expect``, ``accept``, ...) these methods use. Each method
is entered just after its opcode and returns the constructed instruction; the constructors check
the operand types.
"""

from __future__ import annotations

import re

from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import MetadataValue, NoneToken, Value

_FMF = frozenset(I.FAST_MATH_FLAGS)
_CMP_FLAGS = _FMF | {"samesign"}
BINOP_FLAGS = frozenset({"nuw", "nsw", "exact", "disjoint"}) | _FMF
CAST_FLAGS = frozenset({"nneg", "nuw", "nsw"}) | _FMF
GEP_FLAGS = frozenset({"inbounds", "nusw", "nuw"})


class InstructionParser:
    # -- instructions ------------------------------------------------------------------
    def instruction(self) -> I.Instruction:
        kind, op = self.kinds[self.i], self.texts[self.i]
        if kind != "word":
            raise self.error(f"expected an instruction, found {op!r}")
        self.i += 1
        method = _DISPATCH.get(op)
        if method is None:
            raise self.error(f"unknown instruction {op!r}", self.offsets[self.i - 1])
        return method(self, op)

    def binop(self, op: str) -> I.Instruction:
        flags = self.flags(BINOP_FLAGS)
        ty = self.type()
        a = self.value(ty)
        self.expect(",")
        b = self.value(ty)
        return I.BinaryOp(op, a, b, flags)

    def fneg(self, op: str) -> I.Instruction:
        flags = self.flags(_FMF)
        return I.UnaryOp(op, self.typed_value(), flags)

    def compare(self, op: str) -> I.Instruction:
        flags = self.flags(_CMP_FLAGS)
        pred = self.texts[self.i]
        self.i += 1
        ty = self.type()
        a = self.value(ty)
        self.expect(",")
        b = self.value(ty)
        return I.Compare(op, pred, a, b, flags)

    def cast(self, op: str) -> I.Instruction:
        flags = self.flags(CAST_FLAGS)
        v = self.typed_value()
        self.expect("to")
        return I.Cast(op, v, self.type(), flags)

    def select(self, op: str) -> I.Instruction:
        flags = self.flags(_FMF)
        c = self.typed_value()
        self.expect(",")
        a = self.typed_value()
        self.expect(",")
        b = self.typed_value()
        return I.Select(c, a, b, flags)

    def phi(self, op: str) -> I.Instruction:
        flags = self.flags(_FMF)
        ty = self.type()
        phi = I.Phi(ty, flags)
        while True:
            self.expect("[")
            v = self.value(ty)
            self.expect(",")
            block = self.block_ref()
            self.expect("]")
            phi.operands.append(v)
            phi.blocks.append(block)
            if not (self.texts[self.i] == "," and self.texts[self.i + 1] == "["):
                return phi
            self.i += 1

    def freeze(self, op: str) -> I.Instruction:
        return I.Freeze(self.typed_value())

    def alloca(self, op: str) -> I.Instruction:
        flags = self.flags(frozenset({"inalloca"}))
        ty = self.type()
        count = None
        align = None
        addrspace = 0
        while self.texts[self.i] == "," and self.kinds[self.i + 1] != "meta":
            self.i += 1
            if self.accept("align"):
                align = self.int_token()
            elif self.accept("addrspace"):
                self.expect("(")
                addrspace = self.int_token()
                self.expect(")")
            else:
                count = self.typed_value()
        return I.Alloca(ty, count, align, addrspace, flags)

    def align_suffix(self) -> int | None:
        if self.texts[self.i] == "," and self.texts[self.i + 1] == "align":
            self.i += 2
            return self.int_token()
        return None

    def atomic_tail(self) -> tuple[str | None, str]:
        scope = None
        if self.accept("syncscope"):
            self.expect("(")
            scope = self.string()
            self.expect(")")
        ordering = self.texts[self.i]
        self.i += 1
        return scope, ordering

    def load(self, op: str) -> I.Instruction:
        atomic = self.accept("atomic")
        volatile = self.accept("volatile")
        ty = self.type()
        self.expect(",")
        p = self.typed_value()
        scope, ordering = self.atomic_tail() if atomic else (None, None)
        return I.Load(ty, p, self.align_suffix(), volatile, ordering, scope)

    def store(self, op: str) -> I.Instruction:
        atomic = self.accept("atomic")
        volatile = self.accept("volatile")
        v = self.typed_value()
        self.expect(",")
        p = self.typed_value()
        scope, ordering = self.atomic_tail() if atomic else (None, None)
        return I.Store(v, p, self.align_suffix(), volatile, ordering, scope)

    def gep(self, op: str) -> I.Instruction:
        flags = self.flags(GEP_FLAGS)
        source = self.type()
        self.expect(",")
        p = self.typed_value()
        indices = []
        while self.texts[self.i] == "," and self.kinds[self.i + 1] != "meta":
            self.i += 1
            indices.append(self.typed_value())
        return I.GetElementPtr(source, p, indices, flags)

    def index_list(self) -> list[int]:
        out = []
        while self.texts[self.i] == "," and self.kinds[self.i + 1] == "num":
            self.i += 1
            out.append(self.int_token())
        return out

    def extractvalue(self, op: str) -> I.Instruction:
        agg = self.typed_value()
        return I.ExtractValue(agg, self.index_list())

    def insertvalue(self, op: str) -> I.Instruction:
        agg = self.typed_value()
        self.expect(",")
        elem = self.typed_value()
        return I.InsertValue(agg, elem, self.index_list())

    def extractelement(self, op: str) -> I.Instruction:
        v = self.typed_value()
        self.expect(",")
        return I.ExtractElement(v, self.typed_value())

    def insertelement(self, op: str) -> I.Instruction:
        v = self.typed_value()
        self.expect(",")
        e = self.typed_value()
        self.expect(",")
        return I.InsertElement(v, e, self.typed_value())

    def shufflevector(self, op: str) -> I.Instruction:
        a = self.typed_value()
        self.expect(",")
        b = self.typed_value()
        self.expect(",")
        return I.ShuffleVector(a, b, self.typed_value())

    def call_parts(self):
        """``[cconv] [ret attrs] [addrspace(N)] <ty> <callee>(<args>) [fn attrs] [bundles]``."""
        ret_attrs = self.attrs_until_type()
        ret = self.type()
        fnty = None
        if self.texts[self.i] == "(" and self.kinds[self.i] == "punct":
            fnty = self.function_type_after(ret)
        if self.texts[self.i] == "asm":
            self.i += 1
            callee = self.inline_asm(T.ptr)
        else:
            callee = self.value(T.ptr)
        self.expect("(")
        args: list[Value] = []
        attrs: list[str] = []
        if not self.accept(")"):
            while True:
                if self.accept("metadata"):
                    start = self.i
                    self.metadata_operand()
                    args.append(MetadataValue(self.span(start)))
                    attrs.append("")
                else:
                    aty = self.type()
                    attrs.append(self.param_attrs())
                    args.append(self.value(aty))
                if self.accept(")"):
                    break
                self.expect(",")
        if fnty is None:
            fnty = T.FunctionType(ret, [a.type for a in args])
        fn_start = self.i
        while self.kinds[self.i] == "hash" or (self.kinds[self.i] == "word"
                                              and self.texts[self.i] not in ("to",)):
            self.i += 1
            if self.texts[self.i] == "(" and self.kinds[self.i] == "punct":
                self.balanced()
        fn_attrs = self.span(fn_start)
        bundles: list[tuple[str, list[Value]]] = []
        if self.texts[self.i] == "[" and self.kinds[self.i] == "punct":
            self.i += 1
            while True:
                tag = self.string()
                self.expect("(")
                vals = []
                if not self.accept(")"):
                    while True:
                        vals.append(self.typed_value())
                        if self.accept(")"):
                            break
                        self.expect(",")
                bundles.append((tag, vals))
                if self.accept("]"):
                    break
                self.expect(",")
        return ret_attrs, fnty, callee, args, attrs, fn_attrs, bundles

    def metadata_operand(self) -> None:
        kind, tok = self.kinds[self.i], self.texts[self.i]
        if kind == "meta":
            self.i += 1
            if tok == "!":
                if self.texts[self.i] == "{":
                    depth = 0
                    while True:
                        t = self.texts[self.i]
                        self.i += 1
                        if t == "{":
                            depth += 1
                        elif t == "}":
                            depth -= 1
                            if depth == 0:
                                return
                        elif self.kinds[self.i - 1] == "eof":
                            raise self.error("unterminated metadata")
                elif self.kinds[self.i] == "str":
                    self.i += 1
            elif self.texts[self.i] == "(":
                self.balanced()
            return
        self.typed_value()  # metadata i32 0, metadata ptr %x

    def _finish_call(self, inst: I.CallBase, parts) -> I.CallBase:
        ret_attrs, _fnty, _callee, _args, _attrs, fn_attrs, bundles = parts
        cconv, _, rattrs = _split_cconv(ret_attrs)
        inst.cconv = cconv
        inst.ret_attrs = rattrs
        inst.fn_attrs = fn_attrs
        for tag, vals in bundles:
            inst.add_bundle(tag, vals)
        return inst

    def call(self, op: str) -> I.Instruction:
        flags = self.flags(_FMF)
        parts = self.call_parts()
        _r, fnty, callee, args, attrs, _f, _b = parts
        return self._finish_call(I.Call(callee, args, fnty, flags, "", attrs), parts)

    def tail_call(self, op: str) -> I.Instruction:
        self.expect("call")
        inst = self.call("call")
        inst.tail = op
        return inst

    def invoke(self, op: str) -> I.Instruction:
        parts = self.call_parts()
        _r, fnty, callee, args, attrs, _f, _b = parts
        self.skip_nl()
        self.expect("to")
        normal = self.label()
        self.expect("unwind")
        unwind = self.label()
        return self._finish_call(I.Invoke(callee, args, fnty, normal, unwind, attrs), parts)

    def callbr(self, op: str) -> I.Instruction:
        parts = self.call_parts()
        _r, fnty, callee, args, attrs, _f, _b = parts
        self.skip_nl()
        self.expect("to")
        fallthrough = self.label()
        self.expect("[")
        indirect = []
        while not self.accept("]"):
            indirect.append(self.label())
            self.accept(",")
        return self._finish_call(
            I.CallBr(callee, args, fnty, fallthrough, indirect, attrs), parts)

    def pad_parent(self) -> Value:
        self.expect("within")
        if self.accept("none"):
            return NoneToken(T.token)
        return self.value(T.token)

    def unwind_dest(self):
        self.expect("unwind")
        if self.accept("to"):
            self.expect("caller")
            return None
        return self.label()

    def catchswitch(self, op: str) -> I.Instruction:
        parent = self.pad_parent()
        self.expect("[")
        handlers = []
        while not self.accept("]"):
            handlers.append(self.label())
            self.accept(",")
        return I.CatchSwitch(parent, handlers, self.unwind_dest())

    def funclet_pad(self, op: str) -> I.Instruction:
        parent = self.pad_parent()
        self.expect("[")
        args = []
        while not self.accept("]"):
            args.append(self.typed_value())
            self.accept(",")
        return I.FuncletPad(op, parent, args)

    def catchret(self, op: str) -> I.Instruction:
        self.expect("from")
        pad = self.value(T.token)
        self.expect("to")
        return I.CatchRet(pad, self.label())

    def cleanupret(self, op: str) -> I.Instruction:
        self.expect("from")
        pad = self.value(T.token)
        return I.CleanupRet(pad, self.unwind_dest())

    def br(self, op: str) -> I.Instruction:
        if self.texts[self.i] == "label":
            return I.Branch(self.label())
        cond = self.typed_value()
        self.expect(",")
        t = self.label()
        self.expect(",")
        return I.Branch(t, self.label(), cond)

    def switch(self, op: str) -> I.Instruction:
        v = self.typed_value()
        self.expect(",")
        inst = I.Switch(v, self.label())
        self.expect("[")
        self.skip_nl()
        while not self.accept("]"):
            c = self.typed_value()
            self.expect(",")
            inst.add_case(c, self.label())
            self.skip_nl()
        return inst

    def indirectbr(self, op: str) -> I.Instruction:
        addr = self.typed_value()
        self.expect(",")
        self.expect("[")
        dests = []
        while not self.accept("]"):
            dests.append(self.label())
            self.accept(",")
        return I.IndirectBr(addr, dests)

    def ret(self, op: str) -> I.Instruction:
        if self.accept("void"):
            return I.Ret()
        return I.Ret(self.typed_value())

    def unreachable(self, op: str) -> I.Instruction:
        return I.Unreachable()

    def resume(self, op: str) -> I.Instruction:
        return I.Resume(self.typed_value())

    def landingpad(self, op: str) -> I.Instruction:
        inst = I.LandingPad(self.type())
        while True:
            save = self.i
            self.skip_nl()
            tok = self.texts[self.i]
            if tok == "cleanup":
                self.i += 1
                inst.cleanup = True
            elif tok in ("catch", "filter"):
                self.i += 1
                inst.add_clause(tok, self.typed_value())
            else:
                self.i = save
                return inst

    def atomicrmw(self, op: str) -> I.Instruction:
        volatile = self.accept("volatile")
        operation = self.texts[self.i]
        self.i += 1
        p = self.typed_value()
        self.expect(",")
        v = self.typed_value()
        scope, ordering = self.atomic_tail()
        return I.AtomicRMW(operation, p, v, ordering, scope, volatile, self.align_suffix())

    def cmpxchg(self, op: str) -> I.Instruction:
        weak = self.accept("weak")
        volatile = self.accept("volatile")
        p = self.typed_value()
        self.expect(",")
        c = self.typed_value()
        self.expect(",")
        n = self.typed_value()
        scope, success = self.atomic_tail()
        failure = self.texts[self.i]
        self.i += 1
        return I.CmpXchg(p, c, n, success, failure, scope, weak, volatile, self.align_suffix())

    def fence(self, op: str) -> I.Instruction:
        scope, ordering = self.atomic_tail()
        return I.Fence(ordering, scope)

    def va_arg(self, op: str) -> I.Instruction:
        v = self.typed_value()
        self.expect(",")
        return I.VAArg(v, self.type())


_P = InstructionParser
_DISPATCH = {op: _P.binop for op in I.INT_BINOPS | I.FLOAT_BINOPS}
_DISPATCH.update({op: _P.cast for op in I.CASTS})
_DISPATCH.update({
    "fneg": _P.fneg, "icmp": _P.compare, "fcmp": _P.compare, "select": _P.select,
    "phi": _P.phi, "freeze": _P.freeze, "alloca": _P.alloca, "load": _P.load,
    "store": _P.store, "getelementptr": _P.gep, "extractvalue": _P.extractvalue,
    "insertvalue": _P.insertvalue, "extractelement": _P.extractelement,
    "insertelement": _P.insertelement, "shufflevector": _P.shufflevector, "call": _P.call,
    "tail": _P.tail_call, "musttail": _P.tail_call, "notail": _P.tail_call,
    "invoke": _P.invoke, "callbr": _P.callbr,
    "br": _P.br, "switch": _P.switch, "indirectbr": _P.indirectbr,
    "ret": _P.ret, "unreachable": _P.unreachable, "resume": _P.resume,
    "landingpad": _P.landingpad, "atomicrmw": _P.atomicrmw, "cmpxchg": _P.cmpxchg,
    "fence": _P.fence, "va_arg": _P.va_arg, "catchswitch": _P.catchswitch,
    "catchpad": _P.funclet_pad, "cleanuppad": _P.funclet_pad, "catchret": _P.catchret,
    "cleanupret": _P.cleanupret,
})

_CCONV = re.compile(r"^(cc\s+\d+|[a-z_0-9]*cc|swiftcc|tailcc|preserve_\w+|ccc|cxx_fast_tlscc"
                    r"|x86_\w+|arm_\w+|aarch64_\w+|amdgpu_\w+|ptx_\w+|spir_\w+|intel_\w+"
                    r"|win64cc|riscv_\w+|msp430_\w+|avr_\w+|m68k_\w+|hhvm\w*)(?:\s+|$)")


def _split_cconv(text: str) -> tuple[str, str, str]:
    """Split call-site text before the type into (calling convention, '', return attributes)."""
    m = _CCONV.match(text)
    if m and not text.startswith(("captures", "nocapture")):
        return m.group(1), "", text[m.end():]
    return "", "", text
