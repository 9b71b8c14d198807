"""Tokens of LLVM IR text.

One regular expression splits the whole text; whitespace and comments are skipped inside it,
and a run of line breaks (with blank or comment-only lines between) is one ``nl`` token. The
parser works on three parallel lists (kinds, texts, offsets), which is the fastest shape for
CPython to index.

Examples
--------
>>> kinds, texts, _ = tokenize("%x = fadd double %a, 1.0 ; sum\\n")
>>> list(zip(kinds, texts))[:4]
[('local', '%x'), ('punct', '='), ('word', 'fadd'), ('word', 'double')]
>>> kinds[6:]
['num', 'nl', 'nl', 'eof', 'eof']
"""

from __future__ import annotations

import re

from pyzyme.errors import ParseError

_NAME = r'(?:[-a-zA-Z$._0-9]+|"[^"\n]*")'
_TOKEN = re.compile(
    r"(?:[ \t\r]|;[^\n]*)*"          # whitespace and comments before the token
    r"(?:"
    r"(?P<nl>\n(?:[ \t\r]*(?:;[^\n]*)?\n)*)"
    rf"|(?P<label>{_NAME}:)"
    rf"|(?P<local>%{_NAME})"
    rf"|(?P<global>@{_NAME})"
    r"|(?P<meta>![-a-zA-Z$._0-9\\]+|!)"
    r"|(?P<hash>#[-a-zA-Z_0-9]+)"
    r'|(?P<cstr>c"[^"]*")'
    r'|(?P<str>"[^"]*")'
    r"|(?P<hex>[us]?0x[KLMHR]?[0-9A-Fa-f]+)"
    r"|(?P<num>[-+]?[0-9]+(?:\.[0-9]*(?:[eE][-+]?[0-9]+)?)?)"
    r"|(?P<word>[a-zA-Z_][-a-zA-Z$._0-9]*)"
    rf"|(?P<comdat>\${_NAME})"
    r"|(?P<punct>\.\.\.|[=,()\[\]{}<>*:|])"
    r"|(?P<end>\Z)"
    r")"
)


def tokenize(text: str) -> tuple[list[str], list[str], list[int]]:
    """Split ``text`` into tokens: ``(kinds, texts, offsets)``, ending with ``eof`` tokens.

    Raises :class:`~pyzyme.ParseError` at the first character that starts no token.
    """
    kinds: list[str] = []
    texts: list[str] = []
    offsets: list[int] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            at = _skip_space(text, pos)
            raise ParseError(f"unexpected character {text[at]!r}", text, at)
        kind = m.lastgroup
        if kind == "end":
            break
        kinds.append(kind)
        texts.append(m.group(kind))
        offsets.append(m.start(kind))
        pos = m.end()
    n = len(text)
    kinds += ["nl", "eof", "eof"]
    texts += ["\n", "", ""]
    offsets += [n, n, n]
    return kinds, texts, offsets


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r":
        pos += 1
    return pos
