"""Releases reverse mode defers: calls that free or dereference memory (``NRT_decref``,
``free``, a user rule's arrays, copies BLAS rules keep) are not made in the forward sweep,
since the reverse sweep may still read the memory or accumulate into its shadow. They are
recorded in a list on the tape, in order, and made (on primals, and on shadows where there are
any) when the reverse sweep is done, or where the forward sweep returns an error, or where a
split pair's tape is discarded.

A callee's split pair (a *nested* one) records its releases in its caller's list, a last
parameter of its augmented primal, and makes none itself, so they wait for the outermost reverse
sweep: memory a callee frees may be its caller's (a block moved to a bigger one, as
``std::vector`` grows, or a Numba list appended to), whose shadow the caller's reverse sweep,
which runs after the callee's, still reads. An entry names its release by a tag: an index in the
list owner's own table of release calls, or, for entries a callee adds, the address of the
function that makes it.
"""

from __future__ import annotations

from pyzyme import naming
from pyzyme.diff.memory_calls import with_args
from pyzyme.diff.tape.cache import STACK, Slot, append_function
from pyzyme.diff.tape.pool import tape_free
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.values import const_int, const_null

__all__ = ["Releases"]

# The deferred-release list is a tape list (STACK-shaped), each entry { tag, primal, shadow },
# all three pointers: a block of pointers only is one type analysis can follow when a later
# round (a third derivative) differentiates its growth as a copy.
_LIST = STACK
_ENTRY = T.StructType([T.ptr, T.ptr, T.ptr])
_DEFER = naming.DEFER_RELEASE


class Releases:
    """The releases one reverse-mode derivative defers.

    Parameters
    ----------
    tape
        The derivative's :class:`~pyzyme.diff.tape.cache.TapeCache` (the list is a slot of it).
    module
        The module the derivative is generated in.
    owner
        The name of the derivative's reverse function (the function making the releases is
        named after it).
    callers
        For a nested split pair, its augmented primal's parameter holding the caller's list:
        releases are deferred there, tagged by address, and this derivative makes none.
    by_address
        The functions releases are deferred to by address, shared by every derivative the
        same generator makes: a list's owner calls each directly where its tag says
        (forward mode over the reverse sweep, ``hvp``, follows no function pointer).
    """

    def __init__(self, tape, module, owner: str, callers=None,
                 by_address: set | None = None) -> None:
        self.by_address = by_address if by_address is not None else set()
        self.tape, self.module, self.owner = tape, module, owner
        #: The deferred-release list (a Slot of the tape, or the caller's), once anything is
        #: deferred.
        self.list = None if callers is None else Slot("releases", _LIST, callers, None)
        self.nested = callers is not None
        self._calls: list = []       # one call per tag: its callee and calling convention
        self._foreign = False        # callees' entries (tagged by address) are in the list
        self._runner = None          # the function making the releases, once made

    @property
    def owned(self):
        """The list this derivative makes the releases of (a Slot of its tape), or None: none
        deferred, or a nested pair's (its caller's)."""
        return None if self.nested else self.list

    def defer(self, b: IRBuilder, call: I.Call, primal, shadow) -> None:
        """At forward-sweep builder ``b``: record ``call`` (a release of one pointer) on
        ``primal``, and on ``shadow`` when that is not null, to be made when the reverse
        sweep is done."""
        fnty = call.function_type
        if list(fnty.params) != [T.ptr] or fnty.ret != T.void:
            raise UnsupportedError(f"cannot defer {call.called_function.ref} of type {fnty}")
        if self.nested:
            # The caller's list: its releaser knows the function by its address.
            release = self._by_address_function(call)
            self.by_address.add(release)
            tag = b.ptrtoint(release, T.i64)
        else:
            key = (call.called_function, call.cconv)
            tags = [(c.called_function, c.cconv) for c in self._calls]
            if key not in tags:
                self._calls.append(call)
                tags.append(key)
            tag = const_int(T.i64, tags.index(key))
        defer = append_function(self.module, _DEFER, [T.ptr, T.ptr, T.ptr])
        b.call(defer, [self._list().fwd, b.inttoptr(tag, T.ptr), primal, shadow])

    def pass_on(self):
        """The forward sweep's pointer to the list, for a callee's augmented primal to defer
        its releases into (entries tagged by address, which :meth:`run` then makes too)."""
        self._foreign = True
        return self._list().fwd

    def _list(self) -> Slot:
        if self.list is None:
            self.list = self.tape.slot(_LIST, "releases")
        return self.list

    def _by_address_function(self, call: I.Call):
        """The function making release ``call`` with the C calling convention, to be called
        by its address: the callee itself, or a helper calling it with the convention ``call``
        uses."""
        callee = call.called_function
        if not call.cconv:
            return callee
        module = self.module
        name = f"{callee.name}.pz{call.cconv.replace(' ', '')}"
        fn = module.get_function(name)
        if fn is None:
            fn = module.add_function(name, T.FunctionType(T.void, [T.ptr]), prefix="internal")
            b = IRBuilder(fn.append_block("entry"))
            b.insert(_release_call(call, fn.args[0]))
            b.ret_void()
        return fn

    def run(self, at: IRBuilder, forward: bool = False) -> None:
        """At ``at``: make the recorded releases in order, then free the list (at the end of
        the reverse sweep, or, with ``forward``, where the forward sweep returns an error);
        nothing when nothing was deferred, or for a nested pair (its caller makes them)."""
        if self.owned is None:
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
        tag = b.ptrtoint(b.load(T.ptr, b.gep(_ENTRY, slot, [z64, const_int(T.i32, 0)])), T.i64,
                         name="tag")
        primal = b.load(T.ptr, b.gep(_ENTRY, slot, [z64, const_int(T.i32, 1)]), name="primal")
        shadow = b.load(T.ptr, b.gep(_ENTRY, slot, [z64, const_int(T.i32, 2)]), name="shadow")
        nxt = fn.append_block("next")
        cases = []
        for k, call in enumerate(self._calls):
            case = fn.append_block(f"release.{k}")
            _release_pair(fn, IRBuilder(case),
                          lambda b, p, call=call: b.insert(_release_call(call, p)),
                          primal, shadow, nxt)
            cases.append((const_int(T.i64, k), case))
        default = nxt
        if self._foreign:
            # Entries of nested callees: the tag is the address of the release function.
            default = fn.append_block("release.by.address")
            db = IRBuilder(default)
            for known in sorted(self.by_address, key=lambda f: f.name):
                direct, other = (fn.append_block(f"release.{known.name}"),
                                 fn.append_block("release.by.address"))
                db.cbranch(db.icmp("eq", tag, db.ptrtoint(known, T.i64)), direct, other)
                _release_pair(fn, IRBuilder(direct),
                              lambda b, p, known=known: b.call(known, [p]), primal, shadow, nxt)
                db.position_at_end(other)
            # Every nested pair this list can reach was made by the same generator, which
            # knows its release functions: another tag cannot be (trap rather than call an
            # address forward mode over this function could not follow).
            db.call(module.declare("llvm.trap", T.FunctionType(T.void, [])), [])
            db.unreachable()
        b.switch(tag, default, cases)
        b.position_at_end(nxt)
        after = b.add(i, const_int(T.i64, 1))
        i.add_incoming(after, nxt)
        b.br(head)
        b.position_at_end(done)
        b.call(tape_free(module), [buf])  # the list grew in the tape pool
        b.ret_void()
        return fn


def _release_pair(fn, b: IRBuilder, release, primal, shadow, nxt) -> None:
    """At ``b``: ``release(b, primal)``, then ``release`` of ``shadow`` unless it is null;
    on to ``nxt``."""
    release(b, primal)
    also = IRBuilder(fn.append_block("release.shadow"))
    b.cbranch(b.icmp("ne", shadow, const_null(T.ptr)), also.block, nxt)
    release(also, shadow)
    also.br(nxt)


def _release_call(call: I.Call, pointer) -> I.Call:
    """``call`` (its callee, calling convention and attributes) made on ``pointer``."""
    clone = with_args(call, [pointer])
    clone.tail = ""
    return clone
