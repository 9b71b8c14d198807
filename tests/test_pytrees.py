"""Pytrees at the boundary of the JAX-style layer: dicts (string keys, read as ``d["key"]``),
lists and tuples of floats and arrays, flattened in Python and given back in the same structure,
checked against central finite differences and forward mode against reverse mode."""

from __future__ import annotations

import numpy as np
import pytest

from pyzyme import UnsupportedError, grad, jvp, value_and_grad, vjp
from tests.types_structures import fill, leaves


def mlp(params, x):
    h = np.tanh(params["w1"] @ x + params["b1"])
    return np.sum(params["w2"] * h) + params["scale"]["c"] * params["b1"][0] ** 2


def listed(p):
    return p[0][0] * p[1] + np.sum(np.sin(p[2][0]))


def _params():
    rng = np.random.default_rng(3)
    return {"w1": rng.uniform(-1, 1, (3, 2)), "b1": rng.uniform(-1, 1, 3),
            "w2": rng.uniform(-1, 1, 3), "scale": {"c": 0.7}}


def _as_tuple(tree):
    """The pytree's floats in leaves() order: dicts by insertion order, lists as tuples."""
    if isinstance(tree, dict):
        return tuple(_as_tuple(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return tuple(_as_tuple(v) for v in tree)
    return tree


def _from_tuple(template, flat):
    if isinstance(template, dict):
        return {k: _from_tuple(v, f) for (k, v), f in zip(template.items(), flat)}
    if isinstance(template, list):
        return [_from_tuple(v, f) for v, f in zip(template, flat)]
    return flat


def _fd(f, tree, *rest):
    theta = leaves(_as_tuple(tree))
    out = np.empty_like(theta)
    for i in range(theta.size):
        h = 1e-6 * max(1.0, abs(theta[i]))
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        at = [_from_tuple(tree, fill(_as_tuple(tree), v)) for v in (up, down)]
        out[i] = (f(at[0], *rest) - f(at[1], *rest)) / (2 * h)
    return out


def test_grad_of_nested_dicts():
    params, x = _params(), np.array([0.3, -1.2])
    g = grad(mlp)(params, x)
    assert list(g) == list(params) and list(g["scale"]) == ["c"]
    assert g["w1"].shape == (3, 2) and isinstance(g["scale"]["c"], float)
    np.testing.assert_allclose(leaves(_as_tuple(g)), _fd(mlp, params, x), rtol=1e-6, atol=1e-8)
    value, g2 = value_and_grad(mlp)(params, x)
    assert value == pytest.approx(mlp(params, x))
    np.testing.assert_allclose(leaves(_as_tuple(g2)), leaves(_as_tuple(g)), rtol=1e-14)


def test_vjp_and_jvp_of_dicts_agree():
    params, x = _params(), np.array([0.3, -1.2])
    value, vjp_fn = vjp(mlp, params, x)
    gp, gx = vjp_fn(2.0)
    assert value == pytest.approx(mlp(params, x)) and isinstance(gp, dict)
    direction = np.random.default_rng(4).uniform(-1, 1, leaves(_as_tuple(params)).size)
    tangent = _from_tuple(params, fill(_as_tuple(params), direction))
    primal, t = jvp(mlp, (params, x), (tangent, np.zeros(2)))
    assert primal == pytest.approx(value)
    assert 2.0 * t == pytest.approx(leaves(_as_tuple(gp)) @ direction, rel=1e-12)
    assert t == pytest.approx(_fd(mlp, params, x) @ direction, rel=1e-6)


def test_lists_and_tuples():
    p = [np.array([1.5, 2.0]), 0.4, (np.array([0.3, 0.9]),)]
    g = grad(listed)(p)
    assert isinstance(g, list) and isinstance(g[2], tuple)
    np.testing.assert_allclose(leaves(_as_tuple(g)), _fd(listed, p), rtol=1e-6, atol=1e-8)
    tangent = [np.array([1.0, 0.0]), 1.0, (np.array([0.5, 0.5]),)]
    _, t = jvp(listed, (p,), (tangent,))
    assert t == pytest.approx(leaves(_as_tuple(g)) @ leaves(_as_tuple(tangent)), rel=1e-12)


def test_dict_keys_must_be_strings_and_present():
    with pytest.raises(UnsupportedError, match="dict with the key 1"):
        grad(lambda d: d[1])({1: 1.0})
    with pytest.raises(KeyError, match="'b' is not a key"):
        grad(lambda d: d["b"])({"a": 1.0})


def test_dict_classes_keys_are_kept_by_pytree_not_on_the_class():
    # the keys a dict's namedtuple class stands for are pytree's registry's, read by identity:
    # a namedtuple of the user's with the same fields stands for no dict
    from collections import namedtuple

    from pyzyme.api.args.pytree import dict_class, dict_keys
    cls = dict_class(("w", "b"))
    assert dict_keys(cls) == ("w", "b") and not hasattr(cls, "_pyzyme_keys")
    assert dict_keys(namedtuple("PytreeDict", ["f0", "f1"])) is None
    assert grad(lambda p: p["w"] * p["b"])({"w": 2.0, "b": 3.0}) == {"w": 3.0, "b": 2.0}
