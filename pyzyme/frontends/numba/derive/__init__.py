"""Derivative builders for ``@njit`` functions: forward, reverse and split reverse mode.

Each captures the function, generates its derivative with an entry point in Numba's calling
convention, and compiles it; :mod:`pyzyme.api` keeps the results (plans) and marshals the
arguments of their calls.
"""
