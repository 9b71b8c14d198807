"""Tokens of LLVM IR text.

One regular expression splits the whole text; whitespace and comments are skipped inside it,
and a run of line breaks (with blank or comment-only lines between) is one ``nl`` token, none
inside parentheses or brackets (a parameter list broken over lines, as LLVM allows). The
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
    r"|(?P<error>.)"                 # anything else: reported, never skipped
    r")"
)


def tokenize(text: str) -> tuple[list[str], list[str], list[int]]:
    """Split ``text`` into tokens: ``(kinds, texts, offsets)``, ending with ``eof`` tokens.

    Raises :class:`~pyzyme.ParseError` at the first character that starts no token.
    """
    kinds: list[str] = []
    texts: list[str] = []
    offsets: list[int] = []
    add_kind, add_text, add_offset = kinds.append, texts.append, offsets.append
    depth = 0   # of open parentheses and brackets: a statement does not end inside them
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        start, end = m.span(kind)
        if kind == "punct":
            c = text[start]
            if c in "([":
                depth += 1
            elif c in ")]" and depth:
                depth -= 1
        elif kind == "nl":
            if depth:
                continue
        elif kind == "end":
            break
        elif kind == "error":
            raise ParseError(f"unexpected character {text[start]!r}", text, start)
        add_kind(kind)
        add_text(text[start:end])
        add_offset(start)
    n = len(text)
    kinds += ["nl", "eof", "eof"]
    texts += ["\n", "", ""]
    offsets += [n, n, n]
    return kinds, texts, offsets

