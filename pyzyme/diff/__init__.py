"""Derivative code generation.

- :mod:`pyzyme.diff.forward`: forward mode (tangents, batch lanes, shadow memory);
- :mod:`pyzyme.diff.reverse`: reverse mode (the augmented forward sweep, the reverse sweep, adjoints,
  control flow reversed), combined and split;
- :mod:`pyzyme.diff.tape`: what the forward sweep keeps for the reverse sweep;
- :mod:`pyzyme.diff.calls`: derivatives of calls (callees with bodies, rule rows, registered and
  custom derivatives, vector intrinsics);
- :mod:`pyzyme.diff.linalg`: BLAS and LAPACK derivatives;
- :mod:`pyzyme.diff.emit`, :mod:`pyzyme.diff.runtime_activity`, :mod:`pyzyme.diff.side_stack`:
  what both modes share (emitting rule expressions, run-time activity checks, recursion stacks).

IR rewrites that compute no derivative live in :mod:`pyzyme.transforms`.
"""
