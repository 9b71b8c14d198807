"""make_zero: zeroed copies that keep structure, types and aliasing (API.md, Convenience)."""

import dataclasses
import enum
from collections import OrderedDict, defaultdict, namedtuple

import numba
import numpy as np
import pytest
from numba import types
from numba.experimental import jitclass
from numba.typed import Dict, List

import pyzyme
from pyzyme import UnsupportedError, make_zero

# -- jitclasses (compiled once for the module: their first use is what costs) -------------------

node_type = numba.deferred_type()


@jitclass([("value", types.float64), ("w", types.float64[:]),
           ("next", types.optional(node_type))])
class Node:
    def __init__(self, value, w):
        self.value = value
        self.w = w
        self.next = None


node_type.define(Node.class_type.instance_type)


@jitclass([("x", types.float32), ("n", types.int32), ("flag", types.boolean),
           ("name", types.unicode_type), ("c", types.complex128),
           ("pair", types.UniTuple(types.float64, 2)), ("grid", types.float64[:, ::1]),
           ("samples", types.ListType(types.float64)), ("head", Node.class_type.instance_type),
           ("spare", types.optional(Node.class_type.instance_type)), ("__secret", types.float64)])
class Model:
    def __init__(self, head, samples):
        self.x = 1.5
        self.n = 7
        self.flag = True
        self.name = "model"
        self.c = 2.0 - 1.0j
        self.pair = (3.0, 4.0)
        self.grid = np.ones((2, 3))
        self.samples = samples
        self.head = head
        self.spare = None
        self.__secret = 9.0


@numba.njit
def chain(n):
    """A linked list n nodes long, built natively (node i holds i + 1.0)."""
    head = Node(1.0, np.ones(2))
    cur = head
    for i in range(1, n):
        nxt = Node(i + 1.0, np.ones(2))
        cur.next = nxt
        cur = nxt
    return head


@numba.njit
def walk(head):
    """(sum of values, sum of all w entries, number of nodes) along next."""
    s, sw, n = 0.0, 0.0, 0
    cur = head
    while cur is not None:
        s += cur.value
        sw += cur.w.sum()
        n += 1
        cur = cur.next
    return s, sw, n


@pytest.fixture(scope="module")
def three():
    """Three nodes a -> b -> c; a and b share one w array."""
    w = np.array([1.0, 2.0])
    a, b, c = Node(1.0, w), Node(2.0, w), Node(3.0, np.arange(3.0))
    a.next = b
    b.next = c
    return a, b, c


@pytest.fixture(scope="module")
def model(three):
    return Model(three[0], List([1.0, 2.0, 3.0]))


# -- scalars -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (2.5, 0.0), (-3, 0), (1 + 2j, 0j),
    (np.float32(2.5), np.float32(0)), (np.float64(2.5), np.float64(0)),
    (np.int16(5), np.int16(0)), (np.uint8(5), np.uint8(0)), (np.complex64(1j), np.complex64(0)),
])
def test_numbers_become_zero_of_their_type(value, expected):
    z = make_zero(value)
    assert type(z) is type(value)
    assert z == expected


class Color(enum.IntEnum):
    RED = 3


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "text", b"raw", None,
                                   Color.RED, np.datetime64("2024-01-02")])
def test_values_without_derivatives_are_kept(value):
    assert make_zero(value) is value


# -- arrays ------------------------------------------------------------------------------------

@pytest.mark.parametrize("x", [
    np.arange(6.0).reshape(2, 3), np.arange(4, dtype=np.int32), np.array([1 + 2j, 3j]),
    np.ones(3, dtype=np.float32), np.array(4.0), np.ones((2, 0)),
])
def test_numeric_arrays(x):
    before = x.copy()
    z = make_zero(x)
    assert z.shape == x.shape and z.dtype == x.dtype
    assert not np.shares_memory(z, x)
    assert np.all(z == 0)
    np.testing.assert_array_equal(x, before)


def test_zero_dim_array_stays_an_array():
    z = make_zero(np.array(4.0))
    assert isinstance(z, np.ndarray) and z.shape == () and z[()] == 0.0


def test_views_and_layouts():
    base = np.arange(24.0).reshape(4, 6)
    view = base[::2, 1::2]
    z = make_zero(view)
    assert z.shape == (2, 3) and z.dtype == base.dtype and np.all(z == 0)
    assert not np.shares_memory(z, base)
    assert np.all(base == np.arange(24.0).reshape(4, 6))
    f = np.asfortranarray(np.ones((3, 2)))
    assert make_zero(f).flags.f_contiguous


def test_bool_and_string_arrays_are_copied_unchanged():
    b = np.array([True, False, True])
    zb = make_zero(b)
    assert zb is not b and zb.tolist() == [True, False, True]
    s = np.array(["ab", "c"])
    assert make_zero(s).tolist() == ["ab", "c"]


def test_structured_arrays_and_records():
    dt = np.dtype([("a", np.float64), ("i", np.int32), ("ok", np.bool_), ("tag", "U2"),
                   ("v", np.float32, (2,)), ("inner", [("p", np.float64), ("q", np.int8)])])
    x = np.array([(1.5, 2, True, "ab", (1, 2), (3.0, 4)),
                  (2.5, 3, False, "cd", (5, 6), (7.0, 8))], dtype=dt)
    z = make_zero(x)
    assert z.dtype == dt and z.shape == (2,)
    assert z["a"].tolist() == [0.0, 0.0] and z["i"].tolist() == [0, 0]
    assert z["v"].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert z["inner"]["p"].tolist() == [0.0, 0.0] and z["inner"]["q"].tolist() == [0, 0]
    assert z["ok"].tolist() == [True, False] and z["tag"].tolist() == ["ab", "cd"]
    assert x["a"].tolist() == [1.5, 2.5]

    record = x[1]                                  # np.void, what Numba takes as a record
    zr = make_zero(record)
    assert isinstance(zr, np.void) and zr.dtype == dt
    assert zr["a"] == 0.0 and zr["i"] == 0 and not zr["ok"] and zr["tag"] == "cd"
    assert record["a"] == 2.5 and x[1]["i"] == 3   # the record views x: left alone
    assert numba.typeof(zr) == numba.typeof(record)


def test_object_arrays_zero_each_element():
    x = np.empty(3, dtype=object)
    x[0], x[1], x[2] = 2.5, np.ones(2), "keep"
    z = make_zero(x)
    assert z.dtype == object and z[0] == 0.0 and z[1].tolist() == [0.0, 0.0] and z[2] == "keep"


# -- Python containers and objects -------------------------------------------------------------

Point = namedtuple("Point", "x y label")


def test_containers_keep_their_structure():
    x = {"w": np.ones(2), "b": (1.5, 2, "s"), "p": Point(1.0, np.arange(2.0), "lbl"),
         "items": [1.0, [2, 3.5j]]}
    z = make_zero(x)
    assert list(z) == ["w", "b", "p", "items"]
    assert z["w"].tolist() == [0.0, 0.0]
    assert z["b"] == (0.0, 0, "s")
    assert type(z["p"]) is Point and z["p"].x == 0.0 and z["p"].label == "lbl"
    assert z["p"].y.tolist() == [0.0, 0.0]
    assert z["items"] == [0.0, [0, 0j]]
    assert x["items"] == [1.0, [2, 3.5j]]


def test_dict_subclasses_keep_their_class():
    od = make_zero(OrderedDict(b=1.0, a=2.0))
    assert type(od) is OrderedDict and list(od.items()) == [("b", 0.0), ("a", 0.0)]
    dd = make_zero(defaultdict(list, k=3.0))
    assert type(dd) is defaultdict and dd.default_factory is list and dd["k"] == 0.0


def test_aliasing_is_preserved():
    a = np.arange(3.0)
    z = make_zero((a, a))
    assert z[0] is z[1] and z[0] is not a
    inner = [1.0]
    zl = make_zero([inner, inner, [1.0]])
    assert zl[0] is zl[1] and zl[0] is not zl[2]
    # arrays viewing exactly the same memory share one zero; other views get their own
    same, strided = a[...], a[::2]
    zv = make_zero([a, same, strided])
    assert zv[0] is zv[1] and zv[2] is not zv[0] and zv[2].shape == (2,)


def test_cycles():
    d = {"x": 1.5}
    d["self"] = d
    zd = make_zero(d)
    assert zd["self"] is zd and zd["x"] == 0.0 and zd is not d
    loop = [2.0]
    t = (loop, 3.0)
    loop.append(t)                                 # a tuple reaches itself through a list
    zt = make_zero(t)
    assert zt[1] == 0.0 and zt[0][1] is zt and zt[0][0] == 0.0


def test_long_chains_need_no_deep_stack():
    head = cur = [1.0]
    for _ in range(5000):                          # far past Python's recursion limit
        nxt = [1.0]
        cur.append(nxt)
        cur = nxt
    z = make_zero(head)
    depth = 1
    while len(z) == 2:
        assert z[0] == 0.0
        z = z[1]
        depth += 1
    assert depth == 5001 and z == [0.0]


class Plain:
    instances = 0

    def __init__(self, w, lr):
        Plain.instances += 1
        self.w = w
        self.lr = lr
        self.name = "opt"


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: float
    b: np.ndarray


@dataclasses.dataclass(slots=True)
class Slotted:
    a: float
    b: tuple


def test_objects_copied_attribute_by_attribute_without_init():
    p = Plain(np.ones(2), 0.1)
    count = Plain.instances
    z = make_zero(p)
    assert type(z) is Plain and Plain.instances == count
    assert z.w.tolist() == [0.0, 0.0] and z.lr == 0.0 and z.name == "opt" and p.lr == 0.1
    f = make_zero(Frozen(1.5, np.ones(1)))
    assert f.a == 0.0 and f.b.tolist() == [0.0]
    s = make_zero(Slotted(2.0, (1.0, True)))
    assert s.a == 0.0 and s.b == (0.0, True)


# -- Numba typed containers --------------------------------------------------------------------

def test_typed_lists():
    floats = List([1.0, 2.0, 3.0])
    z = make_zero(floats)
    assert numba.typeof(z) == numba.typeof(floats) and list(z) == [0.0, 0.0, 0.0]
    assert list(floats) == [1.0, 2.0, 3.0]
    arrays = List([np.ones(2), np.ones(3)])
    za = make_zero(arrays)
    assert [a.tolist() for a in za] == [[0.0, 0.0], [0.0, 0.0, 0.0]]
    assert len(make_zero(List())) == 0


def test_typed_dicts():
    d = Dict.empty(types.int64, types.float64[:])   # unicode keys would cost seconds to compile
    d[3] = np.ones(2)
    d[-1] = np.arange(3.0)
    z = make_zero(d)
    assert numba.typeof(z) == numba.typeof(d)
    assert {k: v.tolist() for k, v in z.items()} == {3: [0.0, 0.0], -1: [0.0, 0.0, 0.0]}
    assert d[-1].tolist() == [0.0, 1.0, 2.0]


# -- jitclass instances ------------------------------------------------------------------------

def test_jitclass_fields_are_zeroed(model):
    z = make_zero(model)
    assert type(z) is type(model) and isinstance(z, Model)
    assert z.x == 0.0 and z.n == 0 and z.c == 0j and z.pair == (0.0, 0.0)
    assert z.flag is True and z.name == "model"               # no derivative: kept
    assert z.grid.shape == (2, 3) and z.grid.flags.c_contiguous and np.all(z.grid == 0)
    assert numba.typeof(z.samples) == types.ListType(types.float64)
    assert list(z.samples) == [0.0, 0.0, 0.0]
    assert z.spare is None
    assert z._Model__secret == 0.0
    assert z.head.value == 0.0 and z.head.next.next.value == 0.0
    # a new instance: the original keeps its values
    z.x = 4.0
    assert model.x == 1.5 and model.n == 7 and model.head.value == 1.0
    assert list(model.samples) == [1.0, 2.0, 3.0] and np.all(model.grid == 1.0)


def test_linked_list_of_three(three):
    a, b, c = three
    z = make_zero(a)
    assert walk(z) == (0.0, 0.0, 3)
    assert walk(a) == (6.0, 9.0, 3)
    assert [z.w.shape, z.next.w.shape, z.next.next.w.shape] == [(2,), (2,), (3,)]
    assert z.next.next.next is None
    z.w[0] = 5.0                                   # a and b share w: so do their zeros
    assert z.next.w[0] == 5.0 and z.next.next.w[0] == 0.0 and a.w[0] == 1.0


def test_jitclass_aliasing_and_cycles(three):
    a, b, c = three
    z = make_zero((a, b, a))
    assert z[0] is z[2]
    z[1].value = 7.0                               # the zero of b is the one a's zero links to
    assert z[0].next.value == 7.0
    c.next = a
    try:
        zc = make_zero(b)                          # b -> c -> a -> b
    finally:
        c.next = None
    zc.value = 3.0
    assert zc.next.next.next.value == 3.0
    assert zc.next.next.next.next.value == 0.0


def test_long_jitclass_list():
    head = chain(3000)
    z = make_zero(head)
    assert walk(z) == (0.0, 0.0, 3000)


# -- errors and use ----------------------------------------------------------------------------

@pytest.mark.parametrize("value, kind, where", [
    ({1.0, 2.0}, "a set", "(in x)"),
    ({"k": [1.0, frozenset()]}, "a frozenset", "(in x['k'][1])"),
    ((len,), "a builtin_function_or_method", "(in x[0])"),
    (np, "a module", "(in x)"),
    (Plain(lambda: 1.0, 0.1), "a function", "(in x.w)"),
])
def test_unsupported_values_name_type_and_place(value, kind, where):
    with pytest.raises(UnsupportedError, match="make_zero cannot zero") as info:
        make_zero(value)
    message = str(info.value)
    assert kind in message and where in message and "build its zero yourself" in message


def test_deep_paths_are_shortened():
    head = cur = {}
    for _ in range(50):
        cur["next"] = {}
        cur = cur["next"]
    cur["bad"] = {1}
    with pytest.raises(UnsupportedError, match=r"\(in x\(\['next'\]\)\*50\['bad'\]\)"):
        make_zero(head)


def test_exported_from_the_package_and_from_convenience():
    assert pyzyme.api.convenience.make_zero is pyzyme.make_zero is pyzyme.api.args.make_zero.make_zero
