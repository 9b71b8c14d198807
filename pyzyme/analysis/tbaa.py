"""What clang's type-based alias analysis tags (``!tbaa``) say a load or store accesses.

C and C++ let a program read memory only as the type it holds (or as characters); clang records
that type on each access: ``load i64, ptr %p, !tbaa !13`` with ``!13 = !{!14, !14, i64 0}`` and
``!14 = !{!"long long", !15, i64 0}`` reads a ``long long``. Enzyme's type analysis takes these
as facts; pyzyme consults them where its own analysis cannot tell integer bits from float bits
(a struct's integer field copied in reverse mode). Character types (which may alias anything)
and struct accesses say nothing. Numba's IR carries no such tags.

Both of clang's formats are read: the default one above, and the one ``-Xclang
-new-struct-path-tbaa`` writes, whose type nodes carry their size before their name
(``!14 = !{!15, i64 8, !"long long"}``) and whose tags their access size after the offset
(``!13 = !{!14, !14, i64 0, i64 8}``).

Examples
--------
>>> from pyzyme.ir import parse_module
>>> m = parse_module('''define i64 @f(ptr %p) {
...   %v = load i64, ptr %p, !tbaa !1
...   ret i64 %v
... }
... !0 = !{!"Simple C/C++ TBAA"}
... !1 = !{!2, !2, i64 0}
... !2 = !{!"long long", !3, i64 0}
... !3 = !{!"omnipotent char", !0, i64 0}''')
>>> access_kind(next(m.get_function("f").instructions()))
'integer'
>>> m = parse_module('''define double @f(ptr %p) {
...   %v = load double, ptr %p, !tbaa !1
...   ret double %v
... }
... !0 = !{!"Simple C++ TBAA"}
... !1 = !{!2, !2, i64 0, i64 8}
... !2 = !{!3, i64 8, !"double"}
... !3 = !{!0, i64 1, !"omnipotent char"}''')
>>> access_kind(next(m.get_function("f").instructions()))
'float'

Clang 20 and later name a pointer's pointee in its tag: ``"p1 float"`` for a ``float *``,
which :func:`pointee_kind` reads.
"""

from __future__ import annotations

import re
import weakref

__all__ = ["access_kind", "pointee_kind"]

_INTEGERS = frozenset({"bool", "_Bool", "short", "int", "long", "long long", "__int128",
                       "wchar_t", "char8_t", "char16_t", "char32_t"})
_FLOATS = frozenset({"float", "double", "long double", "_Float16", "__bf16", "__fp16",
                     "_Float128", "__float128"})
_NODE = re.compile(r"(!\d+)\s*=\s*(?:distinct\s+)?(!\{.*\})\s*$")
_TAG = re.compile(r"!\{(!\d+),\s*(!\d+),\s*i64\s+\d+")
_NAME = re.compile(r'!\{(?:!\d+,\s*i64\s+\d+,\s*)?!"((?:[^"\\]|\\.)*)"')

_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def access_kind(inst) -> str | None:
    """``"integer"``, ``"float"`` or ``"pointer"``: what the ``!tbaa`` tag of load or store
    ``inst`` says it accesses; None without a tag, or for a character or aggregate type."""
    text = _access_type(inst)
    if text is None:
        return None
    if text in _INTEGERS:
        return "integer"
    if text in _FLOATS:
        return "float"
    if text in ("any pointer", "vtable pointer") or re.match(r"(any )?p\d+ ", text):
        return "pointer"
    return None


def pointee_kind(inst) -> str | None:
    """For a load or store of a pointer whose tag names its type (clang's ``"p1 float"`` for
    a ``float *``): ``"float"`` or ``"double"``, ``"integer"``, ``"pointer"`` (``"p2 ..."``),
    what it points to; None for a character, aggregate or untyped pointer, or no tag."""
    m = re.fullmatch(r"p(\d+) (.+)", _access_type(inst) or "")
    if m is None:
        return None
    if int(m.group(1)) > 1:
        return "pointer"
    name = m.group(2)
    if name in ("float", "double"):
        return name
    return "integer" if name in _INTEGERS else None


def _access_type(inst) -> str | None:
    """The name of the type the ``!tbaa`` tag of ``inst`` accesses, or None."""
    tag = next((t for k, t in getattr(inst, "metadata", ()) if k == "tbaa"), None)
    fn = getattr(inst, "function", None)
    module = getattr(fn, "module", None)
    if tag is None or module is None:
        return None
    nodes = _nodes(module)
    m = _TAG.match(nodes.get(tag.strip(), ""))
    name = _NAME.match(nodes.get(m.group(2), "") if m else nodes.get(tag.strip(), ""))
    return name.group(1) if name is not None else None


def _nodes(module) -> dict[str, str]:
    """``{"!14": '!{!"long long", !15, i64 0}', ...}`` for ``module``'s metadata nodes."""
    nodes = _cache.get(module)
    if nodes is None:
        nodes = {}
        for section, text in module.extra_lines:
            if section == "metadata":
                m = _NODE.match(text)
                if m:
                    nodes[m.group(1)] = m.group(2)
        _cache[module] = nodes
    return nodes
