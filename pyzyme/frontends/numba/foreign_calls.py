"""Calls into shared libraries through constant addresses, named by their symbols.

A ctypes function called from ``@njit`` code (how ``numba-mpi`` calls the MPI library) is a
call through a constant address in Numba's IR: ``call i32 inttoptr (i64 <address> to ptr)(...)``.
The address is this process's, and says nothing to the rule table; the symbol it belongs to
does. :func:`name_foreign_calls` asks the dynamic loader (``dladdr``) which exported symbol
starts at each such address and, where it is an MPI function (with a row, or without one so
that an error can name it), calls the symbol instead, declared with the call's types and
known to the JIT at that address. MPICH exports each ``MPI_X`` as an alias of
``PMPI_X``; the name with a row wins.

The same module's predefined MPI handles (a datatype, a reduction, ``MPI_COMM_WORLD``) are read
by numba-mpi from the ``mpi4py`` objects that hold them (``load i64, ptr inttoptr (i64 <address>
to ptr)``); those loads become the constants they read, and the handles' meanings are
registered in :data:`pyzyme.rules.mpi.HANDLES`, so that the derivative knows a ``double`` from
an ``int`` and a sum from a maximum. ``mpi4py`` is consulted only when it is already imported
(numba-mpi imports it): pyzyme itself never imports it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import sys
from functools import lru_cache

import llvmlite.binding as llvm

from pyzyme.rules import default_rules
from pyzyme.rules import mpi as mpi_rules

__all__ = ["name_foreign_calls", "symbol_at"]

_CALL_THROUGH_ADDRESS = re.compile(r"(?P<ret>[\w.]+) inttoptr \(i64 (?P<addr>\d+) to ptr\)\(")
_HANDLE_LOAD = re.compile(
    r"^(?P<lhs>\s*%[-\w.$\"]+ = )load i64, ptr inttoptr \(i64 (?P<addr>\d+) to ptr\)[^\n]*$",
    re.M)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


@lru_cache(maxsize=1)
def _dladdr():
    for lib in (None, ctypes.util.find_library("dl")):
        try:
            fn = ctypes.CDLL(lib).dladdr
        except (OSError, AttributeError, TypeError):
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        fn.restype = ctypes.c_int
        return fn
    return None


def symbol_at(address: int) -> str | None:
    """The exported symbol that starts at ``address`` in a shared library of this process, in
    the spelling the rule table knows (``MPI_Send`` rather than its alias ``PMPI_Send``), or
    None where the loader knows none.

    Examples
    --------
    >>> import ctypes
    >>> libc = ctypes.CDLL(None)
    >>> symbol_at(ctypes.cast(libc.strlen, ctypes.c_void_p).value) in ("strlen", None)
    True
    """
    dladdr = _dladdr()
    if dladdr is None:
        return None
    info = _DlInfo()
    if not dladdr(address, ctypes.byref(info)) or not info.dli_sname or \
            info.dli_saddr != address:
        return None
    found = info.dli_sname.decode()
    candidates = [found[1:], found] if found.startswith("P") else [found]
    try:
        library = ctypes.CDLL(info.dli_fname.decode())
    except OSError:
        return found
    rules = default_rules()
    for name in candidates:
        try:
            here = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
        except AttributeError:
            continue
        if here == address and (name in rules or name == found):
            return name
    return found


def _register_library(address: int) -> None:
    """Make every MPI function with a row known to the JIT, from the library defining the one
    at ``address``: a derivative calls some the program does not (a broadcast's adjoint is a
    reduction)."""
    info = _DlInfo()
    if not _dladdr()(address, ctypes.byref(info)) or not info.dli_fname:
        return
    library = ctypes.CDLL(info.dli_fname.decode())
    for row in mpi_rules.ROWS:
        for name in row.names:
            fn = getattr(library, name, None)
            if fn is not None:
                llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)


def _wanted(name: str) -> bool:
    # MPI's only: another C function called through ctypes keeps its address, and with it
    # the refusal that asks for a custom rule (a libm spelling the loader happens to report
    # would otherwise get a row by chance).
    return name.startswith("MPI_")


def _arg_types(text: str, start: int) -> list[str]:
    """The types of the arguments of the call whose list opens at ``text[start]``."""
    depth, i, items, item = 0, start + 1, [], []
    while True:
        c = text[i]
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            if depth == 0:
                break
            depth -= 1
        if c == "," and depth == 0:
            items.append("".join(item))
            item = []
        else:
            item.append(c)
        i += 1
    if "".join(item).strip():
        items.append("".join(item))
    return [s.split()[0] for s in items]


def name_foreign_calls(text: str) -> tuple[str, bool]:
    """``text`` (a module) with its calls through constant addresses of known symbols made
    calls of those symbols, and the MPI handles they are passed as constants; returns the text
    and whether anything changed (the module is then worth simplifying again)."""
    declared = set(re.findall(r'^(?:define|declare)[^@\n]*@"?([^"(\s]+)"?\(', text, re.M))
    declarations: list[str] = []
    named: list[str] = []

    def name_call(match: re.Match) -> str:
        address = int(match.group("addr"))
        name = symbol_at(address)
        if name is None or not _wanted(name):
            return match.group(0)
        if name not in declared:
            params = ", ".join(_arg_types(text, match.end() - 1))
            declarations.append(f'declare {match.group("ret")} @"{name}"({params})')
            declared.add(name)
            llvm.add_symbol(name, address)
            if name.startswith("MPI_"):
                _register_library(address)
        named.append(name)
        return f'{match.group("ret")} @"{name}"('

    text = _CALL_THROUGH_ADDRESS.sub(name_call, text)
    if not named:
        return text, False
    if any(n.startswith("MPI_") for n in named):
        text = _fold_mpi_handles(text)
    return text + "\n" + "\n".join(declarations) + "\n", True


def _fold_mpi_handles(text: str) -> str:
    handles = _mpi_handles()
    if not handles:
        return text

    def fold(match: re.Match) -> str:
        value = handles.get(int(match.group("addr")))
        if value is None:
            return match.group(0)
        return f"{match.group('lhs')}add i64 {value}, 0"

    return _HANDLE_LOAD.sub(fold, text)


def _mpi_handles() -> dict[int, int]:
    """The addresses at which mpi4py keeps the predefined handles, and their values; the
    meanings of datatypes and reductions registered in :data:`pyzyme.rules.mpi.HANDLES`."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is None:
        return {}
    datatypes = {"DOUBLE": "f64", "FLOAT": "f32", "C_DOUBLE_COMPLEX": "c128",
                 "C_FLOAT_COMPLEX": "c64", "CHAR": "int", "INT": "int", "INT32_T": "int",
                 "INT64_T": "int", "LONG": "int", "BYTE": "int", "UINT8_T": "int"}
    reductions = {"SUM": "sum", "MAX": "max", "MIN": "min", "PROD": "prod",
                  "LAND": "land", "LOR": "lor", "BAND": "band", "BOR": "bor",
                  "MAXLOC": "maxloc", "MINLOC": "minloc"}
    found = mpi_rules.Handles(any_source=int(MPI.ANY_SOURCE), any_tag=int(MPI.ANY_TAG),
                              request_bytes=int(MPI._sizeof(MPI.Request)),
                              request_null=int(MPI._handleof(MPI.REQUEST_NULL)))
    addresses: dict[int, int] = {}
    for table, names in ((found.datatypes, datatypes), (found.reductions, reductions),
                         (None, {"COMM_WORLD": None})):
        for attr, meaning in names.items():
            obj = getattr(MPI, attr, None)
            if obj is None:
                continue
            value = int(MPI._handleof(obj))
            addresses[int(MPI._addressof(obj))] = value
            if attr in ("SUM", "MIN", "INT32_T"):
                found.named[attr] = value
            if table is not None:
                table[value & 0xFFFFFFFF] = meaning
    mpi_rules.HANDLES.update(found)
    return addresses
