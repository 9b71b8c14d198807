"""What bytes hold: Enzyme's ConcreteType lattice and TypeTree.

Opaque pointers and byte-offset GEPs leave LLVM IR silent about what memory holds, yet reverse
mode must know which bytes are floats (they get adjoints) and which are integers or pointers.
A :class:`TypeTree` records it as a map from *paths* of byte offsets to a
:class:`ConcreteType`. The first offset is into the value itself; each further offset follows a
pointer into the memory it points to. ``-1`` means "every offset", so Enzyme's printed forms
read the same here::

    {[-1]:Float@double}                        a double (or a vector of them)
    {[-1]:Pointer, [-1,-1]:Float@double}       a pointer to doubles
    {[-1]:Pointer, [-1,0]:Integer, ..., [-1,8]:Float@double}   a pointer to {i64, double}

As in Enzyme, a float or pointer is recorded at the offset of its first byte, an integer at
every one of its bytes (integers may be read piecewise, floats and pointers may not).

Lattice (the join, :meth:`ConcreteType.join`): ``Unknown`` is bottom; ``Anything`` (bytes any
interpretation of which is fine, e.g. zeros) is top and absorbs everything; ``Integer`` joined
with ``Pointer`` is ``Pointer`` (an address held in an integer, as after ``ptrtoint``: Enzyme's
``pointerIntSame``). Every other pair of different types -- a float with an integer or a
pointer, floats of different precisions -- is a conflict and raises :class:`TypeAnalysisError`:
a byte cannot be both, and merging them silently could hide a float from differentiation.

Examples
--------
>>> t = TypeTree({(-1,): POINTER, (-1, -1): FLOAT64})
>>> print(t)
{[-1]:Pointer, [-1,-1]:Float@double}
>>> print(t.data0())
{[-1]:Float@double}
>>> s = TypeTree.pointer_to(TypeTree({(0,): INTEGER}).widen(0, 8) | {(8,): FLOAT64})
>>> print(s)
{[-1]:Pointer, [-1,0]:Integer, [-1,1]:Integer, [-1,2]:Integer, [-1,3]:Integer, \
[-1,4]:Integer, [-1,5]:Integer, [-1,6]:Integer, [-1,7]:Integer, [-1,8]:Float@double}
>>> print(s.data0().shift(8, 8))
{[0]:Float@double}
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter

from pyzyme.errors import TypeAnalysisError

__all__ = [
    "ANYTHING", "FLOAT16", "FLOAT32", "FLOAT64", "FLOAT80", "INTEGER", "POINTER", "UNKNOWN",
    "MAX_DEPTH", "MAX_EXPAND", "MAX_OFFSET", "ConcreteType", "Path", "TypeTree",
]

Path = tuple[int, ...]

#: Offsets this large or larger are not recorded (Enzyme's ``maxtypeoffset``, 500 there): a
#: pointer stepped in a loop (``%p.next = gep i8, %p, 8``) would otherwise grow its tree forever.
MAX_OFFSET = 512

#: Paths longer than this are not recorded (Enzyme bounds the depth of its trees too): the
#: tree of a linked list's node (its first field a pointer to a node) would otherwise grow a
#: level each time the analysis passes the list's loop, each level costing twice the last.
MAX_DEPTH = 6

#: Regions at most this many bytes long have their ``-1`` entries spelled out per offset when
#: cut out of a tree (Enzyme's ``maxtypeoffset`` plays the same role); longer ones keep ``-1``.
MAX_EXPAND = 512

_FLOAT_SIZES = {"half": 2, "bfloat": 2, "float": 4, "double": 8, "x86_fp80": 16, "fp128": 16,
                "ppc_fp128": 16}


@dataclass(frozen=True)
class ConcreteType:
    """One point of the lattice: ``kind`` is Unknown, Integer, Float, Pointer or Anything.

    ``float_type`` names the LLVM float type (``double``, ``float``, ``half``, ``x86_fp80``)
    when ``kind`` is Float.

    Examples
    --------
    >>> print(FLOAT64, INTEGER.join(POINTER), UNKNOWN.join(FLOAT32), ANYTHING.join(FLOAT64))
    Float@double Pointer Float@float Anything
    >>> INTEGER.join(FLOAT64)
    Traceback (most recent call last):
    ...
    pyzyme.errors.TypeAnalysisError: type conflict: Integer and Float@double
    >>> print(INTEGER.meet(POINTER), FLOAT64.meet(ANYTHING), INTEGER.meet(FLOAT64))
    Integer Float@double Unknown
    """

    kind: str
    float_type: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("Unknown", "Integer", "Float", "Pointer", "Anything"):
            raise ValueError(f"unknown type kind {self.kind!r}")
        if (self.kind == "Float") != (self.float_type is not None):
            raise ValueError("a Float needs a float_type, other kinds none")

    @classmethod
    def float(cls, float_type: str) -> ConcreteType:
        """``Float@float_type`` for an LLVM float type name (``double``, ``float``, ...)."""
        if float_type not in _FLOAT_SIZES:
            raise ValueError(f"unknown float type {float_type!r}")
        return cls("Float", float_type)

    @property
    def is_known(self) -> bool:
        return self.kind != "Unknown"

    @property
    def is_float(self) -> bool:
        return self.kind == "Float"

    @property
    def size(self) -> int:
        """Bytes one entry of this type covers: a float's size, 8 for a pointer, else 1."""
        if self.float_type is not None:
            return _FLOAT_SIZES[self.float_type]
        return 8 if self.kind == "Pointer" else 1

    def _rank(self) -> int:
        return {"Unknown": 0, "Integer": 1, "Float": 1, "Pointer": 2, "Anything": 3}[self.kind]

    def join(self, other: ConcreteType) -> ConcreteType:
        """Least upper bound; raises :class:`TypeAnalysisError` on a conflict."""
        if self is other or self == other or other.kind == "Unknown" or self.kind == "Anything":
            return self
        if self.kind == "Unknown" or other.kind == "Anything":
            return other
        if {self.kind, other.kind} == {"Integer", "Pointer"}:
            return POINTER
        raise TypeAnalysisError(f"type conflict: {self} and {other}")

    def meet(self, other: ConcreteType) -> ConcreteType:
        """Greatest lower bound: what both agree on (Unknown when nothing)."""
        if self == other or other.kind == "Anything":
            return self
        if self.kind == "Anything":
            return other
        if {self.kind, other.kind} == {"Integer", "Pointer"}:
            return INTEGER
        return UNKNOWN

    def __str__(self) -> str:
        return f"Float@{self.float_type}" if self.float_type else self.kind


UNKNOWN = ConcreteType("Unknown")
INTEGER = ConcreteType("Integer")
POINTER = ConcreteType("Pointer")
ANYTHING = ConcreteType("Anything")
FLOAT16 = ConcreteType.float("half")
FLOAT32 = ConcreteType.float("float")
FLOAT64 = ConcreteType.float("double")
FLOAT80 = ConcreteType.float("x86_fp80")


@lru_cache(maxsize=8192)
def _generalisations(path: Path) -> tuple[Path, ...]:
    """Every other path that covers ``path``: some of its offsets replaced by ``-1``. Cached:
    the same few paths are inserted again and again (type analysis inserts tens of thousands
    of entries into trees of a few dozen paths each)."""
    positions = [i for i, o in enumerate(path) if o != -1]
    out = []
    for mask in range(1, 1 << len(positions)):
        p = list(path)
        for bit, i in enumerate(positions):
            if mask >> bit & 1:
                p[i] = -1
        out.append(tuple(p))
    return tuple(out)


#: Trees of more entries than this index their keys for wildcard inserts (:class:`_Index`).
_INDEXED = 64


_NONE: frozenset = frozenset()


class _Index:
    """A tree's keys by length and by each fixed offset: the keys a wildcard path may cover
    share its length and each of its fixed offsets, so an insert reads the smallest of those
    buckets only. Kept by :meth:`TypeTree.insert`, the one place that adds and deletes keys
    in place."""

    __slots__ = ("_buckets",)

    def __init__(self, keys) -> None:
        self._buckets: dict[tuple, set] = {}
        for key in keys:
            self.add(key)

    def _places(self, key: Path):
        n = len(key)
        yield (n,)
        for i, offset in enumerate(key):
            if offset != -1:
                yield (n, i, offset)

    def add(self, key: Path) -> None:
        for place in self._places(key):
            self._buckets.setdefault(place, set()).add(key)

    def discard(self, key: Path) -> None:
        for place in self._places(key):
            self._buckets[place].discard(key)

    def bucket(self, n: int, fixed: list) -> set:
        """The fewest keys of length ``n`` that hold one of ``fixed``'s ``(position,
        offset)`` pairs at its place; all keys of length ``n`` when nothing is fixed."""
        if not fixed:
            return self._buckets.get((n,), _NONE)
        get = self._buckets.get
        return min((get((n, i, offset), _NONE) for i, offset in fixed), key=len)


def _covers(general: Path, specific: Path) -> bool:
    """Whether ``general`` (with ``-1`` wildcards) names every byte ``specific`` names."""
    return len(general) == len(specific) and all(
        g == -1 or g == s for g, s in zip(general, specific))


class TypeTree:
    """A map from byte-offset paths to :class:`ConcreteType`, kept canonical.

    Canonical means: no Unknown entries; no entry that a ``-1`` entry of the same type already
    covers; every nested path's parent is a Pointer. Build it from a mapping or by
    :meth:`insert`/:meth:`merge`; equal trees print the same.

    Examples
    --------
    >>> t = TypeTree()
    >>> t.insert((8,), FLOAT64), t.insert((-1,), FLOAT64), t.insert((16,), FLOAT64)
    (True, True, False)
    >>> print(t, t.lookup(24), t[(3, 5)])
    {[-1]:Float@double} Float@double Unknown
    >>> print(TypeTree({(0, -1): INTEGER}))      # a nested path makes its parent a Pointer
    {[0]:Pointer, [0,-1]:Integer}
    """

    __slots__ = ("_map", "_index")

    def __init__(self, entries: Mapping[Path, ConcreteType] | None = None) -> None:
        self._map: dict[Path, ConcreteType] = {}
        self._index: _Index | None = None   # made by a wildcard insert into a large tree
        for path, ct in (entries or {}).items():
            self.insert(tuple(path), ct)

    @classmethod
    def _of_canonical(cls, entries: dict) -> TypeTree:
        """A tree holding ``entries``, already canonical (a canonical tree's entries kept
        whole below some top-level offsets, or one pointer level of them): no
        :meth:`insert`, whose check against every wildcard entry makes building a large
        tree entry by entry quadratic."""
        out = cls()
        out._map = entries
        return out

    # ------------------------------------------------------------------ reading
    def __iter__(self) -> Iterator[tuple[Path, ConcreteType]]:
        return iter(sorted(self._map.items()))

    def __len__(self) -> int:
        return len(self._map)

    def __bool__(self) -> bool:
        return bool(self._map)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TypeTree) and self._map == other._map

    def __hash__(self) -> int:
        return hash(str(self))

    def __getitem__(self, path: Path) -> ConcreteType:
        """The type at ``path``: the join of the entries covering it, Unknown when none."""
        path = tuple(path)
        result = UNKNOWN
        for key, ct in self._map.items():
            if _covers(key, path):
                result = result.join(ct)
        return result

    def lookup(self, offset: int) -> ConcreteType:
        """The type of the byte at ``offset`` of the value (``-1``: what all bytes share)."""
        return self[(offset,)]

    def holds_no_floats(self) -> bool:
        """Whether this pointer's tree says the memory it points to, and the memory of every
        pointer stored there, holds integers and pointers only: no float, no bytes of any
        type, no pointer to memory nothing is known of (a list of integers needs no shadow).

        >>> TypeTree({(-1,): POINTER, (-1, 0): INTEGER, (-1, 8): POINTER,
        ...           (-1, 8, -1): INTEGER}).holds_no_floats()
        True
        >>> TypeTree({(-1,): POINTER, (-1, 0): INTEGER, (-1, 8): POINTER}).holds_no_floats()
        False
        """
        paths = self._map
        if not any(len(p) > 1 for p in paths):
            return False  # nothing is known of the memory
        for path, ct in paths.items():
            if ct.kind not in ("Integer", "Pointer"):
                return False
            if ct.kind == "Pointer" and len(path) > 1 and not any(
                    len(q) == len(path) + 1 and q[:-1] == path for q in paths):
                return False
        return True

    def copy(self) -> TypeTree:
        t = TypeTree()
        t._map = dict(self._map)
        return t

    def __str__(self) -> str:
        body = ", ".join("[" + ",".join(map(str, p)) + "]:" + str(ct) for p, ct in self)
        return "{" + body + "}"

    def __repr__(self) -> str:
        return f"TypeTree({self})"

    # ------------------------------------------------------------------ writing
    def insert(self, path: Path, ct: ConcreteType) -> bool:
        """Join ``ct`` into ``path``; return whether the tree changed.

        Raises :class:`TypeAnalysisError` when ``ct`` conflicts with what the tree holds there.
        """
        path = tuple(path)
        if not path:
            raise ValueError("a TypeTree path needs at least one offset")
        if ct.kind == "Unknown" or len(path) > MAX_DEPTH or max(path) >= MAX_OFFSET:
            return False
        mapping = self._map
        old = mapping.get(path)  # never Unknown: the tree holds known types only
        if old is not None and (old is ct or old.join(ct) == old):
            return False  # already said (and checked against the rest when it was inserted)
        if old is None:
            old = UNKNOWN
        changed = False
        if len(path) > 1:  # following a pointer: the value at the prefix is one
            changed = self.insert(path[:-1], POINTER)
        # Entries covering this path are its generalisations: look them up, do not scan.
        covering = UNKNOWN
        for general in _generalisations(path):
            kct = mapping.get(general)
            if kct is not None:
                kct.join(ct)  # raises on a conflict
                covering = covering.join(kct)
        new = old.join(ct)
        if covering is not UNKNOWN and covering.join(new) == covering:
            return changed  # a -1 entry already says it
        covered = []
        index = self._index
        if -1 in path:  # entries this one covers must agree, and the same-typed go
            # _covers, inlined and unrolled by path length (at most MAX_DEPTH): the scan is
            # the hottest loop of type analysis, a generator per entry most of its cost.
            n = len(path)
            fixed = [(i, g) for i, g in enumerate(path) if g != -1]
            keys = mapping
            if len(mapping) > _INDEXED:
                # Only the keys sharing one of its fixed offsets (a tape tree's paths differ
                # deep down): merging large trees scanned every key at every insert.
                if index is None:
                    index = self._index = _Index(mapping)
                keys = index.bucket(n, fixed)
            if len(fixed) == 1:
                (i0, g0), = fixed
                found = [key for key in keys if len(key) == n and key[i0] == g0]
            elif len(fixed) == 2:
                (i0, g0), (i1, g1) = fixed
                found = [key for key in keys
                         if len(key) == n and key[i0] == g0 and key[i1] == g1]
            elif not fixed:
                found = [key for key in keys if len(key) == n]
            else:  # (an itemgetter compares the fixed offsets in C: no generator per key)
                pick = itemgetter(*(i for i, _ in fixed))
                want = tuple(g for _, g in fixed)
                found = [key for key in keys if len(key) == n and pick(key) == want]
            for key in found:
                if key != path:
                    mapping[key].join(ct)
                    covered.append(key)
        if index is not None and path not in mapping:
            index.add(path)
        mapping[path] = new
        for key in covered:
            if mapping[key].join(new) == new:
                del mapping[key]
                if index is not None:
                    index.discard(key)
        return True

    def merge(self, other: TypeTree | Mapping[Path, ConcreteType]) -> bool:
        """Join ``other`` into this tree in place; return whether it changed.

        >>> t = TypeTree({(0,): FLOAT64})
        >>> t.merge(TypeTree({(8,): FLOAT64})), t.merge({(0,): FLOAT64})
        (True, False)
        >>> print(t)
        {[0]:Float@double, [8]:Float@double}
        """
        if isinstance(other, TypeTree):
            if not self._map:  # into nothing: a canonical tree as it is
                self._map = dict(other._map)
                self._index = None
                return bool(self._map)
            items = other._map.items()
        else:
            items = other.items()
        mapping = self._map
        changed = False
        for path, ct in items:
            if mapping.get(path) is not ct:   # the same entry (types are shared): nothing new
                changed |= self.insert(path, ct)
        return changed

    def __or__(self, other: TypeTree | Mapping[Path, ConcreteType]) -> TypeTree:
        t = self.copy()
        t.merge(other)
        return t

    def meet(self, other: TypeTree) -> TypeTree:
        """What both trees say: each path of either, with the meet of both types there.

        >>> a = TypeTree({(-1,): POINTER, (-1, 0): FLOAT64, (-1, 8): INTEGER})
        >>> print(a.meet(TypeTree({(-1,): POINTER, (-1, -1): FLOAT64})))
        {[-1]:Pointer, [-1,0]:Float@double}
        """
        out = TypeTree()
        for a, b in ((self, other), (other, self)):
            for path, ct in a._map.items():
                out.insert(path, ct.meet(b[path]))
        return out

    # ------------------------------------------------------------------ reshaping
    def only(self, offset: int) -> TypeTree:
        """This tree one pointer level down, at ``offset``: each path gets ``offset`` in front.

        ``tree.only(-1)`` plus ``[-1]:Pointer`` is a pointer to memory holding ``tree``.

        >>> print(TypeTree({(-1,): FLOAT64}).only(-1))
        {[-1]:Pointer, [-1,-1]:Float@double}
        """
        # This tree is canonical, so is each of its paths with ``offset`` in front (a -1
        # entry covers the same entries, each parent is still a Pointer): no insert needed,
        # only the limits it applies and the Pointer at ``[offset]``.
        out = TypeTree()
        if offset >= MAX_OFFSET:
            return out
        out._map = {(offset, *p): ct for p, ct in self._map.items() if len(p) < MAX_DEPTH}
        if out._map:
            out._map[(offset,)] = POINTER
        return out

    @classmethod
    def pointer_to(cls, pointee: TypeTree) -> TypeTree:
        """The tree of a pointer value whose memory holds ``pointee``."""
        t = pointee.only(-1)
        t.insert((-1,), POINTER)
        return t

    def data0(self) -> TypeTree:
        """What a pointer with this tree points to (its entries at ``[-1, ...]``/``[0, ...]``).

        >>> print(TypeTree({(-1,): POINTER, (-1, 8): INTEGER}).data0())
        {[8]:Integer}
        """
        firsts = {path[0] for path in self._map if len(path) > 1 and path[0] in (-1, 0)}
        if len(firsts) == 1:  # one pointer level of a canonical tree: canonical
            first = firsts.pop()
            return TypeTree._of_canonical({path[1:]: ct for path, ct in self._map.items()
                                           if len(path) > 1 and path[0] == first})
        out = TypeTree()
        for path, ct in self:
            if len(path) > 1 and path[0] in (-1, 0):
                out.insert(path[1:], ct)
        return out

    def shift(self, offset: int, size: int = -1, add: int = 0) -> TypeTree:
        """Bytes ``[offset, offset + size)`` of the value, moved to start at ``add``.

        ``size == -1`` means to the end. A ``-1`` entry stays ``-1`` when the region is
        unbounded and ``add`` is 0, becomes ``[add]`` when unbounded and ``add`` is not 0, and
        is otherwise spelled out at every multiple of its type's size inside the region (when
        the region is at most ``MAX_EXPAND`` bytes; longer ones keep ``-1``).

        >>> t = TypeTree({(-1,): FLOAT64})
        >>> print(t.shift(24), t.shift(0, 16), t.shift(0, -1, 8))
        {[-1]:Float@double} {[0]:Float@double, [8]:Float@double} {[8]:Float@double}
        >>> s = TypeTree({(0,): POINTER, (0, -1): FLOAT64, (8,): FLOAT64})
        >>> print(s.shift(8, 8), s.shift(0, 8, 16))
        {[0]:Float@double} {[16]:Pointer, [16,-1]:Float@double}
        """
        if (size == -1 and not add) or not any(p[0] == -1 for p in self._map):
            # No wildcard to spell out: a canonical tree's entries, some dropped whole with
            # what is under them and the rest moved alike, stay canonical.
            kept = {}
            for path, ct in self._map.items():
                first = path[0]
                if first == -1:
                    kept[path] = ct
                elif offset <= first and (size == -1 or first < offset + size) \
                        and first - offset + add < MAX_OFFSET:
                    kept[(first - offset + add, *path[1:])] = ct
            return TypeTree._of_canonical(kept)
        out = TypeTree()
        for path, ct in self:
            first, rest = path[0], path[1:]
            if first == -1:
                if size == -1 and add:
                    # [add, inf) is not expressible; as Enzyme does, keep only offset ``add``
                    # (claiming every offset could make the bytes before ``add`` conflict).
                    out.insert((add, *rest), ct)
                elif size == -1 or size > MAX_EXPAND:
                    out.insert(path, ct)
                else:
                    for o in range(0, size, ct.size if not rest else 8):
                        out.insert((o + add, *rest), ct)
                continue
            if first < offset or (size != -1 and first >= offset + size):
                continue
            out.insert((first - offset + add, *rest), ct)
        return out

    def widen(self, offset: int, size: int) -> TypeTree:
        """Copy the top-level entry at ``offset`` onto the following ``size - 1`` bytes.

        Integers are recorded on every byte; this spells one out.

        >>> print(TypeTree({(0,): INTEGER}).widen(0, 4))
        {[0]:Integer, [1]:Integer, [2]:Integer, [3]:Integer}
        """
        t = self.copy()
        ct = self.lookup(offset)
        for o in range(offset + 1, offset + size):
            t.insert((o,), ct)
        return t

    def keep_minus_one(self) -> TypeTree:
        """Only the entries at ``[-1, ...]``: what holds at every offset.

        >>> t = TypeTree({(-1,): INTEGER, (0, 8): FLOAT64})
        >>> print(t, t.keep_minus_one())
        {[-1]:Integer, [0]:Pointer, [0,8]:Float@double} {[-1]:Integer}
        """
        return TypeTree._of_canonical({p: ct for p, ct in self._map.items() if p[0] == -1})

    def without(self, offset: int, size: int) -> TypeTree:
        """This tree with the top-level entries in ``[offset, offset + size)`` removed."""
        return TypeTree._of_canonical({p: ct for p, ct in self._map.items()
                                       if not (offset <= p[0] < offset + size)})
