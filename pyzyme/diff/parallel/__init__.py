"""Parallel regions: the derivatives of parallel loops (:mod:`pyzyme.diff.parallel.launch`)."""
