"""GradBench's ``ba`` eval: bundle adjustment (ADBench's BA), its residuals and their Jacobian.

``objective`` computes, for ``p`` observations of ``m`` points by ``n`` cameras, each
observation's weighted reprojection error ``w * (project(cam, X) - feat)`` (2 numbers: the
point rotated by the camera's Rodrigues angle-axis, divided by depth, radially distorted,
scaled by the focal length and shifted to the principal point) and each weight's error
``1 - w * w``. The eval sends one camera, point, weight and feature, which the tool repeats:
camera ``i % n`` and point ``i % m`` for observation ``i`` (nothing exploits the repetition:
every observation is computed).

``jacobian`` is the sparse (2p + p) x (11n + 3m + p) Jacobian in ADBench's CSR layout (row
offsets, columns, values: 15 entries per reprojection row, one per weight row), of which the
eval receives the first 30 entries and the last. Each observation's residual depends on one
camera (11), one point (3) and one weight, so pyzyme differentiates the per-observation
function of those 15 numbers: ``pyzyme.jacrev`` of it, called inside the ``@njit`` loop over
observations (two reverse sweeps of one compiled derivative per observation, one per residual
row, as Enzyme's tool does), and ``pyzyme.grad`` of the weight error.

Examples
--------
>>> inp = {"n": 2, "m": 3, "p": 16, "cam": [0.1, -0.2, 0.3, 1.0, 2.0, -3.0, 500.0, 10.0,
...        20.0, 1e-7, 1e-14], "x": [0.5, -0.5, 4.0], "w": 0.8, "feat": [100.0, 200.0]}
>>> out = FUNCTIONS["jacobian"].evaluate(inp)
>>> len(out["rows"]), len(out["cols"]), len(out["vals"])
(31, 31, 31)
"""

import math

import numba
import numpy as np

import pyzyme
from pyzyme.gradbench.protocol import Function

__all__ = ["FUNCTIONS", "objective", "jacobian", "observation_error", "reprojection_error"]

N_CAM = 11
#: columns of one observation's block: its camera, its point, its weight
N_BLOCK = N_CAM + 3 + 1


@numba.njit
def rodrigues_rotate_point(r0, r1, r2, pt):
    """``pt`` (3 numbers) rotated by the angle-axis vector ``(r0, r1, r2)`` (Ceres' form;
    first order at 0)."""
    sqtheta = r0 * r0 + r1 * r1 + r2 * r2
    if sqtheta != 0.0:
        theta = math.sqrt(sqtheta)
        costheta = math.cos(theta)
        sintheta = math.sin(theta)
        theta_inverse = 1.0 / theta
        w0 = r0 * theta_inverse
        w1 = r1 * theta_inverse
        w2 = r2 * theta_inverse
        c0 = w1 * pt[2] - w2 * pt[1]
        c1 = w2 * pt[0] - w0 * pt[2]
        c2 = w0 * pt[1] - w1 * pt[0]
        tmp = (w0 * pt[0] + w1 * pt[1] + w2 * pt[2]) * (1.0 - costheta)
        return (pt[0] * costheta + c0 * sintheta + w0 * tmp,
                pt[1] * costheta + c1 * sintheta + w1 * tmp,
                pt[2] * costheta + c2 * sintheta + w2 * tmp)
    return (pt[0] + r1 * pt[2] - r2 * pt[1],
            pt[1] + r2 * pt[0] - r0 * pt[2],
            pt[2] + r0 * pt[1] - r1 * pt[0])


@numba.njit
def reprojection_error(cam, X, w, feat):
    """The weighted reprojection error of point ``X`` seen by camera ``cam`` (its first 11
    numbers: rotation, center, focal length, principal point, distortion) at ``feat``."""
    xcam = rodrigues_rotate_point(cam[0], cam[1], cam[2],
                                  (X[0] - cam[3], X[1] - cam[4], X[2] - cam[5]))
    p0 = xcam[0] / xcam[2]
    p1 = xcam[1] / xcam[2]
    rsq = p0 * p0 + p1 * p1
    distortion = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    proj0 = p0 * distortion * cam[6] + cam[7]
    proj1 = p1 * distortion * cam[6] + cam[8]
    return w * (proj0 - feat[0]), w * (proj1 - feat[1])


@numba.njit
def weight_error(w):
    """The weight's error term: how far ``w`` is from 1 (or -1)."""
    return 1.0 - w * w


@numba.njit
def objective(cams, X, w, obs, feats, reproj_err, w_err):
    """Every observation's reprojection error and every weight's error, written in place."""
    for i in range(obs.shape[0]):
        e0, e1 = reprojection_error(cams[obs[i, 0]], X[obs[i, 1]], w[i], feats[i])
        reproj_err[i, 0] = e0
        reproj_err[i, 1] = e1
    for i in range(w.shape[0]):
        w_err[i] = weight_error(w[i])


@numba.njit
def observation_error(q, feat):
    """One observation's error as a function of its block ``q``: camera, point, weight."""
    return reprojection_error(q, q[N_CAM:N_CAM + 3], q[N_CAM + 3], feat)


observation_jacobian = pyzyme.jacrev(observation_error)
weight_derivative = pyzyme.grad(weight_error)


@numba.njit
def jacobian(cams, X, w, obs, feats, rows, cols, vals):
    """The Jacobian in CSR form: ``rows`` (3p + 1 offsets), ``cols`` and ``vals`` (31p)."""
    n, m, p = cams.shape[0], X.shape[0], obs.shape[0]
    q = np.empty(N_BLOCK)
    rows[0] = 0
    k = 0
    for i in range(p):
        cam, pt = obs[i, 0], obs[i, 1]
        # Element by element: Numba compiles an array-to-slice assignment's shape check for
        # seconds, longer than the rest of this function.
        for j in range(N_CAM):
            q[j] = cams[cam, j]
        for j in range(3):
            q[N_CAM + j] = X[pt, j]
        q[N_CAM + 3] = w[i]
        J = observation_jacobian(q, feats[i])
        for r in range(2):
            for j in range(N_BLOCK):
                if j < N_CAM:
                    cols[k] = N_CAM * cam + j
                elif j < N_CAM + 3:
                    cols[k] = N_CAM * n + 3 * pt + j - N_CAM
                else:
                    cols[k] = N_CAM * n + 3 * m + i
                vals[k] = J[r, j]
                k += 1
            rows[2 * i + r + 1] = k
    for i in range(p):
        cols[k] = N_CAM * n + 3 * m + i
        vals[k] = weight_derivative(w[i])
        k += 1
        rows[2 * p + i + 1] = k


def _replicate(input):
    """The eval's one camera, point, weight and feature repeated over n, m and p; output
    buffers."""
    n, m, p = int(input["n"]), int(input["m"]), int(input["p"])
    cams = np.tile(np.asarray(input["cam"], dtype=np.float64), (n, 1))
    X = np.tile(np.asarray(input["x"], dtype=np.float64), (m, 1))
    w = np.full(p, float(input["w"]))
    feats = np.tile(np.asarray(input["feat"], dtype=np.float64), (p, 1))
    i = np.arange(p, dtype=np.int64)
    obs = np.ascontiguousarray(np.stack([i % n, i % m], axis=1))
    return cams, X, w, obs, feats


def _prepare_objective(input):
    cams, X, w, obs, feats = _replicate(input)
    p = obs.shape[0]
    return cams, X, w, obs, feats, np.empty((p, 2)), np.empty(p)


def _run_objective(cams, X, w, obs, feats, reproj_err, w_err):
    objective(cams, X, w, obs, feats, reproj_err, w_err)
    return reproj_err, w_err


def _output_objective(result):
    reproj_err, w_err = result
    return {"reproj_error": {"elements": reproj_err[0].tolist(), "repeated": len(reproj_err)},
            "w_err": {"element": float(w_err[0]), "repeated": len(w_err)}}


def _prepare_jacobian(input):
    cams, X, w, obs, feats = _replicate(input)
    p = obs.shape[0]
    nnz = 2 * N_BLOCK * p + p
    return (cams, X, w, obs, feats, np.empty(3 * p + 1, dtype=np.int64),
            np.empty(nnz, dtype=np.int64), np.empty(nnz))


def _run_jacobian(cams, X, w, obs, feats, rows, cols, vals):
    jacobian(cams, X, w, obs, feats, rows, cols, vals)
    return rows, cols, vals


def _output_jacobian(result):
    """The first 2 * 15 entries of each array and its last, as GradBench's ba eval reads
    them."""
    head = 2 * N_BLOCK
    return {name: a[:head].tolist() + [a[-1].item()]
            for name, a in zip(("rows", "cols", "vals"), result)}


FUNCTIONS = {
    "objective": Function(_prepare_objective, _run_objective, _output_objective, spread=True),
    "jacobian": Function(_prepare_jacobian, _run_jacobian, _output_jacobian, spread=True),
}
