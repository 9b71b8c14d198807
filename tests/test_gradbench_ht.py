"""GradBench's ht eval (pyzyme.gradbench.evals.ht): the Numba residuals against a NumPy
transcription of ADBench's hand tracking, both Jacobians (simple and complicated) against
central finite differences and against reverse mode, and the JSON the eval reads."""

import numpy as np
import pytest

import pyzyme
from pyzyme.gradbench.evals import ht

N_BONES, N_VERTS, N_POINTS = 22, 9, 5


def _rot(axis, t):
    c, s = np.cos(t), np.sin(t)
    i, j = [(1, 2), (0, 2), (0, 1)][axis]
    R = np.eye(3)
    R[i, i], R[j, j] = c, c
    R[j, i], R[i, j] = s, -s
    if axis == 1:        # y: the sine's sign is the other way round
        R[j, i], R[i, j] = -s, s
    return R


def _reference(theta, us, model, correspondences, points):
    """ADBench's hand objective in NumPy: 3N residuals (us None: the simple variant)."""
    pose = np.zeros((N_BONES + 3, 3))
    pose[0], pose[1], pose[2] = theta[0:3], 1.0, theta[3:6]
    t = iter(theta[6:])
    for finger in range(5):
        for k in range(3):
            row = 5 + 4 * finger + k
            pose[row, 0] = next(t)
            if k == 0:
                pose[row, 1] = next(t)
    absolutes = []
    for i in range(N_BONES):
        tx, tz, ty = pose[i + 3]
        tr = np.eye(4)
        tr[:3, :3] = _rot(2, tz) @ _rot(1, ty) @ _rot(0, tx)
        rel = model["base_relatives"][i] @ tr
        p = model["parents"][i]
        absolutes.append(rel if p == -1 else absolutes[p] @ rel)
    skinned = sum(model["weights"][:, b:b + 1] *
                  (model["base_positions"] @ (absolutes[b] @ model["ibas"][b]).T)[:, :3]
                  for b in range(N_BONES))
    angle = np.linalg.norm(pose[0])
    R = np.eye(3)
    if angle >= 1e-4:
        k = pose[0] / angle
        K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
        R = np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K
    vertices = skinned @ R.T + pose[2]
    if us is None:
        hand = vertices[correspondences]
    else:
        tri = model["triangles"][correspondences]
        hand = (us[:, :1] * vertices[tri[:, 0]] + us[:, 1:] * vertices[tri[:, 1]]
                + (1 - us[:, :1] - us[:, 1:]) * vertices[tri[:, 2]])
    return (points - hand).ravel()


def _input(complicated, seed=0):
    rng = np.random.default_rng(seed)

    def transform():
        A = np.eye(4)
        A[:3, :3] = np.linalg.qr(rng.normal(size=(3, 3)))[0]
        A[:3, 3] = rng.normal(size=3) * 0.3
        return A

    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, N_BONES)]
    weights = rng.uniform(0, 1, (N_VERTS, N_BONES)) * (rng.uniform(size=(N_VERTS, N_BONES))
                                                      < 0.3)
    model = {"bone_count": N_BONES, "bone_names": [f"b{i}" for i in range(N_BONES)],
             "parents": parents,
             "base_relatives": [transform().tolist() for _ in range(N_BONES)],
             "inverse_base_absolutes": [transform().tolist() for _ in range(N_BONES)],
             "base_positions": np.column_stack([rng.normal(size=(N_VERTS, 3)),
                                                np.ones(N_VERTS)]).tolist(),
             "weights": weights.tolist(),
             "triangles": rng.integers(0, N_VERTS, (7, 3)).tolist(),
             "is_mirrored": False}
    corr = rng.integers(0, 7 if complicated else N_VERTS, N_POINTS).tolist()
    return {"theta": rng.uniform(-0.5, 0.5, 26).tolist(),
            "us": rng.uniform(0, 0.5, (N_POINTS, 2)).tolist() if complicated else [],
            "data": {"model": model, "correspondences": corr,
                     "points": rng.normal(size=(N_POINTS, 3)).tolist()},
            "min_runs": 1, "min_seconds": 0}


def _reference_of(inp):
    m = inp["data"]["model"]
    model = {"parents": m["parents"], "base_relatives": np.array(m["base_relatives"]),
             "ibas": np.array(m["inverse_base_absolutes"]),
             "base_positions": np.array(m["base_positions"]), "weights": np.array(m["weights"]),
             "triangles": np.array(m["triangles"])}
    corr, points = np.array(inp["data"]["correspondences"]), np.array(inp["data"]["points"])

    def f(theta, us):
        return _reference(theta, us, model, corr, points)
    return f


@pytest.mark.parametrize("complicated", [False, True])
def test_objective_matches_numpy(complicated):
    inp = _input(complicated)
    out = ht.FUNCTIONS["objective"].evaluate(inp)
    us = np.array(inp["us"]) if complicated else None
    assert isinstance(out, list) and len(out) == 3 * N_POINTS
    np.testing.assert_allclose(out, _reference_of(inp)(np.array(inp["theta"]), us),
                               rtol=1e-12, atol=1e-12)


def test_small_rotation_is_the_identity():
    inp = _input(False, seed=3)
    inp["theta"][:3] = [1e-5, 0.0, -2e-5]
    np.testing.assert_allclose(ht.FUNCTIONS["objective"].evaluate(inp),
                               _reference_of(inp)(np.array(inp["theta"]), None),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("complicated", [False, True])
def test_jacobian_matches_finite_differences_and_reverse_mode(complicated):
    inp = _input(complicated, seed=1)
    J = np.array(ht.FUNCTIONS["jacobian"].evaluate(inp))
    assert J.shape == (3 * N_POINTS, 28 if complicated else 26)
    f = _reference_of(inp)
    theta = np.array(inp["theta"])
    us = np.array(inp["us"]) if complicated else None
    fd = []
    h = 1e-6
    if complicated:
        for c in range(2):       # every point's own coordinate c moves at once
            e = np.zeros_like(us)
            e[:, c] = h
            fd.append((f(theta, us + e) - f(theta, us - e)) / (2 * h))
    for k in range(26):
        e = np.zeros(26)
        e[k] = h
        fd.append((f(theta + e, us) - f(theta - e, us)) / (2 * h))
    np.testing.assert_allclose(J, np.column_stack(fd), rtol=1e-6, atol=1e-7)

    # reverse mode, one row at a time: the cotangents of theta and of us (whose columns are
    # the sums over each point's own coordinate)
    args = ht.prepare(inp)
    function = ht.objective_complicated if complicated else ht.objective_simple
    _, pullback = pyzyme.vjp(function, *args)
    rows = []
    for r in range(3 * N_POINTS):
        seed = np.zeros(3 * N_POINTS)
        seed[r] = 1.0
        grads = pullback(seed)
        rows.append(np.concatenate([grads[1].sum(axis=0), grads[0]]) if complicated
                    else grads[0])
    np.testing.assert_allclose(J, np.array(rows), rtol=1e-10, atol=1e-12)


def test_pose_of_a_model_with_fewer_bones_stays_in_its_array():
    """ADBench's pose layout fills 25 rows whatever the model; a one-bone model (as in the
    module's example) had them written past the end of its 4-row array, corrupting the heap
    (Numba checks no bounds: a later malloc aborted the process)."""
    from pyzyme.gradbench.evals.ht import to_pose_params
    pose = to_pose_params(np.arange(26.0), 1)
    assert pose.shape[0] >= 25 and pose[23, 0] == 25.0   # the last angle, theta[25]
