"""The ``pyzyme`` command line: ``pyzyme demo``, ``pyzyme explain FILE.py:FUNCTION``,
``pyzyme opt IN.ll -o OUT.ll`` (or IN.bc), ``pyzyme cc FILE.c [flags] -o PROG``,
``pyzyme run FILE.c``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence


def demo(out=sys.stdout) -> int:
    """Capture a Numba function, show its IR, and measure pyzyme's round trip of it."""
    import numpy as np

    import llvmlite.binding as llvm
    import numba

    from pyzyme import ir
    from pyzyme.frontends.numba import capture

    @numba.njit
    def taylor_exp(x, terms):
        """exp(x) as a Taylor series: a loop with a dynamic trip count."""
        total = 0.0
        term = 1.0
        for i in range(1, terms + 1):
            total += term
            term *= x / i
        return total

    @numba.njit
    def weighted_norm(w, v):
        s = 0.0
        for i in range(v.shape[0]):
            s += w[i] * v[i] * v[i]
        return np.sqrt(s)

    def say(text: str = "") -> None:
        print(text, file=out)

    say("pyzyme demo: capture Numba's optimized LLVM IR and round-trip it through pyzyme.ir")
    for fn, args in ((taylor_exp, (1.5, 20)), (weighted_norm, (np.ones(4), np.arange(4.0)))):
        cap = capture(fn, args)
        say()
        say(f"== {fn.__name__}{cap.signature}  ->  native symbol @{cap.symbol[:60]}...")
        say(str(cap.abi))
        t0 = time.perf_counter()
        module = ir.parse_module(cap.text)
        t1 = time.perf_counter()
        printed = str(module)
        t2 = time.perf_counter()
        llvm.parse_assembly(printed).verify()
        fixed = str(ir.parse_module(printed)) == printed
        native = module.get_function(cap.symbol)
        say()
        say(str(native))
        n_lines = cap.text.count("\n")
        n_inst = sum(1 for f in module.functions for _ in f.instructions())
        say()
        say(f"  {n_lines} lines, {len(module.functions)} functions, {n_inst} instructions; "
            f"parse {(t1 - t0) * 1e3:.2f} ms, print {(t2 - t1) * 1e3:.2f} ms; "
            f"LLVM verifies the printed module; fixed point: {fixed}")
        say(f"  Numba says {fn.__name__}{args if len(str(args)) < 40 else '(...)'} = "
            f"{fn(*args)!r}")
    _forward_demo(taylor_exp, weighted_norm, say)
    _reverse_demo(say)
    return 0


def _reverse_demo(say) -> None:
    """Reverse mode: one sweep gives the whole gradient, checked against finite differences."""
    import numpy as np
    import numba

    from pyzyme import Active, Const, Duplicated, Reverse, autodiff

    @numba.njit
    def taylor_log(x, n):
        """sum x**i / i for i < n: -log(1 - x) as n grows."""
        s = 0.0
        for i in range(1, n):
            s += x ** i / i
        return s

    @numba.njit
    def energy(u, c):
        """A 1-D chain of springs: a loop reading neighbours, a nonlinear term."""
        e = 0.0
        for i in range(u.shape[0] - 1):
            d = u[i + 1] - u[i]
            e += c * d * d + np.cos(u[i])
        return e

    say()
    say("== reverse mode")
    (dx, _), = autodiff(Reverse, taylor_log, Active, Active(0.5), Const(10**6))
    say(f"  d/dx sum(x**i / i, i < 10**6) at x = 0.5: {dx!r}  (1 / (1 - x) = 2)")
    u = np.linspace(0.0, 1.0, 8) ** 2
    du = np.zeros_like(u)
    (_, dc), = autodiff(Reverse, energy, Active, Duplicated(u, du), Active(3.0))
    h = 1e-6
    fd = np.array([(energy(u + h * e, 3.0) - energy(u - h * e, 3.0)) / (2 * h)
                   for e in np.eye(u.size)])
    say(f"  gradient of energy(u, c) in u, one reverse sweep: {np.round(du, 8)}")
    say(f"    central differences:                           {np.round(fd, 8)}")
    say(f"  d energy / dc = {dc!r}")


def _forward_demo(taylor_exp, weighted_norm, say) -> None:
    """Forward mode on the two functions above, checked against finite differences."""
    import math

    import numpy as np

    from pyzyme import Const, Duplicated, Forward, autodiff, gradient
    from pyzyme.api.plans import CACHE

    say()
    say("== forward mode")
    x, h = 1.5, 1e-6
    value, dvalue = autodiff(Forward, taylor_exp, Duplicated, Duplicated(x, 1.0), Const(20))
    fd = (taylor_exp(x + h, 20) - taylor_exp(x - h, 20)) / (2 * h)
    say(f"  d/dx taylor_exp(x, 20) at x = {x}: {dvalue!r}")
    say(f"    central differences give {fd:.10f}; exp(x) = {math.exp(x):.10f}")
    w, v = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, -1.0, 2.0, 0.25])
    grad = gradient(Forward, lambda vv: weighted_norm(w, vv), v)
    exact = w * v / weighted_norm(w, v)
    say(f"  gradient(Forward, v -> weighted_norm(w, v)) = {np.round(grad, 12)}")
    say(f"    exact w * v / norm = {np.round(exact, 12)}")
    plan = next(p for k, p in CACHE._plans.items() if k[1] is taylor_exp)
    text = plan.ir_text
    start = text.index(f"define i32 @{plan.symbol}")
    say()
    say("  the derivative pyzyme generated for taylor_exp (before LLVM optimizes it):")
    say(text[start:text.index("\n}", start) + 2])


def explain_command(target: str, arg_spec: str | None = None, const: Sequence[str] = (),
                    out=None, err=None) -> int:
    """``pyzyme explain FILE.py:FUNCTION [--args SPEC] [--const NAMES]``.

    ``FILE.py`` is imported as a module (under its own name, so an ``if __name__ ==
    "__main__":`` block does not run) and ``FUNCTION`` taken from it: an ``@njit`` function or a
    plain Python one. ``SPEC`` gives the argument types in Numba's type syntax, as in an
    ``@njit`` signature: ``"float64[::1], float64"`` (``float64[::1]`` is a C-contiguous array,
    what ``np.ones(3)`` is; ``float64[:]`` any layout; ``float64[:, ::1]`` 2-D; ``int64``;
    ``UniTuple(float64, 2)``). Without ``--args`` the function's first compiled signature is
    used, if the module called it (or declared signatures in ``@njit``).
    """
    from pyzyme.errors import PyzymeError
    from pyzyme.explain import explain

    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err

    def fail(message: str) -> int:
        print(f"pyzyme explain: error: {message}", file=err)
        return 2

    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        return fail(f"expected FILE.py:FUNCTION, got {target!r}")
    try:
        module = _load_file(path)
    except FileNotFoundError:
        return fail(f"no such file: {path}")
    except SyntaxError as e:  # a binary file too: Python reads it as undecodable source
        return fail(f"{e.filename or path}:{e.lineno or 1}:{e.offset or 1}: {e.msg}")
    except Exception as e:  # noqa: BLE001 - whatever the file's own code raised on import
        return fail(f"{_raised_at(e, path)}: {type(e).__name__}: {e} (raised while the file "
                    f"was imported)")
    func = getattr(module, name, None)
    if func is None:
        return fail(f"{path} defines no {name!r}")
    if arg_spec is not None:
        try:
            argtypes = parse_arg_types(arg_spec)
        except (TypeError, NameError, SyntaxError, AttributeError) as e:
            return fail(f"cannot read --args {arg_spec!r} as Numba types: {e}")
    else:
        signatures = list(getattr(func, "signatures", ()) or ())
        if not signatures:
            return fail(f"{name} has not been compiled for any argument types: pass them, e.g. "
                        f"--args \"float64[::1], float64\"")
        argtypes = tuple(signatures[0])
    try:
        report = explain(func, argtypes, const=[c for c in const if c])
    except (PyzymeError, ValueError) as e:
        print(f"pyzyme explain: {e}", file=err)
        return 1
    print(report, file=out)
    return 0


def parse_arg_types(spec: str) -> tuple:
    """Numba types from ``"float64[::1], int64"`` (or a whole signature ``"f8(f8[:], i8)"``).

    >>> [str(t) for t in parse_arg_types("float64[::1], int64")]
    ['array(float64, 1d, C)', 'int64']
    >>> parse_arg_types("float64")
    (float64,)
    """
    from numba.core.sigutils import normalize_signature

    text = spec.strip()
    if not text:
        return ()
    try:
        args, _ = normalize_signature(text)
    except TypeError:  # one type: not a tuple
        args, _ = normalize_signature(f"({text},)")
    return tuple(args)


def _raised_at(error: BaseException, path: str) -> str:
    """``FILE:LINE:COLUMN`` of the innermost frame of ``error``'s traceback in the file
    ``path`` (the user's line that raised, or called what raised)."""
    import os
    import traceback

    where = os.path.abspath(path)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == where]
    if not frames:
        return path
    last = frames[-1]
    return f"{path}:{last.lineno}:{(last.colno or 0) + 1}"


def _load_file(path: str):
    """Import the Python file ``path`` as a module of its own name (its folder on sys.path, so
    it can import its neighbours)."""
    import importlib.util
    import os

    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(path)
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(path))[0]
    if name in sys.modules:  # do not shadow a module already imported (a file named json.py)
        name = f"__pyzyme_explain_{name}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # not left half-imported for the next explain in this process
        raise
    return module


def opt_command(path: str, output: str | None, level: int | None, err=None) -> int:
    """``pyzyme opt IN.ll|IN.bc [-o OUT.ll]``: every ``__enzyme_*`` call replaced by a
    derivative. The input is LLVM IR text or bitcode (told apart by its first bytes)."""
    from pyzyme.errors import PyzymeError
    from pyzyme.frontends import ir_files
    from pyzyme.frontends.c.clang import normalize_ir
    from pyzyme.frontends.c.lower import lower

    err = sys.stderr if err is None else err
    try:
        data = ir_files.read_bytes(path)
    except PyzymeError as e:
        print(f"pyzyme opt: error: {e}", file=err)
        return 2
    try:
        out = lower(normalize_ir(data, name="<stdin>" if path == "-" else path),
                    opt_level=level)
    except PyzymeError as e:
        print(f"pyzyme opt: error: {e}", file=err)
        return 1
    if output in (None, "-"):
        sys.stdout.write(out)
        return 0
    try:
        with open(output, "w") as f:
            f.write(out)
    except OSError as e:
        print(f"pyzyme opt: error: cannot write {output}: {e.strerror or e}", file=err)
        return 2
    return 0


def c_command(command: str, args: Sequence[str], err=None) -> int:
    """``pyzyme cc FILE.c... [clang flags] -o PROG`` and ``pyzyme run FILE.c [args]``."""
    from pyzyme.errors import PyzymeError
    from pyzyme.frontends.c import driver as c_driver

    err = sys.stderr if err is None else err
    if not args or args[0] in ("-h", "--help"):
        print(f"usage: pyzyme {command} FILE.c|FILE.cpp|FILE.ll|FILE.bc... [clang flags] "
              + ("[-o PROGRAM] [-shared]" if command == "cc" else "[-- program arguments]"),
              file=err)
        return 2 if not args else 0
    try:
        inv = c_driver.parse_invocation(args, run=command == "run")
        if command == "cc":
            c_driver.cc(inv)
            return 0
        return c_driver.run(inv)
    except PyzymeError as e:
        print(f"pyzyme {command}: error: {e}", file=err)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("cc", "run"):  # clang's flags: not argparse's to read
        return c_command(argv[0], argv[1:])
    parser = argparse.ArgumentParser(prog="pyzyme", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="capture a Numba function and show its IR round trip")
    ex = sub.add_parser(
        "explain", help="print each IR instruction of a Numba function with its activity, "
                        "type tree and Python source line",
        description=explain_command.__doc__.split("\n\n")[1].strip().replace("``", ""))
    ex.add_argument("target", metavar="FILE.py:FUNCTION")
    ex.add_argument("--args", dest="arg_spec", metavar="SPEC",
                    help='argument types in Numba syntax, e.g. "float64[::1], float64"')
    ex.add_argument("--const", default="", metavar="NAMES",
                    help="comma-separated float arguments to treat as constants")
    op = sub.add_parser("opt", help="replace the __enzyme_* calls of an LLVM IR module by "
                                     "derivatives")
    op.add_argument("input", metavar="IN.ll", help="LLVM IR text or bitcode (- for standard "
                                                   "input)")
    op.add_argument("-o", dest="output", metavar="OUT.ll", help="where to write (default: "
                                                                 "standard output)")
    op.add_argument("--opt-level", type=int, default=2, choices=(0, 1, 2, 3),
                    help="optimisation level of the generated code (default 2)")
    sub.add_parser("cc", help="compile C/C++ with __enzyme_* calls into a program: "
                              "pyzyme cc FILE.c [clang flags] -o PROG")
    sub.add_parser("run", help="JIT-run a C program with __enzyme_* calls: pyzyme run FILE.c")
    args = parser.parse_args(argv)
    if args.command == "opt":
        return opt_command(args.input, args.output, args.opt_level)
    if args.command == "demo":
        return demo()
    if args.command == "explain":
        return explain_command(args.target, args.arg_spec, args.const.split(","))
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
