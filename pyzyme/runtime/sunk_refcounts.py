"""Reference-count calls that LLVM sank into a join, moved back up for Numba's pruner.

SimplifyCFG sinks instructions that every predecessor of a block ends with into the block, a
phi choosing the operand: two exits that decrement the counts of different arrays last
(``NRT_decref(r)`` on one path, ``NRT_decref(A)`` on the other) become one
``NRT_decref(phi [r], [A])`` at the join. llvmlite's refprune pass pairs an ``NRT_incref`` with
the ``NRT_decref``\\ s of the same value, and a phi is none of them, so the pair on each array
argument survives, in the primal and mirrored onto the shadow in its derivative: GradBench's
det, whose recursive ``_minor`` returns through such a join, paid 12 atomic count updates per
call of its augmented sweep (6 in the primal).

:func:`unsink_refcounts` undoes the sinking where it changes nothing but the order of count
updates: a count call whose operand is a phi of its own block, with nothing before the call in
that block but phis and other count calls, each predecessor ending in an unconditional branch
to it, becomes one call per predecessor on that predecessor's incoming value, just before its
branch. Between the old and the new place only the branch, phis and count calls run, so no use
of the array moves across a release.
"""

from __future__ import annotations

import re

__all__ = ["unsink_refcounts"]

_LABEL = re.compile(r'^("(?:[^"\\]|\\.)*"|[-\w.$]+):')
_COUNT = re.compile(r"^(\s+(?:tail )?call (?:fastcc )?void @NRT_(?:incref|decref)[\w.]*\(ptr "
                    r"(?:[a-z_]+(?:\([^)]*\))? )*)(%[-\w.$]+|%\"[^\"]+\")(\).*)$")
_PHI = re.compile(r"^\s+(%[-\w.$]+|%\"[^\"]+\") = phi (\S+) (.*)$")
_INCOMING = re.compile(r"\[\s*([^,\]]+?),\s*%([^\s\]]+)\s*\]")
_BR = re.compile(r"^\s+br label %(\S+)\s*(?:,.*)?$")


def unsink_refcounts(text: str) -> str:
    """``text`` (an LLVM module) with each count call on a phi that LLVM sank into a join
    moved back into the join's predecessors, where that only reorders count updates.

    Examples
    --------
    >>> text = '''define void @f(ptr %a, ptr %b, i1 %c) {
    ... entry:
    ...   br i1 %c, label %left, label %right
    ... left:
    ...   br label %join
    ... right:
    ...   br label %join
    ... join:
    ...   %p = phi ptr [ %a, %left ], [ %b, %right ]
    ...   tail call fastcc void @NRT_decref(ptr %p)
    ...   ret void
    ... }'''
    >>> print(unsink_refcounts(text))
    define void @f(ptr %a, ptr %b, i1 %c) {
    entry:
      br i1 %c, label %left, label %right
    left:
      tail call fastcc void @NRT_decref(ptr %a)
      br label %join
    right:
      tail call fastcc void @NRT_decref(ptr %b)
      br label %join
    join:
      %p = phi ptr [ %a, %left ], [ %b, %right ]
      ret void
    }
    """
    lines = text.split("\n")
    out: list[str] = []
    start = 0
    for i, line in enumerate(lines):
        if line.startswith("define "):
            out.extend(lines[start:i])
            start = i
        elif line.startswith("}") and start < len(lines) and lines[start].startswith("define "):
            out.extend(_function(lines[start:i + 1]))
            start = i + 1
    out.extend(lines[start:])
    return "\n".join(out)


def _blocks(body: list[str]) -> list[tuple[str, list[str]]]:
    """The function's blocks as (label, lines): the first is the unlabelled entry when the
    body does not start with a label."""
    blocks: list[tuple[str, list[str]]] = [("", [])]
    for line in body:
        m = _LABEL.match(line)
        if m:
            blocks.append((m.group(1).strip('"'), []))
        elif line.strip():
            blocks[-1][1].append(line)
    return [b for b in blocks if b[0] or b[1]]


def _function(lines: list[str]) -> list[str]:
    header, body, close = lines[0], lines[1:-1], lines[-1]
    if not any("@NRT_" in line and " phi " not in line for line in body):
        return lines
    blocks = _blocks(body)
    labels = {label: k for k, (label, _) in enumerate(blocks)}
    moved = False
    for label, insts in blocks:
        phis: dict[str, list[tuple[str, str]]] = {}
        k = 0
        while k < len(insts):
            line = insts[k]
            phi = _PHI.match(line)
            if phi:
                if phi.group(2) == "ptr":
                    phis[phi.group(1)] = _INCOMING.findall(phi.group(3))
                k += 1
                continue
            count = _COUNT.match(line)
            if count is None:
                break
            incoming = phis.get(count.group(2))
            if incoming and _unsink(blocks, labels, label, incoming, count):
                del insts[k]
                moved = True
                continue
            k += 1
    if not moved:
        return lines
    out = [header]
    for label, insts in blocks:
        if label:
            out.append(f"{label}:" if re.fullmatch(r"[-\w.$]+", label) else f'"{label}":')
        out.extend(insts)
    out.append(close)
    return out


def _unsink(blocks, labels, label, incoming, count) -> bool:
    """Put a copy of the count call ``count`` on each incoming value at the end of its
    predecessor, if every predecessor ends in ``br label %<label>`` and is listed once."""
    preds = [pred.strip('"') for _, pred in incoming]
    if len(set(preds)) != len(preds) or not all(p in labels for p in preds):
        return False
    for pred in preds:
        insts = blocks[labels[pred]][1]
        m = _BR.match(insts[-1]) if insts else None
        if m is None or m.group(1).strip('"') != label:
            return False
    for value, pred in incoming:
        insts = blocks[labels[pred.strip('"')]][1]
        insts.insert(len(insts) - 1, f"{count.group(1)}{value.strip()}{count.group(3)}")
    return True
