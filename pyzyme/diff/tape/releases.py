"""Releases reverse mode defers: calls that free or dereference memory (``NRT_decref``,
``free``, a user rule's arrays, copies BLAS rules keep) are not made in the forward sweep,
since the reverse sweep may still read the memory or accumulate into its shadow. They are
recorded in a list on the tape, in order, and made (on primals, and on shadows where there are
any) when the reverse sweep is done, or where the forward sweep returns an error, or where a
split pair's tape is discarded.
"""

from __future__ import annotations

from pyzyme.diff.memory_calls import with_args
from pyzyme.diff.tape.cache import STACK, append_function
from pyzyme.diff.tape.pool import tape_free
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int, const_null

__all__ = ["Releases"]

# The deferred-release list is a tape list (STACK-shaped), each entry { tag, primal, shadow }.
_LIST = STACK
_ENTRY = T.StructType([T.i64, T.ptr, T.ptr])
_DEFER = "pyzyme.defer_release"


class Releases:
    """The releases one reverse-mode derivative defers.

    Parameters
    ----------
    tape
        The derivative's :class:`~pyzyme.diff.tape.cache.Tape` (the list is a slot of it).
    module
        The module the derivative is generated in.
    owner
        The name of the derivative's reverse function (the function making the releases is
        named after it).
    """

    def __init__(self, tape, module, owner: str) -> None:
        self.tape, self.module, self.owner = tape, module, owner
        #: The deferred-release list (a Slot of the tape), once anything is deferred.
        self.list = None
        self._calls: list = []       # one call per tag: its callee and calling convention
        self._runner = None          # the function making the releases, once made

    def defer(self, b: IRBuilder, call: I.Call, primal, shadow) -> None:
        """At forward-sweep builder ``b``: record ``call`` (a release of one pointer) on
        ``primal``, and on ``shadow`` when that is not null, to be made when the reverse
        sweep is done."""
        fnty = call.function_type
        if list(fnty.params) != [T.ptr] or fnty.ret != T.void:
            raise UnsupportedError(f"cannot defer {call.called_function.ref} of type {fnty}")
        if self.list is None:
            self.list = self.tape.slot(_LIST, "releases")
        key = (call.called_function, call.cconv)
        tags = [(c.called_function, c.cconv) for c in self._calls]
        if key not in tags:
            self._calls.append(call)
            tags.append(key)
        tag = const_int(T.i64, tags.index(key))
        defer = append_function(self.module, _DEFER, [T.i64, T.ptr, T.ptr])
        b.call(defer, [self.list.fwd, tag, primal, shadow])

    def run(self, at: IRBuilder, forward: bool = False) -> None:
        """At ``at``: make the recorded releases in order, then free the list (at the end of
        the reverse sweep, or, with ``forward``, where the forward sweep returns an error);
        nothing when nothing was deferred."""
        if self.list is None:
            return
        lst = self.list.fwd if forward else self.list.rev
        at.call(self._releaser(), [lst])

    def _releaser(self):
        """``void pyzyme.releases.<owner>(ptr list)``, made once."""
        if self._runner is not None:
            return self._runner
        module = self.module
        name = module.unique_global_name(f"pyzyme.releases.{self.owner}")
        fn = self._runner = module.add_function(name, T.FunctionType(T.void, [T.ptr]),
                                                prefix="internal")
        lst = fn.args[0]
        lst.name = "list"
        entry, head, body, done = (fn.append_block(n) for n in ("entry", "loop", "body", "done"))
        b = IRBuilder(entry)
        z64 = const_int(T.i64, 0)
        buf = b.load(T.ptr, b.gep(_LIST, lst, [z64, const_int(T.i32, 0)]), name="entries")
        count = b.load(T.i64, b.gep(_LIST, lst, [z64, const_int(T.i32, 1)]), name="count")
        b.br(head)
        b.position_at_end(head)
        i = b.phi(T.i64, name="i")
        i.add_incoming(z64, entry)
        b.cbranch(b.icmp("ult", i, count), body, done)
        b.position_at_end(body)
        slot = b.gep(_ENTRY, buf, [i])
        tag = b.load(T.i64, b.gep(_ENTRY, slot, [z64, const_int(T.i32, 0)]), name="tag")
        primal = b.load(T.ptr, b.gep(_ENTRY, slot, [z64, const_int(T.i32, 1)]), name="primal")
        shadow = b.load(T.ptr, b.gep(_ENTRY, slot, [z64, const_int(T.i32, 2)]), name="shadow")
        nxt = fn.append_block("next")
        cases = []
        for k, call in enumerate(self._calls):
            case = fn.append_block(f"release.{k}")
            cb = IRBuilder(case)
            cb.insert(_release_call(call, primal))
            has_shadow = cb.icmp("ne", shadow, const_null(T.ptr))
            also = fn.append_block(f"release.{k}.shadow")
            cb.cbranch(has_shadow, also, nxt)
            ab = IRBuilder(also)
            ab.insert(_release_call(call, shadow))
            ab.br(nxt)
            cases.append((const_int(T.i64, k), case))
        b.switch(tag, nxt, cases)
        b.position_at_end(nxt)
        after = b.add(i, const_int(T.i64, 1))
        i.add_incoming(after, nxt)
        b.br(head)
        b.position_at_end(done)
        b.call(tape_free(module), [buf])  # the list grew in the tape pool
        b.ret_void()
        return fn


def _release_call(call: I.Call, pointer) -> I.Call:
    """``call`` (its callee, calling convention and attributes) made on ``pointer``."""
    clone = with_args(call, [pointer])
    clone.tail = ""
    return clone
