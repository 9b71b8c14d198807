"""Python source lines of operations in Numba-compiled code, for error messages.

Numba attaches line information to its IR only when compiling with ``debug=True``. When pyzyme
cannot differentiate a call, it compiles a debug copy of the function (once, at error time, so
nothing is spent when differentiation succeeds) and reads the line of that call.
"""

from __future__ import annotations

import re
import warnings

__all__ = ["line_of_call"]


def line_of_call(dispatcher, argtypes, symbol: str) -> int | None:
    """The Python line of the first call to ``symbol`` in ``dispatcher`` compiled for
    ``argtypes``, or None when Numba cannot say."""
    import numba

    py_func = getattr(dispatcher, "py_func", None)
    if py_func is None:
        return None
    options = {k: v for k, v in dispatcher.targetoptions.items()
               if k not in ("cache", "nopython", "debug", "boundscheck")}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            debug_copy = numba.njit(debug=True, **options)(py_func)
            debug_copy.compile(tuple(argtypes))
        text = debug_copy.overloads[tuple(argtypes)].library.get_llvm_str()
    except Exception:  # noqa: BLE001 - a line number is a courtesy; never mask the real error
        return None
    call = re.search(r"call [^\n]*@\"?" + re.escape(symbol) + r"\"?\([^\n]*!dbg (![0-9]+)", text)
    if call is None:
        return None
    location = re.search("^" + re.escape(call.group(1)) + r" = !DILocation\(line: (\d+)", text,
                         re.M)
    return int(location.group(1)) if location else None
