"""Spelling of LLVM identifiers: when a name needs quotes, and how it is escaped.

Names are stored unescaped; these functions turn them into the text LLVM reads.

Examples
--------
>>> local_ref("x.1")
'%x.1'
>>> global_ref(".const.missing Environment: f")
'@".const.missing Environment: f"'
>>> unescape(r'a\\22b')
'a"b'
"""

from __future__ import annotations

import re

from pyzyme import naming

_PLAIN = re.compile(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*\Z")
_ESCAPE = re.compile(r'\\([0-9A-Fa-f]{2}|\\)')
#: A character :func:`escape` writes as ``\XX``: a quote, a backslash, a control character or
#: any beyond ASCII.
_ESCAPED = re.compile(r'["\\\x00-\x1f\x7f-\U0010ffff]')


def quote(name: str) -> str:
    """``name`` as it appears after ``%`` or ``@``: bare when LLVM allows it, else quoted."""
    if _PLAIN.match(name):
        return name
    return '"' + escape(name) + '"'


def escape(text: str) -> str:
    """Escape a string the way LLVM prints quoted names and ``c"..."`` strings."""
    if not _ESCAPED.search(text):
        return text  # the common case: Numba's long mangled names, printed again and again
    out = []
    for ch in text:
        code = ord(ch)
        if ch == '"' or ch == "\\" or code < 0x20 or code >= 0x7F:
            out.append(f"\\{code:02X}" if code < 0x100 else ch)
        else:
            out.append(ch)
    return "".join(out)


def unescape(text: str) -> str:
    """Undo :func:`escape`: ``\\XX`` becomes the character XX, ``\\\\`` a backslash."""
    if "\\" not in text:
        return text

    def repl(m: re.Match) -> str:
        code = m.group(1)
        return "\\" if code == "\\" else chr(int(code, 16))

    return _ESCAPE.sub(repl, text)


def local_ref(name: str) -> str:
    return "%" + quote(name)


def global_ref(name: str) -> str:
    """``@name``; an all-digit name is an unnamed global's number (``@0``) and stays bare."""
    if name.isdigit():
        return "@" + name
    return "@" + quote(name)


def label_def(name: str) -> str:
    """A basic block's label as it starts the block (``name:``)."""
    return quote(name) + ":"


_MANGLED_PART = re.compile(r"(\d+)")
# The prefixes pyzyme's derivatives of a function get (pyzyme.naming), in words.
_DERIVED = {"": "", naming.augmented_function(""): "the forward sweep of ",
            naming.reverse_function("", split=True): "the reverse sweep of ",
            naming.reverse_function(""): "the reverse derivative of ",
            naming.forward_function("", 1): "the forward derivative of "}
_NUMBA_ESCAPE = re.compile(r"_([0-9a-f]{2})")


def readable(name: str) -> str:
    """A mangled C++ or Numba name shortened for people: ``_ZN8__main__1fB2v1...E`` ->
    ``__main__.f``; any other name is returned as it is.

    >>> readable("_ZN8__main__12_3clambda_3eB2v1B38c8tJTIeFIjxB2IKSgI4CrvQClQZ6FczSBAA_3dEd")
    '__main__.<lambda>'
    >>> readable("_ZN8__main__5my_abB2v1E")
    '__main__.my_ab'
    >>> readable("sqrt")
    'sqrt'
    >>> readable("__gufunc__._ZN13_3cdynamic_3e36__numba_parfor_gufunc_0x7f01B2v7E.split.0")
    'the body of a prange / parallel=True loop'
    >>> readable("augmented___gufunc__._ZN13_3cdynamic_3e36__numba_parfor_gufunc_0x7f01B2v7E")
    'the forward sweep of the body of a prange / parallel=True loop'
    """
    head, gufunc, _ = name.partition("__gufunc__.")
    if gufunc and "__numba_parfor_gufunc" in name and head in _DERIVED:
        # Numba's outlined parfor, or a derivative pyzyme made of it (naming's prefixes)
        return _DERIVED[head] + "the body of a prange / parallel=True loop"
    if not name.startswith("_ZN"):
        return name
    parts, pos = [], 3
    while pos < len(name) and name[pos].isdigit():
        m = _MANGLED_PART.match(name, pos)
        length = int(m.group(1))
        start = m.end()
        parts.append(name[start:start + length])
        pos = start + length
    if not parts:
        return name
    return ".".join(_NUMBA_ESCAPE.sub(_unescape_numba, p) for p in parts)


def _unescape_numba(m: re.Match) -> str:
    # Numba writes characters outside [A-Za-z0-9_] as _XX; an underscore followed by two hex
    # digits that would decode to an identifier character is the name's own text.
    code = int(m.group(1), 16)
    ch = chr(code)
    return m.group(0) if code >= 0x80 or ch.isalnum() or ch == "_" else ch
