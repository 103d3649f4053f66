"""SE(2) helpers, field-of-view test, pose errors and the chordal pose loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pe_toolkit.domains.multirobot.geometry import (
    chordal_pose_loss,
    compose,
    from_frame,
    invert,
    pose_errors,
    relative_pose,
    to_frame,
    wrap_angle,
)
from pe_toolkit.domains.multirobot.simulator import in_fov


def test_point_inside_and_outside_a_fov_cone():
    # cone: range 10, opening 90 degrees (45 each side of the heading = +x)
    points = np.array([
        [5.0, 0.0],          # straight ahead: inside
        [5.0, 4.9],          # bearing 44.4 deg: inside
        [5.0, 5.1],          # bearing 45.6 deg: outside (angle)
        [-5.0, 0.0],         # behind: outside
        [10.0, 0.0],         # exactly at the range: inside (boundary counts)
        [10.01, 0.0],        # just past the range: outside
        [0.0, 0.0],          # the robot itself: outside
        [math.cos(math.pi / 4) * 9, -math.sin(math.pi / 4) * 9],  # on the angular boundary: inside
    ])
    assert in_fov(points, 10.0, math.pi / 2).tolist() == [True, True, False, False, True, False, False, True]


def test_in_fov_rejects_bad_shapes():
    with pytest.raises(ValueError, match="points_local must have shape"):
        in_fov(np.zeros((3, 3)), 10.0, 1.0)


def test_frame_transforms_round_trip():
    rng = np.random.default_rng(0)
    pose = np.array([3.0, -2.0, 2.5])
    points = rng.normal(size=(20, 2)) * 10
    np.testing.assert_allclose(to_frame(pose, from_frame(pose, points)), points, atol=1e-12)
    np.testing.assert_allclose(from_frame(pose, to_frame(pose, points)), points, atol=1e-12)
    # hand case: a robot at (1, 2) facing +y sees the world point (1, 5) straight ahead at distance 3
    np.testing.assert_allclose(to_frame([1.0, 2.0, math.pi / 2], [[1.0, 5.0]]), [[3.0, 0.0]], atol=1e-12)


def test_compose_invert_and_relative_pose():
    a, b = np.array([1.0, 2.0, 0.3]), np.array([-4.0, 7.0, -2.9])
    np.testing.assert_allclose(compose(a, invert(a)), [0.0, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(compose(a, relative_pose(a, b)), b, atol=1e-12)
    # T_ab maps b's observations into a's frame
    world = np.random.default_rng(1).normal(size=(5, 2)) * 5
    np.testing.assert_allclose(from_frame(relative_pose(a, b), to_frame(b, world)), to_frame(a, world), atol=1e-12)


def test_pose_errors_hand_case_and_wrap():
    te, re = pose_errors([3.0, 4.0, math.pi - 0.1], [0.0, 0.0, -math.pi + 0.1])
    assert te == pytest.approx(5.0) and re == pytest.approx(0.2)  # the short way round
    assert wrap_angle(3 * math.pi) == pytest.approx(-math.pi)
    with pytest.raises(ValueError, match="same shape"):
        pose_errors(np.zeros((2, 3)), np.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 3\)"):
        pose_errors(np.zeros(2), np.zeros(2))


def test_pose_loss_is_zero_at_the_truth():
    target = torch.tensor([[1.0, -2.0, 0.7], [0.0, 0.5, -3.0]], dtype=torch.float64)
    scale = torch.tensor([[2.0], [0.3]], dtype=torch.float64)  # (cos, sin) need not be unit length
    pred = torch.cat([target[:, :2], scale * torch.stack([target[:, 2].cos(), target[:, 2].sin()], -1)], -1)
    torch.testing.assert_close(chordal_pose_loss(pred, target), torch.zeros(2, dtype=torch.float64))


def test_pose_loss_equals_the_chordal_and_the_paper_quaternion_form():
    target = torch.tensor([[0.0, 0.0, 0.4]], dtype=torch.float64)
    theta_hat = 0.4 + 1.1
    pred = torch.tensor([[3.0, 4.0, math.cos(theta_hat), math.sin(theta_hat)]], dtype=torch.float64)
    chordal = 4 * (1 - math.cos(1.1))  # ||R_hat - R||_F^2 in 2-D
    assert chordal_pose_loss(pred, target).item() == pytest.approx(25.0 + chordal)
    assert chordal_pose_loss(pred, target, rotation_weight=0.0).item() == pytest.approx(25.0)
    for sign in (1.0, -1.0):  # the paper's 2 d^2 (4 - d^2) on unit quaternions, blind to q -> -q
        q_hat = sign * np.array([math.cos(theta_hat / 2), math.sin(theta_hat / 2)])
        q = np.array([math.cos(0.2), math.sin(0.2)])
        d2 = float(((q_hat - q) ** 2).sum())
        assert 2 * d2 * (4 - d2) == pytest.approx(chordal)


def test_pose_loss_gradcheck_and_bad_shapes():
    pred = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    target = torch.randn(3, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda p: chordal_pose_loss(p, target), (pred,))
    with pytest.raises(ValueError, match=r"pred must have shape \(B, 4\)"):
        chordal_pose_loss(torch.zeros(3, 3), target)
    with pytest.raises(ValueError, match=r"target must have shape \(3, 3\)"):
        chordal_pose_loss(torch.zeros(3, 4), torch.zeros(2, 3))
