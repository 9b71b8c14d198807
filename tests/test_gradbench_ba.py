"""GradBench's ba eval (pyzyme.gradbench.evals.ba): the Numba residuals against a NumPy
transcription of ADBench's bundle adjustment, the sparse Jacobian against central finite
differences and against forward mode, and the JSON the eval reads."""

import numpy as np
import pytest

import pyzyme
from pyzyme.gradbench.evals import ba


def _rotate(rot, x):
    """Rodrigues' rotation as a matrix (R = I + sin t K + (1 - cos t) K^2), not Ceres' form."""
    theta = np.linalg.norm(rot)
    if theta == 0.0:
        return x + np.cross(rot, x)
    k = rot / theta
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    R = np.eye(3) + np.sin(theta) * K + (1.0 - np.cos(theta)) * K @ K
    return R @ x


def _residuals(cams, X, w, obs, feats):
    """All 3p residuals as one vector: 2 per observation, then one per weight."""
    out = []
    for i, (c, j) in enumerate(obs):
        cam = cams[c]
        xc = _rotate(cam[0:3], X[j] - cam[3:6])
        proj = xc[:2] / xc[2]
        rsq = proj @ proj
        proj = proj * (1.0 + cam[9] * rsq + cam[10] * rsq * rsq)
        out.extend(w[i] * (proj * cam[6] + cam[7:9] - feats[i]))
    out.extend(1.0 - w * w)
    return np.array(out)


def _problem(n=3, m=4, p=7, seed=0):
    rng = np.random.default_rng(seed)
    cams = np.column_stack([rng.uniform(-0.4, 0.4, (n, 3)), rng.uniform(-1, 1, (n, 3)),
                            rng.uniform(400, 600, n), rng.uniform(-5, 5, (n, 2)),
                            rng.uniform(-1e-2, 1e-2, (n, 2))])
    X = np.column_stack([rng.uniform(-1, 1, (m, 2)), rng.uniform(5, 8, m)])
    w = rng.uniform(0.5, 1.5, p)
    obs = np.column_stack([rng.integers(0, n, p), rng.integers(0, m, p)]).astype(np.int64)
    feats = rng.uniform(-50, 50, (p, 2))
    return cams, X, w, obs, feats


def _dense(cams, X, w, obs, feats):
    """The Jacobian pyzyme computes, in CSR form turned dense."""
    n, m, p = len(cams), len(X), len(obs)
    nnz = 31 * p
    rows, cols, vals = np.empty(3 * p + 1, np.int64), np.empty(nnz, np.int64), np.empty(nnz)
    ba.jacobian(cams, X, w, obs, feats, rows, cols, vals)
    J = np.zeros((3 * p, 11 * n + 3 * m + p))
    for r in range(3 * p):
        J[r, cols[rows[r]:rows[r + 1]]] = vals[rows[r]:rows[r + 1]]
    return rows, J


def test_objective_matches_numpy():
    cams, X, w, obs, feats = _problem()
    cams[1, 0:3] = 0.0       # the first-order branch of the rotation
    p = len(obs)
    reproj, w_err = np.empty((p, 2)), np.empty(p)
    ba.objective(cams, X, w, obs, feats, reproj, w_err)
    np.testing.assert_allclose(np.concatenate([reproj.ravel(), w_err]),
                               _residuals(cams, X, w, obs, feats), rtol=1e-12, atol=1e-9)


def test_jacobian_matches_finite_differences():
    cams, X, w, obs, feats = _problem()
    n, m, p = len(cams), len(X), len(obs)
    rows, J = _dense(cams, X, w, obs, feats)
    assert rows[0] == 0 and rows[2 * p] == 30 * p and rows[-1] == 31 * p
    theta = np.concatenate([cams.ravel(), X.ravel(), w])

    def f(t):
        return _residuals(t[:11 * n].reshape(n, 11), t[11 * n:11 * n + 3 * m].reshape(m, 3),
                          t[11 * n + 3 * m:], obs, feats)

    fd = np.empty_like(J)
    for k in range(theta.size):
        h = 1e-6 * max(1.0, abs(theta[k]))
        e = np.zeros_like(theta)
        e[k] = h
        fd[:, k] = (f(theta + e) - f(theta - e)) / (2 * h)
    np.testing.assert_allclose(J, fd, rtol=1e-5, atol=1e-5 * np.abs(fd).max())


def test_reverse_blocks_match_forward_mode():
    cams, X, w, obs, feats = _problem(seed=1)
    fwd = pyzyme.jacfwd(ba.observation_error)
    q = np.empty(ba.N_BLOCK)
    for i, (c, j) in enumerate(obs):
        q[:11], q[11:14], q[14] = cams[c], X[j], w[i]
        np.testing.assert_allclose(ba.observation_jacobian(q, feats[i]), fwd(q, feats[i]),
                                   rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("function", ["objective", "jacobian"])
def test_json_is_what_the_eval_reads(function):
    inp = {"n": 2, "m": 3, "p": 16, "cam": [0.1, -0.2, 0.3, 1.0, 2.0, -3.0, 500.0, 10.0,
                                            20.0, 1e-3, 1e-6],
           "x": [0.5, -0.5, 4.0], "w": 0.8, "feat": [100.0, 200.0],
           "min_runs": 1, "min_seconds": 0}
    out = ba.FUNCTIONS[function].evaluate(inp)
    # the same problem, spelled out: camera i % n and point i % m for observation i
    cams = np.tile(inp["cam"], (2, 1))
    X = np.tile(inp["x"], (3, 1))
    w = np.full(16, 0.8)
    obs = np.column_stack([np.arange(16) % 2, np.arange(16) % 3]).astype(np.int64)
    feats = np.tile(inp["feat"], (16, 1))
    if function == "objective":
        res = _residuals(cams, X, w, obs, feats)
        assert set(out) == {"reproj_error", "w_err"}
        assert out["reproj_error"]["repeated"] == 16 and out["w_err"]["repeated"] == 16
        np.testing.assert_allclose(out["reproj_error"]["elements"], res[:2], rtol=1e-12)
        assert out["w_err"]["element"] == pytest.approx(res[-1], rel=1e-12)
        return
    assert set(out) == {"rows", "cols", "vals"}
    assert all(len(v) == 31 for v in out.values())
    assert out["rows"] == [15 * k for k in range(30)] + [31 * 16]
    # observation 0: camera 0 (cols 0-10), point 0 (cols 22-24), weight 0 (col 31)
    assert out["cols"] == 2 * (list(range(11)) + [22, 23, 24, 31]) + [22 + 9 + 15]
    _, J = _dense(cams, X, w, obs, feats)
    expected = np.concatenate([J[0, out["cols"][:15]], J[1, out["cols"][15:30]],
                               [J[-1, out["cols"][30]]]])
    np.testing.assert_allclose(out["vals"], expected, rtol=1e-12)
    assert out["vals"][-1] == pytest.approx(-1.6)
