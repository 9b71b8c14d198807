"""What loops over a step function share: the checked step, its activities, and drivers.

A loop over a step function (a checkpointed loop, :mod:`pyzyme.diff.calls.checkpoint`; a
fixed-point iteration, :mod:`pyzyme.diff.calls.fixed_point`) is one call of an intrinsic naming
the step and its arguments. Each mode gets a *driver*: a function of its own, built here, that
the derivative calls in place of the loop and that calls the step's derivatives.
"""

from __future__ import annotations

from pyzyme.analysis.activity import Activity
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.module import Function
from pyzyme.ir.values import Value, const_int

__all__ = ["i64", "trap", "step_function", "step_activities", "Driver"]


def i64(n: int) -> Value:
    return const_int(T.i64, n)


def trap(module):
    return module.declare("llvm.trap", T.FunctionType(T.void, []))


def step_function(cx, inst: I.CallBase, index: int, what: str) -> Function:
    """The step (operand ``index`` of ``inst``), which pyzyme must be able to read."""
    step = inst.args[index]
    if not isinstance(step, Function) or step.is_declaration:
        raise UnsupportedError(f"{cx.where} runs {what} whose step pyzyme cannot read "
                               f"({step!r})", hint="pass the step function itself")
    return step


def step_activities(cx, args: list, step: Function, reverse: bool, what: str) -> list:
    """The step's activities: its index constant, each of ``args`` (the operands the loop
    passes it) as the call's."""
    acts = [Activity.CONST]
    for a in args:
        if a not in cx.activity.varied:
            acts.append(Activity.CONST)
        elif a.type.is_pointer:
            acts.append(Activity.DUPLICATED)
        elif not reverse:
            acts.append(Activity.ACTIVE)
        else:
            raise UnsupportedError(
                f"{cx.where} passes an active {a.type} by value to the steps of {what} "
                f"({step.ref}); reverse mode carries derivatives between steps through memory "
                f"only", hint="pass it by address")
    if len(acts) != len(step.args):
        raise UnsupportedError(f"{cx.where} passes {len(acts) - 1} arguments to the steps of "
                               f"{what}, but {step.ref} takes {len(step.args) - 1} after its "
                               f"index")
    return acts


class Driver:
    """A driver function being built: ``params`` named, a builder at its entry."""

    def __init__(self, module, name: str, ret: T.Type, params: list,
                 suffix: str = "") -> None:
        self.fn = module.add_function(module.unique_global_name(name),
                                      T.FunctionType(ret, [ty for _, ty in params]),
                                      prefix="internal", suffix=suffix)
        for arg, (pname, _) in zip(self.fn.args, params):
            arg.name = pname
        self.b = IRBuilder(self.fn.append_block("entry"))

    @property
    def module(self):
        return self.fn.module

    def loop(self, first: Value, last: Value, body) -> None:
        """``for j in [first, last)``: ``body(b, j)`` emitted at ``self.b``, after the loop."""
        b, fn = self.b, self.fn
        head = b.block
        loop, done = fn.append_block("step"), fn.append_block("stepped")
        b.cbranch(b.icmp("slt", first, last), loop, done)
        b.position_at_end(loop)
        j = b.phi(T.i64, name="j")
        j.add_incoming(first, head)
        body(b, j)
        nxt = b.add(j, i64(1))
        j.add_incoming(nxt, b.block)
        b.cbranch(b.icmp("slt", nxt, last), loop, done)
        b.position_at_end(done)

    def repeat(self, first: Value, body) -> Value:
        """``j = first; while (body(b, j)) j++;`` (``body`` returns an integer, nonzero to go
        on) emitted at ``self.b``: the number of times ``body`` ran."""
        b, fn = self.b, self.fn
        head = b.block
        loop, done = fn.append_block("step"), fn.append_block("stepped")
        b.br(loop)
        b.position_at_end(loop)
        j = b.phi(T.i64, name="j")
        j.add_incoming(first, head)
        going = body(b, j)
        nxt = b.add(j, i64(1))
        j.add_incoming(nxt, b.block)
        b.cbranch(b.icmp("ne", going, const_int(going.type, 0)), loop, done)
        b.position_at_end(done)
        return b.sub(nxt, first)
