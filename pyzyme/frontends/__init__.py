"""Frontends: turn a function written in some language into LLVM IR that pyzyme can read.

- :mod:`pyzyme.frontends.numba` captures ``@njit`` functions.
- :mod:`pyzyme.frontends.c` compiles C and C++ through ``ziglang``'s bundled clang and lowers
  Enzyme's ``__enzyme_*`` interface.
- :mod:`pyzyme.frontends.llvm_ad` and :mod:`pyzyme.frontends.ad_copy` differentiate any LLVM IR
  module (the C frontend and :mod:`pyzyme.llvm` use them); :mod:`pyzyme.frontends.ir_files` reads
  ``.ll`` and ``.bc`` files.
"""
