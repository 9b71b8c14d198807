"""Float slots of structured values, for finite differences over them.

``leaves(x)`` lists the floats of ``x`` in a fixed order (floats, float arrays, the float fields
of records and arrays of records, tuples and namedtuples, jitclass fields -- nested instances and
linked lists included); ``fill(x, values)`` builds a fresh value shaped like ``x`` holding
``values`` in those slots, every other leaf (integers, bools, strings, None) kept from ``x``.
A derivative given back in the structure of ``x`` is read with ``leaves`` too.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numba.experimental.jitclass import _box

from pyzyme import make_zero


def _float_fields(dtype: np.dtype) -> list[str]:
    """Fields holding floats: float scalars and subarrays, and nested records."""
    return [n for n in dtype.names
            if dtype.fields[n][0].base.kind == "f" or dtype.fields[n][0].names]


def leaves(x) -> np.ndarray:
    """The float slots of ``x``, in order, as one float64 vector."""
    out: list[float] = []
    _collect(x, out)
    return np.array(out, dtype=np.float64)


def _collect(x, out: list) -> None:
    if isinstance(x, (float, np.floating)):
        out.append(float(x))
    elif isinstance(x, tuple):
        for v in x:
            _collect(v, out)
    elif isinstance(x, np.void):
        for n in _float_fields(x.dtype):
            if x.dtype.fields[n][0].names:
                _collect(x[n], out)
            else:
                out.extend(np.asarray(x[n], dtype=np.float64).reshape(-1))
    elif isinstance(x, np.ndarray) and x.dtype.names:
        for rec in x.reshape(-1):
            _collect(rec, out)
    elif isinstance(x, np.ndarray) and x.dtype.kind == "f":
        out.extend(x.astype(np.float64).reshape(-1))
    elif isinstance(x, _box.Box):
        for name in type(x)._numba_type_.struct:
            _collect(getattr(x, name), out)


def fill(x, values) -> object:
    """A fresh value shaped like ``x`` whose float slots hold ``values`` (in ``leaves`` order)."""
    it = iter(np.asarray(values, dtype=np.float64))
    out = _fill(x, it)
    rest = list(it)
    assert not rest, f"{len(rest)} values left over"
    return out


def _fill(x, it: Iterator):
    if isinstance(x, (float, np.floating)):
        return type(x)(next(it)) if isinstance(x, np.floating) else float(next(it))
    if isinstance(x, tuple):
        items = [_fill(v, it) for v in x]
        return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
    if isinstance(x, np.void):
        holder = np.zeros(1, x.dtype)
        holder[0] = x
        rec = holder[0]
        for n in _float_fields(x.dtype):
            if x.dtype.fields[n][0].names:
                rec[n] = _fill(x[n], it)
                continue
            shape = np.shape(x[n])
            vals = [next(it) for _ in range(int(np.prod(shape)))]
            rec[n] = np.array(vals).reshape(shape)
        return rec
    if isinstance(x, np.ndarray) and x.dtype.names:
        out = x.copy()
        for i, rec in enumerate(x.reshape(-1)):
            out.reshape(-1)[i] = _fill(rec, it)
        return out
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return np.array([next(it) for _ in range(x.size)], dtype=x.dtype).reshape(x.shape)
    if isinstance(x, _box.Box):
        out = make_zero(x)
        for name in type(x)._numba_type_.struct:
            setattr(out, name, _fill(getattr(x, name), it))
        return out
    return x
