"""Instructions that transfer control: calls, terminators and exception handling."""

from __future__ import annotations

from collections.abc import Sequence

from pyzyme.ir import types as T
from pyzyme.ir.instruction import Instruction, Ref, _plain_ref, _require, _tref
from pyzyme.ir.values import Constant, ConstantInt, NamedValue, Value
from pyzyme.ir.module import BasicBlock, Function


# ---------------------------------------------------------------------------------- calls

class CallBase(Instruction):
    """Shared parts of ``call`` and ``invoke``.

    ``operands`` is ``[callee, *args, *bundle operands]`` (invoke adds its two successors).
    Attribute texts (calling convention, return and function attributes, each argument's
    attributes) are carried verbatim. ``bundles`` is ``[(tag, operand count), ...]``.
    """

    __slots__ = ("function_type", "nargs", "arg_attrs", "cconv", "ret_attrs", "fn_attrs",
                 "bundles", "addrspace")

    def _setup(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
               arg_attrs: Sequence[str] | None) -> None:
        opcode = self.opcode
        _require(isinstance(function_type, T.FunctionType), opcode,
                 f"needs a function type, got {function_type}")
        _require(callee.type.is_pointer, opcode, f"callee must be a pointer, got {callee.type}")
        params = function_type.params
        n = len(args)
        _require(n == len(params) or (function_type.var_arg and n >= len(params)), opcode,
                 f"{_callee_text(callee)} takes {len(params)} arguments, given {n}")
        for i, (arg, param) in enumerate(zip(args, params)):
            _require(arg.type == param, opcode,
                     f"argument {i} of {_callee_text(callee)} is {arg.type}, expected {param}")
        self.function_type = function_type
        self.nargs = n
        self.arg_attrs = list(arg_attrs) if arg_attrs is not None else [""] * n
        self.cconv = ""
        self.ret_attrs = ""
        self.fn_attrs = ""
        self.bundles: list[tuple[str, int]] = []
        self.addrspace = ""

    @property
    def callee(self) -> Value:
        return self.operands[0]

    @property
    def args(self) -> list[Value]:
        return self.operands[1:1 + self.nargs]

    @property
    def called_function(self):
        """The :class:`~pyzyme.ir.module.Function` called directly, or None."""
        callee = self.operands[0]
        return callee if isinstance(callee, Function) else None

    def add_bundle(self, tag: str, values: Sequence[Value]) -> None:
        at = self._bundle_end()
        self.bundles.append((tag, len(values)))
        self.operands[at:at] = values
        if self.parent is not None:
            for v in values:
                if isinstance(v, NamedValue):
                    v.users.append(self)

    def append_args(self, values: Sequence[Value], function_type: T.FunctionType) -> None:
        """Pass ``values`` after the present arguments to a callee that now has type
        ``function_type`` (a function given trailing parameters)."""
        _require(len(function_type.params) == self.nargs + len(values)
                 and not function_type.var_arg, self.opcode,
                 f"{function_type} does not end in {len(values)} more parameters")
        at = 1 + self.nargs
        self.operands[at:at] = values
        self.nargs += len(values)
        self.arg_attrs = [*self.arg_attrs, *([""] * len(values))]
        self.function_type = function_type
        if self.parent is not None:
            for v in values:
                if isinstance(v, NamedValue):
                    v.users.append(self)

    def _bundle_end(self) -> int:
        """Where the next bundle's operands go."""
        return 1 + self.nargs + sum(n for _, n in self.bundles)

    def _call_text(self, ref: Ref) -> str:
        parts = [self._head()]
        for piece in (self.cconv, self.ret_attrs, self.addrspace):
            if piece:
                parts.append(piece)
        fty = self.function_type
        parts.append(str(fty) if fty.var_arg else str(fty.ret))
        args = []
        for arg, attrs in zip(self.operands[1:1 + self.nargs], self.arg_attrs):
            if isinstance(arg.type, T.MetadataType):
                args.append(f"metadata {ref(arg)}")
            elif attrs:
                args.append(f"{arg.type} {attrs} {ref(arg)}")
            else:
                args.append(f"{arg.type} {ref(arg)}")
        text = f"{' '.join(parts)} {ref(self.operands[0])}({', '.join(args)})"
        if self.fn_attrs:
            text += " " + self.fn_attrs
        if self.bundles:
            pos = 1 + self.nargs
            groups = []
            for tag, n in self.bundles:
                vals = ", ".join(_tref(ref, v) for v in self.operands[pos:pos + n])
                groups.append(f'"{tag}"({vals})')
                pos += n
            text += " [ " + ", ".join(groups) + " ]"
        return text


def _callee_text(callee: Value) -> str:
    return _plain_ref(callee)


class Call(CallBase):
    """``[tail|musttail|notail] call [fmf] [cconv] [ret attrs] <ty> <callee>(<args>) ...``.

    ``tail`` is ``""``, ``"tail"``, ``"musttail"`` or ``"notail"``.
    """

    __slots__ = ("tail",)

    def __init__(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
                 flags: Sequence[str] = (), tail: str = "",
                 arg_attrs: Sequence[str] | None = None, name: str = "") -> None:
        super().__init__("call", function_type.ret if isinstance(function_type, T.FunctionType)
                         else T.void, (callee, *args), flags, name)
        self._setup(callee, args, function_type, arg_attrs)
        self.tail = tail

    def body(self, ref: Ref) -> str:
        text = self._call_text(ref)
        return f"{self.tail} {text}" if self.tail else text


class Invoke(CallBase):
    """``invoke ... to label %normal unwind label %unwind``."""

    __slots__ = ()
    is_terminator = True

    def __init__(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
                 normal, unwind, arg_attrs: Sequence[str] | None = None,
                 name: str = "") -> None:
        super().__init__("invoke", function_type.ret if isinstance(function_type, T.FunctionType)
                         else T.void, (callee, *args, normal, unwind), (), name)
        self._setup(callee, args, function_type, arg_attrs)

    @property
    def normal_dest(self):
        return self.operands[-2]

    @property
    def unwind_dest(self):
        return self.operands[-1]

    @property
    def successors(self) -> list:
        return self.operands[-2:]

    def _bundle_end(self) -> int:
        return len(self.operands) - 2

    def body(self, ref: Ref) -> str:
        return (f"{self._call_text(ref)} to label {ref(self.operands[-2])}"
                f" unwind label {ref(self.operands[-1])}")


class CallBr(CallBase):
    """``callbr ... to label %fallthrough [label %indirect, ...]`` (``asm goto``).

    ``operands`` ends with the fallthrough block and then the ``nindirect`` indirect blocks.
    """

    __slots__ = ("nindirect",)
    is_terminator = True

    def __init__(self, callee: Value, args: Sequence[Value], function_type: T.FunctionType,
                 fallthrough, indirect: Sequence, arg_attrs: Sequence[str] | None = None,
                 name: str = "") -> None:
        super().__init__("callbr", function_type.ret if isinstance(function_type, T.FunctionType)
                         else T.void, (callee, *args, fallthrough, *indirect), (), name)
        self._setup(callee, args, function_type, arg_attrs)
        self.nindirect = len(indirect)

    @property
    def successors(self) -> list:
        return self.operands[-1 - self.nindirect:]

    def _bundle_end(self) -> int:
        return len(self.operands) - 1 - self.nindirect

    def body(self, ref: Ref) -> str:
        ops = self.operands
        indirect = ", ".join(f"label {ref(b)}" for b in ops[len(ops) - self.nindirect:])
        fallthrough = ops[len(ops) - 1 - self.nindirect]
        return f"{self._call_text(ref)} to label {ref(fallthrough)} [{indirect}]"


# ---------------------------------------------------------------------------- terminators

class Terminator(Instruction):
    __slots__ = ()
    is_terminator = True

    @property
    def successors(self) -> list:
        return [op for op in self.operands if isinstance(op, BasicBlock)]


class Branch(Terminator):
    """``br label %t`` or ``br i1 %c, label %t, label %f``."""

    __slots__ = ()

    def __init__(self, target, false_target=None, cond: Value | None = None) -> None:
        if cond is None:
            super().__init__("br", T.void, (target,))
        else:
            _require(cond.type == T.i1, "br", f"condition must be i1, got {cond.type}")
            super().__init__("br", T.void, (cond, target, false_target))

    @property
    def is_conditional(self) -> bool:
        return len(self.operands) == 3

    def body(self, ref: Ref) -> str:
        ops = self.operands
        if len(ops) == 1:
            return f"br label {ref(ops[0])}"
        return f"br i1 {ref(ops[0])}, label {ref(ops[1])}, label {ref(ops[2])}"


class Switch(Terminator):
    """``switch <ty> <v>, label %default [ <ty> <c>, label %dest ... ]``.

    ``operands`` is ``[value, default, c0, dest0, c1, dest1, ...]``.
    """

    __slots__ = ()

    def __init__(self, value: Value, default) -> None:
        _require(value.type.is_int, "switch", f"needs an integer, got {value.type}")
        super().__init__("switch", T.void, (value, default))

    def add_case(self, constant: ConstantInt, dest) -> None:
        _require(constant.type == self.operands[0].type, "switch",
                 f"case of type {constant.type} in a switch on {self.operands[0].type}")
        self._append_operands((constant, dest))

    @property
    def cases(self) -> list[tuple[ConstantInt, object]]:
        ops = self.operands
        return [(ops[i], ops[i + 1]) for i in range(2, len(ops), 2)]

    def body(self, ref: Ref) -> str:
        ops = self.operands
        lines = [f"switch {_tref(ref, ops[0])}, label {ref(ops[1])} ["]
        for i in range(2, len(ops), 2):
            lines.append(f"    {_tref(ref, ops[i])}, label {ref(ops[i + 1])}")
        lines.append("  ]")
        return "\n".join(lines)


class IndirectBr(Terminator):
    __slots__ = ()

    def __init__(self, address: Value, dests: Sequence) -> None:
        _require(address.type.is_pointer, "indirectbr", f"needs a pointer, got {address.type}")
        super().__init__("indirectbr", T.void, (address, *dests))

    def body(self, ref: Ref) -> str:
        dests = ", ".join(f"label {ref(d)}" for d in self.operands[1:])
        return f"indirectbr {_tref(ref, self.operands[0])}, [{dests}]"


class Ret(Terminator):
    __slots__ = ()

    def __init__(self, value: Value | None = None) -> None:
        super().__init__("ret", T.void, (value,) if value is not None else ())

    @property
    def value(self) -> Value | None:
        return self.operands[0] if self.operands else None

    def body(self, ref: Ref) -> str:
        return f"ret {_tref(ref, self.operands[0])}" if self.operands else "ret void"


class Unreachable(Terminator):
    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("unreachable", T.void, ())

    def body(self, ref: Ref) -> str:
        return "unreachable"


class Resume(Terminator):
    __slots__ = ()

    def __init__(self, value: Value) -> None:
        super().__init__("resume", T.void, (value,))

    def body(self, ref: Ref) -> str:
        return f"resume {_tref(ref, self.operands[0])}"


# --------------------------------------------------------------------- exceptions, atomics

class LandingPad(Instruction):
    """``landingpad <ty> [cleanup] (catch|filter <ty> <c>)*``: clause kinds in ``clauses``."""

    __slots__ = ("cleanup", "clauses")

    def __init__(self, type: T.Type, cleanup: bool = False, name: str = "") -> None:  # noqa: A002
        super().__init__("landingpad", type, (), (), name)
        self.cleanup = cleanup
        self.clauses: list[str] = []

    def add_clause(self, kind: str, value: Constant) -> None:
        _require(kind in ("catch", "filter"), "landingpad", f"unknown clause {kind!r}")
        self.clauses.append(kind)
        self._append_operands((value,))

    def body(self, ref: Ref) -> str:
        lines = [f"landingpad {self.type}"]
        if self.cleanup:
            lines.append("          cleanup")
        for kind, value in zip(self.clauses, self.operands):
            lines.append(f"          {kind} {_tref(ref, value)}")
        return "\n".join(lines)


def _unwind_text(ref: Ref, dest) -> str:
    return f"unwind label {ref(dest)}" if dest is not None else "unwind to caller"


class CatchSwitch(Terminator):
    """``catchswitch within <parent> [label %h, ...] unwind (label %d | to caller)``.

    ``operands`` is ``[parent pad (or none), *handlers, unwind dest?]``.
    """

    __slots__ = ("nhandlers",)

    def __init__(self, parent_pad: Value, handlers: Sequence, unwind=None, name: str = "") -> None:
        ops = (parent_pad, *handlers) + ((unwind,) if unwind is not None else ())
        super().__init__("catchswitch", T.token, ops, (), name)
        self.nhandlers = len(handlers)

    @property
    def unwind_dest(self):
        return self.operands[-1] if len(self.operands) > 1 + self.nhandlers else None

    def body(self, ref: Ref) -> str:
        handlers = ", ".join(f"label {ref(h)}" for h in self.operands[1:1 + self.nhandlers])
        return (f"catchswitch within {ref(self.operands[0])} [{handlers}] "
                f"{_unwind_text(ref, self.unwind_dest)}")


class FuncletPad(Instruction):
    """``catchpad``/``cleanuppad within <parent> [<args>]``; ``operands`` is ``[parent, *args]``."""

    __slots__ = ()

    def __init__(self, opcode: str, parent_pad: Value, args: Sequence[Value],
                 name: str = "") -> None:
        _require(opcode in ("catchpad", "cleanuppad"), opcode, "unknown funclet pad")
        super().__init__(opcode, T.token, (parent_pad, *args), (), name)

    def body(self, ref: Ref) -> str:
        args = ", ".join(_tref(ref, v) for v in self.operands[1:])
        return f"{self.opcode} within {ref(self.operands[0])} [{args}]"


class CatchRet(Terminator):
    __slots__ = ()

    def __init__(self, pad: Value, dest) -> None:
        super().__init__("catchret", T.void, (pad, dest))

    def body(self, ref: Ref) -> str:
        return f"catchret from {ref(self.operands[0])} to label {ref(self.operands[1])}"


class CleanupRet(Terminator):
    __slots__ = ()

    def __init__(self, pad: Value, unwind=None) -> None:
        super().__init__("cleanupret", T.void, (pad,) if unwind is None else (pad, unwind))

    def body(self, ref: Ref) -> str:
        unwind = self.operands[1] if len(self.operands) > 1 else None
        return f"cleanupret from {ref(self.operands[0])} {_unwind_text(ref, unwind)}"


