"""A corpus of functions over Numba's types -- tuples and namedtuples of floats, arrays and
other fields, records and arrays of records, jitclass instances (nested, holding arrays, linked
lists through optional instances), optional arguments, bools, integers and strings -- each
differentiated in reverse and in forward mode and checked against central finite differences,
and the two modes against each other.

Reverse mode passes floats and tuples as ``Active`` (the derivative comes back in the same
structure) and arrays, records and jitclass instances as ``Duplicated(x, make_zero(x))``;
forward mode passes each differentiated argument as ``Duplicated(x, tangent)`` with a tangent of
the same structure. Every other argument is ``Const``.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numba
import numpy as np
import pytest
from numba import boolean, deferred_type, float64, int64, optional, types
from numba.experimental import jitclass

from pyzyme import (Active, BatchDuplicated, Const, Duplicated, Forward, PyzymeError, Reverse,
                    ReverseSplitWithPrimal, ReverseWithPrimal, UnsupportedError, autodiff,
                    autodiff_thunk, jacfwd, jacobian, jacrev, make_zero)
from pyzyme.api.dispatchers import njit_of
from tests.types_structures import fill, leaves

# -- types ---------------------------------------------------------------------------------------
P = namedtuple("P", "a b")
Q = namedtuple("Q", "a n b")                # an integer field, carried unchanged
W = namedtuple("W", "w x s")                # arrays and a float
N = namedtuple("N", "a name")               # a string field

REC = np.dtype([("x", np.float64), ("n", np.int64), ("y", np.float64)])
NESTED = np.dtype([("p", [("u", np.float64), ("v", np.float64)]), ("k", np.int64),
                   ("w", np.float64)])
VREC = np.dtype([("v", np.float64, (3,)), ("k", np.int64)])


@jitclass([("x", float64), ("y", float64)])
class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def norm2(self):
        return self.x * self.x + self.y * self.y


@jitclass([("pos", float64[:]), ("mass", float64), ("ident", int64)])
class Particle:
    def __init__(self, pos, mass, ident):
        self.pos = pos
        self.mass = mass
        self.ident = ident


@jitclass([("a", Point.class_type.instance_type), ("b", Point.class_type.instance_type)])
class Segment:
    def __init__(self, a, b):
        self.a = a
        self.b = b


@jitclass([("w", float64[:, :]), ("b", float64[:]), ("on", boolean), ("name", types.unicode_type)])
class Layer:
    def __init__(self, w, b, on, name):
        self.w = w
        self.b = b
        self.on = on
        self.name = name


@jitclass([("t", types.UniTuple(float64, 2)), ("recs", numba.from_dtype(REC)[:])])
class Holder:                               # a tuple field and an array of records
    def __init__(self, t, recs):
        self.t = t
        self.recs = recs


node_type = deferred_type()


@jitclass([("val", float64), ("next", optional(node_type))])
class Node:
    def __init__(self, val, next):
        self.val = val
        self.next = next


node_type.define(Node.class_type.instance_type)

vnode_type = deferred_type()


@jitclass([("data", float64[:]), ("scale", float64), ("next", optional(vnode_type))])
class VNode:
    def __init__(self, data, scale, next):
        self.data = data
        self.scale = scale
        self.next = next


vnode_type.define(VNode.class_type.instance_type)


@jitclass([("acc", float64), ("count", int64)])
class Accumulator:
    def __init__(self, acc, count):
        self.acc = acc
        self.count = count


def linked(*vals):
    head = None
    for v in reversed(vals):
        head = Node(v, head)
    return head


# -- functions -----------------------------------------------------------------------------------
def tuple_prod(t):
    return t[0] * t[1] ** 2


def tuple_loop(t):
    s = 0.0
    for v in t:
        s += np.sin(v) * v
    return s


def nt_exp(p):
    return p.a * np.exp(p.b)


def nt_int_field(q):
    return q.a ** q.n + q.b * q.n


def nt_arrays(w):
    s = 0.0
    for i in range(w.w.shape[0]):
        s += w.w[i] * w.x[i]
    return s * w.s


def nt_string(q):
    if q.name == "square":
        return q.a * q.a
    return q.a


def nested_tuple(t):
    (a, b), c = t
    return a * b + np.cos(c) * a


def tuple_of_arrays(t):
    x, y = t
    return np.sum(x * y) + np.sum(x ** 3)


def tuple_with_bool(t):
    x, flag = t
    return x * x if flag else x


def mixed_tuple(t):
    x, v, k = t
    return x * np.sum(v) ** k


def record_scalar(r):
    return r.x * r.y * r.n + np.sqrt(r.y)


def record_subarray(r):
    return r.v[0] * r.v[2] * r.k - r.v[1] ** 2


def record_array(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i].x * a[i].y * a[i].n
    return s


def record_array_norm(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += np.sqrt(a[i].x ** 2 + a[i].y ** 2)
    return s


def nested_record(a):
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i].p.u * a[i].p.v * a[i].k + a[i].w ** 2
    return s


@numba.njit
def holder_sum(h):
    s = h.t[0] * h.t[1]
    for i in range(h.recs.shape[0]):
        s += h.recs[i].x * h.recs[i].y * h.t[i % 2]
    return s


def record_and_float(r, a):
    return r.x * a + np.log(r.y) * a * a


@numba.njit
def point_xy(p):
    return p.x * p.y


@numba.njit
def point_method(p):
    return np.sqrt(p.norm2())


@numba.njit
def particle_energy(p):
    return 0.5 * p.mass * np.sum(p.pos ** 2) + p.ident


@numba.njit
def segment_cross(s):
    return s.a.x * s.b.y - s.a.y * s.b.x


@numba.njit
def segment_length(s):
    dx = s.b.x - s.a.x
    dy = s.b.y - s.a.y
    return np.sqrt(dx * dx + dy * dy)


@numba.njit
def sumlist(n):
    s = 0.0
    while n is not None:
        s += n.val
        n = n.next
    return s


@numba.njit
def weighted_list(n):
    s, i = 0.0, 1
    while n is not None:
        s += i * n.val * n.val
        i += 1
        n = n.next
    return s


@numba.njit
def product_list(n):
    p = 1.0
    while n is not None:
        p *= n.val
        n = n.next
    return p


@numba.njit
def list_head_only(n):
    if n.next is None:
        return n.val * 3.0
    return n.val * n.next.val


@numba.njit
def deep_link(n):                       # deeper than the type seeds spell out
    return n.next.next.next.next.next.val * n.val


@numba.njit
def recursive_list(n):
    if n.next is None:
        return n.val * n.val
    return n.val * n.val + recursive_list(n.next)


@numba.njit
def vlist_sum(n):
    s = 0.0
    while n is not None:
        s += n.scale * np.sum(np.sin(n.data))
        n = n.next
    return s


@numba.njit
def layer_forward(layer, x):
    s = 0.0
    for i in range(layer.w.shape[0]):
        z = layer.b[i]
        for j in range(layer.w.shape[1]):
            z += layer.w[i, j] * x[j]
        s += np.tanh(z) if layer.on else z
    return s


@numba.njit
def layer_named(layer, x):
    s = layer_forward(layer, x)
    if layer.name == "double":
        return 2.0 * s
    return s


@numba.njit
def accumulate(acc, x):
    for _ in range(3):
        acc.acc = acc.acc * x + 1.0
        acc.count += 1
    return acc.acc


@numba.njit
def point_and_float(p, t):
    return p.x * np.cos(t) - p.y * np.sin(t)


@numba.njit
def particle_and_array(p, v):
    return p.mass * np.sum(p.pos * v)


@numba.njit
def scale_by_count(p, k):
    return p.x ** k + p.y * k


def optional_float(x, o):
    if o is None:
        return x * x
    return x * o


def bool_branch(x, flag):
    return np.exp(x) if flag else np.sin(x)


def int_power(x, n):
    return x ** n + n * x


def string_op(x, op):
    if op == "cube":
        return x * x * x
    return 2.0 * x


def none_arg(x, nothing):
    return x * 2.0 if nothing is None else x


def tuple_of_points(t):
    return t[0].x * t[1].y + t[0].y


def nt_of_instance(w):
    return w.a * w.b.x * w.b.y


@numba.njit
def array_field_update(p):
    p.pos[0] = p.pos[0] * p.mass
    return np.sum(p.pos * p.pos)


@numba.njit
def construct_inside(a):
    p = Point(a * a, 3.0 * a)
    return point_method(p) + p.x


@numba.njit
def build_and_sum(x):
    n = Node(x[0], None)
    for i in range(1, x.shape[0]):
        n = Node(x[i] * x[i], n)
    return weighted_list(n)


@dataclass
class Case:
    name: str
    f: object
    args: tuple
    diff: tuple = (0,)


def _rng_array(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, shape)


_REC = np.array([(1.2, 3, 2.5), (0.7, 2, 1.1), (1.9, 1, 0.4)], dtype=REC)
_VREC = np.array([([1.1, 0.6, 1.4], 2)], dtype=VREC)

CASES = [
    Case("tuple_prod", tuple_prod, ((2.0, 3.0),)),
    Case("tuple_loop", tuple_loop, ((0.3, 1.1, 2.0),)),
    Case("nt_exp", nt_exp, (P(1.5, 0.3),)),
    Case("nt_int_field", nt_int_field, (Q(1.3, 3, 0.7),)),
    Case("nt_arrays", nt_arrays, (W(_rng_array(4), _rng_array(4, seed=1), 1.7),)),
    Case("nt_string", nt_string, (N(1.3, "square"),)),
    Case("nested_tuple", nested_tuple, (((1.2, 0.4), 0.9),)),
    Case("tuple_of_arrays", tuple_of_arrays, ((_rng_array(3), _rng_array(3, seed=2)),)),
    Case("tuple_with_bool", tuple_with_bool, ((1.7, True),)),
    Case("mixed_tuple", mixed_tuple, ((0.8, _rng_array(3), 2),)),
    Case("record_scalar", record_scalar, (_REC[0],)),
    Case("record_subarray", record_subarray, (_VREC[0],)),
    Case("record_array", record_array, (_REC,)),
    Case("record_array_norm", record_array_norm, (_REC,)),
    Case("record_and_float", record_and_float, (_REC[1], 1.3), (0, 1)),
    Case("nested_record", nested_record,
         (np.array([((1.0, 2.0), 3, 0.5), ((0.7, 1.1), 2, 1.5)], dtype=NESTED),)),
    Case("holder_sum", holder_sum, (Holder((1.5, 0.5), _REC.copy()),)),
    Case("point_xy", point_xy, (Point(1.5, -2.0),)),
    Case("point_method", point_method, (Point(1.5, -2.0),)),
    Case("particle_energy", particle_energy, (Particle(_rng_array(3), 2.0, 7),)),
    Case("segment_cross", segment_cross, (Segment(Point(1.0, 2.0), Point(0.5, -1.5)),)),
    Case("segment_length", segment_length, (Segment(Point(1.0, 2.0), Point(0.5, -1.5)),)),
    Case("sumlist", sumlist, (linked(1.0, 2.0, 3.5),)),
    Case("weighted_list", weighted_list, (linked(0.5, -1.0, 2.0, 1.5),)),
    Case("product_list", product_list, (linked(1.1, 0.9, 1.3),)),
    Case("list_head_only", list_head_only, (linked(1.1, 0.9),)),
    Case("list_single", list_head_only, (linked(1.7),)),
    Case("deep_link", deep_link, (linked(1.5, 0.5, 0.7, 0.9, 1.1, 1.3, 0.2),)),
    Case("recursive_list", recursive_list, (linked(0.5, -1.0, 2.0, 1.5, 0.3),)),
    Case("vlist_sum", vlist_sum, (VNode(_rng_array(2), 1.5, VNode(_rng_array(3), 0.5, None)),)),
    Case("layer_forward", layer_forward,
         (Layer(_rng_array(2, 3) - 1.0, _rng_array(2) - 1.0, True, "plain"), _rng_array(3)),
         (0, 1)),
    Case("layer_off", layer_forward,
         (Layer(_rng_array(2, 3), _rng_array(2), False, "plain"), _rng_array(3))),
    Case("layer_named", layer_named,
         (Layer(_rng_array(2, 2) - 1.0, _rng_array(2) - 1.0, True, "double"), _rng_array(2))),
    Case("accumulate", accumulate, (Accumulator(0.5, 0), 1.3), (0, 1)),
    Case("point_and_float", point_and_float, (Point(1.5, -2.0), 0.4), (0, 1)),
    Case("particle_and_array", particle_and_array,
         (Particle(_rng_array(3), 2.0, 1), _rng_array(3, seed=5)), (0, 1)),
    Case("scale_by_count", scale_by_count, (Point(1.5, 0.5), 3)),
    Case("optional_float_none", optional_float, (1.3, None)),
    Case("optional_float_set", optional_float, (1.3, 2.5)),
    Case("bool_branch_true", bool_branch, (0.7, True)),
    Case("bool_branch_false", bool_branch, (0.7, False)),
    Case("int_power", int_power, (1.3, 4)),
    Case("string_op", string_op, (1.3, "cube")),
    Case("none_arg", none_arg, (1.3, None)),
    Case("tuple_of_points", tuple_of_points, ((Point(1.0, 2.0), Point(0.5, 3.0)),)),
    Case("nt_of_instance", nt_of_instance, (P(1.2, Point(0.5, 3.0)),)),
    Case("array_field_update", array_field_update, (Particle(_rng_array(3), 1.5, 2),)),
    Case("construct_inside", construct_inside, (0.7,)),
    Case("build_and_sum", build_and_sum, (_rng_array(4),)),
]


# -- the checks ----------------------------------------------------------------------------------
def _args_at(case: Case, theta: np.ndarray) -> list:
    """Fresh arguments with the differentiated ones' float slots set to ``theta``."""
    args, k = [], 0
    for i, a in enumerate(case.args):
        if i in case.diff:
            n = leaves(a).size
            args.append(fill(a, theta[k:k + n]))
            k += n
        else:
            args.append(a)
    return args


def _theta(case: Case) -> np.ndarray:
    return np.concatenate([leaves(case.args[i]) for i in case.diff])


def _call(case: Case, args) -> float:
    return njit_of(case.f)(*args)  # the dispatcher autodiff differentiates, compiled once


def _finite_differences(case: Case) -> np.ndarray:
    theta = _theta(case)
    grad = np.empty_like(theta)
    for i in range(theta.size):
        h = 1e-6 * max(1.0, abs(theta[i]))
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (_call(case, _args_at(case, up)) - _call(case, _args_at(case, down))) / (2 * h)
    return grad


def _reverse_gradient(case: Case) -> tuple[np.ndarray, float]:
    args = _args_at(case, _theta(case))
    anns, shadows = [], {}
    for i, a in enumerate(args):
        if i not in case.diff:
            anns.append(Const(a))
        elif isinstance(a, (float, tuple)):
            anns.append(Active(a))
        else:
            shadows[i] = make_zero(a)
            anns.append(Duplicated(a, shadows[i]))
    (derivs,) = autodiff(Reverse, case.f, Active, *anns)
    for i in range(len(args)):
        if i not in case.diff:
            assert derivs[i] is None
    parts = [leaves(shadows[i] if i in shadows else derivs[i]) for i in case.diff]
    return np.concatenate(parts), derivs


def _forward_derivative(case: Case, direction: np.ndarray) -> float:
    theta = _theta(case)
    args = _args_at(case, theta)
    tangents = _args_at(case, direction)
    anns = [Duplicated(a, t) if i in case.diff else Const(a)
            for i, (a, t) in enumerate(zip(args, tangents))]
    primal, tangent = autodiff(Forward, case.f, Duplicated, *anns)
    assert primal == pytest.approx(_call(case, _args_at(case, theta)), rel=1e-12)
    return tangent


_IDS = [c.name for c in CASES]


def test_corpus_size():
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_reverse_matches_finite_differences(case):
    grad, _ = _reverse_gradient(case)
    fd = _finite_differences(case)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)
    assert np.any(fd != 0.0)  # every case has a derivative to find


@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_forward_matches_finite_differences_and_reverse(case):
    grad, _ = _reverse_gradient(case)
    fd = _finite_differences(case)
    direction = np.random.default_rng(len(case.name)).uniform(-1.0, 1.0, fd.size)
    tangent = _forward_derivative(case, direction)
    assert tangent == pytest.approx(fd @ direction, rel=1e-5, abs=1e-6)
    assert tangent == pytest.approx(grad @ direction, rel=1e-10, abs=1e-12)


def test_structure_of_reverse_derivatives():
    # Active tuples come back in their structure, integers and strings unchanged.
    (d,) = autodiff(Reverse, nt_int_field, Active, Active(Q(1.3, 3, 0.7)))[0]
    assert isinstance(d, Q) and d.n == 3 and isinstance(d.n, int)
    assert d.a == pytest.approx(3 * 1.3 ** 2) and d.b == pytest.approx(3.0)
    (d,) = autodiff(Reverse, nt_string, Active, Active(N(1.3, "square")))[0]
    assert d == N(pytest.approx(2.6), "square")
    (d,) = autodiff(Reverse, mixed_tuple, Active, Active((0.8, np.ones(3), 2)))[0]
    assert d[0] == pytest.approx(9.0) and d[2] == 2
    np.testing.assert_allclose(d[1], [2 * 0.8 * 3.0] * 3)
    # records: float fields differentiated, the integer field of the shadow left at zero
    rec = _REC[0].copy()
    drec = make_zero(rec)
    autodiff(Reverse, record_scalar, Active, Duplicated(rec, drec))
    assert drec["n"] == 0
    assert drec["x"] == pytest.approx(2.5 * 3) and drec["y"] == pytest.approx(
        1.2 * 3 + 0.5 / np.sqrt(2.5))


@numba.njit
def fill_point(p, a):
    p.x = a * a
    p.y = np.sin(a)


def test_instance_as_output():
    # Const return, the result written into a Duplicated instance: its shadow is the seed,
    # consumed (zeroed) by the reverse sweep, and carries the tangent in forward mode.
    q, dq = Point(0.0, 0.0), Point(1.0, 2.0)
    ((none, da),) = autodiff(Reverse, fill_point, Const, Duplicated(q, dq), Active(0.5))
    assert none is None and da == pytest.approx(2 * 0.5 + 2.0 * np.cos(0.5))
    assert (q.x, q.y, dq.x, dq.y) == (0.25, np.sin(0.5), 0.0, 0.0)
    q, dq = Point(0.0, 0.0), Point(0.0, 0.0)
    assert autodiff(Forward, fill_point, Const, Duplicated(q, dq), Duplicated(0.5, 1.0)) == ()
    assert (dq.x, dq.y) == (pytest.approx(1.0), pytest.approx(np.cos(0.5)))


@numba.njit
def make_point(a):
    return Point(a * a, 3.0 * a)


def test_instance_as_result():
    p, t = autodiff(Forward, make_point, Duplicated, Duplicated(2.0, 1.0))
    assert (p.x, p.y, t.x, t.y) == (4.0, 6.0, 4.0, 3.0)
    with pytest.raises(UnsupportedError, match="reverse mode seeds float results"):
        autodiff(Reverse, make_point, Active, Active(2.0))


def test_refusals_are_clear():
    with pytest.raises(UnsupportedError, match="pass the tuple as Active"):
        autodiff(Reverse, tuple_of_arrays, Active,
                 Duplicated((np.ones(2), 1.0), (np.zeros(2), 0.0)))
    with pytest.raises(PyzymeError, match="same jitclass"):
        autodiff(Forward, point_xy, Duplicated, Duplicated(Point(1.0, 2.0), Segment(
            Point(0.0, 0.0), Point(0.0, 0.0))))
    with pytest.raises(PyzymeError, match="record of the same dtype"):
        autodiff(Reverse, record_scalar, Active, Duplicated(_REC[0], _VREC[0]))


# -- tuple-valued functions: Jacobians ----------------------------------------------------------
def polar(x):
    return (x[0] * np.cos(x[1]), x[0] * np.sin(x[1]))


def moments(x):
    return (np.sum(x), np.sum(x * x), np.prod(x))


def scalar_pair(t):
    return (t * t, np.exp(t))


def _fd_jacobian(f, x):
    x = np.asarray(x, dtype=np.float64)
    cols = []
    for i in range(x.size):
        h = 1e-6 * max(1.0, abs(x.flat[i]))
        up, down = x.copy(), x.copy()
        up.flat[i] += h
        down.flat[i] -= h
        call = (lambda v: njit_of(f)(v)) if x.ndim else (lambda v: njit_of(f)(float(v)))
        cols.append((np.array(call(up)) - np.array(call(down))) / (2 * h))
    out_shape = np.array(call(x)).shape
    return np.array(cols).T.reshape(out_shape + x.shape)     # JAX's out.shape + in.shape


@pytest.mark.parametrize("f, x", [(polar, np.array([1.5, 0.4])),
                                  (moments, np.array([0.5, 1.5, 2.0])),
                                  (scalar_pair, 0.7)], ids=["polar", "moments", "scalar_pair"])
def test_jacobian_of_tuple_valued_functions(f, x):
    fd = _fd_jacobian(f, x)
    jf = jacobian(Forward, f, x)
    jr = jacobian(Reverse, f, x)
    np.testing.assert_allclose(jf, fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(jr, jf, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jacfwd(f)(x), jf, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jacrev(f)(x), jf, rtol=1e-12, atol=1e-14)


def test_batch_forward_and_split_reverse_with_instances_and_records():
    p = Point(2.0, 3.0)
    lanes = (Point(1.0, 0.0), Point(0.0, 1.0))
    assert autodiff(Forward, point_xy, BatchDuplicated, BatchDuplicated(p, lanes)) == \
        (6.0, (3.0, 2.0))
    rec = _REC[0]
    seeds = np.zeros(2, REC)
    seeds[0]["x"], seeds[1]["y"] = 1.0, 1.0
    value, (dx, dy) = autodiff(Forward, record_scalar, BatchDuplicated,
                               BatchDuplicated(rec, (seeds[0], seeds[1])))
    assert (dx, dy) == (pytest.approx(2.5 * 3), pytest.approx(1.2 * 3 + 0.5 / np.sqrt(2.5)))
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, segment_cross, Active,
                              Duplicated(Segment(p, p), make_zero(Segment(p, p))))
    s = Segment(Point(1.0, 2.0), Point(0.5, -1.5))
    ds = make_zero(s)
    tape, result, _ = fwd(Duplicated(s, ds))
    assert result == 1.0 * -1.5 - 2.0 * 0.5
    rev(Duplicated(s, ds), 1.0, tape)
    assert (ds.a.x, ds.a.y, ds.b.x, ds.b.y) == (-1.5, -0.5, -2.0, 1.0)


@numba.njit
def overwrite_through_alias(p, a):
    s = p.pos[0] * p.mass
    a[0] = 5.0                              # a is p.pos: the instance's array changes
    return s + p.pos[0] * p.pos[0]


def test_array_shared_with_an_instance_field():
    # a is the array inside p: no noalias may be assumed, the overwritten value is 5.0
    p = Particle(np.array([2.0, 1.0]), 3.0, 0)
    dp = make_zero(p)
    (n1, n2), value = autodiff(ReverseWithPrimal, overwrite_through_alias, Active,
                                  Duplicated(p, dp), Duplicated(p.pos, dp.pos))
    assert value == 31.0 and n1 is None and n2 is None
    assert (dp.pos[0], dp.pos[1], dp.mass) == (3.0, 0.0, 2.0)
