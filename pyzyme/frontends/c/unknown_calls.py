"""The error for a C/C++ call pyzyme has no derivative for, worded for the C frontend.

Deep in differentiation such a call is refused naming the callee and the function making it
(:func:`pyzyme.diff.calls.callee.unknown_callee`), with advice for Numba's users. In a C
program the error is worded again here, once the call site is known: it starts with the
program's lines that make the call, names a BLAS or LAPACK routine as one (Enzyme knows them
by name; pyzyme differentiates BLAS only as Numba calls it, and a C program's BLAS, when it
is not compiled with the program, is a body pyzyme cannot see), names an MPI routine as one
(pyzyme has no rules for MPI: the advice to declare it inactive would drop the derivatives it
carries between ranks), and gives C advice.
"""

from __future__ import annotations

import re

from pyzyme.frontends.c.enzyme_calls import source_location
from pyzyme.ir import instructions as I

__all__ = ["blas_routine", "mpi_routine", "reword_blas_body", "reword_unknown_call"]

# Reference BLAS (levels 1-3) and the LAPACK drivers and computational routines most
# programs call, without the precision letter: d/s (real), z/c (complex).
_BLAS = {
    "asum", "axpy", "copy", "dot", "dotc", "dotu", "nrm2", "rot", "rotg", "rotm", "rotmg",
    "scal", "swap", "gemv", "gbmv", "symv", "sbmv", "spmv", "hemv", "hbmv", "hpmv", "trmv",
    "tbmv", "tpmv", "trsv", "tbsv", "tpsv", "ger", "geru", "gerc", "syr", "syr2", "spr",
    "spr2", "her", "her2", "hpr", "hpr2", "gemm", "symm", "hemm", "syrk", "syr2k", "herk",
    "her2k", "trmm", "trsm",
}
_LAPACK = {
    "gesv", "getrf", "getrs", "getri", "gecon", "potrf", "potrs", "potri", "posv", "trtrs",
    "trtri", "gels", "gelsd", "gelss", "gelsy", "geqrf", "orgqr", "ormqr", "ungqr", "unmqr",
    "gesvd", "gesdd", "geev", "syev", "syevd", "syevr", "heev", "heevd", "sygv", "gehrd",
    "lacpy", "lascl", "laset", "lange", "lansy", "lamch", "sytrf", "sytrs", "hetrf",
}
_ROUTINE = re.compile(r"(?:cblas_|LAPACKE_)?(i?)([sdcz])([a-z0-9]+?)(_?)(?:_work)?$")


def blas_routine(name: str) -> str | None:
    """What ``name`` is when it is a BLAS or LAPACK routine's symbol (the Fortran interface
    ``ddot_``, CBLAS ``cblas_ddot``, LAPACKE ``LAPACKE_dgesv``), or None.

    Examples
    --------
    >>> blas_routine("ddot_"), blas_routine("cblas_dgemv")
    ('BLAS ddot (Fortran interface)', 'BLAS dgemv (CBLAS interface)')
    >>> blas_routine("LAPACKE_dpotrf")
    'LAPACK dpotrf (LAPACKE interface)'
    >>> blas_routine("idamax_"), blas_routine("dgemm"), blas_routine("doto_")
    ('BLAS idamax (Fortran interface)', None, None)
    """
    m = _ROUTINE.match(name)
    if m is None:
        return None
    index, kind, op, underscore = m.groups()
    if name.startswith("cblas_"):
        api = "CBLAS"
    elif name.startswith("LAPACKE_"):
        api = "LAPACKE"
    elif underscore:
        api = "Fortran"
    else:
        return None  # a bare ``dgemm`` is too likely the program's own name
    routine = f"{index}{kind}{op}"
    if index:
        family = "BLAS" if op == "amax" or op == "amin" else None
    else:
        family = "BLAS" if op in _BLAS else "LAPACK" if op in _LAPACK else None
    if family is None or (api == "CBLAS" and family == "LAPACK"):
        return None
    return f"{family} {routine} ({api} interface)"


# MPI's C interface (MPI_Allreduce), its profiling interface (PMPI_Allreduce) and the Fortran
# symbols (mpi_allreduce_, pmpi_allreduce_).
_MPI = re.compile(r"P?MPI_[A-Z][A-Za-z0-9_]*|p?mpi_[a-z0-9_]+_")


def mpi_routine(name: str) -> bool:
    """Whether ``name`` is the symbol of an MPI routine.

    Examples
    --------
    >>> mpi_routine("MPI_Allreduce"), mpi_routine("PMPI_Bcast"), mpi_routine("mpi_send_")
    (True, True, True)
    >>> mpi_routine("mpi_bcast_test"), mpi_routine("MPIX"), mpi_routine("my_MPI_sum")
    (False, False, False)
    """
    return _MPI.fullmatch(name) is not None


def _call_lines(program, function, callee: str) -> list[str]:
    """``file:line`` of each call of ``callee`` in ``function`` and the functions it calls."""
    seen, todo, lines = {function}, [function], []
    while todo:
        for inst in todo.pop().instructions():
            if not isinstance(inst, I.CallBase):
                continue
            called = inst.called_function
            if called is None:
                continue
            if called.name == callee:
                lines.append(source_location(program, inst))
            elif not called.is_declaration and called not in seen:
                seen.add(called)
                todo.append(called)
    return list(dict.fromkeys(lines))


def reword_unknown_call(err, program, site) -> None:
    """Word ``err`` again for a C program when it is the error for a call without a derivative
    (``err.unknown_call``): the lines of ``program`` making the call from ``site``'s function
    first, a BLAS or LAPACK routine named as such, and advice for C."""
    # An MPI call's refusal (pyzyme.diff.calls.mpi): its rows are for numba-mpi programs
    unknown = getattr(err, "unknown_call", None) or getattr(err, "mpi_call", None)
    if unknown is None:
        return
    callee, where = unknown
    if callee is None:
        err.hint = ("call the function directly rather than through a pointer, or pass the "
                    "arguments that reach the call as enzyme_const")
        return
    lines = _call_lines(program, site.function, callee)
    at = f"{lines[0]}: " if lines else ""
    also = f" (also called at {', '.join(lines[1:])})" if len(lines) > 1 else ""
    routine = blas_routine(callee)
    if routine is not None:
        err.message = (f"{at}{callee}, {routine}, has no derivative: pyzyme has no rules for "
                       f"BLAS or LAPACK called from C, and the program does not define "
                       f"{callee}, so its body cannot be differentiated either (an argument "
                       f"of the call in {where} carries a derivative){also}")
        err.hint = (f"compile a C implementation of {callee} (reference BLAS/LAPACK source) "
                    f"with the program so pyzyme differentiates it, register a derivative "
                    f"for it (__enzyme_register_gradient_{callee} or "
                    f"__enzyme_register_derivative_{callee}), or pass the arguments that "
                    f"reach it as enzyme_const")
    elif mpi_routine(callee):
        err.message = (f"{at}{callee}, an MPI routine, has no derivative: pyzyme differentiates "
                       f"MPI calls only in numba-mpi programs (pyzyme.rules.mpi), so the "
                       f"derivatives it would carry between ranks cannot be formed (an argument "
                       f"of the call in {where} carries a derivative){also}")
        err.hint = (f"differentiate each rank's own computation and communicate its "
                    f"derivatives with the same MPI calls outside __enzyme_*, register a "
                    f"derivative for {callee} (__enzyme_register_gradient_{callee} or "
                    f"__enzyme_register_derivative_{callee}), or pass the arguments that reach "
                    f"it as enzyme_const; declaring it enzyme_inactive would drop the "
                    f"derivatives it carries")
    else:
        err.message = (f"{at}no derivative for a call to {callee} in {where}: the program "
                       f"does not define it and pyzyme has no rule for it, and an argument "
                       f"carries a derivative{also}")
        err.hint = (f"compile {callee}'s source with the program, register a derivative for "
                    f"it (__enzyme_register_gradient_{callee} or "
                    f"__enzyme_register_derivative_{callee}), declare it "
                    f"__attribute__((enzyme_inactive)) if it carries no derivative, or pass "
                    f"the arguments that reach it as enzyme_const")
    err.args = (err.message,)


def reword_blas_body(err, program, site) -> None:
    """Word ``err`` again when pyzyme refused inside the body the program gives a BLAS or
    LAPACK routine: Enzyme would not have looked at that body (it knows the routine by name),
    so the error starts with the line calling the routine and says which rule is missing."""
    for what, detail in err.context:
        if not what.endswith("mode of function"):
            continue
        name = detail.lstrip("@")
        routine = blas_routine(name)
        fn = program.get_function(name)
        if routine is None or fn is None or fn.is_declaration:
            continue
        lines = _call_lines(program, site.function, name)
        at = f"{lines[0]}: " if lines else ""
        mode = what.split()[0]
        defined = next((source_location(program, i) for i in fn.instructions()), None)
        where = f" (at {defined})" if defined else ""
        err.message = (f"{at}{name}, {routine}: pyzyme has no {mode}-mode rule for it, so it "
                       f"differentiates the body the program gives it{where}, as any "
                       f"function's, and refuses that body: {err.message}")
        err.hint = (f"register a derivative for {name} (__enzyme_register_gradient_{name}), "
                    f"give it a body pyzyme can differentiate, or pass the arguments that "
                    f"reach it as enzyme_const; Enzyme differentiates BLAS by name, pyzyme only "
                    f"CBLAS dot, gemv and gemm, in forward mode")
        err.args = (err.message,)
        return
