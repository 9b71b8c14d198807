"""ConcreteType lattice and TypeTree operations, checked by printed forms."""

import pytest

from pyzyme.analysis.typetree import (
    ANYTHING, FLOAT32, FLOAT64, FLOAT80, INTEGER, MAX_OFFSET, POINTER, UNKNOWN, ConcreteType,
    TypeTree,
)
from pyzyme.errors import PyzymeError, TypeAnalysisError

PTR_TO_DOUBLES = TypeTree({(-1,): POINTER, (-1, -1): FLOAT64})


def test_concrete_names():
    assert [str(c) for c in (UNKNOWN, INTEGER, POINTER, ANYTHING, FLOAT32, FLOAT64, FLOAT80)] == [
        "Unknown", "Integer", "Pointer", "Anything", "Float@float", "Float@double",
        "Float@x86_fp80"]
    assert str(ConcreteType.float("half")) == "Float@half"
    with pytest.raises(ValueError):
        ConcreteType.float("quad")
    with pytest.raises(ValueError):
        ConcreteType("Float")


@pytest.mark.parametrize("a, b, joined", [
    (UNKNOWN, FLOAT64, "Float@double"),
    (FLOAT64, UNKNOWN, "Float@double"),
    (INTEGER, INTEGER, "Integer"),
    (INTEGER, POINTER, "Pointer"),
    (POINTER, INTEGER, "Pointer"),
    (ANYTHING, FLOAT64, "Anything"),
    (FLOAT32, ANYTHING, "Anything"),
    (UNKNOWN, UNKNOWN, "Unknown"),
])
def test_join(a, b, joined):
    assert str(a.join(b)) == joined


@pytest.mark.parametrize("a, b", [
    (INTEGER, FLOAT64), (FLOAT64, INTEGER), (POINTER, FLOAT32), (FLOAT32, FLOAT64),
])
def test_join_conflict_is_an_error(a, b):
    with pytest.raises(TypeAnalysisError, match="type conflict") as info:
        a.join(b)
    assert isinstance(info.value, PyzymeError)


def test_meet():
    assert str(INTEGER.meet(POINTER)) == "Integer"
    assert str(ANYTHING.meet(FLOAT32)) == "Float@float"
    assert str(FLOAT64.meet(FLOAT32)) == "Unknown"
    assert str(UNKNOWN.meet(FLOAT64)) == "Unknown"


def test_sizes():
    assert [c.size for c in (FLOAT64, FLOAT32, FLOAT80, POINTER, INTEGER)] == [8, 4, 16, 8, 1]


def test_canonical_printing_sorted_minus_one_first():
    t = TypeTree({(8,): FLOAT64, (0,): INTEGER, (16,): POINTER, (16, -1): FLOAT32})
    assert str(t) == "{[0]:Integer, [8]:Float@double, [16]:Pointer, [16,-1]:Float@float}"
    assert str(TypeTree()) == "{}"
    assert str(PTR_TO_DOUBLES) == "{[-1]:Pointer, [-1,-1]:Float@double}"


def test_minus_one_absorbs_specific_entries_of_same_type():
    t = TypeTree({(0,): FLOAT64, (8,): FLOAT64})
    assert t.insert((-1,), FLOAT64)
    assert str(t) == "{[-1]:Float@double}"
    assert not t.insert((32,), FLOAT64)
    assert not t.merge(TypeTree({(0,): FLOAT64}))


def test_insert_conflicts_with_minus_one():
    t = TypeTree({(-1,): FLOAT64})
    with pytest.raises(TypeAnalysisError):
        t.insert((8,), INTEGER)
    t = TypeTree({(8,): INTEGER})
    with pytest.raises(TypeAnalysisError):
        t.insert((-1,), FLOAT64)


def test_nested_path_implies_pointer_parent():
    assert str(TypeTree({(0, 8): FLOAT64})) == "{[0]:Pointer, [0,8]:Float@double}"
    with pytest.raises(TypeAnalysisError):
        TypeTree({(0,): FLOAT64, (0, 8): FLOAT64})


def test_unknown_inserts_nothing():
    t = TypeTree()
    assert not t.insert((0,), UNKNOWN)
    assert not t


def test_merge_reports_change_and_is_idempotent():
    t = TypeTree({(-1,): POINTER})
    assert t.merge(PTR_TO_DOUBLES)
    assert t == PTR_TO_DOUBLES
    assert not t.merge(PTR_TO_DOUBLES)
    u = t | {(-1, -1): ANYTHING}
    assert str(u) == "{[-1]:Pointer, [-1,-1]:Anything}"
    assert str(t) == "{[-1]:Pointer, [-1,-1]:Float@double}"  # | copies


def test_lookup_and_getitem():
    t = TypeTree({(-1,): POINTER, (-1, 0): INTEGER, (-1, 8): FLOAT64})
    assert str(t.lookup(0)) == "Pointer"
    assert str(t.lookup(100)) == "Pointer"
    assert str(t[(5, 8)]) == "Float@double"
    assert str(t[(5, 16)]) == "Unknown"
    assert str(TypeTree({(8,): FLOAT64}).lookup(0)) == "Unknown"


def test_only_and_pointer_to_and_data0():
    inner = TypeTree({(0,): INTEGER, (8,): FLOAT64})
    assert str(inner.only(-1)) == "{[-1]:Pointer, [-1,0]:Integer, [-1,8]:Float@double}"
    assert str(inner.only(24)) == "{[24]:Pointer, [24,0]:Integer, [24,8]:Float@double}"
    p = TypeTree.pointer_to(TypeTree.pointer_to(TypeTree({(-1,): FLOAT64})))
    assert str(p) == "{[-1]:Pointer, [-1,-1]:Pointer, [-1,-1,-1]:Float@double}"
    assert str(p.data0()) == "{[-1]:Pointer, [-1,-1]:Float@double}"
    assert str(p.data0().data0()) == "{[-1]:Float@double}"
    assert str(TypeTree({(0,): POINTER, (0, 4): FLOAT32}).data0()) == "{[4]:Float@float}"
    assert str(TypeTree({(8,): POINTER, (8, 4): FLOAT32}).data0()) == "{}"


def test_shift_byte_offset_gep():
    # MemInfo: refct, dtor, dtor_info, data (offset 24), size.
    mi = TypeTree({(0,): INTEGER, (8,): POINTER, (16,): POINTER, (24,): POINTER,
                   (24, -1): FLOAT64, (32,): INTEGER})
    assert str(mi.shift(24)) == "{[0]:Pointer, [0,-1]:Float@double, [8]:Integer}"
    assert str(mi.shift(24, 8)) == "{[0]:Pointer, [0,-1]:Float@double}"
    assert str(mi.shift(0, 8, 100)) == "{[100]:Integer}"
    assert str(mi.shift(40)) == "{}"


def test_shift_expands_minus_one_over_a_bounded_region():
    assert str(TypeTree({(-1,): FLOAT32}).shift(0, 12)) == (
        "{[0]:Float@float, [4]:Float@float, [8]:Float@float}")
    assert str(TypeTree({(-1,): INTEGER}).shift(0, 3, 5)) == (
        "{[5]:Integer, [6]:Integer, [7]:Integer}")
    assert str(PTR_TO_DOUBLES.shift(0, 16)) == (
        "{[0]:Pointer, [0,-1]:Float@double, [8]:Pointer, [8,-1]:Float@double}")
    # unbounded regions and huge ones keep -1
    assert str(TypeTree({(-1,): FLOAT64}).shift(0, 1 << 20)) == "{[-1]:Float@double}"
    assert str(TypeTree({(-1,): FLOAT64}).shift(8, -1)) == "{[-1]:Float@double}"
    # an unbounded region moved by 16 keeps only offset 16, as Enzyme does
    assert str(TypeTree({(-1,): FLOAT64}).shift(8, -1, 16)) == "{[16]:Float@double}"


def test_widen_without_keep_minus_one():
    t = TypeTree({(0,): INTEGER, (8,): FLOAT64}).widen(0, 8)
    assert str(t) == ("{[0]:Integer, [1]:Integer, [2]:Integer, [3]:Integer, [4]:Integer, "
                      "[5]:Integer, [6]:Integer, [7]:Integer, [8]:Float@double}")
    assert str(t.without(0, 8)) == "{[8]:Float@double}"
    assert str((t.without(8, 8) | {(-1,): INTEGER}).keep_minus_one()) == "{[-1]:Integer}"


def test_equality_and_hash():
    a = TypeTree({(0,): FLOAT64})
    b = TypeTree()
    b.insert((0,), FLOAT64)
    assert a == b and hash(a) == hash(b)
    assert a != TypeTree({(0,): FLOAT32})
    assert [p for p, _ in PTR_TO_DOUBLES] == [(-1,), (-1, -1)]
    assert len(PTR_TO_DOUBLES) == 2


def test_offsets_are_capped_like_enzymes_maxtypeoffset():
    t = TypeTree()
    assert not t.insert((MAX_OFFSET,), FLOAT64)
    assert not t.insert((0, MAX_OFFSET + 8), FLOAT64)
    assert t.insert((MAX_OFFSET - 8,), FLOAT64)
    assert str(t) == f"{{[{MAX_OFFSET - 8}]:Float@double}}"


def test_meet_of_trees():
    a = TypeTree({(-1,): POINTER, (-1, 0): FLOAT64, (-1, 8): INTEGER})
    b = TypeTree({(-1,): POINTER, (-1, 0): INTEGER, (-1, 8): INTEGER})
    assert str(a.meet(b)) == "{[-1]:Pointer, [-1,8]:Integer}"
    assert str(a.meet(TypeTree())) == "{}"


def test_only_equals_inserting_each_path():
    # only() copies a canonical tree's paths without inserting them one by one; it must give
    # what inserting them gives, limits (depth, offset) and the new Pointer parent included.
    import random

    from pyzyme.analysis.typetree import MAX_DEPTH

    rng = random.Random(7)
    checked = 0
    for _ in range(2000):
        t = TypeTree()
        for _ in range(rng.randint(0, 8)):
            path = tuple(rng.choice([-1, 0, 8, 3, MAX_OFFSET - 1])
                         for _ in range(rng.randint(1, MAX_DEPTH)))
            try:
                t.insert(path, rng.choice([INTEGER, POINTER, FLOAT64, FLOAT32, ANYTHING]))
            except TypeAnalysisError:
                pass
        for offset in (-1, 0, 16, MAX_OFFSET - 1, MAX_OFFSET):
            inserted = TypeTree({(offset, *p): ct for p, ct in t._map.items()})
            assert t.only(offset) == inserted, (t, offset)
            checked += bool(len(inserted))
    assert checked > 5000  # most cases were trees with entries, not empty ones


def _tape_like_paths(seed: int, count: int):
    """Paths as a recursion's tape trees have them: a wildcard first, then fixed offsets and
    wildcards down to a depth of four, pointers and integers at random."""
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        depth = rng.randint(1, 4)
        path = tuple(-1 if rng.random() < 0.08 else 8 * rng.randint(0, 40) for _ in range(depth))
        out.append((path, INTEGER if rng.random() < 0.5 else POINTER))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_large_tree_inserts_as_a_small_one_does(seed, monkeypatch):
    # Trees past 64 entries look a wildcard path's covered keys up in an index of their keys
    # by fixed offsets: the same tree, entry for entry, as the scan of every key builds.
    import pyzyme.analysis.typetree as typetree
    paths = _tape_like_paths(seed, 600)

    def build():
        tree, changes = TypeTree(), []
        for path, ct in paths:
            try:
                changes.append(tree.insert(path, ct))
            except TypeAnalysisError:
                changes.append(None)   # a conflict: the tree is left as it was checked
        return tree, changes
    indexed, changed = build()
    monkeypatch.setattr(typetree, "_INDEXED", 10 ** 9)
    scanned, changed_scanned = build()
    assert len(indexed) > 64 and indexed._index is not None
    assert str(indexed) == str(scanned) and changed == changed_scanned
