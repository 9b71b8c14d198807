"""What a user wrote, for the runtime symbols Numba compiles it to: the words of error messages.

A call pyzyme cannot differentiate is a call to a symbol (``@numba_ez_gesdd``,
``@PyFloat_FromDouble``), but the user wrote ``np.linalg.svd`` or ``print(x)``. Each row here
names the symbols one construct compiles to, what the user wrote (``uses``: each way the
symbols arise, found in the frontend's typed code by their ``source``) and the one thing to do
about it. The rules table says what has a derivative; this table only says what things are
called, so a row here does not stop a rule from applying: it is read when no rule does (and
for complex LAPACK calls, whose real rules refuse them).

Numba's BLAS and LAPACK helpers (numba/_lapack.c, called from numba/np/linalg.py) and its
parallel launcher are named here; so is every symbol of the CPython C API (``Py*``, ``_Py*``)
and Numba's helpers that box values for it, which ``print`` and ``numba.objmode`` blocks call.

Examples
--------
>>> svd = construct_of("numba_ez_gesdd")
>>> [use.what for use in svd.uses][:2]
['np.linalg.svd', 'np.linalg.pinv']
>>> construct_of("PyFloat_FromDouble").what
'a call into the Python interpreter'
>>> construct_of("sin") is None
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

__all__ = ["Use", "Construct", "CONSTRUCTS", "construct_of", "linalg_functions",
           "unknown_call_message"]


@dataclass(frozen=True)
class Use:
    """One way a user's code compiles to a construct's symbols.

    ``source`` says how to find it in the frontend's typed code: a function's dotted name
    (``"np.linalg.svd"``), or ``"print"``, ``"objmode"`` (a ``with numba.objmode`` block),
    ``"parfor"`` (a parallel loop). ``what`` is how the user wrote it; ``advice`` the one
    thing to do when it cannot be differentiated.
    """

    source: str
    what: str
    advice: str


@dataclass(frozen=True)
class Construct:
    """Symbols (exact names, or ``fnmatch`` patterns such as ``Py*``) and what they are.

    ``what`` names the construct when no use is found (the call comes from code the frontend
    cannot read back); ``advice`` is then the thing to do. ``problem`` says why a call of it
    with a value that carries a derivative is refused (``{symbol}`` stands for the callee).
    ``supported`` says whether pyzyme has derivatives for it (for real arguments): rows of
    supported helpers are here so that what they refuse (complex kinds) is named as the user
    wrote it.
    """

    names: tuple[str, ...]
    what: str
    problem: str
    advice: str
    uses: tuple[Use, ...] = ()
    supported: bool = False

    def matches(self, symbol: str) -> bool:
        return any(fnmatchcase(symbol, name) for name in self.names)


_NO_RULE = ("wrap the call in an @njit function and give that function derivative rules "
            "(pyzyme.rules.forward, augmented_primal, reverse)")
_REAL = ("differentiate a real formulation (real and imaginary parts as separate float "
         "arrays)")


_WRITTEN = {"operator.matmul": "the @ operator"}


def _linalg(names: tuple[str, ...], helper: str, functions: str,
            supported: bool = False) -> Construct:
    """A row for a Numba BLAS/LAPACK helper called by the ``np`` functions ``functions``
    (space-separated dotted names)."""
    advice = _REAL if supported else _NO_RULE
    uses = tuple(Use(name, _WRITTEN.get(name, name), advice) for name in functions.split())
    what = f"{helper} ({', '.join(use.what for use in uses)})"
    problem = f"has no derivative in pyzyme yet: it calls {helper} through @{{symbol}}"
    return Construct(names, what, problem, advice, uses, supported)


_PARALLEL_ADVICE = ("write the loop with range instead of numba.prange, or compile the function "
                    "with parallel=False")
_PRINT_ADVICE = ("remove the print from the function being differentiated (a print inside an "
                 "@njit helper marked pyzyme.rules.inactive may stay: its calls are not "
                 "differentiated)")
_OBJMODE_ADVICE = ("move the block out of the function being differentiated: compute its "
                   "result before the call and pass it in as Const")

CONSTRUCTS: tuple[Construct, ...] = (
    # A parfor is a call to Numba's launcher with the outlined loop body
    # (numba/parfors/parfor_lowering.py); its rule (rules.runtime's ParallelFor row) has
    # derivatives, so this row names the loop only where a rule table lacks that row.
    Construct(("numba_parallel_for",), "a prange / parallel=True loop (a parfor)",
              "cannot be differentiated with this rule table (the loop runs through "
              "@{symbol})",
              _PARALLEL_ADVICE,
              (Use("parfor", "a prange / parallel=True loop (a parfor)", _PARALLEL_ADVICE),)),
    Construct(("Py*", "_Py*", "NRT_adapt_*", "NRT_meminfo_as_pyobject",
               "NRT_meminfo_from_pyobject", "numba_gil_*", "numba_unpickle",
               "numba_recreate_record", "numba_ndarray_new"),
              "a call into the Python interpreter",
              "passes a value that carries a derivative to the Python interpreter "
              "(@{symbol}), where no derivative can follow it",
              "move the print, numba.objmode block or other object-mode code out of the "
              "function being differentiated",
              (Use("print", "print(...)", _PRINT_ADVICE),
               Use("objmode", "a `with numba.objmode(...)` block", _OBJMODE_ADVICE))),
    # numba.typed.List and Dict keep their items in C code (numba/cext/listobject.c,
    # dictobject.c), called through these helpers; Python lists ([]) are NRT memory pyzyme
    # differentiates.
    Construct(("numba_list_*",), "a numba.typed.List method (its items live in C code)",
              "cannot be differentiated: the items of a numba.typed.List live in C code "
              "(@{symbol}), where no derivative can follow them",
              "build a Python list ([], append) in the function instead of a "
              "numba.typed.List"),
    Construct(("numba_dict_*",), "a numba.typed.Dict method (its items live in C code)",
              "cannot be differentiated: the items of a numba.typed.Dict live in C code "
              "(@{symbol}), where no derivative can follow them",
              "keep the values that carry derivatives out of the numba.typed.Dict"),
    # numba/np/linalg.py: which np functions call which helper.
    _linalg(("numba_ez_gesdd",), "LAPACK gesdd (SVD)",
            "np.linalg.svd np.linalg.pinv np.linalg.matrix_rank np.linalg.cond np.linalg.norm"),
    _linalg(("numba_ez_rgeev", "numba_ez_cgeev"), "LAPACK geev (eigenproblem)",
            "np.linalg.eig np.linalg.eigvals"),
    _linalg(("numba_ez_geqrf", "numba_ez_xxgqr"), "LAPACK geqrf and orgqr (QR)",
            "np.linalg.qr"),
    _linalg(("numba_ez_gelsd",), "LAPACK gelsd (least squares)", "np.linalg.lstsq"),
    _linalg(("numba_xxdot",), "BLAS dot", "np.dot np.vdot operator.matmul", supported=True),
    _linalg(("numba_xxgemv", "numba_xxgemm"), "BLAS gemv and gemm",
            "np.dot operator.matmul", supported=True),
    _linalg(("numba_xxnrm2",), "BLAS nrm2", "np.linalg.norm", supported=True),
    _linalg(("numba_xgesv",), "LAPACK gesv (solve)", "np.linalg.solve", supported=True),
    _linalg(("numba_xxgetrf",), "LAPACK getrf (LU)",
            "np.linalg.det np.linalg.slogdet np.linalg.inv", supported=True),
    _linalg(("numba_ez_xxgetri",), "LAPACK getri (inverse)", "np.linalg.inv",
            supported=True),
    _linalg(("numba_xxpotrf",), "LAPACK potrf (Cholesky)",
            "np.linalg.cholesky", supported=True),
    _linalg(("numba_ez_xxxevd",), "LAPACK syevd (symmetric eigenproblem)",
            "np.linalg.eigh np.linalg.eigvalsh", supported=True),
)


_MPI_ADVICE = ("use the numba-mpi calls pyzyme differentiates (pyzyme.rules.mpi): send/recv "
               "with a source and tag, isend/irecv with wait/waitall/test, allreduce, reduce, "
               "bcast, scatter, gather, allgather")


def _mpi(symbol: str, *functions: str) -> Construct:
    """The MPI function ``symbol`` as numba-mpi's ``functions`` (``module.name``, below
    ``numba_mpi.api``) call it."""
    uses = tuple(Use(f"numba_mpi.api.{f}", f"numba_mpi.{f.split('.')[-1]}", _MPI_ADVICE)
                 for f in functions)
    what = f"{symbol} ({', '.join(u.what for u in uses)})"
    return Construct((symbol,), what, f"has no derivative in pyzyme: it calls @{{symbol}}",
                     _MPI_ADVICE, uses, supported=True)


# numba-mpi's functions (numba_mpi/api/*.py) and the MPI functions they call through ctypes
# (named by symbol by pyzyme.frontends.numba.foreign_calls).
CONSTRUCTS += (
    _mpi("MPI_Send", "send.send"), _mpi("MPI_Recv", "recv.recv"),
    _mpi("MPI_Isend", "isend.isend"), _mpi("MPI_Irecv", "irecv.irecv"),
    _mpi("MPI_Wait", "requests.wait"),
    _mpi("MPI_Waitall", "requests.waitall", "requests._waitall_array_impl"),
    _mpi("MPI_Test", "requests.test"),
    _mpi("MPI_Waitany", "requests.waitany", "requests._waitany_array_impl"),
    _mpi("MPI_Testall", "requests.testall", "requests._testall_array_impl"),
    _mpi("MPI_Testany", "requests.testany", "requests._testany_array_impl"),
    _mpi("MPI_Allreduce", "allreduce.allreduce"), _mpi("MPI_Reduce", "reduce.reduce"),
    _mpi("MPI_Bcast", "bcast.bcast", "bcast.impl_ndarray"),
    _mpi("MPI_Scatter", "scatter_gather.scatter"), _mpi("MPI_Gather", "scatter_gather.gather"),
    _mpi("MPI_Allgather", "scatter_gather.allgather"),
    _mpi("MPI_Sendrecv", "sendrecv.sendrecv"),
)


def construct_of(symbol: str) -> Construct | None:
    """The row naming ``symbol``, or None (a symbol pyzyme has no user-level name for)."""
    return next((c for c in CONSTRUCTS if c.matches(symbol)), None)


def linalg_functions(symbol: str) -> str:
    """The ``np`` functions that call the BLAS/LAPACK helper ``symbol``, as text (``np.linalg``
    when no row names it).

    >>> linalg_functions("numba_xxgetrf")
    'np.linalg.det, np.linalg.slogdet, np.linalg.inv'
    """
    row = construct_of(symbol)
    return ", ".join(use.what for use in row.uses) if row else "np.linalg"


def unknown_call_message(symbol: str | None, where: str, use: Use | None = None) -> tuple:
    """``(message, hint)`` of the error for a call, in function ``where``, that has no rule and
    an argument carrying a derivative: ``symbol`` is the callee (None: an indirect call),
    ``use`` the user's construct the frontend found it to be (None: not known).

    >>> svd = construct_of("numba_ez_gesdd").uses[0]
    >>> print(unknown_call_message("numba_ez_gesdd", "f", svd)[0])  # doctest: +NORMALIZE_WHITESPACE
    np.linalg.svd in f has no derivative in pyzyme yet: it calls LAPACK gesdd (SVD)
    through @numba_ez_gesdd
    """
    hint = ("give the @njit function that makes the call custom rules (pyzyme.rules.forward, "
            "augmented_primal, reverse), or pass the arguments that reach it as Const")
    if symbol is None:
        return ("no derivative for an indirect call (a function pointer: ctypes, cffi) in "
                f"{where}: it has no body pyzyme can see and no rule, and an argument carries "
                "a derivative", hint)
    row = construct_of(symbol)
    if row is None or row.supported:
        return (f"no derivative for a call to @{symbol} in {where}: it has no body pyzyme can "
                f"see and no rule, and an argument carries a derivative", hint)
    what = use.what if use is not None else row.what
    advice = use.advice if use is not None else row.advice
    return f"{what} in {where} {row.problem.format(symbol=symbol)}", advice
