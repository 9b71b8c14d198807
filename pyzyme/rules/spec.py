"""The kinds of row a rule table holds.

One row per LLVM opcode, LLVM intrinsic (by base name: ``llvm.sin`` covers ``llvm.sin.f32`` and
``llvm.sin.v4f64``), C math symbol (every spelling listed: ``sin``, ``sinf``, ``sinl``) or runtime
helper. A row says what the derivative *is*; ``pyzyme.diff`` decides how to emit it for a mode,
a width and the activity of each operand.

- :class:`Partials`: the derivative of the result with respect to each operand, as expressions
  (:mod:`pyzyme.rules.expr`). Forward mode emits ``sum_i partial_i * dot(x_i)`` over the active
  operands; reverse mode emits ``x_i_bar += partial_i * ret_bar``. One row, both modes.
- :class:`Linear`: the operation is linear in its one operand, so the tangent is the same
  operation applied to the operand's tangent (``fpext``, ``bitcast``); the adjoint applies
  ``transpose``.
- :class:`Memory`: the call moves or fills memory (``llvm.memcpy``); the same call is made on the
  shadows.
- :class:`Allocation` and :class:`Mirror`: the call allocates, frees or reference-counts
  memory; shadows get allocations of their own, freed and counted alongside.
- :class:`Inactive`: the result carries no derivative and the call has no effect derivatives
  must mirror (``llvm.assume``, ``llvm.lifetime.start``, ``icmp``).
- :class:`Reduction`: the call folds the lanes of a vector into one scalar
  (``llvm.vector.reduce.fadd``); its derivatives are written per operation
  (:mod:`pyzyme.diff.calls.vector`).
- :class:`Masked`: the call loads or stores the lanes of a vector a mask enables
  (``llvm.masked.load``); the same call is made on the shadows.
- :class:`Blas`: a BLAS or LAPACK call through Numba's helpers; its derivatives are the same
  helpers called again (:mod:`pyzyme.diff.linalg.blas`, :mod:`pyzyme.diff.linalg.nrm2`,
  :mod:`pyzyme.diff.linalg.lapack`, :mod:`pyzyme.diff.linalg.lu`,
  :mod:`pyzyme.diff.linalg.cholesky`, :mod:`pyzyme.diff.linalg.eigh`).
- :class:`Custom`: a user's rule (:mod:`pyzyme.rules.custom`): the derivative is whatever the
  user's own functions compute; ``pyzyme.diff`` calls them in place of the function.
- :class:`ParallelFor`: a parallel loop's launcher (Numba's ``numba_parallel_for``): the
  outlined loop body is differentiated and launched the same way
  (:mod:`pyzyme.diff.parallel`).
- :class:`CheckpointLoop`: a time loop over a step function whose reverse sweep recomputes
  steps from snapshots instead of taping them (:mod:`pyzyme.diff.calls.checkpoint`).
- :class:`FixedPoint`: a fixed-point iteration whose derivatives iterate one step's
  derivative at the state it converged to (:mod:`pyzyme.diff.calls.fixed_point`).
- :class:`GradientLog`: a function of the module the reverse sweep calls with each arithmetic
  result's adjoint (Enzyme's ``enzymeLogGrad`` hook).
- :class:`Mpi`: a call of the MPI library (``MPI_Send``, ``MPI_Allreduce``, ...): its
  derivative is communication of shadows, mirrored (:mod:`pyzyme.diff.calls.mpi`).
- :class:`Registered`: derivatives a C/C++ module registers for one of its functions, Enzyme's
  way (``__enzyme_register_gradient_*``): plain LLVM functions of the same module, called by
  :mod:`pyzyme.diff.calls.registered`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyzyme.rules.expr import Expr

__all__ = ["KINDS", "Row", "Partials", "Linear", "Memory", "Allocation", "Mirror", "Inactive",
           "Reduction", "Masked", "Blas", "Custom", "Registered", "ParallelFor",
           "CheckpointLoop", "GradientLog", "FixedPoint", "Mpi"]

KINDS = ("opcode", "intrinsic", "libm", "runtime", "custom")


@dataclass(frozen=True)
class Row:
    """Common fields: the names the row answers to, and what kind of name they are."""

    names: tuple[str, ...]
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"row {self.names}: kind must be one of {KINDS}, not {self.kind!r}")
        if not self.names:
            raise ValueError("a row needs at least one name")


@dataclass(frozen=True)
class Partials(Row):
    """``partials[i]`` is d(result)/d(operand i), or None where operand i carries no derivative
    (an integer exponent, a rounding mode). ``result_field`` is the index of the differentiable
    field when the result is a struct (``llvm.frexp`` returns ``{ double, i32 }``: field 0).
    ``note`` records the choice made where the derivative is not defined (ties, kinks, zeros).
    ``costly``: the function is a library call (an exponential, a logarithm, a trigonometric
    function), tens of instructions where a tape entry is a store and a load, so a reverse
    sweep inside a loop keeps its result instead of calling it again.
    """

    partials: tuple[Expr | None, ...] = ()
    result_field: int | None = None
    note: str = ""
    costly: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        for i, p in enumerate(self.partials):
            if p is None:
                continue
            for place in p.placeholders():
                if place != "ret" and not 0 <= place < len(self.partials):
                    raise ValueError(f"row {self.names[0]}: partial {i} reads operand {place}, "
                                     f"but the row has {len(self.partials)} operands")
        if all(p is None for p in self.partials):
            raise ValueError(f"row {self.names[0]}: no operand has a partial; use Inactive")

    @property
    def nargs(self) -> int:
        return len(self.partials)


@dataclass(frozen=True)
class Linear(Row):
    """Linear in operand 0: tangent = same op on the tangent; adjoint = ``transpose`` op."""

    transpose: str = ""


@dataclass(frozen=True)
class Memory(Row):
    """A memory intrinsic whose effect is mirrored on shadows. ``pointer_args`` are the
    positions of its pointer operands (destination first)."""

    pointer_args: tuple[int, ...] = field(default=())


@dataclass(frozen=True)
class Allocation(Row):
    """Allocates memory; the shadow gets an allocation of its own, of the same size, zeroed.

    The byte size is the product of the operands at ``size_args``. When the result is a
    handle rather than the memory itself (Numba's ``MemInfo``), the data pointer is the pointer
    stored at byte ``data_offset`` of it. The result is fresh memory: it aliases nothing that
    existed before the call (:mod:`pyzyme.analysis.overwrite` reads that here). ``zeroed``:
    what the call returns holds nothing yet (``calloc``'s zeroed block, a fresh context of
    global shadows), so the shadow, another call, is not zeroed again.
    """

    size_args: tuple[int, ...] = ()
    data_offset: int | None = None
    #: The handle's data block is allocated apart and a resize may move it (Numba's lists:
    #: a :class:`Mirror` row with ``resizes`` gives it a new one).
    resizable: bool = False
    zeroed: bool = False


@dataclass(frozen=True)
class Mirror(Row):
    """Frees or reference-counts memory: the same call is made on the shadows of the operands at
    ``pointer_args``, so a shadow lives exactly as long as its primal."""

    pointer_args: tuple[int, ...] = (0,)
    #: The result is memory of its own even when the operand has no shadow (``realloc`` of a
    #: null pointer allocates): it then gets a shadow from the same call on a null shadow.
    allocates: bool = False
    #: For a call that moves the data block of a handle to a block of another size, keeping
    #: its contents (Numba's ``NRT_MemInfo_varsize_realloc``, as a list grows): the byte
    #: offsets, in the handle, of the data pointer and of the block's size. Reverse mode
    #: reads them to keep the shadow's old block for the reverse sweep.
    data_offset: int | None = None
    size_offset: int | None = None
    #: The call frees, or may free (a reference count falling to zero), the memory at
    #: ``pointer_args[0]`` (``free``, ``NRT_decref``, a C deallocator a module declares):
    #: reverse mode defers it, on the primal and its shadow, until its reverse sweep is done
    #: with them.
    releases: bool = False
    #: The call only counts references: it writes nothing but the count in the handle, and the
    #: memory stays while the caller holds a reference (it does, on every array it passes).
    refcount: bool = False
    #: A null pointer is accepted and then nothing is done (``free(NULL)``): a shadow that is
    #: its primal can be passed as null so that the primal is not counted or freed twice.
    null_ok: bool = False
    #: The call gives the handle at ``pointer_args[0]`` a new data block (returned), freeing
    #: the old one: whatever was read from the old block is gone.
    resizes: bool = False


@dataclass(frozen=True)
class Inactive(Row):
    """No derivative, by rule; ``reason`` says why (shown by ``pyzyme explain``). ``writes``
    are the arguments (pointers) the call may write through, where the row says (None: any
    it is handed); the analyses of overwritten memory read it."""

    reason: str = ""
    writes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Reduction(Row):
    """Folds the lanes of the vector operand at ``vector`` into one scalar with ``op``:
    ``"fadd"`` or ``"fmul"`` (in lane order, after the scalar operand at ``start``, unless
    fast-math flags allow any order), ``"fmax"``/``"fmin"`` (NaN lanes ignored, as ``maxnum``)
    or ``"fmaximum"``/``"fminimum"`` (NaN if any lane is). ``note`` records the choice made
    where the derivative is not defined (ties)."""

    op: str = ""
    vector: int = 0
    start: int | None = None
    note: str = ""


@dataclass(frozen=True)
class Masked(Row):
    """Loads (``value`` None) or stores the lanes of a vector that the ``<N x i1>`` operand at
    ``mask`` enables, at the address at ``pointer`` (consecutive lanes from one address) or at
    the vector of addresses there (gather, scatter). A load's disabled lanes are those of the
    operand at ``passthru``; a store's value is the operand at ``value``."""

    pointer: int = 0
    mask: int = 1
    value: int | None = None
    passthru: int | None = None


@dataclass(frozen=True)
class Blas(Row):
    """``op`` says which of Numba's helpers this is: ``"dot"``, ``"gemv"``, ``"gemm"``,
    ``"nrm2"`` (BLAS), ``"gesv"`` (LAPACK's solve), ``"getrf"`` (LU factorization), ``"getri"``
    (the inverse from LU factors), ``"potrf"`` (Cholesky factorization) or ``"evd"`` (symmetric
    eigendecomposition). ``writes`` are the arguments (pointers) the helper writes, and it writes
    nothing else (numba/_lapack.c); ``operands`` are the pointers to the two operands of a
    bilinear one (dot, gemv, gemm), whose result is ``writes[0]``. The C frontend's forward
    mode adds ``"cblas_dot"``, ``"cblas_gemv"`` and ``"cblas_gemm"`` for a C program's CBLAS
    routines (:mod:`pyzyme.frontends.c.cblas_rows`; dot returns its result)."""

    op: str = ""
    writes: tuple[int, ...] = ()
    operands: tuple[int, ...] = ()


@dataclass(frozen=True)
class Custom(Row):
    """A function the user wrote derivative rules for (``kind="custom"``).

    ``rules`` compiles the user's rule functions for the activities of one call site and says
    where each argument goes among their native parameters; see
    :class:`pyzyme.api.custom_rules.CompiledRules` for what the generators ask of it.
    """

    rules: object = None


@dataclass(frozen=True)
class Registered(Row):
    """A function whose derivatives are functions of the module itself (``kind="custom"``),
    named here: ``forward`` (Enzyme's ``__enzyme_register_derivative_*``), ``augmented`` and
    ``reverse`` (``__enzyme_register_gradient_*``); None where none is registered (the
    function's own body is then differentiated in that mode, if it has one). ``source`` names
    the registering global(s), for messages. The calling conventions are Enzyme's; see
    :mod:`pyzyme.diff.calls.registered`.
    """

    forward: str | None = None
    augmented: str | None = None
    reverse: str | None = None
    source: str = ""


@dataclass(frozen=True)
class ParallelFor(Row):
    """A launcher of a parallel loop whose body is a function of the module, called by worker
    threads on slices of an outer dimension, as a NumPy generalized ufunc's loop is
    (``void body(char **args, size_t *dims, size_t *steps, void *data)``): each call gets
    ``dims[0]`` rows, ``args[k]`` advanced by ``steps[k]`` per row. The other fields are the
    positions of the launcher's arguments: the body, ``args``, ``dims``, ``steps``, ``data``
    (passed to every call as it is), the number of core dimensions (``dims`` holds one more;
    ``steps`` holds one per argument, then one per core dimension), the number of arguments
    and of threads. ``thread_id`` names the function a body calls for the index of the thread
    running it (Numba's reductions keep one slot per thread). ``schedule`` is the slot of
    ``args`` holding the schedule (a row's first and last loop index), the one argument
    advanced per row: the others are passed whole to every row (their outer step is 0).
    ``schedulers`` name the functions that fill a schedule (``(ndim, starts, stops, ...,
    schedule, ...)``: the loop's first indices at ``scheduler_starts``, the schedule at
    ``scheduler_schedule``); ``unsigned_schedule`` is the one whose indices are unsigned."""

    body: int = 0
    args: int = 1
    dims: int = 2
    steps: int = 3
    data: int = 4
    inner_ndim: int = 5
    array_count: int = 6
    threads: int = 7
    thread_id: str = ""
    schedule: int = 0
    schedulers: tuple[str, ...] = ()
    scheduler_starts: int = 1
    scheduler_schedule: int = 4
    unsigned_schedule: str = ""


@dataclass(frozen=True)
class CheckpointLoop(Row):
    """A checkpointed loop: ``for j in [0, n): step(start + j, args...)``, the state it carries
    from step to step being the memory of its regions. The fields are the positions of the
    call's operands: the step function, ``start``, ``n``, the scheme (Enzyme's
    ``EnzymeCheckpointScheme``: ``init``, ``next_action``, ``store``, ``restore``,
    ``finalize``) and the data its ``init`` takes, the number of regions, which follow as
    ``(pointer, bytes)`` pairs; the step's arguments come last. Its reverse sweep runs the
    scheme's actions (Revolve's protocol), differentiating one step at a time.

    With ``until_false`` the loop is ``i = 0; while (step(i++, args...));``: ``start`` is 0,
    ``n`` -1 (the scheme's ``init`` is told the number of steps is unknown, its
    ``set_nsteps`` the number once the forward sweep sees a step return false)."""

    step: int = 0
    start: int = 1
    count: int = 2
    scheme: int = 3
    data: int = 4
    regions: int = 5
    until_false: bool = False

    def region_pairs(self, inst) -> list:
        """The ``(pointer, bytes)`` operands of call ``inst``."""
        k = int(inst.args[self.regions].value)
        first = self.regions + 1
        return [(inst.args[first + 2 * r], inst.args[first + 2 * r + 1]) for r in range(k)]

    def step_args(self, inst) -> list:
        """The operands of call ``inst`` passed to the step after its index."""
        return list(inst.args[self.regions + 1 + 2 * int(inst.args[self.regions].value):])


@dataclass(frozen=True)
class FixedPoint(Row):
    """A fixed-point iteration: ``i = 0; while (step(i++, args...));``. The fields are the
    positions of the call's operands: the step function; the reduction (a double), the
    iteration limit (an i64, 0 for none) and the control function (null for none) that stop
    the derivative's iteration; the number of states, which follow as ``(pointer, bytes,
    element bytes)`` triples (the memory the iteration converges, whose derivative is
    iterated); the number of regions, which follow as ``(pointer, bytes)`` pairs (other memory
    the step reads that later code may overwrite). The step's arguments come last."""

    step: int = 0
    reduction: int = 1
    max_iters: int = 2
    control: int = 3
    states: int = 4
    regions: int = 5

    def _counts(self, inst) -> tuple[int, int]:
        return int(inst.args[self.states].value), int(inst.args[self.regions].value)

    def state_triples(self, inst) -> list:
        """The ``(pointer, bytes, element bytes)`` operands of call ``inst``."""
        k, _ = self._counts(inst)
        first = self.regions + 1
        return [tuple(inst.args[first + 3 * s:first + 3 * s + 3]) for s in range(k)]

    def region_pairs(self, inst) -> list:
        """The ``(pointer, bytes)`` operands of call ``inst``."""
        k, r = self._counts(inst)
        first = self.regions + 1 + 3 * k
        return [tuple(inst.args[first + 2 * j:first + 2 * j + 2]) for j in range(r)]

    def step_args(self, inst) -> list:
        """The operands of call ``inst`` passed to the step after its index."""
        k, r = self._counts(inst)
        return list(inst.args[self.regions + 1 + 3 * k + 2 * r:])


@dataclass(frozen=True)
class GradientLog(Row):
    """A function of the module (``names[0]``) that the reverse sweep calls with the adjoint
    of each floating-point result a :class:`Partials` row differentiates, as Enzyme calls a
    program's ``enzymeLogGrad``: ``void hook(double adjoint, const char *opcode, const char
    *callee, const char *module, const char *function, unsigned block, unsigned index)``."""


@dataclass(frozen=True)
class Mpi(Row):
    """A call of the MPI library whose derivative is more communication, of the shadows
    (:mod:`pyzyme.diff.calls.mpi`). ``op`` names the operation (``"send"``, ``"recv"``,
    ``"isend"``, ``"irecv"``, ``"wait"``, ``"waitall"``, ``"test"``, ``"allreduce"``,
    ``"reduce"``, ``"bcast"``, ``"scatter"``, ``"gather"``, ``"allgather"``, or
    ``"unsupported"``: a call pyzyme names in its error). The other fields are the positions
    of the call's arguments (None: the call has none): the buffer sent (``buffer``) and the one
    received into (``output``; the same for ``bcast``), the element count and datatype of
    each, the peer (destination, source or root), tag, communicator, request, and the
    reduction (``MPI_Op``). ``writes``: the pointers the call writes through (buffers,
    requests, statuses, flags), and nothing else."""

    op: str = ""
    buffer: int | None = None
    output: int | None = None
    count: int | None = None
    datatype: int | None = None
    out_count: int | None = None
    out_datatype: int | None = None
    peer: int | None = None
    tag: int | None = None
    comm: int | None = None
    request: int | None = None
    reduction: int | None = None
    writes: tuple[int, ...] = ()
