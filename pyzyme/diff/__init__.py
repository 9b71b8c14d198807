"""Derivative code generation.

- :mod:`pyzyme.diff.forward`: forward mode (tangents, batch lanes, shadow memory);
- :mod:`pyzyme.diff.reverse`: reverse mode (the augmented forward sweep, the reverse sweep,
  adjoints, control flow reversed), combined and split;
- :mod:`pyzyme.diff.tape`: what the forward sweep keeps for the reverse sweep (caches, the tape
  pool, deferred releases);
- :mod:`pyzyme.diff.calls`: derivatives of calls, chosen by the kind of the callee's rule row
  from one table for both modes (:mod:`pyzyme.diff.calls.dispatch`): callees with bodies, rule
  rows, registered and custom derivatives, vector intrinsics;
- :mod:`pyzyme.diff.linalg`: BLAS and LAPACK derivatives;
- :mod:`pyzyme.diff.context`: the state of one derivative being generated and the handler API
  over it (what handlers may call); :mod:`pyzyme.diff.signature`: the interfaces of derivatives;
- :mod:`pyzyme.diff.emit`, :mod:`pyzyme.diff.runtime_checks`, :mod:`pyzyme.diff.side_stack`,
  :mod:`pyzyme.diff.pointers`, :mod:`pyzyme.diff.leaves`, :mod:`pyzyme.diff.memory_calls`: what
  both modes share (emitting rule expressions, run-time activity checks, recursion stacks, where
  pointers point, what types hold, the memory calls derivative code makes).

Generators import handlers, handlers import neither generator: a handler reaches the
generator's work (a callee's derivative, values recomputed or cached) through the context.
IR rewrites that compute no derivative live in :mod:`pyzyme.transforms`.
"""
