"""The state of one reverse-mode derivative being generated, and the facts about types and
opcodes the parts of the generator share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.analysis.activity import Activity, contains_type
from pyzyme.diff.tape.cache import Tape
from pyzyme.errors import UnsupportedError
from pyzyme.ir import IRBuilder
from pyzyme.ir import instructions as I
from pyzyme.ir import types as T
from pyzyme.ir.names import readable
from pyzyme.ir.values import Value

__all__ = ["ReverseSignature", "SplitPair"]


@dataclass(frozen=True)
class ReverseSignature:
    """The interface of a reverse-mode derivative.

    ``activities`` has one entry per primal parameter: a ``DUPLICATED`` pointer gets a shadow
    parameter (after all primal parameters, in order) whose memory accumulates adjoints; an
    ``ACTIVE`` float's adjoint is returned. With ``return_active`` the primal's returned float
    is an output: its seed (``dret``) comes after the shadows. With ``status_return`` the
    primal returns an integer status (Numba's convention): a nonzero status skips the reverse
    sweep and is passed on. ``memory_stable`` says nothing writes the memory the parameters
    point to between the sweeps (true of a whole call from Python; not of a callee, whose
    caller runs on before the reverse sweep). ``split`` asks for the augmented primal and
    reverse function instead of the combined one.
    """

    activities: tuple[Activity, ...]
    return_active: bool = False
    status_return: bool = False
    memory_stable: bool = True
    split: bool = False


@dataclass(frozen=True)
class SplitPair:
    """``augmented(params, shadows) -> {primal result?, tape}`` and
    ``reverse(params, shadows, dret?, discard, tape) -> {adjoints}``: with ``discard`` set,
    the reverse function only frees the tape (and what it keeps alive)."""

    augmented: object
    reverse: object
    nbytes: object = None      # i64 (ptr tape): the bytes a tape holds (see Tape)


# Opcodes whose result depends only on operand values: recomputable in the reverse sweep.
_PURE = frozenset({
    "fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "add", "sub", "mul", "udiv", "sdiv",
    "urem", "srem", "shl", "lshr", "ashr", "and", "or", "xor", "icmp", "fcmp", "trunc", "zext",
    "sext", "fptoui", "fptosi", "uitofp", "sitofp", "fpext", "fptrunc", "bitcast",
    "addrspacecast", "ptrtoint", "inttoptr", "select", "getelementptr", "extractvalue",
    "insertvalue", "extractelement", "insertelement", "shufflevector", "freeze"})
# Calls that release memory: deferred until the reverse sweep is done with it.
_RELEASES = frozenset({"NRT_decref", "NRT_MemInfo_call_dtor", "NRT_Free", "free"})
# Structural opcodes whose shadow (of a pointer-carrying result) is the same operation applied
# to the shadows of the operands.
_STRUCTURAL = frozenset({"getelementptr", "bitcast", "addrspacecast", "select", "freeze",
                         "extractvalue", "insertvalue", "extractelement", "insertelement",
                         "shufflevector"})


def _has_pointer(ty: T.Type) -> bool:
    return contains_type(ty, lambda t: t.is_pointer)


def _has_float(ty: T.Type) -> bool:
    return contains_type(ty, lambda t: t.is_float)


def _elements(ty: T.Type) -> list:
    return [ty.element] * ty.count if isinstance(ty, T.ArrayType) else list(ty.elements)


@dataclass(eq=False)
class _State:
    """One derivative being generated."""

    old: object
    sig: ReverseSignature
    fwd: object
    rev: object
    activity: object
    loops: object
    overwrites: object
    tape: Tape
    fb: IRBuilder = field(default_factory=IRBuilder)   # forward sweep
    rb: IRBuilder = field(default_factory=IRBuilder)   # reverse sweep
    values: dict = field(default_factory=dict)         # primal -> forward value
    shadows: dict = field(default_factory=dict)        # primal -> forward shadow
    first: dict = field(default_factory=dict)          # primal block -> its first fwd block
    last: dict = field(default_factory=dict)           # primal block -> fwd block with its exit
    origin: dict = field(default_factory=dict)         # fwd block -> primal block
    origin_load: dict = field(default_factory=dict)    # fwd load -> primal load it repeats
    inductions: dict = field(default_factory=dict)     # fwd phi -> (loop, InductionVariable)
    fidx: dict = field(default_factory=dict)           # loop -> forward iteration number
    rblocks: dict = field(default_factory=dict)        # primal block -> reverse block
    rev_args: dict = field(default_factory=dict)       # fwd argument -> rev argument
    adjoints: dict = field(default_factory=dict)       # primal value -> adjoint slot
    caches: dict = field(default_factory=dict)         # fwd value -> Cache
    memo: dict = field(default_factory=dict)           # fwd value -> its reverse value here
    recomputable: dict = field(default_factory=dict)
    starts: dict = field(default_factory=dict)         # loop -> Cache of its start count
    counted: dict = field(default_factory=dict)        # loop -> reverse slot of its start
    current: object = None                             # primal block being reversed
    recorded: dict = field(default_factory=dict)       # primal block -> Cache of pred index
    callee_tapes: dict = field(default_factory=dict)   # primal call -> (pair, sig, fwd tape)
    rule_calls: dict = field(default_factory=dict)     # primal call -> user rule and its tape
    releases: list = field(default_factory=list)       # release callees, by tag
    release_list: object = None                        # Slot of {ptr, i64, i64}
    ret_slot: object = None
    which_exit: object = None                          # split: Slot of the exit taken
    exits: list = field(default_factory=list)          # split: (fwd block, primal value)
    headers: list = field(default_factory=list)        # (loop, index, first, rest)
    phis: list = field(default_factory=list)
    shadow_args: dict = field(default_factory=dict)    # primal param -> fwd shadow param
    entries: dict = field(default_factory=dict)        # (pred, header) -> fwd edge block
    copies: dict = field(default_factory=dict)         # memcpy -> float type copied, or None
    resizes: dict = field(default_factory=dict)        # block move -> (old, size, new) shadow
    float_pointers: list | None = None                 # pointers of float loads and stores
    written: dict = field(default_factory=dict)        # loop -> pointers written in it
    same_runs: dict = field(default_factory=dict)      # (loop, outer) -> bool
    forwarding: object = None                          # StoreForwarding, lazily
    rev_origin: dict = field(default_factory=dict)     # reverse value -> fwd value it stands for
    error_exits: list = field(default_factory=list)    # fwd blocks returning an error status
    releaser: object = None                            # the function making deferred releases
    doms: object = None
    doomed: frozenset = frozenset()                    # blocks that can only end in an error
    dret: object = None
    runtime: frozenset = frozenset()                   # shadows that may be primals at run time
    nonfinite: object = None                           # NonFinite values (strong zero), or None

    @property
    def where(self) -> str:
        return readable(self.old.name)

    def active(self, value: Value) -> bool:
        return self.activity.is_active(value) and _has_float(value.type)

    def entering(self, loop) -> list[IRBuilder]:
        """A builder before the end of each forward edge block entering ``loop`` from
        outside: where what a run of it starts from is recorded, once per run."""
        builders = []
        for (_, header), edge in self.entries.items():
            if header is loop.header:
                b = IRBuilder()
                b.position_before(edge.terminator)
                builders.append(b)
        return builders


def _incoming(phi: I.Phi, pred) -> Value:
    for value, block in phi.incoming:
        if block is pred:
            return value
    raise UnsupportedError(f"phi {phi.ref} has no value for predecessor {pred.ref}")


def _leaves(ty: T.Type) -> list:
    if isinstance(ty, (T.ArrayType, T.StructType, T.IdentifiedStructType)) and \
            not ty.is_vector:
        return [leaf for e in _elements(ty) for leaf in _leaves(e)]
    return [ty]
