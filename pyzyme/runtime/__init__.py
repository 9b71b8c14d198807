"""Runtime: LLVM pass pipelines, verification and JIT compilation through llvmlite and Numba.

- :mod:`~pyzyme.runtime.target` -- the target machine, triple and data layout (Numba's own).
- :mod:`~pyzyme.runtime.modules` -- parsing, verifying and relinking llvmlite modules.
- :mod:`~pyzyme.runtime.passes` -- the pre-AD pipeline and the post-AD optimization levels.
- :mod:`~pyzyme.runtime.jit` -- :func:`compile_module`: verify, optimize, JIT into Numba's engine.
"""

from pyzyme.runtime.jit import CompiledModule, compile_module

__all__ = ["CompiledModule", "compile_module"]
