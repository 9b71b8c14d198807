"""Frontends: turn a function written in some language into LLVM IR that pyzyme can read.

- :mod:`pyzyme.frontends.numba` captures ``@njit`` functions.
- :mod:`pyzyme.frontends.clang` compiles C and C++ through ``ziglang``'s bundled clang.
"""
