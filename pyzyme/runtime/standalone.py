"""Whole programs and plain C functions in a JIT engine of their own (``pyzyme run``, ``lli``).

Derivatives of Numba functions live in Numba's engine (:mod:`pyzyme.runtime.jit`), where every
symbol is shared. A C program brings its own ``main`` and helpers, whose names would clash with
the next program's: each gets a separate MCJIT engine. External symbols (libc, libm) resolve
to the running process's; a symbol it lacks is reported before any code runs (MCJIT would
abort the process on it).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence

import llvmlite.binding as llvm

from pyzyme.errors import FrontendError

__all__ = ["Program", "ctype_of"]


class Program:
    """``text`` compiled into its own JIT engine.

    Examples
    --------
    >>> p = Program("define i32 @main(i32 %argc, ptr %argv) {\\n  ret i32 7\\n}")
    >>> p.run_main()
    7
    """

    def __init__(self, text: str, name: str = "program", opt_level: int = 2) -> None:
        from pyzyme.runtime import passes
        from pyzyme.runtime.modules import parse, verify

        module = parse(text, what=name)
        verify(module, what=name)
        missing = _unresolved(module)
        if missing:
            raise FrontendError(
                f"{name} uses symbols this process does not have: {', '.join(missing[:8])}",
                hint="link it into an executable instead (pyzyme cc), which links the C++ "
                     "runtime and other libraries")
        if opt_level:
            passes.optimize(module, opt_level)
        # The engine owns the target machine it is given: a fresh one, never Numba's.
        self.engine = llvm.create_mcjit_compiler(module, _target_machine())
        self.engine.finalize_object()
        self.engine.run_static_constructors()
        self.module = module

    def address(self, name: str) -> int:
        return self.engine.get_function_address(name)

    def function(self, name: str, restype, argtypes: Sequence):
        """A ctypes function for ``name`` (it keeps the engine alive)."""
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))
        fn._pyzyme_program = self
        return fn

    def run_main(self, argv: Sequence[str] = ()) -> int:
        """Call ``main(argc, argv)`` (argv[0] is ``"program"``) and flush C's stdio."""
        fn = self.module.get_function("main")
        args = [b"program", *(a.encode() for a in argv)]
        arr = (ctypes.c_char_p * (len(args) + 1))(*args, None)
        if not list(fn.arguments):
            code = ctypes.CFUNCTYPE(ctypes.c_int)(self.address("main"))()
        else:
            code = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)(
                self.address("main"))(len(args), ctypes.cast(arr, ctypes.c_void_p))
        _flush()
        return code


def _target_machine() -> llvm.TargetMachine:
    """For the CPU Numba compiles for (NUMBA_CPU_NAME honoured), whose target machine
    :func:`pyzyme.runtime.passes.optimize` has already optimized the program for."""
    from pyzyme.runtime import target as numba_target  # imports Numba: only when used

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=numba_target.cpu_name(),
                                        features=numba_target.cpu_features(),
                                        opt=2, codemodel="jitdefault")


def _flush() -> None:
    libc = ctypes.CDLL(None)
    libc.fflush(None)
    sys.stdout.flush()


def _unresolved(module: llvm.ModuleRef) -> list[str]:
    out = []
    for g in [*module.functions, *module.global_variables]:
        if g.is_declaration and not g.name.startswith("llvm.") and \
                not llvm.address_of_symbol(g.name):
            out.append(g.name)
    return out


_CTYPES = {"double": ctypes.c_double, "float": ctypes.c_float, "i1": ctypes.c_bool,
           "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
           "i64": ctypes.c_int64, "ptr": ctypes.c_void_p, "void": None}


def ctype_of(ty):
    """The ctypes type of a pyzyme.ir type: scalars, pointers, and structs and arrays of them.

    >>> from pyzyme import ir
    >>> ctype_of(ir.double).__name__
    'c_double'
    >>> [name for name, _ in ctype_of(ir.parse_type("{ double, i64 }"))._fields_]
    ['f0', 'f1']
    """
    from pyzyme.ir import types as T

    key = str(ty)
    if key in _CTYPES:
        return _CTYPES[key]
    if isinstance(ty, T.ArrayType):
        return ctype_of(ty.element) * ty.count
    if isinstance(ty, (T.StructType, T.IdentifiedStructType)) and ty.elements is not None:
        fields = [(f"f{i}", ctype_of(e)) for i, e in enumerate(ty.elements)]
        return type("Struct", (ctypes.Structure,), {"_fields_": fields})
    raise FrontendError(f"no ctypes type for {ty}")
