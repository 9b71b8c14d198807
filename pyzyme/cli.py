"""The ``pyzyme`` command line: ``pyzyme demo``, ``pyzyme explain FILE.py:FUNCTION``,
``pyzyme opt IN.ll -o OUT.ll`` (or IN.bc), ``pyzyme cc FILE.c [flags] -o PROG``,
``pyzyme run FILE.c``, ``pyzyme --version``. The help texts are plain text, kept here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def demo(out=None, plot_path: str = "pyzyme-demo.png") -> int:
    """``pyzyme demo``: see :mod:`pyzyme.demo`."""
    from pyzyme.demo import run

    return run(sys.stdout if out is None else out, plot_path)


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


#: ``pyzyme --help``: what pyzyme is, then each command (argparse lists them).
DESCRIPTION = """\
pyzyme differentiates optimized LLVM IR, as Enzyme does. From Python, import pyzyme and
differentiate Numba (@njit) functions with pyzyme.grad, pyzyme.autodiff and the other functions
the README describes. These commands show what pyzyme does, explain how it sees a function,
and differentiate C and C++ programs that call Enzyme's __enzyme_autodiff."""

EPILOG = """\
examples:
  pyzyme demo
  pyzyme explain examples/taylor.py:taylor_log --args "float64, int64"
  pyzyme cc square.c -O2 -o square && ./square
  pyzyme opt square.ll -o square_ad.ll

Run "pyzyme COMMAND --help" for the options of each command."""

EXPLAIN = """\
Print each LLVM IR instruction of a Numba function with its activity (whether a derivative
flows through it), its type tree and the Python source line it came from: what to read when an
ActivityError is not obvious.

FILE.py is imported as a module under its own name, so its "if __name__ == '__main__':" block
does not run, and FUNCTION is taken from it: an @njit function or a plain Python one. Without
--args, the function's first compiled signature is used, which exists if the file called the
function or declared signatures in @njit."""

ARGS_HELP = """the argument types in Numba's syntax, as in an @njit signature: "float64[::1], \
int64". float64[::1] is a C-contiguous array (what np.ones(3) is), float64[:] an array of any \
layout, float64[:, ::1] a 2-D array, UniTuple(float64, 2) a pair of floats."""

CC = """\
usage: pyzyme cc FILE... [-o OUTPUT] [-O0|-O1|-O2|-O3] [-shared] [clang flags]

Compile C or C++ sources that call Enzyme's functions (__enzyme_autodiff, __enzyme_fwddiff,
__enzyme_augmentfwd and __enzyme_reverse, ...) into a program, as clang with Enzyme's plugin
does: clang (from the ziglang package, pip install 'pyzyme[c]') compiles each file to LLVM IR,
pyzyme replaces each __enzyme_* call by the derivative it asks for, and clang links the result.

arguments:
  FILE...        C (.c) or C++ (.cc, .cpp, .cxx) sources, or LLVM IR (.ll text, .bc bitcode).

options:
  -o OUTPUT      The program (or library) to write; a.out by default (a.so with -shared).
  -O0 ... -O3    The optimization level of the sources and the program (default -O0). The
                 derivatives are optimized at -O2 at least, since Enzyme differentiates
                 optimized code.
  -shared        Build a shared library instead of a program.
  -l, -L, -Wl,..., -static, -pthread, -rdynamic
                 Passed to the link step only.
  other flags    Passed to clang for each source: -I DIR, -D NAME=VALUE, -std=c++17, -g, ...
                 (-c, -S and -emit-llvm are refused: for IR, use pyzyme opt.)

Enzyme's headers are on the include path: <enzyme/enzyme> and <enzyme/utils> (C++),
<enzyme/checkpoint.h> and <enzyme/fixed_point.h>.

example:
  pyzyme cc square.c -O2 -o square && ./square"""

RUN = """\
usage: pyzyme run FILE... [-O0|-O1|-O2|-O3] [clang flags] [--] [PROGRAM ARGUMENTS]

Compile C or C++ sources that call Enzyme's functions as "pyzyme cc" does, then run the
program's main in this process (JIT-compiled; a C++ program is linked and run instead).
Arguments after the last source file (or after --) are the program's own. The exit status is
the program's.

example:
  pyzyme run square.c"""


def c_command(command: str, args: Sequence[str], err=None) -> int:
    """``pyzyme cc FILE.c... [clang flags] -o PROG`` and ``pyzyme run FILE.c [args]``."""
    from pyzyme.errors import PyzymeError
    from pyzyme.frontends.c import driver as c_driver

    err = sys.stderr if err is None else err
    text = CC if command == "cc" else RUN
    if not args:
        print(text.split("\n\n")[0], file=err)
        print(f"pyzyme {command}: error: no source file given; pyzyme {command} --help explains "
              f"the options", file=err)
        return 2
    if args[0] in ("-h", "--help"):
        print(text)
        return 0
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
    """Run the ``pyzyme`` command with the arguments ``argv`` (default: ``sys.argv[1:]``);
    returns its exit status."""
    from pyzyme._version import __version__

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("cc", "run"):  # clang's flags: not argparse's to read
        return c_command(argv[0], argv[1:])
    parser = argparse.ArgumentParser(prog="pyzyme", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_versions(__version__))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dm = sub.add_parser(
        "demo", help="Show a gradient of Numba code, checked, timed and used to fit a curve.",
        description="Differentiate a small Numba function with pyzyme.grad, check the "
                    "gradient against central differences, time it, and fit the function's "
                    "parameters to data by gradient descent; a PNG plot of the fit is written.")
    dm.add_argument("--plot", default="pyzyme-demo.png", metavar="PATH",
                    help="where to write the plot (default: pyzyme-demo.png in the current "
                         "directory)")
    ex = sub.add_parser(
        "explain", help="Print how pyzyme sees a Numba function, instruction by instruction.",
        description=EXPLAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    ex.add_argument("target", metavar="FILE.py:FUNCTION",
                    help="the Python file and the function in it")
    ex.add_argument("--args", dest="arg_spec", metavar="SPEC", help=ARGS_HELP)
    ex.add_argument("--const", default="", metavar="NAMES",
                    help="float arguments to treat as constants, by name, separated by commas")
    op = sub.add_parser(
        "opt", help="Replace the __enzyme_* calls of an LLVM IR module by derivatives.",
        description="Read an LLVM IR module (text, or the bitcode of clang -c -emit-llvm), "
                    "replace each __enzyme_* call in it by the derivative it asks for, and "
                    "write the module as text: what Enzyme's opt plugin does.")
    op.add_argument("input", metavar="IN.ll", help="LLVM IR text or bitcode (- for standard "
                                                   "input)")
    op.add_argument("-o", dest="output", metavar="OUT.ll", help="where to write (default: "
                                                                 "standard output)")
    op.add_argument("--opt-level", type=int, default=2, choices=(0, 1, 2, 3),
                    help="the optimization level of the generated code (default 2)")
    sub.add_parser("cc", help="Compile C or C++ that calls __enzyme_autodiff into a program.",
                   add_help=False)
    sub.add_parser("run", help="Compile and run a C program that calls __enzyme_autodiff.",
                   add_help=False)
    args = parser.parse_args(argv)
    if args.command == "opt":
        return opt_command(args.input, args.output, args.opt_level)
    if args.command == "demo":
        return demo(plot_path=args.plot)
    if args.command == "explain":
        return explain_command(args.target, args.arg_spec, args.const.split(","))
    return 2  # pragma: no cover - argparse rejects unknown commands


def _versions(version: str) -> str:
    """``pyzyme 0.1.0 (numba 0.68.0, llvmlite 0.50.0, Python 3.11.7)``."""
    import platform

    import llvmlite
    import numba

    return (f"pyzyme {version} (numba {numba.__version__}, llvmlite {llvmlite.__version__}, "
            f"Python {platform.python_version()})")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
