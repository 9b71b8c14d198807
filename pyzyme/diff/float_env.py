"""Derivatives that flush subnormal numbers to zero (``Options.flush_subnormals``).

An x86 core computes with a subnormal operand or result (magnitude below 2.2e-308 in double
precision) through a microcode assist of about 150 cycles, where a normal operation takes a
few. Reverse mode meets subnormals where the primal does not: a weight ``exp(b - max(b))``
that underflows to a subnormal costs the primal one slow operation, but its adjoint scales
every adjoint of the term it weighs, which in GradBench's gmm is a D x D triangular solve's
worth of multiplications per data point and component (D = 64: the gradient took 3.6-4.5x
the primal, 2.1-2.7x with subnormals flushed, measured in one process).

:func:`install` makes each entry point of a derivative's module set the calling thread's
MXCSR bits FTZ (results that would be subnormal are zero) and DAZ (subnormal operands read as
zero) on entry and put the register back as it was before each return, as JAX sets them for
its CPU computations. LLVM may move arithmetic that touches no memory across those two calls
(it assumes the default floating-point environment outside ``strictfp`` functions): such an
operation then runs with IEEE subnormals, which is slower, not wrong. Worker threads of a
parallel region keep their own MXCSR (IEEE), and other processors are left as they are.
"""

from __future__ import annotations

from pyzyme.ir import IRBuilder, instructions as I, types as T
from pyzyme.ir.values import const_int
from pyzyme.runtime.target import triple

__all__ = ["install", "FLUSH_BITS", "supported"]

#: MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6) bits.
FLUSH_BITS = (1 << 15) | (1 << 6)


def supported() -> bool:
    """Whether derivatives can flush subnormals here: code for x86-64, whose MXCSR register
    holds the SSE and AVX arithmetic's modes."""
    return triple().startswith("x86_64")


def install(module, entries) -> list:
    """Make the functions of ``module`` named in ``entries`` run with subnormals flushed to
    zero, restoring the caller's mode on return; returns the functions changed (none where
    :func:`supported` is false)."""
    if not supported():
        return []
    names = set(entries)
    changed = [fn for fn in module.functions if fn.name in names and not fn.is_declaration]
    if not changed:
        return []
    mode_type = T.FunctionType(T.void, [T.ptr])
    read = module.declare("llvm.x86.sse.stmxcsr", mode_type)
    write = module.declare("llvm.x86.sse.ldmxcsr", mode_type)
    for fn in changed:
        _wrap(fn, read, write)
    return changed


def _wrap(fn, read, write) -> None:
    """Set FTZ and DAZ at the top of ``fn`` and restore the saved register before each of its
    returns."""
    entry = fn.blocks[0]
    b = IRBuilder(entry)
    saved = b.entry_alloca(T.i32, align=4, name="mxcsr.saved")
    flushing = b.entry_alloca(T.i32, align=4, name="mxcsr.flushing")
    # After the entry block's stack slots, so that they stay the fixed frame's.
    b.position_before(next(i for i in entry.instructions if not isinstance(i, I.Alloca)))
    b.call(read, [saved])
    mode = b.load(T.i32, saved, align=4, name="mxcsr")
    b.store(b.or_(mode, const_int(T.i32, FLUSH_BITS), name="mxcsr.flush"), flushing, align=4)
    b.call(write, [flushing])
    for block in fn.blocks:
        if isinstance(block.terminator, I.Ret):
            b.position_before(block.terminator)
            b.call(write, [saved])
