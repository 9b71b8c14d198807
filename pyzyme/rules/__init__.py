"""Derivative rules as data; see :mod:`pyzyme.rules.expr` and :mod:`pyzyme.rules.table`."""
