"""Python source lines of operations in Numba-compiled code, for error messages.

Two ways, cheapest first. Where the call pyzyme cannot differentiate is one the user wrote by
name (``np.linalg.svd``, ``print``, a ``numba.objmode`` block, a ``prange`` loop: the rows of
:mod:`pyzyme.rules.constructs`), :func:`find_uses` finds it in Numba's typed IR of the function,
which Numba keeps with every compiled signature, and of the ``@njit`` functions it calls: no
compilation. Otherwise, Numba attaches line information to its LLVM IR only when compiling
with ``debug=True``, so :func:`line_of_call` compiles a debug copy of the function (once, at
error time, so nothing is spent when differentiation succeeds) and reads the line of that call.
:func:`add_source_line` puts what they find into the error.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Collection
from dataclasses import dataclass

import numba
from numba.core import ir, types

from pyzyme.errors import UnsupportedError
from pyzyme.rules.constructs import construct_of, unknown_call_message

__all__ = ["Found", "find_uses", "line_of_call", "add_source_line", "where_defined",
           "outer_loop_lines"]


@dataclass(frozen=True)
class Found:
    """A statement of the user's code that is one of the sought constructs."""

    source: str      # which one (a ``Use.source`` of :mod:`pyzyme.rules.constructs`)
    filename: str
    line: int
    function: str = ""  # the qualified name of the Python function it is in
    parfor: str = ""    # a parallel loop's key in the name of its outlined body (_GUFUNC)

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}"


#: Numba names a parallel loop's outlined body ``__numba_parfor_gufunc_<hex(hash(parfor))>``
#: (numba/parfors/parfor_lowering.py), and a Parfor's hash is its ``id``: the key that ties a
#: body pyzyme differentiates to the loop in the typed IR, whose line is the user's.
_GUFUNC = re.compile(r"__numba_parfor_gufunc_(_?0x[0-9a-f]+)")


def find_uses(dispatcher, argtypes, sources: Collection[str]) -> list[Found]:
    """Where ``dispatcher``, compiled for ``argtypes``, and the ``@njit`` functions it calls
    use one of ``sources``, in the order of their code: dotted names of functions
    (``"np.linalg.svd"``, ``"operator.matmul"`` for ``@``), ``"print"`` (of a value that may
    carry a derivative), ``"objmode"`` (a ``with numba.objmode`` block) or ``"parfor"`` (a
    parallel loop). Empty when Numba kept no typed IR (a function loaded from its cache)."""
    found: list[Found] = []
    _walk(getattr(dispatcher, "overloads", {}).get(tuple(argtypes)), frozenset(sources),
          found, set())
    return list(dict.fromkeys(found))


def _walk(cres, sources: frozenset, found: list, seen: set) -> None:
    annotation = getattr(cres, "type_annotation", None)
    if annotation is None or id(cres) in seen:
        return
    seen.add(id(cres))
    typemap, calltypes = annotation.typemap, annotation.calltypes
    function = getattr(getattr(annotation, "func_id", None), "func_qualname", "")
    parfor = getattr(sys.modules.get("numba.parfors.parfor"), "Parfor", None)
    for _, block in sorted(annotation.blocks.items()):
        for stmt in block.body:
            loc = stmt.loc
            if parfor is not None and isinstance(stmt, parfor):
                if "parfor" in sources:
                    key = hex(hash(stmt)).replace("-", "_")
                    found.append(Found("parfor", loc.filename, loc.line, function, key))
                continue
            if isinstance(stmt, ir.Print):
                if "print" in sources and any(_may_carry(typemap.get(a.name))
                                              for a in stmt.args):
                    found.append(Found("print", loc.filename, loc.line, function))
                continue
            expr = getattr(stmt, "value", None)
            if not isinstance(stmt, ir.Assign) or not isinstance(expr, ir.Expr):
                continue
            if expr.op == "binop":
                name = f"operator.{getattr(expr.fn, '__name__', '')}"
                if name in sources:
                    found.append(Found(name, loc.filename, loc.line, function))
                continue
            if expr.op != "call":
                continue
            fty = typemap.get(expr.func.name)
            if isinstance(fty, types.ObjModeDispatcher):
                if "objmode" in sources:
                    found.append(Found("objmode", loc.filename, loc.line, function))
            elif isinstance(fty, types.Dispatcher):
                # an @njit library function the user called by name (numba_mpi.recv)
                name = _dotted(getattr(fty.dispatcher, "py_func", None))
                if name in sources:
                    found.append(Found(name, loc.filename, loc.line, function))
                    continue
                sig = calltypes.get(expr)
                callee = getattr(fty.dispatcher, "overloads", {})
                if sig is not None:
                    _walk(callee.get(tuple(sig.args)), sources, found, seen)
            else:
                name = _dotted(getattr(fty, "typing_key", None))
                if name in sources:
                    found.append(Found(name, loc.filename, loc.line, function))


def _dotted(key) -> str | None:
    """``np.linalg.svd`` for the function ``numpy.linalg.svd``; None for other keys."""
    module, name = getattr(key, "__module__", None), getattr(key, "__name__", None)
    if not (isinstance(module, str) and isinstance(name, str)):
        return None
    if module == "numpy" or module.startswith("numpy."):
        module = "np" + module[len("numpy"):]
    return f"{module}.{name}"


def _may_carry(ty) -> bool:
    """Whether a value of Numba type ``ty`` may carry a derivative (a float, complex, an array
    or container of them; anything not known to be free of floats)."""
    if isinstance(ty, (types.Integer, types.Boolean, types.UnicodeType, types.NoneType,
                       types.Literal)):
        return False
    if isinstance(ty, types.Array):
        return _may_carry(ty.dtype)
    if isinstance(ty, types.BaseTuple):
        return any(_may_carry(t) for t in ty)
    return True


def line_of_call(dispatcher, argtypes, symbol: str) -> int | None:
    """The Python line of the first call to ``symbol`` in ``dispatcher`` compiled for
    ``argtypes``, or None when Numba cannot say."""
    py_func = getattr(dispatcher, "py_func", None)
    if py_func is None:
        return None
    options = {k: v for k, v in dispatcher.targetoptions.items()
               if k not in ("cache", "nopython", "debug", "boundscheck")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            debug_copy = numba.njit(debug=True, **options)(py_func)
            debug_copy.compile(tuple(argtypes))
        text = debug_copy.overloads[tuple(argtypes)].library.get_llvm_str()
    except Exception:  # noqa: BLE001 - a line number is a courtesy; never mask the real error
        return None
    call = re.search(r"call [^\n]*@\"?" + re.escape(symbol) + r"\"?\([^\n]*!dbg (![0-9]+)", text)
    if call is None:
        return None
    location = re.search("^" + re.escape(call.group(1)) + r" = !DILocation\(line: (\d+)", text,
                         re.M)
    return int(location.group(1)) if location else None


def where_defined(f) -> str:
    """``name (file:line)`` of the Python function behind dispatcher ``f``."""
    py = getattr(f, "py_func", f)
    code = getattr(py, "__code__", None)
    name = getattr(py, "__qualname__", repr(f))
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code else name


def outer_loop_lines(f) -> list[str]:
    """``file:line`` of each outermost ``for``/``while`` loop of the Python function behind
    ``f``, in source order (empty when its source cannot be read): what names a loop that LLVM
    kept in the same order."""
    import ast
    import inspect
    import textwrap
    import tokenize

    py = getattr(f, "py_func", f)
    try:
        lines, first = inspect.getsourcelines(py)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):
        # TokenError: Python 3.12's inspect, where the function's file holds other text at
        # its line (code compiled under another file's name, a file edited since)
        return []
    found: list[int] = []

    def visit(node) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.For, ast.While)):
                found.append(child.lineno + first - 1)
            elif not isinstance(child, (ast.FunctionDef, ast.Lambda, ast.ClassDef)):
                visit(child)

    for top in tree.body:
        visit(top)
    filename = py.__code__.co_filename
    return [f"{filename}:{line}" for line in sorted(found)]


def _users_first(found: list[Found], parallel_body: str | None) -> list[Found]:
    """Of the uses ``found``, the parallel loop whose outlined body is ``parallel_body`` (the
    one the error came from) when it is among them; else those in the user's code, leaving
    out loops Numba wrote itself (``np.dot`` of two vectors under ``parallel=True`` is a loop
    in numba/parfors/parfor.py), unless there are only those."""
    key = _GUFUNC.search(parallel_body or "")
    loop = [f for f in found if key and f.parfor == key.group(1)]
    if loop:
        return loop
    numba_dir = os.path.dirname(os.path.abspath(numba.__file__)) + os.sep
    users = [f for f in found if not os.path.abspath(f.filename).startswith(numba_dir)]
    return users or found


def add_source_line(err: UnsupportedError, dispatcher, argtypes) -> None:
    """Name the Python line of the call pyzyme could not differentiate, where Numba can say,
    and, where the call is one the user wrote by name (:mod:`pyzyme.rules.constructs`), word
    the error by that name. Such calls are found in Numba's typed IR, with no compilation;
    others in a debug copy of the function, compiled now."""
    callee = getattr(err, "callee", None)
    if not callee:
        return
    row = construct_of(callee)
    found = _users_first(find_uses(dispatcher, argtypes, [use.source for use in row.uses])
                         if row else [], getattr(err, "parallel_body", None))
    if found:
        first = found[0]
        more = sorted({f.line for f in found[1:] if f.filename == first.filename} - {first.line})
        also = f" (and line{'s' if len(more) > 1 else ''} {', '.join(map(str, more))})" \
            if more else ""
        function = f", in {first.function}" if first.function else ""
        err.context.insert(0, ("Python source", f"{first}{also}{function}"))
        if getattr(err, "unknown_call", None):
            use = next(u for u in row.uses if u.source == first.source)
            err.message, err.hint = unknown_call_message(*err.unknown_call, use)
            err.args = (err.message,)
        return
    line = line_of_call(dispatcher, argtypes, callee)
    if line is not None:
        code = dispatcher.py_func.__code__
        err.context.insert(0, ("Python source", f"{code.co_filename}:{line}"))
