"""SE(2) geometry for the multi-robot domain: poses, frame changes, pose errors and the pose loss.

A pose is ``(x, y, theta)``: the robot's position in the parent frame and its heading (radians,
counter-clockwise from the parent's x axis). The matrix form is ``T = [[R(theta), t], [0, 1]]``; a
point ``p_local`` in the robot's frame is ``R p_local + t`` in the parent frame.

Relative pose convention (used by the simulator, the model's target and every metric): for robots
``a`` and ``b`` with world poses ``T_a`` and ``T_b``, ``T_ab = T_a^-1 T_b`` is robot ``b``'s pose in
``a``'s frame, so ``p_a = R_ab p_b + t_ab`` maps ``b``'s observations into ``a``'s frame.

Functions work on numpy arrays (simulator, classical baseline) and the loss on torch tensors (model).

Huang et al. 2025, "NOPE: Non-Overlap-Aware Egocentric Pose Estimation for Collaborative Perception in
Connected Autonomy", arXiv:2506.14180 (position error, geodesic rotation error, chordal pose loss).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "chordal_pose_loss",
    "compose",
    "invert",
    "pose_errors",
    "relative_pose",
    "rotation_matrix",
    "to_frame",
    "from_frame",
    "wrap_angle",
]


def _pose(name: str, pose) -> np.ndarray:
    pose = np.asarray(pose, dtype=np.float64)
    if pose.shape[-1:] != (3,):
        raise ValueError(f"{name} must have shape (..., 3) = (x, y, theta), got {pose.shape}")
    if not np.isfinite(pose).all():
        raise ValueError(f"{name} contains NaN or inf: {pose}")
    return pose


def _points(name: str, points) -> np.ndarray:
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"{name} must have shape (N, 2), got {points.shape}")
    return points


def wrap_angle(theta):
    """Angle(s) wrapped to ``[-pi, pi)``."""
    return (np.asarray(theta, dtype=np.float64) + math.pi) % (2 * math.pi) - math.pi


def rotation_matrix(theta: float) -> np.ndarray:
    """``R(theta) = [[cos, -sin], [sin, cos]]``, shape ``(2, 2)``."""
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s], [s, c]])


def from_frame(pose, points) -> np.ndarray:
    """Points ``(N, 2)`` given in the frame of ``pose`` -> the parent frame: ``R p + t``."""
    x, y, theta = _pose("pose", pose)
    return _points("points", points) @ rotation_matrix(theta).T + np.array([x, y])


def to_frame(pose, points) -> np.ndarray:
    """Points ``(N, 2)`` in the parent frame -> the frame of ``pose``: ``R^T (p - t)``."""
    x, y, theta = _pose("pose", pose)
    return (_points("points", points) - np.array([x, y])) @ rotation_matrix(theta)


def compose(first, second) -> np.ndarray:
    """``T_first T_second`` as ``(x, y, theta)``: ``second`` is given in ``first``'s frame."""
    x, y, theta = _pose("first", first)
    x2, y2, theta2 = _pose("second", second)
    tx, ty = rotation_matrix(theta) @ np.array([x2, y2])
    return np.array([x + tx, y + ty, float(wrap_angle(theta + theta2))])


def invert(pose) -> np.ndarray:
    """``T^-1`` as ``(x, y, theta)``."""
    x, y, theta = _pose("pose", pose)
    tx, ty = -rotation_matrix(theta).T @ np.array([x, y])
    return np.array([tx, ty, float(wrap_angle(-theta))])


def relative_pose(pose_a, pose_b) -> np.ndarray:
    """``T_ab = T_a^-1 T_b``: robot b's pose in robot a's frame (see the module docstring)."""
    return compose(invert(pose_a), pose_b)


def pose_errors(estimate, truth) -> tuple[np.ndarray, np.ndarray]:
    """Translation error (Euclidean, parent-frame units) and geodesic rotation error (radians, in ``[0, pi]``).

    Args:
        estimate, truth: ``(..., 3)`` poses.
    Returns:
        ``(translation_error, rotation_error)``, each of shape ``(...)``.
    """
    estimate, truth = _pose("estimate", estimate), _pose("truth", truth)
    if estimate.shape != truth.shape:
        raise ValueError(f"estimate and truth must have the same shape, got {estimate.shape} and {truth.shape}")
    translation = np.linalg.norm(estimate[..., :2] - truth[..., :2], axis=-1)
    rotation = np.abs(wrap_angle(estimate[..., 2] - truth[..., 2]))
    return translation, rotation


def chordal_pose_loss(pred: Tensor, target: Tensor, *, rotation_weight: float = 1.0) -> Tensor:
    """NOPE's pose loss in 2-D: ``||p_hat - p||^2 + w ||R_hat - R||_F^2`` per pair, shape ``(B,)``.

    The paper (Huang et al. 2025, arXiv:2506.14180, low-level loss) writes the rotation term on unit
    quaternions as ``2 d^2 (4 - d^2)`` with ``d = ||q_hat - q||``; for unit quaternions that equals
    ``8 (1 - (q_hat . q)^2) = 8 sin^2(dtheta / 2) = ||R_hat - R||_F^2``, the squared chordal distance of
    the rotation matrices (and it is blind to the sign of ``q``). In 2-D with ``u = (cos theta, sin theta)``
    the chordal distance is ``||R(u_hat) - R(u)||_F^2 = 2 ||u_hat - u||^2 = 4 (1 - cos dtheta)``, which is
    what this computes; it is zero exactly at the true rotation.

    Args:
        pred: ``(B, 4)`` = ``(x, y, c, s)``; ``(c, s)`` is normalised to a unit vector here (it must not be 0).
        target: ``(B, 3)`` = ``(x, y, theta)``.
        rotation_weight: ``w``, the weight of the rotation term.
    """
    if pred.dim() != 2 or pred.shape[-1] != 4:
        raise ValueError(f"chordal_pose_loss: pred must have shape (B, 4) = (x, y, cos, sin), got {tuple(pred.shape)}")
    if target.dim() != 2 or target.shape != (pred.shape[0], 3):
        raise ValueError(f"chordal_pose_loss: target must have shape ({pred.shape[0]}, 3), got {tuple(target.shape)}")
    u_hat = pred[:, 2:] / pred[:, 2:].norm(dim=-1, keepdim=True).clamp_min(1e-12)
    u = torch.stack([target[:, 2].cos(), target[:, 2].sin()], dim=-1)
    translation = (pred[:, :2] - target[:, :2]).pow(2).sum(-1)
    rotation = 2 * (u_hat - u).pow(2).sum(-1)
    return translation + rotation_weight * rotation
