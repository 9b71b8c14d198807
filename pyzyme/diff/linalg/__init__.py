"""BLAS and LAPACK derivatives, by the op of the :class:`~pyzyme.rules.spec.Blas` row (chosen in
:mod:`pyzyme.diff.calls.dispatch`); what their call sites share is in
:mod:`pyzyme.diff.linalg.callsite`."""
