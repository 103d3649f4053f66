"""Weighted 2-D Procrustes, RANSAC and the classical pipeline, including degenerate observations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pe_toolkit.domains.multirobot.baseline import (
    ClassicalBaseline,
    descriptor_matches,
    ransac_pose,
    weighted_procrustes_2d,
)
from pe_toolkit.domains.multirobot.geometry import from_frame, pose_errors
from pe_toolkit.domains.multirobot.simulator import SimConfig, simulate_pairs


def test_procrustes_recovers_a_known_pose_exactly_without_noise():
    rng = np.random.default_rng(0)
    pose = np.array([4.0, -7.5, 2.8])
    source = rng.normal(size=(12, 2)) * 5
    np.testing.assert_allclose(weighted_procrustes_2d(source, from_frame(pose, source)), pose, atol=1e-12)
    # two points are enough; arbitrary positive weights do not change an exact solution
    np.testing.assert_allclose(weighted_procrustes_2d(source[:2], from_frame(pose, source[:2])), pose, atol=1e-12)
    weights = rng.uniform(0.1, 3.0, size=12)
    np.testing.assert_allclose(weighted_procrustes_2d(source, from_frame(pose, source), weights), pose, atol=1e-12)


def test_zero_weight_removes_an_outlier_and_batches_are_independent():
    pose = np.array([1.0, 2.0, -0.4])
    source = np.array([[0.0, 0.0], [3.0, 1.0], [-2.0, 4.0], [5.0, 5.0]])
    target = from_frame(pose, source)
    target[3] += 10.0
    np.testing.assert_allclose(weighted_procrustes_2d(source, target, [1, 1, 1, 0]), pose, atol=1e-12)
    batch = weighted_procrustes_2d(np.stack([source[:3]] * 2), np.stack([target[:3], from_frame([0, 0, 1.0],
                                                                                               source[:3])]))
    np.testing.assert_allclose(batch, [pose, [0.0, 0.0, 1.0]], atol=1e-12)


def test_procrustes_bad_input():
    with pytest.raises(ValueError, match="at least 2 correspondences"):
        weighted_procrustes_2d(np.zeros((1, 2)), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="same shape"):
        weighted_procrustes_2d(np.zeros((3, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="weights must be >= 0"):
        weighted_procrustes_2d(np.zeros((3, 2)), np.zeros((3, 2)), [1.0, -1.0, 1.0])


def test_ransac_rejects_outliers():
    rng = np.random.default_rng(1)
    pose = np.array([-3.0, 6.0, 1.2])
    source = rng.uniform(-10, 10, size=(30, 2))
    target = from_frame(pose, source) + rng.normal(scale=0.05, size=(30, 2))
    target[:12] = rng.uniform(-20, 20, size=(12, 2))  # 40 % outliers
    estimate, inliers = ransac_pose(source, target, seed=0)
    te, re = pose_errors(estimate, pose)
    assert te < 0.1 and re < math.radians(0.5)
    assert not inliers[:12].any() and inliers[12:].all()
    assert ransac_pose(source[:1], target[:1])[0] is None


def test_descriptor_matches_mutual_and_ratio():
    a = np.array([[0.0, 0.0], [10.0, 0.0], [5.0, 5.0]])
    b = np.array([[10.1, 0.0], [0.1, 0.0], [5.0, 5.2], [5.0, 4.8]])
    index_a, index_b, _ = descriptor_matches(a, b, ratio=0.9)
    assert dict(zip(index_a.tolist(), index_b.tolist())) == {0: 1, 1: 0}  # (2 -> 2 or 3) fails the ratio test
    empty = descriptor_matches(np.zeros((0, 2)), b)
    assert all(len(x) == 0 for x in empty)


def test_pipeline_recovers_noise_free_pairs():
    config = SimConfig(position_noise=0.0, descriptor_noise=0.0, appearance_scale=1.0)
    pairs = [p for p in simulate_pairs(6, seed=0, config=config) if p.overlap]
    baseline = ClassicalBaseline()
    for pair in pairs:
        result = baseline(pair.a.positions, pair.a.descriptors, pair.b.positions, pair.b.descriptors)
        assert result.overlap
        np.testing.assert_allclose(result.pose[:2], pair.pose[:2], atol=1e-9)
        assert abs(result.pose[2] - pair.pose[2]) < 1e-9


@pytest.mark.parametrize("n_b", [0, 1])
def test_a_robot_that_sees_nothing_or_one_object_gives_no_overlap(n_b):
    rng = np.random.default_rng(2)
    result = ClassicalBaseline()(rng.normal(size=(5, 2)), rng.normal(size=(5, 4)), rng.normal(size=(n_b, 2)),
                                 rng.normal(size=(n_b, 4)))
    assert result.overlap is False and np.isnan(result.pose).all() and (result.match_a == -1).all()
    nothing = ClassicalBaseline()(np.zeros((0, 2)), np.zeros((0, 4)), np.zeros((0, 2)), np.zeros((0, 4)))
    assert nothing.overlap is False and nothing.match_a.shape == (0,)
