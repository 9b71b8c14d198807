"""Derivatives of calls, both modes: one table from the kind of the callee's rule row to its
handlers (:mod:`pyzyme.diff.calls.dispatch`), and a module per kind of call."""
