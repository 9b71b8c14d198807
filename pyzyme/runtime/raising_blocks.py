"""Numba's raising blocks, marked again after optimization for its reference-count pruner.

Numba marks the store of a raised exception into a function's ``excinfo`` argument with
``!numba_exception_output``; llvmlite's refprune pass (its fanout-raise subpass) treats a block
holding such a store as one that raises, where Numba leaks the references it holds, so an
``NRT_incref`` whose ``NRT_decref``\\ s cover every path that does not raise is removed with
them. Once a callee is inlined, the marked store writes the caller's local copy of the callee's
``excinfo``; SROA forwards the stored value to the caller's own, unmarked store (Numba's
propagation of a callee's error), and the marked one is deleted. The pruner then sees a path
that returns without a decref and keeps every pair: the residual of GradBench's ba, whose one
raise (a division by zero) comes from an inlined callee, kept 5 pairs on its arguments, which its
derivatives mirror onto their shadows.

:func:`mark_raising_stores` marks such stores again, only where the block certainly raises: it
stores a value other than ``null`` into the function's ``excinfo`` argument and returns, at once
or through a block of phis and the return, an error status (Numba's ``-1`` or a user exception's
``>= 1``). A store inside a ``try`` block whose exception is caught goes on to the handler, not
to a return, and stays unmarked: a block wrongly taken for a raising one would lose a count the
handler's path needs.
"""

from __future__ import annotations

import re

#: The metadata kind llvmlite's refprune pass recognizes a raising block by.
EXCEPTION_OUTPUT = "numba_exception_output"

_LABEL = re.compile(r'^("(?:[^"\\]|\\.)*"|[-\w.$]+):')
_EXCINFO = re.compile(r"\bptr\b[^,]*%excinfo[,)]")
_STORE = re.compile(r"^\s+store ptr (\S+), ptr %excinfo(?:,|$)")
_RET = re.compile(r"^\s+ret i32 (\S+)\s*$")
_BR = re.compile(r"^\s+br label %(\S+)\s*$")
_PHI = re.compile(r"^\s+(%\S+) = phi i32 (.*)$")
_INCOMING = re.compile(r"\[\s*([^,\]]+?),\s*%([^\s\]]+)\s*\]")
_METADATA_ID = re.compile(r"^!(\d+) = ", re.M)


def mark_raising_stores(text: str) -> str:
    """``text`` (an LLVM module) with ``!numba_exception_output`` on each store of an exception
    into ``excinfo`` in a block that raises, where optimization has lost it.

    Examples
    --------
    >>> text = '''define i32 @f(ptr %retptr, ptr %excinfo, i1 %c) {
    ... entry:
    ...   br i1 %c, label %bad, label %common.ret
    ... bad:
    ...   store ptr @exc, ptr %excinfo, align 8
    ...   br label %common.ret
    ... common.ret:
    ...   %status = phi i32 [ 0, %entry ], [ 1, %bad ]
    ...   ret i32 %status
    ... }'''
    >>> print(mark_raising_stores(text).splitlines()[4])
      store ptr @exc, ptr %excinfo, align 8, !numba_exception_output !0
    """
    lines = text.split("\n")
    marked: list[int] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("define ") and _EXCINFO.search(lines[i]):
            end = lines.index("}", i)
            marked += _raising_stores(lines, i + 1, end)
            i = end
        i += 1
    if not marked:
        return text
    ids = [int(n) for n in _METADATA_ID.findall(text)]
    node = f"!{max(ids, default=-1) + 1}"
    for k in marked:
        lines[k] += f", !{EXCEPTION_OUTPUT} {node}"
    return "\n".join(lines) + f"\n{node} = !{{i1 true}}\n"


def _raising_stores(lines: list[str], start: int, end: int) -> list[int]:
    """The line numbers, in ``lines[start:end]`` (one function's body), of the unmarked stores
    of an exception in blocks that raise."""
    blocks: dict[str, list[int]] = {}
    order: list[str] = []
    name = ""  # an unnamed entry block
    for k in range(start, end):
        label = _LABEL.match(lines[k])
        if label:
            name = label.group(1).strip('"')
        elif lines[k].startswith("  "):
            if name not in blocks:
                blocks[name] = []
                order.append(name)
            blocks[name].append(k)
    found = []
    for name in order:
        body = blocks[name]
        stores = [k for k in body if (m := _STORE.match(lines[k])) and m.group(1) != "null"
                  and EXCEPTION_OUTPUT not in lines[k]]
        if stores and _returns_error(lines, blocks, name):
            found += stores
    return found


def _returns_error(lines: list[str], blocks: dict[str, list[int]], name: str) -> bool:
    """Whether block ``name`` returns an error status, itself or through a block of phis and
    ``ret`` alone."""
    last = lines[blocks[name][-1]]
    ret = _RET.match(last)
    if ret:
        return _is_error(lines, blocks[name], ret.group(1), None)
    br = _BR.match(last)
    if not br:
        return False
    target = blocks.get(br.group(1).strip('"'))
    if not target:
        return False
    ret = _RET.match(lines[target[-1]])
    if not ret or not all(_PHI.match(lines[k]) for k in target[:-1]):
        return False
    return _is_error(lines, target, ret.group(1), name)


def _is_error(lines: list[str], body: list[int], value: str, edge: str | None) -> bool:
    """Whether the ``i32`` ``value`` returned in ``body`` is an error status: a constant, or a
    phi of ``body`` whose value from block ``edge`` (from every block where ``edge`` is None) is
    one."""
    if not value.startswith("%"):
        return _is_error_constant(value)
    for k in body:
        phi = _PHI.match(lines[k])
        if phi and phi.group(1) == value:
            incoming = _INCOMING.findall(phi.group(2))
            chosen = [v for v, block in incoming if edge is None or block.strip('"') == edge]
            return bool(chosen) and all(_is_error_constant(v) for v in chosen)
    return False


def _is_error_constant(value: str) -> bool:
    """Numba's status for a raised exception: ``-1`` (a Python error) or a user exception's id
    (``>= 1``); ``0`` is success, ``-2`` a return of None, ``-3`` StopIteration."""
    try:
        code = int(value)
    except ValueError:
        return False
    return code == -1 or code >= 1
