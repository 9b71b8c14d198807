"""GradBench's ``ht`` eval: hand tracking (ADBench's HT), its residuals and their Jacobian.

``objective`` poses a skinned hand model by ``theta`` (26 numbers: global rotation as an
angle-axis vector, global translation, then the fingers' Euler angles): each bone's relative
transform is its base transform times the rotation of its pose angles, the absolute
transforms follow the bones' parents, each vertex moves by the weighted sum of its bones'
transforms of its base position, and the whole is rotated and translated. The residuals are
each data point minus its corresponding vertex ("simple") or minus the point with barycentric
coordinates ``us`` in its corresponding triangle ("complicated"), 3 per point.

``jacobian`` is the dense 3N x 26 Jacobian with respect to ``theta``; in the complicated
variant two columns come first: the derivatives with respect to every point's own first and
its own second barycentric coordinate. pyzyme computes it in batch forward mode
(``BatchDuplicated``) of the residuals written in place (``residuals_*``, whose output
array's shadows are the Jacobian's rows): calls of ``LANES`` lanes, a lane per column, as
GradBench's Enzyme tool does one column per call (every residual depends on all of theta,
so reverse mode would need 3N sweeps); the two barycentric columns are one lane each because
each residual depends only on its own point's coordinates.

Examples
--------
The residuals of the rest pose of a one-bone model with one vertex are the data point minus
the vertex:

>>> inp = {"theta": [0.0] * 26, "us": [], "data": {"correspondences": [0],
...        "points": [[1.0, 2.0, 3.0]], "model": {"bone_count": 1, "bone_names": ["b"],
...        "parents": [-1], "base_relatives": [np.eye(4).tolist()],
...        "inverse_base_absolutes": [np.eye(4).tolist()],
...        "base_positions": [[0.5, 0.5, 0.5, 1.0]], "weights": [[1.0]],
...        "triangles": [[0, 0, 0]], "is_mirrored": False}}}
>>> FUNCTIONS["objective"].evaluate(inp)
[0.5, 1.5, 2.5]
"""

import math

import numba
import numpy as np

import pyzyme
from pyzyme import BatchDuplicated, Forward
from pyzyme.gradbench.protocol import Function

__all__ = ["FUNCTIONS", "objective_simple", "objective_complicated", "residuals_simple",
           "residuals_complicated", "prepare"]

#: the most Jacobian columns one forward call carries: wider batches lose more to the cache
#: (a shadow of every vertex per lane) than they save (measured on hand1, hand7 and hand12
#: with the residuals written in place: 7 lanes 35, 36 and 27x the primal, 14 lanes 41, 39
#: and 28x)
LANES = 7


@numba.njit
def mat_mult(A, B):
    """``A @ B`` for the small matrices of the model (ADBench's ``mat_mult``)."""
    out = np.empty((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for k in range(B.shape[1]):
            s = A[i, 0] * B[0, k]
            for j in range(1, A.shape[1]):
                s += A[i, j] * B[j, k]
            out[i, k] = s
    return out


@numba.njit
def angle_axis_to_rotation_matrix(a0, a1, a2):
    """The rotation by the angle-axis vector ``(a0, a1, a2)``; the identity below 1e-4."""
    R = np.eye(3)
    norm = math.sqrt(a0 * a0 + a1 * a1 + a2 * a2)
    if norm < 0.0001:
        return R
    x = a0 / norm
    y = a1 / norm
    z = a2 / norm
    s = math.sin(norm)
    c = math.cos(norm)
    R[0, 0] = x * x + (1 - x * x) * c
    R[0, 1] = x * y * (1 - c) - z * s
    R[0, 2] = x * z * (1 - c) + y * s
    R[1, 0] = x * y * (1 - c) + z * s
    R[1, 1] = y * y + (1 - y * y) * c
    R[1, 2] = y * z * (1 - c) - x * s
    R[2, 0] = x * z * (1 - c) - y * s
    R[2, 1] = z * y * (1 - c) + x * s
    R[2, 2] = z * z + (1 - z * z) * c
    return R


@numba.njit
def euler_angles_to_rotation_matrix(tx, tz, ty):
    """Rz Ry Rx for angles given in the order x, z, y (as the model stores them)."""
    Rx = np.eye(3)
    Rx[1, 1] = math.cos(tx)
    Rx[2, 1] = math.sin(tx)
    Rx[1, 2] = -Rx[2, 1]
    Rx[2, 2] = Rx[1, 1]
    Ry = np.eye(3)
    Ry[0, 0] = math.cos(ty)
    Ry[0, 2] = math.sin(ty)
    Ry[2, 0] = -Ry[0, 2]
    Ry[2, 2] = Ry[0, 0]
    Rz = np.eye(3)
    Rz[0, 0] = math.cos(tz)
    Rz[1, 0] = math.sin(tz)
    Rz[0, 1] = -Rz[1, 0]
    Rz[1, 1] = Rz[0, 0]
    return mat_mult(mat_mult(Rz, Ry), Rx)


@numba.njit
def to_pose_params(theta, n_bones):
    """Row k: the 3 pose parameters of column k of ADBench's 3 x (bones + 3) matrix: global
    rotation, scale (1), global translation, then each bone's angles (5 fingers of 4 bones
    after the wrist, of which the first 3 are posed, the first of them in 2 angles)."""
    # ADBench's layout writes 25 rows (the wrist's, then 5 fingers of 4 bones) whatever the
    # model: a model of fewer bones (a test's) must not have them written past its end
    pose = np.zeros((max(n_bones + 3, 25), 3))
    for i in range(3):
        pose[0, i] = theta[i]
        pose[1, i] = 1.0
        pose[2, i] = theta[3 + i]
    i_theta = 6
    i_pose = 5
    for i_finger in range(5):
        for i in range(2, 5):
            pose[i_pose, 0] = theta[i_theta]
            i_theta += 1
            if i == 2:
                pose[i_pose, 1] = theta[i_theta]
                i_theta += 1
            i_pose += 1
        i_pose += 1
    return pose


@numba.njit
def skinned_vertex_positions(pose, parents, base_relatives, inverse_base_absolutes,
                             base_positions, weights, is_mirrored):
    """Every vertex's position (V x 3) in pose ``pose``, the global transform applied."""
    n_bones = parents.shape[0]
    n_verts = base_positions.shape[0]
    absolutes = np.empty((n_bones, 4, 4))
    for i in range(n_bones):
        tr = np.eye(4)
        tr[:3, :3] = euler_angles_to_rotation_matrix(pose[i + 3, 0], pose[i + 3, 1],
                                                     pose[i + 3, 2])
        relative = mat_mult(base_relatives[i], tr)
        if parents[i] == -1:
            absolutes[i] = relative
        else:
            absolutes[i] = mat_mult(absolutes[parents[i]], relative)
    positions = np.zeros((n_verts, 3))
    for i_bone in range(n_bones):
        transform = mat_mult(absolutes[i_bone], inverse_base_absolutes[i_bone])
        for i_vert in range(n_verts):
            weight = weights[i_vert, i_bone]
            for i in range(3):
                curr = transform[i, 0] * base_positions[i_vert, 0]
                for j in range(1, 4):
                    curr += transform[i, j] * base_positions[i_vert, j]
                positions[i_vert, i] += curr * weight
    if is_mirrored:
        for i_vert in range(n_verts):
            positions[i_vert, 0] *= -1.0
    R = angle_axis_to_rotation_matrix(pose[0, 0], pose[0, 1], pose[0, 2])
    for i in range(3):
        for j in range(3):
            R[j, i] *= pose[1, i]
    out = np.empty((n_verts, 3))
    for i_vert in range(n_verts):
        for i in range(3):
            s = R[i, 0] * positions[i_vert, 0]
            for j in range(1, 3):
                s += R[i, j] * positions[i_vert, j]
            out[i_vert, i] = s + pose[2, i]
    return out


@numba.njit
def residuals_simple(theta, parents, base_relatives, inverse_base_absolutes, base_positions,
                     weights, is_mirrored, correspondences, points, err):
    """Each point minus its corresponding vertex: 3N residuals, written into ``err``."""
    pose = to_pose_params(theta, parents.shape[0])
    vertices = skinned_vertex_positions(pose, parents, base_relatives, inverse_base_absolutes,
                                        base_positions, weights, is_mirrored)
    for i in range(points.shape[0]):
        for j in range(3):
            err[3 * i + j] = points[i, j] - vertices[correspondences[i], j]


@numba.njit
def residuals_complicated(theta, us, parents, base_relatives, inverse_base_absolutes,
                          base_positions, weights, is_mirrored, triangles, correspondences,
                          points, err):
    """Each point minus the point at barycentric coordinates ``us[i]`` (and 1 - their sum)
    in its corresponding triangle: 3N residuals, written into ``err``."""
    pose = to_pose_params(theta, parents.shape[0])
    vertices = skinned_vertex_positions(pose, parents, base_relatives, inverse_base_absolutes,
                                        base_positions, weights, is_mirrored)
    for i in range(points.shape[0]):
        v0, v1, v2 = triangles[correspondences[i], 0], triangles[correspondences[i], 1], \
            triangles[correspondences[i], 2]
        u0, u1 = us[i, 0], us[i, 1]
        for j in range(3):
            hand_point = (u0 * vertices[v0, j] + u1 * vertices[v1, j]
                          + (1.0 - u0 - u1) * vertices[v2, j])
            err[3 * i + j] = points[i, j] - hand_point


@numba.njit
def objective_simple(theta, parents, base_relatives, inverse_base_absolutes, base_positions,
                     weights, is_mirrored, correspondences, points):
    """The simple variant's residuals, a new array."""
    err = np.empty(3 * points.shape[0])
    residuals_simple(theta, parents, base_relatives, inverse_base_absolutes, base_positions,
                     weights, is_mirrored, correspondences, points, err)
    return err


@numba.njit
def objective_complicated(theta, us, parents, base_relatives, inverse_base_absolutes,
                          base_positions, weights, is_mirrored, triangles, correspondences,
                          points):
    """The complicated variant's residuals, a new array."""
    err = np.empty(3 * points.shape[0])
    residuals_complicated(theta, us, parents, base_relatives, inverse_base_absolutes,
                          base_positions, weights, is_mirrored, triangles, correspondences,
                          points, err)
    return err


def prepare(input):
    """The model and data as arrays, and which variant: a tuple of the objective's
    arguments."""
    data, model = input["data"], input["data"]["model"]
    theta = np.asarray(input["theta"], dtype=np.float64)
    model_args = (np.asarray(model["parents"], dtype=np.int64),
                  np.ascontiguousarray(model["base_relatives"], dtype=np.float64),
                  np.ascontiguousarray(model["inverse_base_absolutes"], dtype=np.float64),
                  np.ascontiguousarray(model["base_positions"], dtype=np.float64),
                  np.ascontiguousarray(model["weights"], dtype=np.float64),
                  bool(model["is_mirrored"]))
    correspondences = np.asarray(data["correspondences"], dtype=np.int64)
    points = np.ascontiguousarray(data["points"], dtype=np.float64).reshape(-1, 3)
    if len(input["us"]) == 0:
        return (theta, *model_args, correspondences, points)
    us = np.ascontiguousarray(input["us"], dtype=np.float64).reshape(-1, 2)
    triangles = np.ascontiguousarray(model["triangles"], dtype=np.int64).reshape(-1, 3)
    return (theta, us, *model_args, triangles, correspondences, points)


def _run_objective(*args):
    if len(args) == 9:
        return objective_simple(*args)
    return objective_complicated(*args)


def _prepare_jacobian(input):
    """The objective's arguments, the Jacobian by columns (columns x 3N, as ADBench stores
    it), the residuals' buffer, and the calls' seeds: chunks of at most ``LANES`` columns
    of equal width, a one-hot tangent of theta per column and, for the complicated variant,
    two more columns first, seeding every point's first (second) barycentric coordinate;
    each chunk with the rows of ``J`` its tangents are written into."""
    args = prepare(input)
    theta = args[0]
    seeds = [(column, None) for column in np.eye(theta.size)]
    if len(args) != 9:
        us = args[1]
        zero_theta, zero_us = np.zeros_like(theta), np.zeros_like(us)
        u0, u1 = np.zeros_like(us), np.zeros_like(us)
        u0[:, 0] = 1.0
        u1[:, 1] = 1.0
        seeds = [(zero_theta, u0), (zero_theta, u1)] + [(t, zero_us) for t, _ in seeds]
    columns = len(seeds)
    calls = -(-columns // LANES)
    width = -(-columns // calls)
    # lanes of zero seeds make the last call as wide as the others: one derivative compiled
    seeds += [tuple(None if x is None else np.zeros_like(x) for x in seeds[-1])] * \
        (calls * width - columns)
    err = np.empty(3 * args[-1].shape[0])
    J = np.empty((len(seeds), err.size))
    chunks = [(*zip(*seeds[k:k + width]), tuple(J[k:k + width]))
              for k in range(0, len(seeds), width)]
    return args, J[:columns], err, chunks


def _run_jacobian(args, J, err, chunks):
    """The Jacobian by columns: batch forward calls of the residuals, a lane per column, each
    lane's tangent of the residuals written into its row of ``J``."""
    for theta_seeds, us_seeds, rows in chunks:
        theta = BatchDuplicated(args[0], theta_seeds)
        out = BatchDuplicated(err, rows)
        if len(args) == 9:
            pyzyme.autodiff(Forward, residuals_simple, theta, *args[1:], out)
        else:
            us = BatchDuplicated(args[1], us_seeds)
            pyzyme.autodiff(Forward, residuals_complicated, theta, us, *args[2:], out)
    return J


FUNCTIONS = {
    "objective": Function(prepare, _run_objective, lambda err: err.tolist(), spread=True),
    "jacobian": Function(_prepare_jacobian, _run_jacobian, lambda J: J.T.tolist(), spread=True),
}
